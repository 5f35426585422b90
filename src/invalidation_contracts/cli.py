"""The ``invalidation-contracts`` command line: parses arguments and calls the packages.

Each command group registers its subcommands in one ``_add_<group>`` function below. A command
returns an exit status. Every failure is one line on stderr, never a traceback: exit status 2 for
a command line that cannot run as given (``UsageError``, argparse), 1 for a command that could not
be done (``CommandError``, a missing extra, an OS error). Secrets never travel in argv: the admin
token comes from ``$INVALIDATION_CONTRACTS_ADMIN_TOKEN`` or ``--admin-token-file PATH``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import __version__
from ._extras import MissingExtra
from .private_files import PrivateFileError, exposure, write_private

if TYPE_CHECKING:
    from .bench.grid import Grid
    from .planners.preflight import Probe
    from .planners.registry import ConfiguredPlanners
    from .server.http.launch import AppSpec
    from .server.trust import TrustOptions

    Subparsers = argparse._SubParsersAction["_Parser"]

DEBUG_ENV = "INVALIDATION_CONTRACTS_DEBUG"
"""Set to 1 to see the traceback of an unexpected error instead of its one-line summary."""


class CommandError(Exception):
    """A command that could not be done: printed as one line, exit status 1."""

    status = 1


class UsageError(CommandError):
    """A command line that cannot run as given (a bad value, a missing setting): exit status 2."""

    status = 2


Handler = Callable[[argparse.Namespace], int]

DOMAIN_HELP = (
    "a shipped domain (acme_billing, acme_rules, recipes), an installed entry point of the group "
    "invalidation_contracts.domains, or an import path package.module:attribute"
)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line with exit status 2, like every error."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # No abbreviations: ``--admin-token SECRET`` must not pass for ``--admin-token-file``.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _add_schema(sub: Subparsers) -> None:
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


def _add_planners(sub: Subparsers) -> None:
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
    from .planners import PlannerConfigError, PlannerError, check_planner, parse_planner_spec
    from .planners.options import accepted_options, parse_option_pairs
    from .planners.registry import ConfiguredPlanners

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
                from .planners.local.planner import model_file

                model_file(parsed.model)
    except PlannerConfigError as exc:
        raise UsageError(str(exc)) from exc
    except (PlannerError, ImportError) as exc:
        raise CommandError(str(exc)) from exc
    return factory


def _is_local(spec: str) -> bool:
    from .planners import parse_planner_spec

    return parse_planner_spec(spec).kind == "local"


#: The most worker processes ``serve --workers`` starts (each is a whole interpreter).
MAX_WORKERS = 256


def _workers(text: str) -> int:
    value = _positive_int(text)
    if value > MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_WORKERS}, got {value}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a port number, not {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number 0-65535, got {value}")
    return value


def _add_admin_token(p: argparse.ArgumentParser, what: str) -> None:
    from .server.auth import ADMIN_TOKEN_ENV

    p.add_argument(
        "--admin-token-file",
        type=Path,
        default=None,
        metavar="PATH",
        help=f"file holding {what} (default: ${ADMIN_TOKEN_ENV})",
    )


def _admin_token(args: argparse.Namespace) -> str | None:
    """The admin token from ``--admin-token-file`` or the environment; None when neither."""
    from .server.auth import ADMIN_TOKEN_ENV

    path: Path | None = args.admin_token_file
    if path is not None:
        exposed = exposure(path)
        if exposed is not None:
            print(f"warning: the admin token file {exposed}", file=sys.stderr)
        try:
            token = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise CommandError(f"cannot read the admin token file {path}: {reason}") from None
        source = str(path)
        if not token:
            raise UsageError(f"the admin token file {path} is empty")
    else:
        token = os.environ.get(ADMIN_TOKEN_ENV, "").strip()
        source = f"${ADMIN_TOKEN_ENV}"
    if not token:
        return None
    if not all("!" <= ch <= "~" for ch in token):
        raise UsageError(
            f"the admin token in {source} holds characters an HTTP header cannot carry "
            "(use visible ASCII)"
        )
    return token


def _preflight(args: argparse.Namespace) -> int:
    import asyncio

    from .planners.errors import PlannerConfigError, PlannerError
    from .planners.local.server import POOL
    from .planners.preflight import preflight, preflight_table

    factory = _planner_factory(args, [args.planner])
    probes = {} if args.domain is None else {"probes": _domain_probes(args.domain)}

    async def probe() -> Any:
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
    from .bench.probes import NoProbes, domain_probes
    from .domains import DomainError, get_catalog

    try:
        return domain_probes(get_catalog(spec))
    except (DomainError, NoProbes) as exc:
        raise CommandError(str(exc)) from exc


def _console() -> Any:
    """A rich console for tables; ``MissingExtra`` naming ``cli`` without rich."""
    from ._extras import require_extra

    require_extra("cli", "rich")
    from rich.console import Console

    return Console()


def _add_service(sub: Subparsers) -> None:
    p = sub.add_parser("serve", help="run a domain's API with the contract under uvicorn")
    p.add_argument("--domain", required=True, help="the domain to serve: " + DOMAIN_HELP)
    p.add_argument("--level", type=_level, default=6, help="contract level, 0-6 (default 6)")
    _add_history(p, "shared by every worker")
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
    p.add_argument("--port", type=_port, default=8000, help="port to listen on (default 8000)")
    p.add_argument(
        "--workers",
        type=_workers,
        default=1,
        help="worker processes sharing one registry (default 1; more cannot be --ephemeral)",
    )
    _add_admin_token(p, "the token admin routes accept")
    p.add_argument(
        "--protect-graph", action="store_true", help="GET /contract/graph needs the admin token"
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="also answer requests whose Host is NAME (repeatable; '*': any). Default: only "
        "localhost, 127.0.0.1 and ::1, against DNS rebinding",
    )
    p.add_argument(
        "--max-lag",
        type=_positive_seconds,
        default=None,
        metavar="SECONDS",
        help="a worker that has not confirmed it is current for this long answers 503 "
        "(default 2; must exceed the 1 s heartbeat)",
    )
    p.add_argument(
        "--metrics",
        action="store_true",
        help="instrument the contract (the otel extra) and serve GET /contract/metrics "
        "(Prometheus format, admin token; docs/operators.md)",
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
        help="environment variable holding a secret (>= 16 bytes): send names and keys as tags",
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
        p.add_argument(
            "--url", default="http://127.0.0.1:8000", help="the server (default %(default)s)"
        )
        _add_admin_token(p, "the server's admin token")
        p.add_argument("--json", action="store_true", help="print the server's answer as JSON")
        if name == "reload":
            p.add_argument("--snapshot", type=Path, required=True, help="JSON or TOML snapshot")
            p.add_argument("--table", default=None, help="the table (default: the file's)")
            p.add_argument("--version", default=None, help="new version (default: file's, or bump)")
            p.set_defaults(handler=_reload)
        else:
            p.set_defaults(handler=_graph)


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, not {text!r}")
    return value


def _level(text: str) -> int:
    from .protocol.levels import Level

    try:
        return int(Level.parse(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _trust_options(args: argparse.Namespace) -> TrustOptions | None:
    """The server's trust options from ``--signing-key`` and ``--opaque-key-env``."""
    from .server.trust import TrustOptions

    try:
        return TrustOptions.from_files(
            tuple(str(path) for path in args.signing_key), args.opaque_key_env
        )
    except ValueError as exc:
        raise CommandError(str(exc)) from exc


