"""A serving command's first line says where the history it serves lives; without ``--db`` that
is the default under the user's state directory, and the line says how to choose another."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from invalidation_contracts.cli import main

HINT = "(the default; --db PATH|URL for another store, --ephemeral for none)"


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port something already listens on: the command fails once it has said its first line."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        yield busy.getsockname()[1]


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    return tmp_path / "invalidation-contracts"


def test_serve_names_its_default_history_on_its_first_line(state, busy_port, capsys):
    assert main(["serve", "--domain", "acme_billing", "--port", str(busy_port)]) == 1

    first, *rest = capsys.readouterr().err.splitlines()
    assert first == (
        f"invalidation-contracts: starting a new history at {state / 'acme_billing.sqlite'} {HINT}"
    )
    assert rest[-1].startswith("invalidation-contracts: error:")


def test_serve_says_a_history_it_was_given_without_the_hint(tmp_path, busy_port, capsys):
    db = tmp_path / "mine.sqlite"

    main(["serve", "--domain", "acme_billing", "--port", str(busy_port), "--db", str(db)])

    first = capsys.readouterr().err.splitlines()[0]
    assert first == f"invalidation-contracts: starting a new history at {db}"


@pytest.mark.mcp
def test_serve_mcp_names_its_default_history_on_its_first_line(state, busy_port, capsys):
    argv = ["serve-mcp", "--domain", "acme_billing", "--transport", "http"]
    assert main([*argv, "--port", str(busy_port)]) == 1

    first = capsys.readouterr().err.splitlines()[0]
    assert first.startswith("invalidation-contracts: starting a new history at ")
    assert first.endswith(HINT)
