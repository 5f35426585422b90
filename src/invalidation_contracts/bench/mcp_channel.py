"""The harness over MCP: a real MCP client and server, in two processes, on one registry.

The server is ``invalidation-contracts serve-mcp`` in a child process, over stdio or streamable
HTTP on 127.0.0.1, serving the scenario's domain from a registry store (SQLite) in a temporary
directory. The drift driver writes through an admin app in this process on the same store (a
second worker of the same history); after each event the channel reads
``contract://versions?since=<the event's seq>``, which makes the server catch up before the next
episode, so no run depends on the server's polling. The agent is a ``ContractSession`` feeding the
run's memory: the same memory, the same needs loop, the same events as over HTTP.

With ``notifications`` the session also follows ``resources/updated`` (eager detection without
polling), and the channel waits after each drift event until the memory has read the new versions:
the stale fix is evicted before the next episode looks it up. That changes the validity figures
(stale injections), so it is off unless asked for.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import Any

import anyio
import httpx

from .._extras import missing

try:
    from mcp.client.stdio import (
        StdioServerParameters,
        get_default_environment,
        stdio_client,
    )
except ModuleNotFoundError as exc:
    raise missing(exc, "mcp") from exc

from ..client.events import MemoryEvent, Need
from ..client.memory import FixMemory
from ..domains.catalog import DomainCatalog
from ..mcp import names
from ..mcp.session import ContractSession, ToolReply, connect
from ..protocol.levels import Level
from ..protocol.wirecost import wire_cost
from ..server import Route
from .channels import Listener, Outgoing, Reply, route_operation
from .errors import ServerUnavailable

#: Seconds a child server may take to start (imports, opening the store) and to settle a drift.
START_TIMEOUT_S = 60.0
SETTLE_TIMEOUT_S = 30.0
_URL_LINE = re.compile(r"serving MCP at (http://\S+)")


class McpChannel:
    """The domain's tools over a ``ContractSession``; ``tools`` maps each catalog route's
    operation (``POST /v1/x``) to the tool that serves it."""

    def __init__(
        self,
        contract: ContractSession,
        tools: Mapping[str, str],
        *,
        notifications: bool,
        background: list[MemoryEvent] | None = None,
    ) -> None:
        self.contract = contract
        self.tools = dict(tools)
        self.notifications = notifications
        self._background = background if background is not None else []

    def operation(self, route: Route[Any]) -> str:
        operation = route_operation(route)
        try:
            return self.tools[operation]
        except KeyError:
            raise ServerUnavailable(f"the MCP server offers no tool for {operation}") from None

    async def send(self, outgoing: Outgoing) -> Reply:
        reply = await self.contract.call_tool(
            self.operation(outgoing.route),
            outgoing.request,
            episode=outgoing.episode,
            injected=outgoing.injected,
            listener=outgoing.listener,
        )
        return tool_reply(reply)

    async def fulfil(
        self, needs: Iterable[Need], *, episode: int, listener: Listener
    ) -> tuple[Need, ...]:
        return await self.contract.fulfil(needs, episode=episode, listener=listener)

    async def drifted(self, result: Mapping[str, Any]) -> None:
        """Make the server catch up with the event's seq; with notifications, wait until the
        memory has read it too."""
        seq, epoch = result.get("contract_seq"), result.get("contract_epoch")
        if not isinstance(seq, int):
            return
        position = names.MetaPosition(seq, epoch if isinstance(epoch, str) else None)
        await self.contract.session.read_resource(names.VERSIONS + position.query())
        if self.notifications:
            await self.contract.caught_up(seq, timeout_s=SETTLE_TIMEOUT_S)

    def take_events(self) -> list[MemoryEvent]:
        """What the notifications' refreshes did since the last call."""
        events, self._background[:] = list(self._background), []
        return events


