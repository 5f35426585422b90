"""Putting a domain's in-memory tables into SQL: for demos, tests and moving a domain to a database.

``create_tables(database, domain)`` creates, for every ``TableSpec`` of the domain whose SQL table
does not exist yet, a table with a text primary key ``key`` and one column per row field (typed
from the values: text, integer, float, boolean, JSON) and fills it with the domain's rows.
``sql_domain(domain)`` is the same domain with those tables declared as ``SQLTable``\\ s.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import URL, Engine

from ..domain import Domain, SQLTable, TableSpec
from .engine import make_engine

KEY_COLUMN = "key"


def sql_domain(
    domain: Domain,
    declarations: Mapping[str, SQLTable] | None = None,
    *,
    schema: str | None = None,
) -> Domain:
    """``domain`` with every table read from SQL: as ``declarations`` say, else from the SQL
    table of the same name (the layout ``create_tables`` makes)."""
    declarations = declarations or {}
    unknown = sorted(set(declarations) - set(domain.tables))
    if unknown:
        raise ValueError(f"domain {domain.name!r} has no table {unknown[0]!r} to declare")
    tables: dict[str, TableSpec | SQLTable] = {}
    for name, spec in domain.tables.items():
        if name in declarations:
            tables[name] = declarations[name]
        elif isinstance(spec, TableSpec):
            tables[name] = SQLTable(
                name, key=_key_column(spec), schema=schema, version=spec.version
            )
        else:
            tables[name] = spec
    return replace(domain, tables=tables)


def create_tables(
    database: str | URL | Engine, domain: Domain, *, schema: str | None = None
) -> list[str]:
    """Create and fill the SQL tables of ``domain``'s in-memory tables that do not exist yet.

    Returns the names of the tables created; existing tables are left as they are.
    """
    engine = make_engine(database) if not isinstance(database, Engine) else database
    try:
        created = []
        inspector = sa.inspect(engine)
        metadata = sa.MetaData(schema=schema)
        with engine.connect().execution_options(sqlite_begin="IMMEDIATE") as conn, conn.begin():
            for name, spec in domain.memory_tables.items():
                if inspector.has_table(name, schema=schema):
                    continue
                key = _key_column(spec)
                table = sa.Table(
                    name,
                    metadata,
                    sa.Column(key, sa.Text, primary_key=True),
                    *(
                        sa.Column(field, _column_type(engine, values))
                        for field, values in _fields(spec.rows).items()
                    ),
                )
                table.create(conn)
                rows = [{key: k, **row} for k, row in spec.rows.items()]
                if rows:
                    conn.execute(table.insert(), rows)
                created.append(name)
        return created
    finally:
        if not isinstance(database, Engine):
            engine.dispose()


def _key_column(spec: TableSpec) -> str:
    fields = set(_fields(spec.rows))
    name = KEY_COLUMN
    while name in fields:
        name = "_" + name
    return name


def _fields(rows: Mapping[str, Mapping[str, Any]]) -> dict[str, list[Any]]:
    fields: dict[str, list[Any]] = {}
    for row in rows.values():
        for field, value in row.items():
            fields.setdefault(field, []).append(value)
    return fields


def _column_type(engine: Engine, values: Iterable[Any]) -> sa.types.TypeEngine[Any]:
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, bool) for v in present):
        return sa.Boolean()
    if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return sa.BigInteger()
    if present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return sa.Double()
    if all(isinstance(v, str) for v in present):
        return sa.Text()
    return postgresql.JSONB() if engine.dialect.name == "postgresql" else sa.JSON()


def read_declarations(path: str | Path) -> dict[str, SQLTable]:
    """``SQLTable`` declarations from a TOML file: one ``[tables.<reference table>]`` each, with
    optional ``table`` (default: the reference table's name), ``key``, ``columns``, ``schema``,
    ``version``. Raises ``ValueError`` naming the file and the table that is wrong.
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path}: cannot read the declarations ({exc})") from exc
    tables = data.get("tables")
    if not isinstance(tables, dict):
        raise ValueError(f"{path}: expected [tables.<name>] sections")
    out = {}
    allowed = {"table", "key", "columns", "schema", "version"}
    for name, spec in tables.items():
        if not isinstance(spec, dict) or set(spec) - allowed:
            raise ValueError(f"{path}: [tables.{name}] takes only {sorted(allowed)}")
        try:
            out[name] = SQLTable(
                str(spec.get("table", name)),
                key=spec.get("key"),
                columns=spec.get("columns"),
                schema=spec.get("schema"),
                version=spec.get("version", "1.0.0"),
            )
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{path}: [tables.{name}]: {exc}") from exc
    return out
