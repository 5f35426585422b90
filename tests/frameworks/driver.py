"""The scenarios every framework test runs, driven through a framework's own adapter: a fix is
learned, reused, dropped when an operator's rotation makes it stale, and learned again; the
rotation evicts the changed row's fix only; the model reads the model view; a ``serve-mcp`` child
over stdio teaches and serves; a result the memory cannot read still reaches the model.

Imports only the core and ``mcp`` pieces, so the ADK tests' own venv (test_adk_venv.py) runs it.
"""

from __future__ import annotations

import shlex
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
from tests.frameworks.conftest import PYTHON, SERVE_MCP, Planner, rotate

from invalidation_contracts.client import FixMemory
from invalidation_contracts.client.entries import EvictionReason
from invalidation_contracts.client.events import (
    Evicted,
    Ignored,
    MemoryEvent,
    PatchSkipped,
    Restamped,
)
from invalidation_contracts.domains.catalog import DomainCatalog
from invalidation_contracts.mcp import connect, names
from invalidation_contracts.mcp.serve import running_http
from invalidation_contracts.server import Provider

Listener = Callable[[MemoryEvent], None]
#: Opens an agent's tools on ``url`` with ``memory``, the contract watching with the listener;
#: yields the tools and their contract session.
Opener = Callable[[str, FixMemory, Listener], AbstractAsyncContextManager[tuple[Any, Any]]]
MODEL_VIEW_HIDES = ("table_versions", "contract_seq", "rules_version", '"scope"', '"patch"')
FAMILIES = ("governed-partner-growth", "control-partner-starter", "control-agency-pro")


@dataclass(frozen=True)
class Framework:
    """One framework's adapter: how its tools are opened, and one agent run over them."""

    open: Opener
    episode: Callable[[Any, dict[str, Any]], Awaitable[Planner]]


def over_session(tools_of: Callable[[Any], Any]) -> Opener:
    """An opener for a framework whose tools wrap a ``connect`` session: ``tools_of(session)``
    (awaited when it returns an awaitable)."""

    @asynccontextmanager
    async def opened(url: str, memory: FixMemory, listener: Listener) -> AsyncIterator[Any]:
        async with connect(url, memory, watch_listener=listener) as contract:
            tools = tools_of(contract)
            if isinstance(tools, Awaitable):
                tools = await tools
            yield tools, contract

    return opened


def around_rotation(
    framework: Framework,
    server: Any,
    provider: Provider,
    acme: DomainCatalog,
    drafts: list[dict[str, Any]],
    heard: list[MemoryEvent],
    memory: FixMemory,
) -> tuple[list[Planner], list[Planner]]:
    """One run per draft, the operator's rotation (the contract caught up with it), one run per
    draft again, all on one set of tools over streamable HTTP: the runs before and after."""

    async def body() -> tuple[list[Planner], list[Planner]]:
        async with running_http(server) as url:
            async with framework.open(url, memory, heard.append) as (tools, contract):
                before = [await framework.episode(tools, d) for d in drafts]
                seq = await anyio.to_thread.run_sync(rotate, acme, provider)
                await contract.caught_up(seq)
                return before, [await framework.episode(tools, d) for d in drafts]

    return anyio.run(body)


def check_a_fix_is_reused_then_dropped_after_a_rotation_and_learned_again(
    framework: Framework, server: Any, provider: Provider, acme: DomainCatalog
) -> list[Planner]:
    """Learn, reuse, rotate (nothing stale injected), learn the new fix, reuse it; the four
    runs (for a framework's own further checks)."""
    memory = FixMemory("row")
    growth = acme.family("governed-partner-growth").draft()
    heard: list[MemoryEvent] = []

    before, after = around_rotation(framework, server, provider, acme, [growth] * 2, heard, memory)
    (learn, reuse), (stale, relearned) = before, after
    (origin,) = memory.origins()

    assert (len(learn.calls), len(reuse.calls)) == (2, 1)  # reused: patched in, one call
    assert len(stale.calls) == 2 and len(relearned.calls) == 1  # nothing stale injected
    assert [e.reason for e in heard if isinstance(e, Evicted)] == [EvictionReason.ROW_CHANGED]
    assert [e.suggestion.parameters for e in memory.entries(origin)] == [
        {"promo_code": "WINTERLAUNCH26"}
    ]
    return [learn, reuse, stale, relearned]


