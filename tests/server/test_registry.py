from __future__ import annotations

import threading
from typing import Any

import pytest

from invalidation_contracts.protocol.problems import ProblemType, ProtocolError
from invalidation_contracts.server import Registry, Rule


def make_registry(**options: Any) -> Registry:
    tables: dict[str, dict[str, dict[str, Any]]] = {
        "codes": {"p1": {"code": "S25"}, "p2": {"code": "X"}},
        "eligible": {"S25": {"ok": True}, "X": {"ok": True}},
        "tokens": {"t1": {"funding": "debit"}},
    }
    return Registry(
        tables,
        [Rule("codes", "eligible", "requires_recognition", via="code")],
        **options,
    )


def test_initial_load_is_seq_zero_at_version_one() -> None:
    reg = make_registry()
    assert reg.state.seq == 0
    assert reg.state.versions() == {"codes": "1.0.0", "eligible": "1.0.0", "tokens": "1.0.0"}


def test_content_change_bumps_the_minor_version_and_the_seq() -> None:
    reg = make_registry()
    result = reg.reload("codes", {"p1": {"code": "W26"}, "p2": {"code": "X"}})
    assert (result.old_version, result.new_version) == ("1.0.0", "1.1.0")
    assert result.diff.changed == ["p1"] and not result.touch
    assert reg.state.seq == result.contract_seq == 1


def test_operator_version_is_used_when_given() -> None:
    result = make_registry().reload("tokens", {"t1": {"funding": "credit"}}, version="2.0.0")
    assert result.new_version == "2.0.0"


@pytest.mark.parametrize("version", ["1.0.0", "0.9.0", " 2.0"])
def test_a_version_that_does_not_move_forward_is_refused_and_nothing_changes(version: str) -> None:
    reg = make_registry()
    before = reg.state
    with pytest.raises(ProtocolError) as err:
        reg.reload("tokens", {"t1": {"funding": "credit"}}, version=version)
    assert err.value.kind is ProblemType.VERSION_CONFLICT
    assert reg.state is before


def test_identical_content_with_a_new_version_is_a_touch() -> None:
    reg = make_registry()
    result = reg.reload("tokens", {"t1": {"funding": "debit"}}, version="1.0.1")
    assert result.touch and not result.diff
    assert reg.state.versions()["tokens"] == "1.0.1"
    assert reg.changes(0).tables[0].touch


def test_identical_content_without_a_version_changes_nothing() -> None:
    reg = make_registry()
    result = reg.reload("tokens", {"t1": {"funding": "debit"}})
    assert result.new_version == result.old_version and reg.state.seq == 0


def test_reload_of_an_unknown_table_is_refused() -> None:
    with pytest.raises(ProtocolError) as err:
        make_registry().reload("nope", {})
    assert err.value.kind is ProblemType.UNKNOWN_TABLE


def test_rows_of_the_wrong_shape_leave_the_registry_unchanged() -> None:
    reg = make_registry()
    before = reg.state
    with pytest.raises(ProtocolError):
        reg.reload("codes", {"p1": ["not", "an", "object"]})
    assert reg.state is before


def test_patch_upserts_and_deletes_rows() -> None:
    reg = make_registry()
    result = reg.patch("codes", upsert={"p3": {"code": "X"}}, delete=["p2"])
    assert result.diff.added == ["p3"] and result.diff.removed == ["p2"]
    assert set(reg.state.tables["codes"].rows) == {"p1", "p3"}


def test_patch_refuses_a_key_both_upserted_and_deleted() -> None:
    with pytest.raises(ProtocolError, match="both upserted and deleted"):
        make_registry().patch("codes", upsert={"p1": {}}, delete=["p1"])


def test_affected_downstream_walks_the_graph_as_it_was_before_the_reload() -> None:
    reg = make_registry()
    result = reg.reload("codes", {"p1": {"code": "W26"}, "p2": {"code": "X"}})
    assert result.affected_downstream == ["eligible:S25"]
    assert reg.state.graph.successors("codes:p1") == {("eligible:W26", "requires_recognition")}


