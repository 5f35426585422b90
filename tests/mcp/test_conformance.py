"""Conformance to docs/mcp-extension.md, written from the page alone: its string literals, not
the library's names. The reference server (``contract_server``) is read by a bare SDK client as
the page says; the reference client (``ContractSession``) talks to a server built from the page
(``PageServer``). Both are real SDK servers and clients, in process."""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp.server.lowlevel import Server
from tests.mcp.conftest import TOOL, run

from invalidation_contracts.client import FixMemory
from invalidation_contracts.client.events import Ignored
from invalidation_contracts.mcp import ContractSession
from invalidation_contracts.mcp.origins import BY_SERVER_NAME
from invalidation_contracts.server import Provider

pytestmark = pytest.mark.mcp

EXTENSION = "io.github.invalidation-contracts/contract"
IC = "io.github.invalidation-contracts/"
LEGACY = "invalidation-contracts/"
STAMPS = ("table_versions", "rules_version", "contract_seq", "contract_epoch")


# ---------------------------------------------------------------- the server, read per the page


def _session_of(server: Any, body: Any) -> Any:
    async def go() -> Any:
        async with Client(server) as client:
            return await body(client)

    return run(go)


def test_s1_the_server_advertises_the_extension_with_its_version_and_envelope(server):
    caps = _session_of(server, _capabilities)

    assert caps[EXTENSION]["version"] == 1 and caps[EXTENSION]["envelope"] in ("meta", "inline")


async def _capabilities(client: Client) -> dict[str, Any]:
    capabilities = client.session.server_capabilities
    assert capabilities is not None and capabilities.extensions is not None
    return capabilities.extensions


def test_s2_each_tool_names_its_operation_and_patchable_fields(server):
    async def tools(client: Client) -> list[types.Tool]:
        return (await client.list_tools()).tools

    (tool,) = _session_of(server, tools)

    assert tool.meta is not None
    assert tool.meta[IC + "operation"] == "POST /v1/subscriptions"
    assert all(isinstance(f, str) for f in tool.meta[IC + "patchable"])


@pytest.mark.parametrize("family", ["governed-partner-growth", "plain-starter-monthly"])
def test_s3_a_result_carries_the_answer_in_meta_and_the_model_view_in_its_text(
    server, acme, family
):
    async def call(client: Client) -> types.CallToolResult:
        return await client.call_tool(TOOL, acme.family(family).draft())

    result = _session_of(server, call)

    answer = (result.meta or {})[IC + "contract"]
    assert isinstance(answer, dict) and set(STAMPS) <= set(answer)
    assert bool(result.is_error) == (answer.get("status", 200) >= 400)
    (text,) = result.content
    assert isinstance(text, types.TextContent)
    view = json.loads(text.text)
    assert not set(STAMPS) & set(view)
    for suggestion in view.get("recovery_feedback", {}).get("suggestions", []):
        assert set(suggestion) <= {"type", "action", "message", "parameters"}


def test_s3a_a_success_carries_its_model_view_as_structured_content_too(server, acme):
    async def call(client: Client) -> types.CallToolResult:
        return await client.call_tool(TOOL, acme.family("plain-starter-monthly").draft())

    result = _session_of(server, call)

    (text,) = result.content
    assert not result.is_error
    assert isinstance(text, types.TextContent)
    assert json.loads(text.text) == result.structured_content


def test_s3b_an_error_result_carries_no_structured_content_for_the_success_schema(server, acme):
    async def call(client: Client) -> types.CallToolResult:
        return await client.call_tool(TOOL, acme.family("governed-partner-growth").draft())

    result = _session_of(server, call)

    assert result.is_error and result.structured_content is None
    assert json.loads(result.content[0].text)["recovery_feedback"]["suggestions"]  # type: ignore[union-attr]


@pytest.mark.parametrize("prefix", [IC, LEGACY])
def test_s4_a_position_is_accepted_under_either_prefix(server, acme, prefix):
    async def call(client: Client) -> types.CallToolResult:
        draft = acme.family("plain-starter-monthly").draft()
        return await client.call_tool(TOOL, draft, meta={prefix + "since": 0})  # type: ignore[arg-type]

    answer = (_session_of(server, call).meta or {})[IC + "contract"]

    assert "table_versions" not in answer  # nothing moved since 0: a delta, empty


def test_s5_a_malformed_position_is_the_invalid_request_problem_as_an_error_result(server, acme):
    async def call(client: Client) -> types.CallToolResult:
        draft = acme.family("plain-starter-monthly").draft()
        return await client.call_tool(TOOL, draft, meta={IC + "since": "soon"})  # type: ignore[arg-type]

    result = _session_of(server, call)

    assert result.is_error
    assert (result.meta or {})[IC + "contract"]["type"].endswith("invalid-request")


def test_s6_the_resources_are_those_the_page_lists(server):
    async def listing(client: Client) -> tuple[list[str], list[str], types.ReadResourceResult]:
        resources = [str(r.uri) for r in (await client.list_resources()).resources]
        templates = [
            t.uri_template for t in (await client.list_resource_templates()).resource_templates
        ]
        feed = await client.read_resource("contract://changes")  # no since: a problem
        return resources, templates, feed

    resources, templates, feed = _session_of(server, listing)

    assert {"contract://versions", "contract://rules"} <= set(resources)
    assert "contract://versions{?since,epoch}" in templates
    assert "contract://changes{?since,epoch,tables}" in templates
    (content,) = feed.contents
    assert content.mime_type == "application/problem+json"
    problem = json.loads(content.text)  # type: ignore[union-attr]
    assert 400 <= problem["status"] <= 599 and problem["type"].endswith("invalid-request")


