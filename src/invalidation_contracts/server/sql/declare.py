"""Checking ``SQLTable`` declarations against the database they read from.

A declaration names a SQL table, its key column(s) and the columns a row holds. Bound to a
database, each column gets a *kind* (how its values become JSON): text, integer, boolean, float,
json. Anything else — a missing table or column, a table without a key, a key that is not unique,
a type a reference table cannot carry as JSON exactly (decimals, dates, bytes, UUIDs) — is a
``DeclarationError`` naming the reference table, the SQL table and the column.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.types import TypeEngine

from ..domain import SQLTable

logger = logging.getLogger(__name__)

#: Most row columns one declaration may read (SQLite's json_object takes at most 127 arguments).
MAX_COLUMNS = 60
KEY_KINDS = frozenset({"text", "integer"})
SUPPORTED = "text (CHAR, VARCHAR, TEXT, enums), integers, booleans, floats (REAL, DOUBLE), JSON"


class DeclarationError(ValueError):
    """A ``SQLTable`` declaration that its database cannot serve."""


@dataclass(frozen=True, slots=True)
class Column:
    """A declared column and the kind of JSON value it holds."""

    name: str
    kind: str


@dataclass(frozen=True, slots=True)
class BoundTable:
    """A declaration checked against its database: the reference table ``name`` over ``sql``."""

    name: str
    sql: SQLTable
    key: tuple[Column, ...]
    columns: tuple[Column, ...]
    others: tuple[Column, ...] = ()
    """The table's other columns in the database (neither key nor declared) of a kind a row can
    hold: another code version may declare them (``undeclared``, ``reading``)."""

    @property
    def others_tag(self) -> str:
        """The other columns, for the table's digest: registry rows keep their values there
        (``capture.survey.with_undeclared``), so a column dropped or added makes the table's
        verified digest stale and the next reconciliation reads it."""
        if not self.others:
            return ""
        names = ",".join(sorted(c.name for c in self.others))
        return ":" + hashlib.sha256(names.encode("utf-8")).hexdigest()[:8]

    def reading(self, names: Iterable[str]) -> BoundTable:
        """This table read with those of its other columns ``names`` lists too (another
        version's, named by the installed capture's row images)."""
        wanted = set(names)
        extra = tuple(c for c in self.others if c.name in wanted)
        return replace(self, columns=self.columns + extra) if extra else self

    @property
    def where(self) -> str:
        qualified = f"{self.sql.schema}.{self.sql.table}" if self.sql.schema else self.sql.table
        return f"reference table {self.name!r} (SQL table {qualified!r})"


def kind_of(sql_type: TypeEngine[object]) -> str | None:
    """The JSON kind of a column type, or None when a reference table cannot hold it."""
    if isinstance(sql_type, sa.ARRAY):
        return "json" if kind_of(sql_type.item_type) in ("text", "integer", "boolean") else None
    if isinstance(sql_type, sa.JSON):
        return "json"
    if isinstance(sql_type, sa.Boolean):
        return "boolean"
    if isinstance(sql_type, sa.Integer):
        return "integer"
    if isinstance(sql_type, sa.Float):
        return "float"
    if isinstance(sql_type, sa.String):  # Text, Enum, CHAR, VARCHAR
        return "text"
    return None


def bind(engine: Engine, name: str, table: SQLTable) -> BoundTable:
    """Check ``table`` (declared as reference table ``name``) against ``engine``'s database."""
    qualified = f"{table.schema}.{table.table}" if table.schema else table.table
    where = f"reference table {name!r} (SQL table {qualified!r})"
    inspector = sa.inspect(engine)
    if not inspector.has_table(table.table, schema=table.schema):
        raise DeclarationError(f"{where}: no such table in {engine.url.render_as_string()}")
    reflected = {c["name"]: c for c in inspector.get_columns(table.table, schema=table.schema)}
    primary = list(
        inspector.get_pk_constraint(table.table, schema=table.schema).get("constrained_columns")
        or []
    )
    key_names = list(table.key_columns or primary)
    if not key_names:
        raise DeclarationError(
            f"{where}: the table has no primary key; declare its key column(s) with key=..."
        )
    for column in key_names:
        if column not in reflected:
            raise DeclarationError(f"{where}: key column {column!r} does not exist")
    if (
        table.key_columns
        and set(key_names) != set(primary)
        and not _unique(inspector, table, key_names)
    ):
        raise DeclarationError(
            f"{where}: key column(s) {key_names} are neither the primary key nor unique"
        )
    names = (
        list(table.columns)
        if table.columns is not None
        else [c for c in reflected if c not in key_names]
    )
    for column in names:
        if column not in reflected:
            raise DeclarationError(f"{where}: column {column!r} does not exist")
        if column in key_names:
            raise DeclarationError(f"{where}: column {column!r} is part of the key")
    if len(names) > MAX_COLUMNS:
        raise DeclarationError(f"{where}: {len(names)} columns; a row holds at most {MAX_COLUMNS}")
    key = tuple(Column(c, _kind(where, c, reflected)) for c in key_names)
    for part in key:
        if part.kind not in KEY_KINDS:
            raise DeclarationError(
                f"{where}: key column {part.name!r} is {part.kind}; a key must be text or "
                "an integer"
            )
    columns = tuple(Column(c, _kind(where, c, reflected)) for c in names)
    return BoundTable(name, table, key, columns, _others(reflected, {*key_names, *names}))


