"""RFC 8785 canonical JSON and the fingerprints built on it (rules_version, row etags)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import rfc8785

RULES_VERSION_LENGTH = 12
ROW_ETAG_LENGTH = 16


def canonical_json(value: object) -> bytes:
    """Serialize ``value`` as RFC 8785 (JCS) canonical JSON bytes.

    Mappings of any kind and tuples are accepted and serialized as objects and arrays.
    """
    return rfc8785.dumps(_plain(value))


def fingerprint(value: object, length: int = 64) -> str:
    """Lower-case hex SHA-256 of the canonical JSON of ``value``, cut to ``length`` characters."""
    return hashlib.sha256(canonical_json(value)).hexdigest()[:length]


def rules_version(declarations: Iterable[Sequence[str | None]]) -> str:
    """The L6 rules fingerprint: sha256[:12] over the sorted list of declarations.

    A declaration is ``(from, to, relation)`` or ``(from, to, relation, via)``: a rule without
    ``via`` enters as its triple (so such rule sets keep the fingerprint they always had), one
    with ``via`` as the four strings, since ``via`` changes which rows a rule links and so the
    fix a policy gives (reliability audit 2, N13). Duplicates count once.
    """
    ordered = sorted({tuple(str(part) for part in d if part is not None) for d in declarations})
    return fingerprint([list(t) for t in ordered], RULES_VERSION_LENGTH)


def row_etag(row: object) -> str:
    """Content hash of one table row: equal rows have equal etags whatever their key order."""
    return fingerprint(row, ROW_ETAG_LENGTH)


def _plain(value: object) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
