"""A history identity a restore cannot keep: the high-water mark of a registry file, and the
commit identity of a PostgreSQL registry.

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

A PostgreSQL registry has no file to keep a mark beside, and any table of the database is
restored with it, so it keeps an ``Identity`` that no restore can reproduce: each commit writes,
in the same transaction as the position, the meta row ``identity`` holding the cluster (system
identifier and WAL timeline), that transaction's id, and the position ``(epoch, seq)``. On open:
- the row's ``xmin`` (the transaction that wrote it) is not the id it holds: the row was written
  by someone else — a ``pg_dump``/``pg_restore`` or ``psql`` restore, rows copied back;
- the position is not the one it holds: the position was restored or edited without it;
- the cluster differs: a physical restore (point-in-time recovery ends on a new timeline), a
  failover, or another server.
Any of these starts a new epoch (SPEC §1). A missing row says nothing (a registry written before
this check), as a missing mark file does; a needless new epoch (a failover that lost nothing, a
``pg_upgrade``) costs one resync, never a reused seq.
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


@dataclass(frozen=True, slots=True)
class Identity:
    """Which commit last wrote a PostgreSQL registry's position, on which cluster, and to what."""

    cluster: str
    xid: int
    epoch: str
    seq: int

    def encode(self) -> str:
        return json.dumps([self.cluster, self.xid, self.epoch, self.seq], separators=(",", ":"))

    @classmethod
    def decode(cls, text: str) -> Identity | None:
        try:
            cluster, xid, epoch, seq = json.loads(text)
        except (ValueError, TypeError):
            return None
        if not (isinstance(cluster, str) and isinstance(epoch, str)):
            return None
        if type(xid) is not int or type(seq) is not int:
            return None
        return cls(cluster, xid, epoch, seq)


XID_MODULUS = 2**32
"""A row's ``xmin`` is the 32-bit transaction id; ``pg_current_xact_id()`` is 64 bits wide."""


def identity_discontinuity(
    recorded: Identity | None, written_by: int, cluster: str, epoch: str, seq: int
) -> str | None:
    """Why a PostgreSQL registry at ``(epoch, seq)`` on ``cluster``, whose identity row was
    written by transaction ``written_by``, is not the history its last commit left (None: it is)."""
    if recorded is None:
        return None
    if recorded.cluster != cluster:
        return (
            f"the registry was last written on cluster/timeline {recorded.cluster}, now "
            f"{cluster}: the database was restored from a physical backup, failed over or moved"
        )
    if recorded.xid % XID_MODULUS != written_by:
        return (
            "the registry's rows were written by another transaction than its last commit: "
            "it was restored (pg_dump/pg_restore) or its rows were copied back"
        )
    if (recorded.epoch, recorded.seq) != (epoch, seq):
        return (
            f"the registry is at epoch {epoch} seq {seq} but its last commit wrote epoch "
            f"{recorded.epoch} seq {recorded.seq}: its rows were restored or replaced"
        )
    return None


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
