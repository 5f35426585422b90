"""The capture is installed once per schema version: a worker that finds it current takes no lock
on a declared table; a stale one is installed under a lock_timeout (a clear error, not a queue);
``invalidation-contracts db upgrade`` does it from a deploy step; a renamed declared column is an
error naming the declaration, at capture and at start."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest
from tests.server.sqldb import ProviderDB

from invalidation_contracts.cli import main
from invalidation_contracts.server import Domain, SQLTable
from invalidation_contracts.server.capture.steps import SourceError
from invalidation_contracts.server.sql import DeclarationError, SQLSource
from invalidation_contracts.server.worker.runtime import open_runtime

pytestmark = pytest.mark.postgres

SCHEMA = (
    "CREATE TABLE plans (id TEXT PRIMARY KEY, funding TEXT, promo TEXT)",
    "INSERT INTO plans VALUES ('basic', 'card', NULL)",
)


def shop() -> Domain:
    return Domain("install_shop", {"plans": SQLTable("plans")}, [], [])


@pytest.fixture
def pdb(postgres_url: str) -> ProviderDB:
    db = ProviderDB("postgres", postgres_url, postgres_url)
    db.script(*SCHEMA)
    return db


def holding_lock(pdb: ProviderDB) -> tuple[threading.Event, threading.Event]:
    """Another session holding ROW EXCLUSIVE on plans (an open write transaction) until released."""
    import psycopg

    held, release = threading.Event(), threading.Event()

    def run() -> None:
        with psycopg.connect(pdb.raw) as pg, pg.transaction():
            pg.execute(b"LOCK TABLE plans IN ROW EXCLUSIVE MODE")
            held.set()
            release.wait(30)

    threading.Thread(target=run, daemon=True).start()
    assert held.wait(10)
    return held, release


def test_a_worker_that_finds_the_capture_current_takes_no_lock(pdb: ProviderDB) -> None:
    open_runtime(shop(), database=pdb.url).close()  # installs
    _, release = holding_lock(pdb)
    try:
        source = SQLSource(pdb.url, shop().sql_tables, lock_timeout_s=0.2)
        source.open()  # would need SHARE ROW EXCLUSIVE on plans if it reinstalled
        source.close()
    finally:
        release.set()


def test_a_stale_capture_behind_a_long_transaction_fails_clearly_within_the_lock_timeout(
    pdb: ProviderDB,
) -> None:
    open_runtime(shop(), database=pdb.url).close()
    pdb.script("DROP TRIGGER ic_capture ON plans")
    _, release = holding_lock(pdb)
    try:
        source = SQLSource(pdb.url, shop().sql_tables, lock_timeout_s=0.3)
        with pytest.raises(SourceError, match=r"lock timeout.*db upgrade"):
            source.open()
        source.close()
    finally:
        release.set()
    pdb.script("UPDATE plans SET promo = 'X' WHERE id = 'basic'")  # writers were never queued


def test_check_mode_refuses_a_stale_capture_and_names_db_upgrade(pdb: ProviderDB) -> None:
    source = SQLSource(pdb.url, shop().sql_tables, install="check")
    with pytest.raises(SourceError, match="db upgrade"):
        source.open()
    source.close()


def test_a_disabled_trigger_is_found_stale_and_enabled_again(pdb: ProviderDB) -> None:
    open_runtime(shop(), database=pdb.url).close()
    pdb.script("ALTER TABLE plans DISABLE TRIGGER ic_capture")
    source = SQLSource(pdb.url, shop().sql_tables)
    source.open()
    source.close()
    assert pdb.query(
        "SELECT tgenabled FROM pg_trigger WHERE tgname = 'ic_capture' "
        "AND tgrelid = 'plans'::regclass"
    ) == [("A",)]


def test_db_upgrade_installs_once_and_then_reports_up_to_date(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from invalidation_contracts.domains import get_domain
    from invalidation_contracts.server.sql import create_tables

    create_tables(postgres_url, get_domain("acme_billing"))
    argv = ["db", "upgrade", "--domain", "acme_billing", "--database", postgres_url]
    assert main([*argv, "--check"]) == 1
    assert "db upgrade" in capsys.readouterr().err
    assert main(argv) == 0
    assert "installed the change capture on" in capsys.readouterr().out
    assert main(argv) == 0
    assert "up to date" in capsys.readouterr().out
    assert main([*argv, "--check"]) == 0


def test_db_upgrade_answers_a_bad_command_line_in_one_line(postgres_url: str) -> None:
    code = "import sys; from invalidation_contracts.cli import main; sys.exit(main(sys.argv[1:]))"
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "db",
            "upgrade",
            "--domain",
            "nope",
            "--database",
            postgres_url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr


def test_a_renamed_declared_column_is_an_error_naming_the_declaration(pdb: ProviderDB) -> None:
    explicit = Domain("install_shop", {"plans": SQLTable("plans", columns=["funding"])}, [], [])
    runtime = open_runtime(explicit, database=pdb.url)
    runtime.close()
    pdb.script("ALTER TABLE plans RENAME COLUMN funding TO payment")
    with pytest.raises(Exception) as caught:
        pdb.script("UPDATE plans SET promo = 'Y' WHERE id = 'basic'")
    message = str(caught.value)
    assert "reference table 'plans' (SQL table 'plans') declares column(s) funding" in message
    assert "db upgrade" in message
    assert "no field" not in message
    with pytest.raises(DeclarationError, match=r"reference table 'plans'.*'funding' does not"):
        open_runtime(explicit, database=pdb.url)


def installed_digest(pdb: ProviderDB) -> str:
    ((digest,),) = pdb.query("SELECT digest FROM invalidation_contracts.installed")
    return str(digest)


def test_an_old_worker_never_puts_its_capture_over_the_one_db_upgrade_installed(
    pdb: ProviderDB,
) -> None:
    old = SQLSource(pdb.url, {"plans": SQLTable("plans", columns=["funding"])})
    old.open()  # version 1's worker, running
    new = SQLSource(pdb.url, {"plans": SQLTable("plans", columns=["funding", "promo"])})
    try:
        assert new.upgrade(mode="upgrade") == ["plans"]  # `db upgrade` of version 2
        upgraded = installed_digest(pdb)
        assert old.upgrade(mode="auto") == []  # the old worker's heal at its next reconciliation
        assert old.upgrade(mode="check") == []  # and its start-up check passes
        assert installed_digest(pdb) == upgraded
        pdb.script("UPDATE plans SET promo = 'SPRING' WHERE id = 'basic'")
        assert pdb.query("SELECT row::jsonb->>'promo' FROM invalidation_contracts.capture") == [
            ("SPRING",)
        ], "the newer capture records the column version 2 added"
        assert old.upgrade(mode="upgrade") == ["plans"]  # a rollback's `db upgrade` puts it back
        assert new.upgrade(mode="auto") == [], "and then version 2's capture is the older one"
    finally:
        new.close()
        old.close()
