"""A restored or replaced registry file gets a new epoch (reliability audit 2, N8; SPEC §1).

The file restored from a backup is a valid history at an older seq, under its old epoch: serving
it as it is would hand out seqs clients already saw with other changes. The high-water mark
beside the file (``<registry>-history``) remembers the furthest position served; a file behind
it, or of another epoch, starts a new epoch, while a clean reopen continues the same one.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.sqlite_files import backup, restore

from invalidation_contracts.server import Domain, Registry
from invalidation_contracts.server.store import SQLiteRegistryStore
from invalidation_contracts.server.store.highwater import read_mark


def reload(registry: Registry, n: int) -> None:
    rows = registry.state.tables["plans"].plain_rows()
    for i in range(n):
        registry.reload("plans", {**rows, "basic": {**rows["basic"], "note": f"n{i}"}})


def test_a_clean_reopen_continues_the_same_epoch(domain: Domain, tmp_path: Path) -> None:
    db = tmp_path / "registry.db"
    with SQLiteRegistryStore(db) as store:
        registry = store.open_registry(domain)
        reload(registry, 3)
        epoch = registry.state.epoch
    with SQLiteRegistryStore(db) as store:
        state = store.open_registry(domain).state

    assert (state.epoch, state.seq) == (epoch, 3)
    assert read_mark(Path(f"{db}-history")) is not None


def test_a_file_restored_from_a_backup_starts_a_new_epoch(domain: Domain, tmp_path: Path) -> None:
    db, copy = tmp_path / "registry.db", tmp_path / "backup.db"
    with SQLiteRegistryStore(db) as store:
        registry = store.open_registry(domain)
        reload(registry, 2)
        backup(db, copy)
        reload(registry, 5)
        served = registry.state
    restore(copy, db)
    with SQLiteRegistryStore(db) as store:
        state = store.open_registry(domain).state

    assert state.epoch != served.epoch
    mark = read_mark(Path(f"{db}-history"))
    assert mark is not None and (mark.epoch, mark.seq) == (state.epoch, state.seq)


def test_a_file_replaced_by_another_history_starts_a_new_epoch(
    domain: Domain, tmp_path: Path
) -> None:
    db, other = tmp_path / "registry.db", tmp_path / "other.db"
    with SQLiteRegistryStore(other) as store:
        reload(store.open_registry(domain), 9)
    with SQLiteRegistryStore(db) as store:
        registry = store.open_registry(domain)
        reload(registry, 2)
        served = registry.state.epoch
    restore(other, db)
    with SQLiteRegistryStore(db) as store:
        state = store.open_registry(domain).state

    assert state.epoch not in (served, None)
    with SQLiteRegistryStore(other) as store:
        assert state.epoch != store.open_registry(domain).state.epoch


def test_after_a_restore_no_seq_is_served_twice_in_one_epoch(
    domain: Domain, tmp_path: Path
) -> None:
    db, copy = tmp_path / "registry.db", tmp_path / "backup.db"
    served: dict[tuple[str, int], str] = {}
    with SQLiteRegistryStore(db) as store:
        registry = store.open_registry(domain)
        backup(db, copy)
        for _ in range(3):
            reload(registry, 1)
            served[registry.state.epoch, registry.state.seq] = registry.state.versions()["plans"]
    restore(copy, db)
    with SQLiteRegistryStore(db) as store:
        registry = store.open_registry(domain)
        for i in range(4):
            registry.reload("plans", {"other": {"funding": "card", "i": i}})
            key = (registry.state.epoch, registry.state.seq)
            assert key not in served
            served[key] = registry.state.versions()["plans"]
