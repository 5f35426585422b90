"""``serve --config FILE.toml`` (and ``serve-mcp``): every option can come from the file, flags
override it, and a file that says what no flag could is a one-line usage error (exit 2).

The options are enumerated from the command line's own parser, so a new flag without an example
here fails ``test_every_option_can_be_set_from_the_file`` until someone shows it works from a file.
"""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path
from typing import Any

import pytest

from invalidation_contracts.cli import main, mcp, service
from invalidation_contracts.cli.command import Parser
from invalidation_contracts.cli.config_file import CONFIG_OPTION

#: A TOML value for every long option of the commands that take ``--config``.
EXAMPLES: dict[str, dict[str, Any]] = {
    "serve": {
        "domain": "recipes",
        "level": 3,
        "db": "/srv/registry.sqlite",
        "ephemeral": True,
        "database": "sqlite:////srv/shop.sqlite",
        "capture": "logical",
        "declare": "/etc/ic/tables.toml",
        "create-tables": True,
        "host": "0.0.0.0",
        "port": 9100,
        "workers": 4,
        "admin-token-file": "/run/secrets/admin",
        "metrics-token-file": "/run/secrets/metrics",
        "header-timeout": 7.5,
        "body-timeout": 12,
        "body-deadline": 40,
        "max-connections": 500,
        "protect-graph": True,
        "allowed-host": ["api.example", "api2.example"],
        "max-lag": 3,
        "stall-timeout": 30,
        "reconcile-interval": 120,
        "poll-interval": 0.5,
        "max-watch-streams": 100,
        "max-watch-per-client": 4,
        "client-key-secret-file": "/run/secrets/client-key",
        "client-scores": "worker",
        "metrics": True,
        "signing-key": ["/etc/ic/k1.pem", "/etc/ic/k2.pem"],
        "opaque-key-env": "OPAQUE_SECRET",
        "log-format": "json",
        "otlp": "http://collector:4318",
    },
    "serve-mcp": {
        "domain": "recipes",
        "level": 2,
        "db": "/srv/registry.sqlite",
        "ephemeral": True,
        "transport": "http",
        "host": "0.0.0.0",
        "port": 9200,
        "name": "billing",
        "tool-name": ["POST /v1/subscriptions=create_subscription"],
        "allowed-host": ["mcp.example"],
        "allowed-origin": ["https://app.example"],
        "admin-token-file": "/run/secrets/admin",
        "header-timeout": 5,
        "body-timeout": 6,
        "body-deadline": 7,
        "max-connections": 50,
        "idle-timeout": 120,
        "protect-graph": True,
        "envelope": "inline",
        "log-format": "json",
        "signing-key": ["/etc/ic/k1.pem"],
        "opaque-key-env": "OPAQUE_SECRET",
    },
}


def _parser() -> argparse.ArgumentParser:
    """The commands that take ``--config`` (the whole command line's parser costs 3x more)."""
    parser = Parser(prog="invalidation-contracts")
    commands = parser.add_subparsers(dest="command")
    service.register(commands)
    mcp.register(commands)
    return parser


def _command(name: str) -> argparse.ArgumentParser:
    for action in _parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: argparse.ArgumentParser = action.choices[name]
            return found
    raise AssertionError("no subcommands")


def _options(name: str) -> dict[str, argparse.Action]:
    found = {}
    for action in _command(name)._actions:
        for option in action.option_strings:
            if option.startswith("--") and option not in ("--help", CONFIG_OPTION):
                found[option[2:]] = action
    return found


def _toml(table: dict[str, Any]) -> str:
    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return '"' + v + '"'
        if isinstance(v, list):
            return "[" + ", ".join(value(item) for item in v) + "]"
        return str(v)

    return "".join(f"{key} = {value(v)}\n" for key, v in table.items())


def _flags(key: str, value: Any) -> list[str]:
    if value is True:
        return ["--" + key]
    if isinstance(value, list):
        return [part for item in value for part in ("--" + key, str(item))]
    return ["--" + key, str(value)]


def _parsed(argv: list[str]) -> dict[str, Any]:
    found = vars(_parser().parse_args(argv))
    found.pop("config", None)
    return found


@pytest.mark.parametrize("command", sorted(EXAMPLES))
def test_every_option_has_an_example(command: str) -> None:
    assert set(_options(command)) == set(EXAMPLES[command]), "give each new flag an example"


@pytest.mark.parametrize("command", sorted(EXAMPLES))
def test_every_option_can_be_set_from_the_file(command: str, tmp_path: Path) -> None:
    """Each option alone in a file parses as the same option given as a flag."""
    bare = _parsed([command, "--domain", "acme_billing"])
    for key, value in EXAMPLES[command].items():
        table = {key: value} if key == "domain" else {"domain": "acme_billing", key: value}
        config = tmp_path / f"{key}.toml"
        config.write_text(_toml(table))
        assert tomllib.loads(config.read_text()) == table
        domain = [] if key == "domain" else ["--domain", "acme_billing"]

        from_file = _parsed([command, CONFIG_OPTION, str(config)])
        from_flags = _parsed([command, *domain, *_flags(key, value)])

        assert from_file == from_flags, key
        assert from_file != bare, key


def test_a_flag_overrides_the_file(tmp_path: Path) -> None:
    config = tmp_path / "serve.toml"
    config.write_text('domain = "recipes"\nmax-lag = 3\nworkers = 2\n')

    parsed = _parsed(["serve", "--max-lag", "4", CONFIG_OPTION, str(config)])

    assert (parsed["domain"], parsed["max_lag"], parsed["workers"]) == ("recipes", 4.0, 2)


def test_a_flag_of_an_exclusive_group_drops_the_files_other_member(tmp_path: Path) -> None:
    config = tmp_path / "serve.toml"
    config.write_text('domain = "recipes"\ndb = "/srv/r.sqlite"\n')

    parsed = _parsed(["serve", CONFIG_OPTION, str(config), "--ephemeral"])

    assert (parsed["ephemeral"], parsed["db"]) == (True, None)


def _usage_error(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> str:
    config = tmp_path / "serve.toml"
    config.write_text(text)
    with pytest.raises(SystemExit) as exited:
        main(["serve", CONFIG_OPTION, str(config)])
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert len(err.strip().splitlines()) == 1, err
    return err


def test_an_unknown_key_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    err = _usage_error(tmp_path, 'domain = "recipes"\nmax_lag = 3\n', capsys)

    assert "unknown key 'max_lag': there is no --max_lag" in err


def test_a_value_the_flag_would_refuse_is_a_usage_error(tmp_path, capsys):
    err = _usage_error(tmp_path, 'domain = "recipes"\nport = 70000\n', capsys)

    assert "port: must be a port number 0-65535" in err


def test_a_switch_needs_a_boolean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _usage_error(tmp_path, 'domain = "recipes"\nmetrics = "yes"\n', capsys)

    assert "metrics: expected true or false" in err


def test_both_members_of_an_exclusive_group_are_a_usage_error(tmp_path, capsys):
    err = _usage_error(tmp_path, 'domain = "recipes"\ndb = "r.sqlite"\nephemeral = true\n', capsys)

    assert "'db' and 'ephemeral' cannot both be set" in err


def test_a_file_that_is_not_toml_is_a_usage_error(tmp_path, capsys):
    err = _usage_error(tmp_path, "domain = \n", capsys)

    assert "is not a TOML file" in err


def test_a_missing_file_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as exited:
        main(["serve", CONFIG_OPTION, str(tmp_path / "absent.toml")])

    assert exited.value.code == 2
    assert "cannot read the config file" in capsys.readouterr().err
