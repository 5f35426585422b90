"""The grid: planners × arms × seeds × scenarios, run concurrently with a bound and resumably."""

# ruff: noqa: E402 (the extra is checked before the third-party imports)
from __future__ import annotations

from .._extras import require_extra

require_extra("cli", "rich")

import asyncio
import itertools
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .arms import LADDER, RULES_ARMS, Arm
from .artifacts import is_complete
from .runner import PlannerFactory, RunSpec, run_one
from .scenario import Scenario, ScenarioError, load_scenario, scenarios_dir

SIMULATED_PROFILES = (
    "simulated:exact",
    "simulated:conservative",
    "simulated:opt-out",
    "simulated:paraphrase",
)


@dataclass(frozen=True)
class Grid:
    """What to run: every combination of the four axes."""

    scenarios: Sequence[Scenario]
    planners: Sequence[str]
    arms: Sequence[Arm]
    seeds: Sequence[int] = (0, 1, 2)
    rules_arms: Sequence[Arm] = field(default=RULES_ARMS)

    def specs(self) -> list[RunSpec]:
        """Every run; a rules stream runs the detection arms, the others the ladder's arms."""
        specs = []
        for scenario in self.scenarios:
            arms = self.rules_arms if _is_rules_stream(scenario) else self.arms
            for planner, arm, seed in itertools.product(self.planners, arms, self.seeds):
                specs.append(RunSpec(scenario, planner, arm, seed))
        return specs


def _is_rules_stream(scenario: Scenario) -> bool:
    return any(event.rules is not None for event in scenario.drift)


def ladder_grid(scenario: str = "payments-drifted", seeds: Iterable[int] = (0, 1, 2)) -> Grid:
    """The README's main job: the paper's A-ladder on one stream with every simulated profile."""
    return Grid([load_scenario(scenario)], SIMULATED_PROFILES, LADDER, tuple(seeds))


def load_grid(path: Path | str) -> Grid:
    """A grid file: ``scenarios``, ``planners``, ``arms`` (``STRATEGY[/DETECTION[/APPLY]]``), ``seeds``.

    A bare name (``paper``) is a grid shipped under ``scenarios/grids/``.
    """
    path = Path(path)
    if path.suffix != ".toml":
        shipped = scenarios_dir() / "grids" / f"{path}.toml"
        if not shipped.exists():
            names = sorted(p.stem for p in (scenarios_dir() / "grids").glob("*.toml"))
            raise ScenarioError(
                f"no grid named {str(path)!r}; shipped: {', '.join(names) or 'none'}"
            )
        path = shipped
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ScenarioError(f"{path}: cannot read grid file ({exc})") from exc
    unknown = set(data) - {"scenarios", "planners", "arms", "seeds", "rules_arms"}
    if unknown:
        raise ScenarioError(f"{path}: unknown grid keys {sorted(unknown)}")
    try:
        return Grid(
            scenarios=[load_scenario(s) for s in data.get("scenarios", ["payments-drifted"])],
            planners=list(data.get("planners", SIMULATED_PROFILES)),
            arms=[Arm.parse(a) for a in data.get("arms", [str(a) for a in LADDER])],
            seeds=[int(s) for s in data.get("seeds", [0, 1, 2])],
            rules_arms=[Arm.parse(a) for a in data.get("rules_arms", [str(a) for a in RULES_ARMS])],
        )
    except (TypeError, ValueError) as exc:
        raise ScenarioError(f"{path}: {exc}") from exc


@dataclass
class GridOutcome:
    ran: int = 0
    skipped: int = 0
    failed: list[tuple[RunSpec, BaseException]] = field(default_factory=list)


async def run_grid(
    grid: Grid,
    root: Path,
    *,
    concurrency: int = 4,
    server_url: str | None = None,
    admin_token: str | None = None,
    planner_factory: PlannerFactory | None = None,
    progress: bool = True,
    command: str | None = None,
    resume: bool = True,
) -> GridOutcome:
    """Run every spec not already complete under ``root``; at most ``concurrency`` at once."""
    specs = grid.specs()
    todo = [s for s in specs if not (resume and is_complete(root, s.key))]
    outcome = GridOutcome(skipped=len(specs) - len(todo))
    if server_url is not None:
        concurrency = 1  # one shared server: runs must not interleave their drift
    semaphore = asyncio.Semaphore(max(1, concurrency))
    options: dict = {"server_url": server_url, "admin_token": admin_token}
    if planner_factory is not None:
        options["planner_factory"] = planner_factory
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        disable=not progress,
        transient=False,
    ) as bar:
        task = bar.add_task("runs", total=len(todo))

        async def one(spec: RunSpec) -> None:
            async with semaphore:
                bar.update(
                    task, description=f"{spec.scenario.name} {spec.planner} {spec.arm} s{spec.seed}"
                )
                try:
                    await run_one(spec, root, command=command, **options)
                    outcome.ran += 1
                except Exception as exc:  # noqa: BLE001 - a failed run is reported, the grid goes on
                    outcome.failed.append((spec, exc))
                bar.advance(task)

        await asyncio.gather(*(one(s) for s in todo))
    return outcome
