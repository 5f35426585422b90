"""Moved and renamed public names: each keeps working for one minor version, with a warning.

A name that moves is listed where it used to live (a package's ``moved_names``, a shim module, a
deprecated method) and warns with ``DeprecationWarning`` naming its new home and the version that
drops it; CHANGELOG.md's "Deprecated" section lists every one.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping

__all__ = ["REMOVED_IN", "moved_names", "warn_moved"]

#: The version that drops every name deprecated in this one (one minor version later).
REMOVED_IN = "0.3.0"


def warn_moved(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warn that ``old`` is deprecated and ``new`` is its home (``stacklevel`` 3: the caller of
    the function that calls this)."""
    warnings.warn(
        f"{old} is deprecated; use {new} instead ({old} is removed in {REMOVED_IN})",
        DeprecationWarning,
        stacklevel=stacklevel,
    )


def moved_names(
    package: str,
    homes: Mapping[str, str],
    fallback: Callable[[str], object] | None = None,
) -> Callable[[str], object]:
    """A module ``__getattr__`` (PEP 562) for names that left ``package``: each of ``homes``
    (``{old name: "new.module:name"}``, the name defaulting to the old one) warns, then is
    imported from its new home. Other names go to ``fallback`` (e.g. ``lazy_exports``)."""

    def __getattr__(name: str) -> object:
        home = homes.get(name)
        if home is None:
            if fallback is not None:
                return fallback(name)
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attribute = home.partition(":")
        attribute = attribute or name
        warn_moved(f"{package}.{name}", f"{module}.{attribute}")
        return getattr(importlib.import_module(module), attribute)

    return __getattr__
