"""docs/hosts.md: every host configuration on the page parses, names the proxy's real options,
and, started exactly as it says, gives a host a fix learned in one session applied in the next.

Recipes that start the same command line are one start (the hosts differ only in the JSON
around it); the first one runs in the default run, the others in CI's study step. Each runs
under every host driver (the Python SDK, and the TypeScript SDK under Node: marker ``node``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from tests.mcp.test_restart_drift import GROWTH, drift_while_away
from tests.support.mcp_hosts import Unavailable

from invalidation_contracts.cli import build_parser
from invalidation_contracts.client import FixMemory
from invalidation_contracts.client.entries import EvictionReason
from invalidation_contracts.mcp.proxy import UpstreamTarget
from invalidation_contracts.server.store.location import default_registry

from .host_drivers import DRIVERS, Answer, HostDriver, Recipe
from .snippets import ROOT, blocks

PAGE = ROOT / "docs" / "hosts.md"
#: The hosts the page gives a configuration for (each must have one).
HOSTS = ("Claude Desktop", "Claude Code", "Cursor", "VS Code", "TypeScript agent", "CrewAI")
#: The tool ``serve-mcp`` names the Acme domain's subscription route by default.
TOOL = "post_v1_subscriptions"


def servers(value: Any) -> list[dict[str, Any]]:
    """Every object in ``value`` that starts a server (it has a ``command``)."""
    if isinstance(value, dict):
        own = [value] if "command" in value else []
        return own + [s for inner in value.values() for s in servers(inner)]
    if isinstance(value, list):
        return [s for inner in value for s in servers(inner)]
    return []


def recipes() -> list[Recipe]:
    found = []
    for block in blocks():
        if block.page != PAGE or block.lang != "json":
            continue
        for server in servers(json.loads(block.body)):
            found.append(
                Recipe(
                    f"{block.where} ({block.before.strip().splitlines()[-1][:40]})",
                    server["command"],
                    tuple(server.get("args", ())),
                    server.get("env", {}),
                )
            )
    return found


def distinct() -> list[Recipe]:
    seen: dict[tuple[str, tuple[str, ...]], Recipe] = {}
    for recipe in recipes():
        seen.setdefault((recipe.command, recipe.args), recipe)
    return list(seen.values())


def test_the_page_configures_every_host_it_names() -> None:
    text = PAGE.read_text(encoding="utf-8")
    for host in HOSTS:
        assert f"**{host}" in text or f"**A {host}" in text, host
    assert len(recipes()) >= len(HOSTS)


@pytest.mark.parametrize("recipe", recipes(), ids=lambda r: r.where)
def test_each_recipe_starts_the_proxy_with_options_it_has(recipe: Recipe) -> None:
    assert recipe.command == "invalidation-contracts"
    args = build_parser().parse_args(list(recipe.args))  # exits 2 on an unknown option

    assert args.command == "mcp-proxy"
    upstream = [a for a in args.upstream_command if a != "--"]
    assert upstream[0] == "invalidation-contracts"
    assert build_parser().parse_args(upstream[1:]).command == "serve-mcp"


#: Every driver, carrying the markers of the components it needs.
HOST_DRIVERS = [
    pytest.param(d, marks=[getattr(pytest.mark, m) for m in d.markers], id=d.name) for d in DRIVERS
]


def session(recipe: Recipe, driver: HostDriver, folder: Path) -> Answer:
    """One session of ``driver`` through ``recipe``'s proxy, making the growth call once (a
    driver whose runtime this machine lacks skips; under ``CI=true`` that fails)."""
    try:
        (answer,) = anyio.run(driver.call, recipe, folder, TOOL, [GROWTH])
    except Unavailable as exc:
        pytest.skip(str(exc))
    return answer


def started(recipe: Recipe, driver: HostDriver, folder: Path) -> tuple[bool, bool]:
    """Two sessions of ``driver`` through ``recipe``'s proxy: whether the first call failed, and
    whether the same call succeeded in the next session (the fix patched in)."""
    first = session(recipe, driver, folder)
    second = session(recipe, driver, folder)
    assert "SUMMERSALE25" in first.text
    return first.is_error, not second.is_error


@pytest.mark.mcp
@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    "recipe",
    [
        pytest.param(r, marks=[pytest.mark.study] if i else [], id=r.where)
        for i, r in enumerate(distinct())
    ],
)
@pytest.mark.parametrize("driver", HOST_DRIVERS)
def test_a_host_configured_from_the_recipe_gets_a_fix_learned_in_one_session_in_the_next(
    recipe: Recipe, driver: HostDriver, tmp_path: Path
) -> None:
    rejected, applied = started(recipe, driver, tmp_path)

    assert rejected and applied


@pytest.mark.mcp
@pytest.mark.study  # two sessions more per driver (~15 s each): CI's study step
@pytest.mark.timeout(180)
@pytest.mark.parametrize("driver", HOST_DRIVERS)
def test_a_host_configured_from_the_recipe_is_served_no_fix_the_data_moved_under(
    driver: HostDriver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recipe = distinct()[0]
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # where the host's proxy keeps
    upstream = UpstreamTarget(tuple(recipe.args[recipe.args.index("--") + 1 :]))
    first = session(recipe, driver, tmp_path)  # learns SUMMERSALE25
    drift_while_away(default_registry("acme_billing"))  # the CSM code rotates between sessions

    again = session(recipe, driver, tmp_path)

    with FixMemory("row", store=upstream.default_memory()) as kept:
        reasons = [t.reason for t in kept.tombstones(upstream.origin)]
    assert first.is_error and "SUMMERSALE25" in first.text
    assert reasons == [EvictionReason.ROW_CHANGED]
    assert again.is_error and "SUMMERSALE25" not in again.text  # not patched in, not shown
