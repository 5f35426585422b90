"""Simulated planners: deterministic stand-ins for models, parameterised by how they treat fixes.

A simulated planner sees only the :class:`PlanningContext` a real model sees (never the oracle) and
acts only on *structured* suggestions: the cached fixes in ``context.memory`` and the
``recovery_feedback.suggestions`` of the latest error response. An L0 response (prose only) gives it
nothing to act on, so it resends its previous request. Its token counts are estimates from the
rendered prompt (:mod:`.rendering`), always marked ``estimated=True``.

Behaviour per attempt:

* attempt 1 starts from ``context.task_fields`` and applies each cached fix with the profile's
  memory rate for the fix's action (``conditional_rewrite`` counts as a rewrite); a profile with
  ``use_memory=False`` ignores the memory block and re-derives everything from feedback;
* a later attempt starts from the planner's own previous request and applies each suggestion of the
  latest response with the profile's feedback rate; the ``comply_after``-th time the same suggestion
  type is shown in an episode it is applied verbatim, so explicit feedback is eventually followed
  and a conservative planner completes its stream while paying retries;
* without the L2 sentence in the system prompt, an applied suggestion is paraphrased with
  ``paraphrase_rate``: one of its fields is renamed or dropped.

Every draw comes from a ``random.Random`` seeded by a SHA-256 of (seed, episode, attempt, suggestion
type, purpose), so equal contexts give equal plans in every process.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ..client.prompting import L2_SENTENCE
from ..protocol.canonical import canonical_json
from ..protocol.models import Action, Suggestion
from .base import Plan, PlanningContext, Usage
from .errors import PlannerConfigError
from .rendering import estimate_tokens, render_output, render_prompt

_RATE_FIELDS = (
    "memory_add_field_rate",
    "memory_rewrite_rate",
    "feedback_add_field_rate",
    "feedback_rewrite_rate",
    "paraphrase_rate",
    "paraphrase_drop_share",
)


@dataclass(frozen=True, slots=True)
class SimulatedProfile:
    """How a simulated planner treats fixes. Every rate is a probability in [0, 1]."""

    name: str = "custom"
    use_memory: bool = True
    """False: ignore the memory block and re-derive every fix from feedback (opt-out)."""
    memory_add_field_rate: float = 1.0
    """Chance of applying a cached ``add_field`` fix on attempt 1."""
    memory_rewrite_rate: float = 1.0
    """Chance of applying a cached ``rewrite_value`` or ``conditional_rewrite`` fix on attempt 1."""
    feedback_add_field_rate: float = 1.0
    """Chance of applying an ``add_field`` suggestion of the latest error response."""
    feedback_rewrite_rate: float = 1.0
    """Chance of applying a rewrite suggestion of the latest error response."""
    paraphrase_rate: float = 0.0
    """Chance that an applied suggestion is restated (a field renamed or dropped) without L2."""
    paraphrase_drop_share: float = 0.5
    """Of the paraphrased suggestions, the share whose field is dropped rather than renamed."""
    comply_after: int = 3
    """The n-th showing of one suggestion type in an episode is applied verbatim."""

    def __post_init__(self) -> None:
        if not isinstance(self.use_memory, bool):
            raise PlannerConfigError(f"use_memory must be true or false, got {self.use_memory!r}")
        for field_name in _RATE_FIELDS:
            value = getattr(self, field_name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not 0 <= value <= 1
            ):
                raise PlannerConfigError(f"{field_name} must be a number in [0, 1], got {value!r}")
        if isinstance(self.comply_after, bool) or not isinstance(self.comply_after, int):
            raise PlannerConfigError(f"comply_after must be an integer, got {self.comply_after!r}")
        if self.comply_after < 1:
            raise PlannerConfigError(f"comply_after must be at least 1, got {self.comply_after}")

    def memory_rate(self, action: Action) -> float:
        """The chance of applying a cached fix of shape ``action``."""
        return (
            self.memory_add_field_rate if action is Action.ADD_FIELD else self.memory_rewrite_rate
        )

    def feedback_rate(self, action: Action) -> float:
        """The chance of applying a suggestion of shape ``action`` from the latest response."""
        if action is Action.ADD_FIELD:
            return self.feedback_add_field_rate
        return self.feedback_rewrite_rate

    def with_overrides(self, overrides: Mapping[str, Any]) -> SimulatedProfile:
        """A copy with fields replaced; strings (from a spec) are parsed to the field's type."""
        known = {f.name: f for f in dataclasses.fields(self) if f.name != "name"}
        changes: dict[str, Any] = {}
        for key, value in overrides.items():
            if key not in known:
                raise PlannerConfigError(
                    f"unknown simulated-planner parameter {key!r}; expected one of "
                    + ", ".join(sorted(known))
                )
            changes[key] = _coerce(key, value, known[key].type)
        return dataclasses.replace(self, **changes)


#: The named profiles a spec like ``simulated:conservative`` selects.
PRESETS: dict[str, SimulatedProfile] = {
    "exact": SimulatedProfile(name="exact"),
    "conservative": SimulatedProfile(
        name="conservative",
        memory_add_field_rate=0.1,
        memory_rewrite_rate=1.0,
        feedback_add_field_rate=0.5,
        feedback_rewrite_rate=1.0,
    ),
    "opt-out": SimulatedProfile(name="opt-out", use_memory=False),
    "paraphrase": SimulatedProfile(name="paraphrase", paraphrase_rate=0.6),
}


class SimulatedPlanner:
    """A :class:`~.base.Planner` that follows a :class:`SimulatedProfile`; no network, no model."""

    simulated = True

    def __init__(self, profile: SimulatedProfile, name: str | None = None) -> None:
        self.profile = profile
        self.name = name or f"simulated:{profile.name}"
        self.requested_model: str | None = None

    async def plan(self, context: PlanningContext) -> Plan:
        return simulate(self.profile, context, served_model=self.name)

    async def aclose(self) -> None:
        return None


