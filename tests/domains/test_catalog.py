import json
from pathlib import Path

import pytest

from invalidation_contracts.domains import available_domains, get_catalog, get_domain
from invalidation_contracts.domains.catalog import (
    load_rules,
    load_tables,
    load_tasks,
    snapshot_paths,
)
from invalidation_contracts.server import DataFileError, Domain, Rule

PACKAGE = Path(__file__).parents[2] / "src" / "invalidation_contracts" / "domains"


def test_available_domains_lists_every_reference_domain():
    assert available_domains() == ["acme_billing", "acme_rules", "recipes", "tau2_airline"]


@pytest.mark.parametrize("name", ["acme_billing", "acme_rules", "recipes"])
def test_get_domain_returns_a_servable_domain_named_as_asked(name):
    domain = get_domain(name)
    assert isinstance(domain, Domain) and domain.name == name
    assert domain.registry().state.tables


def test_unknown_domain_is_a_key_error_naming_the_known_ones():
    with pytest.raises(KeyError, match="acme_billing, acme_rules, recipes"):
        get_domain("nope")


def test_each_call_builds_a_fresh_domain():
    assert get_domain("acme_billing") is not get_domain("acme_billing")


@pytest.mark.parametrize("name", ["acme_billing", "acme_rules", "recipes"])
def test_every_snapshot_replaces_a_table_the_domain_holds(name):
    catalog = get_catalog(name)
    assert catalog.snapshots
    for snapshot in catalog.snapshots:
        assert catalog.read_snapshot(snapshot).table in catalog.domain.tables


@pytest.mark.parametrize("name", ["acme_billing", "acme_rules", "recipes"])
def test_the_initial_rule_set_is_the_domains_rules(name):
    catalog = get_catalog(name)
    assert set(catalog.read_rule_set("initial")) == set(catalog.domain.rules)


def test_catalog_names_the_route_tasks_use(acme, recipes):
    assert acme.route.path == "/v1/subscriptions"
    assert recipes.route.path == "/v1/recipes/convert"


def test_unknown_family_snapshot_and_rule_set_name_the_known_ones(acme):
    with pytest.raises(KeyError, match="governed-partner-growth"):
        acme.family("nope")
    with pytest.raises(KeyError, match="active_csm_codes.rotation-1"):
        acme.read_snapshot("nope")
    with pytest.raises(KeyError, match="initial"):
        acme.read_rule_set("nope")


def test_family_draft_is_a_copy_the_caller_may_change(acme):
    family = acme.family("governed-partner-growth")
    draft = family.draft()
    draft["plan"] = "changed"
    assert family.fields["plan"] == "plan_partner_growth"


def test_families_of_selects_one_class(acme):
    assert [f.id for f in acme.families_of("row_control")] == [
        "control-partner-starter",
        "control-agency-pro",
    ]


def test_data_files_live_in_the_package_tree():
    for name in ("acme_billing", "recipes"):
        root = PACKAGE / name
        assert list((root / "data").glob("*.json")) and (root / "tasks.toml").is_file()
        assert list((root / "rules").glob("*.json")) and list((root / "snapshots").glob("*.json"))


def test_load_tables_defaults_the_version_and_refuses_a_table_defined_twice(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps({"table": "t", "rows": {"k": {}}}))
    assert load_tables(tmp_path)["t"].version == "1.0.0"
    (tmp_path / "b.json").write_text(json.dumps({"table": "t", "rows": {}}))
    with pytest.raises(DataFileError, match="defined twice"):
        load_tables(tmp_path)


def test_load_tables_refuses_an_empty_directory(tmp_path):
    with pytest.raises(DataFileError, match="no table files"):
        load_tables(tmp_path)


def test_snapshot_paths_are_named_by_stem(tmp_path):
    (tmp_path / "t.rotation-1.json").write_text("{}")
    (tmp_path / "notes.txt").write_text("")
    assert snapshot_paths(tmp_path) == {"t.rotation-1": tmp_path / "t.rotation-1.json"}


def test_load_rules_reads_the_admin_body_and_a_bare_list(tmp_path):
    decl = {"from_table": "a", "to_table": "b", "relation": "r", "via": "x"}
    (tmp_path / "obj.json").write_text(json.dumps({"rules": [decl]}))
    (tmp_path / "list.json").write_text(json.dumps([decl]))
    assert (
        load_rules(tmp_path / "obj.json")
        == load_rules(tmp_path / "list.json")
        == (Rule("a", "b", "r", "x"),)
    )


@pytest.mark.parametrize(
    "text, message",
    [
        ("{", "not valid JSON"),
        ('{"rules": 3}', "expected"),
        ('[{"from_table": "a"}]', "invalid rule declaration"),
    ],
)
def test_load_rules_names_the_file_and_the_problem(tmp_path, text, message):
    path = tmp_path / "rules.json"
    path.write_text(text)
    with pytest.raises(DataFileError, match=message) as err:
        load_rules(path)
    assert str(path) in str(err.value)


@pytest.mark.parametrize(
    "load, name, content, message",
    [
        (load_rules, "rules.json", b"\xff\xfe[]", "not UTF-8 text"),
        (load_tasks, "tasks.toml", b"\xff\xfesystem_prompt = 1", "not UTF-8 text"),
        (load_rules, "rules.json", b"[" * 10_000, "not valid JSON"),
        (load_tasks, "tasks.toml", b"system_prompt = ", "not valid TOML"),
        (load_rules, "missing.json", None, "cannot read"),
        (load_tasks, "missing.toml", None, "cannot read"),
    ],
)
def test_rules_and_tasks_files_that_do_not_read_or_parse_are_a_data_file_error(
    tmp_path, load, name, content, message
):
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(DataFileError, match=message) as err:
        load(path)
    assert str(path) in str(err.value)


TASKS_HEAD = 'system_prompt = "Plan requests."\n'


@pytest.mark.parametrize(
    "body, message",
    [
        ("", "no \\[\\[family\\]\\]"),
        ('[[family]]\nid = "x"\nclass = "c"\ntext = "t"\n', "'fields' must be"),
        (
            '[[family]]\nid = "x"\nclass = "c"\ntext = "t"\naction = "shout"\n'
            'expected_fix_type = "X"\nfields = {a = 1}\n',
            "not one of",
        ),
        (
            '[[family]]\nid = "x"\nclass = "c"\ntext = "t"\naction = "add_field"\n'
            "fields = {a = 1}\n",
            "both",
        ),
        ('[[family]]\nid = "x"\nclass = "c"\ntext = "t"\nfields = {a = 1}\n' * 2, "defined twice"),
    ],
)
def test_load_tasks_refuses_malformed_families(tmp_path, body, message):
    path = tmp_path / "tasks.toml"
    path.write_text(TASKS_HEAD + body)
    with pytest.raises(DataFileError, match=message):
        load_tasks(path)


def test_load_tasks_needs_a_system_prompt(tmp_path):
    path = tmp_path / "tasks.toml"
    path.write_text('[[family]]\nid = "x"\nclass = "c"\ntext = "t"\nfields = {a = 1}\n')
    with pytest.raises(DataFileError, match="system_prompt"):
        load_tasks(path)
