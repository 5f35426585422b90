"""One run of a scenario: a planner and a client arm against a fresh provider, episode by episode.

The agent side is what users run: a ``FixMemory`` behind ``AsyncContractTransport`` (over the
in-process ASGI app, or the network for ``server_url``; with ``watch`` it keeps the watch stream
open, SPEC §8.4, over a real socket: the in-process app is then served by uvicorn on 127.0.0.1),
or with ``transport="mcp-stdio"`` /
``"mcp-http"`` behind an MCP ``ContractSession`` talking to ``serve-mcp`` in a child process
(``mcp_channel``); ``episode.EpisodeLoop`` drives the episodes through it. Between episodes the
drift driver applies the pre-registered events, on a client of its own (the memory never sees
admin answers), and the channel settles (a server in another process catches up). The oracle (a
shadow registry that receives the same drift) labels every eviction and injection; strategies
never see it.

A run always ends with its metadata written: ``completed`` true, or false with the ``error`` that
stopped it (the records of the finished episodes stay beside it, and a rerun starts it again).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as _dt
import functools
import secrets
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from .. import __version__
from ..client.detection import Detection
from ..client.events import MemoryEvent
from ..client.memory import FixMemory
from ..client.patching import ApplyMode
from ..client.strategies import strategy_for
from ..client.trust import TrustPolicy
from ..domains import get_catalog
from ..domains.catalog import DomainCatalog
from ..httpx import AsyncContractTransport
from ..planners import Planner
from ..planners.errors import PlannerError
from ..planners.preflight import PROBES, preflight
from ..planners.registry import ConfiguredPlanners, create_planner
from ..protocol.levels import Level
from ..server import Provider
from .arms import Arm
from .artifacts import ArtifactWriter, RunKey, RunMetadata
from .channels import FRAMEWORK_TRANSPORTS, HttpChannel
from .driver import DriftDriver
from .episode import CONSUMPTION_LEVEL, Agent, EpisodeLoop
from .errors import HarnessError, PlannerUnavailable, ServerUnavailable
from .oracle import Oracle
from .scenario import Scenario, ScenarioMismatch
from .verify import check_scenario

if TYPE_CHECKING:
    from starlette.types import ASGIApp

__all__ = [
    "CONSUMPTION_LEVEL",
    "FRAMEWORK_TRANSPORTS",
    "TRANSPORTS",
    "HarnessError",
    "PlannerUnavailable",
    "RunSpec",
    "ScenarioMismatch",
    "ServerUnavailable",
    "check_scenario",
    "planner_factory_for",
    "run_one",
]


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One cell of the grid."""

    scenario: Scenario
    planner: str
    arm: Arm
    seed: int

    @property
    def key(self) -> RunKey:
        return RunKey(
            self.scenario.name,
            self.planner,
            self.arm.label,
            self.seed,
            self.arm.detection,
            self.arm.apply_mode,
        )


#: How a run reaches the provider: httpx over HTTP (the default), MCP over stdio or streamable
#: HTTP (``mcp`` is ``mcp-stdio``), or an agent framework's integration over streamable HTTP MCP
#: (``framework_channel``).
TRANSPORTS = ("http", "mcp", "mcp-stdio", "mcp-http", "pydantic-ai", "openai-agents", "langchain")

PlannerFactory = Callable[[str], Planner]
"""Builds the planner a spec names: ``create_planner``, with any options bound."""
AppFactory = Callable[..., "ASGIApp"]
"""Builds the in-process ASGI app: ``(domain, *, level, registry, admin_token) -> app``."""


def planner_factory_for(
    options: Mapping[str, Any], factory: Callable[..., Planner] = create_planner
) -> PlannerFactory:
    """``factory`` with planner options bound (``--planner-option KEY=VALUE``); picklable, so a
    grid's worker processes build the same planner. The default factory gives each planner the
    options its kind accepts; another factory is called with every option as a keyword."""
    if not options:
        return factory
    if factory is create_planner:
        return ConfiguredPlanners(dict(options))
    return functools.partial(factory, **options)