# ---------------------------------------------------------------- the client, against the page


class PageServer:
    """A contract server written from docs/mcp-extension.md alone, answering from a real Acme
    provider; it records the ``_meta`` of every call and every resource read."""

    def __init__(self, acme: Any, *, advertise: bool = True, contract: Any = None) -> None:
        self.provider = Provider(acme.domain)
        self.route = acme.route
        self.contract = contract
        self.calls: list[dict[str, Any]] = []
        self.reads: list[str] = []
        tool = types.Tool(
            name=TOOL,
            input_schema=acme.route.request_model.model_json_schema(),
            _meta={IC + "operation": "POST /v1/subscriptions", IC + "patchable": ["promo_code"]},
        )

        async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            return types.ListToolsResult(tools=[tool])

        self.server: Server[Any] = Server(
            "page-server",
            on_list_tools=list_tools,
            on_call_tool=self._call,
            on_read_resource=self._read,
        )
        if advertise:
            self.server.extensions[EXTENSION] = {"version": 1, "envelope": "meta"}

    async def _call(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        self.calls.append(dict(ctx.meta or {}))
        answer = self.provider.handle(self.route, dict(params.arguments or {})).body.to_wire()
        view = {k: v for k, v in answer.items() if k not in STAMPS}
        if "recovery_feedback" in view:
            view["recovery_feedback"] = {
                "suggestions": [
                    {k: s[k] for k in ("type", "action", "message", "parameters") if k in s}
                    for s in answer["recovery_feedback"]["suggestions"]
                ]
            }
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(view))],
            structured_content=view,
            is_error="status" in answer,
            _meta={IC + "contract": answer if self.contract is None else self.contract},
        )

    async def _read(self, ctx: Any, params: types.ReadResourceRequestParams) -> Any:
        uri = str(params.uri)
        self.reads.append(uri)
        registry = self.provider.registry
        if uri.startswith("contract://changes?since="):
            since = int(uri.split("since=", 1)[1].split("&", 1)[0])
            body = registry.changes(since, None, None).to_wire()
        else:
            body = self.provider.contract(registry.state, None, None).to_wire()
        content = types.TextResourceContents(
            uri=uri, mime_type="application/json", text=json.dumps(body)
        )
        return types.ReadResourceResult(contents=[content])


def _with_session(page: PageServer, memory: FixMemory, body: Any) -> Any:
    async def go() -> Any:
        async with Client(page.server) as client:
            async with ContractSession(
                client.session, memory, origin=BY_SERVER_NAME, watch=False
            ) as contract:
                return await body(contract)

    return run(go)


def test_c1_the_client_learns_from_the_meta_answer_and_shows_the_content(acme):
    page, memory = PageServer(acme), FixMemory("row")
    growth = acme.family("governed-partner-growth").draft()

    async def body(contract: ContractSession) -> tuple[str, int]:
        first = await contract.call_tool(TOOL, growth)
        second = await contract.answer(TOOL, growth)  # the fix patched in
        return first.for_model, second.status

    shown, status = _with_session(page, memory, body)

    assert status == 200 and "SUMMERSALE25" in shown
    assert not any(stamp in shown for stamp in STAMPS)


@pytest.mark.parametrize(("advertise", "prefix"), [(True, IC), (False, LEGACY)])
def test_c2_the_client_spells_its_keys_for_what_the_server_advertises(acme, advertise, prefix):
    page, memory = PageServer(acme, advertise=advertise), FixMemory("row")
    starter = acme.family("plain-starter-monthly").draft()

    async def body(contract: ContractSession) -> None:
        await contract.call_tool(TOOL, starter)
        await contract.call_tool(TOOL, starter)  # now the client has a position to send

    _with_session(page, memory, body)

    assert prefix + "since" in page.calls[-1]


def test_c3_a_meta_answer_that_is_not_an_object_is_ignored_and_the_content_shown(acme):
    page, memory = PageServer(acme, contract=["not", "an", "object"]), FixMemory("row")

    async def body(contract: ContractSession) -> tuple[list[Any], str]:
        reply = await contract.call_tool(TOOL, acme.family("governed-partner-growth").draft())
        return list(reply.events), reply.for_model

    events, shown = _with_session(page, memory, body)

    assert any(isinstance(e, Ignored) for e in events) and "SUMMERSALE25" in shown
    assert memory.entries("mcp://page-server") == []


def test_c4_the_client_reads_what_moved_on_connecting_before_it_serves_a_fix(acme):
    page, memory = PageServer(acme), FixMemory("row")
    growth = acme.family("governed-partner-growth").draft()
    _with_session(page, memory, lambda contract: contract.call_tool(TOOL, growth))
    page.reads.clear()

    async def body(contract: ContractSession) -> int:
        return len((await contract.lookup(TOOL, growth)).entries)

    served = _with_session(page, memory, body)

    assert served == 1
    assert page.reads and page.reads[0].split("?")[0] in (
        "contract://changes",
        "contract://versions",
    )
    assert "since=" in page.reads[0]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_s1a_the_advertisement_sits_where_the_revision_has_room_for_it(server, mode):
    """2026-07-28 (``auto`` probes ``server/discover``): ``extensions``; the ``initialize``
    handshake (2025-11-25): ``experimental``, since its schema has no ``extensions``."""

    async def capabilities() -> tuple[str | None, Any]:
        async with Client(server, mode=mode) as client:
            return client.session.protocol_version, client.session.server_capabilities

    version, caps = run(capabilities)

    where = caps.extensions if version == "2026-07-28" else caps.experimental
    assert (version == "2026-07-28") == (mode == "auto")
    assert where[EXTENSION] == {"version": 1, "envelope": "meta"}
