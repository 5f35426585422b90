"""The domain is τ²'s own airline environment, loaded from the installed package: its database
collections as reference tables, its task set as task families; none of its data is in this
repository."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from invalidation_contracts.domains.tau2_airline import TOOLS
from invalidation_contracts.domains.tau2_airline.source import initial_tables, tau2_version
from invalidation_contracts.domains.tau2_airline.tasks import expected_call, route_path

pytestmark = pytest.mark.tau2

PACKAGE = Path(__file__).parents[3] / "src" / "invalidation_contracts" / "domains" / "tau2_airline"


def test_the_tables_hold_every_row_of_tau2s_own_flight_db():
    from tau2.domains.airline.data_model import FlightDB
    from tau2.domains.airline.utils import AIRLINE_DB_PATH

    stats = FlightDB.load(str(AIRLINE_DB_PATH)).get_statistics()
    tables = initial_tables()
    assert len(tables["users"]) == stats["num_users"] == 500
    assert len(tables["reservations"]) == stats["num_reservations"] == 2000
    assert len(tables["flights"]) == stats["num_flights"] == 300
    assert len(tables["flight_dates"]) == stats["num_flights_instances"] == 9000


def test_the_data_comes_from_the_installed_package_not_this_repository():
    from tau2.domains.airline.utils import AIRLINE_DB_PATH

    assert Path(AIRLINE_DB_PATH).is_file() and PACKAGE not in Path(AIRLINE_DB_PATH).parents
    assert tau2_version() == "26.3"
    shipped = [p for p in PACKAGE.rglob("*") if p.is_file() and p.suffix != ".pyc"]
    assert {p.suffix for p in shipped} <= {".py", ".toml"}
    assert max(p.stat().st_size for p in shipped) < 20_000


def test_a_flight_date_row_is_tau2s_status_of_that_flight_on_that_date():
    from tau2.domains.airline.data_model import FlightDB
    from tau2.domains.airline.utils import AIRLINE_DB_PATH

    db = FlightDB.load(str(AIRLINE_DB_PATH))
    row = dict(initial_tables()["flight_dates"]["HAT001@2024-05-21"])
    assert (row.pop("flight_number"), row.pop("date")) == ("HAT001", "2024-05-21")
    assert row == db.flights["HAT001"].dates["2024-05-21"].model_dump(mode="json")
    assert "dates" not in initial_tables()["flights"]["HAT001"]


def test_each_family_is_tau2s_expected_call_with_its_declared_departure(airline):
    from tau2.domains.airline.environment import get_tasks

    tasks = {t.id: t for t in get_tasks(None)}
    family = airline.family("payment-fq8ape")
    expected = expected_call(tasks["17"], "update_reservation_flights")
    assert family.draft() == {**expected, "payment_id": "certificate_1778167"}
    assert expected["payment_id"] != "certificate_1778167"
    plain = airline.family("plain-xehm4b")
    assert plain.draft() == expected_call(tasks["7"], "update_reservation_flights")
    assert plain.expected_fix_type is None and plain.klass == "plain"


def test_each_family_states_its_draft_in_its_text_and_names_its_tools_route(airline):
    for family in airline.task_families.values():
        for value in family.fields.values():
            assert json.dumps(value) in family.text
        assert family.route in {route_path(tool) for tool in TOOLS}


def test_a_family_naming_a_task_tau2_does_not_have_is_a_data_file_error(tmp_path):
    from invalidation_contracts.domains.tau2_airline.tasks import load_families
    from invalidation_contracts.server import DataFileError

    path = tmp_path / "families.toml"
    path.write_text(
        '[[family]]\nid = "x"\nclass = "plain"\ntask = "no-such-task"\n'
        'tool = "update_reservation_flights"\n'
    )
    with pytest.raises(DataFileError, match="no τ² airline task 'no-such-task'"):
        load_families(path)