def simulate(
    profile: SimulatedProfile, context: PlanningContext, *, served_model: str | None = None
) -> Plan:
    """The plan ``profile`` makes for ``context``: the pure core of :class:`SimulatedPlanner`."""
    notes = ["simulated", f"profile:{profile.name}"]
    paraphraser = None if has_l2_sentence(context.system_prompt) else profile
    if context.attempts:
        request = _retry(profile, context, paraphraser, notes)
    else:
        request = _first_attempt(profile, context, paraphraser, notes)
    prompt = render_prompt(context)
    raw = render_output(request)
    usage = Usage(
        input_tokens=estimate_tokens(prompt.system) + estimate_tokens(prompt.user),
        output_tokens=estimate_tokens(raw),
        estimated=True,
    )
    return Plan(
        request=request, usage=usage, served_model=served_model, raw=raw, notes=tuple(notes)
    )


def _first_attempt(
    profile: SimulatedProfile,
    context: PlanningContext,
    paraphraser: SimulatedProfile | None,
    notes: list[str],
) -> dict[str, Any]:
    request = copy.deepcopy(dict(context.task_fields))
    if not profile.use_memory:
        if context.memory:
            notes.append("memory-ignored")
        return request
    for fix in context.memory:
        applied = _draw(context, fix.type, "memory") < profile.memory_rate(fix.action)
        notes.append(f"memory-{'applied' if applied else 'refused'}:{fix.type}")
        if applied:
            _apply(request, fix, context, paraphraser, notes)
    return request


def _retry(
    profile: SimulatedProfile,
    context: PlanningContext,
    paraphraser: SimulatedProfile | None,
    notes: list[str],
) -> dict[str, Any]:
    request = copy.deepcopy(dict(context.attempts[-1].request))
    suggestions = _suggestions(context.attempts[-1].response)
    if not suggestions:
        notes.append("no-structured-feedback")
    for suggestion in suggestions:
        if _times_shown(context, suggestion.type) >= profile.comply_after:
            notes.append(f"feedback-applied-verbatim:{suggestion.type}")
            _apply(request, suggestion, context, None, notes)
            continue
        rate = profile.feedback_rate(suggestion.action)
        applied = _draw(context, suggestion.type, "feedback") < rate
        notes.append(f"feedback-{'applied' if applied else 'refused'}:{suggestion.type}")
        if applied:
            _apply(request, suggestion, context, paraphraser, notes)
    return request


def has_l2_sentence(system_prompt: str) -> bool:
    """True when the L2 sentence appears in ``system_prompt`` (ignoring case and spacing)."""
    return _normalise(L2_SENTENCE) in _normalise(system_prompt)


def paraphrased_key(key: str) -> str:
    """The name a paraphrasing planner gives ``key``: camelCase, or one word + ``Value``."""
    head, *rest = key.split("_")
    if rest:
        return head + "".join(part[:1].upper() + part[1:] for part in rest)
    return f"{key}Value"


def _apply(
    request: dict[str, Any],
    suggestion: Suggestion,
    context: PlanningContext,
    profile: SimulatedProfile | None,
    notes: list[str],
) -> None:
    """Merge ``suggestion`` into ``request``; a ``profile`` given means it may be paraphrased."""
    parameters = copy.deepcopy(dict(suggestion.parameters))
    for key in parameters:
        request.pop(paraphrased_key(key), None)
    if profile is not None and parameters:
        rng = _rng(context, suggestion.type, "paraphrase")
        if rng.random() < profile.paraphrase_rate:
            victim = rng.choice(sorted(parameters))
            value = parameters.pop(victim)
            if rng.random() < profile.paraphrase_drop_share:
                notes.append(f"paraphrase-dropped:{suggestion.type}:{victim}")
            else:
                parameters[paraphrased_key(victim)] = value
                notes.append(f"paraphrase-renamed:{suggestion.type}:{victim}")
    request.update(parameters)


def _suggestions(response: Mapping[str, Any]) -> list[Suggestion]:
    feedback = response.get("recovery_feedback")
    raw = feedback.get("suggestions") if isinstance(feedback, Mapping) else None
    if not isinstance(raw, list):
        return []
    suggestions = []
    for item in raw:
        try:
            suggestions.append(Suggestion.model_validate(item))
        except ValidationError:
            continue
    return suggestions


def _times_shown(context: PlanningContext, suggestion_type: str) -> int:
    return sum(
        any(s.type == suggestion_type for s in _suggestions(attempt.response))
        for attempt in context.attempts
    )


def _draw(context: PlanningContext, suggestion_type: str, purpose: str) -> float:
    return _rng(context, suggestion_type, purpose).random()


def _rng(context: PlanningContext, suggestion_type: str, purpose: str) -> random.Random:
    attempt = len(context.attempts) + 1
    material = canonical_json([context.seed, context.episode, attempt, suggestion_type, purpose])
    return random.Random(int.from_bytes(hashlib.sha256(material).digest()[:8], "big"))


def _normalise(text: str) -> str:
    return " ".join(text.split()).casefold()


def _coerce(key: str, value: object, annotation: object) -> Any:
    kind = str(annotation)
    if not isinstance(value, str):
        return value
    text = value.strip()
    try:
        if kind == "bool":
            if text.lower() in ("true", "1", "yes"):
                return True
            if text.lower() in ("false", "0", "no"):
                return False
            raise ValueError(text)
        if kind == "int":
            return int(text)
        return float(text)
    except ValueError:
        raise PlannerConfigError(f"{key}={value!r} is not a valid {kind}") from None
