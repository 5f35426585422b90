"""The tool server a provider becomes: tools, results, contract resources, caching hints,
``resources/updated``. A real SDK client talks to a real SDK server, in process."""

from __future__ import annotations

import json
import warnings
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from tests.mcp.conftest import OPERATION, TOOL, rotate, run

from invalidation_contracts.client.modelview import model_view
from invalidation_contracts.domains import get_catalog
from invalidation_contracts.mcp import contract_server, names
from invalidation_contracts.mcp.tools import tool_annotations
from invalidation_contracts.protocol.models import ChangesFeed, ContractFields, Problem
from invalidation_contracts.protocol.problems import PROBLEM_BASE
from invalidation_contracts.server import Provider

pytestmark = pytest.mark.mcp

#: Contract members as they would appear in the JSON text a host shows.
CONTRACT_MEMBERS = ('"table_versions"', '"contract_seq"', '"rules_version"', '"patch"', '"scope"')


def test_each_route_is_one_tool_whose_input_schema_is_the_request_model(server, acme):
    async def body() -> types.ListToolsResult:
        async with Client(server) as client:
            return await client.list_tools()

    listing = run(body)

    (tool,) = listing.tools
    assert tool.name == TOOL
    assert tool.input_schema == acme.route.request_model.model_json_schema()
    assert tool.meta == {
        names.OPERATION: OPERATION,
        names.PATCHABLE: sorted(acme.route.patchable_fields),
    }


def test_a_tool_carries_hints_from_its_method_and_the_schema_of_its_success(server):
    async def body() -> types.Tool:
        async with Client(server) as client:
            (tool,) = (await client.list_tools()).tools
            return tool

    tool = run(body)

    assert tool.annotations is not None
    hints = tool.annotations
    assert (hints.read_only_hint, hints.destructive_hint, hints.idempotent_hint) == (
        False,
        True,
        False,
    )  # a POST that charges a card
    assert tool.output_schema is not None
    assert tool.output_schema["required"] == ["result", "success"]


@pytest.mark.parametrize(
    ("method", "hints"),
    [("GET", (True, False, True)), ("PUT", (False, True, True)), ("DELETE", (False, True, True))],
)
def test_the_hints_follow_the_method_semantics(method, hints):
    seen = tool_annotations(method)

    assert (seen.read_only_hint, seen.destructive_hint, seen.idempotent_hint) == hints


def test_a_success_validates_against_the_published_output_schema(server, acme):
    # The SDK's client validates structured content against outputSchema; a mismatch raises.
    result = _call(server, acme.family("plain-starter-monthly").draft())

    assert not result.is_error and result.structured_content["result"]["subscription_id"]


def test_a_tool_is_named_after_its_route_unless_renamed(provider):
    async def body() -> list[str]:
        async with Client(contract_server(provider)) as client:
            return [t.name for t in (await client.list_tools()).tools]

    assert run(body) == ["post_v1_subscriptions"]


@pytest.mark.parametrize(
    ("renames", "message"),
    [
        ({OPERATION: "create subscription"}, "not a valid MCP tool name"),
        ({"POST /v1/nowhere": "x"}, "names no route"),
    ],
)
def test_a_bad_tool_name_is_refused_when_the_server_is_built(provider, renames, message):
    with pytest.raises(ValueError, match=message):
        contract_server(provider, tool_names=renames)


def _call(server: Any, arguments: Any, meta: dict[str, Any] | None = None) -> types.CallToolResult:
    async def body() -> types.CallToolResult:
        async with Client(server) as client:
            return await client.call_tool(TOOL, arguments, meta=meta)  # type: ignore[arg-type]

    return run(body)


def _contract(result: types.CallToolResult) -> dict[str, Any]:
    """The contract answer a result carries in its ``_meta`` (the ``meta`` envelope)."""
    assert result.meta is not None
    answer = result.meta[names.CONTRACT]
    assert isinstance(answer, dict)
    return answer


def test_a_policy_violation_is_an_error_result_carrying_the_problem_document(server, acme):
    result = _call(server, acme.family("governed-partner-growth").draft())

    assert result.is_error
    problem = Problem.model_validate(_contract(result))
    assert problem.status == 422
    assert problem.type == PROBLEM_BASE + "policy-violation"
    assert [s.type for s in problem.recovery_feedback.suggestions] == ["ADD_REQUIRED_PROMO_CODE"]
    assert problem.table_versions and problem.rules_version and problem.contract_epoch


