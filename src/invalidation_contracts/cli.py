"""The ``invalidation-contracts`` command line: parses arguments and calls the packages.

Each command group registers its subcommands in one ``_add_<group>`` function below. A command
returns an exit status; a ``CommandError`` becomes a one-line message on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from . import __version__

if TYPE_CHECKING:
    from .server.http.launch import AppSpec


class CommandError(Exception):
    """A user-facing failure: printed as one line, exit status 2."""


Handler = Callable[[argparse.Namespace], int]


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (and exit status 2), like every error here."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _add_schema(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("schema", help="write the JSON Schema of every wire object")
    p.add_argument(
        "--out", type=Path, default=None, help="directory to write <Name>.schema.json into"
    )
    p.set_defaults(handler=_schema)


def _schema(args: argparse.Namespace) -> int:
    from .protocol.schema import json_schemas, write_schemas

    if args.out is None:
        print(json.dumps(json_schemas(), indent=2, sort_keys=True))
        return 0
    try:
        paths = write_schemas(args.out)
    except OSError as exc:
        raise CommandError(f"cannot write schemas to {args.out}: {exc.strerror or exc}") from exc
    print(f"wrote {len(paths)} schemas to {args.out}")
    return 0


def _add_planners(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "preflight", help="measure a planner's first-try compliance per action type (paper §6.1)"
    )
    p.add_argument(
        "--planner",
        required=True,
        metavar="SPEC",
        help="simulated:PROFILE, anthropic:MODEL, openai:MODEL or openai-compatible:MODEL@URL",
    )
    p.add_argument("--seed", type=int, default=0, help="seed passed to the planner (default 0)")
    p.add_argument(
        "--rounds", type=_positive_int, default=1, help="times each probe runs (default 1)"
    )
    p.add_argument("--no-l2", action="store_true", help="leave the L2 sentence out of the prompt")
    p.add_argument(
        "--max-retries", type=int, default=None, help="SDK retries on 429/5xx (vendor planners)"
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(handler=_preflight)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _preflight(args: argparse.Namespace) -> int:
    import asyncio

    from .planners.errors import PlannerError
    from .planners.preflight import preflight_spec, preflight_table

    try:
        options = {} if args.max_retries is None else {"max_retries": args.max_retries}
        report = asyncio.run(
            preflight_spec(
                args.planner,
                planner_options=options,
                seed=args.seed,
                rounds=args.rounds,
                l2=not args.no_l2,
            )
        )
    except PlannerError as exc:
        raise CommandError(str(exc)) from exc
    if args.json:
        print(json.dumps(report.to_json(), indent=2, sort_keys=True))
    else:
        from rich.console import Console

        Console().print(preflight_table(report))
    return 0


def _add_service(sub: argparse._SubParsersAction) -> None:
    from .server.auth import ADMIN_TOKEN_ENV

    p = sub.add_parser("serve", help="run a domain's API with the contract under uvicorn")
    p.add_argument("--domain", required=True, help="the domain to serve, e.g. acme_billing")
    p.add_argument("--level", type=_level, default=6, help="contract level, 0-6 (default 6)")
    p.add_argument(
        "--db",
        default=None,
        metavar="PATH|URL",
        help="registry store: a SQLite file or a postgresql:// URL, shared by every worker "
        "(default: memory)",
    )
    p.add_argument(
        "--database",
        default=None,
        metavar="URL",
        help="the provider's database (sqlite:///FILE or postgresql://...): the domain's tables "
        "are read from its SQL tables, and every committed write to them is captured",
    )
    p.add_argument(
        "--declare",
        type=Path,
        default=None,
        metavar="TOML",
        help="with --database: [tables.NAME] table/key/columns/schema declarations "
        "(default: each table from the SQL table of the same name)",
    )
    p.add_argument(
        "--create-tables",
        action="store_true",
        help="with --database: create the SQL tables that are missing from the domain's data",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    p.add_argument(
        "--workers",
        type=_positive_int,
        default=1,
        help="worker processes sharing one registry (default 1; more need --db)",
    )
    p.add_argument(
        "--admin-token-env",
        default=ADMIN_TOKEN_ENV,
        metavar="VAR",
        help=f"environment variable holding the admin token (default {ADMIN_TOKEN_ENV})",
    )
    p.add_argument(
        "--protect-graph", action="store_true", help="GET /contract/graph needs the admin token"
    )
    p.add_argument(
        "--signing-key",
        type=Path,
        action="append",
        default=[],
        metavar="PEM",
        help="Ed25519 private key (PEM) to sign freshness statements with; repeat to rotate "
        "(the key id is the file's stem; the last one signs)",
    )
    p.add_argument(
        "--opaque-key-env",
        default=None,
        metavar="VAR",
        help="environment variable holding a secret (>= 16 bytes): send table names and keys as tags",
    )
    p.set_defaults(handler=_serve)

    p = sub.add_parser(
        "keygen", help="write a new Ed25519 signing key (PEM) and print its public key"
    )
    p.add_argument("--out", type=Path, required=True, help="where to write the private key (PEM)")
    p.set_defaults(handler=_keygen)

    for name, help_text in (
        ("reload", "replace a table's rows on a running server from a snapshot file"),
        ("graph", "print a running server's knowledge graph"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--url", default="http://127.0.0.1:8000", help="default %(default)s")
        p.add_argument("--token", default=None, help=f"admin token (default ${ADMIN_TOKEN_ENV})")
        p.add_argument("--json", action="store_true", help="print the server's answer as JSON")
        if name == "reload":
            p.add_argument("--snapshot", type=Path, required=True, help="JSON or TOML snapshot")
            p.add_argument("--table", default=None, help="the table (default: the file's)")
            p.add_argument("--version", default=None, help="new version (default: file's, or bump)")
            p.set_defaults(handler=_reload)
        else:
            p.set_defaults(handler=_graph)


def _level(text: str) -> int:
    from .protocol.levels import Level

    try:
        return int(Level.parse(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _trust_options(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """The server's trust options from ``--signing-key`` and ``--opaque-key-env``."""
    from .server.trust import TrustOptions

    try:
        return TrustOptions.from_files(
            tuple(str(path) for path in args.signing_key), args.opaque_key_env
        )
    except ValueError as exc:
        raise CommandError(str(exc)) from exc