def test_changes_since_lists_each_row_change_with_its_seq() -> None:
    reg = make_registry()
    reg.reload("codes", {"p1": {"code": "W26"}, "p2": {"code": "X"}})
    reg.reload("tokens", {"t1": {"funding": "credit"}})
    feed = reg.changes(1)
    assert [(c.table, c.key, c.op, c.seq) for c in feed.rows] == [("tokens", "t1", "changed", 2)]
    assert feed.last_seq == 2 and feed.contract_epoch == reg.state.epoch


def test_changes_can_be_filtered_by_table() -> None:
    reg = make_registry()
    reg.reload("codes", {"p1": {"code": "W26"}, "p2": {"code": "X"}})
    reg.reload("tokens", {"t1": {"funding": "credit"}})
    assert [t.table for t in reg.changes(0, tables=["tokens"]).tables] == ["tokens"]


def test_changes_since_a_position_older_than_the_log_requires_resync() -> None:
    reg = make_registry(log_capacity=1)
    reg.reload("tokens", {"t1": {"funding": "credit"}})
    reg.reload("tokens", {"t1": {"funding": "debit"}})
    assert reg.changes(1).last_seq == 2
    with pytest.raises(ProtocolError) as err:
        reg.changes(0)
    assert err.value.kind is ProblemType.RESYNC_REQUIRED


@pytest.mark.parametrize("since, epoch", [(5, None), (-1, None), (0, "someone-else")])
def test_changes_from_a_foreign_position_or_epoch_require_resync(
    since: int, epoch: str | None
) -> None:
    with pytest.raises(ProtocolError) as err:
        make_registry().changes(since, epoch=epoch)
    assert err.value.kind is ProblemType.RESYNC_REQUIRED


def test_conditional_versions_list_only_tables_changed_after_seq() -> None:
    reg = make_registry()
    reg.reload("tokens", {"t1": {"funding": "credit"}})
    assert reg.state.versions(since=0) == {"tokens": "1.1.0"}
    assert reg.state.versions(since=1) == {}


def test_rule_change_bumps_seq_and_rules_version_but_no_table_version() -> None:
    reg = make_registry()
    before = reg.state
    result = reg.set_rules([])
    assert result.removed == [("codes", "eligible", "requires_recognition")]
    assert result.old_rules_version == before.rules.version != result.new_rules_version
    assert reg.state.versions() == before.versions() and reg.state.seq == 1
    assert len(reg.state.graph) == 0
    assert reg.changes(0).rules[0].removed == result.removed


def test_redeclaring_the_same_rules_changes_nothing() -> None:
    reg = make_registry()
    reg.set_rules([Rule("codes", "eligible", "requires_recognition", via="code")])
    assert reg.state.seq == 0


def test_rules_naming_an_unknown_table_are_refused() -> None:
    reg = make_registry()
    with pytest.raises(ProtocolError) as err:
        reg.set_rules([Rule("codes", "nowhere", "r")])
    assert err.value.kind is ProblemType.INVALID_RULES


def test_concurrent_reloads_are_serialized_without_losing_a_seq() -> None:
    reg = make_registry()

    def bump(i: int) -> None:
        reg.reload("tokens", {"t1": {"funding": f"f{i}"}})

    threads = [threading.Thread(target=bump, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert reg.state.seq == 20
    assert [t.seq for t in reg.changes(0).tables] == list(range(1, 21))


def test_one_triple_declared_with_and_without_via_is_refused_not_crashed() -> None:
    reg = make_registry()
    with pytest.raises(ProtocolError) as err:
        reg.set_rules(
            [Rule("codes", "eligible", "r", via=None), Rule("codes", "eligible", "r", via="code")]
        )
    assert err.value.kind is ProblemType.INVALID_RULES


def test_an_empty_via_is_refused() -> None:
    with pytest.raises(ProtocolError, match="names no field"):
        make_registry().set_rules([Rule("codes", "eligible", "r", via="")])
