"""``invalidation-contracts preflight --planner SPEC``."""

from __future__ import annotations

import json

from invalidation_contracts.cli import main


def test_json_output_reports_each_action_type(capsys):
    assert main(["preflight", "--planner", "simulated:exact", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["planner"] == "simulated:exact" and data["simulated"] is True
    assert {a["action"]: a["rate"] for a in data["actions"]} == {
        "add_field": 1.0,
        "rewrite_value": 1.0,
        "conditional_rewrite": 1.0,
    }


def test_seed_and_rounds_reach_the_preflight(capsys):
    main(
        [
            "preflight",
            "--planner",
            "simulated:conservative",
            "--json",
            "--seed",
            "4",
            "--rounds",
            "2",
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert data["seed"] == 4
    assert all(a["injected"] == 6 for a in data["actions"])


def test_table_output_is_labelled_simulated_and_names_the_served_model(capsys):
    assert main(["preflight", "--planner", "simulated:conservative"]) == 0
    out = capsys.readouterr().out
    assert "simulated" in out
    assert "served model: simulated:conservative" in out
    for action in ("add_field", "rewrite_value", "conditional_rewrite"):
        assert action in out


def test_bad_spec_is_a_one_line_error_with_exit_status_2(capsys):
    assert main(["preflight", "--planner", "simulated:reckless"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown simulated profile" in err


def test_missing_key_is_a_one_line_error_with_exit_status_2(capsys, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert main(["preflight", "--planner", "openai:gpt-5-mini"]) == 2
    assert "OPENAI_API_KEY" in capsys.readouterr().err


def test_unreachable_server_is_a_one_line_error_with_exit_status_1(capsys):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    spec = f"openai-compatible:m@http://127.0.0.1:{port}/v1"
    assert main(["preflight", "--planner", spec, "--max-retries", "0"]) == 1
    assert capsys.readouterr().err.count("\n") == 1


def test_planner_options_reach_the_planner(capsys):
    args = ["preflight", "--planner", "simulated:exact", "--json", "--concurrency", "1"]
    assert main([*args, "--planner-option", "memory_add_field_rate=0"]) == 0
    rates = {a["action"]: a["rate"] for a in json.loads(capsys.readouterr().out)["actions"]}
    assert rates["add_field"] == 0.0


def test_an_option_no_planner_takes_is_a_usage_error(capsys):
    args = ["preflight", "--planner", "simulated:exact", "--planner-option", "timeout=5"]
    assert main(args) == 2
    assert "timeout apply to none of the planners (simulated)" in capsys.readouterr().err


def test_a_malformed_option_is_a_usage_error(capsys):
    assert main(["preflight", "--planner", "simulated:exact", "--planner-option", "timeout"]) == 2
    assert "not KEY=VALUE" in capsys.readouterr().err


def test_an_unknown_local_model_is_one_line_naming_the_known_ones(capsys):
    assert main(["preflight", "--planner", "local:llama-70b"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "qwen2.5-coder-0.5b" in err


def test_a_missing_model_file_is_one_line(capsys, tmp_path):
    assert main(["preflight", "--planner", f"local:{tmp_path / 'absent.gguf'}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err
