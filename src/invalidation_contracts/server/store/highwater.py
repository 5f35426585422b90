"""A history identity a restore cannot keep: the high-water mark of a registry file, and the
commit identity of a PostgreSQL registry.

A registry restored from a backup (or replaced by another file) still holds a valid history,
with its old epoch, at an older seq: serving it under that epoch would hand out seqs clients
have already seen with other changes (reliability audit 2, N8). So a SQLite registry keeps
``(epoch, seq)`` in ``<registry>-history`` beside the file (replaced atomically: a temporary
file, fsync, rename): the furthest *committed* position any worker may have served. On open, and
at every follower check, a file whose epoch differs from the mark's, or whose seq is behind it,
is not a clean continuation: its history was restored, replaced or lost, and the store starts a
new epoch (SPEC §1, §8.2).

The mark is never ahead of a commit, so a process killed at any point of a write leaves the file
at or beyond its mark, never a gap (``HighWater``):
- it is raised only to a position already committed, after that commit and before any worker
  serves it: the writer right after its COMMIT, a follower before it adopts what it read, an
  opener for what it found (whoever comes first; every mark write holds the writers' lock, so a
  slow raise never lowers a mark another one raised);
- an epoch change is the one move a raise after the fact cannot tell from a replaced file (the
  file's epoch is not the mark's). Before that COMMIT the mark names the coming position as
  ``pending`` (an intent), and a file at the old position or at the pending one is a continuation.
A kill before the COMMIT leaves the file where the mark is; after it, ahead of the mark or at
its pending epoch: the next check raises the mark and the epoch stands. A crashed write's
position was never served (serving waits for the raise), so nothing a client saw is reused.

A mark that is missing or unreadable says nothing (a new registry, or one moved with its file
alone): the file is taken as it is.

The mark beside the file is restored with it by any directory or volume backup (hostile audit
H4), so each host also keeps a ``HistoryLedger`` outside every registry's directory: per epoch, the
furthest committed seq served from it on this host (``$INVALIDATION_CONTRACTS_HISTORY_LEDGER``,
default ``$XDG_STATE_HOME/invalidation-contracts/history``; ``off`` keeps none). It is raised
with the mark, and a file behind the ledger's seq of its epoch was restored, whatever mark came
with it: a new epoch. The ledger is keyed by the epoch, not the path, so a copy restored under
another name or directory of the same host is caught too; a restore onto a host that never
served the registry has no ledger entry and is taken as it is (keep the ledger on storage the
registry's backups do not cover, e.g. the host's own disk when the registry lies on a volume).

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

import hashlib
import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from .crashpoints import crash_point
from .dialect import StorageError


@dataclass(frozen=True, slots=True)
class Mark:
    """The furthest committed position served; ``pending``: an epoch change about to commit."""

    epoch: str
    seq: int
    pending: Mark | None = None


def mark_path(registry: str) -> Path | None:
    """Where the mark of a registry file lies; None for a database that is not a file."""
    if not registry or registry == ":memory:" or registry.startswith("file:"):
        return None
    return Path(f"{registry}-history")


def read_mark(path: Path) -> Mark | None:
    """The mark at ``path``; None when missing or unreadable (it then says nothing)."""
    try:
        data = json.loads(path.read_text(encoding="ascii"))
        if not isinstance(data, dict):
            return None
        pending = _position(data["pending"]) if data.get("pending") is not None else None
        mark = _position(data)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if mark is None or (data.get("pending") is not None and pending is None):
        return None
    return Mark(mark.epoch, mark.seq, pending)


def _position(data: object) -> Mark | None:
    if not isinstance(data, dict):
        return None
    epoch, seq = data["epoch"], data["seq"]
    if not isinstance(epoch, str) or type(seq) is not int:
        return None
    return Mark(epoch, seq)


def write_mark(path: Path, mark: Mark) -> None:
    """Replace the mark atomically: a reader sees the old one or the new one, never a torn one.

    The temporary file has one name: every writer holds the writers' lock, and one left by a
    writer killed before its rename is simply overwritten by the next."""
    data: dict[str, object] = {"epoch": mark.epoch, "seq": mark.seq}
    if mark.pending is not None:
        data["pending"] = {"epoch": mark.pending.epoch, "seq": mark.pending.seq}
    temporary = path.with_name(f".{path.name}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, json.dumps(data).encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    crash_point("mark-renaming")
    os.replace(temporary, path)


HISTORY_LEDGER_ENV = "INVALIDATION_CONTRACTS_HISTORY_LEDGER"
"""The directory of this host's ledger (``off``: none)."""


