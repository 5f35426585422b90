"""What an operator does to a fix memory on disk: read its counters, list it, evict from it.

Backs ``invalidation-contracts memory stats|list|evict`` (an edge of the command line: rich's
tables; it was ``client.operator`` until 0.2). They may run while agents use the file:
an eviction here is one more writer, and every agent sees it before its next lookup. Counters an
agent has not written yet (they are written with its next real write, or when it closes) are not
in ``stats``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from os import PathLike
from typing import Any

from .._extras import missing

try:
    from rich.table import Table
    from rich.text import Text
except ModuleNotFoundError as exc:
    raise missing(exc, "cli") from exc

from ..client.entries import EvictionReason, MemoryEntry, Tombstone
from ..client.events import Evicted
from ..client.memory import FixMemory
from ..client.shared.store import StoreError
from ..client.stores.sqlite import SQLiteStore


class OperatorError(Exception):
    """A one-line reason an operator command cannot be done (nothing was changed)."""


@contextmanager
def opened(path: str | PathLike[str]) -> Iterator[FixMemory]:
    """An existing SQLite fix memory, closed on exit; ``OperatorError`` if missing or unreadable."""
    try:
        memory = FixMemory("naive", store=SQLiteStore(path, create=False), close_store=True)
    except StoreError as exc:
        raise OperatorError(str(exc)) from exc
    try:
        yield memory
    except StoreError as exc:
        raise OperatorError(str(exc)) from exc
    finally:
        memory.close()


def select_origins(memory: FixMemory, origin: str | None) -> list[str]:
    """``[origin]`` if the memory holds it, every origin if ``origin`` is None."""
    known = memory.origins()
    if origin is None:
        return known
    if origin not in known:
        raise OperatorError(f"the memory holds nothing for origin {origin!r}")
    return [origin]


def origin_stats(path: str | PathLike[str], origin: str | None = None) -> list[dict[str, Any]]:
    """One row per origin: its counters, with its live entry and tombstone counts."""
    rows = []
    with opened(path) as memory:
        for name in select_origins(memory, origin):
            row = {
                "origin": name,
                "entries": len(memory.entries(name)),
                "tombstones": len(memory.tombstones(name)),
                "unreadable": len(memory.unreadable(name)),
                "policy": memory.state(name).policy or "contract",
            }
            row.update(memory.stats(name).to_dict())
            rows.append(row)
    return rows


def entry_rows(
    path: str | PathLike[str], origin: str | None = None, *, tombstones: bool = False
) -> list[dict[str, Any]]:
    """One row per live entry (or per tombstone) of the selected origins."""
    rows: list[dict[str, Any]] = []
    with opened(path) as memory:
        for name in select_origins(memory, origin):
            if tombstones:
                rows.extend(_tombstone_row(t) for t in memory.tombstones(name))
            else:
                rows.extend(_entry_row(e) for e in memory.entries(name))
    return rows


def evict(
    path: str | PathLike[str],
    origin: str,
    *,
    entry_ids: list[str] | None = None,
    table: str | None = None,
    everything: bool = False,
) -> list[str]:
    """Evict by id, by table or all (reason ``operator``); return the evicted ids.

    An id that is not a live entry is an ``OperatorError``, and then nothing is evicted.
    """
    with opened(path) as memory:
        select_origins(memory, origin)
        live = {entry.id for entry in memory.entries(origin)}
        missing = [entry_id for entry_id in entry_ids or () if entry_id not in live]
        if missing:
            raise OperatorError(f"no live entry {', '.join(missing)} for origin {origin!r}")
        obs = memory.evict(
            origin,
            entry_ids=entry_ids or (),
            table=table,
            everything=everything,
            reason=EvictionReason.OPERATOR,
        )
    return [event.entry_id for event in obs.of(Evicted)]


def stats_table(rows: list[dict[str, Any]]) -> Table:
    """Counters down the side, one column per origin."""
    table = Table(title="Fix memory: counters per origin")
    table.add_column("counter", no_wrap=True)
    for row in rows:
        table.add_column(Text(row["origin"]), justify="right", overflow="fold")
    reasons = sorted({reason for row in rows for reason in row["evictions"]})
    counters = [
        "entries",
        "tombstones",
        "unreadable",
        "lookups",
        "hits",
        "misses",
        "served",
        "stores",
        "not_stored",
    ]
    for name in counters:
        table.add_row(name.replace("_", " "), *(str(row[name]) for row in rows))
    table.add_row("evictions", *(str(sum(row["evictions"].values())) for row in rows))
    for reason in reasons:
        table.add_row(f"  {reason}", *(str(row["evictions"].get(reason, 0)) for row in rows))
    table.add_row("policy", *(str(row.get("policy", "contract")) for row in rows))
    for name in (
        "restamps",
        "probes",
        "quarantines",
        "version_moves",
        "rules_alerts",
        "ignored",
    ):
        table.add_row(name.replace("_", " "), *(str(row[name]) for row in rows))
    bounds = sorted({bound for row in rows for bound in row.get("refused", {})})
    table.add_row("refused", *(str(sum(row.get("refused", {}).values())) for row in rows))
    for bound in bounds:
        table.add_row(f"  {bound}", *(str(row["refused"].get(bound, 0)) for row in rows))
    for name in ("fetch_failures", "responses"):
        table.add_row(name.replace("_", " "), *(str(row.get(name, 0)) for row in rows))
    table.add_row("contract bytes", *(str(row["contract_bytes"]) for row in rows))
    table.add_row("response bytes", *(str(row["response_bytes"]) for row in rows))
    return table


def entries_table(rows: list[dict[str, Any]], *, tombstones: bool = False) -> Table:
    """One block per entry (or tombstone): what the fix does, where it applies, what it depends on.

    Two columns only, the second wrapped by word, so the listing reads at 80 columns; the origin
    is named in the title when there is one, and in each block when there are several.
    """
    origins = sorted({row["origin"] for row in rows})
    title = "Fix memory: " + ("tombstones" if tombstones else "live entries")
    table = Table(
        title=Text(title + (f" of {origins[0]}" if len(origins) == 1 else "")),
        show_lines=True,
        expand=False,
    )
    table.add_column("id", no_wrap=True)
    table.add_column("fix", overflow="fold", ratio=1)
    for row in rows:
        table.add_row(
            Text(row["id"]), _entry_block(row, several=len(origins) > 1, tombstone=tombstones)
        )
    return table


def _entry_block(row: dict[str, Any], *, several: bool, tombstone: bool) -> Text:
    """The lines of one entry, each led by a bold label."""
    head = f"{row['type']} on {row['operation'] or '(unnamed operation)'}"
    facts = [f"episode {_text(row['episode'])}", f"restamps {row['restamps']}"]
    lines = [("", head + " · " + " · ".join(facts))]
    if several:
        lines.append(("origin", row["origin"]))
    lines += [
        ("sets", _parameters(row["parameters"])),
        ("scope", _parameters(json.loads(row["scope"])) or "(origin-wide)"),
        ("depends on", row["depends_on"]),
    ]
    if row["derived_from"]:
        lines.append(("derived from", ", ".join(row["derived_from"])))
    if tombstone:
        lines.append(("evicted", row["reason"] + (f": {row['detail']}" if row["detail"] else "")))
    block = Text()
    for i, (label, value) in enumerate(lines):
        if i:
            block.append("\n")
        if label:
            block.append(f"{label}: ", style="bold")
        block.append(value)
    return block


def _parameters(values: dict[str, Any]) -> str:
    """``name=value`` pairs, values as JSON, in the order the server gave them."""
    return ", ".join(
        f"{name}={json.dumps(value, ensure_ascii=False)}" for name, value in values.items()
    )


def _entry_row(entry: MemoryEntry) -> dict[str, Any]:
    return {
        "origin": entry.origin,
        "id": entry.id,
        "type": entry.type,
        "operation": entry.key.operation,
        "parameters": dict(entry.suggestion.parameters),
        "scope": entry.key.scope,
        "depends_on": "; ".join(
            f"{dep.table}@{dep.version}"
            + ("[keys]" if dep.membership else "")
            + (f"[{','.join(dep.keys)}]" if dep.keys is not None else "[*]")
            for dep in entry.dependencies
        )
        or "-",
        "rules_version": entry.rules_version,
        "contract_seq": entry.contract_seq,
        "episode": entry.provenance.episode,
        "restamps": entry.restamps,
        "derived_from": list(entry.derived_from),
    }


def _tombstone_row(tomb: Tombstone) -> dict[str, Any]:
    row = _entry_row(tomb.entry)
    row.update(reason=tomb.reason.value, detail=tomb.detail, evicted_in_episode=tomb.episode)
    return row


def _text(value: object) -> str:
    return "-" if value is None else str(value)
