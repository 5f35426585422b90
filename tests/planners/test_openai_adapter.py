"""The OpenAI adapter end to end against a stand-in speaking the chat-completions wire format."""

from __future__ import annotations

import asyncio
import json

import pytest

from invalidation_contracts.planners import (
    PlannerCallError,
    PlannerConfigError,
    PlannerResponseError,
    PlanningContext,
    create_planner,
)

SCHEMA = {
    "type": "object",
    "properties": {"recipe": {"type": "string"}, "flour": {"type": "string"}},
    "required": ["recipe", "flour"],
}
CONTEXT = PlanningContext(
    system_prompt="You plan request bodies.",
    task="Convert pancakes for a celiac guest.",
    task_fields={"recipe": "pancakes", "flour": "wheat_flour"},
    request_schema=SCHEMA,
)
SERVED = "gpt-5-mini-2025-08-07"
RATE_LIMIT_ERROR = {
    "error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}
}
SCHEMA_REJECTED = {
    "error": {
        "message": "response_format json_schema is not supported",
        "type": "invalid_request_error",
    }
}


def completion(content: str | None, *, usage: bool = True, finish_reason: str = "stop") -> dict:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": SERVED,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish_reason,
            }
        ],
    }
    if usage:
        body["usage"] = {"prompt_tokens": 210, "completion_tokens": 17, "total_tokens": 227}
    return body


def run_plans(planner, count: int = 1):
    async def go():
        try:
            return [await planner.plan(CONTEXT) for _ in range(count)]
        finally:
            await planner.aclose()

    return asyncio.run(go())


def openai_planner(standin, monkeypatch, **options):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    return create_planner(
        "openai:gpt-5-mini",
        {"base_url": f"{standin.url}/v1", "timeout": 5, "max_retries": 2, **options},
    )


