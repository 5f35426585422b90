"""One run of a scenario: a planner and a client arm against a fresh provider, episode by episode.

The episode loop (DESIGN.md §5): the planner plans a request from the task and the memory block
(and the feedback of earlier attempts) → the request goes to the server → the memory observes the
response and fulfils what it needs (changes feed, rules listing) → up to ``max_attempts``. Between
episodes the drift driver applies the pre-registered events. The oracle (a shadow registry that
receives the same drift) labels every eviction and injection; strategies never see it.
"""

from __future__ import annotations

import datetime as _dt
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from .. import __version__
from ..client.entries import EvictionReason
from ..client.events import (
    Evicted,
    FetchChanges,
    Observation,
    Quarantined,
    Restamped,
    RulesAlert,
    Stored,
)
from ..client.memory import FixMemory
from ..client.prompting import consumption
from ..client.strategies import strategy_for
from ..client.transport import MAX_NEED_ROUNDS, is_json
from ..client.trust import TrustPolicy
from ..domains import get_catalog
from ..planners import Attempt, Planner, PlanningContext
from ..planners.preflight import PROBES, preflight
from ..planners.registry import create_planner
from ..protocol.levels import Level
from ..protocol.models import Suggestion
from ..protocol.wirecost import paper_wire_cost, wire_cost
from ..server import Provider
from .arms import Arm
from .artifacts import ArtifactWriter, RunKey, RunMetadata
from .driver import DriftDriver
from .scenario import Scenario, ScenarioMismatch, check_scenario  # noqa: F401 (re-exported)

#: The consumption level every arm runs at (paper §3.5: compliance held fixed at L3, which subsumes L2).
CONSUMPTION_LEVEL = Level.AMENDED_INPUT


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
            self.arm.strategy,
            self.seed,
            self.arm.detection,
            self.arm.apply_mode,
        )


PlannerFactory = Callable[[str], Planner]
AppFactory = Callable[..., Any]
"""Builds the in-process ASGI app: ``(domain, *, level, registry, admin_token) -> app``."""


async def probe_planner(planner: Planner, seed: int) -> dict[str, Any]:
    """The run's opening preflight probe (paper §4): one known-valid fix, recording the served id."""
    report = await preflight(planner, seed=seed, probes=PROBES[:1], concurrency=1)
    return report.to_json()


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


async def run_one(
    spec: RunSpec,
    root: Path,
    *,
    server_url: str | None = None,
    admin_token: str | None = None,
    planner_factory: PlannerFactory = create_planner,
    app_factory: AppFactory | None = None,
    conditional: bool = False,
    trust: TrustPolicy | None = None,
    command: str | None = None,
) -> RunMetadata:
    """Run ``spec`` and write its artifact under ``root``; return the run metadata.

    ``conditional`` sends ``Contract-Since`` (the memory's position) with every domain request, so
    the server answers with the conditional contract. ``app_factory`` replaces ``create_app`` for
    the in-process server (e.g. a hostile server in a trust test); ``trust`` is the client's
    trust policy (eviction-rate bound, freshness ceiling, parameter guard).
    """
    scenario = spec.scenario
    conditional = conditional or scenario.conditional
    catalog = get_catalog(scenario.domain)
    check_scenario(scenario, catalog)
    level = Level(scenario.level)
    if server_url is not None and admin_token is None:
        raise ValueError("a run against a server URL needs that server's admin token")
    token = admin_token or secrets.token_urlsafe(16)
    shadow = Provider(catalog.domain, level=level)
    route = catalog.route
    if server_url is None:
        if app_factory is None:
            from ..server.app import create_app as app_factory
        app = app_factory(
            catalog.domain, level=level, registry=catalog.domain.registry(), admin_token=token
        )
        host = "".join(c if c.isalnum() else "-" for c in catalog.name.lower()).strip("-")
        origin = f"http://{host or 'domain'}.invalid"
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=origin)
    else:
        origin = server_url.rstrip("/")
        client = httpx.AsyncClient(base_url=origin, timeout=30.0)
    memory = FixMemory(strategy=spec.arm.strategy, detection=spec.arm.detection, trust=trust)
    memory.set_patchable(origin, route.patchable_fields)
    planner = planner_factory(spec.planner)
    writer = ArtifactWriter(root, spec.key)
    meta = RunMetadata(
        key=spec.key,
        package_version=__version__,
        scenario_digest=scenario.digest,
        level=int(level),
        planner_simulated=bool(getattr(planner, "simulated", False)),
        planner_requested=spec.planner,
        planner_served=None,
        episodes=scenario.episodes,
        started_at=_now(),
        extra={
            "arm_code": strategy_for(spec.arm.strategy).arm,
            "stale_slots": list(scenario.stale_slots),
            "departures": [d.model_dump() for d in scenario.departures],
            "compliance_class": scenario.compliance_class,
            "drift": [e.model_dump(exclude_none=True) for e in scenario.drift],
            "max_attempts": scenario.max_attempts,
            "domain": scenario.domain,
            "consumption_level": int(CONSUMPTION_LEVEL),
            "conditional": conditional,
            **({"command": command} if command else {}),
        },
    )
    run = _Run(spec, catalog, shadow, client, origin, memory, planner, writer, conditional)
    try:
        async with client:
            meta.preflight = await probe_planner(planner, spec.seed)
            meta.planner_served = meta.preflight.get("served_model")
            driver = DriftDriver(client, catalog, shadow.registry, token)
            if server_url is not None:
                await driver.reset(shadow.registry.state)
            for episode in range(1, scenario.episodes + 1):
                completed, served = await run.episode(episode)
                meta.completed_episodes += int(completed)
                meta.planner_served = meta.planner_served or served
                for event in scenario.drift_after(episode):
                    result = await driver.apply(event)
                    writer.write(
                        "drift",
                        after_episode=episode,
                        kind=event.kind,
                        target=event.target,
                        result=result,
                    )
                    run.mark_stale(episode)
    except BaseException:
        writer.abort()
        raise
    finally:
        await planner.aclose()
        memory.close()
    meta.completed = True
    meta.finished_at = _now()
    writer.finish(meta)
    return meta


