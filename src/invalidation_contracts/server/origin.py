"""Where a registry change came from, for whoever listens to the registry (the telemetry).

The writer that moves the registry names its origin for the duration of the write
(``change_origin``); a state listener reads it (``current_origin``) in the same thread. Origins:
``captured`` (a write to the provider's database, consumed from the change capture), ``admin``
(an admin reload or patch), ``adopted`` (a change another worker committed, adopted here).
``reconciled`` (a difference between a table and the registry the capture did not record, found
by comparing them). A change that starts a new epoch is also *reconciled*; a listener tells it by
the epoch moving.
Unnamed (an application calling ``Registry.reload`` itself) reads as None.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_ORIGIN: ContextVar[str | None] = ContextVar("invalidation_contracts_change_origin", default=None)


@contextmanager
def change_origin(origin: str) -> Iterator[None]:
    """Name the origin of the registry changes made inside the block (the innermost wins)."""
    token = _ORIGIN.set(origin)
    try:
        yield
    finally:
        _ORIGIN.reset(token)


def current_origin() -> str | None:
    """The origin named by the innermost ``change_origin`` block of this context (None: none)."""
    return _ORIGIN.get()
