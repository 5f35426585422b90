"""Client-side bounds on everything a server controls (docs/threat-model.md, T15–T19).

A server decides how many suggestions a response carries, how large their values are, how many
fixes an origin accumulates and how long a changes feed is. Each has a cap here; input over a cap
is refused — reported as a ``Refused`` event and a log record — and never stored or injected. The
defaults are generous for an honest API (the reference domains stay far below every one) and
small enough that a hostile one cannot grow the agent's memory or RAM. Change them with
``FixMemory(..., limits=Limits(max_entries_per_origin=50_000))``.

``parse_json`` bounds nesting before parsing: a body nested deeper than ``max_json_depth`` is not
handed to ``json.loads`` (whose recursion would raise ``RecursionError``, N5). The scan is linear
in the body whatever it holds (issue 38, H1): a string runs to its closing quote or to the end of
the body, and no quantifier backtracks, so an unterminated string cannot make it quadratic.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, fields
from typing import Any

KIB = 1024
MIB = 1024 * KIB

# A string: its quote, runs of plain bytes between escapes (possessive, so nothing backtracks),
# then its closing quote or the end of the body (an unterminated string is skipped to the end, in
# one pass, instead of failing and being retried from every quote inside it).
_STRING = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+(?:"|\\?\Z)', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_OPENERS = frozenset(b"[{")


@dataclass(frozen=True, slots=True)
class Limits:
    """The caps; every one is a positive integer."""

    max_suggestions: int = 64
    """Suggestions in one response; a response over it has none of its suggestions stored."""
    max_parameter_bytes: int = 4 * KIB
    """JSON bytes of one parameter value (and of one patch value) of a suggestion."""
    max_suggestion_bytes: int = 64 * KIB
    """JSON bytes of one suggestion, dependency vector included."""
    max_keys_per_entry: int = 256
    """Row keys one suggestion's dependency vector names, all tables together (the entry it
    becomes holds them); past it the fix is kept at table granularity (a ``Coarsened`` event)."""
    max_keys_per_origin: int = 100_000
    """Row keys all live entries of one origin name together; a fix that would pass it is kept
    at table granularity (a ``Coarsened`` event)."""
    max_entries_per_origin: int = 10_000
    """Live entries of one origin; past it new fixes are refused (a replacement is allowed)."""
    max_body_bytes: int = 1 * MIB
    """Decoded bytes of a response body the memory parses for its contract; a larger one is not
    read (the transport stops decoding there)."""
    max_feed_bytes: int = 4 * MIB
    """Bytes of a ``/contract/changes`` or ``/contract/rules`` answer; the transport stops
    reading there, and the memory treats the feed as lost history (a resync)."""
    max_feed_items: int = 100_000
    """Row changes, table transitions and rule changes in one changes-feed answer."""
    max_decoding_ratio: int = 1_000
    """Decoded bytes per encoded byte of a compressed body (past its first 64 KiB); a body that
    decodes further is refused there, as one over its byte cap is (body and feed caps count
    decoded bytes)."""
    max_json_depth: int = 128
    """How deeply a body (a response, a feed, a listing) may nest arrays and objects; a deeper
    one is refused before it is parsed."""
    max_read_seconds: int = 10
    """Seconds the memory's own reading may take for one agent request, in all: the response
    body it reads for the contract and the feed fetches that response leads to (httpx
    transports; issue 38, H8). Past it the body is left to the agent unread (a ``Refused``
    event) and a fetch not done is abandoned as a network error is (a ``FetchFailed`` event;
    the need stays outstanding). A read in progress ends at its next chunk or read timeout."""
    max_tombstones_per_origin: int = 1_000
    """Tombstones kept per origin: each eviction past it drops the oldest (``retention``)."""
    tombstone_max_age_s: int = 30 * 24 * 3600
    """Seconds a tombstone is kept (30 days); older ones are dropped by the origin's next write
    (to within a day)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Limits.{f.name} must be a positive integer, not {value!r}")


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True, slots=True)
class Refusal:
    """A bound a body broke while it was read: the ``Limits`` field, and the size (or depth, or
    ratio) it reached."""

    bound: str
    actual: int


def json_depth(content: bytes) -> int:
    """How deeply a JSON text nests arrays and objects (strings skipped, an unterminated one to the
    end), without parsing it; linear in ``len(content)``. The text between two strings is scanned
    as it is reached, so the scan holds one such gap at a time, never a copy of the body
    (``re.sub`` held a piece per string: 14 MB for 64,000 short keys; issue 38, H2)."""
    depth = deepest = start = 0
    for string in _STRING.finditer(content):
        depth, deepest = _brackets(content[start : string.start()], depth, deepest)
        start = string.end()
    return _brackets(content[start:], depth, deepest)[1]


def _brackets(gap: bytes, depth: int, deepest: int) -> tuple[int, int]:
    """``depth`` and ``deepest`` after the brackets of ``gap`` (text outside strings)."""
    for byte in gap.translate(None, _NOT_BRACKETS):
        if byte in _OPENERS:
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return depth, deepest


def parse_json(
    content: bytes, max_depth: int, max_keys: int | None = None
) -> tuple[Any, Refusal | None]:
    """``json.loads(content)`` when it nests at most ``max_depth`` deep; (None, refusal) when it
    nests deeper; (None, None) when it is not JSON.

    ``max_keys`` (a response body's ``max_keys_per_entry``): a dependency item whose ``keys`` (or
    ``membership.keys``) list is longer is given a ``WideKeys`` in its place as it is parsed, so
    its strings are freed at once instead of living until the budget coarsens the fix (a body of
    64 × 1,000 keys held 4.3 MB of strings; issue 38, H2)."""
    opened = content.count(b"[") + content.count(b"{")
    if opened > max_depth:
        depth = json_depth(content)
        if depth > max_depth:
            return None, Refusal("max_json_depth", depth)
    try:
        if max_keys is None:
            return json.loads(content), None
        return json.loads(content, object_hook=functools.partial(_drop_wide, max_keys)), None
    except (ValueError, RecursionError):
        return None, None


class WideKeys:
    """A dependency item's key list longer than ``max_keys_per_entry``, dropped as it was parsed:
    the fix is kept at table granularity anyway. It keeps how many keys the list named and the
    JSON bytes it took, so the budget's event and every size check read what was sent. It is no
    JSON value: found anywhere but a dependency item (``read_suggestions`` takes it from there),
    it fails the suggestion's validation rather than standing in for a value."""

    __slots__ = ("count", "json_bytes", "ascii_bytes")

    def __init__(self, keys: list[Any]) -> None:
        self.count = len(keys)
        self.json_bytes = len(json.dumps(keys, ensure_ascii=False, separators=(",", ":")).encode())
        """As the wire sends it (UTF-8): what ``wire_cost`` counts."""
        self.ascii_bytes = len(json.dumps(keys, separators=(",", ":")))
        """ASCII-escaped: what ``json_size`` counts."""


def _drop_wide(max_keys: int, obj: dict[str, Any]) -> dict[str, Any]:
    """``json.loads``'s object hook: a dependency item's (``table`` and ``version``) key list
    over ``max_keys``, replaced by its ``WideKeys``."""
    if "table" in obj and "version" in obj:
        keys = obj.get("keys")
        if type(keys) is list and len(keys) > max_keys:
            obj["keys"] = WideKeys(keys)
        membership = obj.get("membership")
        listed = membership.get("keys") if type(membership) is dict else None
        if type(listed) is list and len(listed) > max_keys:
            membership["keys"] = WideKeys(listed)  # type: ignore[index]
    return obj
