"""Planners: turn a task, the memory block and earlier feedback into a request.

Build one from its command-line spec with :func:`create_planner` (``simulated:exact``,
``anthropic:claude-haiku-4-5``, ``openai:gpt-5-mini``, ``openai-compatible:MODEL@URL``,
``local:qwen2.5-coder-0.5b``). The vendor adapters and the local model are imported only when
such a spec is used.
"""

from .base import Attempt, Plan, Planner, PlanningContext, Usage
from .errors import (
    PlannerCallError,
    PlannerConfigError,
    PlannerError,
    PlannerResponseError,
    PlannerUnavailableError,
)
from .preflight import PreflightReport, preflight
from .registry import PlannerSpec, check_planner, create_planner, parse_planner_spec
from .rendering import RenderedPrompt, estimate_tokens, render_prompt
from .simulated import PRESETS, SimulatedPlanner, SimulatedProfile

__all__ = [
    "Attempt",
    "PRESETS",
    "Plan",
    "Planner",
    "PlannerCallError",
    "PlannerConfigError",
    "PlannerError",
    "PlannerResponseError",
    "PlannerSpec",
    "PlannerUnavailableError",
    "PlanningContext",
    "PreflightReport",
    "RenderedPrompt",
    "SimulatedPlanner",
    "SimulatedProfile",
    "Usage",
    "check_planner",
    "create_planner",
    "estimate_tokens",
    "parse_planner_spec",
    "preflight",
    "render_prompt",
]
