"""The grid: planners × arms × seeds × scenarios, run over the cores, with a bound, resumably."""

from __future__ import annotations

from .._extras import missing

try:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
except ModuleNotFoundError as exc:
    raise missing(exc, "cli") from exc

import asyncio
import itertools
import json
import os
import tomllib
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .arms import LADDER, RULES_ARMS, Arm
from .artifacts import is_complete, paths
from .errors import HarnessError, PlannerUnavailable, ServerUnavailable
from .pool import RunJob, run_in_processes
from .runner import PlannerFactory, RunSpec, run_one, transport_label
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
    """A grid file: ``scenarios``, ``planners``, ``arms`` (``STRATEGY[/DETECTION[/APPLY]]``),
    ``seeds``.

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
    """What a grid did: runs finished, skipped as already complete, failed, and never started."""

    ran: int = 0
    skipped: int = 0
    failed: list[tuple[RunSpec, BaseException]] = field(default_factory=list)
    not_started: list[RunSpec] = field(default_factory=list)
    """Runs left out after a failure that would repeat for them (the server or their planner)."""


class _Schedule:
    """The runs still to start, in order, less those a failure has ruled out."""

    def __init__(self, todo: Sequence[RunSpec], outcome: GridOutcome) -> None:
        self._todo = deque(todo)
        self._outcome = outcome
        self._server_gone = False
        self._planners_gone: set[str] = set()

    def next(self) -> RunSpec | None:
        while self._todo:
            spec = self._todo.popleft()
            if self._server_gone or spec.planner in self._planners_gone:
                self._outcome.not_started.append(spec)
                continue
            return spec
        return None

    def settle(self, spec: RunSpec, error: BaseException | None) -> None:
        if error is None:
            self._outcome.ran += 1
            return
        self._outcome.failed.append((spec, error))
        if isinstance(error, ServerUnavailable):
            self._server_gone = True
        elif isinstance(error, PlannerUnavailable):
            self._planners_gone.add(spec.planner)


#: Runs a worker process must have to pay for starting it (a spawn and the package's imports).
RUNS_PER_WORKER = 8


def default_processes(concurrency: int, runs: int) -> int:
    """Worker processes for ``runs`` in-process runs: one per usable core, up to ``concurrency``,
    and one per ``RUNS_PER_WORKER`` runs (a small grid runs in this process)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(concurrency, cores or 1, runs // RUNS_PER_WORKER))


async def run_grid(
    grid: Grid,
    root: Path,
    *,
    concurrency: int = 4,
    processes: int | None = None,
    server_url: str | None = None,
    admin_token: str | None = None,
    planner_factory: PlannerFactory | None = None,
    planner_options: Mapping[str, Any] | None = None,
    progress: bool = True,
    command: str | None = None,
    resume: bool = True,
    transport: str = "http",
    notifications: bool = False,
    watch: bool = False,
) -> GridOutcome:
    """Run every spec not already complete under ``root``, ``concurrency`` at a time.

    In-process runs spread over ``processes`` worker processes (default: one per usable core, up
    to ``concurrency``), each running its share of the ``concurrency`` slots; ``processes=1`` runs
    them all in this process. Against ``server_url`` runs go one at a time (one shared server: runs
    must not interleave their drift). A failure that would repeat ends the grid early: a server
    that stopped answering stops every later run, a planner that cannot be built or reached
    stops the later runs of that planner (``GridOutcome.not_started``). ``transport`` and
    ``notifications``: how runs reach the provider (``runner.TRANSPORTS``), and over HTTP ``watch``
    (the watch stream); a results directory holds runs of one transport, so a resumed grid
    refuses runs made over another.
    """
    specs = grid.specs()
    todo = [s for s in specs if not (resume and is_complete(root, s.key))]
    if resume:
        done = [s for s in specs if s not in todo]
        _check_transport(root, done, transport_label(transport, notifications, watch))
    outcome = GridOutcome(skipped=len(specs) - len(todo))
    schedule = _Schedule(todo, outcome)
    options: dict[str, Any] = {"server_url": server_url, "admin_token": admin_token}
    if planner_factory is not None:
        options["planner_factory"] = planner_factory
    if planner_options:
        options["planner_options"] = dict(planner_options)
    if command is not None:
        options["command"] = command
    if transport != "http":
        options["transport"] = transport
    if notifications:
        options["notifications"] = True
    if watch:
        options["watch"] = True
    if server_url is not None:
        concurrency, processes = 1, 1
    concurrency = max(1, concurrency)
    workers = min(processes or default_processes(concurrency, len(todo)), len(todo))
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        disable=not progress,
        transient=False,
    ) as bar:
        task = bar.add_task("runs", total=len(todo))

        def started(spec: RunSpec) -> None:
            bar.update(
                task, description=f"{spec.scenario.name} {spec.planner} {spec.arm} s{spec.seed}"
            )

        def finished(spec: RunSpec, error: BaseException | None) -> None:
            schedule.settle(spec, error)
            bar.advance(task)

        if workers > 1:
            await run_in_processes(
                RunJob(root, options),
                schedule.next,
                processes=workers,
                slots=-(-concurrency // workers),
                started=started,
                finished=finished,
            )
        else:
            await _in_this_process(root, options, schedule.next, concurrency, started, finished)
    return outcome


class MixedTransports(HarnessError):
    """A results directory holds completed runs that reached the provider another way."""


def _check_transport(root: Path, done: Sequence[RunSpec], wanted: str) -> None:
    """Refuse to resume into runs that reached the provider another way than ``wanted`` (a
    ``transport_label``): ``MixedTransports``."""
    for spec in done:
        try:
            meta = json.loads(paths(root, spec.key)[1].read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        made = meta.get("extra", {}).get("transport", wanted)
        if made != wanted:
            raise MixedTransports(
                f"{root} holds runs made with {made}, not {wanted}; "
                "use another --out (or --fresh to run them again)"
            )


async def _in_this_process(
    root: Path,
    options: Mapping[str, Any],
    next_spec: Callable[[], RunSpec | None],
    slots: int,
    started: Callable[[RunSpec], None],
    finished: Callable[[RunSpec, BaseException | None], None],
) -> None:
    async def slot() -> None:
        while (spec := next_spec()) is not None:
            started(spec)
            try:
                await run_one(spec, root, **options)
            except Exception as exc:  # noqa: BLE001 - a failed run is reported, the grid goes on
                finished(spec, exc)
            else:
                finished(spec, None)

    await asyncio.gather(*(slot() for _ in range(slots)))
