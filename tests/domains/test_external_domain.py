"""A domain kept outside the package runs through every command: by import path or entry point.

The domain is a package written into ``tmp_path`` (a shipping API with one table, one policy and a
drift snapshot), put on ``sys.path``; the entry-point tests add a ``.dist-info`` beside it, which
``importlib.metadata`` discovers on ``sys.path`` exactly as it finds an installed distribution.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from invalidation_contracts import cli
from invalidation_contracts.bench.artifacts import read_runs
from invalidation_contracts.bench.metrics import run_metrics
from invalidation_contracts.bench.scenario import ScenarioError
from invalidation_contracts.bench.verify import resolve_scenario
from invalidation_contracts.domains import (
    ENTRY_POINT_GROUP,
    DomainCatalog,
    DomainError,
    available_domains,
    get_catalog,
    get_domain,
)

PACKAGE = "shipping_ext"

INIT = '''
"""A shipping API outside invalidation_contracts, built only on its public API."""

from pathlib import Path

from pydantic import BaseModel

from invalidation_contracts.domains.catalog import DomainCatalog, load_rules, load_tables
from invalidation_contracts.protocol import Action
from invalidation_contracts.server import Domain, Route, Violation, policy

HERE = Path(__file__).parent


class Shipment(BaseModel):
    sku: str
    country: str
    carrier: str


@policy("country_carrier_policy")
def country_carrier(request, tables):
    """Each destination country ships with the carrier its row names."""
    row = tables["country_carriers"].get(request["country"])
    if row is not None and request["carrier"] != row["carrier"]:
        return Violation(
            "USE_COUNTRY_CARRIER",
            f"shipments to {request['country']} go with the contracted carrier",
            {"carrier": row["carrier"]},
            Action.REWRITE_VALUE,
            scope={"country": request["country"]},
        )


def build_domain():
    return Domain(
        "shipping",
        load_tables(HERE / "data"),
        load_rules(HERE / "rules" / "initial.json"),
        [Route("/v1/shipments", Shipment, [country_carrier])],
    )


def catalog():
    return DomainCatalog.from_directory(build_domain(), HERE, "/v1/shipments")


SHARED = catalog()
NOT_A_DOMAIN = 42
'''

TASKS = '''
system_prompt = """You book shipments by calling POST /v1/shipments. Reply with only the JSON body:
sku, country (ISO code) and carrier. Use the values the task gives."""

[[family]]
id = "ship-to-norway"
class = "governed"
action = "rewrite_value"
expected_fix_type = "USE_COUNTRY_CARRIER"
text = "Ship one mug-01 to NO with dhl."
fields = { sku = "mug-01", country = "NO", carrier = "dhl" }

[[family]]
id = "ship-to-sweden"
class = "negative_control"
action = "rewrite_value"
expected_fix_type = "USE_COUNTRY_CARRIER"
text = "Ship one mug-02 to SE with dhl."
fields = { sku = "mug-02", country = "SE", carrier = "dhl" }
'''

MANIFEST = """
name = "shipping-drifted"
domain = "{domain}"
description = "Norway changes carrier after episode 3."
max_attempts = 3
level = 6
stale_slots = [5]
schedule = [
    "ship-to-norway", "ship-to-sweden", "ship-to-norway",
    "ship-to-sweden", "ship-to-norway", "ship-to-norway",
]

