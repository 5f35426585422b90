"""docs/hosts.md: every host configuration on the page parses, names the proxy's real options,
and, started exactly as it says, gives a host a fix learned in one session applied in the next.

Recipes that start the same command line are one start (the hosts differ only in the JSON
around it); the first one runs in the default run, the others in CI's study step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from tests.mcp.test_restart_drift import GROWTH

from invalidation_contracts.cli import build_parser

from .host_drivers import DRIVERS, HostDriver, Recipe
from .snippets import ROOT, blocks

PAGE = ROOT / "docs" / "hosts.md"
#: The hosts the page gives a configuration for (each must have one).
HOSTS = ("Claude Desktop", "Claude Code", "Cursor", "VS Code", "TypeScript agent")
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


def started(recipe: Recipe, driver: HostDriver, folder: Path) -> tuple[bool, bool]:
    """Two sessions of ``driver`` through ``recipe``'s proxy: whether the first call failed, and
    whether the same call succeeded in the next session (the fix patched in)."""

    async def sessions() -> tuple[bool, bool]:
        (first,) = await driver.call(recipe, folder, TOOL, [GROWTH])
        (second,) = await driver.call(recipe, folder, TOOL, [GROWTH])
        assert "SUMMERSALE25" in first.text
        return first.is_error, not second.is_error

    return anyio.run(sessions)


@pytest.mark.mcp
@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    "recipe",
    [
        pytest.param(r, marks=[pytest.mark.study] if i else [], id=r.where)
        for i, r in enumerate(distinct())
    ],
)
@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
def test_a_host_configured_from_the_recipe_gets_a_fix_learned_in_one_session_in_the_next(
    recipe: Recipe, driver: HostDriver, tmp_path: Path
) -> None:
    rejected, applied = started(recipe, driver, tmp_path)

    assert rejected and applied
