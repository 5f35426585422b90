"""Argument types and options more than one command group shares (ports, tokens, history)."""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..private_files import exposure
from .command import CommandError, UsageError
from .say import say

if TYPE_CHECKING:
    from rich.console import Console

    from ..server.trust import TrustOptions


DOMAIN_HELP = (
    "a shipped domain (acme_billing, acme_rules, recipes), an installed entry point of the group "
    "invalidation_contracts.domains, or an import path package.module:attribute"
)

#: The most worker processes ``serve --workers`` starts (each is a whole interpreter).

MAX_WORKERS = 256


def _workers(text: str) -> int:
    value = _positive_int(text)
    if value > MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_WORKERS}, got {value}")
    return value


def _positive_int(text: str) -> int:
    value = _whole(text, "a whole number")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _port(text: str) -> int:
    value = _whole(text, "a port number")
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number 0-65535, got {value}")
    return value


def _whole(text: str, what: str) -> int:
    """``text`` as an integer; else an argument error saying it must be ``what``."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, not {text!r}") from None


def _header_seconds(text: str) -> float:
    from ..sockets import header_timeout

    try:
        return header_timeout(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a positive number of seconds, not {text!r}"
        ) from None


def _count(text: str) -> int:
    """``text`` as a whole number of at least 1 (a cap)."""
    value = _whole(text, "a whole number")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _add_header_timeout(p: argparse.ArgumentParser, what: str = "") -> None:
    """``--header-timeout``, ``--body-timeout`` and ``--max-connections``: the listener's read
    timeouts and connection cap."""
    from ..sockets import (
        DEFAULT_BODY_DEADLINE_S,
        DEFAULT_BODY_MIN_RATE,
        DEFAULT_BODY_TIMEOUT_S,
        DEFAULT_HEADER_TIMEOUT_S,
        DEFAULT_MAX_CONNECTIONS,
    )

    p.add_argument(
        "--header-timeout",
        type=_header_seconds,
        default=DEFAULT_HEADER_TIMEOUT_S,
        metavar="SECONDS",
        help=f"{what}close a connection that has not sent a request's line and headers this "
        f"long after it opened (or after the request's first byte); 408 if it had begun one "
        f"(default {DEFAULT_HEADER_TIMEOUT_S:g}, against slowloris)",
    )
    p.add_argument(
        "--body-timeout",
        type=_header_seconds,
        default=DEFAULT_BODY_TIMEOUT_S,
        metavar="SECONDS",
        help=f"{what}close a connection whose request body sends nothing this long while it is "
        f"read; 408 if no response has begun (default {DEFAULT_BODY_TIMEOUT_S:g})",
    )
    p.add_argument(
        "--body-deadline",
        type=_header_seconds,
        default=DEFAULT_BODY_DEADLINE_S,
        metavar="SECONDS",
        help=f"{what}close a connection whose request body is still arriving this long, plus one "
        f"second per {DEFAULT_BODY_MIN_RATE:g} bytes it sent, after it began: a body trickled "
        f"a byte at a time ends; 408 if no response has begun (default "
        f"{DEFAULT_BODY_DEADLINE_S:g})",
    )
    p.add_argument(
        "--max-connections",
        type=_count,
        default=DEFAULT_MAX_CONNECTIONS,
        metavar="N",
        help=f"{what}connections one worker holds at once; one more is answered 503 with "
        f"Retry-After and closed (default {DEFAULT_MAX_CONNECTIONS})",
    )


def _cannot_listen(args: argparse.Namespace, exc: OSError | OverflowError) -> CommandError:
    """The error of a server that could not bind ``--host``/``--port`` (taken, refused, out of
    range): the system's reason in one line."""
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
    return CommandError(f"cannot listen on {args.host}:{args.port}: {reason}")


def _add_admin_token(p: argparse.ArgumentParser, what: str) -> None:
    from ..server.auth import ADMIN_TOKEN_ENV

    p.add_argument(
        "--admin-token-file",
        type=Path,
        default=None,
        metavar="PATH",
        help=f"file holding {what} (default: ${ADMIN_TOKEN_ENV})",
    )


def _admin_token(args: argparse.Namespace) -> str | None:
    """The admin token from ``--admin-token-file`` or the environment; None when neither."""
    from ..server.auth import ADMIN_TOKEN_ENV

    return _bearer_token(args.admin_token_file, ADMIN_TOKEN_ENV, "admin token")


