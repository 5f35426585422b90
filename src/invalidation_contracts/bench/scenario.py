"""Scenario manifests (TOML): the pre-registered episode schedule, drift events and stale slots.

``load_scenario`` reads and validates a manifest on its own; ``bench.verify`` cross-checks it
against the domain it names (``check_scenario``, ``resolve_scenario``).
"""

from __future__ import annotations

import hashlib
import tomllib
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .._deprecation import moved_names


class ScenarioError(ValueError):
    """A manifest that cannot be read or does not validate; the message names the file and field."""


class TableDrift(BaseModel):
    """One table of a multi-table drift event: reloaded from a snapshot."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    table: str = Field(min_length=1)
    snapshot: str = Field(min_length=1)
    version: str | None = None


class DriftEvent(BaseModel):
    """One operator action between episodes: reload a table from a snapshot, reload several
    tables at once (``tables``: one change set, one seq), or replace rules."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    after_episode: int = Field(ge=1)
    table: str | None = None
    tables: list[TableDrift] | None = None
    rules: str | None = None
    snapshot: str | None = None
    version: str | None = None
    kind: Literal["breaking", "benign", "touch"]

    @model_validator(mode="after")
    def _one_target(self) -> DriftEvent:
        if sum(x is not None for x in (self.table, self.tables, self.rules)) != 1:
            raise ValueError("a drift event names exactly one of 'table', 'tables' or 'rules'")
        if self.table is not None and self.snapshot is None:
            raise ValueError("a table drift event needs a 'snapshot'")
        if self.tables is not None:
            names = [t.table for t in self.tables]
            if not names or len(set(names)) != len(names):
                raise ValueError("a multi-table drift event names each of its tables once")
            if self.snapshot is not None or self.version is not None:
                raise ValueError("a multi-table drift event gives each table its own snapshot")
        return self

    @property
    def target(self) -> str:
        if self.tables is not None:
            return "tables " + " + ".join(t.table for t in self.tables)
        return f"table {self.table}" if self.table else f"rules {self.rules}"

    def table_drifts(self) -> list[TableDrift]:
        """The tables this event reloads (one for a single-table event, none for rules)."""
        if self.tables is not None:
            return list(self.tables)
        if self.table is not None and self.snapshot is not None:
            return [TableDrift(table=self.table, snapshot=self.snapshot, version=self.version)]
        return []


class Departure(BaseModel):
    """Episodes excluded from compliance beyond the paper's stale slots, with the reason.

    The paper excludes only the stale-injection slots (§4.1); any other exclusion departs from it,
    so it must be pre-registered here and every report labels it as a departure.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    episodes: list[int] = Field(min_length=1)
    reason: str = Field(min_length=1)


class Scenario(BaseModel):
    """A stream: which task family runs at each episode, and what drifts when."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    domain: str
    description: str = ""
    max_attempts: int = Field(default=5, ge=1, le=20)
    level: int = Field(default=6, ge=0, le=6)
    conditional: bool = Field(
        default=False,
        description="The client sends Contract-Since on every request (the conditional contract).",
    )
    schedule: list[str] = Field(
        min_length=1, description="Task family id per episode, episode 1 first."
    )
    drift: list[DriftEvent] = Field(default_factory=list)
    stale_slots: list[int] = Field(
        default_factory=list,
        description="Pre-registered stale-injection slots, excluded from compliance (paper §4.1).",
    )
    departures: list[Departure] = Field(
        default_factory=list,
        description="More pre-registered exclusions from compliance; each departs from the paper.",
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
                    f"drift after episode {event.after_episode} is not before the last one ({n})"
                )
        bad = [s for s in self.stale_slots if not 1 <= s <= n]
        if bad:
            raise ValueError(f"stale slots {bad} are outside episodes 1..{n}")
        for departure in self.departures:
            bad = [e for e in departure.episodes if not 1 <= e <= n]
            if bad:
                raise ValueError(f"departure episodes {bad} are outside episodes 1..{n}")
        return self

    @property
    def episodes(self) -> int:
        return len(self.schedule)

    def family(self, episode: int) -> str:
        return self.schedule[episode - 1]

    def drift_after(self, episode: int) -> list[DriftEvent]:
        return [e for e in self.drift if e.after_episode == episode]

    @property
    def departure_slots(self) -> list[int]:
        """Every episode a departure excludes from compliance, sorted."""
        return sorted({e for d in self.departures for e in d.episodes})


class ScenarioMismatch(ScenarioError):
    """A manifest that names task families, snapshots or rule sets its domain does not ship."""


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
                f"no scenario named {name_or_path!r}; "
                f"shipped: {', '.join(shipped_scenarios()) or 'none'}"
            )
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    return parse_scenario(text, str(path))


def load_scenarios(names: Iterable[str | Path]) -> list[Scenario]:
    return [load_scenario(n) for n in names]


#: The checks against a domain moved to ``bench.verify`` (they need the oracle's labels, which
#: read this module's types); each still imports from here, warned, until 0.3.0.
__getattr__ = moved_names(
    __name__,
    {
        name: "invalidation_contracts.bench.verify"
        for name in ("check_scenario", "paper_stale_slots", "resolve_scenario", "verify_domain")
    },
)