[[drift]]
after_episode = 3
table = "country_carriers"
snapshot = "country_carriers.norway-bring"
kind = "breaking"
"""


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")


@pytest.fixture
def ext(tmp_path, monkeypatch):
    """The external domain package on sys.path; returns a function writing a manifest for a spec."""
    root = tmp_path / "site"
    pkg = root / PACKAGE
    _write(pkg / "__init__.py", INIT)
    _write(pkg / "tasks.toml", TASKS)
    table = {"table": "country_carriers", "version": "1.0.0"}
    rows = {"NO": {"carrier": "posten"}, "SE": {"carrier": "postnord"}}
    _write(pkg / "data" / "country_carriers.json", json.dumps({**table, "rows": rows}))
    drifted = {"table": "country_carriers", "rows": {**rows, "NO": {"carrier": "bring"}}}
    _write(pkg / "snapshots" / "country_carriers.norway-bring.json", json.dumps(drifted))
    _write(pkg / "rules" / "initial.json", json.dumps({"rules": []}))
    _write(pkg / "rules" / "strict.json", json.dumps({"rules": []}))
    monkeypatch.syspath_prepend(str(root))

    def manifest(domain: str, **replace: str) -> Path:
        text = MANIFEST.format(domain=domain)
        for old, new in replace.items():
            text = text.replace(old, new)
        path = tmp_path / "shipping-drifted.toml"
        _write(path, text)
        return path

    manifest.root = root  # type: ignore[attr-defined]
    return manifest


@pytest.fixture
def entry_point(ext):
    """Declare the domain as an entry point, as an installed distribution would."""
    info = ext.root / "shipping_ext-1.0.dist-info"
    _write(info / "METADATA", "Metadata-Version: 2.1\nName: shipping-ext\nVersion: 1.0\n")
    _write(info / "entry_points.txt", f"[{ENTRY_POINT_GROUP}]\nshipping = {PACKAGE}:catalog\n")
    return "shipping"


def run_cli(*argv: str) -> int:
    return cli.main(list(argv))


# --- the Python API ------------------------------------------------------------------------------


def test_an_import_path_names_a_catalog_factory_called_on_each_lookup(ext):
    first, second = get_catalog(f"{PACKAGE}:catalog"), get_catalog(f"{PACKAGE}:catalog")
    assert isinstance(first, DomainCatalog) and first.name == "shipping"
    assert first is not second


def test_an_import_path_may_name_a_catalog_instance(ext):
    assert get_catalog(f"{PACKAGE}:SHARED") is get_catalog(f"{PACKAGE}:SHARED")


def test_an_import_path_may_name_a_bare_domain_for_serving_only(ext):
    domain = get_domain(f"{PACKAGE}:build_domain")
    assert domain.name == "shipping"
    with pytest.raises(DomainError, match="without a harness catalog"):
        get_catalog(f"{PACKAGE}:build_domain")


@pytest.mark.parametrize(
    "spec, message",
    [
        (f"{PACKAGE}:missing", "has no 'missing'"),
        ("no_such_module_xyz:catalog", "cannot import 'no_such_module_xyz'"),
        (f"{PACKAGE}:NOT_A_DOMAIN", "names a int"),
        ("shipping", "unknown domain 'shipping'"),
    ],
)
def test_a_spec_that_names_no_domain_is_one_clear_error(ext, spec, message):
    with pytest.raises(DomainError, match=message):
        get_catalog(spec)


def test_an_entry_point_names_a_domain_and_is_listed(entry_point):
    assert entry_point in available_domains()
    assert get_catalog(entry_point).name == "shipping"


def test_from_directory_loads_every_rule_set_under_rules(ext):
    catalog = get_catalog(f"{PACKAGE}:catalog")
    assert sorted(catalog.rule_sets) == ["initial", "strict"]
    assert catalog.read_rule_set("strict") == ()


def test_from_directory_lets_a_named_rule_set_point_elsewhere(ext, tmp_path):
    catalog = get_catalog(f"{PACKAGE}:catalog")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"rules": []}))
    moved = DomainCatalog.from_directory(
        catalog.domain, ext.root / PACKAGE, "/v1/shipments", {"initial": other}
    )
    assert moved.rule_sets["initial"] == other and "strict" in moved.rule_sets


# --- the commands --------------------------------------------------------------------------------


def test_scenarios_validates_a_manifest_naming_an_external_domain(ext, capsys):
    assert run_cli("scenarios", str(ext(f"{PACKAGE}:catalog"))) == 0
    assert "domain shipping_ext:catalog" in capsys.readouterr().out


def test_scenarios_refuses_a_manifest_naming_an_unknown_domain(ext, capsys):
    assert run_cli("scenarios", str(ext("no_such_domain"))) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown domain 'no_such_domain'" in err


def test_a_manifest_naming_a_family_its_domain_lacks_is_refused_when_read(ext):
    with pytest.raises(ScenarioError, match="unknown task families"):
        resolve_scenario(
            ext(f"{PACKAGE}:catalog", **{'"ship-to-sweden", "ship-to-norway"': '"x", "y"'})
        )


def test_run_drives_an_external_domain_by_import_path(ext, tmp_path):
    out = tmp_path / "results"
    manifest = str(ext(f"{PACKAGE}:catalog"))
    argv = ["run", "--scenario", manifest, "--planner", "simulated:exact", "--arm", "row"]
    assert run_cli(*argv, "--seeds", "0", "--out", str(out), "--no-progress") == 0
    [run] = read_runs(out)
    m = run_metrics(run)
    assert (m.completed_episodes, m.evictions_correct, m.precision) == (6, 1, 1.0)
    assert (out / "report.md").is_file()


def test_run_refuses_an_unknown_domain_before_running_anything(ext, tmp_path, capsys):
    out = tmp_path / "results"
    code = run_cli("run", "--scenario", str(ext("nope_mod:catalog")), "--out", str(out))
    assert code == 2 and "cannot import 'nope_mod'" in capsys.readouterr().err
    assert not out.exists()


def test_ladder_drives_an_external_domain_by_entry_point(ext, entry_point, tmp_path):
    out = tmp_path / "ladder"
    manifest = str(ext(entry_point))
    assert (
        run_cli(
            "ladder", "--scenario", manifest, "--seeds", "0", "--out", str(out), "--no-progress"
        )
        == 0
    )
    assert {r.meta.key.arm for r in read_runs(out)} >= {"none", "naive", "row"}


def test_preflight_probes_with_an_external_domains_families(ext, capsys):
    argv = ["preflight", "--planner", "simulated:exact", "--domain", f"{PACKAGE}:catalog", "--json"]
    assert run_cli(*argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert sorted(p["probe"] for p in report["probes"]) == ["ship-to-norway", "ship-to-sweden"]


def test_serve_builds_the_app_of_an_external_domain(ext, entry_point, monkeypatch):
    from invalidation_contracts.cli import service

    served = []
    monkeypatch.setattr(service, "_listen", lambda app, args, **kw: served.append(app))
    monkeypatch.setenv("INVALIDATION_CONTRACTS_ADMIN_TOKEN", "secret-token-for-tests")
    for spec in (f"{PACKAGE}:catalog", entry_point):
        assert run_cli("serve", "--domain", spec, "--port", "0") == 0
    assert [a.title.split(" ")[0] for a in served] == ["shipping", "shipping"]


def test_serve_refuses_an_unknown_domain_in_one_line(ext, capsys):
    assert run_cli("serve", "--domain", "nope") == 2
    assert "unknown domain 'nope'" in capsys.readouterr().err
