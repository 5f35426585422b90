"""Table version strings: ordering where they are comparable, and the automatic bump."""

from __future__ import annotations

from ..protocol.problems import ProblemType, ProtocolError

INITIAL_VERSION = "1.0.0"


def _numeric(version: str) -> tuple[int, ...] | None:
    parts = version.split(".")
    if not all(part.isdigit() for part in parts):
        return None
    return tuple(int(part) for part in parts)


def is_newer(candidate: str, current: str) -> bool | None:
    """True/False when both versions are dotted numbers; None when they cannot be ordered."""
    a, b = _numeric(candidate), _numeric(current)
    if a is None or b is None:
        return None
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)) > b + (0,) * (width - len(b))


def next_version(current: str) -> str:
    """The version a content change gets when the operator names none: ``1.0.0`` → ``1.1.0``."""
    parts = _numeric(current)
    if parts is None:
        raise ProtocolError(
            ProblemType.VERSION_CONFLICT,
            f"version {current!r} is not dotted-numeric, so it cannot be bumped; pass a version",
        )
    if len(parts) == 1:
        return str(parts[0] + 1)
    return ".".join(str(p) for p in (parts[0], parts[1] + 1, *([0] * (len(parts) - 2))))


def check_forward(candidate: str, current: str, table: str) -> None:
    """Refuse an operator version that equals or precedes the current one."""
    if not candidate or candidate != candidate.strip():
        raise ProtocolError(
            ProblemType.VERSION_CONFLICT, f"version {candidate!r} is not a valid version"
        )
    if candidate == current or is_newer(candidate, current) is False:
        raise ProtocolError(
            ProblemType.VERSION_CONFLICT,
            f"table {table!r}: version {candidate!r} does not move forward from {current!r}",
        )
