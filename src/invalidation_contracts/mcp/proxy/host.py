"""The proxy's MCP server for the host: each request answered through the upstream.

Tool calls of a contract-speaking upstream go through the memory: the relevant valid fixes are
patched into the arguments (client apply mode), the call is made with them recorded as
injected, its result feeds the memory, and the host is shown the model view (``view``), with
the fixes it could not patch as the L2 instruction list when the call failed. The valid fixes
of a tool that client mode cannot patch in are also shown in its description when the host
lists the tools (at L2, as a model must read them before its first call). An upstream that
speaks no contract has its tool calls passed through unchanged. Listings, resources, prompts and
completions are passed through (the contract's own resources are kept from the host); a feature
the upstream lacks is answered by the upstream's own MCP error.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ... import __version__
from ...client.entries import MemoryEntry
from ..session import ContractSession
from .link import PROGRESS, UpstreamConnection, UpstreamLink
from .notify import HostNotifier, is_contract_uri
from .view import host_result, host_tool, without_contract

Ctx = ServerRequestContext[Any, Any]
Listen = Callable[
    [Ctx, types.SubscriptionsListenRequestParams], Awaitable[types.SubscriptionsListenResult]
]
#: What the proxy calls itself in ``serverInfo`` (hosts show their own name for it).
PROXY_NAME = "invalidation-contracts-proxy"
#: The prefix of the request envelope's own ``_meta`` keys (protocol version, client info): the
#: host's connection's, not the upstream's, which has its own.
_ENVELOPE = "io.modelcontextprotocol/"
#: The progress token's key in a request ``_meta``: as the SDK parses it, and as on the wire.
_PROGRESS_KEYS = ("progress_token", "progressToken")


class ProxyHandlers:
    """The host-facing request handlers (the SDK's ``on_*`` callables) over one upstream link."""

    def __init__(self, link: UpstreamLink, notifier: HostNotifier) -> None:
        self.link = link
        self.notifier = notifier

    def _seen(self, ctx: Ctx) -> None:
        """A request on a handshake-era connection: it is told of list changes directly (a
        2026-07-28 host hears them only on the ``subscriptions/listen`` streams it opens)."""
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            self.notifier.seen(ctx.session)

    # ------------------------------------------------------------------ tools

    async def list_tools(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        self._seen(ctx)
        async with self.link.using() as conn:
            if conn.contract is not None:
                contract = conn.contract
                tools = await contract.list_tools()
                return types.ListToolsResult(
                    tools=[host_tool(tool, await contract.tool_prompt(tool.name)) for tool in tools]
                )
            return await conn.session.list_tools(params=_page(params))

    async def call_tool(
        self, ctx: Ctx, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        self._seen(ctx)
        meta = _host_meta(ctx.meta)
        token = _progress_token(ctx.meta)
        if token is not None:
            related = str(ctx.request_id) if ctx.request_id is not None else None

            async def progress(progress: float, total: float | None, message: str | None) -> None:
                await ctx.session.send_progress_notification(
                    token, progress, total, message, related_request_id=related
                )

            PROGRESS.set(progress)
        async with self.link.using() as conn:
            if conn.contract is None:
                result = await conn.session.call_tool(
                    params.name, params.arguments, None, PROGRESS.get(), meta=_sdk_meta(meta)
                )
                if not isinstance(result, types.CallToolResult):
                    raise self.link.error(f"{params.name} answered no tool result")
                return result
            return await self._through_memory(conn.contract, params, meta)

    async def _through_memory(
        self, contract: ContractSession, params: types.CallToolRequestParams, meta: dict[str, Any]
    ) -> types.CallToolResult:
        tool, request = params.name, dict(params.arguments or {})
        fixes = list((await contract.lookup(tool, request)).entries)
        unpatched: list[MemoryEntry] = list(fixes)
        if fixes:
            try:
                outcome = await contract.apply_patches(tool, request, fixes)
            except ValueError:  # the upstream publishes no patchable fields: all are shown
                pass
            else:
                request = outcome.request
                applied = set(outcome.applied)
                unpatched = [fix for fix in fixes if fix.id not in applied]
        reply = await contract.call_tool(tool, request, injected=fixes, meta=meta)
        shown = await _still_valid(contract, unpatched) if reply.is_error else []
        return host_result(reply.result, reply.body, shown)

    # ------------------------------------------------------------------ resources

    async def list_resources(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        self._seen(ctx)
        async with self.link.using() as conn:
            listing = await conn.session.list_resources(params=_page(params))
        kept = [r for r in listing.resources if not is_contract_uri(str(r.uri))]
        return listing.model_copy(update={"resources": kept})

    async def list_templates(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        self._seen(ctx)
        async with self.link.using() as conn:
            listing = await conn.session.list_resource_templates(params=_page(params))
        kept = [t for t in listing.resource_templates if not is_contract_uri(t.uri_template)]
        return listing.model_copy(update={"resource_templates": kept})

    async def read_resource(
        self, ctx: Ctx, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        self._seen(ctx)
        uri = str(params.uri)
        if is_contract_uri(uri):
            raise MCPError(types.INVALID_PARAMS, f"{uri}: the proxy keeps the contract to itself")
        async with self.link.using() as conn:
            return await conn.session.read_resource(uri, meta=_sdk_meta(_host_meta(ctx.meta)))

    async def subscribe(self, ctx: Ctx, params: types.SubscribeRequestParams) -> types.EmptyResult:
        uri = str(params.uri)
        if is_contract_uri(uri):
            raise MCPError(types.INVALID_PARAMS, f"{uri}: the proxy keeps the contract to itself")
        async with self.link.using() as conn:
            await _subscribe(conn, uri)
        self.notifier.subscribe(ctx.session, uri)  # resources/subscribe: handshake era only
        return types.EmptyResult()

    async def unsubscribe(
        self, ctx: Ctx, params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        self.notifier.unsubscribe(ctx.session, str(params.uri))
        return types.EmptyResult()

    def listening(self, handler: ListenHandler) -> Listen:
        """``subscriptions/listen`` (2026-07-28): the URIs a stream asks for are subscribed
        upstream first, then the SDK's handler streams the bus."""

        async def listen(
            ctx: Ctx, params: types.SubscriptionsListenRequestParams
        ) -> types.SubscriptionsListenResult:
            for uri in params.notifications.resource_subscriptions or ():
                if not is_contract_uri(uri):
                    async with self.link.using() as conn:
                        await _subscribe(conn, uri)
                    self.notifier.listened.add(uri)
            return await handler(ctx, params)

        return listen

    async def resubscribe(self, conn: UpstreamConnection) -> None:
        """A new connection: the host's subscriptions, made upstream again."""
        for uri in sorted(self.notifier.subscribed()):
            await _subscribe(conn, uri)

    # ------------------------------------------------------------------ prompts, completions

    async def list_prompts(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        self._seen(ctx)
        async with self.link.using() as conn:
            return await conn.session.list_prompts(params=_page(params))

    async def get_prompt(
        self, ctx: Ctx, params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        async with self.link.using() as conn:
            return await conn.session.get_prompt(params.name, params.arguments)

    async def complete(self, ctx: Ctx, params: types.CompleteRequestParams) -> types.CompleteResult:
        async with self.link.using() as conn:
            context = params.context.arguments if params.context is not None else None
            argument = {params.argument.name: params.argument.value}
            return await conn.session.complete(params.ref, argument, context)


def _host_meta(meta: Mapping[str, Any] | None) -> dict[str, Any]:
    """The host's request ``_meta`` to send upstream: its own keys, never a contract key (the
    proxy's memory sends its position itself), nor the progress token (the proxy's client
    issues its own and relays the progress)."""
    if not meta:
        return {}
    kept = without_contract(
        {k: v for k, v in meta.items() if k not in _PROGRESS_KEYS and not k.startswith(_ENVELOPE)}
    )
    return kept or {}


def _progress_token(meta: Mapping[str, Any] | None) -> str | int | None:
    """The host's progress token for this request, if it asked for progress."""
    for key in _PROGRESS_KEYS:
        token = (meta or {}).get(key)
        if isinstance(token, str | int) and not isinstance(token, bool):
            return token
    return None


async def _subscribe(conn: UpstreamConnection, uri: str) -> None:
    """``resources/subscribe`` upstream (the proxy's upstream connection is handshake-era, where
    it is the way; the SDK warns of its removal at 2026-07-28)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        await conn.session.subscribe_resource(uri)


def _page(params: types.PaginatedRequestParams | None) -> types.PaginatedRequestParams | None:
    """The host's page cursor, without its request envelope (the upstream's is the proxy's)."""
    if params is None or params.cursor is None:
        return None
    return types.PaginatedRequestParams(cursor=params.cursor)


def _sdk_meta(meta: Mapping[str, Any]) -> types.RequestParamsMeta | None:
    return meta or None  # type: ignore[return-value]


async def _still_valid(contract: ContractSession, entries: list[MemoryEntry]) -> list[MemoryEntry]:
    """``entries`` the call's result left live (one it refuted is not shown)."""
    if not entries:
        return entries
    live = {entry.id for entry in await contract.memory.entries(contract.origin)}
    return [entry for entry in entries if entry.id in live]


def proxy_server(
    link: UpstreamLink, *, name: str = PROXY_NAME
) -> tuple[Server[Any], ProxyHandlers]:
    """The host-facing server over ``link``; its lifespan runs the link's supervisor."""
    bus = InMemorySubscriptionBus()
    notifier = HostNotifier(bus)
    handlers = ProxyHandlers(link, notifier)
    link.forward = notifier.forward
    link.on_open = handlers.resubscribe
    users = 0
    scope: list[anyio.abc.TaskGroup] = []

    @contextlib.asynccontextmanager
    async def running(_server: Server[Any]) -> AsyncIterator[None]:
        nonlocal users
        if users:  # nested entries (an HTTP session each) share one link
            users += 1
            try:
                yield
            finally:
                users -= 1
            return
        async with anyio.create_task_group() as tasks:
            scope.append(tasks)
            users = 1
            tasks.start_soon(link.run)
            try:
                yield
            finally:
                users = 0
                tasks.cancel_scope.cancel()

    server: Server[Any] = Server(
        name,
        version=__version__,
        description=f"a fix memory in front of the MCP server {link.target.name}",
        lifespan=running,
        on_list_tools=handlers.list_tools,
        on_call_tool=handlers.call_tool,
        on_list_resources=handlers.list_resources,
        on_list_resource_templates=handlers.list_templates,
        on_read_resource=handlers.read_resource,
        on_subscribe_resource=handlers.subscribe,
        on_unsubscribe_resource=handlers.unsubscribe,
        on_subscriptions_listen=handlers.listening(ListenHandler(bus)),
        on_list_prompts=handlers.list_prompts,
        on_get_prompt=handlers.get_prompt,
        on_completion=handlers.complete,
    )
    return server, handlers
