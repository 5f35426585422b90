"""Optional extras: an edge module imported without its extra says which extra to install.

The core (protocol and client) installs alone; every edge (the FastAPI service, SQL and
PostgreSQL, the harness and its figures, vendor and local LLMs, MCP, signing, Stripe) is an extra.
Each edge package guards its extra once, where its third-party imports are (hishel's pattern; no
import waits behind a check, so no ``E402``)::

    try:
        import httpx
    except ModuleNotFoundError as exc:
        raise missing(exc, "httpx") from exc

:func:`require_extra` checks an extra without importing it (a command before it starts).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping

__all__ = ["MissingExtra", "lazy_exports", "missing", "require_extra", "require_extras"]


class MissingExtra(ImportError):
    """A module needs an optional dependency that is not installed."""

    def __init__(self, extra: str, module: str) -> None:
        super().__init__(
            f"{module} is not installed; this part of invalidation-contracts needs the "
            f"'{extra}' extra: pip install '.[{extra}]' (in the project's checkout)",
            name=module,
        )
        self.extra = extra
        self.module = module


class MissingExtras(MissingExtra):
    """Several extras a command needs are missing: one message names them all."""

    def __init__(self, missing: dict[str, str]) -> None:
        extras = ",".join(missing)
        modules = ", ".join(f"{module} ({extra})" for extra, module in missing.items())
        ImportError.__init__(
            self,
            f"{modules} not installed; this command needs the extras {extras}: "
            f"pip install '.[{extras}]' (in the project's checkout)",
            name=next(iter(missing.values())),
        )
        self.extra = extras
        self.module = next(iter(missing.values()))
        self.missing = dict(missing)


def missing(exc: ModuleNotFoundError, extra: str, **extras: str) -> MissingExtra:
    """What an edge's guard raises for ``exc``: a ``MissingExtra`` naming the absent module and
    the extra that ships it, ``extra`` unless ``extras`` names another for its top-level
    package (``missing(exc, "otel", fastapi="server")``)."""
    module = exc.name or extra
    return MissingExtra(extras.get(module.partition(".")[0], extra), module)


def _importable(module: str) -> bool:
    if module in sys.modules:  # imported already (None: import blocked)
        return sys.modules[module] is not None
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require_extra(extra: str, *modules: str) -> None:
    """Raise ``MissingExtra`` naming ``extra`` unless every one of ``modules`` is importable."""
    for module in modules:
        if not _importable(module):
            raise MissingExtra(extra, module)


def require_extras(needs: dict[str, tuple[str, ...]]) -> None:
    """Check every extra a command needs at once (``{extra: modules}``); one error names all."""
    missing: dict[str, str] = {}
    for extra, modules in needs.items():
        absent = next((m for m in modules if not _importable(m)), None)
        if absent is not None:
            missing[extra] = absent
    if len(missing) == 1:
        ((extra, module),) = missing.items()
        raise MissingExtra(extra, module)
    if missing:
        raise MissingExtras(missing)


def lazy_exports(package: str, homes: Mapping[str, str]) -> Callable[[str], object]:
    """A package's module ``__getattr__`` (PEP 562) for the public names whose submodule needs
    an extra: each of ``homes`` (``{name: ".submodule"}``) is imported on first use, so
    importing the package itself needs none."""

    def __getattr__(name: str) -> object:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(home, package), name)

    return __getattr__
