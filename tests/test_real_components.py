"""The suite's own machinery for real components: PostgreSQL starts, and CI refuses skips."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]


@pytest.mark.postgres
def test_the_suite_brings_up_a_real_postgresql_server(postgres_url: str) -> None:
    import psycopg

    with psycopg.connect(postgres_url) as conn:
        (version,) = conn.execute("SHOW server_version_num").fetchone()  # type: ignore[misc]
    assert int(version) >= 160000


@pytest.mark.postgres
def test_each_test_gets_an_empty_database(postgres_url: str) -> None:
    import psycopg

    with psycopg.connect(postgres_url) as conn:
        conn.execute("CREATE TABLE t (x int)")
        (tables,) = conn.execute(  # type: ignore[misc]
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchone()
    assert tables == 1


def test_a_skipped_real_component_test_fails_under_ci(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeconftest(
        "import pytest\nfrom tests.conftest import pytest_runtest_makereport  # noqa: F401\n"
    )
    pytester.makepyfile(
        "import pytest\n"
        "@pytest.mark.postgres\n"
        "def test_needs_a_server():\n"
        "    pytest.skip('no server')\n"
        "def test_plain():\n"
        "    pytest.skip('fine to skip')\n"
    )
    pytester.makeini("[pytest]\nmarkers =\n    postgres: x\n")
    monkeypatch.setenv("CI", "true")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1, skipped=1)
    monkeypatch.setenv("CI", "")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(skipped=2)
