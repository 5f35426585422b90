"""An admin write's rows into the provider's own table: existing rows updated in place, new rows
inserted (``RowWriter``, one transaction per write; ``write_rows``, the statements).

A plain ``INSERT … ON CONFLICT DO UPDATE`` of the declared columns fails on a table that has
undeclared ``NOT NULL`` columns without a default, even for rows that exist: the database checks
the proposed row before it resolves the conflict. So existing keys are updated (only the declared
columns change), and a new row that would leave such a column empty is refused up front with a
422 naming the columns — the admin API cannot fill columns the declaration does not hold.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Insert, MetaData, Table, and_, bindparam, or_, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import (
    DataError,
    IntegrityError,
    OperationalError,
    SQLAlchemyError,
    StatementError,
)

from ...protocol.problems import ProblemType, ProtocolError
from ..capture.steps import SourceError
from .capture import CaptureDialect
from .declare import BoundTable
from .engine import failure_reason

CHUNK = 500
"""Keys looked up per statement."""


class RowWriter:
    """Writes rows of declared reference tables into their SQL tables (the admin write path)."""

    def __init__(
        self, engine: Engine, dialect: CaptureDialect, connect: Callable[..., Connection]
    ) -> None:
        """``connect(write=True)``: a connection whose transaction takes the write lock."""
        self.engine = engine
        self.dialect = dialect
        self._connect = connect
        self._tables: dict[str, Table] = {}

    def write(
        self,
        table: BoundTable,
        upsert: Mapping[str, Mapping[str, Any]],
        delete: Iterable[str],
        version: str | None,
    ) -> str | None:
        """Write rows of one declared table into its SQL table, in one transaction.

        The capture records the write like any other writer's; ``version`` adds a ``version``
        record naming the table's next version. Returns the transaction's capture id (PostgreSQL).
        A row the database refuses is a 422 ``ProtocolError``; nothing is written.
        """
        sql_table = self._table(table)
        key_names = [c.name for c in table.key]
        allowed = {c.name for c in table.columns}
        rows = []
        for key, row in upsert.items():
            unknown = sorted(set(row) - allowed)
            if unknown:
                raise ProtocolError(
                    ProblemType.INVALID_REQUEST,
                    f"{table.where}: row {key!r} names column {unknown[0]!r}, which the "
                    f"declaration does not hold (columns: {sorted(allowed)})",
                )
            rows.append({**dict.fromkeys(allowed), **dict(row), **key_values(table, key)})
        try:
            with self._connect(write=True) as conn, conn.begin():
                for key in delete:
                    values = key_values(table, key)
                    conn.execute(
                        sql_table.delete().where(*(sql_table.c[k] == values[k] for k in key_names))
                    )
                if rows:
                    insert = self._upsert(sql_table, key_names, sorted(allowed))
                    write_rows(
                        conn, sql_table, key_names, sorted(allowed), rows, table.where, insert
                    )
                if version is not None:
                    self.dialect.record_version(conn, table.name, version)
                return self.dialect.transaction_id(conn)
        except (IntegrityError, DataError, StatementError) as exc:
            if isinstance(exc, OperationalError):
                raise SourceError(f"{self._where()}: cannot write ({failure_reason(exc)})") from exc
            raise ProtocolError(
                ProblemType.INVALID_REQUEST,
                f"{table.where}: the database refused the rows ({failure_reason(exc)})",
            ) from None
        except SQLAlchemyError as exc:
            raise SourceError(f"{self._where()}: cannot write ({failure_reason(exc)})") from exc

    def _table(self, table: BoundTable) -> Table:
        cached = self._tables.get(table.name)
        if cached is None:
            cached = Table(
                table.sql.table, MetaData(), schema=table.sql.schema, autoload_with=self.engine
            )
            self._tables[table.name] = cached
        return cached

    def _upsert(self, table: Table, keys: list[str], columns: list[str]) -> Insert:
        if self.engine.dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert  # type: ignore[assignment]
        statement = insert(table)
        if not columns:
            return statement.on_conflict_do_nothing(index_elements=keys)
        return statement.on_conflict_do_update(
            index_elements=keys, set_={c: statement.excluded[c] for c in columns}
        )

    def _where(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)


def key_values(table: BoundTable, key: str) -> dict[str, Any]:
    """The key columns' values of a row key (a JSON array for a composite key); 422 otherwise."""
    if len(table.key) == 1:
        values: list[Any] = [key]
    else:
        try:
            values = json.loads(key)
        except ValueError:
            values = []
        if not isinstance(values, list) or len(values) != len(table.key):
            raise ProtocolError(
                ProblemType.INVALID_REQUEST,
                f"{table.where}: key {key!r} is not a JSON array of {len(table.key)} values",
            )
    out = {}
    for column, value in zip(table.key, values, strict=True):
        if column.kind == "integer":
            try:
                value = int(value)
            except (TypeError, ValueError):
                raise ProtocolError(
                    ProblemType.INVALID_REQUEST,
                    f"{table.where}: key column {column.name!r} is an integer, not {value!r}",
                ) from None
        out[column.name] = value
    return out


def write_rows(
    conn: Connection,
    table: Table,
    keys: Sequence[str],
    columns: Sequence[str],
    rows: Sequence[Mapping[str, Any]],
    where: str,
    insert: Insert,
) -> None:
    """Update the rows whose key exists, insert the others (``insert``: the dialect's upsert, kept
    for a row another writer inserts meanwhile); 422 for a new row the table cannot take."""
    existing = _existing(conn, table, keys, rows)
    old = [row for row in rows if tuple(row[k] for k in keys) in existing]
    new = [row for row in rows if tuple(row[k] for k in keys) not in existing]
    if old and columns:
        statement = (
            table.update()
            .where(*(table.c[k] == bindparam(f"key_{k}") for k in keys))
            .values({c: bindparam(f"value_{c}") for c in columns})
        )
        conn.execute(
            statement,
            [
                {**{f"key_{k}": row[k] for k in keys}, **{f"value_{c}": row[c] for c in columns}}
                for row in old
            ],
        )
    if new:
        missing = required_columns(table, {*keys, *columns})
        if missing:
            shown = ", ".join(repr(_key(row, keys)) for row in new[:5])
            raise ProtocolError(
                ProblemType.INVALID_REQUEST,
                f"{where}: new row(s) {shown} cannot be inserted: column(s) {', '.join(missing)} "
                "are NOT NULL without a default and not declared, so the admin API cannot fill "
                "them; insert such rows with your own code (the capture records them)",
            )
        conn.execute(insert, list(new))


def required_columns(table: Table, given: set[str]) -> list[str]:
    """The table's columns a new row must name that ``given`` does not (sorted)."""
    return sorted(
        column.name
        for column in table.columns
        if column.name not in given
        and not column.nullable
        and column.server_default is None
        and column.computed is None
        and column.identity is None
        and not (column.primary_key and column.autoincrement is True)
    )


def _existing(
    conn: Connection, table: Table, keys: Sequence[str], rows: Sequence[Mapping[str, Any]]
) -> set[tuple[Any, ...]]:
    found: set[tuple[Any, ...]] = set()
    columns = [table.c[k] for k in keys]
    for start in range(0, len(rows), CHUNK):
        chunk = rows[start : start + CHUNK]
        match = or_(*(and_(*(c == row[c.name] for c in columns)) for row in chunk))
        found.update(tuple(r) for r in conn.execute(select(*columns).where(match)))
    return found


def _key(row: Mapping[str, Any], keys: Sequence[str]) -> Any:
    return row[keys[0]] if len(keys) == 1 else [row[k] for k in keys]
