"""Drift from τ²'s own data: each snapshot changes exactly the rows it says, and the fixes whose
dependency vectors name those rows are exactly the ones that go stale."""

from __future__ import annotations

import json

import pytest

from invalidation_contracts.domains.catalog import is_fix_current
from invalidation_contracts.domains.tau2_airline.drift import (
    SNAPSHOTS,
    snapshot_files,
    snapshot_rows,
)
from invalidation_contracts.domains.tau2_airline.source import initial_tables
from invalidation_contracts.protocol import Suggestion

pytestmark = pytest.mark.tau2

EXPECTED = {
    "users.gift-card-spent": {"omar_rossi_1241", "mohamed_silva_9265"},
    "reservations.other-cancelled": {"EHGLP3"},
    "flight_dates.seats-taken": {"HAT232@2024-05-21", "HAT001@2024-05-21"},
    "flight_dates.seats-taken+cancelled": {
        "HAT232@2024-05-21",
        "HAT001@2024-05-21",
        "HAT208@2024-05-27",
    },
    "flight_dates.fares-moved": {"HAT001@2024-05-21", "HAT001@2024-05-22"},
}


def changed_keys(name: str) -> set[str]:
    snapshot = SNAPSHOTS[name]
    before = initial_tables()[snapshot.table]
    after = snapshot_rows(snapshot)
    assert set(after) == set(before)
    return {key for key in before if before[key] != after[key]}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_snapshot_changes_exactly_the_rows_it_names(name):
    assert changed_keys(name) == EXPECTED[name]


def test_building_a_snapshot_leaves_the_loaded_database_as_shipped():
    before = json.dumps(initial_tables()["users"]["omar_rossi_1241"], sort_keys=True)
    snapshot_rows(SNAPSHOTS["users.gift-card-spent"])
    assert json.dumps(initial_tables()["users"]["omar_rossi_1241"], sort_keys=True) == before


def test_the_spent_gift_card_keeps_its_other_fields():
    rows = snapshot_rows(SNAPSHOTS["users.gift-card-spent"])
    card = rows["omar_rossi_1241"]["payment_methods"]["gift_card_8190333"]
    assert card == {"source": "gift_card", "id": "gift_card_8190333", "amount": 15.0}


def test_another_users_cancellation_is_tau2s_own_cancel_reservation():
    row = snapshot_rows(SNAPSHOTS["reservations.other-cancelled"])["EHGLP3"]
    before = initial_tables()["reservations"]["EHGLP3"]
    assert row["status"] == "cancelled"
    paid = before["payment_history"]
    assert row["payment_history"] == [*paid, *({**p, "amount": -p["amount"]} for p in paid)]


def test_snapshot_files_are_written_under_the_cache_directory_once(tmp_path):
    paths = snapshot_files(tmp_path)
    assert set(paths) == set(SNAPSHOTS)
    assert all(tmp_path in p.parents and p.is_file() for p in paths.values())
    stamp = {name: p.stat().st_mtime_ns for name, p in paths.items()}
    assert {n: p.stat().st_mtime_ns for n, p in snapshot_files(tmp_path).items()} == stamp
    body = json.loads(paths["users.gift-card-spent"].read_text(encoding="utf-8"))
    assert body["table"] == "users" and len(body["rows"]) == 500


def fix_of(airline, provider, family_id):
    family = airline.family(family_id)
    (finding,) = provider.findings(airline.route_of(family), family.draft())
    return family, finding


def test_the_spent_gift_card_stales_exactly_the_fix_that_named_it(airline, provider, registry):
    learned = {f: fix_of(airline, provider, f) for f in airline.task_families if "plain" not in f}
    snapshot = airline.read_snapshot("users.gift-card-spent")
    registry.reload(snapshot.table, snapshot.rows)
    stale = set()
    for family_id, (family, finding) in learned.items():
        current = provider.findings(airline.route_of(family), family.draft(), registry.state)
        if [dict(f.violation.parameters) for f in current] != [dict(finding.violation.parameters)]:
            stale.add(family_id)
        reads_changed = "omar_rossi_1241" in (finding.reads.get("users") or ())
        assert (family_id in stale) == reads_changed, family_id
    assert stale == {"payment-fq8ape"}
    (after,) = provider.findings(
        airline.route_of("payment-fq8ape"), airline.family("payment-fq8ape").draft()
    )
    assert dict(after.violation.parameters) == {"payment_id": "credit_card_6754990"}


def test_the_oracle_agrees_on_the_taken_seats(airline, provider, registry):
    family, _ = fix_of(airline, provider, "seats-owz4xl")
    snapshot = airline.read_snapshot("flight_dates.seats-taken")
    route = airline.route_of(family)
    draft = family.draft()
    rendered = provider.handle(route, draft).body.to_wire()
    (suggestion,) = rendered["recovery_feedback"]["suggestions"]
    fix = Suggestion.model_validate(suggestion)
    assert is_fix_current(route, draft, fix, registry.state)
    registry.reload(snapshot.table, snapshot.rows)
    assert not is_fix_current(route, draft, fix, registry.state)
    (after,) = provider.findings(route, draft, registry.state)
    assert dict(after.violation.parameters) == {"cabin": "basic_economy"}
