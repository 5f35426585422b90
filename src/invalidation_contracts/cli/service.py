"""``serve``, ``keygen``, ``reload`` and ``graph``: run a provider and talk to a running one."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from .._extras import MissingExtra
from ..private_files import PrivateFileError, write_private
from .command import CommandError, UsageError
from .config_file import add_config_option
from .options import (
    DOMAIN_HELP,
    _add_admin_token,
    _add_header_timeout,
    _add_history,
    _add_log_format,
    _add_metrics_token,
    _add_trust_options,
    _admin_token,
    _cannot_listen,
    _count,
    _history,
    _level,
    _metrics_token,
    _port,
    _trust_options,
    _use_log_format,
    _workers,
)
from .say import say

if TYPE_CHECKING:
    from types import ModuleType

    from starlette.types import ASGIApp

    from .admin_client import AdminClient
    from .command import Subparsers
    from .launch import AppSpec


def register(sub: Subparsers) -> None:
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
        "--capture",
        choices=("triggers", "logical"),
        default="triggers",
        help="with --database: how its writes are captured: triggers (default; SQLite or "
        "PostgreSQL) or logical (PostgreSQL logical decoding: no trigger on a writer's path; "
        "needs wal_level = logical)",
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
    _add_metrics_token(p)
    _add_header_timeout(p)
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
        "--stall-timeout",
        type=_positive_seconds,
        default=None,
        metavar="SECONDS",
        help="a worker whose follower has waited this long on a database call (a link gone "
        "silent) breaks its connections and reconnects (default 20, or twice --max-lag if "
        "longer; must exceed --max-lag)",
    )
    p.add_argument(
        "--reconcile-interval",
        type=_positive_seconds,
        default=None,
        metavar="SECONDS",
        help="how often the capture's leader compares the declared tables with the registry, "
        "beside serving, to catch writes around the capture (default 60)",
    )
    p.add_argument(
        "--poll-interval",
        type=_positive_seconds,
        default=None,
        metavar="SECONDS",
        help="how often a worker looks for changes nothing wakes it for: SQLite files it cannot "
        "watch with inotify (not Linux), and the captured writes of a PostgreSQL --database (the "
        "capture leader polls; default 0.02)",
    )
    p.add_argument(
        "--max-watch-streams",
        type=_count,
        default=None,
        metavar="N",
        help="watch streams one worker holds at once; one more is answered 503 with "
        "Retry-After (default 1024)",
    )
    p.add_argument(
        "--max-watch-per-client",
        type=_count,
        default=None,
        metavar="N",
        help="watch streams one client address holds in one worker; one more is answered 503 "
        "(default 64; behind a proxy, its address unless uvicorn trusts its X-Forwarded-For)",
    )
    p.add_argument(
        "--client-key-secret-file",
        type=Path,
        default=None,
        metavar="PATH",
        help="with --metrics: file holding the secret client keys are hashed under (default: "
        "$INVALIDATION_CONTRACTS_CLIENT_KEY_SECRET, else a random one shared by this serve's "
        "workers); give every server behind one load balancer the same, so a client's key agrees",
    )
    p.add_argument(
        "--client-scores",
        choices=("shared", "worker"),
        default="shared",
        help="with --metrics and --workers N: 'shared' (default) folds every client's requests "
        "through the registry's database, so any worker scores any client (a write transaction "
        "per policy check); 'worker' keeps each worker's own, cheaper, right only when a "
        "client's requests stay on one worker",
    )
    p.add_argument(
        "--metrics",
        action="store_true",
        help="instrument the contract (the otel extra) and serve GET /contract/metrics "
        "(Prometheus format, admin or metrics token; docs/operators.md)",
    )
    p.add_argument(
        "--otlp",
        default=None,
        metavar="URL",
        help="instrument the contract and push its metrics and spans over OTLP/HTTP to URL "
        "(e.g. http://collector:4318; URL/v1/metrics and URL/v1/traces; the otlp extra)",
    )
    _add_log_format(p)
    _add_trust_options(p, "; repeat to rotate (the key id is the file's stem; the last one signs)")
    add_config_option(p)
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


def _ed25519() -> ModuleType:
    from ..protocol.signing import ed25519

    return ed25519()


def _keygen(args: argparse.Namespace) -> int:
    from ..protocol.signing import public_key_text

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

    from .._extras import require_extra
    from ..server.auth import ADMIN_TOKEN_ENV, METRICS_TOKEN_ENV
    from ..server.store import StorageError
    from .launch import FACTORY, SPEC_ENV, AppSpec

    _use_log_format(args)
    if args.otlp is not None:
        _otlp_url(args.otlp)
    if args.workers > 1 and args.ephemeral:
        raise UsageError("--workers cannot be --ephemeral: workers share one registry store")
    if (args.declare or args.create_tables) and args.database is None:
        raise UsageError("--declare and --create-tables need --database")
    if args.capture != "triggers" and args.database is None:
        raise UsageError("--capture needs --database")
    _known_domain(args.domain)  # an unknown domain is the error to show, before any warning
    require_extra("server", "fastapi", "uvicorn")  # a missing extra is the one line, before any
    store, notice = _history(args)
    token = _admin_token(args)
    if token:
        # Each worker reads the token from its environment, never from its argv.
        os.environ[ADMIN_TOKEN_ENV] = token
    else:
        os.environ.pop(ADMIN_TOKEN_ENV, None)
    reader = _metrics_token(args)
    if reader and reader == token:
        raise UsageError("the metrics token must differ from the admin token")
    if reader:
        os.environ[METRICS_TOKEN_ENV] = reader
    else:
        os.environ.pop(METRICS_TOKEN_ENV, None)
    _client_key_secret(args)
    spec = AppSpec(
        domain=args.domain,
        level=args.level,
        store=store,
        database=args.database,
        capture=args.capture,
        declarations=str(args.declare) if args.declare is not None else None,
        admin_token_env=ADMIN_TOKEN_ENV,
        metrics_token_env=METRICS_TOKEN_ENV,
        protect_graph=args.protect_graph,
        metrics=args.metrics,
        otlp=args.otlp,
        log_format=args.log_format,
        shared_scores=args.client_scores == "shared",
        signing_keys=tuple(str(path) for path in args.signing_key),
        opaque_key_env=args.opaque_key_env,
        max_lag_s=args.max_lag,
        poll_interval_s=args.poll_interval,
        stall_timeout_s=args.stall_timeout,
        reconcile_interval_s=args.reconcile_interval,
        allowed_hosts=("localhost", "127.0.0.1", "::1", *args.allowed_host),
        max_watch_streams=args.max_watch_streams,
        max_watch_per_client=args.max_watch_per_client,
    )
    _trust_options(args)  # a bad key file or secret is refused before anything opens
    try:
        with _loading(args.domain):
            if args.create_tables:
                _create_tables(spec)
            app = spec.build()
    except (StorageError, ValueError, RuntimeError) as exc:
        raise CommandError(str(exc)) from exc
    except Exception as exc:  # a database URL SQLAlchemy cannot use (reliability audit 2, N17)
        if type(exc).__module__.split(".")[0] != "sqlalchemy":
            raise
        raise CommandError(f"cannot use the database {args.database!r}: {exc}") from None
    # Said once the app is built, so a failure to build is the one line shown; the history first.
    say(notice)
    if not token:
        say(
            f"invalidation-contracts: warning: ${ADMIN_TOKEN_ENV} is not set; "
            "admin routes answer 401",
            level=logging.WARNING,
        )
    try:
        if args.workers == 1:
            _listen(app, args)
        else:
            app.state.service.close()  # each worker opens its own; this one only checked it
            os.environ[SPEC_ENV] = spec.to_env()
            with _shared_metrics(args.metrics):
                _listen(FACTORY, args, workers=args.workers, factory=True)
    except (OSError, OverflowError) as exc:
        raise _cannot_listen(args, exc) from None
    return 0


def _otlp_url(url: str) -> None:
    """Refuse a ``--otlp`` value that is no OTLP/HTTP base URL (exit 2), or the missing extra."""
    from .._extras import require_extra

    require_extra("otlp", "opentelemetry.exporter.otlp.proto.http", "opentelemetry.sdk")
    from ..observe.otlp import check_otlp_url

    try:
        check_otlp_url(url)
    except ValueError as exc:
        raise UsageError(f"--otlp: {exc}") from None


def _client_key_secret(args: argparse.Namespace) -> None:
    """Put the client-key secret where every worker reads it: ``--client-key-secret-file``,
    else the environment's, else a random one for this serve's workers (only ``--metrics``
    scores clients, so only it reads one: the ``otel`` extra)."""
    if not (args.metrics or args.otlp):
        return
    from ..observe.clients import CLIENT_KEY_SECRET_ENV
    from ..private_files import exposure

    path: Path | None = args.client_key_secret_file
    if path is not None:
        exposed = exposure(path)
        if exposed is not None:
            say(f"warning: the client key secret file {exposed}", level=logging.WARNING)
        try:
            secret = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise CommandError(f"cannot read the client key secret file {path}: {reason}") from None
        if not secret:
            raise UsageError(f"the client key secret file {path} is empty")
        os.environ[CLIENT_KEY_SECRET_ENV] = secret
    elif not os.environ.get(CLIENT_KEY_SECRET_ENV):
        import secrets

        os.environ[CLIENT_KEY_SECRET_ENV] = secrets.token_hex(32)


@contextlib.contextmanager
def _shared_metrics(metrics: bool) -> Iterator[None]:
    """With ``--metrics``, a private folder the workers publish their metrics in, so the one
    scrape target answers for all of them (``observe.workers``); removed at exit."""
    if not metrics:
        yield
        return
    import shutil
    import tempfile

    from ..observe.workers import METRICS_DIR_ENV

    folder = tempfile.mkdtemp(prefix="invalidation-contracts-metrics-")
    os.environ[METRICS_DIR_ENV] = folder
    try:
        yield
    finally:
        os.environ.pop(METRICS_DIR_ENV, None)
        shutil.rmtree(folder, ignore_errors=True)


def _known_domain(name: str) -> None:
    """Refuse an unknown domain name in one line (exit 2) before anything else is said."""
    from ..domains import get_domain

    with _loading(name):
        get_domain(name)


@contextlib.contextmanager
def _loading(name: str) -> Iterator[None]:
    """The domain ``name``'s lookup and loading failures as one-line errors: an unknown name is
    a usage error (exit 2), a domain that cannot be imported a runtime one; a missing extra says
    which."""
    try:
        yield
    except MissingExtra:
        raise
    except KeyError as exc:  # DomainError, the domain lookup's one error, is a KeyError
        raise UsageError(exc.args[0] if exc.args else f"unknown domain {name!r}") from exc
    except ImportError as exc:
        raise CommandError(f"cannot load the domain: {exc}") from exc


def _listen(
    app: ASGIApp | str, args: argparse.Namespace, *, workers: int = 1, factory: bool = False
) -> None:
    from ..json_logs import log_config
    from ..server.http.serve import serve

    def listening(url: str) -> None:
        plural = "s" if workers > 1 else ""
        say(f"invalidation-contracts: serving {url} ({workers} worker{plural})")

    serve(
        app,
        host=args.host,
        port=args.port,
        workers=workers,
        factory=factory,
        listening=listening,
        header_timeout_s=args.header_timeout,
        body_timeout_s=args.body_timeout,
        body_deadline_s=args.body_deadline,
        max_connections=args.max_connections,
        log_config=log_config() if args.log_format == "json" else None,
    )


def _create_tables(spec: AppSpec) -> None:
    from ..domains import get_domain
    from ..server.sql import create_tables

    assert spec.database is not None
    created = create_tables(spec.database, get_domain(spec.domain))
    if created:
        say(f"created and filled SQL tables: {', '.join(created)}")


def _admin_client(args: argparse.Namespace) -> AdminClient:
    from .admin_client import AdminClient

    return AdminClient(args.url, _admin_token(args))


def _reload(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from ..server.datafiles import DataFileError, read_snapshot
    from .admin_client import AdminClientError

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
    from .admin_client import AdminClientError

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
