"""An MCP tool server from a provider: its routes as tools, its contract routes as resources.

Built on the SDK's low-level ``Server`` over the sans-IO ``Provider`` (or a ``ContractWorker``,
which adds catching up with other workers and signing)::

    server = contract_server(Provider(acme_billing.domain()))
    await run_stdio(server)                          # or: server.streamable_http_app()

Every tool result carries the contract (``tools``; in its ``_meta`` by default, so hosts show
the model only the model view); the contract routes are resources
(``resources``); a subscribed client is told ``resources/updated`` when a table or the rules
move (``notify``). SEP-2549 caching hints: the listings of tools, resources and templates do not
change while the server runs (``list_ttl_ms``); a resource read is stale the moment a table
moves, so it is never fresh (``ttlMs: 0``). Tool calls carry no hint (SEP-2549 does not cover
them): their freshness is the contract's.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import anyio
import mcp_types as types
from mcp.server.caching import CacheHint
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, SubscriptionBus
from mcp.shared.exceptions import MCPError

from .. import __version__
from ..protocol.models import Problem, SuccessResponse
from ..protocol.problems import ProblemType, ProtocolError
from ..protocol.signing import Binding
from ..server.asked import Asked
from ..server.provider import Provider
from ..server.reads import ContractRead
from ..server.state import RegistryState
from . import conditional, names
from .backend import ContractBackend, as_backend
from .notify import ChangeNotifier
from .resources import ContractResources
from .tools import ToolRoute, ToolTable, tool_result

#: How long clients may keep the tool, resource and template listings (they do not change).
DEFAULT_LIST_TTL_MS = 300_000

ServerContext = ServerRequestContext[Any, Any]


class _AdvertisingServer(Server[Any]):
    """The SDK's low-level ``Server``, advertising the extension on every protocol revision.

    2026-07-28 has ``capabilities.extensions`` (SEP-2133), which ``server/discover`` carries from
    ``Server.extensions``. Earlier revisions' schemas have no ``extensions``: the SDK sieves it out
    of their ``initialize`` result, so it is advertised there under ``capabilities.experimental``
    (the non-standard capabilities those revisions define), with the same settings."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        experimental = {**self.extensions, **(experimental_capabilities or {})}
        return super().create_initialization_options(
            notification_options, experimental or None, extensions
        )


