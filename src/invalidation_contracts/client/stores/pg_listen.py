"""A change token for the PostgreSQL store, kept by LISTEN/NOTIFY: lookups without a round trip.

Every write batch of a ``PostgresStore`` sends ``NOTIFY ic_memory`` in its own transaction, so
the notification is delivered when, and only if, the batch commits. A ``Listener`` keeps one
connection of its own LISTENing on that channel, in a daemon thread, and counts what arrives. Its
``token()`` is ``(connection epoch, notifications received)`` — it moves whenever any process
commits a write — and is what ``PostgresStore.version()`` returns, so a memory serves from its
replica (``client.shared.replica``) with no I/O while nothing was committed, as it does on SQLite.

Never a token it cannot stand behind: ``token()`` is None — and the memory falls back to reading
the origin's generation, one round trip, before it serves — while the connection is not
listening (not yet connected, dropped, or terminated by ``pg_terminate_backend``), in a process
forked from the one whose thread listens, and while the listening socket holds data the thread
has not read yet (a notification, or the error that says the connection is gone). A dropped
connection is reconnected with exponential backoff and jitter; each (re)connection starts a new
epoch, so every replica is read again once — the notifications sent while nobody listened are
lost, and the epoch is how a reader knows.

What a token cannot know: a commit whose notification is still on its way (PostgreSQL sends it
to listeners right after the commit, not before the writer hears back). That interval — the
notification's delivery, measured in the ``pg_replica`` study — is the one by which another
process may lag a commit; within a process, the store's own writes move its token at once.
"""

from __future__ import annotations

import logging
import os
import random
import select
import threading
from collections.abc import Hashable

import psycopg

#: The channel every write batch notifies and every listener listens on.
CHANNEL = "ic_memory"
#: Seconds the listening thread waits for a notification before it looks whether it should stop.
POLL_S = 0.25
#: Reconnection backoff, seconds: first wait, and the most it grows to.
BACKOFF_S = (0.05, 5.0)

logger = logging.getLogger("invalidation_contracts.client")


class Listener:
    """One LISTEN connection and the thread that counts its notifications."""

    def __init__(self, url: str, *, connect_timeout: int = 10) -> None:
        self._url = url
        self._connect_timeout = connect_timeout
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._epoch = 0
        self._count = 0
        self._socket: int | None = None
        """The listening connection's socket while it listens; None: no token."""
        self._pid = 0
        self._owner = os.getpid()
        """The process whose thread listens: a forked child has no such thread."""
        self.drops = 0
        """Connections lost since the listener started (for tests and operators)."""
        self.listening = threading.Event()
        """Set while the connection listens (tests wait on it)."""
        self._thread = threading.Thread(target=self._run, name="ic-memory-listen", daemon=True)
        self._thread.start()

    def token(self) -> Hashable | None:
        """``(epoch, notifications)`` while listening with nothing unread; else None."""
        if os.getpid() != self._owner:
            return None  # a copy inherited across fork(): nobody counts for it
        with self._lock:
            if self._socket is None:
                return None
            try:
                readable, _, _ = select.select([self._socket], [], [], 0)
            except (OSError, ValueError):
                return None
            if readable:
                return None  # a notification (or the connection's end) not read yet
            return (self._epoch, self._count)

    def backend_pid(self) -> int | None:
        """The listening connection's server process (``pg_terminate_backend`` in fault tests)."""
        with self._lock:
            return self._pid if self._socket is not None else None

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5 * POLL_S + 1)

    # ------------------------------------------------------------------ the thread

    def _run(self) -> None:
        delay = BACKOFF_S[0]
        while not self._stop.is_set():
            try:
                with psycopg.connect(
                    self._url, autocommit=True, connect_timeout=self._connect_timeout
                ) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    with self._lock:
                        self._epoch += 1
                        self._pid = conn.info.backend_pid
                        self._socket = conn.pgconn.socket
                    self.listening.set()
                    delay = BACKOFF_S[0]
                    self._listen(conn)
            except psycopg.Error as exc:
                self._dropped(f"{exc}".strip().splitlines()[0] if str(exc) else repr(exc))
                self._stop.wait(delay * random.uniform(0.5, 1.5))
                delay = min(delay * 2, BACKOFF_S[1])
            else:
                self._dropped(None)

    def _listen(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        while not self._stop.is_set():
            for _ in conn.notifies(timeout=POLL_S):
                with self._lock:
                    self._count += 1

    def _dropped(self, why: str | None) -> None:
        self.listening.clear()
        with self._lock:
            was = self._socket is not None
            self._socket = None
            self._epoch += 1
            if was and why is not None:
                self.drops += 1
        if was and why is not None:
            logger.warning(
                "the fix memory's LISTEN connection was lost (%s); every lookup reads the "
                "generation until it is back",
                why,
            )
