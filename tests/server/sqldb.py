"""A provider's database for the SQL-table tests: SQLite (a file) or PostgreSQL (a fresh database),
with raw SQL from outside the library, the way another program writes to it."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


class ProviderDB:
    """One database: ``url`` for the library, ``run``/``script`` for an outside writer."""

    def __init__(self, kind: str, url: str, raw: str) -> None:
        self.kind = kind
        self.url = url
        self.raw = raw

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
        yield ProviderDB("postgres", url, url)
