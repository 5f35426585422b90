"""What one failure response teaches, held as data until the memory admits it.

A ``Lesson`` is what ``Admission`` learns from and what a ``Ledger`` holds back while a diff must
judge the old entries first; it lives apart from both so neither imports the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..protocol.models import ContractFields, Suggestion


@dataclass(frozen=True, slots=True)
class Lesson:
    """What one failure response teaches: its fixes, and the injected entries it contradicted.

    Held back (deferred) while the memory awaits a diff that must judge the old entries first.
    """

    suggestions: tuple[Suggestion, ...]
    contract: ContractFields | None
    derived_from: tuple[str, ...]
    response_id: str | None
    contradicted: tuple[str, ...] = ()
    operation: str = ""
    request: Mapping[str, Any] | None = None
    """The request that drew the failure, when the caller gave it."""