@contextlib.asynccontextmanager
async def mcp_agent(
    catalog: DomainCatalog,
    memory: FixMemory,
    *,
    level: Level,
    token: str,
    conditional: bool,
    wire: str,
    notifications: bool,
    domain: str | None = None,
) -> AsyncIterator[tuple[McpChannel, str, httpx.AsyncClient]]:
    """The channel, the origin its memory entries are keyed by, and the operator's client
    (``domain``: as ``mcp_provider``)."""
    provider = mcp_provider(catalog, level=level, token=token, wire=wire, domain=domain)
    async with provider as (target, admin):
        background: list[MemoryEvent] = []
        async with connect(
            target,
            memory,
            conditional=conditional,
            watch=notifications,
            watch_listener=background.append,
            sdk={"read_timeout_seconds": 30},
        ) as contract:
            channel = McpChannel(
                contract,
                tools_of(contract, catalog),
                notifications=notifications,
                background=background,
            )
            yield channel, contract.origin, admin


@contextlib.asynccontextmanager
async def mcp_provider(
    catalog: DomainCatalog, *, level: Level, token: str, wire: str, domain: str | None = None
) -> AsyncIterator[tuple[Any, httpx.AsyncClient]]:
    """``serve-mcp`` in a child process on a fresh registry store, and the operator's client (an
    admin app in this process on the same store): what ``connect`` is given (the stdio client,
    or the child's URL for ``wire="http"``) and that client.

    ``domain`` is the spec the child server loads the domain by (a shipped name, an entry point or
    an import path, as the scenario names it; the catalog's domain name when None): a domain kept
    outside the package must be importable in the child too."""
    from ..server.http.app import create_app

    served = catalog.domain
    with tempfile.TemporaryDirectory(prefix="ic-mcp-") as scratch:
        store = str(Path(scratch) / "registry.sqlite")
        app = create_app(served, level=level, store=store, admin_token=token)
        service = app.state.service
        try:
            admin = httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://admin.invalid", timeout=30
            )
            command = [
                sys.executable,
                "-m",
                "invalidation_contracts.cli",
                "serve-mcp",
                "--domain",
                domain or served.name,
                "--level",
                str(int(level)),
                "--db",
                store,
            ]
            async with admin, _server(command, wire, scratch) as target:
                yield target, admin
        finally:
            service.close()


def tool_reply(reply: ToolReply) -> Reply:
    """A tool's answer as a ``Reply``: its size is the wire cost's total (0 without a body)."""
    cost = reply.cost if reply.cost is not None else wire_cost(reply.body)
    return Reply(reply.status, reply.body, cost.total if reply.body else 0, cost)


def tools_of(contract: ContractSession, catalog: DomainCatalog) -> dict[str, str]:
    """The tool serving each of the catalog's routes, by the route's operation."""
    offered = {names.meta_value(t.meta, names.OPERATION): t.name for t in contract.tools.values()}
    tools = {}
    for route in catalog.routes.values():
        operation = route_operation(route)
        if operation not in offered:
            raise ServerUnavailable(f"the MCP server offers no tool for {operation}")
        tools[operation] = offered[operation]
    return tools


@contextlib.asynccontextmanager
async def _server(command: list[str], wire: str, scratch: str) -> AsyncIterator[Any]:
    """What ``connect`` is given: the stdio command, or the URL of a child serving HTTP."""
    if wire == "stdio":
        with (Path(scratch) / "server.log").open("w") as log:
            params = StdioServerParameters(command=command[0], args=command[1:], env=_child_env())
            yield stdio_client(params, errlog=log)
        return
    command = [*command, "--transport", "http", "--host", "127.0.0.1", "--port", "0"]
    log_path = Path(scratch) / "server.log"
    with log_path.open("w") as log:
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
    try:
        url = await _announced_url(child, log_path)
        yield url
    finally:
        child.terminate()
        try:
            await anyio.to_thread.run_sync(child.wait, 10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def _child_env() -> dict[str, str]:
    """The stdio child's environment: the SDK's safe default, plus ``PYTHONPATH`` so the child
    imports the same code and domains as the harness (a domain named by import path)."""
    env = get_default_environment()
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


async def _announced_url(child: subprocess.Popen[bytes], log: Path) -> str:
    """The URL the child prints once it listens (its stderr goes to ``log``)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        found = _URL_LINE.search(text)
        if found:
            return found.group(1)
        if child.poll() is not None:
            tail = " ".join(text.split()[-40:])
            raise ServerUnavailable(f"the MCP server exited ({child.returncode}): {tail}")
        await anyio.sleep(0.05)
    raise ServerUnavailable(f"the MCP server did not start within {START_TIMEOUT_S:.0f} s")
