"""The read-only scrape credential (issue 42, item 3): ``serve --metrics-token-file`` gives
Prometheus a token that reads ``/contract/metrics`` and the operator state and writes nothing; the
admin token still scrapes. A real ``serve --workers 2 --metrics`` on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.service.conftest import TOKEN
from tests.service.processes import serving

from invalidation_contracts.cli import main
from invalidation_contracts.server.auth import BearerAuth

pytestmark = pytest.mark.workers

READER = "scrape-only-token"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
SCRAPER = {"Authorization": f"Bearer {READER}"}
ROW = {"plan_scrape": {"code": "SCR", "csm": "csm_avery_chen"}}


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    where = tmp_path_factory.mktemp("scrape")
    reader = where / "metrics-token"
    reader.write_text(READER + "\n")
    reader.chmod(0o600)
    args = ["--domain", "acme_billing", "--db", str(where / "r.sqlite"), "--workers", "2"]
    args += ["--metrics", "--metrics-token-file", str(reader)]
    env = {"INVALIDATION_CONTRACTS_ADMIN_TOKEN": TOKEN}
    with serving(args, where / "logs", env=env) as address:
        yield address


def _seq(url: str) -> int:
    return int(httpx.get(url + "/contract/versions", timeout=20.0).json()["contract_seq"])


def test_the_metrics_token_reads_the_metrics(url: str) -> None:
    answer = httpx.get(url + "/contract/metrics", headers=SCRAPER, timeout=20.0)

    assert answer.status_code == 200
    assert "invalidation_contracts_worker_seq" in answer.text


def test_the_metrics_token_reads_the_operator_state(url: str) -> None:
    answer = httpx.get(url + "/contract/operator/state", headers=SCRAPER, timeout=20.0)

    assert answer.status_code == 200
    assert "clients" in answer.json()


def test_the_metrics_token_cannot_write_a_table(url: str) -> None:
    before = _seq(url)
    answer = httpx.post(
        url + "/admin/patch-table",
        json={"table": "active_csm_codes", "upsert": ROW},
        headers=SCRAPER,
        timeout=20.0,
    )

    assert answer.status_code == 403
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert "metrics token" in answer.json()["detail"]
    assert _seq(url) == before  # nothing was written


def test_the_metrics_token_cannot_read_an_admin_route(url: str) -> None:
    answer = httpx.get(url + "/admin/quarantine", headers=SCRAPER, timeout=20.0)

    assert answer.status_code == 403


def test_the_admin_token_still_scrapes(url: str) -> None:
    answer = httpx.get(url + "/contract/metrics", headers=ADMIN, timeout=20.0)

    assert answer.status_code == 200


def test_another_token_is_refused_the_metrics(url: str) -> None:
    answer = httpx.get(url + "/contract/metrics", headers={"Authorization": "Bearer x"}, timeout=20)

    assert answer.status_code == 403


def test_serve_refuses_a_metrics_token_equal_to_the_admin_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    same = tmp_path / "token"
    same.write_text(TOKEN)
    same.chmod(0o600)
    monkeypatch.setenv("INVALIDATION_CONTRACTS_ADMIN_TOKEN", TOKEN)

    status = main(
        ["serve", "--domain", "acme_billing", "--ephemeral"] + ["--metrics-token-file", str(same)]
    )

    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert (
        err[-1]
        == "invalidation-contracts: error: the metrics token must differ from the admin token"
    )


def test_a_worker_refuses_a_metrics_token_equal_to_its_admin_token() -> None:
    with pytest.raises(ValueError, match="must differ"):
        BearerAuth("same-token", "same-token")
