"""Planner specs: the command-line names of planners, parsed and turned into planners.

A spec is one of::

    simulated:PROFILE[?PARAM=VALUE&...]   e.g. simulated:conservative?memory_add_field_rate=0.2
    anthropic:MODEL                       e.g. anthropic:claude-haiku-4-5
    openai:MODEL                          e.g. openai:gpt-5-mini
    openai-compatible:MODEL@URL           e.g. openai-compatible:llama3.1@http://localhost:11434/v1
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import parse_qsl

from .base import Planner
from .errors import PlannerConfigError
from .simulated import PRESETS, SimulatedPlanner

PlannerKind = Literal["simulated", "anthropic", "openai", "openai-compatible"]
KINDS: tuple[str, ...] = ("simulated", "anthropic", "openai", "openai-compatible")

_COMPATIBLE = re.compile(r"^(?P<model>[^@\s]+)@(?P<url>https?://\S+)$")
_REAL_OPTIONS = {
    "anthropic": {"api_key", "base_url", "max_retries", "timeout", "max_tokens"},
    "openai": {"api_key", "base_url", "max_retries", "timeout", "max_tokens", "temperature"},
    "openai-compatible": {"api_key", "max_retries", "timeout", "max_tokens", "temperature"},
}


@dataclass(frozen=True, slots=True)
class PlannerSpec:
    """A parsed planner spec. For ``simulated`` the model is the profile name."""

    text: str
    kind: PlannerKind
    model: str
    base_url: str | None = None
    parameters: tuple[tuple[str, str], ...] = ()
    """``simulated`` only: the profile overrides given after ``?``, in order."""

    @property
    def requested_model(self) -> str | None:
        """The model id asked of a vendor; None for a simulated planner."""
        return None if self.kind == "simulated" else self.model


def parse_planner_spec(spec: str) -> PlannerSpec:
    """Parse ``spec``; raise :class:`PlannerConfigError` naming what is wrong with it."""
    text = spec.strip()
    kind, sep, rest = text.partition(":")
    if not sep or kind not in KINDS:
        raise PlannerConfigError(
            f"bad planner spec {spec!r}: expected KIND:MODEL with KIND one of {', '.join(KINDS)}"
        )
    if not rest:
        raise PlannerConfigError(f"bad planner spec {spec!r}: nothing after {kind}:")
    if kind == "simulated":
        profile, _, query = rest.partition("?")
        if profile not in PRESETS:
            raise PlannerConfigError(
                f"unknown simulated profile {profile!r}; expected one of {', '.join(PRESETS)}"
            )
        try:
            parameters = tuple(parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)))
        except ValueError:
            raise PlannerConfigError(f"bad parameters {query!r} in planner spec {spec!r}") from None
        return PlannerSpec(text, "simulated", profile, parameters=parameters)
    if kind == "openai-compatible":
        match = _COMPATIBLE.match(rest)
        if match is None:
            raise PlannerConfigError(
                f"bad planner spec {spec!r}: expected openai-compatible:MODEL@http(s)://HOST/..."
            )
        return PlannerSpec(text, "openai-compatible", match["model"], base_url=match["url"])
    if any(ch.isspace() for ch in rest):
        raise PlannerConfigError(f"bad planner spec {spec!r}: the model id contains whitespace")
    return PlannerSpec(text, kind, rest)  # type: ignore[arg-type]


def create_planner(spec: str, **options: Any) -> Planner:
    """Build the planner ``spec`` names.

    Options: for ``simulated``, profile fields (they override the preset); for the vendors,
    ``api_key`` (default from ``ANTHROPIC_API_KEY`` / ``OPENAI_API_KEY``), ``base_url``,
    ``max_retries``, ``timeout``, ``max_tokens`` and, for OpenAI, ``temperature``. A bad spec, an
    unknown option or a missing key raises :class:`PlannerConfigError`.
    """
    parsed = parse_planner_spec(spec)
    if parsed.kind == "simulated":
        profile = (
            PRESETS[parsed.model].with_overrides(dict(parsed.parameters)).with_overrides(options)
        )
        return SimulatedPlanner(profile, name=parsed.text)
    unknown = sorted(set(options) - _REAL_OPTIONS[parsed.kind])
    if unknown:
        raise PlannerConfigError(
            f"unknown option(s) {', '.join(unknown)} for {parsed.kind} planners; expected "
            + ", ".join(sorted(_REAL_OPTIONS[parsed.kind]))
        )
    if parsed.kind == "anthropic":
        from .anthropic import AnthropicPlanner

        return AnthropicPlanner(parsed.model, name=parsed.text, **options)
    from .openai import OpenAIPlanner

    if parsed.kind == "openai-compatible":
        return OpenAIPlanner(
            parsed.model, base_url=parsed.base_url, compatible=True, name=parsed.text, **options
        )
    return OpenAIPlanner(parsed.model, name=parsed.text, **options)