def ledger_dir() -> Path | None:
    """This host's ledger directory (``HISTORY_LEDGER_ENV``, else under ``$XDG_STATE_HOME``)."""
    text = os.environ.get(HISTORY_LEDGER_ENV)
    if text is not None:
        return None if text in ("", "off") else Path(text)
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(state) / "invalidation-contracts" / "history"


class HistoryLedger:
    """The furthest committed seq this host served of each epoch, one small file per epoch in a
    directory no registry backup carries (a restore cannot bring it back to an older value)."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory

    def _path(self, epoch: str) -> Path:
        assert self.directory is not None
        return self.directory / hashlib.sha256(epoch.encode()).hexdigest()[:32]

    def served(self, epoch: str) -> int | None:
        """The furthest seq of ``epoch`` served here; None when none is known (or unreadable)."""
        if self.directory is None:
            return None
        try:
            data = json.loads(self._path(epoch).read_text(encoding="ascii"))
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("epoch") != epoch:
            return None
        seq = data.get("seq")
        return seq if type(seq) is int else None

    def record(self, epoch: str, seq: int) -> None:
        """Raise ``epoch``'s entry to ``seq`` (committed); a ledger that cannot be written is
        given up with a warning (the mark beside the file still guards)."""
        if self.directory is None or (self.served(epoch) or -1) >= seq:
            return
        path = self._path(epoch)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, json.dumps({"epoch": epoch, "seq": seq}).encode("ascii"))
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temporary, path)
        except OSError as exc:
            warnings.warn(
                f"cannot keep the history ledger in {self.directory} ({exc}); a registry "
                f"restored with its -history mark will not be noticed (set "
                f"{HISTORY_LEDGER_ENV})",
                RuntimeWarning,
                stacklevel=2,
            )
            self.directory = None

    def discontinuity(self, epoch: str, seq: int) -> str | None:
        """Why a file at ``(epoch, seq)`` is behind what this host served of ``epoch``."""
        served = self.served(epoch)
        if served is None or seq >= served:
            return None
        return (
            f"the registry is at seq {seq} of epoch {epoch} but this host already served seq "
            f"{served} of it (history ledger {self.directory}): it was restored from a backup, "
            "with or without its -history mark"
        )


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
    """Why a stored ``(epoch, seq)`` is not a continuation of ``mark`` (None: it is): the file
    is at or beyond the mark in its epoch, or at or beyond the epoch change it announced."""
    if mark is None:
        return None
    pending = mark.pending
    if pending is not None and pending.epoch == epoch and seq >= pending.seq:
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


def covers(mark: Mark | None, epoch: str, seq: int) -> bool:
    """Whether ``mark`` already vouches for a committed ``(epoch, seq)`` being served."""
    return mark is not None and mark.epoch == epoch and mark.seq >= seq


class HighWater:
    """The mark of one registry file, as the store's write transactions keep it.

    Every method that writes is called under the writers' lock (the SQLite write transaction),
    which orders the marks' read-then-replace; ``path`` None (a database that is not a file) makes
    every method a no-op that vouches for everything."""

    def __init__(self, path: Path | None, where: str, ledger: HistoryLedger | None = None) -> None:
        self.path = path
        self.where = where
        self.ledger = (
            ledger if ledger is not None else HistoryLedger(ledger_dir() if path else None)
        )

    def read(self) -> Mark | None:
        return None if self.path is None else read_mark(self.path)

    def discontinuity(self, epoch: str, seq: int) -> str | None:
        if self.path is None:
            return None
        reason = discontinuity(self.read(), epoch, seq)
        return reason if reason is not None else self.ledger.discontinuity(epoch, seq)

    def covers(self, epoch: str, seq: int) -> bool:
        if self.path is None:
            return True
        served = self.ledger.served(epoch) if self.ledger.directory is not None else seq
        return covers(self.read(), epoch, seq) and served is not None and served >= seq

    def cover(self, epoch: str, seq: int) -> None:
        """Raise the mark (and this host's ledger) to the committed head ``(epoch, seq)``, a
        continuation of it."""
        if self.path is None:
            return
        if not covers(self.read(), epoch, seq):
            self._write(Mark(epoch, seq))
        self.ledger.record(epoch, seq)

    def intend(self, start: Mark | None, target: Mark) -> None:
        """Before the COMMIT of an epoch change from ``start`` (the head the transaction found;
        None: a new registry) to ``target``: the mark keeps what it vouched for and accepts
        ``target`` too, so a kill on either side of the COMMIT leaves a continuation."""
        if self.path is None:
            return
        base = self.read() or start
        if base is not None:
            self._write(Mark(base.epoch, base.seq, Mark(target.epoch, target.seq)))

    def _write(self, mark: Mark) -> None:
        assert self.path is not None
        try:
            write_mark(self.path, mark)
        except OSError as exc:
            raise StorageError(f"{self.where}: cannot write {self.path} ({exc})") from exc