def test_the_content_of_a_result_is_its_model_view_and_carries_no_contract(server, acme):
    result = _call(server, acme.family("governed-partner-growth").draft())

    (text,) = result.content
    assert json.loads(text.text) == model_view(_contract(result), joined_detail=False)
    assert not any(member in text.text for member in CONTRACT_MEMBERS)


def test_an_error_result_leaves_structured_content_to_successes_which_the_schema_describes(
    server, acme
):
    rejected = _call(server, acme.family("governed-partner-growth").draft())
    served = _call(server, acme.family("plain-starter-monthly").draft())

    assert rejected.is_error and rejected.structured_content is None
    assert served.structured_content == model_view(_contract(served), joined_detail=False)


def test_the_inline_envelope_is_the_wire_form_of_0_1(provider, acme):
    inline = contract_server(provider, tool_names={OPERATION: TOOL}, envelope="inline")

    result = _call(inline, acme.family("governed-partner-growth").draft(), {names.SINCE: 0})

    problem = Problem.model_validate(result.structured_content)
    assert problem.recovery_feedback.suggestions[0].scope is not None
    (text,) = result.content
    assert json.loads(text.text) == result.structured_content
    assert result.meta is not None and result.meta[names.legacy(names.SINCE)] == 0
    assert names.CONTRACT not in result.meta and names.SINCE not in result.meta


def test_an_unknown_envelope_is_refused_when_the_server_is_built(provider):
    with pytest.raises(ValueError, match="envelope must be one of"):
        contract_server(provider, envelope="body")


def test_the_server_advertises_the_extension_and_its_envelope(server):
    async def body() -> dict[str, Any] | None:
        async with Client(server) as client:
            capabilities = client.session.server_capabilities
            assert capabilities is not None and capabilities.extensions is not None
            return capabilities.extensions.get(names.EXTENSION)

    assert run(body) == {"version": names.EXTENSION_VERSION, "envelope": "meta"}


@pytest.mark.parametrize("key", [names.SINCE, names.legacy(names.SINCE)])
def test_a_position_is_read_under_either_spelling_of_its_key(server, acme, key):
    result = _call(server, acme.family("plain-starter-monthly").draft(), {key: 0})

    assert "table_versions" not in _contract(result)


def test_a_success_carries_the_result_and_the_response_level_contract(server, acme):
    result = _call(server, acme.family("plain-starter-monthly").draft())

    assert not result.is_error
    structured = _contract(result)
    assert structured["success"] is True and structured["result"]
    assert ContractFields.model_validate(structured).table_versions
    assert result.structured_content == {"result": structured["result"], "success": True}


def test_arguments_outside_the_schema_get_the_invalid_request_problem_with_the_contract(server):
    result = _call(server, {"plan": 7})

    assert result.is_error
    problem = Problem.model_validate(_contract(result))
    assert problem.type == PROBLEM_BASE + "invalid-request"
    assert problem.errors and problem.contract_seq == 0


def _raised(server: Any, call: Any) -> MCPError:
    """The ``MCPError`` a client call raises (caught inside the connection)."""

    async def body() -> MCPError:
        async with Client(server) as client:
            with pytest.raises(MCPError) as caught:
                await call(client)
            return caught.value

    return run(body)


def test_an_unknown_tool_is_the_sdk_protocol_error(server):
    error = _raised(server, lambda client: client.call_tool("no_such_tool", {}))

    assert error.code == types.INVALID_PARAMS
    assert str(error) == "Unknown tool: no_such_tool"


def test_a_position_in_the_request_meta_gets_the_conditional_contract(server, acme):
    result = _call(server, acme.family("plain-starter-monthly").draft(), {names.SINCE: 0})

    assert "table_versions" not in _contract(result)  # nothing moved since 0
    assert "contract_seq" not in _contract(result)  # still 0
    assert result.meta[names.SINCE] == 0


def test_a_malformed_position_is_an_invalid_request_problem(server, acme):
    result = _call(server, acme.family("plain-starter-monthly").draft(), {names.SINCE: "-1"})

    assert result.is_error
    assert _contract(result)["type"] == PROBLEM_BASE + "invalid-request"
    assert "since" in _contract(result)["detail"]


def _read(server: Any, uri: str) -> types.TextResourceContents:
    async def body() -> types.ReadResourceResult:
        async with Client(server) as client:
            return await client.read_resource(uri)

    (content,) = run(body).contents
    assert isinstance(content, types.TextResourceContents)
    return content