async def run_one(
    spec: RunSpec,
    root: Path,
    *,
    server_url: str | None = None,
    admin_token: str | None = None,
    planner_factory: PlannerFactory = create_planner,
    planner_options: Mapping[str, Any] | None = None,
    app_factory: AppFactory | None = None,
    conditional: bool = False,
    trust: TrustPolicy | None = None,
    command: str | None = None,
    transport: str = "http",
    notifications: bool = False,
    watch: bool = False,
) -> RunMetadata:
    """Run ``spec`` and write its artifact under ``root``; return the run metadata.

    ``planner_options`` are bound to ``planner_factory`` (see ``planner_factory_for``) and recorded,
    secrets masked. ``conditional`` sends ``Contract-Since`` (the memory's position) with every
    domain request, so the server answers with the conditional contract. ``app_factory`` replaces
    ``create_app`` for the in-process server (e.g. a hostile server in a trust test); ``trust`` is
    the client's trust policy (eviction-rate bound, freshness ceiling, parameter guard).
    ``transport``: one of ``TRANSPORTS``; over MCP, ``notifications`` makes the agent follow
    ``resources/updated`` (eager detection without polling), which changes the stale injections;
    over HTTP, ``watch`` keeps the watch stream open (push over plain HTTP, the same effect).

    Raises ``ServerUnavailable`` when the server stops answering, ``PlannerUnavailable`` when the
    planner cannot be built or reached, ``UnlabelledEviction`` when the oracle cannot label an
    eviction; the metadata is written either way.
    """
    plan = _validate(
        spec, server_url, admin_token, app_factory, conditional, transport, notifications, watch
    )
    writer = ArtifactWriter(root, spec.key)
    meta = _metadata(spec, plan.level, plan.conditional, command, planner_options or {})
    meta.extra["transport"] = transport_label(plan.transport, notifications, watch)
    detection = Detection.parse(spec.arm.detection)
    memory = FixMemory(strategy_for(spec.arm.strategy), detection, trust=trust)
    planner: Planner | None = None
    try:
        planner = _build_planner(planner_factory_for(planner_options or {}, planner_factory), spec)
        meta.planner_simulated = bool(getattr(planner, "simulated", False))
        async with _open(plan, memory) as (agent, admin):
            await _drive(plan, meta, planner, memory, writer, agent, admin)
        meta.completed = True
    except httpx.TransportError as exc:
        where = _origin(spec.scenario, server_url)
        meta.error = f"the server at {where} stopped answering: {_one_line(exc)}"
        raise ServerUnavailable(meta.error) from exc
    except BaseException as exc:
        meta.error = _one_line(exc)
        raise
    finally:
        await _finish(meta, planner, memory, writer)
    return meta


@dataclass(frozen=True, slots=True)
class _Plan:
    """A run ``_validate`` accepted: everything ``run_one`` decided before opening anything."""

    spec: RunSpec
    catalog: DomainCatalog
    level: Level
    transport: str
    """Canonical (``wire_of``)."""
    conditional: bool
    """The caller's choice or the scenario's."""
    notifications: bool
    watch: bool
    """Over HTTP: the agent's transport keeps the watch stream open."""
    server_url: str | None
    app_factory: AppFactory | None
    token: str
    """The admin token: the caller's for a server URL, a fresh one for the in-process server."""


def _validate(
    spec: RunSpec,
    server_url: str | None,
    admin_token: str | None,
    app_factory: AppFactory | None,
    conditional: bool,
    transport: str,
    notifications: bool,
    watch: bool = False,
) -> _Plan:
    """Check the scenario against its domain and the options against each other; ``ValueError`` or
    ``ScenarioMismatch`` before any artifact is written."""
    scenario = spec.scenario
    catalog = get_catalog(scenario.domain)
    check_scenario(scenario, catalog)
    level = Level.NONE if spec.arm.withheld else Level(scenario.level)
    transport = wire_of(transport)
    if server_url is not None and admin_token is None:
        raise ValueError("a run against a server URL needs that server's admin token")
    if server_url is not None and transport != "http":
        raise ValueError("a run against a server URL goes over HTTP")
    if notifications and transport == "http":
        raise ValueError("notifications are an MCP transport's (resources/updated)")
    if notifications and transport in FRAMEWORK_TRANSPORTS:
        raise ValueError("notifications are the mcp-stdio and mcp-http transports'")
    if watch and transport != "http":
        raise ValueError("the watch stream is the http transport's (over MCP: notifications)")
    return _Plan(
        spec=spec,
        catalog=catalog,
        level=level,
        transport=transport,
        conditional=conditional or scenario.conditional,
        notifications=notifications,
        watch=watch,
        server_url=server_url,
        app_factory=app_factory,
        token=admin_token or secrets.token_urlsafe(16),
    )


def _open(
    plan: _Plan, memory: FixMemory
) -> contextlib.AbstractAsyncContextManager[tuple[Agent, httpx.AsyncClient]]:
    """The agent's channel and the drift driver's admin client, over the plan's transport."""
    if plan.transport == "http":
        return _connect(
            plan.spec.scenario,
            plan.catalog,
            memory,
            plan.server_url,
            plan.app_factory,
            plan.token,
            plan.level,
            plan.conditional,
            plan.watch,
        )
    if plan.transport in FRAMEWORK_TRANSPORTS:
        return _connect_framework(plan, memory)
    return _connect_mcp(
        plan.spec.scenario,
        plan.catalog,
        memory,
        plan.token,
        plan.level,
        plan.conditional,
        plan.transport,
        plan.notifications,
    )


