"""The pre-registered metrics, each checked on synthetic artifacts written by the real writer."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from invalidation_contracts.bench.artifacts import read_runs
from invalidation_contracts.bench.metrics import (
    aggregate,
    rotation_count,
    run_metrics,
    summary_json,
)


def _load_builder():
    name = "bench_artifact_builder"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).with_name("artifact_builder.py")
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


B = _load_builder()


def only(root: Path):
    [run] = read_runs(root)
    return run_metrics(run)


def cell(cells, **match):
    [c] = [c for c in cells if all(getattr(c, k) == v for k, v in match.items())]
    return c


# --- compliance ----------------------------------------------------------------------------------


def test_compliance_excludes_only_the_stale_slots_as_the_paper_does(tmp_path):
    # governed episodes are 1, 3, 6, 8, 10; 6 is the stale slot. The first one (1) is eligible.
    B.write_run(tmp_path, B.episodes(misses=(1, 6)))
    m = only(tmp_path)
    assert (m.compliance, m.compliance_eligible, m.compliance_first_try) == (0.75, 4, 3)


def test_a_pre_registered_departure_is_excluded_and_recorded_as_one(tmp_path):
    key = B.write_run(tmp_path, B.episodes(misses=(1, 6)))
    meta_path = tmp_path / "runs" / f"{key.slug}.meta.json"
    meta = json.loads(meta_path.read_text())
    meta["extra"]["departures"] = [{"episodes": [1], "reason": "cold first episode"}]
    meta_path.write_text(json.dumps(meta))
    m = only(tmp_path)
    assert (m.compliance, m.compliance_eligible) == (1.0, 3)
    assert (m.departure_slots, m.departure_reasons) == ((1,), ("cold first episode",))


def test_governed_first_try_is_defined_at_a0_where_compliance_is_not(tmp_path):
    B.write_run(tmp_path, B.episodes(misses=(1, 3, 6, 8, 10)), arm="none")
    m = only(tmp_path)
    assert (m.compliance, m.eligible_first_try) == (None, 0.0)


def test_compliance_counts_a_miss_on_an_eligible_episode(tmp_path):
    B.write_run(tmp_path, B.episodes(misses=(8,)))
    m = only(tmp_path)
    assert m.compliance == pytest.approx(3 / 4)


def test_compliance_is_undefined_at_a0(tmp_path):
    B.write_run(tmp_path, B.episodes(), arm="none")
    assert only(tmp_path).compliance is None


def test_compliance_is_undefined_when_no_governed_episode_is_eligible(tmp_path):
    B.write_run(tmp_path, B.episodes(stream=("governed", "funding")), drift=(), stale_slots=(1,))
    assert only(tmp_path).compliance is None


def test_stale_slots_fall_back_to_the_episode_flags_without_metadata(tmp_path):
    key = B.write_run(tmp_path, B.episodes(misses=(6,)))
    meta_path = tmp_path / "runs" / f"{key.slug}.meta.json"
    meta = json.loads(meta_path.read_text())
    del meta["extra"]["stale_slots"]
    meta_path.write_text(json.dumps(meta))
    m = only(tmp_path)
    assert (m.stale_slots, m.compliance) == ((6,), 1.0)


# --- first-try, retries, completion --------------------------------------------------------------


def test_first_try_is_reported_per_class(tmp_path):
    B.write_run(tmp_path, B.episodes(misses=(2, 7)))  # two of the four funding episodes
    m = only(tmp_path)
    assert m.first_try_by_class == {"governed": 1.0, "funding": 0.5, "control": 1.0, "none": 1.0}
    assert m.episodes_by_class == {"governed": 5, "funding": 4, "control": 2, "none": 1}


def test_first_try_is_reported_per_hint_shape(tmp_path):
    B.write_run(tmp_path, B.episodes(misses=(3,)))
    assert only(tmp_path).first_try_by_action == {
        "add_field": 0.8,
        "rewrite_value": 1.0,
        "conditional_rewrite": 1.0,
    }


def test_retries_sum_attempts_beyond_the_first(tmp_path):
    eps = B.episodes()
    eps[1] = B.Ep("funding", first_try=False, attempts=3)
    eps[3] = B.Ep("control", first_try=False, attempts=2)
    B.write_run(tmp_path, eps)
    m = only(tmp_path)
    assert (m.retries, m.attempts) == (3, 15)


def test_an_incomplete_episode_counts_max_attempts_minus_one_retries(tmp_path):
    eps = B.episodes()
    eps[0] = B.Ep("governed", first_try=False, attempts=5, completed=False)
    B.write_run(tmp_path, eps, max_attempts=5)
    m = only(tmp_path)
    assert (m.retries, m.completed_episodes) == (4, 11)


def test_an_exhausted_run_shows_its_completed_count_beside_its_precision(tmp_path):
    eps = B.episodes()[:6] + [
        B.Ep(k, first_try=False, attempts=5, completed=False) for k in B.STREAM[6:]
    ]
    B.write_run(
        tmp_path, eps, memory=[{"episode": 6, "event": "evict", "entry": "g", "stale": True}]
    )
    m = only(tmp_path)
    assert (m.precision, m.completed_episodes, m.episodes) == (1.0, 6, 12)


def test_post_drift_funding_counts_only_funding_after_the_last_drift(tmp_path):
    # funding episodes 2 and 7 precede the benign bump after 8; 9 and 11 follow it.
    B.write_run(tmp_path, B.episodes(misses=(2, 7, 9)))
    m = only(tmp_path)
    assert (m.post_drift_funding, m.post_drift_funding_episodes) == (0.5, 2)


def test_post_drift_funding_is_undefined_without_drift(tmp_path):
    B.write_run(tmp_path, B.episodes(), drift=(), stale_slots=())
    assert only(tmp_path).post_drift_funding is None


def test_the_targeted_class_is_the_class_of_the_stale_slots(tmp_path):
    B.write_run(tmp_path, B.episodes(misses=(6, 10)))
    m = only(tmp_path)
    assert (m.targeted_class, m.targeted_first_try) == ("governed", 0.6)


# --- evictions -----------------------------------------------------------------------------------


TABLE_CLEAR = [
    {"episode": 6, "event": "evict", "entry": "promo", "stale": True},
    {"episode": 6, "event": "evict", "entry": "funding", "stale": False},
    {"episode": 6, "event": "evict", "entry": "control", "stale": False},
    {"episode": 6, "event": "evict", "entry": "other", "stale": False},
]


def test_precision_is_correct_over_all_evictions(tmp_path):
    B.write_run(tmp_path, B.episodes(), arm="table", memory=TABLE_CLEAR, stale=[(5, "promo")])
    m = only(tmp_path)
    assert (m.evictions, m.evictions_correct, m.evictions_wrong, m.precision) == (4, 1, 3, 0.25)


def test_precision_is_undefined_without_evictions(tmp_path):
    B.write_run(tmp_path, B.episodes(), arm="naive")
    assert only(tmp_path).precision is None


def test_recall_is_the_share_of_stale_entries_evicted_after_going_stale(tmp_path):
    memory = [
        {"episode": 6, "event": "evict", "entry": "a", "stale": True},
        {"episode": 3, "event": "evict", "entry": "b", "stale": False},  # before it went stale
    ]
    B.write_run(tmp_path, B.episodes(), memory=memory, stale=[(5, "a"), (5, "b")])
    m = only(tmp_path)
    assert (m.stale_entries, m.stale_entries_evicted, m.recall) == (2, 1, 0.5)


def test_recall_is_undefined_when_nothing_went_stale(tmp_path):
    B.write_run(tmp_path, B.episodes(), memory=[{"episode": 9, "event": "restamp", "entry": "f"}])
    assert only(tmp_path).recall is None


def test_restamps_are_counted(tmp_path):
    memory = [{"episode": 9, "event": "restamp", "entry": e} for e in ("f", "g")]
    B.write_run(tmp_path, B.episodes(), memory=memory)
    assert only(tmp_path).restamps == 2


def test_events_are_split_per_drift_event(tmp_path):
    memory = [
        {"episode": 6, "event": "evict", "entry": "promo", "stale": True},
        {"episode": 8, "event": "restamp", "entry": "x"},  # the last episode before the bump
        {"episode": 9, "event": "restamp", "entry": "funding"},
    ]
    B.write_run(tmp_path, B.episodes(), memory=memory, stale=[(5, "promo")])
    rotation, bump = only(tmp_path).drift
    assert (rotation.evictions, rotation.restamps, rotation.alert) == (1, 1, None)
    assert (bump.kind, bump.evictions, bump.restamps, bump.alert) == ("benign", 0, 1, None)


def test_events_after_the_same_episode_are_one_window_naming_every_part(tmp_path):
    drift = (
        {"after_episode": 5, "kind": "benign", "table": "token_map", "rules": None},
        {"after_episode": 5, "kind": "breaking", "table": "recommended", "rules": None},
    )
    memory = [{"episode": e, "event": "evict", "entry": f"x{e}", "stale": True} for e in (6, 7)]
    B.write_run(tmp_path, B.episodes(), memory=memory, drift=drift)
    [window] = only(tmp_path).drift
    assert window.target == "table token_map (benign) + table recommended (breaking)"
    assert (window.kind, window.evictions, window.evictions_correct) == ("breaking", 2, 2)


SHARED = (
    {"after_episode": 5, "kind": "benign", "table": "token_map", "rules": None},
    {"after_episode": 5, "kind": "breaking", "table": "recommended", "rules": None},
)


def _store(entry: str, *tables: str) -> dict:
    return {"episode": 2, "event": "store", "entry": entry, "tables": list(tables)}


def test_events_after_the_same_episode_each_keep_their_own_figures(tmp_path):
    memory = [
        _store("tok", "token_map"),
        _store("rec1", "recommended"),
        _store("rec2", "recommended"),
        {"episode": 6, "event": "evict", "entry": "tok", "stale": False},
        {"episode": 6, "event": "evict", "entry": "rec1", "stale": True},
        {"episode": 7, "event": "evict", "entry": "rec2", "stale": True},
        {"episode": 7, "event": "restamp", "entry": "x", "tables": ["token_map"]},
    ]
    B.write_run(tmp_path, B.episodes(), memory=memory, drift=SHARED)
    [window] = only(tmp_path).drift
    assert (window.evictions, window.restamps) == (3, 1)
    token, recommended = window.parts
    assert (token.target, token.kind) == ("table token_map", "benign")
    assert (token.evictions, token.evictions_wrong, token.restamps) == (1, 1, 1)
    assert (recommended.target, recommended.kind) == ("table recommended", "breaking")
    assert (recommended.evictions, recommended.evictions_correct, recommended.restamps) == (2, 2, 0)


def test_an_entry_depending_on_both_events_tables_counts_under_each(tmp_path):
    memory = [
        _store("both", "recommended", "token_map"),
        {"episode": 6, "event": "evict", "entry": "both", "stale": True},
    ]
    B.write_run(tmp_path, B.episodes(), memory=memory, drift=SHARED)
    [window] = only(tmp_path).drift
    assert window.evictions == 1
    assert [p.evictions for p in window.parts] == [1, 1]


def test_a_window_of_one_event_has_no_parts(tmp_path):
    B.write_run(tmp_path, B.episodes(), memory=[])
    assert all(w.parts == () for w in only(tmp_path).drift)


def test_a_multi_table_event_is_named_by_its_tables(tmp_path):
    drift = (
        {
            "after_episode": 5,
            "kind": "breaking",
            "rules": None,
            "tables": [
                {"table": "token_map", "snapshot": "a"},
                {"table": "recommended", "snapshot": "b"},
            ],
        },
    )
    B.write_run(tmp_path, B.episodes(), memory=[], drift=drift)
    [window] = only(tmp_path).drift
    assert (window.target, window.rules) == ("tables token_map + recommended", False)


def test_consumer_evictions_descending_from_a_wrong_eviction_are_counted_apart(tmp_path):
    memory = [
        {"episode": 6, "event": "evict", "entry": "w", "stale": False},
        {"episode": 6, "event": "evict", "entry": "c1", "stale": False, "cascaded_from": "w"},
        {"episode": 6, "event": "evict", "entry": "c2", "stale": True, "cascaded_from": "c1"},
        {"episode": 7, "event": "evict", "entry": "r", "stale": True},
        {"episode": 7, "event": "evict", "entry": "c3", "stale": True, "cascaded_from": "r"},
    ]
    B.write_run(tmp_path, B.episodes(), memory=memory)
    assert only(tmp_path).evictions_cascaded_from_wrong == 2


RULE_REMOVAL = [{"after_episode": 5, "kind": "breaking", "rules": "rule-removal"}]


def test_an_alert_is_the_first_alert_record_after_a_rule_event(tmp_path):
    memory = [
        {"episode": 4, "event": "alert", "entry": None},
        {"episode": 7, "event": "evict", "entry": "r", "stale": True},
        {"episode": 6, "event": "alert", "entry": None},
    ]
    B.write_run(
        tmp_path,
        B.episodes(),
        scenario="rules-drifted",
        arm="rules-stamp",
        memory=memory,
        drift=RULE_REMOVAL,
    )
    m = only(tmp_path)
    [window] = m.drift
    assert (m.rules_stream, window.alert, m.alerts) == (True, 6, 2)


def test_an_eviction_is_not_an_alert(tmp_path):
    memory = [{"episode": 6, "event": "evict", "entry": "r", "stale": True}]
    B.write_run(
        tmp_path,
        B.episodes(),
        scenario="rules-drifted",
        arm="row",
        memory=memory,
        drift=RULE_REMOVAL,
        rules_versions=[(1, "aaa"), (6, "bbb")],
    )
    [window] = only(tmp_path).drift
    assert window.alert is None


def test_a_lazy_arm_alerts_on_the_first_rejection_carrying_the_new_rules_fingerprint(tmp_path):
    # Episode 6 passes first try (its response is not read lazily); 7 is the first rejection.
    B.write_run(
        tmp_path,
        B.episodes(misses=(7,)),
        scenario="rules-drifted",
        arm="row+consumers",
        detection="lazy",
        drift=RULE_REMOVAL,
        rules_versions=[(1, "aaa"), (6, "bbb")],
    )
    [window] = only(tmp_path).drift
    assert window.alert == 7


def test_a_lazy_rejection_under_the_old_fingerprint_is_no_alert(tmp_path):
    B.write_run(
        tmp_path,
        B.episodes(misses=(7,)),
        scenario="rules-drifted",
        arm="row+consumers",
        detection="lazy",
        drift=RULE_REMOVAL,
        rules_versions=[(1, "aaa")],
    )
    [window] = only(tmp_path).drift
    assert window.alert is None


def test_drift_events_fall_back_to_the_drift_records(tmp_path):
    B.write_run(tmp_path, B.episodes(), memory=[{"episode": 9, "event": "restamp", "entry": "f"}])
    key = read_runs(tmp_path)[0].meta.key
    meta_path = tmp_path / "runs" / f"{key.slug}.meta.json"
    meta = json.loads(meta_path.read_text())
    del meta["extra"]["drift"]
    meta_path.write_text(json.dumps(meta))
    windows = only(tmp_path).drift
    assert [(w.after_episode, w.target, w.restamps) for w in windows] == [
        (5, "table promo_policy", 0),
        (8, "table funding_policy", 1),
    ]


def test_stale_injections_are_counted_inside_and_outside_the_slots(tmp_path):
    memory = [
        {"episode": 6, "event": "inject", "entry": "promo", "stale": True},
        {"episode": 7, "event": "inject", "entry": "promo", "stale": True},
        {"episode": 8, "event": "inject", "entry": "promo2", "stale": False},
    ]
    B.write_run(tmp_path, B.episodes(), arm="naive", memory=memory)
    m = only(tmp_path)
    assert (m.injections, m.stale_injections, m.stale_injections_outside_slots) == (3, 2, 1)


# --- tokens and wire -----------------------------------------------------------------------------


def test_tokens_are_summed_over_attempts_and_marked_estimated(tmp_path):
    eps = B.episodes(tokens=100)
    eps[0] = B.Ep("governed", first_try=False, attempts=3, tokens=100)
    B.write_run(tmp_path, eps, simulated=True)
    m = only(tmp_path)
    assert (m.tokens_in, m.tokens_out, m.tokens, m.tokens_estimated) == (1400, 140, 1540, True)


def test_billed_tokens_are_not_marked_estimated(tmp_path):
    B.write_run(tmp_path, B.episodes(), planner="claude-haiku-4-5", simulated=False)
    assert only(tmp_path).tokens_estimated is False


def test_wire_cost_splits_envelope_and_suggestion_bytes(tmp_path):
    eps = [B.Ep("governed", first_try=False, attempts=2)]  # one 422 with suggestions, one 200
    B.write_run(tmp_path, eps, drift=(), stale_slots=(), wire=(800, 150, 100, 50))
    w = only(tmp_path).wire
    assert (w.responses, w.with_suggestions, w.response_bytes, w.contract_bytes) == (
        2,
        1,
        1200,
        250,
    )
    assert w.overhead == pytest.approx(250 / 1200)
    assert (w.envelope_share, w.suggestion_share) == (
        pytest.approx(200 / 1200),
        pytest.approx(50 / 1200),
    )
    assert (w.mean_contract_bytes_with_suggestions, w.overhead_with_suggestions) == (150, 150 / 800)
    assert w.max_contract_bytes == 150


# --- aggregation ---------------------------------------------------------------------------------


def test_saving_is_measured_against_the_same_planners_a0_on_the_same_seed(tmp_path):
    B.write_run(tmp_path, B.episodes(tokens=200), arm="none", seed=1)
    B.write_run(tmp_path, B.episodes(tokens=150), arm="row", seed=1)
    B.write_run(tmp_path, B.episodes(tokens=100), arm="none", seed=2)
    B.write_run(tmp_path, B.episodes(tokens=50), arm="row", seed=2)
    row = cell(aggregate(read_runs(tmp_path)), arm="row")
    assert row["token_saving"].mean == pytest.approx((0.25 + 0.5) / 2)
    assert row["token_saving"].n == 2


def test_saving_is_undefined_without_an_a0_of_the_same_planner_and_seed(tmp_path):
    B.write_run(tmp_path, B.episodes(), arm="none", planner="simulated:other")
    B.write_run(tmp_path, B.episodes(), arm="none", seed=7)
    B.write_run(tmp_path, B.episodes(), arm="row")
    row = cell(aggregate(read_runs(tmp_path)), arm="row")
    assert (row["token_saving"].mean, row["token_saving"].n) == (None, 0)


def test_an_arm_in_another_apply_mode_is_measured_against_the_plain_a0(tmp_path):
    B.write_run(tmp_path, B.episodes(tokens=200), arm="none")
    B.write_run(tmp_path, B.episodes(tokens=50), arm="row", apply_mode="client")
    row = cell(aggregate(read_runs(tmp_path)), arm="row")
    assert row["token_saving"].mean == pytest.approx(0.75)


def test_tokens_are_compared_with_the_lazy_reference_arm(tmp_path):
    B.write_run(tmp_path, B.episodes(tokens=200), arm="row+consumers", detection="lazy")
    B.write_run(tmp_path, B.episodes(tokens=250), arm="rules-stamp")
    stamp = cell(aggregate(read_runs(tmp_path)), arm="rules-stamp")
    assert stamp["tokens_vs_lazy"].mean == pytest.approx(0.25)


def test_a_cell_is_the_mean_and_sample_std_over_seeds(tmp_path):
    B.write_run(tmp_path, B.episodes(misses=(3,)), seed=1)  # compliance 3/4
    B.write_run(tmp_path, B.episodes(), seed=2)  # compliance 1
    [c] = aggregate(read_runs(tmp_path))
    assert c.seeds == (1, 2)
    assert c["compliance"].mean == pytest.approx(7 / 8)
    assert c["compliance"].std == pytest.approx(((1 / 8) ** 2 * 2 / 1) ** 0.5)
    assert c["compliance"].n == 2


def test_a_single_seed_has_no_std(tmp_path):
    B.write_run(tmp_path, B.episodes())
    [c] = aggregate(read_runs(tmp_path))
    assert (c["retries"].mean, c["retries"].std, c["retries"].n) == (0, None, 1)


def test_an_undefined_value_is_left_out_of_the_mean(tmp_path):
    B.write_run(
        tmp_path,
        B.episodes(),
        seed=1,
        memory=[{"episode": 6, "event": "evict", "entry": "g", "stale": False}],
    )
    B.write_run(tmp_path, B.episodes(), seed=2)
    [c] = aggregate(read_runs(tmp_path))
    assert (c["precision"].mean, c["precision"].n) == (0.0, 1)


def test_cells_are_split_by_detection_and_apply_mode(tmp_path):
    B.write_run(tmp_path, B.episodes(), arm="row+consumers", detection="lazy")
    B.write_run(tmp_path, B.episodes(), arm="row+consumers", detection="eager")
    B.write_run(tmp_path, B.episodes(), arm="row+consumers", apply_mode="client")
    cells = aggregate(read_runs(tmp_path))
    assert sorted((c.detection, c.apply_mode) for c in cells) == [
        ("eager", "client"),
        ("eager", "planner"),
        ("lazy", "planner"),
    ]


def test_cells_take_the_arm_code_from_the_metadata(tmp_path):
    B.write_run(tmp_path, B.episodes(), arm="row+graph")
    assert aggregate(read_runs(tmp_path))[0].arm_code == "A2DG"


def test_the_summary_is_json_with_every_run_and_cell(tmp_path):
    B.write_run(tmp_path, B.episodes(), arm="none")
    B.write_run(tmp_path, B.episodes(), arm="row")
    summary = json.loads(json.dumps(summary_json(tmp_path)))
    assert len(summary["runs"]) == len(summary["cells"]) == 2
    assert "Compliance" in summary["definitions"]
    assert summary["cells"][1]["stats"]["token_saving"]["n"] == 1
    assert summary["runs"][1]["wire"]["overhead"] > 0


@pytest.mark.parametrize(
    ("name", "parsed"),
    [("payments-rotations-2", ("payments", 2)), ("payments-drifted", None), ("x-rotations-", None)],
)
def test_rotation_streams_are_recognised_by_name(name, parsed):
    assert rotation_count(name) == parsed


# --- unlabelled evictions, honest scoring, the paper's wire fields -------------------------------


def test_an_unlabelled_eviction_is_counted_apart_and_left_out_of_precision(tmp_path):
    memory = [
        {"episode": 6, "event": "evict", "entry": "promo", "stale": True},
        {"episode": 9, "event": "evict", "entry": "promo2", "stale": None},
    ]
    B.write_run(tmp_path, B.episodes(), memory=memory)
    m = only(tmp_path)
    assert (m.evictions, m.evictions_correct, m.evictions_unlabelled, m.precision) == (2, 1, 1, 1.0)


def test_an_accepted_unfaithful_episode_is_neither_completed_nor_first_try(tmp_path):
    B.write_run(tmp_path, B.episodes(), unfaithful=(3, 4))  # a governed and a control episode
    m = only(tmp_path)
    assert (m.completed_episodes, m.completed_unfaithful) == (10, 2)
    assert m.first_try == 10 and m.compliance == pytest.approx(3 / 4)
    assert m.first_try_by_class["control"] == 0.5


def test_records_without_a_faithful_flag_are_faithful(tmp_path):
    key = B.write_run(tmp_path, B.episodes())
    records = tmp_path / "runs" / f"{key.slug}.jsonl"
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    for line in lines:
        line.pop("faithful", None)
    records.write_text("".join(json.dumps(line) + "\n" for line in lines))
    m = only(tmp_path)
    assert (m.completed_episodes, m.completed_unfaithful, m.compliance) == (12, 0, 1.0)


def test_planner_failures_are_counted_and_carry_no_response_bytes(tmp_path):
    B.write_run(tmp_path, B.episodes(misses=(2,)), planner_errors=(2,))
    m = only(tmp_path)
    assert m.planner_errors == 1
    assert m.wire.responses == 12  # the unusable reply reached no server


def test_the_paper_l1_fields_are_measured_apart_from_the_full_contract(tmp_path):
    B.write_run(tmp_path, B.episodes(misses=(1,)), wire=(800, 300, 250, 50), paper_bytes=(200, 180))
    w = only(tmp_path).wire
    assert w.paper_measured == w.responses == 13
    assert w.mean_paper_contract_bytes == 200 and w.mean_paper_envelope_bytes == 180
    assert w.max_paper_contract_bytes == 200
    assert w.paper_overhead == pytest.approx(13 * 200 / (12 * 400 + 800))


def test_funding_is_split_before_and_after_the_last_drift_event(tmp_path):
    # funding episodes 2 and 7 precede the bump after 8; 9 and 11 follow it.
    B.write_run(tmp_path, B.episodes(misses=(2, 9)))
    m = only(tmp_path)
    assert (m.pre_drift_funding, m.pre_drift_funding_episodes) == (0.5, 2)
    assert (m.post_drift_funding, m.post_drift_funding_episodes) == (0.5, 2)


def test_a_class_is_reached_by_drift_when_a_fix_injected_in_it_is_evicted_or_restamped(tmp_path):
    memory = [
        {"episode": 3, "event": "inject", "entry": "promo"},  # governed
        {"episode": 4, "event": "inject", "entry": "ctl"},  # control, never touched
        {"episode": 7, "event": "inject", "entry": "fund"},  # funding
        {"episode": 6, "event": "evict", "entry": "promo", "stale": True},
        {"episode": 9, "event": "restamp", "entry": "fund"},
        {"episode": 2, "event": "restamp", "entry": "ctl"},  # before any drift
    ]
    B.write_run(tmp_path, B.episodes(), memory=memory)
    assert only(tmp_path).drift_reached_classes == ("governed", "funding")
