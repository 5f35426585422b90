"""The Planner protocol and the values that cross it.

A planner sees exactly what a real model would see: the system prompt, the task, the memory block
(as rendered text and as the structured fixes it renders), and its earlier attempts in this episode
with the server's responses. It never sees the oracle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..protocol.models import Suggestion


@dataclass(frozen=True, slots=True)
class Attempt:
    """One earlier attempt in the current episode: what was sent and what came back."""

    request: dict[str, Any]
    status: int
    response: dict[str, Any]


@dataclass(frozen=True, slots=True)
class PlanningContext:
    """Everything a planner is shown for one attempt."""

    system_prompt: str
    """Base instructions, with the L2 sentence appended when the consumption level has it."""
    task: str
    """The task text, as a user would write it."""
    task_fields: dict[str, Any]
    """The request values the task text states (the same facts as ``task``, structured)."""
    request_schema: dict[str, Any]
    """JSON Schema of the request body the endpoint accepts."""
    memory_block: str = ""
    """The rendered memory block (L2 instruction list or L3 amended input); empty when no memory."""
    memory: tuple[Suggestion, ...] = ()
    """The cached fixes ``memory_block`` renders, in the same order."""
    amended_input: bool = False
    """True when ``memory_block`` presents the fixes as already applied to the input (L3)."""
    attempts: tuple[Attempt, ...] = ()
    """Earlier attempts of this episode, oldest first."""
    seed: int = 0
    """Seed for planners that sample; the same context and seed give the same plan."""
    episode: int = 0
    attempt: int = 1


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage of one planning call.

    ``estimated`` is True when nobody counted the tokens (a simulated planner, or a server that
    reported no usage); ``reported_by_server`` is True when a server counted them but no vendor
    bills them (a local or self-hosted OpenAI-compatible server). Otherwise it is billed usage.
    """

    input_tokens: int
    output_tokens: int
    estimated: bool
    reported_by_server: bool = False

    @property
    def label(self) -> str:
        """How the counts were obtained: ``billed``, ``reported by server`` or ``estimated``."""
        if self.estimated:
            return "estimated"
        return "reported by server" if self.reported_by_server else "billed"

    def __add__(self, other: Usage) -> Usage:
        estimated = self.estimated or other.estimated
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            estimated,
            not estimated and (self.reported_by_server or other.reported_by_server),
        )


@dataclass(frozen=True, slots=True)
class Plan:
    """A planner's answer: the request body to send, and what producing it cost."""

    request: dict[str, Any]
    usage: Usage
    served_model: str | None = None
    raw: str | None = None
    notes: tuple[str, ...] = field(default=())
    retries: int = 0
    """Requests re-sent to produce this plan (timeouts, 429/5xx, a dropped response format or
    sampling parameter); 0 when the first request answered."""


@runtime_checkable
class Planner(Protocol):
    """Anything that plans requests; ``name`` is the spec it was built from."""

    name: str
    simulated: bool

    async def plan(self, context: PlanningContext) -> Plan: ...

    async def aclose(self) -> None: ...
