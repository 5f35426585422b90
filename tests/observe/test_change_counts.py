"""Change sets are counted once per history (issue 42): a worker's transaction that first adopts
what another worker committed announces that part as ``adopted`` (a follower's every capture
round did, and counted it again as ``captured``: one change set 1-4 times at 4 workers), and a
move that holds several change sets counts each of them, a reconciled one as ``reconciled``."""

from __future__ import annotations

from tests.service.conftest import make_domain

from invalidation_contracts.server.origin import change_origin, current_origin
from invalidation_contracts.server.transitions import TableChange
from invalidation_contracts.server.worker.runtime import open_runtime

CHANGES = "invalidation_contracts.contract.changes"
ROWS = "invalidation_contracts.contract.rows_changed"


def test_a_move_holding_several_change_sets_counts_each_with_its_origin(observed_client, readings):
    registry = observed_client().app.state.service.registry
    with change_origin("captured"), registry.transaction() as tx:
        tx.apply({"plans": TableChange.patch({"gold": {"funding": "card"}})})
        tx.apply({"plans": TableChange.patch({"silver": {"funding": "card"}}, ["basic"])})
        rows = {k: dict(v) for k, v in tx.state.tables["funding_types"].plain_rows().items()}
        rows["barter"] = {"label": "Barter"}
        tx.apply({"funding_types": TableChange(rows, replace=True, reconciled=True)})

    assert readings.value(CHANGES, table="plans", origin="captured") == 2
    assert readings.value(CHANGES, table="funding_types", origin="reconciled") == 1
    assert readings.value(CHANGES, table="funding_types", origin="captured") == 0
    assert readings.value(ROWS, table="plans", origin="captured") == 3
    assert readings.value(ROWS, table="funding_types", origin="reconciled") == 1


def test_what_a_transaction_adopts_from_another_worker_is_announced_as_adopted(tmp_path):
    store = tmp_path / "history.sqlite"
    first = open_runtime(make_domain(), store=str(store))
    second = open_runtime(make_domain(), store=str(store))
    heard: list[tuple[str | None, int, int]] = []
    second.registry.subscribe(lambda b, a: heard.append((current_origin(), b.seq, a.seq)))
    try:
        with change_origin("admin"):
            first.registry.patch("plans", {"gold": {"funding": "card"}})
        with change_origin("captured"), second.registry.transaction():
            pass  # a capture round that found nothing new
        with change_origin("admin"):
            first.registry.patch("plans", {"silver": {"funding": "card"}})
        with change_origin("captured"), second.registry.transaction() as tx:
            tx.apply({"plans": TableChange.patch({"bronze": {"funding": "card"}})})
    finally:
        second.close()
        first.close()

    assert heard == [("adopted", 0, 1), ("adopted", 1, 2), ("captured", 2, 3)]
