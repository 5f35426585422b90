"""``invalidation-contracts mcp-proxy``: a fix memory in front of any MCP server, for any host."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .command import CommandError, UsageError
from .options import _cannot_listen, _port

if TYPE_CHECKING:
    from .command import Subparsers

EPILOG = (
    "example: invalidation-contracts mcp-proxy -- invalidation-contracts serve-mcp --domain "
    "acme_billing   (the upstream's command line after --; docs/hosts.md has each host's "
    "configuration)"
)


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "mcp-proxy",
        help="serve an MCP host through a fix memory in front of an upstream MCP server",
        epilog=EPILOG,
    )
    p.add_argument(
        "--upstream-url",
        default=None,
        metavar="URL",
        help="the upstream's streamable HTTP endpoint (instead of a command after --)",
    )
    p.add_argument(
        "--memory",
        type=Path,
        default=None,
        metavar="PATH",
        help="the fix-memory SQLite file (default: one per upstream under "
        "$XDG_STATE_HOME/invalidation-contracts/proxy/)",
    )
    p.add_argument("--strategy", default="row", help="invalidation strategy (default: row)")
    p.add_argument(
        "--transport",
        choices=("stdio", "http"),
        default="stdio",
        help="how the host reaches the proxy: stdio (default), or streamable HTTP on --host",
    )
    p.add_argument("--host", default="127.0.0.1", help="with http: loopback address to bind")
    p.add_argument("--port", type=_port, default=0, help="with http: port (default 0: any)")
    p.add_argument(
        "--call-timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="seconds the upstream has to answer a request (default 120; then it is restarted)",
    )
    p.add_argument(
        "--max-result-bytes",
        type=int,
        default=8 * 1024 * 1024,
        metavar="BYTES",
        help="the largest tool result passed on (default 8 MiB)",
    )
    p.add_argument(
        "--verbose", action="store_true", help="log every upstream message not passed on"
    )
    p.add_argument(
        "upstream_command",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND ...",
        help="the upstream's command line (spawned over stdio)",
    )
    p.set_defaults(handler=_mcp_proxy)


def _mcp_proxy(args: argparse.Namespace) -> int:
    from ..mcp.http import is_loopback
    from ..mcp.proxy import LinkOptions, MemoryUnavailable, UpstreamTarget, open_memory, serve_proxy

    command = list(args.upstream_command)
    if command[:1] == ["--"]:
        command = command[1:]
    try:
        target = UpstreamTarget.of(command, args.upstream_url)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    if args.transport == "http" and not is_loopback(args.host):
        raise UsageError("the proxy serves loopback only: --host 127.0.0.1, ::1 or localhost")
    if not args.call_timeout > 0 or args.max_result_bytes <= 0:
        raise UsageError("--call-timeout and --max-result-bytes must be positive")
    path = args.memory
    if path is None:
        path = target.default_memory()
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        memory = open_memory(path, args.strategy, target.origin)
    except MemoryUnavailable as exc:
        raise CommandError(str(exc)) from exc
    except (ValueError, KeyError) as exc:
        raise UsageError(str(exc)) from exc
    _log(args.verbose)
    logging.getLogger("invalidation_contracts.proxy").info(
        "fronting %s with the memory %s", target.name, path
    )
    options = LinkOptions(call_timeout_s=args.call_timeout, max_result_bytes=args.max_result_bytes)
    try:
        serve_proxy(
            target,
            memory,
            transport=args.transport,
            host=args.host,
            port=args.port,
            options=options,
        )
    except (OSError, OverflowError) as exc:
        raise _cannot_listen(args, exc) from None
    finally:
        memory.close()
    return 0


def _log(verbose: bool) -> None:
    """The proxy's log on stderr (stdout is the host's channel over stdio)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("invalidation-contracts mcp-proxy: %(message)s"))
    log = logging.getLogger("invalidation_contracts.proxy")
    log.addHandler(handler)
    log.setLevel(logging.DEBUG if verbose else logging.INFO)
    log.propagate = False
