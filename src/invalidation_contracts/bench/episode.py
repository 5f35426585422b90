"""One episode of a run, driven through the shipped transport, and what it writes to the artifact.

The planner plans a request from the task and the memory block (and the feedback of earlier
attempts); the request goes to the server through the run's ``Channel`` (``AsyncContractTransport``
over HTTP, or an MCP session), which feeds the response to the memory and fetches what the memory
asks for, exactly as in an agent; up to ``max_attempts`` times. Every memory event reaches this
loop through the request's listener, and the oracle labels each eviction and injection. An
unusable planner reply is a failed attempt, recorded with its raw text; it never ends the episode
early. The planner is shown each response as a model sees it (``client.modelview``: no contract
metadata); the memory and the oracle get the raw body, and each attempt records the input tokens
the contract would have cost had it been shown (``contract_tokens``, an estimate).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ..client.entries import EvictionReason, MemoryEntry
from ..client.events import (
    Evicted,
    MemoryEvent,
    Probing,
    Quarantined,
    Restamped,
    RulesAlert,
    Stored,
)
from ..client.memory import FixMemory
from ..client.modelview import model_view
from ..client.prompting import consumption
from ..domains.catalog import DomainCatalog, TaskFamily
from ..planners import Attempt, Plan, Planner, PlanningContext
from ..planners.errors import PlannerCallError, PlannerError, PlannerResponseError
from ..planners.rendering import contract_tokens
from ..protocol.levels import Level
from ..protocol.models import Suggestion
from ..protocol.wirecost import paper_wire_cost
from ..server import Route
from .artifacts import ArtifactWriter
from .channels import Channel, Outgoing
from .errors import PlannerUnavailable
from .faithfulness import unfaithful_fields
from .oracle import Oracle
from .scenario import Scenario

#: The consumption level every arm runs at (paper §3.5: compliance held at L3, which subsumes L2).
CONSUMPTION_LEVEL = Level.AMENDED_INPUT

_EVENT_NAMES: dict[type[MemoryEvent], str] = {
    Stored: "store",
    Evicted: "evict",
    Restamped: "restamp",
    Quarantined: "quarantine",
    RulesAlert: "alert",
    Probing: "probe",
}


@dataclass(frozen=True, slots=True)
class Agent:
    """What an episode talks to the server with: a channel, and the memory it feeds."""

    channel: Channel
    origin: str
    memory: FixMemory


@dataclass(slots=True)
class _Tally:
    """An episode in progress: what was tried, what it cost, and the fixes it saw."""

    attempts: list[Attempt] = field(default_factory=list)
    """What the planner is shown of each earlier attempt (responses in their model view)."""
    received: list[Attempt] = field(default_factory=list)
    """The same attempts with the responses as received."""
    number: int = 0
    accepted: dict[str, Any] | None = None
    fixes: list[Suggestion] = field(default_factory=list)
    tokens_in: int = 0
    tokens_out: int = 0
    estimated: bool = False
    served: str | None = None
    planner_errors: int = 0
    planner_retries: int = 0
    stale_sent: list[Suggestion] | None = None
    """The stale values the episode's opening request sent (``Oracle.stale_sent``)."""

    def charge(self, plan: Plan) -> None:
        self.tokens_in += plan.usage.input_tokens
        self.tokens_out += plan.usage.output_tokens
        self.estimated = self.estimated or plan.usage.estimated
        self.served = self.served or plan.served_model
        self.planner_retries += planner_retries(plan)