def _others(reflected: Mapping[str, Mapping[str, object]], taken: set[str]) -> tuple[Column, ...]:
    """The reflected columns not in ``taken`` whose type a row can hold."""
    out = []
    for name, column in reflected.items():
        sql_type = column["type"]
        kind = kind_of(sql_type) if isinstance(sql_type, TypeEngine) else None
        if name not in taken and kind is not None:
            out.append(Column(name, kind))
    return tuple(out)


def undeclared(bound: Mapping[str, BoundTable]) -> dict[str, frozenset[str]]:
    """Per bound table with any, its database columns this worker does not declare (a registry
    row's values there are another version's: kept, not compared)."""
    return {
        name: frozenset(c.name for c in table.others)
        for name, table in bound.items()
        if table.others
    }


def _kind(where: str, column: str, reflected: Mapping[str, Mapping[str, object]]) -> str:
    sql_type = reflected[column]["type"]
    kind = kind_of(sql_type) if isinstance(sql_type, TypeEngine) else None
    if kind is None:
        raise DeclarationError(
            f"{where}: column {column!r} has type {sql_type}, which a reference table cannot "
            f"hold (supported: {SUPPORTED})"
        )
    return kind


def _unique(inspector: sa.Inspector, table: SQLTable, columns: list[str]) -> bool:
    wanted = set(columns)
    for constraint in inspector.get_unique_constraints(table.table, schema=table.schema):
        if set(constraint["column_names"]) == wanted:
            return True
    for index in inspector.get_indexes(table.table, schema=table.schema):
        if index.get("unique") and set(index["column_names"]) == wanted:
            return True
    return False


#: What ``rebind`` checks and updates: the engine, the declarations, the bound tables, the tables
#: set aside (name → why), and the source's name for the log.
Declarations = tuple[Engine, Mapping[str, SQLTable], dict[str, BoundTable], dict[str, str], str]


def rebind(
    engine: Engine,
    declared: Mapping[str, SQLTable],
    bound: dict[str, BoundTable],
    broken: dict[str, str],
    source: str,
    *,
    at_start: bool = False,
) -> None:
    """Check every declaration against the database again, updating ``bound`` and ``broken``.

    A table whose declared column was renamed, dropped or retyped to a type the contract cannot
    carry is set aside (``broken``: the reason, naming the table and the column), so the routes
    that read it refuse while the others serve; it is bound again, and served, as soon as the
    database matches its declaration again. ``at_start``: when every table is set aside there is
    nothing to serve, and the first one's ``DeclarationError`` is raised."""
    for name, table in declared.items():
        try:
            fresh = bind(engine, name, table)
        except DeclarationError as exc:
            if broken.get(name) != str(exc):
                logger.error("%s: %s; its routes refuse until it is fixed", source, exc)
            broken[name] = str(exc)
            bound.pop(name, None)
            continue
        if broken.pop(name, None) is not None:
            logger.warning("%s: %s matches its declaration again", source, fresh.where)
        bound[name] = fresh
    if at_start and not bound and broken:
        raise DeclarationError(next(iter(broken.values())))


def newly_broken(declarations: Declarations) -> bool:
    """After a failed read: whether checking the declarations again (``rebind``) set a table
    aside (a column changed between the check and the read); a failing check says no."""
    before = set(declarations[3])
    try:
        rebind(*declarations)
    except sa.exc.SQLAlchemyError:
        return False
    return bool(set(declarations[3]) - before)