def _keygen(args: argparse.Namespace) -> int:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

    from .protocol.signing import public_key_text

    if args.out.exists():
        raise CommandError(f"{args.out} exists; refusing to overwrite a key")
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    try:
        args.out.write_bytes(pem)
        args.out.chmod(0o600)
    except OSError as exc:
        raise CommandError(f"cannot write {args.out}: {exc.strerror or exc}") from exc
    print(f"key id {args.out.stem}; public key (give it to clients): {public_key_text(key)}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    import os

    from .server.http.launch import FACTORY, SPEC_ENV, AppSpec
    from .server.store import StorageError

    if args.workers > 1 and args.db is None:
        raise CommandError("--workers needs --db: workers share one registry store")
    if (args.declare or args.create_tables) and args.database is None:
        raise CommandError("--declare and --create-tables need --database")
    if not os.environ.get(args.admin_token_env):
        print(
            f"invalidation-contracts: warning: ${args.admin_token_env} is not set; "
            "admin routes answer 401",
            file=sys.stderr,
        )
    spec = AppSpec(
        domain=args.domain,
        level=args.level,
        store=str(args.db) if args.db is not None else None,
        database=args.database,
        declarations=str(args.declare) if args.declare is not None else None,
        admin_token_env=args.admin_token_env,
        protect_graph=args.protect_graph,
        signing_keys=tuple(str(path) for path in args.signing_key),
        opaque_key_env=args.opaque_key_env,
    )
    _trust_options(args)  # a bad key file or secret is a usage error, before anything opens
    try:
        if args.create_tables:
            _create_tables(spec)
        app = spec.build()
    except ImportError as exc:
        raise CommandError(str(exc)) from exc
    except KeyError as exc:
        raise CommandError(exc.args[0] if exc.args else f"unknown domain {args.domain!r}") from exc
    except (StorageError, ValueError, RuntimeError) as exc:
        raise CommandError(str(exc)) from exc
    try:
        if args.workers == 1:
            _listen(app, args)
        else:
            app.state.service.close()  # each worker opens its own; this one only checked it
            os.environ[SPEC_ENV] = spec.to_env()
            _listen(FACTORY, args, workers=args.workers, factory=True)
    except OSError as exc:
        where = f"{args.host}:{args.port}"
        raise CommandError(f"cannot listen on {where}: {exc.strerror or exc}") from exc
    return 0


def _listen(
    app: object, args: argparse.Namespace, *, workers: int = 1, factory: bool = False
) -> None:
    from .server.http.serve import serve

    serve(app, host=args.host, port=args.port, workers=workers, factory=factory)


def _create_tables(spec: AppSpec) -> None:
    from .domains import get_domain
    from .server.sql import create_tables

    assert spec.database is not None
    created = create_tables(spec.database, get_domain(spec.domain))
    if created:
        print(f"created and filled SQL tables: {', '.join(created)}", file=sys.stderr)


def _admin_client(args: argparse.Namespace):
    import os

    from .server.admin_client import AdminClient
    from .server.auth import ADMIN_TOKEN_ENV

    return AdminClient(args.url, args.token or os.environ.get(ADMIN_TOKEN_ENV))


def _reload(args: argparse.Namespace) -> int:
    from .server.admin_client import AdminClientError
    from .server.datafiles import DataFileError, read_snapshot

    try:
        snapshot = read_snapshot(args.snapshot)
    except DataFileError as exc:
        raise CommandError(str(exc)) from exc
    if args.table is not None and args.table != snapshot.table:
        raise CommandError(f"{args.snapshot} holds table {snapshot.table!r}, not {args.table!r}")
    try:
        with _admin_client(args) as client:
            result = client.reload(snapshot.table, snapshot.rows, args.version or snapshot.version)
    except AdminClientError as exc:
        raise CommandError(str(exc)) from exc
    if args.json:
        print(json.dumps(result.to_wire(), indent=2, sort_keys=True))
    elif result.old_version == result.new_version:
        print(f"{result.table}: unchanged at {result.new_version}")
    else:
        d = result.diff
        what = (
            "touch, no row changed"
            if result.touch
            else f"{len(d.added)} added, {len(d.removed)} removed, {len(d.changed)} changed"
        )
        print(
            f"{result.table}: {result.old_version} -> {result.new_version} ({what}); "
            f"{len(result.affected_downstream)} downstream nodes affected; "
            f"seq {result.contract_seq}"
        )
    return 0


def _graph(args: argparse.Namespace) -> int:
    from .server.admin_client import AdminClientError

    try:
        with _admin_client(args) as client:
            listing = client.graph()
    except AdminClientError as exc:
        raise CommandError(str(exc)) from exc
    if args.json:
        print(json.dumps(listing.to_wire(), indent=2, sort_keys=True))
        return 0
    print(
        f"{len(listing.nodes)} nodes, {len(listing.edges)} edges "
        f"(rules_version {listing.rules_version}, seq {listing.contract_seq})"
    )
    for edge in listing.edges:
        print(f"{edge.from_} -[{edge.relation}]-> {edge.to}")
    return 0


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
    p.add_argument("--concurrency", type=int, default=4, help="runs in flight at once (default: 4)")
    p.add_argument(
        "--fresh", action="store_true", help="rerun cells whose artifacts are already complete"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--json", action="store_true", help="print the summary as JSON instead of a table"
    )


def _add_bench(sub: argparse._SubParsersAction) -> None:
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
        help="scenario name or manifest path (repeatable)",
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
        "--admin-token",
        default=None,
        help="that server's admin token (default: $INVALIDATION_CONTRACTS_ADMIN_TOKEN)",
    )
    _add_harness_output(p)
    p.set_defaults(handler=_run)

    p = sub.add_parser(
        "report", help="rebuild report.md, figures and the summary from artifacts alone"
    )
    p.add_argument(
        "--from", dest="root", type=Path, default=Path("results"), help="results directory"
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(handler=_report)

    p = sub.add_parser("scenarios", help="list the shipped scenario manifests, or validate one")
    p.add_argument(
        "manifest", nargs="?", help="a scenario name or manifest path to validate and describe"
    )
    p.set_defaults(handler=_scenarios)


def _command_line() -> str:
    return "invalidation-contracts " + " ".join(sys.argv[1:])


def _execute_grid(grid, args: argparse.Namespace, **options) -> int:
    import asyncio

    from .bench.grid import run_grid

    outcome = asyncio.run(
        run_grid(
            grid,
            args.out,
            concurrency=args.concurrency,
            progress=not (args.no_progress or args.json),
            command=_command_line(),
            resume=not args.fresh,
            **options,
        )
    )
    for spec, exc in outcome.failed:
        print(f"invalidation-contracts: run failed: {spec.key.slug}: {exc}", file=sys.stderr)
    _publish(args.out, args.json)
    return 1 if outcome.failed else 0


def _publish(root: Path, as_json: bool) -> None:
    from .bench.artifacts import read_runs
    from .bench.figures import write_figures
    from .bench.metrics import aggregate, summary_json
    from .bench.report import build_report, ladder_table

    runs = read_runs(root)
    if not runs:
        raise CommandError(f"no completed runs under {root}")
    report_path = root / "report.md"
    build_report(root, report_path)
    figures = write_figures(root)
    if as_json:
        print(json.dumps(summary_json(root), indent=2, default=str))
        return
    print(ladder_table(aggregate(runs)))
    print(f"\nreport: {report_path}")
    for figure in figures:
        print(f"figure: {figure}")


def _ladder(args: argparse.Namespace) -> int:
    from .bench.grid import ladder_grid
    from .bench.scenario import ScenarioError

    try:
        grid = ladder_grid(args.scenario, args.seeds)
    except ScenarioError as exc:
        raise CommandError(str(exc)) from exc
    return _execute_grid(grid, args)


def _run(args: argparse.Namespace) -> int:
    import os

    from .bench.arms import Arm
    from .bench.grid import Grid, ladder_grid, load_grid
    from .bench.scenario import ScenarioError, load_scenario
    from .server.auth import ADMIN_TOKEN_ENV

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
    except (ScenarioError, ValueError) as exc:
        raise CommandError(str(exc)) from exc
    options = {}
    if args.server_url:
        token = args.admin_token or os.environ.get(ADMIN_TOKEN_ENV)
        if not token:
            raise CommandError(f"--server-url needs --admin-token or ${ADMIN_TOKEN_ENV}")
        options = {"server_url": args.server_url, "admin_token": token}
    return _execute_grid(grid, args, **options)


def _report(args: argparse.Namespace) -> int:
    _publish(args.root, args.json)
    return 0


def _scenarios(args: argparse.Namespace) -> int:
    from .bench.scenario import ScenarioError, load_scenario, shipped_scenarios

    if args.manifest is None:
        for name in shipped_scenarios():
            scenario = load_scenario(name)
            print(
                f"{name:28} {scenario.episodes:3} episodes  {len(scenario.drift)} drift events  {scenario.description}"
            )
        return 0
    try:
        scenario = load_scenario(args.manifest)
    except ScenarioError as exc:
        raise CommandError(str(exc)) from exc
    print(
        f"{scenario.name}: {scenario.episodes} episodes, domain {scenario.domain}, level L{scenario.level}"
    )
    for event in scenario.drift:
        print(f"  after episode {event.after_episode}: {event.target} ({event.kind})")
    print(f"  stale slots: {scenario.stale_slots or 'none'}")
    return 0


def _add_memory(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("memory", help="inspect and edit an agent's fix memory (SQLite file)")
    actions = p.add_subparsers(dest="memory_action", metavar="ACTION", required=True)

    stats = actions.add_parser("stats", help="counters per origin: hits, misses, evictions, ...")
    stats.add_argument("--db", type=Path, required=True, help="the fix-memory SQLite file")
    stats.add_argument("--origin", default=None, help="only this origin")
    stats.add_argument("--json", action="store_true", help="print JSON instead of a table")
    stats.set_defaults(handler=_memory_stats)

    listing = actions.add_parser("list", help="list live entries (or tombstones)")
    listing.add_argument("--db", type=Path, required=True, help="the fix-memory SQLite file")
    listing.add_argument("--origin", default=None, help="only this origin")
    listing.add_argument("--tombstones", action="store_true", help="list evicted entries instead")
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    listing.set_defaults(handler=_memory_list)

    evict = actions.add_parser("evict", help="evict entries (reason: operator)")
    evict.add_argument("--db", type=Path, required=True, help="the fix-memory SQLite file")
    evict.add_argument("--origin", required=True, help="the origin whose entries to evict")
    which = evict.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--id", dest="ids", action="append", metavar="ID", help="an entry id (repeatable)"
    )
    which.add_argument("--table", help="every entry depending on this table")
    which.add_argument("--all", dest="everything", action="store_true", help="every entry of it")
    evict.set_defaults(handler=_memory_evict)


def _memory_stats(args: argparse.Namespace) -> int:
    from rich.console import Console

    from .client import operator

    try:
        rows = operator.origin_stats(args.db, args.origin)
    except operator.OperatorError as exc:
        raise CommandError(str(exc)) from exc
    if args.json:
        print(json.dumps(rows, indent=2, sort_keys=True))
    else:
        Console().print(operator.stats_table(rows))
    return 0


def _memory_list(args: argparse.Namespace) -> int:
    from rich.console import Console

    from .client import operator

    try:
        rows = operator.entry_rows(args.db, args.origin, tombstones=args.tombstones)
    except operator.OperatorError as exc:
        raise CommandError(str(exc)) from exc
    if args.json:
        print(json.dumps(rows, indent=2, sort_keys=True))
    else:
        Console().print(operator.entries_table(rows, tombstones=args.tombstones))
    return 0


def _memory_evict(args: argparse.Namespace) -> int:
    from .client import operator

    try:
        evicted = operator.evict(
            args.db, args.origin, entry_ids=args.ids, table=args.table, everything=args.everything
        )
    except operator.OperatorError as exc:
        raise CommandError(str(exc)) from exc
    noun = "entry" if len(evicted) == 1 else "entries"
    listed = f": {', '.join(evicted)}" if evicted else ""
    print(f"evicted {len(evicted)} {noun} of {args.origin}{listed}")
    return 0


#: One registrar per command group, in help order.
_REGISTRARS: list[Callable[[argparse._SubParsersAction], None]] = [
    _add_bench,
    _add_schema,
    _add_planners,
    _add_service,
    _add_memory,
]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="invalidation-contracts",
        description="Invalidation contracts for cross-episode agent memory.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for register in _REGISTRARS:
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return handler(args)
    except CommandError as exc:
        print(f"invalidation-contracts: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("invalidation-contracts: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
