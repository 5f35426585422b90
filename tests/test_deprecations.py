"""Names that moved keep working until 0.3.0, each warning with its new home (CHANGELOG.md,
"Deprecated"); the package's version is its installed metadata."""

from __future__ import annotations

import importlib
import importlib.metadata
import sys

import pytest

import invalidation_contracts
from invalidation_contracts import _deprecation, client


@pytest.mark.parametrize("name", sorted(client._MOVED))
def test_a_name_that_left_client_warns_naming_its_home_and_still_imports(name):
    home = client._MOVED[name]

    with pytest.warns(DeprecationWarning, match=rf"use {home}\.{name} instead") as caught:
        value = getattr(client, name)

    assert value is getattr(importlib.import_module(home), name)
    assert f"removed in {_deprecation.REMOVED_IN}" in str(caught[0].message)


def test_the_warning_points_at_the_code_that_imports_the_old_name():
    with pytest.warns(DeprecationWarning) as caught:
        from invalidation_contracts.client import contract_client  # noqa: F401

    assert caught[0].filename == __file__


def test_a_name_client_never_had_is_still_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        client.nope  # noqa: B018


def test_the_moved_names_are_not_in_the_public_face():
    assert not set(client._MOVED) & set(client.__all__)


def test_server_app_warns_naming_server_http_app_and_gives_its_names():
    from invalidation_contracts.server.http import app as home

    sys.modules.pop("invalidation_contracts.server.app", None)
    with pytest.warns(DeprecationWarning, match=r"use invalidation_contracts\.server\.http\.app"):
        old = importlib.import_module("invalidation_contracts.server.app")

    assert (old.create_app, old.serve) == (home.create_app, home.serve)


def test_the_version_is_the_installed_distribution_s():
    assert invalidation_contracts.__version__ == importlib.metadata.version(
        "invalidation-contracts"
    )


@pytest.mark.parametrize(
    ("module", "name", "home"),
    [
        ("server.signing", "SigningMiddleware", "server.http.signing.SigningMiddleware"),
        ("server.store", "RegistryStore", "server.store.base.SQLRegistryStore"),
        ("server.http.service", "RETRY_AFTER_S", "server.worker.contract.RETRY_AFTER_S"),
        ("server.http.service", "unavailable", "server.worker.contract.unavailable"),
    ],
)
def test_a_server_name_that_moved_warns_naming_its_home_and_still_imports(module, name, home):
    # Issue 40: the ASGI adapter left the sans-IO signer; aliases and re-exports left.
    old = importlib.import_module(f"invalidation_contracts.{module}")
    new_module, _, new_name = f"invalidation_contracts.{home}".rpartition(".")

    with pytest.warns(DeprecationWarning, match=rf"use invalidation_contracts\.{home} instead"):
        value = getattr(old, name)

    assert value is getattr(importlib.import_module(new_module), new_name)


@pytest.mark.parametrize(
    ("name", "home"),
    [
        ("DEFAULT_STALL_TIMEOUT_S", "timing"),
        ("STUCK_AFTER_S", "timing"),
        ("SETTLE_POLLS", "wakeups"),
        ("open_listeners", "wakeups"),
    ],
)
def test_a_name_that_left_the_follower_warns_naming_its_room(name, home):
    from invalidation_contracts.server.worker import follower

    with pytest.warns(DeprecationWarning, match=rf"server\.worker\.{home}\.{name} instead"):
        value = getattr(follower, name)

    assert value is getattr(importlib.import_module(f"{follower.__package__}.{home}"), name)


@pytest.mark.parametrize("name", ["OperatorError", "origin_stats", "stats_table"])
def test_the_operator_view_left_the_client_for_the_command_line(name):
    from invalidation_contracts.cli import operator as home
    from invalidation_contracts.client import operator as old

    with pytest.warns(DeprecationWarning, match=r"use invalidation_contracts\.cli\.operator\."):
        value = getattr(old, name)

    assert value is getattr(home, name)


CAPTURE_MOVES = [
    ("invalidation_contracts.server.ingest", "ingest", "server.capture.steps"),
    ("invalidation_contracts.server.ingest", "SourceError", "server.capture.steps"),
    ("invalidation_contracts.server.change_source", "ChangeSource", "server.capture.source"),
    ("invalidation_contracts.server.sql.images", "CapturedTransaction", "server.capture.records"),
]


@pytest.mark.parametrize(("module", "name", "home"), CAPTURE_MOVES)
def test_a_capture_name_at_its_old_home_warns_and_is_the_cores(module, name, home):
    old = importlib.import_module(module)

    with pytest.warns(DeprecationWarning, match=rf"use invalidation_contracts\.{home}\.{name}"):
        value = getattr(old, name)

    assert value is getattr(importlib.import_module(f"invalidation_contracts.{home}"), name)


@pytest.mark.parametrize(
    "name", ["check_scenario", "paper_stale_slots", "resolve_scenario", "verify_domain"]
)
def test_the_checks_against_a_domain_left_the_manifest_for_bench_verify(name):
    # Issue 40: the checks need the oracle's labels, which read the manifest's types (no cycle).
    from invalidation_contracts.bench import scenario as old
    from invalidation_contracts.bench import verify as home

    with pytest.warns(DeprecationWarning, match=r"use invalidation_contracts\.bench\.verify\."):
        value = getattr(old, name)

    assert value is getattr(home, name)
