"""Table version strings: ordering where they are comparable, and the automatic bump (total:
every version has one, SPEC §7)."""

from __future__ import annotations

import re
from collections.abc import Collection

from ..protocol.models import MAX_VERSION_LENGTH
from ..protocol.problems import ProblemType, ProtocolError

INITIAL_VERSION = "1.0.0"


def _numeric(version: str) -> tuple[str, ...] | None:
    """The dotted ASCII-digit parts of ``version`` without leading zeros; None if it has others.

    Parts stay strings: no ``int()`` of a part, whatever its length (``int`` refuses 4,300+ digits).
    """
    parts = version.split(".")
    if not all(part.isascii() and part.isdigit() for part in parts):
        return None
    return tuple(part.lstrip("0") or "0" for part in parts)


def _order(part: str) -> tuple[int, str]:
    """Numeric order of a part without leading zeros: a longer number is greater."""
    return (len(part), part)


def is_newer(candidate: str, current: str) -> bool | None:
    """True/False when both versions are dotted numbers; None when they cannot be ordered."""
    a, b = _numeric(candidate), _numeric(current)
    if a is None or b is None:
        return None
    width = max(len(a), len(b))
    padded_a = [_order(p) for p in a + ("0",) * (width - len(a))]
    padded_b = [_order(p) for p in b + ("0",) * (width - len(b))]
    return padded_a > padded_b


def next_version(current: str) -> str:
    """The version a content change gets when the operator names none: ``1.0.0`` → ``1.1.0``."""
    parts = _numeric(current)
    if parts is None:
        raise ProtocolError(
            ProblemType.VERSION_CONFLICT,
            f"version {current!r} is not dotted-numeric, so it cannot be bumped; pass a version",
        )
    if len(parts) == 1:
        bumped = _plus_one(parts[0])
    else:
        bumped = ".".join((parts[0], _plus_one(parts[1]), *(["0"] * (len(parts) - 2))))
    if len(bumped) > MAX_VERSION_LENGTH:
        raise ProtocolError(
            ProblemType.VERSION_CONFLICT,
            f"the bump of version {current[:40]!r}… would pass {MAX_VERSION_LENGTH} characters; "
            "pass a version",
        )
    return bumped


def fresh_version(current: str, served: Collection[str]) -> str:
    """The automatic bump of ``current``, past every version already ``served`` in the epoch.

    Total, so that a write no operator names a version for (a captured one) always gets one:
    a dotted number gets ``next_version`` (skipping served ones); any other version, or a dotted
    number whose bump would pass 128 characters, gets the counter form ``opaque_bump`` (SPEC §7).
    """
    try:
        candidate = next_version(current)
        for _ in range(len(served)):
            if candidate not in served:
                break
            candidate = next_version(candidate)
        if candidate not in served:
            return candidate
    except ProtocolError:  # not dotted-numeric, or the bump passes 128 characters
        pass
    return opaque_bump(current, served)


#: A counter suffix the counter form increments (``+1`` … ``+`` 20 digits), else it starts one.
_COUNTER = re.compile(r"\+([1-9][0-9]{0,19})\Z", re.ASCII)


def opaque_bump(current: str, served: Collection[str]) -> str:
    """``v`` → ``v+1`` → ``v+2`` …: the first ``base+k`` not ``served`` (nor ``current``), ``base``
    being ``current`` without its counter and cut so the result fits in 128 characters.

    Distinct ``k`` give distinct versions (the text after the last ``+`` is ``k``), so at most
    ``len(served) + 1`` candidates are tried, and the result depends on its inputs alone.
    """
    counter = _COUNTER.search(current)
    base, k = (current[: counter.start()], int(counter.group(1)) + 1) if counter else (current, 1)
    while True:
        suffix = f"+{k}"
        candidate = base[: MAX_VERSION_LENGTH - len(suffix)] + suffix
        if candidate != current and candidate not in served:
            return candidate
        k += 1


def check_unserved(candidate: str, served: Collection[str], table: str) -> None:
    """Refuse an operator version the table already had in this epoch (an ABA: a client holding
    it would take the new rows for the old ones)."""
    if candidate in served:
        raise ProtocolError(
            ProblemType.VERSION_CONFLICT,
            f"table {table!r}: version {candidate!r} was already served in this epoch",
        )


def check_version(candidate: str, current: str, served: Collection[str], table: str) -> None:
    """The one check a named version passes on every write path (in-memory, SQL-backed, captured):
    valid, moving forward from ``current``, and not ``served`` before in this epoch (SPEC §7)."""
    check_forward(candidate, current, table)
    check_unserved(candidate, served, table)


def acceptable(candidate: str, current: str, served: Collection[str]) -> bool:
    """Whether ``candidate`` passes ``check_version`` (a captured version that does not is
    dropped, and the server bumps the version itself: a committed write is never refused)."""
    try:
        check_version(candidate, current, served, "")
    except ProtocolError:
        return False
    return True


def _plus_one(digits: str) -> str:
    """``digits`` + 1 in decimal, computed on the string."""
    head = digits.rstrip("9")
    carried = "0" * (len(digits) - len(head))
    if not head:
        return "1" + carried
    return head[:-1] + str(int(head[-1]) + 1) + carried


def check_forward(candidate: str, current: str, table: str) -> None:
    """Refuse an operator version that equals or precedes the current one."""
    if (
        not candidate
        or candidate != candidate.strip()
        or len(candidate) > MAX_VERSION_LENGTH
        or not candidate.isprintable()
    ):
        shown = candidate if len(candidate) <= 40 else candidate[:40] + "…"
        raise ProtocolError(
            ProblemType.VERSION_CONFLICT, f"version {shown!r} is not a valid version"
        )
    if candidate == current or is_newer(candidate, current) is False:
        raise ProtocolError(
            ProblemType.VERSION_CONFLICT,
            f"table {table!r}: version {candidate!r} does not move forward from {current!r}",
        )
