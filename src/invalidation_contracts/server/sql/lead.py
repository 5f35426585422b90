"""The capture lead on PostgreSQL: one worker consumes a source's capture, and polls its head.

Writers do not ``NOTIFY`` (a notifying transaction holds PostgreSQL's one notification-queue lock
through its commit, so two writers of different tables would commit one after the other). The
worker holding the lead — a session advisory lock on a connection of its own — instead reads the
capture's head on that connection every poll interval (``changed``): one autocommit statement, so
one snapshot. The head is the count of records ever committed (``PostgresCapture.head_sql``), so
it moves exactly when a record commits, whatever order ids were taken in. A round it moved, the
follower consumes the capture; the registry commit that follows sends the store's ``NOTIFY``,
which wakes the other workers. So no provider writer ever notifies; only registry writers do.

A lead whose connection was dropped without a word (a black-holed link, a NAT or proxy that forgot
the flow, a host gone) must not stay held by a backend nobody talks to: PostgreSQL would keep the
advisory lock until its own keepalive gives up (two hours by default). The holder's session asks
the server to end it once idle ``LEAD_IDLE_TIMEOUT_S`` (a leader looks every poll interval), every
bid's to send keepalives and drop unacknowledged bytes after ``tcp_user_timeout``
(``LEAD_SESSION``); and a
look that gets no answer within ``LOOK_TIMEOUT_S`` fails, so the leader reconnects at once instead
of waiting on the follower's stall bound. Another worker then takes the lead at its next bid.
"""

from __future__ import annotations

import select
import time

import psycopg
from psycopg import pq

from ..store.postgres import PostgresListener, break_connection

_UNSEEN = object()
LEAD_IDLE_TIMEOUT_S = 5.0
"""The server ends a lead's session idle this long (``idle_session_timeout``): its lock is then
free for another worker. A leader looks every poll interval and a bidder bids every heartbeat, so
only a round busier than this moves the lead (harmless: the next bid takes it)."""
LOOK_TIMEOUT_S = 1.0
"""A leader's look that gets no answer this long fails (its connection is broken and reopened)."""
LEAD_SESSION = {
    "tcp_keepalives_idle": "5",
    "tcp_keepalives_interval": "2",
    "tcp_keepalives_count": "3",
    "tcp_user_timeout": "10000",
}
"""Server settings of every bid's session: the server, too, notices a vanished worker in seconds.
The holder's session also gets ``idle_session_timeout`` (``LEAD_IDLE_TIMEOUT_S``) once it leads:
a bidder's connection idles between bids, and a worker's start-up may take longer than that."""


class CaptureLead(PostgresListener):
    """A worker's bid for a capture's lead (``try_lead``) and, once it leads, its look at the
    capture's head (``changed``). It listens on no channel; its connection is select()ed like a
    listener's, so a terminated connection is noticed at once and reconnected. It waits on this
    connection for each look's answer: over TCP, a peer that vanished without a word fails the
    look after about 11 s (the listeners' keepalives), and a link that went silent while
    something still acknowledges its bytes is cut by the follower's stall bound."""

    def __init__(self, url: str, lead: str, head_sql: str) -> None:
        self._head_sql = head_sql
        self._head: object = _UNSEEN
        super().__init__(url, [], lead=lead, session=LEAD_SESSION)

    def try_lead(self) -> bool:
        """``PostgresListener.try_lead``; the new holder's session asks the server to end it once
        idle ``LEAD_IDLE_TIMEOUT_S`` (where the server knows the setting: PostgreSQL 14+)."""
        leading = self.leader
        if super().try_lead() and not leading:
            self._configure({"idle_session_timeout": str(int(LEAD_IDLE_TIMEOUT_S * 1000))})
        return self.leader

    @property
    def head(self) -> int | None:
        """The head the last look read (as ``ChangeSource.head`` returns it; None: no look yet
        since this worker took the lead)."""
        head = self._head
        if not self.leader or not isinstance(head, bytes | None):
            return None  # not leading, or no look yet (_UNSEEN)
        return int(head) if head is not None else 0

    def changed(self) -> bool:
        """Whether the capture's head moved since the last look (True at the first look of a
        new leader: records committed while nobody led are consumed at once). Never for a
        worker that does not lead. Raises when the connection fails."""
        if not self.leader:
            return False
        head = self._look()
        moved = head != self._head
        self._head = head
        return moved

    def _look(self) -> bytes | None:
        """The head, as the server wrote it; no answer within ``LOOK_TIMEOUT_S`` breaks the
        connection and raises (a silent link: the client's TCP timers never fire while a relay
        or proxy acknowledges what it no longer forwards)."""
        deadline = time.monotonic() + LOOK_TIMEOUT_S
        with self._conn.lock:
            pgconn = self._conn.pgconn
            pgconn.send_query(self._head_sql.encode())
            while pgconn.flush():
                self._wait(pgconn, deadline, write=True)
            value: bytes | None = None
            error: str | None = None
            while True:
                while pgconn.is_busy():
                    self._wait(pgconn, deadline)
                    pgconn.consume_input()
                result = pgconn.get_result()
                if result is None:
                    break
                if result.status == pq.ExecStatus.TUPLES_OK:
                    value = result.get_value(0, 0) if result.ntuples else None
                else:
                    error = (result.error_message or b"").decode(errors="replace").strip()
        if error is not None:
            raise psycopg.OperationalError(f"the capture lead's look failed: {error}")
        return value

    def _wait(self, pgconn: pq.abc.PGconn, deadline: float, *, write: bool = False) -> None:
        left = deadline - time.monotonic()
        fd = pgconn.socket
        ready = select.select([] if write else [fd], [fd] if write else [], [], max(0.0, left))
        if not any(ready):
            break_connection(self._conn)
            raise psycopg.OperationalError(
                f"the capture lead's look got no answer in {LOOK_TIMEOUT_S:g} s"
            )