async def _drive(
    plan: _Plan,
    meta: RunMetadata,
    planner: Planner,
    memory: FixMemory,
    writer: ArtifactWriter,
    agent: Agent,
    admin: httpx.AsyncClient,
) -> None:
    """Preflight the planner, then every episode, each followed by the drift scheduled after it
    (recorded, with the entries the oracle finds newly stale, and settled on the channel)."""
    scenario, spec = plan.spec.scenario, plan.spec
    shadow = Provider(plan.catalog.domain, level=plan.level)
    meta.preflight = await _probe(planner, spec)
    meta.planner_served = meta.preflight.get("served_model")
    driver = DriftDriver(admin, plan.catalog, shadow.registry, plan.token)
    oracle = Oracle(plan.catalog, shadow.registry)
    mode = ApplyMode(spec.arm.apply_mode)
    loop = EpisodeLoop(scenario, spec.seed, mode, plan.catalog, agent, planner, writer, oracle)
    if plan.server_url is not None:
        await driver.reset(shadow.registry.state)
    for episode in range(1, scenario.episodes + 1):
        completed, served = await loop.run(episode)
        meta.completed_episodes += int(completed)
        meta.planner_served = meta.planner_served or served
        for event in scenario.drift_after(episode):
            live = [e.id for e in memory.entries(agent.origin)]
            result = await driver.apply(event)
            writer.write(
                "drift",
                after_episode=episode,
                kind=event.kind,
                target=event.target,
                result=result,
            )
            for entry in oracle.newly_stale(live):
                writer.write("stale", episode=episode, entry=entry)
            await agent.channel.drifted(result)


async def _finish(
    meta: RunMetadata, planner: Planner | None, memory: FixMemory, writer: ArtifactWriter
) -> None:
    """Close the planner and the memory and write the metadata, whatever happened before."""
    try:
        if planner is not None:
            await planner.aclose()
    finally:
        memory.close()
        meta.finished_at = _now()
        writer.finish(meta)


def wire_of(transport: str) -> str:
    """The canonical name of a transport (``mcp`` is ``mcp-stdio``); ``ValueError`` if unknown."""
    if transport not in TRANSPORTS:
        raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, not {transport!r}")
    return "mcp-stdio" if transport == "mcp" else transport


def transport_label(transport: str, notifications: bool = False, watch: bool = False) -> str:
    """What a run's metadata records as its transport (``AsyncContractTransport`` over HTTP)."""
    transport = wire_of(transport)
    if transport == "http":
        return "AsyncContractTransport (watch stream)" if watch else "AsyncContractTransport"
    if transport in FRAMEWORK_TRANSPORTS:
        return f"{_FRAMEWORK_LABELS[transport]} (MCP over streamable HTTP)"
    wire = "stdio" if transport == "mcp-stdio" else "streamable HTTP"
    return f"ContractSession (MCP over {wire}{', resources/updated' if notifications else ''})"


def _origin(scenario: Scenario, server_url: str | None) -> str:
    """The origin the memory keys the run's entries by: the server URL, or a name of the domain."""
    if server_url is not None:
        return server_url.rstrip("/")
    host = "".join(c if c.isalnum() else "-" for c in scenario.domain.lower()).strip("-")
    return f"http://{host or 'domain'}.invalid"


@contextlib.asynccontextmanager
async def _connect(
    scenario: Scenario,
    catalog: DomainCatalog,
    memory: FixMemory,
    server_url: str | None,
    app_factory: AppFactory | None,
    token: str,
    level: Level,
    conditional: bool,
    watch: bool = False,
) -> AsyncIterator[tuple[Agent, httpx.AsyncClient]]:
    """The agent's client (over the contract transport) and the operator's, to one server.

    With ``watch`` the transport keeps the watch stream open; it needs a real socket, so the
    in-process app is served by uvicorn on 127.0.0.1 and its URL is the origin."""
    async with contextlib.AsyncExitStack() as stack:
        app: ASGIApp | None = None
        if server_url is None:
            if app_factory is None:
                from ..server.http.app import create_app

                app_factory = create_app
            app = app_factory(
                catalog.domain, level=level, registry=catalog.domain.registry(), admin_token=token
            )
            if watch:
                from ..server.http.serve import serving

                server_url = await stack.enter_async_context(serving(app))
        origin = _origin(scenario, server_url)
        wire: Callable[[], httpx.AsyncBaseTransport] = (
            functools.partial(httpx.ASGITransport, app=app)
            if server_url is None and app is not None
            else httpx.AsyncHTTPTransport
        )
        background: list[MemoryEvent] = []
        transport = AsyncContractTransport(
            memory,
            wire(),
            origin_of=lambda _url: origin,
            conditional=conditional,
            watch=watch,
            listener=background.append if watch else None,
        )
        client = httpx.AsyncClient(transport=transport, base_url=origin, timeout=30.0)
        admin = httpx.AsyncClient(transport=wire(), base_url=origin, timeout=30.0)
        patchable = frozenset().union(
            *(route.patchable_fields for route in catalog.routes.values())
        )
        memory.set_patchable(origin, patchable)
        channel = HttpChannel(client, transport, origin=origin, watch=watch, background=background)
        async with client, admin:
            yield Agent(channel, origin, memory), admin


