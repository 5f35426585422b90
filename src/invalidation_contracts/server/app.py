"""Deprecated home of the standalone FastAPI app: it is ``invalidation_contracts.server.http.app``.

Importing this module warns (``DeprecationWarning``) and gives the new module's names; it goes in
0.3.0.
"""

from __future__ import annotations

from .._deprecation import warn_moved
from .http.app import create_app, serve

warn_moved(
    "invalidation_contracts.server.app", "invalidation_contracts.server.http.app", stacklevel=3
)

__all__ = ["create_app", "serve"]
