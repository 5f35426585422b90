"""The Anthropic adapter end to end against a stand-in speaking the Messages API wire format."""

from __future__ import annotations

import asyncio

import pytest

from invalidation_contracts.planners import (
    PlannerCallError,
    PlannerConfigError,
    PlannerResponseError,
    PlanningContext,
    create_planner,
)
from invalidation_contracts.planners.anthropic import TOOL_NAME

SCHEMA = {
    "type": "object",
    "properties": {"plan": {"type": "string"}, "promo_code": {"type": "string"}},
    "required": ["plan"],
}
CONTEXT = PlanningContext(
    system_prompt="You plan request bodies.",
    task="Subscribe to the enterprise_annual plan.",
    task_fields={"plan": "enterprise_annual"},
    request_schema=SCHEMA,
    memory_block='- ADD_REQUIRED_PROMO_CODE: merge {"promo_code": "ENT-7"}',
)
SERVED = "claude-haiku-4-5-20251001"


def message(content: list[dict], *, stop_reason: str = "tool_use") -> dict:
    return {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": SERVED,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 321, "output_tokens": 45, "cache_read_input_tokens": 9},
    }


def tool_use(body: dict) -> dict:
    return message([{"type": "tool_use", "id": "toolu_01", "name": TOOL_NAME, "input": body}])


RATE_LIMIT_ERROR = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}


def plan(standin, monkeypatch, **options):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    planner = create_planner(
        "anthropic:claude-haiku-4-5",
        {"base_url": standin.url, "timeout": 5, "max_retries": 2, **options},
    )

    async def go():
        try:
            return await planner.plan(CONTEXT)
        finally:
            await planner.aclose()

    return asyncio.run(go())


def test_plan_is_the_forced_tool_calls_input(standin, monkeypatch):
    standin.reply(200, tool_use({"plan": "enterprise_annual", "promo_code": "ENT-7"}))
    result = plan(standin, monkeypatch)
    assert result.request == {"plan": "enterprise_annual", "promo_code": "ENT-7"}


def test_request_forces_one_tool_whose_input_schema_is_the_request_schema(standin, monkeypatch):
    standin.reply(200, tool_use({"plan": "enterprise_annual"}))
    plan(standin, monkeypatch)
    seen = standin.requests[0]
    assert (seen.method, seen.path) == ("POST", "/v1/messages")
    assert seen.body["tools"][0]["input_schema"] == SCHEMA
    assert seen.body["tool_choice"]["type"] == "tool"
    assert seen.body["tool_choice"]["name"] == TOOL_NAME
    assert seen.body["system"] == CONTEXT.system_prompt
    assert "ENT-7" in seen.body["messages"][0]["content"]


def test_api_key_comes_from_the_environment(standin, monkeypatch):
    standin.reply(200, tool_use({"plan": "enterprise_annual"}))
    plan(standin, monkeypatch)
    headers = standin.requests[0].headers
    sent = {headers.get("x-api-key"), headers.get("authorization", "").removeprefix("Bearer ")}
    assert "sk-ant-test" in sent


def test_billed_usage_and_served_model_are_recorded(standin, monkeypatch):
    standin.reply(200, tool_use({"plan": "enterprise_annual"}))
    result = plan(standin, monkeypatch)
    assert result.served_model == SERVED
    assert standin.requests[0].body["model"] == "claude-haiku-4-5"
    assert (result.usage.input_tokens, result.usage.output_tokens) == (321 + 9, 45)
    assert result.usage.estimated is False


def test_rate_limit_is_retried_by_the_sdk(standin, monkeypatch):
    standin.reply(429, RATE_LIMIT_ERROR, {"retry-after-ms": "10"})
    standin.reply(200, tool_use({"plan": "enterprise_annual"}))
    result = plan(standin, monkeypatch)
    assert result.request == {"plan": "enterprise_annual"}
    assert len(standin.requests) == 2


def test_server_errors_past_max_retries_raise_planner_call_error(standin, monkeypatch):
    failure = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    standin.reply(503, failure, {"retry-after-ms": "5"})
    standin.reply(503, failure, {"retry-after-ms": "5"})
    with pytest.raises(PlannerCallError, match="503"):
        plan(standin, monkeypatch, max_retries=1)
    assert len(standin.requests) == 2


def test_reply_without_tool_call_raises_planner_response_error(standin, monkeypatch):
    standin.reply(
        200, message([{"type": "text", "text": "I'd rather not."}], stop_reason="end_turn")
    )
    with pytest.raises(PlannerResponseError, match="no submit_request tool call"):
        plan(standin, monkeypatch)


def test_reply_that_is_not_json_raises_planner_response_error(standin, monkeypatch):
    standin.reply(200, "<html>gateway says hello</html>")
    with pytest.raises(PlannerResponseError):
        plan(standin, monkeypatch)


def test_reply_that_is_not_a_message_raises_planner_response_error(standin, monkeypatch):
    standin.reply(200, {"status": "ok"})
    with pytest.raises(PlannerResponseError):
        plan(standin, monkeypatch)


def test_reply_cut_off_at_max_tokens_raises_planner_response_error(standin, monkeypatch):
    standin.reply(200, message([], stop_reason="max_tokens"))
    with pytest.raises(PlannerResponseError, match="max_tokens"):
        plan(standin, monkeypatch)


def test_missing_api_key_is_a_config_error(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(PlannerConfigError, match="ANTHROPIC_API_KEY"):
        create_planner("anthropic:claude-haiku-4-5")


def test_unreachable_server_raises_planner_call_error(monkeypatch):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    class Nowhere:
        url = f"http://127.0.0.1:{port}"

    with pytest.raises(PlannerCallError, match="cannot reach"):
        plan(Nowhere, monkeypatch, max_retries=0)


def test_temperature_zero_is_sent_unless_set(standin, monkeypatch):
    standin.reply(200, tool_use({"plan": "enterprise_annual"}))
    plan(standin, monkeypatch)
    standin.reply(200, tool_use({"plan": "enterprise_annual"}))
    plan(standin, monkeypatch, temperature="0.4")
    assert [seen.body["temperature"] for seen in standin.requests] == [0.0, 0.4]


def test_a_tool_input_the_request_schema_rejects_is_a_response_error(standin, monkeypatch):
    standin.reply(200, tool_use({"promo_code": "ENT-7"}))
    with pytest.raises(PlannerResponseError, match="does not match the request schema") as caught:
        plan(standin, monkeypatch)
    assert "plan" in str(caught.value) and "ENT-7" in caught.value.raw


def test_resends_are_counted_on_the_plan(standin, monkeypatch):
    standin.reply(429, RATE_LIMIT_ERROR, {"retry-after-ms": "5"})
    standin.reply(200, tool_use({"plan": "enterprise_annual"}))
    assert plan(standin, monkeypatch).retries == 1
