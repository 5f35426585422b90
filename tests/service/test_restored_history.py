"""A restored or replaced registry file gets a new epoch (reliability audit 2, N8; SPEC §1).

The file restored from a backup is a valid history at an older seq, under its old epoch: serving
it as it is would hand out seqs clients already saw with other changes. The high-water mark
beside the file (``<registry>-history``) remembers the furthest position served; a file behind
it, or of another epoch, starts a new epoch, while a clean reopen continues the same one.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest
from tests.support.processes import serving
from tests.support.sqlite_files import backup, restore

from invalidation_contracts.domains import get_catalog, get_domain
from invalidation_contracts.server import Domain, Registry
from invalidation_contracts.server.store import SQLiteRegistryStore
from invalidation_contracts.server.store.highwater import HISTORY_LEDGER_ENV, read_mark


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


def test_a_file_restored_together_with_its_mark_starts_a_new_epoch(
    domain: Domain, tmp_path: Path
) -> None:
    """A directory or volume backup carries the ``-history`` mark along (hostile audit H4): the
    host's ledger, outside the registry's directory, still knows what was served."""
    db, copy = tmp_path / "registry.db", tmp_path / "backup.db"
    with SQLiteRegistryStore(db) as store:
        registry = store.open_registry(domain)
        reload(registry, 2)
        backup(db, copy)
        saved_mark = Path(f"{db}-history").read_bytes()
        reload(registry, 5)
        served = registry.state
    restore(copy, db)
    Path(f"{db}-history").write_bytes(saved_mark)
    with SQLiteRegistryStore(db) as store:
        state = store.open_registry(domain).state

    assert state.epoch != served.epoch


def test_a_file_restored_under_another_path_without_a_mark_starts_a_new_epoch(
    domain: Domain, tmp_path: Path
) -> None:
    """The ledger is keyed by the epoch, not the path: a backup restored into a new directory
    (no mark there) of a host that served the history is caught too."""
    db, copy = tmp_path / "registry.db", tmp_path / "backup.db"
    with SQLiteRegistryStore(db) as store:
        registry = store.open_registry(domain)
        reload(registry, 2)
        backup(db, copy)
        reload(registry, 5)
        served = registry.state
    moved = tmp_path / "new-host" / "registry.db"
    moved.parent.mkdir()
    restore(copy, moved)
    with SQLiteRegistryStore(moved) as store:
        state = store.open_registry(domain).state

    assert state.epoch != served.epoch


def test_a_file_moved_at_its_position_keeps_its_epoch(domain: Domain, tmp_path: Path) -> None:
    db = tmp_path / "registry.db"
    with SQLiteRegistryStore(db) as store:
        registry = store.open_registry(domain)
        reload(registry, 3)
        served = registry.state
    moved = tmp_path / "elsewhere" / "registry.db"
    moved.parent.mkdir()
    db.rename(moved)
    with SQLiteRegistryStore(moved) as store:
        state = store.open_registry(domain).state

    assert (state.epoch, state.seq) == (served.epoch, served.seq)


def test_with_the_ledger_off_only_the_mark_beside_the_file_guards(
    domain: Domain, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv(HISTORY_LEDGER_ENV, "off")
    db, copy = tmp_path / "registry.db", tmp_path / "backup.db"
    with SQLiteRegistryStore(db) as store:
        registry = store.open_registry(domain)
        reload(registry, 2)
        backup(db, copy)
        saved_mark = Path(f"{db}-history").read_bytes()
        reload(registry, 5)
        served = registry.state
    restore(copy, db)
    Path(f"{db}-history").write_bytes(saved_mark)
    with SQLiteRegistryStore(db) as store:
        state = store.open_registry(domain).state

    assert (state.epoch, state.seq) == (served.epoch, 2)  # the documented limit without it


@pytest.mark.workers
def test_serve_workers_restored_with_the_whole_directory_start_a_new_epoch(tmp_path: Path) -> None:
    """``serve --workers 2`` on a registry whose directory (file, WAL and ``-history`` mark) was
    put back from a copy taken before five reloads: a new epoch, not the old one at an old seq."""
    home, saved = tmp_path / "registry", tmp_path / "saved"
    home.mkdir()
    registry = home / "registry.sqlite"
    args = ["--domain", "acme_billing", "--db", str(registry), "--workers", "2"]
    env = {"INVALIDATION_CONTRACTS_ADMIN_TOKEN": "restore-token"}
    rotation = get_catalog("acme_billing").read_snapshot("active_csm_codes.rotation-1")

    def versions(url: str) -> tuple[str, int]:
        body = httpx.get(url + "/contract/versions").json()
        return body["contract_epoch"], body["contract_seq"]

    with SQLiteRegistryStore(registry) as store:
        store.open_registry(get_domain("acme_billing"))
    shutil.copytree(home, saved)  # the directory backup: the mark goes with the file
    with serving(args, tmp_path / "logs", env=env) as url:
        for i in range(5):
            answer = httpx.post(
                url + "/admin/reload-table",
                json={"table": rotation.table, "rows": rotation.rows, "version": f"r{i}"},
                headers={"Authorization": "Bearer restore-token"},
            )
            assert answer.status_code == 200, answer.text
        served = versions(url)
    shutil.rmtree(home)
    shutil.copytree(saved, home)
    with serving(args, tmp_path / "logs", env=env) as url:
        restored = versions(url)

    assert served[1] >= 5
    assert restored[0] != served[0]
