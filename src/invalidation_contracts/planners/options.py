"""Planner options: the ``KEY=VALUE`` settings a command line or a spec's ``?query`` passes.

Each option is declared once here with its type, bounds and the planner kinds that take it, so
the CLI, specs and library callers parse and check options alike. Simulated planners take their
profile's fields instead (see :class:`~.simulated.SimulatedProfile`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import PlannerConfigError
from .simulated import SimulatedProfile

REAL_KINDS = frozenset({"anthropic", "openai", "openai-compatible", "local"})
_VENDORS = frozenset({"anthropic", "openai"})


@dataclass(frozen=True, slots=True)
class OptionSpec:
    """One option: its value type, lower bound, and the planner kinds that accept it."""

    name: str
    type: type
    kinds: frozenset[str]
    help: str
    minimum: float | None = None
    maximum: float | None = None

    def coerce(self, value: object) -> Any:
        """``value`` as this option's type (strings from a command line are parsed)."""
        typed = _parse(self.name, value, self.type)
        if isinstance(typed, (int, float)) and not isinstance(typed, bool):
            if self.minimum is not None and typed < self.minimum:
                raise PlannerConfigError(f"option {self.name} must be >= {self.minimum:g}")
            if self.maximum is not None and typed > self.maximum:
                raise PlannerConfigError(f"option {self.name} must be <= {self.maximum:g}")
        return typed


OPTIONS: dict[str, OptionSpec] = {
    spec.name: spec
    for spec in (
        OptionSpec("api_key", str, _VENDORS | {"openai-compatible"}, "API key (default from env)"),
        OptionSpec("base_url", str, _VENDORS, "the vendor API's base URL"),
        OptionSpec("timeout", float, REAL_KINDS, "seconds one HTTP request may take", 0.001),
        OptionSpec("max_retries", int, REAL_KINDS, "re-sends after a timeout, 429 or 5xx", 0),
        OptionSpec("max_tokens", int, REAL_KINDS, "cap on the answer's tokens", 1),
        OptionSpec("temperature", float, REAL_KINDS, "sampling temperature (default 0)", 0, 2),
        OptionSpec("parallel", int, frozenset({"local"}), "server slots (default: concurrency)", 1),
        OptionSpec("context", int, frozenset({"local"}), "context tokens per slot", 256),
        OptionSpec("threads", int, frozenset({"local"}), "server threads (half the CPUs)", 1),
        OptionSpec("port", int, frozenset({"local"}), "port on 127.0.0.1 (0: any free)", 0, 65535),
        OptionSpec("prompt_cache", bool, frozenset({"local"}), "reuse cached prompt prefixes"),
        OptionSpec("start_timeout", float, frozenset({"local"}), "seconds to load the model", 1),
    )
}


def accepted_options(kind: str) -> frozenset[str]:
    """The option names a planner of ``kind`` takes."""
    if kind == "simulated":
        return frozenset(f.name for f in dataclasses.fields(SimulatedProfile) if f.name != "name")
    return frozenset(name for name, spec in OPTIONS.items() if kind in spec.kinds)


def coerce_options(kind: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` typed for a ``kind`` planner; an option it does not take is a config error."""
    if kind == "simulated":
        return dict(options)  # the profile parses and checks its own fields
    accepted = accepted_options(kind)
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise PlannerConfigError(
            f"unknown option(s) {', '.join(unknown)} for {kind} planners; expected "
            + ", ".join(sorted(accepted))
        )
    return {name: OPTIONS[name].coerce(value) for name, value in options.items()}


def options_for(kind: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The subset of ``options`` a ``kind`` planner takes (a command's options apply to every
    planner of the grid, each taking its own)."""
    accepted = accepted_options(kind)
    return {name: value for name, value in options.items() if name in accepted}


def parse_option_pairs(pairs: Iterable[str]) -> dict[str, str]:
    """``["timeout=600", "max_retries=2"]`` as a mapping; a malformed pair is a config error."""
    parsed: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise PlannerConfigError(f"planner option {pair!r} is not KEY=VALUE")
        parsed[key] = value.strip()
    return parsed


def _parse(name: str, value: object, kind: type) -> Any:
    if kind is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise PlannerConfigError(f"option {name}={value!r} is not a valid bool")
    if isinstance(value, bool) or (kind is int and isinstance(value, float)):
        raise PlannerConfigError(f"option {name}={value!r} is not a valid {kind.__name__}")
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise PlannerConfigError(
            f"option {name}={value!r} is not a valid {kind.__name__}"
        ) from None
