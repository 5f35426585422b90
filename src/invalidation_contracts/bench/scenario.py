"""Scenario manifests (TOML): the pre-registered episode schedule, drift events and stale slots."""

from __future__ import annotations

import hashlib
import tomllib
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class ScenarioError(ValueError):
    """A manifest that cannot be read or does not validate; the message names the file and field."""


class DriftEvent(BaseModel):
    """One operator action between episodes: reload a table from a snapshot, or replace the rules."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    after_episode: int = Field(ge=1)
    table: str | None = None
    rules: str | None = None
    snapshot: str | None = None
    version: str | None = None
    kind: Literal["breaking", "benign", "touch"]

    @model_validator(mode="after")
    def _one_target(self) -> DriftEvent:
        if (self.table is None) == (self.rules is None):
            raise ValueError("a drift event names exactly one of 'table' or 'rules'")
        if self.table is not None and self.snapshot is None:
            raise ValueError("a table drift event needs a 'snapshot'")
        return self

    @property
    def target(self) -> str:
        return f"table {self.table}" if self.table else f"rules {self.rules}"


class Scenario(BaseModel):
    """A stream: which task family runs at each episode, and what drifts when."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    domain: str
    description: str = ""
    max_attempts: int = Field(default=5, ge=1, le=20)
    level: int = Field(default=6, ge=0, le=6)
    schedule: list[str] = Field(
        min_length=1, description="Task family id per episode, episode 1 first."
    )
    drift: list[DriftEvent] = Field(default_factory=list)
    stale_slots: list[int] = Field(
        default_factory=list, description="Pre-registered episodes excluded from compliance."
    )
    compliance_class: str = Field(
        default="governed", description="The task class whose first-try rate is compliance."
    )
    digest: str = Field(default="", description="SHA-256 of the manifest file (set by the loader).")

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        n = len(self.schedule)
        for event in self.drift:
            if event.after_episode >= n:
                raise ValueError(
                    f"drift after episode {event.after_episode} is not before the last episode ({n})"
                )
        bad = [s for s in self.stale_slots if not 1 <= s <= n]
        if bad:
            raise ValueError(f"stale slots {bad} are outside episodes 1..{n}")
        return self

    @property
    def episodes(self) -> int:
        return len(self.schedule)

    def family(self, episode: int) -> str:
        return self.schedule[episode - 1]

    def drift_after(self, episode: int) -> list[DriftEvent]:
        return [e for e in self.drift if e.after_episode == episode]


def _format_errors(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "manifest"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where}: {first['msg']}{more}"


def parse_scenario(text: str, source: str = "<manifest>") -> Scenario:
    """Parse and validate manifest text; raise ``ScenarioError`` naming ``source``."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{source}: not valid TOML ({exc})") from exc
    data["digest"] = hashlib.sha256(text.encode()).hexdigest()
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(f"{source}: {_format_errors(exc)}") from exc


def scenarios_dir() -> Path:
    """Where the shipped manifests live: inside the installed package, else the source tree."""
    packaged = resources.files("invalidation_contracts").joinpath("scenarios")
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[3] / "scenarios"


def shipped_scenarios() -> list[str]:
    return sorted(p.stem for p in scenarios_dir().glob("*.toml"))


def load_scenario(name_or_path: str | Path) -> Scenario:
    """Load a shipped scenario by name (``payments-drifted``) or any manifest by path."""
    path = Path(name_or_path)
    if path.suffix != ".toml":
        path = scenarios_dir() / f"{name_or_path}.toml"
        if not path.exists():
            raise ScenarioError(
                f"no scenario named {name_or_path!r}; shipped: {', '.join(shipped_scenarios()) or 'none'}"
            )
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    return parse_scenario(text, str(path))


def load_scenarios(names: Iterable[str | Path]) -> list[Scenario]:
    return [load_scenario(n) for n in names]