def _ed25519() -> Any:
    from .protocol.signing import ed25519

    return ed25519()


def _keygen(args: argparse.Namespace) -> int:
    from .protocol.signing import public_key_text

    ed25519 = _ed25519()
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

    if os.path.lexists(args.out):
        raise CommandError(f"{args.out} exists (or is a link); refusing to overwrite a key")
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    try:
        write_private(args.out, pem)
    except PrivateFileError as exc:
        raise CommandError(str(exc)) from None
    except OSError as exc:
        raise CommandError(f"cannot write {args.out}: {exc.strerror or exc}") from exc
    print(f"key id {args.out.stem}; public key (give it to clients): {public_key_text(key)}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    import os

    from .server.auth import ADMIN_TOKEN_ENV
    from .server.http.launch import FACTORY, SPEC_ENV, AppSpec
    from .server.store import StorageError

    if args.workers > 1 and args.ephemeral:
        raise UsageError("--workers cannot be --ephemeral: workers share one registry store")
    if (args.declare or args.create_tables) and args.database is None:
        raise UsageError("--declare and --create-tables need --database")
    _known_domain(args.domain)  # an unknown domain is the error to show, before any warning
    store, notice = _history(args)
    token = _admin_token(args)
    if token:
        # Each worker reads the token from its environment, never from its argv.
        os.environ[ADMIN_TOKEN_ENV] = token
    else:
        os.environ.pop(ADMIN_TOKEN_ENV, None)
        print(
            f"invalidation-contracts: warning: ${ADMIN_TOKEN_ENV} is not set; "
            "admin routes answer 401",
            file=sys.stderr,
        )
    spec = AppSpec(
        domain=args.domain,
        level=args.level,
        store=store,
        database=args.database,
        declarations=str(args.declare) if args.declare is not None else None,
        admin_token_env=ADMIN_TOKEN_ENV,
        protect_graph=args.protect_graph,
        metrics=args.metrics,
        signing_keys=tuple(str(path) for path in args.signing_key),
        opaque_key_env=args.opaque_key_env,
        max_lag_s=args.max_lag,
        allowed_hosts=("localhost", "127.0.0.1", "::1", *args.allowed_host),
    )
    _trust_options(args)  # a bad key file or secret is refused before anything opens
    try:
        if args.create_tables:
            _create_tables(spec)
        app = spec.build()
    except MissingExtra:
        raise
    except KeyError as exc:  # DomainError, the domain lookup's one error, is a KeyError
        raise UsageError(exc.args[0] if exc.args else f"unknown domain {args.domain!r}") from exc
    except ImportError as exc:
        raise CommandError(f"cannot load the domain: {exc}") from exc
    except (StorageError, ValueError, RuntimeError) as exc:
        raise CommandError(str(exc)) from exc
    except Exception as exc:  # a database URL SQLAlchemy cannot use (reliability audit 2, N17)
        if type(exc).__module__.split(".")[0] != "sqlalchemy":
            raise
        raise CommandError(f"cannot use the database {args.database!r}: {exc}") from None
    print(notice, file=sys.stderr)
    try:
        if args.workers == 1:
            _listen(app, args)
        else:
            app.state.service.close()  # each worker opens its own; this one only checked it
            os.environ[SPEC_ENV] = spec.to_env()
            _listen(FACTORY, args, workers=args.workers, factory=True)
    except (OSError, OverflowError) as exc:
        where = f"{args.host}:{args.port}"
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise CommandError(f"cannot listen on {where}: {reason}") from None
    return 0


def _add_history(p: argparse.ArgumentParser, shared: str) -> None:
    """``--db`` and ``--ephemeral``: where the domain's contract history is kept."""
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--db",
        default=None,
        metavar="PATH|URL",
        help=f"registry store: a SQLite file or a postgresql:// URL, {shared} (default: "
        "$XDG_STATE_HOME/invalidation-contracts/DOMAIN.sqlite, ~/.local/state/... without it)",
    )
    where.add_argument(
        "--ephemeral",
        action="store_true",
        help="keep the history in memory: it ends with the process (tests, demos); every "
        "client's memory of this server is evicted at the next start",
    )