def check_a_rotation_evicts_the_changed_row_and_restamps_the_others(
    framework: Framework, server: Any, provider: Provider, acme: DomainCatalog
) -> None:
    """Three fixes learned; a rotation that changes one row evicts its fix (1 right, 0 wrong)
    and restamps the other two, which the next runs reuse."""
    heard: list[MemoryEvent] = []
    drafts = [acme.family(name).draft() for name in FAMILIES]

    learned, after = around_rotation(
        framework, server, provider, acme, drafts, heard, FixMemory("row")
    )

    assert [len(p.calls) for p in learned] == [2, 2, 2]
    evicted = [e.reason for e in heard if isinstance(e, Evicted)]
    restamped = [e for e in heard if isinstance(e, Restamped)]
    assert (evicted, len(restamped)) == ([EvictionReason.ROW_CHANGED], 2)  # 1 right, 0 wrong
    assert [len(p.calls) for p in after] == [2, 1, 1]  # nothing stale; the kept two reused


def check_the_model_view(failure: str, success: str) -> None:
    """The failing call's text shows the fix, and neither it nor the success shows the
    contract's metadata."""
    assert "SUMMERSALE25" in failure
    for member in MODEL_VIEW_HIDES:
        assert member not in failure and member not in success


def check_stdio_teaches_and_serves(memory: FixMemory, learn: Planner, reuse: Planner) -> None:
    """Learned in the first run, reused in the second, kept under the child's command line."""
    assert (len(learn.calls), len(reuse.calls)) == (2, 1)
    assert memory.origins() == ["mcp+stdio:" + shlex.join([PYTHON, *SERVE_MCP])]  # the target


def declined(contract: Any | None) -> Callable[[dict[str, Any]], types.CallToolResult]:
    """A scripted server's answer: an error the model can read, with ``contract`` as its
    ``_meta`` contract (malformed), or no ``_meta`` at all (no problem document)."""

    def answer(arguments: dict[str, Any]) -> types.CallToolResult:
        text = types.TextContent(type="text", text="declined: card blocked")
        meta = {names.CONTRACT: contract} if contract is not None else None
        return types.CallToolResult(content=[text], is_error=True, _meta=meta)

    return answer


def check_the_model_read_what_the_memory_could_not(
    planner: Planner, memory: FixMemory, heard: list[MemoryEvent], contract: Any | None
) -> None:
    """The model was shown the declined text; nothing was learned; a malformed contract was
    reported as ignored."""
    assert planner.shown and "declined: card blocked" in planner.shown[0]
    assert memory.entries("mcp://scripted") == []
    if contract is not None:
        assert any(isinstance(e, Ignored) for e in heard)


#: Opens an agent's tools on ``url`` afresh for one run: ``memory``, the ``apply`` mode, and the
#: listener of the memory's events.
FreshOpener = Callable[[str, FixMemory, str, Listener], AbstractAsyncContextManager[Any]]


def reuse_runs(
    open_fresh: FreshOpener,
    run: Callable[[Any, dict[str, Any]], Awaitable[Planner]],
    server: Any,
    draft: dict[str, Any],
    apply: str,
    heard: list[MemoryEvent],
) -> list[Planner]:
    """Two runs of ``draft``'s task with ``apply``, each on tools opened afresh (a new agent
    process would): one to learn, one to reuse."""
    memory = FixMemory("row")

    async def body() -> list[Planner]:
        runs = []
        async with running_http(server) as url:
            for _ in range(2):
                async with open_fresh(url, memory, apply, heard.append) as tools:
                    runs.append(await run(tools, draft))
        return runs

    return anyio.run(body)


def check_the_model_applied_the_fix_it_read(learn: Planner, reuse: Planner) -> None:
    """In ``model`` mode the second run's first call already carries the fix it was shown."""
    assert (len(learn.calls), len(reuse.calls)) == (2, 1)
    assert reuse.calls[0]["promo_code"] == "SUMMERSALE25"  # the model applied what it read


def check_the_model_applied_the_unpatchable_fix(learn: Planner, reuse: Planner) -> None:
    """A fix on a field the client may not patch is shown, and the model applies it."""
    assert (len(learn.calls), len(reuse.calls)) == (2, 1)
    assert reuse.calls[0]["payment_method_token"] == "acme_pm_visa_credit"  # read, applied


def check_an_unpatchable_fix_unread_is_a_patch_skipped_event(
    learn: Planner, reuse: Planner, heard: list[MemoryEvent]
) -> None:
    """A model that reads no descriptions sends the draft unpatched: rejected, retried, and the
    client says why it did not patch (never silent)."""
    skipped = [e for e in heard if isinstance(e, PatchSkipped)]
    assert (len(learn.calls), len(reuse.calls)) == (2, 2)  # sent unpatched, rejected, retried
    assert [e.detail for e in skipped] == ["no patch; left to the planner"]  # never silent
