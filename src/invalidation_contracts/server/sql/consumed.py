"""What one worker has consumed of a PostgreSQL capture, beyond the durable position.

The registry keeps one number per capture: the lowest transaction not consumed (every reader and
a restart resume there). A transaction that stays open anywhere in the cluster holds that number
back, so a reader that only had it would read everything since again at every round. The worker
that read keeps its ``Frontier`` (which transactions above the position it consumed) and resumes
from it while the registry is still at the position it committed; any other worker resumes from
the position, which is always sound (a record read twice changes nothing: ``rewrite``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..capture.records import Captured, Frontier
from .capture import PostgresCapture

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection


class ConsumedCapture:
    """A worker's frontier over one PostgreSQL capture: read from it, commit it, trim by it."""

    def __init__(self, dialect: PostgresCapture, batch_records: int) -> None:
        self.dialect = dialect
        self.batch_records = batch_records
        self.frontier: Frontier | None = None  # what the registry holds (committed)
        self.reading: Frontier | None = None  # what the last read returned (not yet committed)

    def read(
        self, conn: Connection, after: int | None, limit: int | None
    ) -> tuple[list[Captured], bool, int | None]:
        """The records not consumed (about ``limit``, whole transactions; None: all), whether
        more wait and then how many; the position reached is ``reading.position``."""
        _, xmax, xip = self.dialect.snapshot(conn)
        if after is None:  # a full load: everything visible is in the tables read next
            self.reading = Frontier(xmax, frozenset(xip))
            return [], False, None
        known = self.frontier
        frontier = known if known is not None and known.position == after else Frontier(after)
        records, more = self.dialect.unconsumed(conn, frontier, limit or self.batch_records)
        while limit is None and more:  # no batch wanted: read on to the end
            reached = frontier.advance(xmax, xip, int(records[-1].tx or 0))
            rest, more = self.dialect.unconsumed(conn, reached, self.batch_records)
            records += rest
        self.reading = frontier.advance(xmax, xip, int(records[-1].tx or 0) if more else None)
        return records, more, self.dialect.waiting(conn, self.reading) if more else None

    @property
    def position(self) -> int:
        return self.reading.position if self.reading is not None else 0

    def committed(self) -> None:
        """The registry now holds what the last ``read`` returned (called under its lock)."""
        if self.reading is not None:
            self.frontier, self.reading = self.reading, None

    def trim(self, conn: Connection, upto: int) -> bool:
        """Delete every record consumed, when the registry is at this frontier's position
        (those above the position included); False: trim up to ``upto`` as usual."""
        frontier = self.frontier
        if frontier is None or frontier.position != upto:
            return False
        self.dialect.trim_consumed(conn, frontier)
        return True