def test_the_versions_resource_is_the_contract_route(server, provider):
    content = _read(server, names.VERSIONS)

    assert content.mime_type == names.JSON_MEDIA_TYPE
    assert json.loads(content.text) == provider.contract(provider.registry.state).to_wire()


def test_the_changes_feed_is_read_since_a_position(server, provider, acme):
    rotate(acme, provider)

    feed = ChangesFeed.model_validate_json(_read(server, names.CHANGES + "?since=0").text)

    assert feed.last_seq == 1
    assert [(r.table, r.key, r.op) for r in feed.rows] == [
        ("active_csm_codes", "plan_partner_growth", "changed")
    ]


def test_a_position_of_another_history_reads_a_410_problem_document(server):
    content = _read(server, names.CHANGES + "?since=0&epoch=not-this-one")

    assert content.mime_type == names.PROBLEM_MEDIA_TYPE
    problem = json.loads(content.text)
    assert problem["status"] == 410 and problem["type"] == PROBLEM_BASE + "resync-required"


def test_the_changes_feed_without_a_position_is_an_invalid_request_problem(server):
    content = _read(server, names.CHANGES)

    assert content.mime_type == names.PROBLEM_MEDIA_TYPE
    assert json.loads(content.text)["status"] == 422


def test_the_rules_resource_lists_the_declarations(server, provider):
    content = _read(server, names.RULES)

    assert json.loads(content.text) == provider.registry.state.rules_listing().to_wire()


def test_the_graph_is_a_resource_only_from_level_5():
    catalog = get_catalog("acme_billing")
    low = contract_server(Provider(catalog.domain, level=4))

    async def body() -> list[str]:
        async with Client(low) as client:
            return [str(r.uri) for r in (await client.list_resources()).resources]

    assert run(body) == [names.VERSIONS, names.RULES]
    assert json.loads(_read(low, names.GRAPH).text)["status"] == 404


def test_an_unknown_resource_is_the_sdk_protocol_error(server):
    error = _raised(server, lambda client: client.read_resource("contract://nothing"))

    assert error.code == types.INVALID_PARAMS
    assert str(error) == "Unknown resource: contract://nothing"


def test_resource_reads_are_never_fresh_and_listings_are_long_lived(server):
    async def body() -> tuple[int | None, int | None, int | None]:
        async with Client(server) as client:
            read = await client.read_resource(names.VERSIONS)
            tools = await client.list_tools()
            templates = await client.list_resource_templates()
            return read.ttl_ms, tools.ttl_ms, templates.ttl_ms

    read, tools, templates = run(body)

    assert read == 0
    assert tools and tools > 0 and templates and templates > 0


def test_a_listening_client_hears_that_the_versions_moved(server, provider, acme):
    async def body() -> set[str]:
        heard: set[str] = set()
        async with Client(server) as client:
            subscriptions = [names.VERSIONS, names.RULES, names.GRAPH]
            async with client.listen(resource_subscriptions=subscriptions) as stream:
                await anyio.to_thread.run_sync(rotate, acme, provider)
                with anyio.fail_after(10):
                    async for event in stream:
                        heard.add(event.uri)  # type: ignore[union-attr]
                        if {names.VERSIONS, names.GRAPH} <= heard:
                            break
        return heard

    assert run(body) == {names.VERSIONS, names.GRAPH}  # a table move: not the rules


def test_a_rule_change_updates_the_rules_resource(server, provider, acme):
    async def body() -> set[str]:
        heard: set[str] = set()
        async with Client(server) as client:
            async with client.listen(resource_subscriptions=[names.RULES]) as stream:
                rules = acme.read_rule_set("rule-removal")
                await anyio.to_thread.run_sync(provider.registry.set_rules, rules)
                with anyio.fail_after(10):
                    async for event in stream:
                        heard.add(event.uri)  # type: ignore[union-attr]
                        break
        return heard

    assert run(body) == {names.RULES}


def test_a_client_before_2026_07_28_is_notified_after_resources_subscribe(server, provider, acme):
    async def body() -> list[str]:
        heard: list[str] = []
        arrived = anyio.Event()

        async def handler(message: Any) -> None:
            if isinstance(message, types.ResourceUpdatedNotification):
                heard.append(str(message.params.uri))
                arrived.set()

        async with Client(server, mode="legacy", message_handler=handler) as client:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                await client.session.subscribe_resource(names.VERSIONS)
            await anyio.to_thread.run_sync(rotate, acme, provider)
            with anyio.fail_after(10):
                await arrived.wait()
        return heard

    assert run(body) == [names.VERSIONS]