def _add_log_format(p: argparse.ArgumentParser) -> None:
    """``--log-format`` (serve, serve-mcp): what the server's stderr lines are."""
    from ..json_logs import LOG_FORMATS

    p.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="text",
        help="text (default), or json: one JSON object a line on stderr (time, level, logger, "
        "message; trace_id and span_id of a request that carries a W3C traceparent)",
    )


def _use_log_format(args: argparse.Namespace) -> None:
    """Switch this process's stderr lines to JSON for ``--log-format json`` (call it before
    anything is said)."""
    if args.log_format == "json":
        from .say import use_json_lines

        use_json_lines()


def _add_metrics_token(p: argparse.ArgumentParser) -> None:
    from ..server.auth import METRICS_TOKEN_ENV

    p.add_argument(
        "--metrics-token-file",
        type=Path,
        default=None,
        metavar="PATH",
        help="file holding a read-only token for the metrics scrape and the operator page, "
        f"refused by every other admin route (default: ${METRICS_TOKEN_ENV})",
    )


def _metrics_token(args: argparse.Namespace) -> str | None:
    """The read-only metrics token from ``--metrics-token-file`` or the environment."""
    from ..server.auth import METRICS_TOKEN_ENV

    return _bearer_token(args.metrics_token_file, METRICS_TOKEN_ENV, "metrics token")


def _bearer_token(path: Path | None, variable: str, what: str) -> str | None:
    """A bearer token from the file ``path``, else the environment ``variable``; None when
    neither holds one; a usage error for an empty file or characters a header cannot carry."""
    if path is not None:
        exposed = exposure(path)
        if exposed is not None:
            say(f"warning: the {what} file {exposed}", level=logging.WARNING)
        try:
            token = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise CommandError(f"cannot read the {what} file {path}: {reason}") from None
        source = str(path)
        if not token:
            raise UsageError(f"the {what} file {path} is empty")
    else:
        token = os.environ.get(variable, "").strip()
        source = f"${variable}"
    if not token:
        return None
    if not all("!" <= ch <= "~" for ch in token):
        raise UsageError(
            f"the {what} in {source} holds characters an HTTP header cannot carry "
            "(use visible ASCII)"
        )
    return token


def _console() -> Console:
    """A rich console for tables; ``MissingExtra`` naming ``cli`` without rich."""
    from .._extras import require_extra

    require_extra("cli", "rich")
    from rich.console import Console

    return Console()


def _level(text: str) -> int:
    from ..protocol.levels import Level

    try:
        return int(Level.parse(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _add_trust_options(p: argparse.ArgumentParser, key_note: str) -> None:
    """``--signing-key`` and ``--opaque-key-env``: what ``_trust_options`` reads."""
    p.add_argument(
        "--signing-key",
        type=Path,
        action="append",
        default=[],
        metavar="PEM",
        help=f"Ed25519 private key (PEM) to sign freshness statements with{key_note}",
    )
    p.add_argument(
        "--opaque-key-env",
        default=None,
        metavar="VAR",
        help="environment variable holding a secret (>= 16 bytes): send names and keys as tags",
    )


def _trust_options(args: argparse.Namespace) -> TrustOptions | None:
    """The server's trust options from ``--signing-key`` and ``--opaque-key-env``."""
    from ..server.trust import TrustOptions

    try:
        return TrustOptions.from_files(
            tuple(str(path) for path in args.signing_key), args.opaque_key_env
        )
    except ValueError as exc:
        raise CommandError(str(exc)) from exc


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
    """The registry store to serve from (None: in memory), and the line that says so, the first
    a serving command writes on stderr (a new history is said before the file exists); the
    default location says how to choose another."""
    from ..server.store.location import default_registry, history_notice

    if args.ephemeral:
        target = None
    elif args.db is not None:
        target = str(args.db)
    else:
        if domain is None:
            from ..domains import get_domain

            domain = get_domain(args.domain).name
        target = str(default_registry(domain))
        return target, (
            f"invalidation-contracts: {history_notice(target)} (the default; --db PATH|URL "
            "for another store, --ephemeral for none)"
        )
    return target, f"invalidation-contracts: {history_notice(target)}"