def _history(args: argparse.Namespace, domain: str | None = None) -> tuple[str | None, str]:
    """The registry store to serve from (None: in memory), and the line that says so on stderr
    once the store opened (a new history is said before the file exists)."""
    from .server.store.location import default_registry, history_notice

    if args.ephemeral:
        target = None
    elif args.db is not None:
        target = str(args.db)
    else:
        if domain is None:
            from .domains import get_domain

            domain = get_domain(args.domain).name
        target = str(default_registry(domain))
    return target, f"invalidation-contracts: {history_notice(target)}"


def _known_domain(name: str) -> None:
    """Refuse an unknown domain name in one line (exit 2) before anything else is said."""
    from .domains import get_domain

    try:
        get_domain(name)
    except MissingExtra:
        raise
    except KeyError as exc:  # DomainError, the domain lookup's one error, is a KeyError
        raise UsageError(exc.args[0] if exc.args else f"unknown domain {name!r}") from exc
    except ImportError as exc:
        raise CommandError(f"cannot load the domain: {exc}") from exc


def _listen(
    app: object, args: argparse.Namespace, *, workers: int = 1, factory: bool = False
) -> None:
    from .server.http.serve import serve

    def listening(url: str) -> None:
        plural = "s" if workers > 1 else ""
        print(f"invalidation-contracts: serving {url} ({workers} worker{plural})", file=sys.stderr)

    serve(
        app, host=args.host, port=args.port, workers=workers, factory=factory, listening=listening
    )


def _create_tables(spec: AppSpec) -> None:
    from .domains import get_domain
    from .server.sql import create_tables

    assert spec.database is not None
    created = create_tables(spec.database, get_domain(spec.domain))
    if created:
        print(f"created and filled SQL tables: {', '.join(created)}", file=sys.stderr)


def _admin_client(args: argparse.Namespace) -> Any:
    from .server.admin_client import AdminClient

    return AdminClient(args.url, _admin_token(args))


