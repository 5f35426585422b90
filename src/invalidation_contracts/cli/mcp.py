"""``invalidation-contracts serve-mcp``: a domain's contract as an MCP server."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from .._extras import MissingExtra
from .command import CommandError, UsageError
from .config_file import add_config_option
from .options import (
    DOMAIN_HELP,
    _add_admin_token,
    _add_header_timeout,
    _add_history,
    _add_log_format,
    _add_trust_options,
    _admin_token,
    _cannot_listen,
    _history,
    _level,
    _port,
    _trust_options,
    _use_log_format,
)
from .say import PREFIX, say

if TYPE_CHECKING:
    from .command import Subparsers


def register(sub: Subparsers) -> None:
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
        help="with http: another Host header to accept (name: on any port, as serve; "
        "name:port; name:*); needed when bound to 0.0.0.0 or ::",
    )
    p.add_argument(
        "--allowed-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="with http: another Origin to accept (https://app.example)",
    )
    _add_admin_token(p, "the bearer token MCP clients must send (required off loopback)")
    _add_header_timeout(p, "with http: ")
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
    _add_log_format(p)
    _add_trust_options(p, " (as for serve)")
    add_config_option(p)
    p.set_defaults(handler=_serve_mcp)


def _serve_mcp(args: argparse.Namespace) -> int:
    from ..domains import get_domain
    from ..mcp.http import HttpOptions, is_loopback
    from ..mcp.serve import open_backend, parse_tool_names, serve_mcp

    _use_log_format(args)
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
        header_timeout_s=args.header_timeout,
        body_timeout_s=args.body_timeout,
        body_deadline_s=args.body_deadline,
        max_connections=args.max_connections,
    )
    store, notice = _history(args, domain.name)
    say(notice)
    try:
        backend, close = open_backend(domain, level=args.level, store=store, trust=trust)
    except MissingExtra:
        raise
    except (ValueError, RuntimeError, OSError) as exc:
        raise CommandError(str(exc)) from exc
    try:
        serve_mcp(
            backend,
            transport=args.transport,
            host=args.host,
            port=args.port,
            name=args.name,
            tool_names=tool_names,
            envelope=args.envelope,
            http=http,
            protect_graph=args.protect_graph,
            announce=lambda line: say(PREFIX + line),
            json_logs=args.log_format == "json",
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    except (OSError, OverflowError) as exc:
        raise _cannot_listen(args, exc) from None
    finally:
        close()
    return 0
