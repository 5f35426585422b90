"""The high-water mark: the furthest position a registry file has served, kept beside it.

A registry restored from a backup (or replaced by another file) still holds a valid history,
with its old epoch, at an older seq: serving it under that epoch would hand out seqs clients
have already seen with other changes (reliability audit 2, N8). So every commit also writes
``(epoch, seq)`` to ``<registry>-history``, atomically (a temporary file, then a rename), while
the writers' lock is held; on open, a file whose epoch differs from the mark's, or whose seq is
behind it, is not a clean continuation: its history was restored, replaced or lost (a power
loss that dropped commits the mark saw), and the store starts a new epoch (SPEC §1, §8.2).

A mark that is missing or unreadable says nothing (a new registry, or one moved with its file
alone): the file is taken as it is. A crash between the mark's write and the commit leaves the
mark one change ahead, which costs one needless new epoch, never a reused seq.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Mark:
    epoch: str
    seq: int


def mark_path(registry: str) -> Path | None:
    """Where the mark of a registry file lies; None for a database that is not a file."""
    if not registry or registry == ":memory:" or registry.startswith("file:"):
        return None
    return Path(f"{registry}-history")


def read_mark(path: Path) -> Mark | None:
    try:
        data = json.loads(path.read_text(encoding="ascii"))
        epoch, seq = data["epoch"], data["seq"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(epoch, str) or type(seq) is not int:
        return None
    return Mark(epoch, seq)


def write_mark(path: Path, mark: Mark) -> None:
    """Replace the mark atomically: a reader sees the old one or the new one, never a torn one."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, json.dumps({"epoch": mark.epoch, "seq": mark.seq}).encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)


def discontinuity(mark: Mark | None, epoch: str, seq: int) -> str | None:
    """Why a stored ``(epoch, seq)`` is not a continuation of ``mark`` (None: it is)."""
    if mark is None:
        return None
    if mark.epoch != epoch:
        return (
            f"the registry holds epoch {epoch} but last served epoch {mark.epoch}: "
            "it was restored or replaced"
        )
    if seq < mark.seq:
        return (
            f"the registry is at seq {seq} but already served seq {mark.seq}: "
            "it was restored from a backup or lost commits"
        )
    return None
