"""What an episode writes to the run's artifact: each memory event with the oracle's label, each
attempt, and the episode's summary.

``EpisodeRecords`` is the episode loop's recorder (``bench.episode`` drives the attempts): it
registers what the memory stored with the oracle, labels each eviction and injection stale or not,
and writes one artifact line per event, attempt and episode.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..client.entries import EvictionReason, MemoryEntry
from ..client.events import (
    Evicted,
    MemoryEvent,
    Probing,
    Quarantined,
    Restamped,
    Revalidated,
    RulesAlert,
    Stored,
)
from ..client.memory import FixMemory
from ..domains.catalog import TaskFamily
from ..planners import Attempt, Plan
from ..planners.errors import PlannerCallError, PlannerError
from ..protocol.models import Suggestion
from ..protocol.wirecost import paper_wire_cost
from ..server import Route
from .artifacts import ArtifactWriter
from .channels import Reply
from .faithfulness import unfaithful_fields
from .oracle import Oracle
from .scenario import Scenario

_EVENT_NAMES: dict[type[MemoryEvent], str] = {
    Stored: "store",
    Evicted: "evict",
    Restamped: "restamp",
    Quarantined: "quarantine",
    RulesAlert: "alert",
    Probing: "probe",
    Revalidated: "revalidate",
}


@dataclass(slots=True)
class Tally:
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


class EpisodeRecords:
    """Writes a run's episodes to ``writer``, labelled by ``oracle``, reading ``origin``'s entries
    of ``memory`` (a stored fix's value)."""

    def __init__(
        self,
        scenario: Scenario,
        memory: FixMemory,
        origin: str,
        writer: ArtifactWriter,
        oracle: Oracle,
    ) -> None:
        self.scenario = scenario
        self.memory = memory
        self.origin = origin
        self.writer = writer
        self.oracle = oracle

    def injection(self, entry: MemoryEntry, *, stale: bool, episode: int) -> None:
        """One entry injected into the episode's draft, labelled stale or current."""
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

    def planner_error(self, episode: int, attempt: int, exc: PlannerError) -> None:
        """An attempt whose planner call failed or whose reply was unusable (its raw text)."""
        self.writer.write(
            "attempt",
            episode=episode,
            attempt=attempt,
            status=None,
            request=None,
            planner_error={
                "kind": "call" if isinstance(exc, PlannerCallError) else "response",
                "detail": str(exc),
                "raw": getattr(exc, "raw", None),
            },
            planner_retries=planner_retries(exc),
            tokens_in=0,
            tokens_out=0,
            tokens_estimated=False,
        )

    def attempt(
        self,
        episode: int,
        number: int,
        request: dict[str, Any],
        reply: Reply,
        plan: Plan,
        hidden: int,
    ) -> None:
        """An attempt the server answered: its sizes, the paper's, and what the planner cost
        (``hidden``: the input tokens it was spared by seeing no contract metadata)."""
        body, cost = reply.body, reply.cost
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

    def episode(
        self,
        episode: int,
        family: TaskFamily,
        route: Route[Any],
        request_schema: dict[str, Any],
        injected: list[str],
        stale_injected: list[str],
        tally: Tally,
    ) -> None:
        """The episode's summary line."""
        completed = tally.accepted is not None
        departures = (
            unfaithful_fields(family.fields, tally.accepted, tally.fixes, request_schema)
            if tally.accepted is not None
            else ()
        )
        self.writer.write(
            "episode",
            episode=episode,
            family=family.id,
            route=route.path,
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

    def events(self, events: Iterable[MemoryEvent], episode: int, attempt: int) -> None:
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
                    live = {e.id: e.suggestion for e in self.memory.entries(self.origin)}
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
                **({"outcome": event.outcome} if isinstance(event, Revalidated) else {}),
            )


_PARENT = re.compile(r"derived from (\S+)")
"""The parent a consumer eviction names (``Ledger.evict``: ``derived from e7``)."""


def planner_retries(source: object) -> int:
    """The retries a planner reports for one call (``retries`` on its plan or its error)."""
    value = getattr(source, "retries", 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
