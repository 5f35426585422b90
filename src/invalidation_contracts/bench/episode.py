"""One episode of a run, driven through the shipped transport, and what it writes to the artifact.

The planner plans a request from the task and the memory block (and the feedback of earlier
attempts); the request goes to the server through the run's ``Channel`` (``AsyncContractTransport``
over HTTP, or an MCP session), which feeds the response to the memory and fetches what the memory
asks for, exactly as in an agent; up to ``max_attempts`` times. Every memory event reaches this
loop through the request's listener, and the oracle labels each eviction and injection. An
unusable planner reply is a failed attempt, recorded with its raw text; it never ends the episode
early. The planner is shown each response as a model sees it (``client.modelview``: no contract
metadata); the memory and the oracle get the raw body, and each attempt records the input tokens
the contract would have cost had it been shown (``contract_tokens``, an estimate). What goes to
the artifact, and how each event is labelled, is ``bench.records``.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ..client.entries import MemoryEntry
from ..client.events import MemoryEvent, ReadResource
from ..client.memory import FixMemory, Lookup
from ..client.modelview import model_view
from ..client.patching import ApplyMode
from ..client.prompting import consumption
from ..domains.catalog import DomainCatalog
from ..planners import Attempt, Plan, Planner, PlanningContext
from ..planners.errors import PlannerCallError, PlannerError, PlannerResponseError
from ..planners.rendering import contract_tokens
from ..protocol.levels import Level
from ..protocol.models import Suggestion
from ..server import Route
from .artifacts import ArtifactWriter
from .channels import Channel, Outgoing
from .errors import PlannerUnavailable
from .oracle import Oracle
from .records import EpisodeRecords, Tally, planner_retries
from .scenario import Scenario

#: The consumption level every arm runs at (paper §3.5: compliance held at L3, which subsumes L2).
CONSUMPTION_LEVEL = Level.AMENDED_INPUT


@dataclass(frozen=True, slots=True)
class Agent:
    """What an episode talks to the server with: a channel, and the memory it feeds."""

    channel: Channel
    origin: str
    memory: FixMemory


class EpisodeLoop:
    """Runs the episodes of one run in order; the oracle and the artifact see every event."""

    def __init__(
        self,
        scenario: Scenario,
        seed: int,
        apply_mode: ApplyMode,
        catalog: DomainCatalog,
        agent: Agent,
        planner: Planner,
        writer: ArtifactWriter,
        oracle: Oracle,
    ) -> None:
        self.scenario = scenario
        self.seed = seed
        self.client_applies = apply_mode is ApplyMode.CLIENT
        self.catalog = catalog
        self.agent = agent
        self.planner = planner
        self.oracle = oracle
        self.records = EpisodeRecords(scenario, agent.memory, agent.origin, writer, oracle)
        self._schemas: dict[type[Any], dict[str, Any]] = {}
        """Each request model's JSON Schema, made once a run (pydantic builds it anew per call)."""
        self._target(catalog.route)
        self._call_failures = 0
        """Planner calls failed in a row (``PlannerCallError``); ``max_attempts`` stop the run."""

    async def run(self, episode: int) -> tuple[bool, str | None]:
        """Plan, send and observe up to ``max_attempts`` times; return (completed, served model)."""
        family = self.catalog.task_families[self.scenario.family(episode)]
        self._target(self.catalog.route_of(family))
        draft = family.draft()
        await self._begin(episode)
        entries, stale_injected = await self._inject(draft, episode)
        injected = [entry.id for entry in entries]
        base = self.catalog.system_prompt_of(family)
        shown = consumption(base, entries, CONSUMPTION_LEVEL, draft)
        tally = Tally(fixes=[entry.suggestion for entry in entries])
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
        self.records.episode(
            episode, family, self.route, self.request_schema, injected, stale_injected, tally
        )
        return tally.accepted is not None, tally.served

    def _target(self, route: Route[Any]) -> None:
        """Point the next episode at ``route`` (its family's): where requests go, the operation
        fixes are filed and looked up under (a route, or a tool name), the schema a planner
        answers."""
        self.route = route
        self.operation = self.agent.channel.operation(route)
        model = route.request_model
        if model not in self._schemas:
            self._schemas[model] = model.model_json_schema()
        self.request_schema: dict[str, Any] = copy.deepcopy(self._schemas[model])

    async def _begin(self, episode: int) -> None:
        """Fetch what the memory wants before the episode (resync detection), as an agent does.

        What the memory did since the last request on its own (a notification's refresh over
        MCP) is logged here too: it happened before this episode's first lookup."""
        events: list[MemoryEvent] = self.agent.channel.take_events()
        needs = self.agent.memory.begin_episode(self.agent.origin, episode)
        if needs:
            await self.agent.channel.fulfil(needs, episode=episode, listener=events.append)
        self.records.events(events, episode, 0)

    async def _inject(
        self, draft: dict[str, Any], episode: int
    ) -> tuple[list[MemoryEntry], list[str]]:
        """Look up the entries for this draft and record each injection with the oracle's label;
        returns the entries and the ids of the stale ones. Entries waiting on a conditional read
        of a resource they cite (``verify``) are revalidated through the channel, as an agent
        does, and looked up again."""
        lookup = self._lookup(draft, episode)
        reads = [need for need in lookup.needs if isinstance(need, ReadResource)]
        if reads:
            events: list[MemoryEvent] = list(lookup.events)
            await self.agent.channel.fulfil(reads, episode=episode, listener=events.append)
            lookup = self._lookup(draft, episode)
            events.extend(lookup.events)
            self.records.events(events, episode, 1)
        else:
            self.records.events(lookup.events, episode, 1)
        stale_ids = []
        for entry in lookup.entries:
            stale = not self.oracle.is_current(entry.suggestion, draft, self.route)
            if stale:
                stale_ids.append(entry.id)
            self.records.injection(entry, stale=stale, episode=episode)
        return list(lookup.entries), stale_ids

    def _lookup(self, draft: dict[str, Any], episode: int) -> Lookup:
        return self.agent.memory.lookup(
            self.agent.origin, draft, episode=episode, operation=self.operation
        )

    async def _plan(self, context: PlanningContext, tally: Tally) -> Plan | None:
        """The planner's plan, or None after recording an unusable reply as a failed attempt."""
        try:
            plan = await self.planner.plan(context)
        except (PlannerResponseError, PlannerCallError) as exc:
            self._planner_failed(context, exc, tally)
            return None
        self._call_failures = 0
        tally.charge(plan)
        return plan

    def _planner_failed(self, context: PlanningContext, exc: PlannerError, tally: Tally) -> None:
        calls = isinstance(exc, PlannerCallError)
        self._call_failures = self._call_failures + 1 if calls else 0
        tally.planner_errors += 1
        tally.planner_retries += planner_retries(exc)
        self.records.planner_error(context.episode, context.attempt, exc)
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
        body = reply.body
        self.oracle.heard(request, _suggestions(body), self.route)
        self.records.attempt(episode, number, request, reply, plan, hidden)
        self.records.events(events, episode, number)
        return reply.status, body

    def _apply_client_side(
        self, entries: Sequence[MemoryEntry], request: dict[str, Any], episode: int
    ) -> dict[str, Any]:
        """Client apply mode: patch the planned request with the cached fixes (patchable paths)."""
        memory, origin = self.agent.memory, self.agent.origin
        outcome = memory.apply_patches(
            origin, request, entries, episode=episode, operation=self.operation
        )
        self.records.events(outcome.events, episode, 1)
        return outcome.request


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
