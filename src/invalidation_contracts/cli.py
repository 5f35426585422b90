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

from . import __version__


class CommandError(Exception):
    """A user-facing failure: printed as one line, exit status 2."""


Handler = Callable[[argparse.Namespace], int]


def _add_schema(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("schema", help="write the JSON Schema of every wire object")
    p.add_argument("--out", type=Path, default=None, help="directory to write <Name>.schema.json into")
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
    p.add_argument("--rounds", type=_positive_int, default=1, help="times each probe runs (default 1)")
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

    p = sub.add_parser("serve", help="run the provider service (a domain's API with the contract) under uvicorn")
    p.add_argument("--domain", required=True, help="the domain to serve, e.g. acme_billing")
    p.add_argument("--level", type=_level, default=6, help="contract level 0-6 or L0-L6 (default 6)")
    p.add_argument("--db", type=Path, default=None, help="SQLite registry file (default: in memory, lost on exit)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    p.add_argument(
        "--admin-token-env", default=ADMIN_TOKEN_ENV, metavar="VAR",
        help=f"environment variable holding the admin token (default {ADMIN_TOKEN_ENV})",
    )
    p.add_argument("--protect-graph", action="store_true", help="put GET /contract/graph behind the admin token")
    p.set_defaults(handler=_serve)

    for name, help_text in (
        ("reload", "replace a table's rows on a running server from a snapshot file"),
        ("graph", "print a running server's knowledge graph"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--url", default="http://127.0.0.1:8000", help="the server (default http://127.0.0.1:8000)")
        p.add_argument("--token", default=None, help=f"admin token (default ${ADMIN_TOKEN_ENV})")
        p.add_argument("--json", action="store_true", help="print the server's answer as JSON")
        if name == "reload":
            p.add_argument("--snapshot", type=Path, required=True, help="snapshot file (JSON or TOML)")
            p.add_argument("--table", default=None, help="the table (default: the one the file names)")
            p.add_argument("--version", default=None, help="the new version (default: the file's, else bumped)")
            p.set_defaults(handler=_reload)
        else:
            p.set_defaults(handler=_graph)


def _level(text: str) -> int:
    from .protocol.levels import Level

    try:
        return int(Level.parse(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _serve(args: argparse.Namespace) -> int:
    import os

    from .server.app import create_app, serve
    from .server.storage import StorageError

    try:
        from .domains import get_domain

        domain = get_domain(args.domain)
    except ImportError as exc:
        raise CommandError(f"cannot load domains: {exc}") from exc
    except KeyError as exc:
        raise CommandError(str(exc.args[0]) if exc.args else f"unknown domain {args.domain!r}") from exc
    token = os.environ.get(args.admin_token_env) or None
    if token is None:
        print(f"invalidation-contracts: warning: ${args.admin_token_env} is not set; admin routes answer 401",
              file=sys.stderr)
    try:
        app = create_app(domain, level=args.level, store=args.db, admin_token=token or "",
                         protect_graph=args.protect_graph)
        serve(app, host=args.host, port=args.port)
    except StorageError as exc:
        raise CommandError(str(exc)) from exc
    except OSError as exc:
        raise CommandError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from exc
    return 0


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
        raise CommandError(f"{args.snapshot} is a snapshot of table {snapshot.table!r}, not {args.table!r}")
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
        what = "touch, no row changed" if result.touch else (
            f"{len(d.added)} added, {len(d.removed)} removed, {len(d.changed)} changed"
        )
        print(f"{result.table}: {result.old_version} -> {result.new_version} ({what}); "
              f"{len(result.affected_downstream)} downstream nodes affected; seq {result.contract_seq}")
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
    print(f"{len(listing.nodes)} nodes, {len(listing.edges)} edges "
          f"(rules_version {listing.rules_version}, seq {listing.contract_seq})")
    for edge in listing.edges:
        print(f"{edge.from_} -[{edge.relation}]-> {edge.to}")
    return 0


#: One registrar per command group, in help order.
_REGISTRARS: list[Callable[[argparse._SubParsersAction], None]] = [_add_schema, _add_planners, _add_service]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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