class ContractHandlers:
    """The request handlers of one contract server (the SDK's ``on_*`` callables)."""

    def __init__(
        self,
        backend: ContractBackend,
        tools: ToolTable,
        resources: ContractResources,
        notifier: ChangeNotifier,
        envelope: str = names.META_ENVELOPE,
    ) -> None:
        self.backend = backend
        self.envelope = envelope
        self.tools = tools
        self.resources = resources
        self.notifier = notifier

    async def list_tools(
        self, ctx: ServerContext, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(self.tools.tools))

    async def call_tool(
        self, ctx: ServerContext, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        entry = self.tools.get(params.name)
        if entry is None:
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {params.name}")
        arguments: dict[str, Any] = params.arguments if params.arguments is not None else {}
        held = conditional.presented(ctx.meta)
        if held is not None and held == self._validator(entry, arguments, None):
            return conditional.not_modified_result(held, self.envelope)
        answer = functools.partial(self._answer, entry, arguments, ctx.meta)
        body, since, state = await anyio.to_thread.run_sync(answer)
        signature = None
        if names.wants_signature(ctx.meta) and self.backend.signer is not None:
            binding = Binding(req=f"tools/call {params.name}")
            signature = self.backend.signer.sign(body.to_wire(), since, binding)
        result = tool_result(body, since=since, signature=signature, envelope=self.envelope)
        if isinstance(body, Problem) and body.status in conditional.CONDITIONAL_STATUSES:
            validator = self._validator(entry, arguments, state)
            if validator is not None:
                result.meta = {**(result.meta or {}), self._key(names.VALIDATOR): validator}
        return result

    def _key(self, key: str) -> str:
        return names.key_for(key, self.envelope)

    def _validator(
        self, entry: ToolRoute, arguments: Mapping[str, Any], state: RegistryState | None
    ) -> str | None:
        """The validator of this call answered from ``state`` (default: the current one); None
        while the worker cannot vouch for its state."""
        if not self.backend.available:
            return None
        provider = self.backend.provider
        stamps = provider.contract(state if state is not None else provider.registry.state)
        return conditional.call_validator(
            entry.name,
            arguments,
            epoch=stamps.contract_epoch,
            rules_version=stamps.rules_version,
            table_versions=stamps.table_versions,
        )

    def _answer(
        self, entry: ToolRoute, arguments: dict[str, Any], meta: Mapping[str, Any] | None
    ) -> tuple[Problem | SuccessResponse, int | None, RegistryState | None]:
        """The route's answer, and the state it came from (in a worker thread: a success
        handler may do I/O)."""
        position = names.MetaPosition()
        try:
            position = names.position_of(meta)
            asked = Asked(position.since, position.epoch)
            outcome = self.backend.handle(entry.route, arguments, asked)
            return outcome.body, position.since, outcome.state
        except ProtocolError as exc:
            return (*self._problem(exc, position), None)

    def _problem(
        self, exc: ProtocolError, position: names.MetaPosition
    ) -> tuple[Problem, int | None]:
        """A protocol error as its problem document, with the current contract when the worker
        can vouch for it (as the HTTP binding answers errors)."""
        body = exc.to_problem()
        if exc.kind is ProblemType.REGISTRY_UNAVAILABLE or not self.backend.available:
            return body, None
        provider = self.backend.provider
        fields = provider.contract(provider.registry.state, position.since, position.epoch)
        return body.model_copy(update=fields.model_dump(exclude_none=True)), position.since

    async def list_resources(
        self, ctx: ServerContext, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=self.resources.resources())

    async def list_templates(
        self, ctx: ServerContext, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=self.resources.templates())

    async def read_resource(
        self, ctx: ServerContext, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        answer = self.resources.prepare(uri, ctx.meta)
        if isinstance(answer, ContractRead):  # no thread hop unless a catch-up may read a store
            if self.resources.blocks(answer):
                answer = await anyio.to_thread.run_sync(self.resources.answer, answer, uri)
            else:
                answer = self.resources.answer(answer, uri)
        if answer is None:
            raise MCPError(types.INVALID_PARAMS, f"Unknown resource: {uri}")
        meta: dict[str, Any] = {}
        if answer.since is not None:
            meta[names.key_for(names.SINCE, self.envelope)] = answer.since
        if names.wants_signature(ctx.meta) and self.backend.signer is not None:
            meta[names.key_for(names.SIGNATURE, self.envelope)] = self.backend.signer.sign(
                answer.body.to_wire(), answer.since
            )
        content = types.TextResourceContents(
            uri=uri,
            mime_type=answer.media_type,
            text=answer.body.to_json().decode(),
            _meta=meta or None,
        )
        return types.ReadResourceResult(contents=[content])

    async def subscribe(
        self, ctx: ServerContext, params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        self.notifier.subscribe(ctx.session, str(params.uri))
        return types.EmptyResult()

    async def unsubscribe(
        self, ctx: ServerContext, params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        self.notifier.unsubscribe(ctx.session, str(params.uri))
        return types.EmptyResult()


def contract_server(
    backend: Provider | ContractBackend,
    *,
    name: str | None = None,
    version: str = __version__,
    tool_names: Mapping[str, str] | None = None,
    instructions: str | None = None,
    bus: SubscriptionBus | None = None,
    list_ttl_ms: int = DEFAULT_LIST_TTL_MS,
    envelope: str = names.META_ENVELOPE,
    protect_graph: bool = False,
) -> Server[Any]:
    """The MCP server of ``backend``'s domain (the SDK's low-level ``Server``).

    ``name``: the server's identity (default: the domain's name), which clients key their fix
    memory by. ``tool_names``: rename tools, ``{"POST /v1/subscriptions": "create_subscription"}``
    (default: ``post_v1_subscriptions``). ``bus``: the ``subscriptions/listen`` fan-out (default:
    in process; pass a shared one to fan out across replicas). ``envelope``: ``"meta"`` carries
    the contract in each tool result's ``_meta`` and shows hosts only the model view; ``"inline"``
    is 0.1's wire form (the contract in the content), for 0.1 clients. ``protect_graph``: do not
    list or serve ``contract://graph`` (its moves are not announced either). Raises
    ``ValueError`` for a tool name MCP does not accept, two routes with one name, or an unknown
    envelope.
    """
    if envelope not in names.ENVELOPES:
        raise ValueError(f"envelope must be one of {names.ENVELOPES}, not {envelope!r}")
    contract = as_backend(backend)
    provider = contract.provider
    domain = provider.domain
    bus = bus if bus is not None else InMemorySubscriptionBus()
    graph = provider.level.graph and not protect_graph
    notifier = ChangeNotifier(provider.registry, bus, graph=graph)
    handlers = ContractHandlers(
        contract,
        ToolTable(domain, tool_names, envelope),
        ContractResources(contract, protect_graph=protect_graph),
        notifier,
        envelope,
    )
    listing = CacheHint(ttl_ms=list_ttl_ms, scope="public")
    server = _AdvertisingServer(
        name or domain.name,
        version=version,
        description=domain.description or None,
        instructions=instructions,
        cache_hints={
            "tools/list": listing,
            "resources/list": listing,
            "resources/templates/list": listing,
            "resources/read": CacheHint(ttl_ms=0, scope="public"),
        },
        lifespan=lambda _server: notifier.running(),
        on_list_tools=handlers.list_tools,
        on_call_tool=handlers.call_tool,
        on_list_resources=handlers.list_resources,
        on_list_resource_templates=handlers.list_templates,
        on_read_resource=handlers.read_resource,
        on_subscribe_resource=handlers.subscribe,
        on_unsubscribe_resource=handlers.unsubscribe,
        on_subscriptions_listen=ListenHandler(bus),
    )
    server.extensions[names.EXTENSION] = names.extension_settings(envelope)
    return server


async def run_stdio(server: Server[Any]) -> None:
    """Serve one client over this process's stdin and stdout until it closes them."""
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())
