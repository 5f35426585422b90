"""What a worker needs from a provider's database (sans-IO): the ``ChangeSource`` Protocol.

``steps.ingest`` consumes a source's captured changes into the registry, the follower wakes on it
or polls it, ``worker.runtime`` opens, loads, writes through and closes it.
``server.sql.SQLSource`` (triggers; SQLite or PostgreSQL) and ``server.sql.logical.LogicalSource``
(PostgreSQL logical decoding) implement it, and a provider may pass its own to
``WorkerConfig.database``; the core types against this Protocol so it never imports the SQL edge.
``Wakeup`` and ``CommitProbe`` are what a database (a source or the registry's store) offers a
worker to learn, cheaply, that something committed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..domain import SQLTable
    from ..tables import Snapshot
    from .records import CaptureBatch, QuarantineEntry
    from .survey import Survey


class Wakeup(Protocol):
    """A connection that wakes a worker when a database changes (PostgreSQL ``LISTEN``; a SQLite
    file's inotify descriptor, ``store.inotify.FileWakeup``), or, for
    a source's capture, the worker's bid for its lead (``sql.lead.CaptureLead``: ``try_lead``,
    ``leader``; the leader looks at the capture's head with ``changed()`` every poll interval,
    since the provider's writers send no ``NOTIFY``)."""

    def fileno(self) -> int:
        """What ``select`` waits on."""
        ...

    def drain(self) -> bool:
        """Consume what woke it; whether a change was signalled."""
        ...

    def close(self) -> None: ...


class LeadWakeup(Wakeup, Protocol):
    """A worker's bid for the lead of a source's capture; the leader polls the capture's head."""

    leader: bool
    """Whether this worker holds the lead (consumes the capture) now."""

    def try_lead(self) -> bool:
        """Take the lead if nobody holds it; whether this worker leads."""
        ...

    def changed(self) -> bool:
        """(The leader) whether the capture's head moved since the last look."""
        ...


class CommitProbe(Protocol):
    """A cheap look at whether anyone committed to a database (SQLite ``PRAGMA data_version``)."""

    def read(self) -> int:
        """A number that moves on every commit by another connection."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class ChangeSource(Protocol):
    """A database of declared reference tables with a change capture, as a worker uses it: what
    ``WorkerConfig.database`` takes (``isinstance`` checks the members' presence)."""

    @property
    def name(self) -> str:
        """The source's name: the key of its position in the registry."""
        ...

    @property
    def declared(self) -> Mapping[str, SQLTable]:
        """The declared tables it holds (reference table name → declaration)."""
        ...

    @property
    def by_transaction(self) -> bool:
        """Whether capture records name their transaction (else all pending are one change set)."""
        ...

    @property
    def contiguous(self) -> bool:
        """Whether capture ids are contiguous (a missing one is a gap)."""
        ...

    def open(self) -> None:
        """Check the declarations against the database and install the capture where stale."""
        ...

    def load(self) -> tuple[dict[str, Snapshot], int]:
        """Every declared table, and the capture position that snapshot is at."""
        ...

    def snapshot(self, name: str, version: str, rows: Mapping[str, Any]) -> Snapshot:
        """Rows read from table ``name`` as a snapshot at ``version``."""
        ...

    def read(
        self,
        after: int | None,
        *,
        full: bool = False,
        marks: Mapping[str, str] | None = None,
        limit: int | None = None,
    ) -> CaptureBatch:
        """The capture records after ``after`` and, with ``full``, every table (``limit``:
        about that many records, whole transactions, where the source batches)."""
        ...

    def head(self) -> int:
        """The capture's head: moves whenever a record commits."""
        ...

    def reconcile_due(self) -> bool:
        """Whether the periodic comparison of the tables with the registry is due."""
        ...

    def mark_verified(self, marks: Mapping[str, tuple[str, str]]) -> None:
        """Record that each table's digest equals the registry at a mark."""
        ...

    def set_aside(self, entries: Iterable[QuarantineEntry], *, replace: Iterable[str] = ()) -> None:
        """Quarantine rows the contract cannot carry."""
        ...

    def release(self, pairs: Iterable[tuple[str, str]]) -> None:
        """Clear the quarantine of rows a carriable write replaced."""
        ...

    def quarantined(self) -> list[QuarantineEntry]:
        """What is set aside now."""
        ...

    def write(
        self,
        name: str,
        upsert: Mapping[str, Mapping[str, Any]],
        delete: Iterable[str],
        version: str | None,
    ) -> str | None:
        """Write rows of table ``name`` into the database; the capture id of the transaction."""
        ...

    def trim(self, upto: int) -> None:
        """Delete the capture records the registry has consumed."""
        ...

    def listener(self) -> Wakeup | None:
        """The worker's bid for the capture's lead (whose holder polls the capture's head), a
        wake-up on commits to a SQLite file (inotify), or None where the worker polls it."""
        ...

    def change_probe(self) -> CommitProbe | None:
        """A cheap commit probe (SQLite), or None."""
        ...

    def close(self) -> None: ...


class SurveyedSource(ChangeSource, Protocol):
    """A source whose periodic reconciliation runs as a survey beside the worker, outside the
    registry's lock (``capture.survey``; ``server.sql.SQLSource``, PostgreSQL or SQLite)."""

    @property
    def surveys(self) -> bool:
        """Whether this source is surveyed (else its reconciliation reads in full, locked)."""
        ...

    def survey(self, tables: Mapping[str, Snapshot], marks: Mapping[str, str]) -> Survey:
        """Compare the tables with the registry's ``tables`` at ``marks``, outside its lock."""
        ...

    def survey_soon(self, why: str) -> None:
        """The capture cannot vouch for what it missed (a gap, a lost slot): a survey that
        trusts no verified digest is due at once."""
        ...

    def read(
        self,
        after: int | None,
        *,
        full: bool = False,
        marks: Mapping[str, str] | None = None,
        limit: int | None = None,
        recheck: Mapping[str, frozenset[str]] | None = None,
    ) -> CaptureBatch:
        """``ChangeSource.read``; ``recheck``: a survey's candidates read in the same snapshot."""
        ...


def surveyed(source: ChangeSource) -> SurveyedSource | None:
    """``source`` when it is surveyed, else None."""
    return source if getattr(source, "surveys", False) else None  # type: ignore[return-value]
