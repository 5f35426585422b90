"""Planner specs: the command-line names of planners, parsed and turned into planners.

A spec is one of, each optionally followed by ``?KEY=VALUE&...`` options::

    simulated:PROFILE          e.g. simulated:conservative?memory_add_field_rate=0.2
    anthropic:MODEL            e.g. anthropic:claude-haiku-4-5?max_tokens=2048
    openai:MODEL               e.g. openai:gpt-5-mini
    openai-compatible:MODEL@URL  e.g. openai-compatible:llama3.1@http://localhost:11434/v1?timeout=600
    local:MODEL                e.g. local:qwen2.5-coder-0.5b, or local:/models/any.gguf

The options after ``?`` never reach a URL; options passed to :func:`create_planner` override them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import parse_qsl

from .base import Planner
from .errors import PlannerConfigError
from .options import coerce_options, options_for
from .simulated import PRESETS, SimulatedPlanner

PlannerKind = Literal["simulated", "anthropic", "openai", "openai-compatible", "local"]
KINDS: tuple[str, ...] = ("simulated", "anthropic", "openai", "openai-compatible", "local")

_COMPATIBLE = re.compile(r"^(?P<model>[^@\s]+)@(?P<url>https?://\S+)$")


@dataclass(frozen=True, slots=True)
class PlannerSpec:
    """A parsed planner spec. For ``simulated`` the model is the profile name."""

    text: str
    kind: PlannerKind
    model: str
    base_url: str | None = None
    parameters: tuple[tuple[str, str], ...] = ()
    """The options given after ``?``, in order (for ``simulated``, profile overrides)."""

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
    rest, _, query = rest.partition("?")
    if not rest:
        raise PlannerConfigError(f"bad planner spec {spec!r}: nothing after {kind}:")
    try:
        parameters = tuple(parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)))
    except ValueError:
        raise PlannerConfigError(f"bad parameters {query!r} in planner spec {spec!r}") from None
    if kind == "simulated":
        if rest not in PRESETS:
            raise PlannerConfigError(
                f"unknown simulated profile {rest!r}; expected one of {', '.join(PRESETS)}"
            )
        return PlannerSpec(text, "simulated", rest, parameters=parameters)
    if kind == "openai-compatible":
        match = _COMPATIBLE.match(rest)
        if match is None:
            raise PlannerConfigError(
                f"bad planner spec {spec!r}: expected openai-compatible:MODEL@http(s)://HOST/..."
            )
        return PlannerSpec(
            text, "openai-compatible", match["model"], match["url"], parameters=parameters
        )
    if kind != "local" and any(ch.isspace() for ch in rest):
        raise PlannerConfigError(f"bad planner spec {spec!r}: the model id contains whitespace")
    return PlannerSpec(text, kind, rest, parameters=parameters)  # type: ignore[arg-type]


def token_source(spec: str) -> str:
    """How a ``spec`` planner's token counts are obtained (see :attr:`.base.Usage.label`)."""
    kind = spec.strip().partition(":")[0]
    if kind == "simulated":
        return "estimated"
    return "billed" if kind in ("anthropic", "openai") else "reported by server"


def check_planner(spec: str, options: Mapping[str, Any] | None = None) -> PlannerSpec:
    """Parse ``spec`` and check ``options`` for it, building nothing (no client, no server)."""
    parsed = parse_planner_spec(spec)
    merged = {**dict(parsed.parameters), **dict(options or {})}
    if parsed.kind == "simulated":
        PRESETS[parsed.model].with_overrides(merged)
    else:
        coerce_options(parsed.kind, merged)
    if parsed.kind == "local":
        from .local.assembly import resolve_model

        resolve_model(parsed.model)
    return parsed


def create_planner(spec: str, options: Mapping[str, Any] | None = None) -> Planner:
    """Build the planner ``spec`` names, with ``options`` over the spec's own ``?`` options.

    Options: for ``simulated``, profile fields (they override the preset); for real planners
    the ones :data:`.options.OPTIONS` declares for their kind (``timeout``, ``max_retries``,
    ``max_tokens``, ``temperature``, ...; strings are parsed). A bad spec, an unknown or
    malformed option, a missing key or model raises :class:`PlannerConfigError`.
    """
    parsed = parse_planner_spec(spec)
    merged = {**dict(parsed.parameters), **dict(options or {})}
    if parsed.kind == "simulated":
        return SimulatedPlanner(PRESETS[parsed.model].with_overrides(merged), name=parsed.text)
    typed = coerce_options(parsed.kind, merged)
    if parsed.kind == "anthropic":
        from .anthropic import AnthropicPlanner

        return AnthropicPlanner(parsed.model, name=parsed.text, **typed)
    if parsed.kind == "local":
        from .local.planner import LocalPlanner

        return LocalPlanner(parsed.model, name=parsed.text, **typed)
    from .openai import OpenAIPlanner

    if parsed.kind == "openai-compatible":
        return OpenAIPlanner(
            parsed.model, base_url=parsed.base_url, compatible=True, name=parsed.text, **typed
        )
    return OpenAIPlanner(parsed.model, name=parsed.text, **typed)


@dataclass(frozen=True, slots=True)
class ConfiguredPlanners:
    """A picklable planner factory: a command's options, each planner taking the ones its kind
    accepts (``--planner-option`` applies to every planner of a grid)."""

    options: Mapping[str, Any]

    def options_for(self, spec: str) -> dict[str, Any]:
        return options_for(parse_planner_spec(spec).kind, self.options)

    def __call__(self, spec: str) -> Planner:
        return create_planner(spec, self.options_for(spec))
