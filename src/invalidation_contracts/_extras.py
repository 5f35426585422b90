"""Optional extras: an edge module imported without its extra says which extra to install.

The core (protocol and client) installs alone; every edge (the FastAPI service, SQL and
PostgreSQL, the harness and its figures, vendor and local LLMs, MCP, signing, Stripe) is an extra.
Edge modules call :func:`require_extra` before importing their third-party dependencies.
"""

from __future__ import annotations

import importlib.util
import sys

__all__ = ["MissingExtra", "require_extra"]


class MissingExtra(ImportError):
    """A module needs an optional dependency that is not installed."""

    def __init__(self, extra: str, module: str) -> None:
        super().__init__(
            f"{module} is not installed; this part of invalidation-contracts needs the "
            f"'{extra}' extra: pip install 'invalidation-contracts[{extra}]'",
            name=module,
        )
        self.extra = extra
        self.module = module


def require_extra(extra: str, *modules: str) -> None:
    """Raise ``MissingExtra`` naming ``extra`` unless every one of ``modules`` is importable."""
    for module in modules:
        if module in sys.modules:  # imported already (None: import blocked)
            found = sys.modules[module] is not None
        else:
            try:
                found = importlib.util.find_spec(module) is not None
            except (ImportError, ValueError):
                found = False
        if not found:
            raise MissingExtra(extra, module)
