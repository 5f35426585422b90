"""``ChangeSource`` is a seam: a provider's own source (here a list in memory, no SQL at all) is
what a worker is opened with, and its records become change sets like any captured write's."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from invalidation_contracts.server import Domain, SQLTable
from invalidation_contracts.server.capture import (
    CaptureBatch,
    Captured,
    ChangeSource,
    QuarantineEntry,
    ingest,
)
from invalidation_contracts.server.tables import Snapshot
from invalidation_contracts.server.worker.runtime import open_runtime


class ListSource:
    """A change capture kept in a Python list: each append is one committed record."""

    name = "list"
    by_transaction = True
    contiguous = True

    def __init__(self, tables: Mapping[str, SQLTable]) -> None:
        self.declared = dict(tables)
        self.rows: dict[str, dict[str, Any]] = {name: {} for name in tables}
        self.log: list[Captured] = []

    def commit(self, table: str, key: str, row: dict[str, Any] | None) -> None:
        if row is None:
            self.rows[table].pop(key, None)
        else:
            self.rows[table][key] = row
        op, image = ("delete", None) if row is None else ("upsert", json.dumps(row))
        n = len(self.log) + 1
        self.log.append(Captured(n, str(n), table, op, json.dumps([key]), image))

    def open(self) -> None: ...

    def load(self) -> tuple[dict[str, Snapshot], int]:
        return {
            n: self.snapshot(n, t.version, self.rows[n]) for n, t in self.declared.items()
        }, len(self.log)

    def snapshot(self, name: str, version: str, rows: Mapping[str, Any]) -> Snapshot:
        return Snapshot.build(name, version, rows)

    def read(
        self,
        after: int | None,
        *,
        full: bool = False,
        marks: Mapping[str, str] | None = None,
        limit: int | None = None,
    ) -> CaptureBatch:
        records = tuple(self.log[after:]) if after is not None else ()
        contents = {n: dict(r) for n, r in self.rows.items()} if full else None
        return CaptureBatch(len(self.log), records, contents)

    def head(self) -> int:
        return len(self.log)

    def reconcile_due(self) -> bool:
        return False

    def mark_verified(self, marks: Mapping[str, tuple[str, str]]) -> None: ...

    def set_aside(
        self, entries: Iterable[QuarantineEntry], *, replace: Iterable[str] = ()
    ) -> None: ...

    def release(self, pairs: Iterable[tuple[str, str]]) -> None: ...

    def quarantined(self) -> list[QuarantineEntry]:
        return []

    def write(
        self,
        name: str,
        upsert: Mapping[str, Mapping[str, Any]],
        delete: Iterable[str],
        version: str | None,
    ) -> str | None:
        for key, row in upsert.items():
            self.commit(name, key, dict(row))
        for key in delete:
            self.commit(name, key, None)
        return self.log[-1].tx if self.log else None

    def trim(self, upto: int) -> None: ...

    def listener(self) -> None:
        return None

    def change_probe(self) -> None:
        return None

    def close(self) -> None: ...


def plans() -> Domain:
    return Domain("listed", {"plans": SQLTable("plans")}, [], [])


def test_a_providers_own_source_is_a_change_source() -> None:
    assert isinstance(ListSource(plans().sql_tables), ChangeSource)


def test_a_worker_opened_with_a_providers_own_source_serves_its_captured_writes() -> None:
    source = ListSource(plans().sql_tables)
    source.commit("plans", "basic", {"funding": "card"})
    runtime = open_runtime(plans(), database=source)
    try:
        assert runtime.registry.state.tables["plans"].plain_rows() == {"basic": {"funding": "card"}}
        source.commit("plans", "basic", {"funding": "wire"})
        source.commit("plans", "pro", {"funding": "invoice"})
        assert ingest(runtime.registry, source) is True
        feed = runtime.registry.changes(0)
        assert sorted((r.key, r.op) for r in feed.rows) == [("basic", "changed"), ("pro", "added")]
    finally:
        runtime.close()
