"""Starting ``invalidation-contracts mcp-proxy`` as a real subprocess, for a real MCP host.

The upstreams the tests front: ``serve-mcp`` of the Acme domain (a contract upstream, its history
in a registry file) and ``tests.support.plain_mcp`` (no contract; its tools fail on demand).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from mcp import StdioServerParameters

from invalidation_contracts.mcp.proxy import UpstreamTarget

OPERATION = "POST /v1/subscriptions"
TOOL = "create_subscription"
ROOT = Path(__file__).resolve().parents[2]


def serve_mcp(registry: Path, domain: str = "acme_billing") -> list[str]:
    """The command line of the Acme contract server (or ``domain``'s), its history in
    ``registry``."""
    return [
        *(sys.executable, "-m", "invalidation_contracts.cli", "serve-mcp"),
        *("--domain", domain, "--db", str(registry)),
        *("--tool-name", f"{OPERATION}={TOOL}"),
    ]


def plain_mcp() -> list[str]:
    """The command line of the tiny server that speaks no contract."""
    return [sys.executable, "-m", "tests.support.plain_mcp"]


def environment() -> dict[str, str]:
    """This process's environment, with this checkout first on the path (the proxy and its
    upstream import this tree, not another install)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")) if p
    )
    return env


def proxy(
    upstream: Sequence[str], memory: Path, *options: str, log: Path | None = None
) -> StdioServerParameters:
    """The proxy over stdio, fronting ``upstream`` with the memory file ``memory``; its stderr
    appended to ``log`` when given (through ``sh``, as a host that keeps a log file does)."""
    command = [
        *(sys.executable, "-m", "invalidation_contracts.cli", "mcp-proxy"),
        *("--memory", str(memory), *options, "--", *upstream),
    ]
    if log is not None:
        command = ["sh", "-c", 'exec "$0" "$@" 2>>"$LOG"', *command]
    env = environment() | ({"LOG": str(log)} if log is not None else {})
    return StdioServerParameters(command=command[0], args=command[1:], env=env)


def origin(upstream: Sequence[str]) -> str:
    """The origin the proxy files ``upstream``'s fixes under."""
    return UpstreamTarget(tuple(upstream)).origin
