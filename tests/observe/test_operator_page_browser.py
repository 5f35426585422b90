"""The operator page in a real headless Chromium (Debian's ``chromium`` and ``chromium-driver``).

A provider serves acme_billing from a SQLite database; the page is loaded, a plain-SQL UPDATE is
committed from another process, and the page must show the table's new version and the row diff
within 2 s of the commit. A screenshot is saved as a test artifact
(``$INVALIDATION_CONTRACTS_TEST_ARTIFACTS``, default ``test-artifacts/`` at the repository root).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from selenium.webdriver.support.ui import WebDriverWait
from tests.service.conftest import TOKEN, running
from tests.support.acme_sqlite import acme_on_sqlite
from tests.support.processes import serving

from invalidation_contracts.domains import get_domain
from invalidation_contracts.observe import instrument
from invalidation_contracts.server.http.app import create_app

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
ROTATE = "UPDATE active_csm_codes SET code = 'WINTERLAUNCH26' WHERE key = 'plan_partner_growth'"
ARTIFACTS = Path(
    os.environ.get(
        "INVALIDATION_CONTRACTS_TEST_ARTIFACTS", Path(__file__).parents[2] / "test-artifacts"
    )
)


@pytest.fixture
def browser() -> Iterator[object]:
    """Headless Chromium driven through chromedriver, sending the admin token on every request."""
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("Debian's chromium and chromium-driver are not installed")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    options.add_argument("--window-size=1280,1400")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd(
            "Network.setExtraHTTPHeaders", {"headers": {"Authorization": f"Bearer {TOKEN}"}}
        )
        yield driver
    finally:
        driver.quit()


def commit_elsewhere(database: Path, statement: str) -> None:
    code = (
        "import sqlite3, sys; db = sqlite3.connect(sys.argv[1]); "
        "db.execute(sys.argv[2]); db.commit(); db.close()"
    )
    subprocess.run([sys.executable, "-c", code, str(database), statement], check=True, timeout=60)


def test_the_page_shows_a_plain_sql_change_within_two_seconds(browser, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    app, database = acme_on_sqlite(tmp_path, admin_token=TOKEN)
    instrument(app, app.state.service)
    with running(app) as url:
        versions = httpx.get(url + "/contract/versions").json()["table_versions"]
        browser.get(url + "/contract/operator?node=active_csm_codes:plan_partner_growth")
        version_cell = '[data-table="active_csm_codes"] .version'
        # Read through the page's own DOM: the script replaces elements as it re-renders.
        read = (
            "return [document.querySelector(arguments[0]).textContent,"
            " [...document.querySelectorAll('table.change tr.changed')]"
            ".map(row => row.textContent)]"
        )
        before = browser.execute_script(read, version_cell)[0]
        assert before == versions["active_csm_codes"]
        time.sleep(0.6)  # the script has polled at least once: what follows is a live update

        commit_elsewhere(database, ROTATE)
        committed = time.monotonic()

        def updated(driver) -> bool:
            cell, diffs = driver.execute_script(read, version_cell)
            return cell != before and any("WINTERLAUNCH26" in d for d in diffs)

        WebDriverWait(browser, 2.0, poll_frequency=0.02).until(updated)
        elapsed = time.monotonic() - committed
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        assert browser.save_screenshot(str(ARTIFACTS / "operator-page.png"))
        diff = browser.find_element(By.CSS_SELECTOR, "table.change tr.changed").text
        caption = browser.find_element(By.CSS_SELECTOR, "table.change caption").text
        graph = browser.find_element(By.ID, "graph").text
    assert elapsed < 2.0
    assert "plan_partner_growth" in diff and "WINTERLAUNCH26" in diff
    assert "(captured)" in caption and "active_csm_codes" in caption
    assert "WINTERLAUNCH26" in graph  # the chosen node's row, re-rendered live


def test_the_page_without_the_token_asks_the_browser_for_it(browser, tmp_path: Path) -> None:
    app = create_app(get_domain("acme_billing"), admin_token=TOKEN)
    instrument(app, app.state.service)
    browser.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {}})
    with running(app) as url:
        reply = httpx.get(url + "/contract/operator")
        browser.get(url + "/contract/operator")
        text = browser.find_element("tag name", "body").text
    assert reply.status_code == 401
    assert reply.headers["www-authenticate"].startswith("Basic ")
    assert "Contract operator" not in text


@pytest.mark.workers
def test_the_page_of_four_workers_opened_with_basic_credentials_in_the_url_shows_them_all(
    browser, tmp_path: Path
) -> None:
    """``serve --workers 4 --metrics``: the page is opened as ``http://operator:TOKEN@host/…``
    (no header: the fetches of its script used to fail, "server unreachable"); it lists all four
    workers, the totals of every worker (one client's requests, each on a fresh connection,
    spread over them) and the figures' time series."""
    from tests.observe.test_metrics_workers import DRAFT, PATTERN, REFUSED, ROUTE

    browser.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {}})
    args = ["--domain", "acme_billing", "--db", str(tmp_path / "r.sqlite"), "--workers", "4"]
    env = {"INVALIDATION_CONTRACTS_ADMIN_TOKEN": TOKEN}
    read = (
        "return [document.querySelectorAll('#fleet tr[data-worker]').length,"
        " document.querySelector('[data-total=answers]').textContent,"
        " document.querySelector('[data-total=episodes]').textContent,"
        " document.querySelector('[data-series=first_try_rate]')?.dataset.points,"
        " document.getElementById('updated').textContent]"
    )
    with serving([*args, "--metrics"], tmp_path / "logs", env=env) as url:
        browser.get(url.replace("http://", f"http://operator:{TOKEN}@") + "/contract/operator")
        for kind in PATTERN:
            body = REFUSED if kind == "B" else DRAFT
            httpx.post(url + ROUTE, json=body, headers={"Authorization": "Bearer agent"})

        def shown(driver) -> bool:
            workers, answers, episodes, points, _status = driver.execute_script(read)
            folded = episodes == "5"  # the shared scores fold about a second after the answers
            return (
                workers == 4 and answers == str(len(PATTERN)) and folded and int(points or 0) >= 2
            )

        WebDriverWait(browser, 30.0, poll_frequency=0.1).until(shown)
        workers, answers, episodes, points, status = browser.execute_script(read)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        assert browser.save_screenshot(str(ARTIFACTS / "operator-page-workers.png"))
    assert "failed" not in status
    assert episodes == "5"  # the fold of one worker over the whole pattern (shared scores)
