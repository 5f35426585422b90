"""PostgreSQL capture records read out of commit order, made safe: each record's image becomes
the row's current image in the reader's snapshot.

Capture ids come from a sequence and records are grouped by the writer's transaction, ordered by
its ``xid8``; neither is commit order (two transactions writing one row commit in lock order, and
the later one may have the lower xid, or be consumed in a later read). Reading every touched key
again in the same snapshot makes the order irrelevant: whatever order records are applied in, each
key ends at its image in that snapshot, and a record consumed twice changes nothing. A TRUNCATE
is followed by the table's current rows.

The images are read with this worker's declared columns and those of the table's other columns
the records' own images name: the installed capture is the newest version's (``db upgrade``), so
an older worker consuming it carries the newer version's columns too, current, instead of
stripping them from the rows that version serves.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ..capture.records import DELETE, TRUNCATE, UPSERT, Captured
from .capture import CaptureDialect
from .declare import BoundTable

if TYPE_CHECKING:
    from sqlalchemy import Connection

#: Keys looked up per statement.
CHUNK = 1000


def current_images(
    conn: Connection,
    dialect: CaptureDialect,
    bound: Mapping[str, BoundTable],
    records: Sequence[Captured],
) -> list[Captured]:
    """``records`` with every upsert/delete's image replaced by the row's current one."""
    wanted: dict[str, set[str]] = {}
    truncated: set[str] = set()
    named: dict[str, set[str]] = {}
    for record in records:
        if record.table not in bound:
            continue
        if record.op in (UPSERT, DELETE) and record.key is not None:
            wanted.setdefault(record.table, set()).add(record.key)
        elif record.op == TRUNCATE:
            truncated.add(record.table)
        if bound[record.table].others:
            named.setdefault(record.table, set()).update(_columns(record.row))
    read = {name: table.reading(named.get(name, ())) for name, table in bound.items()}
    now: dict[str, dict[str, str]] = {}
    for name, keys in wanted.items():
        now[name] = _rows(conn, dialect, read[name], sorted(keys))
    full = {name: _all(conn, dialect, read[name]) for name in sorted(truncated)}
    out: list[Captured] = []
    for record in records:
        if record.table not in bound:
            out.append(record)
            continue
        key = record.key
        looked_up = key is not None and _plain(key, len(bound[record.table].key))
        if record.op in (UPSERT, DELETE) and key is not None and looked_up and record.table in now:
            row = now[record.table].get(key)
            op = DELETE if row is None else UPSERT
            out.append(Captured(record.id, record.tx, record.table, op, record.key, row))
        elif record.op == TRUNCATE and record.table in full:
            out.append(record)
            out.extend(
                Captured(record.id, record.tx, record.table, UPSERT, key, row)
                for key, row in full[record.table].items()
            )
        else:
            out.append(record)
    return out


def _rows(
    conn: Connection, dialect: CaptureDialect, table: BoundTable, keys: list[str]
) -> dict[str, str]:
    """Current key → row image of the rendered ``keys`` (JSON arrays as the trigger wrote them)."""
    out: dict[str, str] = {}
    cols = ", ".join(f"t.{dialect._quote(c.name)}" for c in table.key)
    parts = ", ".join(
        f"(e->>{i})" + ("::bigint" if c.kind == "integer" else "") for i, c in enumerate(table.key)
    )
    for start in range(0, len(keys), CHUNK):
        chunk = [k for k in keys[start : start + CHUNK] if _plain(k, len(table.key))]
        if not chunk:
            continue
        result = conn.exec_driver_sql(
            f"{dialect.select_sql(table)} WHERE ({cols}) IN (SELECT {parts} FROM"
            " jsonb_array_elements(%(keys)s::jsonb) AS e)",
            {"keys": json.dumps([json.loads(k) for k in chunk])},
        )
        for key, row in result:
            out[key] = row
    return out


def _all(conn: Connection, dialect: CaptureDialect, table: BoundTable) -> dict[str, str]:
    return {key: row for key, row in conn.exec_driver_sql(dialect.select_sql(table))}


def _columns(image: str | None) -> list[str]:
    """The columns a record's row image names (none when it is not a JSON object)."""
    try:
        row = json.loads(image) if image is not None else None
    except (ValueError, RecursionError):  # a bad image is the quarantine's to name
        return []
    return list(row) if isinstance(row, dict) else []


def _plain(key: str, width: int) -> bool:
    """A key the lookup can cast (a NULL or malformed one is left for quarantine to name)."""
    try:
        values = json.loads(key)
    except ValueError:
        return False
    return isinstance(values, list) and len(values) == width and None not in values