#: Evicted reasons that replace or quarantine an entry rather than invalidate it.
_REPLACEMENTS = frozenset({EvictionReason.SUPERSEDED, EvictionReason.QUARANTINE})

_EVENT_NAMES = {
    Stored: "store",
    Evicted: "evict",
    Restamped: "restamp",
    Quarantined: "quarantine",
    RulesAlert: "alert",
}


class _Run:
    """One run in flight: the episode loop, need fulfilment, and the oracle's bookkeeping."""

    def __init__(self, spec, catalog, shadow, client, origin, memory, planner, writer, conditional):
        self.spec = spec
        self.catalog = catalog
        self.shadow = shadow
        self.client = client
        self.origin = origin
        self.memory = memory
        self.planner = planner
        self.writer = writer
        self.conditional = conditional
        self.route = catalog.route
        self.request_schema = catalog.route.request_model.model_json_schema()
        self.learned_on: dict[str, dict[str, Any]] = {}
        """entry id → the request whose response taught it (what the oracle re-runs)."""
        self.fixes: dict[str, Suggestion] = {}
        self.stale_marked: set[str] = set()
        self.last_request: dict[str, Any] | None = None
        """The episode's latest domain request: fixes stored while a need is fulfilled (the
        memory's deferred learn) came from its response, so the oracle labels them against it."""

    async def episode(self, episode: int) -> tuple[bool, str | None]:
        """Plan, send and observe up to ``max_attempts`` times; returns (completed, served model)."""
        scenario, memory, origin = self.spec.scenario, self.memory, self.origin
        family = self.catalog.task_families[scenario.family(episode)]
        draft = dict(family.fields)
        self.last_request = None
        await self.fulfil(memory.begin_episode(origin, episode), episode, 0)
        entries = memory.relevant(origin, draft, episode=episode)
        injected = [e.id for e in entries]
        stale_injected = []
        for entry in entries:
            stale = not self.catalog.is_fix_current(
                entry.suggestion, draft, self.shadow.registry.state
            )
            if stale:
                stale_injected.append(entry.id)
            self.writer.write(
                "memory",
                episode=episode,
                attempt=1,
                event="inject",
                entry=entry.id,
                key=entry.key.to_dict(),
                reason=None,
                stale=stale,
            )
        shown = consumption(self.catalog.system_prompt, entries, CONSUMPTION_LEVEL, draft)
        attempts: list[Attempt] = []
        tokens_in = tokens_out = 0
        estimated = False
        served = None
        completed = False
        for number in range(1, scenario.max_attempts + 1):
            context = PlanningContext(
                system_prompt=shown.system_prompt,
                task=family.text,
                task_fields=draft,
                request_schema=self.request_schema,
                memory_block=shown.memory_block,
                memory=shown.memory,
                amended_input=shown.amended_input,
                attempts=tuple(attempts),
                seed=self.spec.seed,
                episode=episode,
                attempt=number,
            )
            plan = await self.planner.plan(context)
            served = served or plan.served_model
            tokens_in += plan.usage.input_tokens
            tokens_out += plan.usage.output_tokens
            estimated = estimated or plan.usage.estimated
            request = plan.request
            if self.spec.arm.apply_mode == "client" and number == 1:
                request = self._apply_client_side(entries, request, episode)
            self.last_request = request
            response, body = await self._send(request)
            cost = wire_cost(body)
            self._record_attempt(episode, number, request, response, body, plan, cost)
            observation = memory.observe(
                origin,
                request,
                response.status_code,
                body,
                episode=episode,
                injected=injected,
                delta_since=_delta_since(response),
                response_bytes=len(response.content),
                contract_bytes=cost.contract,
            )
            self.log(observation, episode, number, request)
            await self.fulfil(observation.needs, episode, number)
            if response.status_code == 200:
                completed = True
                break
            attempts.append(Attempt(request=request, status=response.status_code, response=body))
        self.writer.write(
            "episode",
            episode=episode,
            family=family.id,
            klass=family.klass,
            action=family.action,
            attempts=len(attempts) + int(completed),
            first_try=completed and not attempts,
            completed=completed,
            stale_slot=episode in scenario.stale_slots,
            injected=injected,
            stale_injected=stale_injected,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            tokens_estimated=estimated,
        )
        return completed, served

    async def _send(self, request: dict[str, Any]) -> tuple[httpx.Response, dict[str, Any]]:
        headers = self.memory.conditional_headers(self.origin) if self.conditional else None
        response = await self.client.post(self.route.path, json=request, headers=headers)
        return response, response.json()

    def _record_attempt(self, episode, number, request, response, body, plan, cost) -> None:
        feedback = body.get("recovery_feedback") or {}
        paper = paper_wire_cost(body)
        self.writer.write(
            "attempt",
            episode=episode,
            attempt=number,
            status=response.status_code,
            request=request,
            response_bytes=len(response.content),
            contract_bytes=cost.contract,
            envelope_bytes=cost.envelope,
            suggestion_bytes=cost.suggestions,
            patch_bytes=cost.patch,
            paper_contract_bytes=paper.contract,
            paper_envelope_bytes=paper.envelope,
            rules_version=body.get("rules_version"),
            suggestion_types=[s.get("type") for s in feedback.get("suggestions", [])],
            tokens_in=plan.usage.input_tokens,
            tokens_out=plan.usage.output_tokens,
            tokens_estimated=plan.usage.estimated,
        )

    def _apply_client_side(self, entries, request, episode):
        """Client apply mode: patch the planned request with the cached fixes, on patchable paths only."""
        outcome = self.memory.apply_patches(self.origin, request, entries, episode=episode)
        for event in outcome.events:
            self._write_event(event, episode, 1, None)
        return outcome.request

    async def fulfil(self, needs, episode: int, attempt: int) -> None:
        """Fetch what the memory asked for and feed it back, until it asks for nothing more."""
        pending = list(needs)
        for _ in range(MAX_NEED_ROUNDS * 4):
            if not pending:
                return
            need = pending.pop(0)
            params = None
            if isinstance(need, FetchChanges):
                params = {"since": need.since, **({"epoch": need.epoch} if need.epoch else {})}
            response = await self.client.get(need.path, params=params)
            body = response.json() if is_json(response) else None
            observation = self.memory.answer(need, response.status_code, body, episode=episode)
            self.log(observation, episode, attempt, self.last_request)
            pending.extend(observation.needs)
        raise RuntimeError(f"the memory kept asking for more after {MAX_NEED_ROUNDS * 4} fetches")

    def log(self, observation: Observation, episode: int, attempt: int, request) -> None:
        """Write the memory's events, each eviction labelled by the oracle."""
        stored = [e for e in observation.events if isinstance(e, Stored)]
        if stored and request is not None:
            live = {entry.id: entry.suggestion for entry in self.memory.entries(self.origin)}
            for event in stored:
                self.learned_on[event.entry_id] = dict(request)
                self.fixes[event.entry_id] = live[event.entry_id]
        for event in observation.events:
            stale = None
            if isinstance(event, Evicted) and event.reason not in _REPLACEMENTS:
                stale = self.is_stale(event.entry_id)
            self._write_event(event, episode, attempt, stale)

    def is_stale(self, entry_id: str) -> bool | None:
        """The oracle's label: re-run the entry's policy on the request it was learned on."""
        draft, fix = self.learned_on.get(entry_id), self.fixes.get(entry_id)
        if draft is None or fix is None:
            return True if entry_id in self.stale_marked else None
        return not self.catalog.is_fix_current(fix, draft, self.shadow.registry.state)

    def mark_stale(self, episode: int) -> None:
        """After a drift event, record every live entry the oracle now finds stale (for recall)."""
        for entry in self.memory.entries(self.origin):
            if entry.id not in self.stale_marked and self.is_stale(entry.id):
                self.stale_marked.add(entry.id)
                self.writer.write("stale", episode=episode, entry=entry.id)

    def _write_event(self, event, episode, attempt, stale) -> None:
        name = _EVENT_NAMES.get(type(event))
        if name is None:
            return
        if name == "evict" and event.reason in _REPLACEMENTS:
            name = "supersede" if event.reason is EvictionReason.SUPERSEDED else "quarantine"
        self.writer.write(
            "memory",
            episode=episode,
            attempt=attempt,
            event=name,
            entry=getattr(event, "entry_id", None),
            key=event.key.to_dict() if hasattr(event, "key") else None,
            reason=getattr(getattr(event, "reason", None), "value", None),
            stale=stale,
        )


def _delta_since(response: httpx.Response) -> int | None:
    value = response.headers.get("Contract-Since")
    return int(value) if value is not None and value.isdigit() else None
