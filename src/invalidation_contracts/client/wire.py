"""Reading the wire: the contract fields and suggestions of a response body, within the bounds.

Pure functions over a parsed JSON body. Malformed contract fields are ``Ignored``, a malformed
suggestion is ``NotStored``, and a body over a bound (``Limits``) is ``Refused`` before anything in
it is parsed further, so a hostile body costs no more than its size.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from ..protocol.models import ContractFields, Suggestion
from ..protocol.position import valid_epoch, valid_seq
from ..protocol.wirecost import ENVELOPE_FIELDS
from .events import Ignored, NotStored, Refused
from .limits import Limits, WideKeys
from .shared.ledger import Ledger


def contract_of(body: Mapping[str, Any]) -> ContractFields | None:
    """The response-level contract fields of a body (None: none); raises ``ValidationError``."""
    fields = {name: body[name] for name in ENVELOPE_FIELDS if body.get(name) is not None}
    return ContractFields.model_validate(fields) if fields else None


def carries_contract(body: Mapping[str, Any]) -> bool:
    """Whether a body has any response-level contract field (well-formed or not)."""
    return any(body.get(name) is not None for name in ENVELOPE_FIELDS)


def position_error(body: Mapping[str, Any], epoch: str, seq: str) -> str | None:
    """Why a body's position fields break ``protocol.position`` (None: absent or valid)."""
    if body.get(epoch) is not None and not valid_epoch(body[epoch]):
        return f"{epoch}: not 1-128 visible ASCII characters"
    if body.get(seq) is not None and not valid_seq(body[seq]):
        return f"{seq}: not an integer from 0 to 2^53-1"
    return None


def read_contract(tx: Ledger, body: Mapping[str, Any]) -> ContractFields | None:
    """``contract_of``, with malformed fields reported as ``Ignored`` (and nothing read).

    The position (``contract_epoch``, ``contract_seq``) is checked first, by the rules the server
    checks the headers that echo it with: a response cannot plant a position that would make
    every later request fail.
    """
    error = position_error(body, "contract_epoch", "contract_seq")
    if error is not None:
        tx.emit(Ignored(origin=tx.origin, episode=tx.episode, detail=f"malformed {error}"))
        return None
    try:
        return contract_of(body)
    except ValidationError as exc:
        tx.emit(
            Ignored(
                origin=tx.origin,
                episode=tx.episode,
                detail=f"malformed contract fields: {first_error(exc)}",
            )
        )
        return None


def read_suggestions(tx: Ledger, body: Mapping[str, Any], limits: Limits) -> list[Suggestion]:
    """The well-formed suggestions of a failure body, each within ``max_suggestion_bytes``.

    A body with more than ``max_suggestions`` has none read: which of them to keep would be the
    server's choice, not the client's.
    """
    feedback = body.get("recovery_feedback")
    raw = feedback.get("suggestions") if isinstance(feedback, Mapping) else None
    if not isinstance(raw, list):
        return []
    if len(raw) > limits.max_suggestions:
        refuse(
            tx,
            "max_suggestions",
            f"the response carries {len(raw)} suggestions; none is stored",
            cap=limits.max_suggestions,
            actual=len(raw),
        )
        return []
    out = []
    for item in raw:
        kind = item.get("type") if isinstance(item, Mapping) else None
        kind = kind if isinstance(kind, str) else None
        size = json_size(item, limits.max_suggestion_bytes)
        if size > limits.max_suggestion_bytes:
            refuse(
                tx,
                "max_suggestion_bytes",
                f"a suggestion of {size} JSON bytes",
                suggestion_type=kind,
                cap=limits.max_suggestion_bytes,
                actual=size,
            )
            continue
        try:
            item, unread = _unread(item)
            suggestion = Suggestion.model_validate(item)
            out.append(suggestion.with_unread_keys(unread) if unread else suggestion)
        except ValidationError as exc:
            tx.emit(
                NotStored(
                    origin=tx.origin,
                    episode=tx.episode,
                    suggestion_type=kind,
                    reason=f"malformed suggestion: {first_error(exc)}",
                )
            )
    return out


def _unread(item: object) -> tuple[object, dict[str, int]]:
    """``item`` without the key lists its parse dropped (``WideKeys``, in ``tables[].keys`` and
    ``tables[].membership.keys``), and how many keys each table's lists named."""
    if not isinstance(item, Mapping) or not isinstance(tables := item.get("tables"), list):
        return item, {}
    unread: dict[str, int] = {}
    kept = []
    for dep in tables:
        if isinstance(dep, Mapping):
            membership = dep.get("membership")
            listed = membership.get("keys") if isinstance(membership, Mapping) else None
            for wide, member in ((dep.get("keys"), "keys"), (listed, "membership")):
                if isinstance(wide, WideKeys):
                    table = str(dep.get("table"))
                    unread[table] = unread.get(table, 0) + wide.count
                    dep = {name: value for name, value in dep.items() if name != member}
        kept.append(dep)
    return ({**item, "tables": kept}, unread) if unread else (item, {})


def feed_items(raw: Mapping[str, Any]) -> int:
    """Row changes, table transitions and rule changes in a raw changes-feed answer."""
    return sum(
        len(part) for name in ("rows", "tables", "rules") if isinstance(part := raw.get(name), list)
    )


def refuse(
    tx: Ledger,
    bound: str,
    detail: str,
    *,
    suggestion_type: str | None = None,
    cap: int | None = None,
    actual: int | None = None,
) -> None:
    """Report input refused by a client-side bound."""
    tx.emit(
        Refused(
            origin=tx.origin,
            episode=tx.episode,
            bound=bound,
            detail=detail,
            suggestion_type=suggestion_type,
            cap=cap,
            actual=actual,
        )
    )


def json_size(value: object, cap: int | None = None) -> int:
    """Bytes of ``value`` as compact JSON (ASCII-escaped). Past ``cap`` a string is not encoded:
    its length already says it is over."""
    if cap is not None and isinstance(value, str) and len(value) > cap:
        return len(value) + 2
    try:
        return len(json.dumps(value, separators=(",", ":"), allow_nan=False, default=_stand_in))
    except (TypeError, ValueError):
        return len(repr(value))


def _stand_in(value: object) -> str:
    """A string of as many ASCII-escaped JSON bytes as a dropped key list took (``WideKeys``)."""
    if not isinstance(value, WideKeys):
        raise TypeError(f"{type(value).__name__} is not JSON")
    return "x" * (value.ascii_bytes - 2)


def instance_of(body: Mapping[str, Any]) -> str | None:
    instance = body.get("instance")
    return instance if isinstance(instance, str) else None


def first_error(exc: ValidationError) -> str:
    """The first error of a validation failure, as ``location: message``."""
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error.get("loc", ())) or "body"
    return f"{where}: {error.get('msg', 'invalid')}"
