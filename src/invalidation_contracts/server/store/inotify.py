"""A wake-up on commits to a SQLite file (Linux ``inotify``), so a worker sleeps instead of polling.

``FileWakeup`` is a ``capture.source.Wakeup`` whose ``fileno`` is an inotify descriptor watching
the database's directory; the follower ``select``s on it like on a PostgreSQL ``LISTEN``
connection. A commit by any process writes the file, its ``-wal`` or its ``-journal`` (or creates,
renames or deletes one of them), which queues an event; ``drain`` consumes the queue without
blocking and says whether an event concerned the database (an overflowed queue counts as one).
libc is reached through ``ctypes``: no dependency. Where inotify is missing (not Linux), its
limits are reached, or the database is in memory, ``file_wakeup`` returns None and the worker
polls as before. A capture's wake-up (``CaptureWakeup``) is also the worker's bid for its lead,
a ``flock`` on ``<database>-lead``. ``INVALIDATION_CONTRACTS_INOTIFY=0`` turns it off (a file
system whose writes inotify does not see, such as a network share written from another host).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import functools
import logging
import os
import struct
import sys
from collections.abc import Iterable
from pathlib import Path

logger = logging.getLogger(__name__)

ENV = "INVALIDATION_CONTRACTS_INOTIFY"
"""Set to ``0`` to poll SQLite files instead of watching them."""

IN_MODIFY = 0x00000002
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_Q_OVERFLOW = 0x00004000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000

WATCHED = IN_MODIFY | IN_MOVED_TO | IN_CREATE | IN_DELETE
"""What a commit, a journal's life or a replaced file does. Not ``IN_CLOSE_WRITE``: SQLite opens
its files read-write even to read, so every connection closed after a read would wake every
worker; a commit always writes (``IN_MODIFY``) before it closes anything."""

SUFFIXES = ("", "-wal", "-journal")
"""The files whose change is a commit (``-shm`` is a memory map of readers' locks: never)."""

_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of NUL-padded name
_BUFFER = 64 * 1024


class FileWakeup:
    """An inotify descriptor watching a SQLite database's directory for commits to it."""

    def __init__(self, fd: int, names: Iterable[str]) -> None:
        self._fd = fd
        self.names = frozenset(names)

    def fileno(self) -> int:
        return self._fd

    def drain(self) -> bool:
        """Read every queued event without blocking; whether one concerned the database."""
        changed = False
        while True:
            try:
                data = os.read(self._fd, _BUFFER)
            except BlockingIOError:
                return changed
            if not data:
                return changed
            changed = concerns(data, self.names) or changed

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


class CaptureWakeup(FileWakeup):
    """A SQLite capture's wake-up and the worker's bid for its lead (``capture.source.LeadWakeup``
    without ``changed``): the worker that holds ``flock`` on ``<database>-lead`` (released by the
    kernel when it dies) consumes the capture when a commit wakes it; the others ignore the
    capture's events — the leader's registry commit wakes them — so a commit does not send every
    worker to the registry's write lock at once. Where the lock file cannot be made, every
    worker leads (consumes on every event, as polling workers do)."""

    def __init__(self, fd: int, names: Iterable[str], lock: Path) -> None:
        super().__init__(fd, names)
        self.lock = lock
        self.leader = False
        self._held = -1

    def try_lead(self) -> bool:
        """Take the lead if nobody holds it; whether this worker leads."""
        if self.leader:
            return True
        try:
            fd = os.open(self.lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError:
            self.leader = True  # no lock to share: every worker consumes
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._held, self.leader = fd, True
        return True

    def drain(self) -> bool:
        """Consume the queued events; whether this worker, the leader, should read the capture."""
        return super().drain() and self.leader

    def close(self) -> None:
        held, self._held, self.leader = self._held, -1, False
        if held >= 0:
            os.close(held)
        super().close()


def concerns(data: bytes, names: frozenset[str]) -> bool:
    """Whether a buffer of inotify events holds one about ``names`` (or an overflow)."""
    offset = 0
    while offset + _EVENT.size <= len(data):
        _, mask, _, size = _EVENT.unpack_from(data, offset)
        offset += _EVENT.size
        name = data[offset : offset + size].split(b"\0", 1)[0]
        offset += size
        if mask & IN_Q_OVERFLOW or os.fsdecode(name) in names:
            return True
    return False


def capture_wakeup(path: str | Path | None) -> CaptureWakeup | None:
    """A ``CaptureWakeup`` for the SQLite capture at ``path``, or None where the worker polls."""
    watch = _watch(path)
    if watch is None:
        return None
    fd, target = watch
    return CaptureWakeup(fd, _names(target), target.with_name(target.name + "-lead"))


def file_wakeup(path: str | Path | None) -> FileWakeup | None:
    """A ``FileWakeup`` for the SQLite file at ``path``, or None where the worker must poll."""
    watch = _watch(path)
    return None if watch is None else FileWakeup(watch[0], _names(watch[1]))


def _names(target: Path) -> list[str]:
    return [target.name + suffix for suffix in SUFFIXES]


def _watch(path: str | Path | None) -> tuple[int, Path] | None:
    """An inotify descriptor on the directory of the SQLite file at ``path``, and the file."""
    if path is None or str(path) in ("", ":memory:") or str(path).startswith("file:"):
        return None
    if os.environ.get(ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    libc = _libc()
    if libc is None:
        return None
    target = Path(path).resolve()
    fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
    if fd < 0:
        _cannot(ctypes.get_errno(), target)
        return None
    if libc.inotify_add_watch(fd, os.fsencode(target.parent), WATCHED) < 0:
        _cannot(ctypes.get_errno(), target)
        os.close(fd)
        return None
    return fd, target


def _cannot(code: int, target: Path) -> None:
    logger.warning(
        "cannot watch %s for commits (%s); polling it instead", target, os.strerror(code or 0)
    )


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """libc with the inotify calls, or None (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        init, add = libc.inotify_init1, libc.inotify_add_watch
    except (OSError, AttributeError):
        return None
    init.argtypes, init.restype = [ctypes.c_int], ctypes.c_int
    add.argtypes, add.restype = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32], ctypes.c_int
    return libc
