"""The capture lead on PostgreSQL: one worker consumes a source's capture, and polls its head.

Writers do not ``NOTIFY`` (a notifying transaction holds PostgreSQL's one notification-queue lock
through its commit, so two writers of different tables would commit one after the other). The
worker holding the lead — a session advisory lock on a connection of its own — instead reads the
capture's head on that connection every poll interval (``changed``): one autocommit statement, so
one snapshot. The head is the count of records ever committed (``PostgresCapture.head_sql``), so
it moves exactly when a record commits, whatever order ids were taken in. A round it moved, the
follower consumes the capture; the registry commit that follows sends the store's ``NOTIFY``,
which wakes the other workers. So no provider writer ever notifies; only registry writers do.
"""

from __future__ import annotations

from ..store.postgres import PostgresListener

_UNSEEN = object()


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
        super().__init__(url, [], lead=lead)

    def changed(self) -> bool:
        """Whether the capture's head moved since the last look (True at the first look of a
        new leader: records committed while nobody led are consumed at once). Never for a
        worker that does not lead. Raises when the connection fails."""
        if not self.leader:
            return False
        row = self._conn.execute(self._head_sql).fetchone()
        head = row[0] if row is not None else None
        moved = head != self._head
        self._head = head
        return moved
