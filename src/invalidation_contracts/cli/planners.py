"""``invalidation-contracts preflight``, and the planner options the harness commands share."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .command import CommandError, UsageError
from .options import DOMAIN_HELP, _console, _positive_int

if TYPE_CHECKING:
    from ..planners.preflight import PreflightReport, Probe
    from ..planners.registry import ConfiguredPlanners
    from .command import Subparsers


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "preflight", help="measure a planner's first-try compliance per action type (paper §6.1)"
    )
    p.add_argument(
        "--planner",
        required=True,
        metavar="SPEC",
        help="simulated:PROFILE, anthropic:MODEL, openai:MODEL, openai-compatible:MODEL@URL "
        "or local:MODEL (local:qwen2.5-coder-0.5b, or a .gguf path)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed passed to the planner (default 0)")
    p.add_argument(
        "--rounds", type=_positive_int, default=1, help="times each probe runs (default 1)"
    )
    p.add_argument("--no-l2", action="store_true", help="leave the L2 sentence out of the prompt")
    p.add_argument(
        "--domain",
        default=None,
        metavar="DOMAIN",
        help="probe with this domain's task families and fixes instead of the built-in probes: "
        + DOMAIN_HELP,
    )
    p.add_argument(
        "--max-retries", type=int, default=None, help="SDK retries on 429/5xx (vendor planners)"
    )
    p.add_argument(
        "--concurrency",
        type=_positive_int,
        default=4,
        help="probes in flight at once; a local: model gets this many slots (default 4)",
    )
    _add_planner_options(p)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(handler=_preflight)


def _add_planner_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--planner-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="planner setting, e.g. timeout=600, max_retries=2, temperature=0, max_tokens=512, "
        "parallel=2 (repeatable; each planner takes the keys its kind accepts)",
    )


def _planner_factory(args: argparse.Namespace, specs: Sequence[str]) -> ConfiguredPlanners:
    """``create_planner`` with the command's ``--planner-option`` values, once they are checked
    against every planner and any ``local:`` model is fetched and verified (one clear line if
    it cannot be)."""
    from ..planners import PlannerConfigError, PlannerError, check_planner, parse_planner_spec
    from ..planners.options import accepted_options, parse_option_pairs
    from ..planners.registry import ConfiguredPlanners

    try:
        given = parse_option_pairs(args.planner_option)
        if getattr(args, "max_retries", None) is not None:
            given.setdefault("max_retries", str(args.max_retries))
        kinds = {parse_planner_spec(spec).kind for spec in specs}
        if "local" in kinds:
            given.setdefault("parallel", str(args.concurrency))
        unused = sorted(k for k in given if not any(k in accepted_options(kd) for kd in kinds))
        if unused:
            raise UsageError(
                f"planner option(s) {', '.join(unused)} apply to none of the planners "
                f"({', '.join(sorted(kinds))})"
            )
        factory = ConfiguredPlanners(given)
        for spec in specs:
            parsed = check_planner(spec, factory.options_for(spec))
            if parsed.kind == "local":
                from ..planners.local.planner import model_file

                model_file(parsed.model)
    except PlannerConfigError as exc:
        raise UsageError(str(exc)) from exc
    except (PlannerError, ImportError) as exc:
        raise CommandError(str(exc)) from exc
    return factory


def _is_local(spec: str) -> bool:
    from ..planners import parse_planner_spec

    return parse_planner_spec(spec).kind == "local"


def _preflight(args: argparse.Namespace) -> int:
    import asyncio

    from ..planners.errors import PlannerConfigError, PlannerError
    from ..planners.local.server import POOL
    from ..planners.preflight import preflight, preflight_table

    factory = _planner_factory(args, [args.planner])
    probes = {} if args.domain is None else {"probes": _domain_probes(args.domain)}

    async def probe() -> PreflightReport:
        planner = factory(args.planner)
        try:
            return await preflight(
                planner,
                seed=args.seed,
                rounds=args.rounds,
                l2=not args.no_l2,
                concurrency=args.concurrency,
                **probes,
            )
        finally:
            await planner.aclose()

    try:
        with POOL.hold():
            report = asyncio.run(probe())
    except PlannerConfigError as exc:
        raise UsageError(str(exc)) from exc
    except PlannerError as exc:
        raise CommandError(str(exc)) from exc
    if args.json:
        print(json.dumps(report.to_json(), indent=2, sort_keys=True))
    else:
        _console().print(preflight_table(report))
    return 0


def _domain_probes(spec: str) -> tuple[Probe, ...]:
    """``preflight --domain``: probes built from the domain's task families."""
    from ..bench.probes import NoProbes, domain_probes
    from ..domains import DomainError, get_catalog

    try:
        return domain_probes(get_catalog(spec))
    except (DomainError, NoProbes) as exc:
        raise CommandError(str(exc)) from exc
