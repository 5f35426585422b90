"""Study — stale injections through the memory proxy vs the in-process session (issue 36).

The harness's own run (``bench.runner.run_one``: ``payments-drifted``, ``simulated:exact``, the
``row`` arm, its oracle and metrics) over MCP with notifications, two ways:

- **in process**: the harness's ``ContractSession`` over a ``serve-mcp`` child (streamable HTTP):
  what ``invalidation-contracts run --transport mcp-http --mcp-notifications`` runs;
- **through the proxy**: the harness is a plain MCP host (the SDK's ``Client``, no contract code)
  of the shipped proxy (``proxy_server`` over an ``UpstreamLink`` to the same kind of child),
  whose memory is the run's: every tool call is looked up, patched, sent and observed by the
  proxy's handlers, and the upstream's notifications reach the memory through the proxy's link.

The proxy is served to the host in process (the SDK's in-memory transport) so that the run's
memory, which the harness's oracle reads, is the proxy's; the proxy-to-upstream hop is real. The
harness still looks the episode's fixes up itself before each episode (that lookup is what the
oracle labels as injected, on both paths), fulfils the memory's needs through the proxy's own
contract session, records each answer as the proxy's memory read it (the host is shown the
model view, which the oracle cannot key fixes by), and after each drift waits until that session
has read the new versions.
The substitution is this study's alone (``mcp_channel.mcp_agent`` is swapped while its runs go).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any
from unittest import mock

import anyio

from .common import Check, StudyResult, markdown_table

NAME = "mcp_proxy_stale"
TITLE = "Stale injections through `mcp-proxy` against the in-process session (payments-drifted)"
SCENARIO = "payments-drifted"
PLANNER = "simulated:exact"
ARM = "row"
IN_PROCESS = "in process: `ContractSession` with notifications (`--transport mcp-http`)"
PROXIED = "through the proxy: a plain MCP host of `proxy_server` with notifications"
#: The validity figures that must agree between the two paths.
VALIDITY = (
    "injections",
    "stale_injections",
    "outside_slots",
    "evictions_correct",
    "evictions_wrong",
    "completed",
    "retries",
)


def _seeds(quick: bool) -> tuple[int, ...]:
    return (0,) if quick else (0, 1, 2)


class ProxyChannel:
    """The harness's channel as a plain MCP host of the proxy: tool calls go to the proxy and
    come back as the host sees them (the model view: no contract); the memory's needs and the
    drift's settling go through the proxy's own contract session."""

    def __init__(
        self, host: Any, contract: Any, tools: Mapping[str, str], background: list[Any]
    ) -> None:
        self.host = host
        self.contract = contract
        self.tools = dict(tools)
        self._background = background

    def operation(self, route: Any) -> str:
        from invalidation_contracts.bench.channels import route_operation

        return self.tools[route_operation(route)]

    async def send(self, outgoing: Any) -> Any:
        """The host's call through the proxy. What the harness records of it (the oracle's
        suggestions, the wire cost) is the raw answer the proxy's memory read, as over the
        in-process path; the host's own view must agree with it (error or not)."""
        from invalidation_contracts.bench.mcp_channel import tool_reply

        heard: list[Any] = []
        self.contract.listener = outgoing.listener  # the proxy's events for this call
        self.contract.reply_listener = heard.append
        try:
            result = await self.host.call_tool(
                self.operation(outgoing.route), dict(outgoing.request)
            )
        finally:
            self.contract.listener = self.contract.reply_listener = None
        (raw,) = heard
        reply = tool_reply(raw)
        if bool(result.is_error) != (reply.status != 200):
            raise RuntimeError(f"the host saw is_error={result.is_error} for a {reply.status}")
        return reply

    async def fulfil(self, needs: Iterable[Any], *, episode: int, listener: Any) -> tuple[Any, ...]:
        return tuple(await self.contract.fulfil(needs, episode=episode, listener=listener))

    async def drifted(self, result: Mapping[str, Any]) -> None:
        from invalidation_contracts.bench.mcp_channel import SETTLE_TIMEOUT_S
        from invalidation_contracts.mcp import names

        seq, epoch = result.get("contract_seq"), result.get("contract_epoch")
        if not isinstance(seq, int):
            return
        position = names.MetaPosition(seq, epoch if isinstance(epoch, str) else None)
        await self.contract.session.read_resource(names.VERSIONS + position.query())
        await self.contract.caught_up(seq, timeout_s=SETTLE_TIMEOUT_S)

    def take_events(self) -> list[Any]:
        events, self._background[:] = list(self._background), []
        return events