@contextlib.asynccontextmanager
async def _connect_mcp(
    scenario: Scenario,
    catalog: DomainCatalog,
    memory: FixMemory,
    token: str,
    level: Level,
    conditional: bool,
    transport: str,
    notifications: bool,
) -> AsyncIterator[tuple[Agent, httpx.AsyncClient]]:
    """The agent over an MCP session to ``serve-mcp`` in a child process, and the operator's
    client to the same registry."""
    from .mcp_channel import mcp_agent

    async with mcp_agent(
        catalog,
        memory,
        domain=scenario.domain,
        level=level,
        token=token,
        conditional=conditional,
        wire="stdio" if transport == "mcp-stdio" else "http",
        notifications=notifications,
    ) as (channel, origin, admin):
        yield Agent(channel, origin, memory), admin


_FRAMEWORK_LABELS = {
    "pydantic-ai": "PydanticAI ContractToolset",
    "openai-agents": "OpenAI Agents SDK ContractMCPServerStreamableHttp",
    "langchain": "LangGraph ReAct agent, LangChain contract tools",
}


@contextlib.asynccontextmanager
async def _connect_framework(
    plan: _Plan, memory: FixMemory
) -> AsyncIterator[tuple[Agent, httpx.AsyncClient]]:
    """The agent through the plan's framework (its integration and agent loop), over an MCP
    session to ``serve-mcp`` in a child process, and the operator's client to the same registry."""
    from .framework_channel import framework_agent

    async with framework_agent(
        plan.transport,
        plan.catalog,
        memory,
        level=plan.level,
        token=plan.token,
        conditional=plan.conditional,
        domain=plan.spec.scenario.domain,
    ) as (channel, origin, admin):
        yield Agent(channel, origin, memory), admin


def _build_planner(factory: PlannerFactory, spec: RunSpec) -> Planner:
    try:
        return factory(spec.planner)
    except (PlannerError, ImportError) as exc:
        raise PlannerUnavailable(f"cannot build planner {spec.planner}: {_one_line(exc)}") from exc


async def _probe(planner: Planner, spec: RunSpec) -> dict[str, Any]:
    """The run's opening preflight probe (paper §4): one known-valid fix; records the served id."""
    try:
        report = await preflight(planner, seed=spec.seed, probes=PROBES[:1], concurrency=1)
    except PlannerError as exc:
        raise PlannerUnavailable(
            f"planner {spec.planner} failed its opening probe: {_one_line(exc)}"
        ) from exc
    return report.to_json()


def _metadata(
    spec: RunSpec, level: Level, conditional: bool, command: str | None, options: Mapping[str, Any]
) -> RunMetadata:
    scenario = spec.scenario
    return RunMetadata(
        key=spec.key,
        package_version=__version__,
        scenario_digest=scenario.digest,
        level=int(level),
        planner_simulated=False,
        planner_requested=spec.planner,
        planner_served=None,
        episodes=scenario.episodes,
        started_at=_now(),
        extra={
            "arm_code": strategy_for(spec.arm.strategy).arm + ("∅" if spec.arm.withheld else ""),
            "stale_slots": list(scenario.stale_slots),
            "departures": [d.model_dump() for d in scenario.departures],
            "compliance_class": scenario.compliance_class,
            "drift": [e.model_dump(exclude_none=True) for e in scenario.drift],
            "max_attempts": scenario.max_attempts,
            "domain": scenario.domain,
            "consumption_level": int(CONSUMPTION_LEVEL),
            "conditional": conditional,
            **({"planner_options": _masked(options)} if options else {}),
            **({"command": command} if command else {}),
        },
    )


_SECRET_WORDS = ("key", "token", "secret", "password")


def _masked(options: Mapping[str, Any]) -> dict[str, Any]:
    """Planner options as recorded: values of keys that name a secret are masked."""
    return {
        name: "***" if any(word in name.lower() for word in _SECRET_WORDS) else value
        for name, value in sorted(options.items())
    }


def _one_line(exc: BaseException) -> str:
    """An error as one line of text; an interrupted run says so."""
    if isinstance(exc, (KeyboardInterrupt, SystemExit, asyncio.CancelledError)):
        return "interrupted"
    return " ".join(str(exc).split()) or type(exc).__name__


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
