"""A provider's database for the SQL-table tests: SQLite (a file) or PostgreSQL (a fresh database),
with raw SQL from outside the library, the way another program writes to it."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from invalidation_contracts.server import Domain
from invalidation_contracts.server.capture import ChangeSource

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
#: The backends and, on PostgreSQL, both change sources: triggers (default) and logical decoding.
SOURCES = [*BACKENDS, pytest.param("logical", marks=pytest.mark.postgres)]
#: PostgreSQL with each change source.
PG_SOURCES = [pytest.param(k, marks=pytest.mark.postgres) for k in ("postgres", "logical")]


class ProviderDB:
    """One database: ``url`` for the library, ``run``/``script`` for an outside writer."""

    def __init__(self, kind: str, url: str, raw: str, *, logical: bool = False) -> None:
        self.kind = kind
        self.url = url
        self.raw = raw
        self.logical = logical
        """PostgreSQL read by logical decoding (``LogicalSource``) instead of triggers."""

    def source(self, domain: Domain, *, reconcile_interval_s: float | None = 60.0) -> ChangeSource:
        """The change source a worker is opened with: triggers, or logical decoding."""
        if self.logical:
            from invalidation_contracts.server.sql.logical import LogicalSource

            return LogicalSource(
                self.url, domain.sql_tables, reconcile_interval_s=reconcile_interval_s
            )
        from invalidation_contracts.server.sql import SQLSource

        return SQLSource(self.url, domain.sql_tables, reconcile_interval_s=reconcile_interval_s)

    def bypass(self, table: str) -> tuple[str, str]:
        """Statements that stop, then restart, capturing ``table``'s writes (PostgreSQL): its
        trigger disabled, or the table taken out of the publication logical decoding reads."""
        if self.logical:
            return (
                f"ALTER PUBLICATION ic_capture DROP TABLE {table}",
                f"ALTER PUBLICATION ic_capture ADD TABLE {table}",
            )
        return (
            f"ALTER TABLE {table} DISABLE TRIGGER ic_capture",
            f"ALTER TABLE {table} ENABLE ALWAYS TRIGGER ic_capture",
        )

    def script(self, *statements: str) -> None:
        """Run ``statements`` in one transaction, as another program would."""
        if self.kind == "sqlite":
            with closing(sqlite3.connect(self.raw)) as db, db:
                for statement in statements:
                    db.execute(statement)
            return
        import psycopg

        with psycopg.connect(self.raw) as pg, pg.transaction():
            for statement in statements:
                pg.execute(statement.encode())

    def query(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        if self.kind == "sqlite":
            with closing(sqlite3.connect(self.raw)) as db:
                return db.execute(statement, tuple(params)).fetchall()
        import psycopg

        with psycopg.connect(self.raw, autocommit=True) as pg:
            cursor = pg.execute(statement.replace("?", "%s").encode(), tuple(params))
            return cursor.fetchall() if cursor.description else []

    @property
    def capture(self) -> str:
        return "ic_capture" if self.kind == "sqlite" else "invalidation_contracts.capture"

    def type(self, generic: str) -> str:
        """A column type by its generic name in this database's dialect."""
        if self.kind == "sqlite":
            return {"json": "JSON", "float": "REAL", "bool": "BOOLEAN"}.get(generic, generic)
        return {"json": "JSONB", "float": "DOUBLE PRECISION", "bool": "BOOLEAN"}.get(
            generic, generic
        )


def provider_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ProviderDB]:
    if request.param == "sqlite":
        path = tmp_path / "provider.db"
        yield ProviderDB("sqlite", f"sqlite:///{path}", str(path))
    else:
        url = request.getfixturevalue("postgres_url")
        yield ProviderDB("postgres", url, url, logical=request.param == "logical")