def _reload(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from .server.admin_client import AdminClientError
    from .server.datafiles import DataFileError, read_snapshot

    try:
        snapshot = read_snapshot(args.snapshot)
    except DataFileError as exc:
        raise CommandError(str(exc)) from exc
    if args.table is not None and args.table != snapshot.table:
        raise UsageError(f"{args.snapshot} holds table {snapshot.table!r}, not {args.table!r}")
    try:
        with _admin_client(args) as client:
            result = client.reload(snapshot.table, snapshot.rows, args.version or snapshot.version)
    except AdminClientError as exc:
        raise CommandError(str(exc)) from exc
    except ValidationError as exc:  # e.g. a --version over 128 characters (audit 2, N17)
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"])
        raise UsageError(f"cannot send this reload: {where}: {first['msg']}") from None
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
    p.add_argument(
        "--concurrency", type=_positive_int, default=4, help="runs in flight at once (default: 4)"
    )
    p.add_argument(
        "--fresh", action="store_true", help="rerun cells whose artifacts are already complete"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--json", action="store_true", help="print the summary as JSON instead of a table"
    )


def _add_bench(sub: Subparsers) -> None:
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
    from ._extras import require_extras
    from .planners import PlannerError, parse_planner_spec

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
    from .bench.grid import MixedTransports, run_grid
    from .planners.local.server import POOL

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
    _publish(args.out, args.json)
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


#: The ladder a real model runs (hours per seed on a CPU): baseline, naive, row, and row with
#: the fixes applied by the client (which repairs an input-conservative model).
_REAL_MODEL_ARMS = ("none", "naive", "row", "row/eager/client")


def _ladder(args: argparse.Namespace) -> int:
    import dataclasses

    _require_grid_extras(args.planner or (), "http")
    from .bench.arms import Arm
    from .bench.grid import ladder_grid
    from .bench.scenario import ScenarioError
    from .planners import PlannerError, parse_planner_spec

    try:
        grid = ladder_grid(args.scenario, args.seeds)
        _verify_domains(grid)
        if args.planner:
            real = any(parse_planner_spec(p).kind != "simulated" for p in args.planner)
            arms = [Arm.parse(a) for a in _REAL_MODEL_ARMS] if real else grid.arms
            grid = dataclasses.replace(grid, planners=args.planner, arms=arms)
    except (ScenarioError, PlannerError) as exc:
        raise UsageError(str(exc)) from exc
    return _execute_grid(grid, args)


def _verify_domains(grid: Grid) -> None:
    """Load every scenario's domain and check the manifest against it before anything runs."""
    from .bench.scenario import verify_domain

    for scenario in grid.scenarios:
        verify_domain(scenario)


def _run(args: argparse.Namespace) -> int:
    _require_grid_extras(args.planner or (), args.transport)
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
        _verify_domains(grid)
    except (ScenarioError, ValueError) as exc:
        raise UsageError(str(exc)) from exc
    options: dict[str, Any] = {}
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
    return _execute_grid(grid, args, **options)


def _report(args: argparse.Namespace) -> int:
    _publish(args.root, args.json)
    return 0


def _scenarios(args: argparse.Namespace) -> int:
    from .bench.scenario import ScenarioError, resolve_scenario, shipped_scenarios

    if args.manifest is None:
        for name in shipped_scenarios():
            try:
                scenario = resolve_scenario(name)
            except ScenarioError as exc:
                raise CommandError(str(exc)) from exc
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


def _add_memory(sub: Subparsers) -> None:
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
    from .client import operator

    try:
        rows = operator.origin_stats(args.db, args.origin)
    except operator.OperatorError as exc:
        raise CommandError(str(exc)) from exc
    if args.json:
        print(json.dumps(rows, indent=2, sort_keys=True))
    else:
        _console().print(operator.stats_table(rows))
    return 0


def _memory_list(args: argparse.Namespace) -> int:
    from .client import operator

    try:
        rows = operator.entry_rows(args.db, args.origin, tombstones=args.tombstones)
    except operator.OperatorError as exc:
        raise CommandError(str(exc)) from exc
    if args.json:
        print(json.dumps(rows, indent=2, sort_keys=True))
    else:
        _console().print(operator.entries_table(rows, tombstones=args.tombstones))
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
def _add_mcp(sub: Subparsers) -> None:
    p = sub.add_parser(
        "serve-mcp", help="serve a domain as an MCP tool server (stdio or streamable HTTP)"
    )
    p.add_argument("--domain", required=True, help="the domain to serve: " + DOMAIN_HELP)
    p.add_argument("--level", type=_level, default=6, help="contract level, 0-6 (default 6)")
    _add_history(p, "shared with other workers, HTTP ones included")
    p.add_argument(
        "--transport",
        choices=("stdio", "http"),
        default="stdio",
        help="stdio (default), or streamable HTTP at http://HOST:PORT/mcp",
    )
    p.add_argument("--host", default="127.0.0.1", help="with http: address (default 127.0.0.1)")
    p.add_argument(
        "--port", type=_port, default=8000, help="with http: port (default 8000; 0: any free one)"
    )
    p.add_argument("--name", default=None, help="the server's name (default: the domain's)")
    p.add_argument(
        "--tool-name",
        action="append",
        default=[],
        metavar="OPERATION=NAME",
        help="rename a route's tool, e.g. 'POST /v1/subscriptions=create_subscription'",
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="HOST",
        help="with http: another Host header to accept (name, name:port or name:*); needed when "
        "bound to 0.0.0.0 or ::",
    )
    p.add_argument(
        "--allowed-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="with http: another Origin to accept (https://app.example)",
    )
    _add_admin_token(p, "the bearer token MCP clients must send (required off loopback)")
    p.add_argument(
        "--idle-timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="with http: reap a session idle this long (default 600)",
    )
    p.add_argument(
        "--protect-graph",
        action="store_true",
        help="do not list or serve contract://graph (serve gives it to the admin token)",
    )
    p.add_argument(
        "--envelope",
        choices=("meta", "inline"),
        default="meta",
        help="where a tool result carries the contract: its _meta, the model shown only the "
        "model view (default), or inline in its content (0.1's wire form, for 0.1 clients)",
    )
    p.add_argument(
        "--signing-key",
        type=Path,
        action="append",
        default=[],
        metavar="PEM",
        help="Ed25519 private key (PEM) to sign freshness statements with (as for serve)",
    )
    p.add_argument(
        "--opaque-key-env",
        default=None,
        metavar="VAR",
        help="environment variable holding a secret (>= 16 bytes): send names and keys as tags",
    )
    p.set_defaults(handler=_serve_mcp)


def _serve_mcp(args: argparse.Namespace) -> int:
    from .domains import get_domain
    from .mcp.http import HttpOptions, is_loopback
    from .mcp.serve import open_source, parse_tool_names, serve_mcp

    try:
        tool_names = parse_tool_names(args.tool_name)
        domain = get_domain(args.domain)
    except KeyError as exc:
        raise UsageError(exc.args[0] if exc.args else f"unknown domain {args.domain!r}") from exc
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    trust = _trust_options(args)
    if not args.idle_timeout > 0:
        raise UsageError("--idle-timeout must be a positive number of seconds")
    http = HttpOptions(
        allowed_hosts=tuple(args.allowed_host),
        allowed_origins=tuple(args.allowed_origin),
        # On loopback a token is enforced only when a file names it (the environment's admin
        # token is for the HTTP workers a harness also runs); off loopback it is required.
        token=_admin_token(args)
        if args.admin_token_file is not None or not is_loopback(args.host)
        else None,
        idle_timeout_s=args.idle_timeout,
    )
    store, notice = _history(args, domain.name)
    try:
        source, close = open_source(domain, level=args.level, store=store, trust=trust)
    except MissingExtra:
        raise
    except (ValueError, RuntimeError, OSError) as exc:
        raise CommandError(str(exc)) from exc
    print(notice, file=sys.stderr)
    try:
        serve_mcp(
            source,
            transport=args.transport,
            host=args.host,
            port=args.port,
            name=args.name,
            tool_names=tool_names,
            envelope=args.envelope,
            http=http,
            protect_graph=args.protect_graph,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    except (OSError, OverflowError) as exc:
        where = f"{args.host}:{args.port}"
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise CommandError(f"cannot listen on {where}: {reason}") from None
    finally:
        close()
    return 0


def _add_db(sub: Subparsers) -> None:
    from .cli_db import add_db

    add_db(sub)


_REGISTRARS: list[Callable[[Subparsers], None]] = [
    _add_bench,
    _add_schema,
    _add_planners,
    _add_service,
    _add_mcp,
    _add_memory,
    _add_db,
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
        status = handler(args)
        sys.stdout.flush()
        return status
    except CommandError as exc:
        return _fail(str(exc), exc.status)
    except MissingExtra as exc:
        return _fail(str(exc), 1)
    except KeyboardInterrupt:
        print("invalidation-contracts: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (``... | head``): stop quietly, and let no flush at exit complain.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except Exception as exc:
        if os.environ.get(DEBUG_ENV) == "1":
            raise
        return _fail(f"unexpected {type(exc).__name__}: {exc} (set {DEBUG_ENV}=1 for details)", 1)


def _fail(message: str, status: int) -> int:
    first = message.strip().splitlines()[0] if message.strip() else "failed"
    print(f"invalidation-contracts: error: {first}", file=sys.stderr)
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
