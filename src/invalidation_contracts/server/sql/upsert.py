"""An admin write's rows into the provider's own table: existing rows updated in place, new rows
inserted.

A plain ``INSERT … ON CONFLICT DO UPDATE`` of the declared columns fails on a table that has
undeclared ``NOT NULL`` columns without a default, even for rows that exist: the database checks
the proposed row before it resolves the conflict. So existing keys are updated (only the declared
columns change), and a new row that would leave such a column empty is refused up front with a
422 naming the columns — the admin API cannot fill columns the declaration does not hold.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Table, and_, bindparam, or_, select

from ...protocol.problems import ProblemType, ProtocolError

CHUNK = 500
"""Keys looked up per statement."""


def write_rows(
    conn: Connection,
    table: Table,
    keys: Sequence[str],
    columns: Sequence[str],
    rows: Sequence[Mapping[str, Any]],
    where: str,
    insert: Any,
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
