"""The second reliability audit's bad CLI invocations (N17): each one line, no traceback, the
right exit status (2: the command line cannot run as given; 1: the command could not be done),
and nothing changed on disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.service.test_cli_audit import one_line, run


@pytest.mark.parametrize("spec", ["os:system", "json:loads"])
def test_a_domain_spec_naming_a_callable_that_needs_arguments_is_a_usage_error(capsys, spec):
    status, _, err = run(capsys, "serve", "--domain", spec, "--port", "1")
    assert status == 2 and "unexpected" not in one_line(err)


def test_a_database_url_sqlalchemy_cannot_parse_is_one_line(capsys):
    pytest.importorskip("sqlalchemy")
    status, _, err = run(capsys, "serve", "--domain", "acme_billing", "--database", "notaurl")
    assert status == 1 and "unexpected" not in err and "notaurl" in err.strip().splitlines()[-1]


def test_too_many_workers_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as stopped:
        run(capsys, "serve", "--domain", "acme_billing", "--workers", "100000", "--db", "x.db")
    assert stopped.value.code == 2
    assert "at most 256" in capsys.readouterr().err


@pytest.mark.parametrize(
    "content",
    [
        b'{"table": "plans", "rows": {"a": {"n": ' + b"9" * 5000 + b"}}}",
        bytes(range(256)),
        '{"table": "plans", "rows": {}}'.encode("utf-16"),
    ],
    ids=["5000-digit integer", "binary", "utf-16"],
)
def test_a_snapshot_that_is_not_readable_json_is_one_line(capsys, tmp_path, content):
    snapshot = tmp_path / "plans.json"
    snapshot.write_bytes(content)
    status, _, err = run(
        capsys,
        "reload",
        "--snapshot",
        str(snapshot),
        "--url",
        "http://127.0.0.1:9",
        "--admin-token-file",
        str(_token(tmp_path)),
    )
    assert status == 1 and "unexpected" not in one_line(err)


def test_a_version_over_128_characters_is_a_usage_error_before_anything_is_sent(capsys, tmp_path):
    snapshot = tmp_path / "plans.json"
    snapshot.write_text(json.dumps({"table": "plans", "rows": {}}))
    status, _, err = run(
        capsys,
        "reload",
        "--snapshot",
        str(snapshot),
        "--version",
        "9" * 129,
        "--url",
        "http://127.0.0.1:9",
        "--admin-token-file",
        str(_token(tmp_path)),
    )
    assert status == 2 and "unexpected" not in one_line(err)


def test_memory_stats_on_an_empty_file_leaves_it_empty(capsys, tmp_path):
    empty = tmp_path / "memory.db"
    empty.write_bytes(b"")
    status, _, err = run(capsys, "memory", "stats", "--db", str(empty))
    assert status == 1 and "empty" in one_line(err)
    assert empty.stat().st_size == 0 and sorted(p.name for p in tmp_path.iterdir()) == ["memory.db"]


def _token(where: Path) -> Path:
    token = where / "token"
    token.write_text("t0ken")
    token.chmod(0o600)
    return token
