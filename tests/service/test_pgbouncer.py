"""PgBouncer in front of PostgreSQL (issue 41, fault and change suite: pooler).

Transaction pooling hands one client session a different server connection per transaction: the
capture lead's session advisory lock and the wake-ups' ``LISTEN`` mean nothing there (before, 92 %
of requests were 503 and two workers led the capture at once). A worker refuses it at start by
name, whether the registry store (``--db``) or the provider's database (``--database``) goes
through it (docs/decisions.md, "A transaction pooler is refused"). Session pooling keeps a
session per client connection: workers serve through it, and a plain-SQL write reaches every one.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from tests.service.probes import Probe, ready_reports
from tests.service.test_capture_polling import feed_keys, leaders
from tests.service.test_follower_faults import commit, rotate
from tests.support.pgbouncer import PgBouncerUnavailable, pgbouncer
from tests.support.processes import free_port, serving

from invalidation_contracts.domains import get_domain
from invalidation_contracts.server.ingest import SourceError
from invalidation_contracts.server.sql import create_tables, sql_domain
from invalidation_contracts.server.store.dialect import StorageError
from invalidation_contracts.server.worker.follower import DEFAULT_MAX_LAG_S
from invalidation_contracts.server.worker.runtime import open_runtime

pytestmark = [pytest.mark.pgbouncer, pytest.mark.postgres]

POOLER = "a transaction pooler"


@pytest.fixture
def acme(postgres_url: str) -> str:
    create_tables(postgres_url, get_domain("acme_billing"))
    return postgres_url


@pytest.fixture
def transaction_pooled(acme: str) -> Iterator[str]:
    try:
        with pgbouncer(acme, "transaction") as url:
            yield url
    except PgBouncerUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture
def session_pooled(acme: str) -> Iterator[str]:
    try:
        with pgbouncer(acme, "session") as url:
            yield url
    except PgBouncerUnavailable as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize("through", ["store", "database"])
def test_a_transaction_pooler_is_refused_at_start_by_name(
    acme: str, transaction_pooled: str, through: str
) -> None:
    store = transaction_pooled if through == "store" else acme
    database = transaction_pooled if through == "database" else acme
    refused = StorageError if through == "store" else SourceError
    with pytest.raises(refused, match=POOLER):
        open_runtime(sql_domain(get_domain("acme_billing")), store=store, database=database)


@pytest.mark.workers
def test_serve_through_a_transaction_pooler_exits_with_the_reason(
    transaction_pooled: str, tmp_path: Path
) -> None:
    command = [sys.executable, "-m", "invalidation_contracts.cli", "serve"]
    args = ["--domain", "acme_billing", "--database", transaction_pooled]
    done = subprocess.run(
        [*command, *args, "--db", transaction_pooled, "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert POOLER in done.stderr + done.stdout


@pytest.mark.workers
@pytest.mark.study  # two worker processes through the pooler: ~25 s under load (CI runs studies)
def test_workers_through_a_session_pooler_serve_every_write(
    acme: str, session_pooled: str, tmp_path: Path
) -> None:
    args = ["--domain", "acme_billing", "--database", session_pooled, "--db", session_pooled]
    with ExitStack() as stack:
        url = stack.enter_context(serving([*args, "--workers", "2"], tmp_path / "logs"))
        reports = ready_reports(url, 2, 0)
        assert len(leaders(reports)) == 1, "one capture leader, not two"
        with Probe(url) as probe:
            committed = commit(acme, rotate("POOLED1"))  # a writer straight to PostgreSQL
            ready_reports(url, 2, 1)
            time.sleep(DEFAULT_MAX_LAG_S + 0.3)
        assert probe.unverified(committed, 1) == []
        assert not [s for s in probe.seen if s.status == 503], "no 503 on a healthy path"
        assert feed_keys(url) == {"plan_partner_growth": 1}
