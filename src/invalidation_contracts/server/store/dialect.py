"""What the store's SQL needs from a database: a ``Dialect`` (connecting, locking, naming the
tables, waking workers) and ``Statements`` (running SQL inside one transaction)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from ..tables import Snapshot

if TYPE_CHECKING:
    from ..capture.source import Wakeup

TABLES = ("meta", "tables", "rows", "rules", "log", "positions")

SQLLoader = Callable[[], tuple[Mapping[str, Snapshot], Mapping[str, int]]]
"""Reads the SQL-backed tables of a new registry: snapshots, and their capture positions."""


class Cursor(Protocol):
    """What the store reads from a DB-API cursor (``sqlite3.Cursor``, ``psycopg.Cursor``)."""

    def fetchone(self) -> Any: ...

    def fetchall(self) -> Sequence[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]], /) -> object: ...


class Connection(Protocol):
    """The DB-API connection the store's SQL runs on (``sqlite3.Connection`` in autocommit mode,
    ``psycopg.Connection`` with ``autocommit=True``): statements, a cursor for batches, close."""

    def execute(self, sql: str, params: Sequence[Any] = ..., /) -> Cursor: ...

    def cursor(self) -> Cursor: ...

    def close(self) -> None: ...


DB = TypeVar("DB", bound=Connection)
"""A dialect's connection type."""
DB_co = TypeVar("DB_co", bound=Connection, covariant=True)
"""The same, where nothing takes a connection from outside: ``Statements[Connection]`` and
``SQLRegistryStore[Connection]`` name any dialect's."""


class StorageError(RuntimeError):
    """The registry store cannot be opened or is not this domain's, or a change was not written."""


class HistoryLost(Exception):
    """The change log does not account for the stored tables."""


class Dialect(ABC, Generic[DB]):
    """What differs between databases: connecting, locking, table names, waking other workers."""

    where: str
    """The store, for messages (a path or a URL without its password)."""
    errors: tuple[type[Exception], ...]

    @abstractmethod
    def connect(self) -> DB:
        """A DB-API connection in autocommit mode (transactions are begun explicitly)."""

    @abstractmethod
    def prepare(self, db: DB) -> None:
        """Create the registry's tables, or check (and migrate) the ones there."""

    @abstractmethod
    def begin_write(self, db: DB) -> None:
        """Begin a transaction holding the lock every writer of this registry takes."""

    @abstractmethod
    def begin_read(self, db: DB) -> None:
        """Begin a read-only transaction on one consistent snapshot."""

    @abstractmethod
    def table(self, name: str) -> str:
        """The SQL name of one of ``TABLES``."""

    def mark_path(self) -> Path | None:
        """Where the store keeps its high-water mark (``highwater``); None: it keeps none."""
        return None

    def discontinuity(self, db: DB, epoch: str, seq: int) -> str | None:
        """Why the stored ``(epoch, seq)`` is not what the last commit left, by the database's
        own identity of it (``highwater.Identity``); None: it is, or the database keeps none."""
        return None

    def stamp(self, db: DB, epoch: str, seq: int) -> None:  # noqa: B027 - optional hook
        """Record, inside the write transaction that reaches ``(epoch, seq)``, its identity."""

    def interrupt(self, db: DB) -> None:  # noqa: B027 - optional hook
        """From another thread: end a call waiting on ``db`` with an error (a silent link)."""

    def usable(self, db: DB) -> bool:
        """False when the connection is lost and must be opened again."""
        return True

    def placeholders(self, sql: str) -> str:
        """``sql`` (written with ``?``) in the driver's parameter style."""
        return sql

    def batch(self, db: DB) -> AbstractContextManager[Any]:
        """Statements whose results are not read, sent together where the driver can."""
        return nullcontext()

    def committed(self, db: DB, seq: int) -> None:  # noqa: B027 - optional hook
        """Called inside a write transaction that moved the registry to ``seq``, before COMMIT."""

    def listener(self) -> Wakeup | None:
        """A connection that wakes a worker when another commits (None: poll instead)."""
        return None

    def reason(self, exc: Exception) -> str:
        text = str(exc).strip()
        return text.splitlines()[0] if text else type(exc).__name__


class Statements(Generic[DB_co]):
    """SQL run on one connection inside one transaction, with the registry's table names."""

    def __init__(self, dialect: Dialect[DB_co], db: DB_co) -> None:
        self.dialect = dialect
        self.db = db
        self.where = dialect.where
        self._names = {name: dialect.table(name) for name in TABLES}
        self._meta: dict[str, str] | None = None

    def _format(self, sql: str) -> str:
        return self.dialect.placeholders(sql.format(**self._names))

    def run(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        """Execute ``sql`` (``{table}`` names, ``?`` parameters); the cursor."""
        return self.db.execute(self._format(sql), tuple(params))

    def run_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        batch = [tuple(row) for row in rows]
        if batch:
            self.db.cursor().executemany(self._format(sql), batch)

    def meta(self) -> dict[str, str]:
        """The meta rows, read once per transaction (each step of a write asks again; only
        ``set_meta`` writes them, and nobody else can inside this transaction's snapshot or
        under its lock)."""
        if self._meta is None:
            self._meta = {name: value for name, value in self.run("SELECT name, value FROM {meta}")}
        return dict(self._meta)

    def set_meta(self, **values: object) -> None:
        self._meta = None
        self.run_many(
            "INSERT INTO {meta} (name, value) VALUES (?, ?)"
            " ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            [(name, str(value)) for name, value in values.items()],
        )

    def position(self, source: str) -> int | None:
        row = self.run("SELECT position FROM {positions} WHERE source = ?", (source,)).fetchone()
        return None if row is None else int(row[0])

    def batch(self) -> AbstractContextManager[Any]:
        return self.dialect.batch(self.db)