def compatible_planner(standin, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    return create_planner(
        f"openai-compatible:llama3.1:8b@{standin.url}/v1", {"timeout": 5, "max_retries": 1}
    )


def test_plan_is_the_parsed_json_content(standin, monkeypatch):
    standin.reply(200, completion('{"recipe": "pancakes", "flour": "rice_flour"}'))
    [result] = run_plans(openai_planner(standin, monkeypatch))
    assert result.request == {"recipe": "pancakes", "flour": "rice_flour"}


def test_request_asks_for_json_schema_output(standin, monkeypatch):
    standin.reply(200, completion('{"recipe": "pancakes", "flour": "rice_flour"}'))
    run_plans(openai_planner(standin, monkeypatch))
    seen = standin.requests[0]
    assert (seen.method, seen.path) == ("POST", "/v1/chat/completions")
    assert seen.body["response_format"]["type"] == "json_schema"
    assert seen.body["response_format"]["json_schema"]["schema"] == SCHEMA
    assert seen.body["messages"][0] == {"role": "system", "content": CONTEXT.system_prompt}
    assert seen.headers["authorization"] == "Bearer sk-test"


def test_billed_usage_and_served_model_are_recorded(standin, monkeypatch):
    standin.reply(200, completion('{"recipe": "pancakes", "flour": "rice_flour"}'))
    [result] = run_plans(openai_planner(standin, monkeypatch))
    assert standin.requests[0].body["model"] == "gpt-5-mini"
    assert result.served_model == SERVED
    assert (result.usage.input_tokens, result.usage.output_tokens, result.usage.estimated) == (
        210,
        17,
        False,
    )


def test_unreported_usage_is_estimated_and_labelled(standin, monkeypatch):
    standin.reply(200, completion('{"recipe": "pancakes", "flour": "rice_flour"}', usage=False))
    [result] = run_plans(openai_planner(standin, monkeypatch))
    assert result.usage.estimated is True
    assert result.usage.input_tokens > 0
    assert "usage-not-reported" in result.notes


def test_rate_limit_is_retried_by_the_sdk(standin, monkeypatch):
    standin.reply(429, RATE_LIMIT_ERROR, {"retry-after-ms": "10"})
    standin.reply(200, completion('{"recipe": "pancakes", "flour": "rice_flour"}'))
    results = run_plans(openai_planner(standin, monkeypatch))
    assert len(results) == 1
    assert len(standin.requests) == 2


def test_rate_limit_past_max_retries_raises_planner_call_error(standin, monkeypatch):
    for _ in range(2):
        standin.reply(429, RATE_LIMIT_ERROR, {"retry-after-ms": "5"})
    with pytest.raises(PlannerCallError, match="429"):
        run_plans(openai_planner(standin, monkeypatch, max_retries=1))


def test_body_that_is_not_json_raises_planner_response_error(standin, monkeypatch):
    standin.reply(200, "<html>gateway says hello</html>")
    with pytest.raises(PlannerResponseError, match="not a chat completion"):
        run_plans(openai_planner(standin, monkeypatch))


def test_body_without_choices_raises_planner_response_error(standin, monkeypatch):
    standin.reply(200, {"id": "x", "object": "chat.completion", "model": SERVED, "choices": []})
    with pytest.raises(PlannerResponseError, match="no choices"):
        run_plans(openai_planner(standin, monkeypatch))


def test_content_that_is_not_json_raises_planner_response_error(standin, monkeypatch):
    standin.reply(200, completion("Sure! Here is the body you asked for."))
    with pytest.raises(PlannerResponseError, match="not JSON"):
        run_plans(openai_planner(standin, monkeypatch))


def test_content_that_is_not_an_object_raises_planner_response_error(standin, monkeypatch):
    standin.reply(200, completion("[1, 2, 3]"))
    with pytest.raises(PlannerResponseError, match="not an object"):
        run_plans(openai_planner(standin, monkeypatch))


def test_empty_content_raises_planner_response_error(standin, monkeypatch):
    standin.reply(200, completion(None))
    with pytest.raises(PlannerResponseError, match="no content"):
        run_plans(openai_planner(standin, monkeypatch))


def test_truncated_reply_raises_planner_response_error(standin, monkeypatch):
    standin.reply(200, completion('{"recipe": "pan', finish_reason="length"))
    with pytest.raises(PlannerResponseError, match="cut off"):
        run_plans(openai_planner(standin, monkeypatch))


def test_openai_rejecting_the_schema_is_an_error_not_a_fallback(standin, monkeypatch):
    standin.reply(400, SCHEMA_REJECTED)
    with pytest.raises(PlannerCallError, match="400"):
        run_plans(openai_planner(standin, monkeypatch))
    assert len(standin.requests) == 1


def test_missing_openai_key_is_a_config_error(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(PlannerConfigError, match="OPENAI_API_KEY"):
        create_planner("openai:gpt-5-mini")


def test_compatible_server_needs_no_key(standin, monkeypatch):
    standin.reply(200, completion('{"recipe": "pancakes", "flour": "rice_flour"}'))
    [result] = run_plans(compatible_planner(standin, monkeypatch))
    assert standin.requests[0].body["model"] == "llama3.1:8b"
    assert result.served_model == SERVED


def test_compatible_server_rejecting_json_schema_falls_back_to_json_object(standin, monkeypatch):
    standin.reply(400, SCHEMA_REJECTED)
    standin.reply(200, completion('{"recipe": "pancakes", "flour": "rice_flour"}'))
    standin.reply(200, completion('{"recipe": "pancakes", "flour": "corn_flour"}'))
    first, second = run_plans(compatible_planner(standin, monkeypatch), count=2)
    modes = [seen.body["response_format"]["type"] for seen in standin.requests]
    assert modes == ["json_schema", "json_object", "json_object"]
    assert (first.request["flour"], second.request["flour"]) == ("rice_flour", "corn_flour")
    assert "response_format:json_object" in first.notes


def test_compatible_reply_in_a_markdown_fence_is_parsed(standin, monkeypatch):
    body = {"recipe": "pancakes", "flour": "rice_flour"}
    standin.reply(200, completion(f"```json\n{json.dumps(body)}\n```"))
    [result] = run_plans(compatible_planner(standin, monkeypatch))
    assert result.request == body


def test_unreachable_server_raises_planner_call_error(monkeypatch):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    planner = create_planner(
        f"openai-compatible:m@http://127.0.0.1:{port}/v1", {"max_retries": 0, "timeout": 2}
    )
    with pytest.raises(PlannerCallError, match="cannot reach"):
        run_plans(planner)