class EpisodeLoop:
    """Runs the episodes of one run in order; the oracle and the artifact see every event."""

    def __init__(
        self,
        scenario: Scenario,
        seed: int,
        apply_mode: str,
        catalog: DomainCatalog,
        agent: Agent,
        planner: Planner,
        writer: ArtifactWriter,
        oracle: Oracle,
    ) -> None:
        self.scenario = scenario
        self.seed = seed
        self.client_applies = apply_mode == "client"
        self.catalog = catalog
        self.agent = agent
        self.planner = planner
        self.writer = writer
        self.oracle = oracle
        self._target(catalog.route)
        self._call_failures = 0
        """Planner calls failed in a row (``PlannerCallError``); ``max_attempts`` stop the run."""

    async def run(self, episode: int) -> tuple[bool, str | None]:
        """Plan, send and observe up to ``max_attempts`` times; return (completed, served model)."""
        family = self.catalog.task_families[self.scenario.family(episode)]
        self._target(self.catalog.route_of(family))
        draft = family.draft()
        await self._begin(episode)
        entries, stale_injected = self._inject(draft, episode)
        injected = [entry.id for entry in entries]
        base = self.catalog.system_prompt_of(family)
        shown = consumption(base, entries, CONSUMPTION_LEVEL, draft)
        tally = _Tally(fixes=[entry.suggestion for entry in entries])
        while tally.number < self.scenario.max_attempts and tally.accepted is None:
            tally.number += 1
            context = PlanningContext(
                system_prompt=shown.system_prompt,
                task=family.text,
                task_fields=draft,
                request_schema=self.request_schema,
                memory_block=shown.memory_block,
                memory=shown.memory,
                amended_input=shown.amended_input,
                attempts=tuple(tally.attempts),
                seed=self.seed,
                episode=episode,
                attempt=tally.number,
            )
            plan = await self._plan(context, tally)
            if plan is None:
                continue
            request = plan.request
            if self.client_applies and not tally.attempts:
                request = self._apply_client_side(entries, request, episode)
            if not tally.attempts and tally.stale_sent is None:  # the episode's opening request
                tally.stale_sent = self.oracle.stale_sent(request, draft, self.route)
            hidden = contract_tokens(dataclasses.replace(context, attempts=tuple(tally.received)))
            status, body = await self._send(request, episode, injected, tally.number, plan, hidden)
            tally.fixes.extend(_suggestions(body))
            if status == 200:
                tally.accepted = request
            else:
                tally.attempts.append(Attempt(request, status, model_view(body)))
                tally.received.append(Attempt(request, status, body))
        self._finish(episode, family, injected, stale_injected, tally)
        return tally.accepted is not None, tally.served

    def _target(self, route: Route[Any]) -> None:
        """Point the next episode at ``route`` (its family's): where requests go, the operation
        fixes are filed and looked up under (a route, or a tool name), the schema a planner
        answers."""
        self.route = route
        self.operation = self.agent.channel.operation(route)
        self.request_schema: dict[str, Any] = route.request_model.model_json_schema()

    async def _begin(self, episode: int) -> None:
        """Fetch what the memory wants before the episode (resync detection), as an agent does.

        What the memory did since the last request on its own (a notification's refresh over
        MCP) is logged here too: it happened before this episode's first lookup."""
        events: list[MemoryEvent] = self.agent.channel.take_events()
        needs = self.agent.memory.begin_episode(self.agent.origin, episode)
        if needs:
            await self.agent.channel.fulfil(needs, episode=episode, listener=events.append)
        self._log(events, episode, 0)

    def _inject(self, draft: dict[str, Any], episode: int) -> tuple[list[MemoryEntry], list[str]]:
        """Look up the entries for this draft and record each injection with the oracle's label;
        returns the entries and the ids of the stale ones."""
        lookup = self.agent.memory.lookup(
            self.agent.origin, draft, episode=episode, operation=self.operation
        )
        self._log(lookup.events, episode, 1)
        stale_ids = []
        for entry in lookup.entries:
            stale = not self.oracle.is_current(entry.suggestion, draft, self.route)
            if stale:
                stale_ids.append(entry.id)
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
        return list(lookup.entries), stale_ids

    async def _plan(self, context: PlanningContext, tally: _Tally) -> Plan | None:
        """The planner's plan, or None after recording an unusable reply as a failed attempt."""
        try:
            plan = await self.planner.plan(context)
        except (PlannerResponseError, PlannerCallError) as exc:
            self._planner_failed(context, exc, tally)
            return None
        self._call_failures = 0
        tally.charge(plan)
        return plan

    def _planner_failed(self, context: PlanningContext, exc: PlannerError, tally: _Tally) -> None:
        calls = isinstance(exc, PlannerCallError)
        self._call_failures = self._call_failures + 1 if calls else 0
        tally.planner_errors += 1
        tally.planner_retries += planner_retries(exc)
        self.writer.write(
            "attempt",
            episode=context.episode,
            attempt=context.attempt,
            status=None,
            request=None,
            planner_error={
                "kind": "call" if calls else "response",
                "detail": str(exc),
                "raw": getattr(exc, "raw", None),
            },
            planner_retries=planner_retries(exc),
            tokens_in=0,
            tokens_out=0,
            tokens_estimated=False,
        )
        if self._call_failures >= self.scenario.max_attempts:
            raise PlannerUnavailable(
                f"planner {self.planner.name} failed {self._call_failures} calls in a row: {exc}"
            )

    async def _send(
        self,
        request: dict[str, Any],
        episode: int,
        injected: list[str],
        number: int,
        plan: Plan,
        hidden: int,
    ) -> tuple[int, dict[str, Any]]:
        """Send through the run's channel; record the attempt, then the memory's events.

        ``hidden``: the input tokens the planner was spared by seeing responses without their
        contract metadata (an estimate)."""
        events: list[MemoryEvent] = []
        reply = await self.agent.channel.send(
            Outgoing(request, self.route, episode, injected, events.append)
        )
        body, cost = reply.body, reply.cost
        self.oracle.heard(request, _suggestions(body), self.route)
        paper = paper_wire_cost(body)
        feedback = body.get("recovery_feedback")
        suggested = feedback.get("suggestions") if isinstance(feedback, dict) else None
        self.writer.write(
            "attempt",
            episode=episode,
            attempt=number,
            status=reply.status,
            request=request,
            response_bytes=reply.size,
            contract_bytes=cost.contract,
            envelope_bytes=cost.envelope,
            suggestion_bytes=cost.suggestions,
            patch_bytes=cost.patch,
            paper_contract_bytes=paper.contract,
            paper_envelope_bytes=paper.envelope,
            rules_version=body.get("rules_version"),
            suggestion_types=[s.get("type") for s in suggested or () if isinstance(s, dict)],
            tokens_in=plan.usage.input_tokens,
            tokens_out=plan.usage.output_tokens,
            tokens_estimated=plan.usage.estimated,
            contract_tokens=hidden,
            contract_tokens_estimated=True,
            planner_retries=planner_retries(plan),
        )
        self._log(events, episode, number)
        return reply.status, body

    def _apply_client_side(
        self, entries: Sequence[MemoryEntry], request: dict[str, Any], episode: int
    ) -> dict[str, Any]:
        """Client apply mode: patch the planned request with the cached fixes (patchable paths)."""
        memory, origin = self.agent.memory, self.agent.origin
        outcome = memory.apply_patches(
            origin, request, entries, episode=episode, operation=self.operation
        )
        self._log(outcome.events, episode, 1)
        return outcome.request

    def _finish(
        self,
        episode: int,
        family: TaskFamily,
        injected: list[str],
        stale_injected: list[str],
        tally: _Tally,
    ) -> None:
        completed = tally.accepted is not None
        departures = (
            unfaithful_fields(family.fields, tally.accepted, tally.fixes, self.request_schema)
            if tally.accepted is not None
            else ()
        )
        self.writer.write(
            "episode",
            episode=episode,
            family=family.id,
            route=self.route.path,
            klass=family.klass,
            action=family.action,
            attempts=tally.number,
            first_try=completed and tally.number == 1,
            completed=completed,
            faithful=not departures if completed else None,
            unfaithful_fields=list(departures),
            stale_slot=episode in self.scenario.stale_slots,
            injected=injected,
            stale_injected=stale_injected,
            stale_sent=[
                {"type": s.type, "scope": dict(s.scope or {}), "parameters": dict(s.parameters)}
                for s in tally.stale_sent or ()
            ],
            planner_errors=tally.planner_errors,
            planner_retries=tally.planner_retries,
            tokens_in=tally.tokens_in,
            tokens_out=tally.tokens_out,
            tokens_estimated=tally.estimated,
        )

    def _entries(self) -> list[MemoryEntry]:
        return self.agent.memory.entries(self.agent.origin)

    def _log(self, events: Iterable[MemoryEvent], episode: int, attempt: int) -> None:
        """Write the memory's events, registering stored entries and labelling each eviction."""
        events = list(events)
        live: dict[str, Suggestion] | None = None
        for event in events:
            name = _EVENT_NAMES.get(type(event))
            if name is None:
                continue
            stale = None
            fix: dict[str, Any] | None = None
            cascaded: str | None = None
            tables: list[str] | None = None
            if isinstance(event, Stored):
                if live is None:
                    live = {e.id: e.suggestion for e in self._entries()}
                learned = live.get(event.entry_id)
                self.oracle.learned(event, learned)
                if learned is not None:
                    fix = {"type": learned.type, "parameters": dict(learned.parameters)}
                tables = sorted(event.tables)
            elif isinstance(event, Restamped):
                tables = sorted(event.versions) + (["rules"] if event.rules_version else [])
            elif isinstance(event, Probing):
                stale = self.oracle.is_stale(event.entry_id)
            elif isinstance(event, Evicted):
                if event.reason is EvictionReason.CONSUMER:
                    parent = _PARENT.search(event.detail)
                    if parent is not None:
                        cascaded = parent.group(1)
                if event.reason is EvictionReason.SUPERSEDED:
                    name = "supersede"
                elif event.reason is EvictionReason.QUARANTINE:
                    name = "quarantine"
                else:
                    stale = self.oracle.is_stale(event.entry_id)
            self.writer.write(
                "memory",
                episode=episode,
                attempt=attempt,
                event=name,
                entry=getattr(event, "entry_id", None),
                key=event.key.to_dict() if hasattr(event, "key") else None,
                reason=getattr(getattr(event, "reason", None), "value", None),
                stale=stale,
                **({"fix": fix} if fix is not None else {}),
                **({"cascaded_from": cascaded} if cascaded is not None else {}),
                **({"tables": tables} if tables is not None else {}),
            )


_PARENT = re.compile(r"derived from (\S+)")
"""The parent a consumer eviction names (``Ledger.evict``: ``derived from e7``)."""


def planner_retries(source: object) -> int:
    """The retries a planner reports for one call (``retries`` on its plan or its error)."""
    value = getattr(source, "retries", 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _suggestions(body: dict[str, Any]) -> list[Suggestion]:
    """The well-formed suggestions of a response body."""
    feedback = body.get("recovery_feedback")
    raw = feedback.get("suggestions") if isinstance(feedback, dict) else None
    out = []
    for item in raw if isinstance(raw, list) else ():
        try:
            out.append(Suggestion.model_validate(item))
        except ValidationError:
            continue
    return out
