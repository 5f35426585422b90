import json

import pytest

from invalidation_contracts.cli import main
from invalidation_contracts.protocol import GraphEdge, Level, Suggestion
from invalidation_contracts.protocol.levels import LEVEL_ADDS
from invalidation_contracts.protocol.models import WIRE_MODELS, Problem
from invalidation_contracts.protocol.problems import ProblemType, problem
from invalidation_contracts.protocol.schema import json_schemas, write_schemas


def test_to_wire_omits_absent_optional_fields():
    s = Suggestion(type="T", parameters={"promo_code": "X"}, action="add_field")
    assert s.to_wire() == {"type": "T", "parameters": {"promo_code": "X"}, "action": "add_field"}


def test_unknown_fields_from_a_newer_server_are_ignored():
    s = Suggestion.model_validate(
        {"type": "T", "parameters": {}, "action": "rewrite_value", "future_field": 1}
    )
    assert "future_field" not in s.to_wire()


def test_graph_edge_uses_from_on_the_wire():
    edge = GraphEdge.model_validate({"from": "a:1", "to": "b:2", "relation": "r"})
    assert edge.to_wire() == {"from": "a:1", "to": "b:2", "relation": "r"}


def test_paper_level_one_listing_parses():
    body = {
        "type": "USE_REQUIRED_FUNDING_TYPE",
        "parameters": {"payment_method_token": "acme_pm_visa_credit"},
        "action": "conditional_rewrite",
        "cache_hint": "cacheable",
        "table": "recommended_credit_token",
    }
    assert Suggestion.model_validate(body).to_wire() == body


@pytest.mark.parametrize(
    "text, level",
    [("6", Level.RULES_FINGERPRINT), ("L4", Level.DEPENDENCY_VECTORS), (0, Level.RAW)],
)
def test_level_parse_accepts_numbers_and_l_prefix(text, level):
    assert Level.parse(text) is level


@pytest.mark.parametrize("bad", ["7", "L-1", "high", ""])
def test_level_parse_rejects_unknown_levels(bad):
    with pytest.raises(ValueError, match="unknown protocol level"):
        Level.parse(bad)


def test_consumption_levels_add_nothing_to_the_wire():
    assert not Level.PATCH_PROTOCOL.is_wire and not Level.AMENDED_INPUT.is_wire
    assert LEVEL_ADDS[Level.PATCH_PROTOCOL] == () == LEVEL_ADDS[Level.AMENDED_INPUT]


def test_every_wire_model_has_a_json_schema():
    schemas = json_schemas()
    assert set(schemas) == set(WIRE_MODELS)
    assert "from" in schemas["GraphEdge"]["properties"]


def test_write_schemas_writes_one_file_per_model(tmp_path):
    paths = write_schemas(tmp_path)
    assert len(paths) == len(WIRE_MODELS)
    assert (tmp_path / "Suggestion.schema.json").exists()


def test_writing_schemas_again_replaces_the_files_written_before(tmp_path):
    write_schemas(tmp_path)
    (tmp_path / "Suggestion.schema.json").write_text("stale")

    write_schemas(tmp_path)

    assert json.loads((tmp_path / "Suggestion.schema.json").read_text())["title"] == "Suggestion"
    assert not [path for path in tmp_path.iterdir() if path.name.endswith(".tmp")]


def test_schema_out_refuses_a_planted_symlink_and_leaves_its_target_alone(tmp_path, capsys):
    """``schema --out DIR`` in a shared DIR never writes through a link another user planted
    there (hostile audit H13)."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "schemas"
    out.mkdir()
    (out / "ChangeSetRequest.schema.json").symlink_to(victim)

    status = main(["schema", "--out", str(out)])

    assert status == 1
    assert "is a symbolic link; refusing" in capsys.readouterr().err
    assert victim.read_text() == "precious"
    assert (out / "ChangeSetRequest.schema.json").is_symlink()


def test_problem_carries_stable_type_uri_and_status():
    doc = problem(ProblemType.RESYNC_REQUIRED, "old position")
    assert isinstance(doc, Problem)
    assert doc.type == "urn:invalidation-contracts:problem:resync-required"
    assert doc.status == 410 and doc.success is False


def test_problem_type_round_trips_from_its_uri():
    for kind in ProblemType:
        assert ProblemType.from_uri(kind.uri) is kind
    assert ProblemType.from_uri("about:blank") is None


def test_a_patch_operation_keeps_a_null_value():
    from invalidation_contracts.protocol import PatchOperation

    op = PatchOperation(op="replace", path="/promo_code", value=None)
    assert op.to_wire() == {"op": "replace", "path": "/promo_code", "value": None}
    assert PatchOperation(op="remove", path="/x").to_wire() == {"op": "remove", "path": "/x"}


def test_the_published_schemas_in_docs_match_the_models(tmp_path):
    from pathlib import Path

    published = Path(__file__).resolve().parents[2] / "docs" / "schema"
    write_schemas(tmp_path)
    fresh = {p.name: p.read_text() for p in tmp_path.glob("*.schema.json")}
    assert {p.name: p.read_text() for p in published.glob("*.schema.json")} == fresh, (
        "docs/schema is stale: run `invalidation-contracts schema --out docs/schema`"
    )


def test_to_json_is_the_compact_encoding_of_to_wire():
    import json

    from invalidation_contracts.protocol import RecoveryFeedback
    from invalidation_contracts.protocol.problems import ProblemType, problem

    doc = problem(
        ProblemType.POLICY_VIOLATION,
        "détail ünïcode",
        recovery_feedback=RecoveryFeedback(
            suggestions=[
                Suggestion(
                    type="T",
                    parameters={"promo_code": None, "n": 1.5},
                    action="rewrite_value",
                    cache_hint="cacheable",
                    tables=[{"table": "t", "version": "1.0.0", "keys": ["k"]}],
                    rules=[("a", "b", "r")],
                    patch=[{"op": "replace", "path": "/promo_code", "value": None}],
                )
            ]
        ),
    )
    expected = json.dumps(doc.to_wire(), ensure_ascii=False, separators=(",", ":")).encode()
    assert doc.to_json() == expected