@contextlib.asynccontextmanager
async def proxy_agent(
    catalog: Any,
    memory: Any,
    *,
    level: Any,
    token: str,
    conditional: bool,
    wire: str,
    notifications: bool,
    domain: str | None = None,
) -> AsyncIterator[tuple[ProxyChannel, str, Any]]:
    """``mcp_channel.mcp_agent``'s contract, with the shipped proxy between the harness and a
    ``serve-mcp`` child over streamable HTTP."""
    from mcp.client.client import Client

    from invalidation_contracts.bench.mcp_channel import mcp_provider, tools_of
    from invalidation_contracts.client import AsyncFixMemory
    from invalidation_contracts.mcp.proxy import UpstreamLink, UpstreamTarget, proxy_server

    async def dropped(message: object) -> None:
        return None

    provider = mcp_provider(catalog, level=level, token=token, wire="http", domain=domain)
    async with provider as (url, admin):
        link = UpstreamLink(UpstreamTarget(url=url), AsyncFixMemory.over(memory), dropped)
        server, _ = proxy_server(link)
        async with Client(server, mode="legacy") as host:
            contract = (await link.connection()).contract
            if contract is None:
                raise RuntimeError(f"the proxy found no contract at {url}")
            background: list[Any] = []
            contract.watch_listener = background.append
            channel = ProxyChannel(host, contract, tools_of(contract, catalog), background)
            yield channel, contract.origin, admin


@contextlib.contextmanager
def _through(proxied: bool) -> Iterator[None]:
    if not proxied:
        yield
        return
    from invalidation_contracts.bench import mcp_channel

    with mock.patch.object(mcp_channel, "mcp_agent", proxy_agent):
        yield


async def _runs(proxied: bool, seeds: tuple[int, ...], root: Path) -> dict[str, int]:
    from invalidation_contracts.bench.arms import Arm
    from invalidation_contracts.bench.artifacts import read_runs
    from invalidation_contracts.bench.metrics import score
    from invalidation_contracts.bench.runner import RunSpec, run_one
    from invalidation_contracts.bench.scenario import load_scenario

    scenario = load_scenario(SCENARIO)
    with _through(proxied):
        for seed in seeds:
            spec = RunSpec(scenario, PLANNER, Arm.parse(ARM), seed)
            await run_one(spec, root, transport="mcp-http", notifications=True)
    runs = [m for m in score(read_runs(root)) if m.scenario == SCENARIO]
    return {
        "runs": len(runs),
        "stale_injections": sum(m.stale_injections for m in runs),
        "outside_slots": sum(m.stale_injections_outside_slots for m in runs),
        "evictions_correct": sum(m.evictions_correct for m in runs),
        "evictions_wrong": sum(m.evictions_wrong for m in runs),
        "completed": sum(m.completed_episodes for m in runs),
        "episodes": sum(m.episodes for m in runs),
        "injections": sum(m.injections for m in runs),
        "retries": sum(m.retries for m in runs),
        "tokens_in": sum(m.tokens_in for m in runs),
    }


def run(quick: bool = False, out_dir: Path | None = None) -> StudyResult:
    seeds = _seeds(quick)
    cells: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-proxy-stale-") as tmp:
        for index, (label, proxied) in enumerate(((IN_PROCESS, False), (PROXIED, True))):
            cells[label] = anyio.run(_runs, proxied, seeds, Path(tmp) / str(index))
    rows = [
        [
            label,
            str(f["runs"]),
            f"**{f['stale_injections']}** ({f['outside_slots']})",
            f"{f['evictions_correct']}/{f['evictions_wrong']}",
            f"{f['completed']}/{f['episodes']}",
            str(f["injections"]),
            str(f["retries"]),
            str(f["tokens_in"]),
        ]
        for label, f in cells.items()
    ]
    same = all(cells[IN_PROCESS][k] == cells[PROXIED][k] for k in VALIDITY)
    markdown = (
        f"The harness's run of `{SCENARIO}` (planner `{PLANNER}`, arm `{ARM}`, seeds "
        f"{', '.join(map(str, seeds))}, summed) over MCP with notifications, its figures read "
        "from the runs' artifacts (`bench.metrics.score`). In process: the harness's "
        "`ContractSession` over a `serve-mcp` child (streamable HTTP). Through the proxy: the "
        "harness as a plain MCP host (`Client`, no contract code) of `proxy_server` over an "
        "`UpstreamLink` to such a child, the run's memory being the proxy's (the host-to-proxy "
        "hop in memory, the proxy-to-upstream hop real); the tool calls are patched, sent and "
        "observed by the proxy's handlers and the drift reaches the memory as the upstream's "
        "notification through the proxy's link. Stale injections: a cached fix the oracle calls "
        "stale put into a request (in parentheses: outside the stream's pre-registered stale "
        "slot). Planner input tokens: what the simulated planner was shown (the saving the "
        "memory gives is the same where the figures are).\n\n"
        + markdown_table(
            [
                "path",
                "runs",
                "stale injections (outside slots)",
                "evictions c/w",
                "completed",
                "injections",
                "retries",
                "planner input tokens",
            ],
            rows,
        )
    )
    checks = [
        Check(
            "through the proxy: the same validity figures as in process",
            "identical" if same else f"{cells[PROXIED]} vs {cells[IN_PROCESS]}",
            same,
        ),
        Check(
            "through the proxy, with notifications: 0 stale injections",
            str(cells[PROXIED]["stale_injections"]),
            cells[PROXIED]["stale_injections"] == 0,
        ),
    ]
    return StudyResult(NAME, TITLE, markdown, checks, data={"cells": cells})
