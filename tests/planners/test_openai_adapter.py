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


TEMPERATURE_REJECTED = {
    "error": {
        "message": "Unsupported value: 'temperature' does not support 0 with this model.",
        "type": "invalid_request_error",
        "param": "temperature",
        "code": "unsupported_value",
    }
}
VALID = '{"recipe": "pancakes", "flour": "rice_flour"}'


def seeded(seed: int) -> PlanningContext:
    return PlanningContext(
        system_prompt=CONTEXT.system_prompt,
        task=CONTEXT.task,
        task_fields=CONTEXT.task_fields,
        request_schema=SCHEMA,
        seed=seed,
    )


def test_the_runs_seed_and_temperature_zero_are_sent(standin, monkeypatch):
    standin.reply(200, completion(VALID))
    planner = openai_planner(standin, monkeypatch)

    async def go():
        try:
            return await planner.plan(seeded(7))
        finally:
            await planner.aclose()

    asyncio.run(go())
    body = standin.requests[0].body
    assert (body["seed"], body["temperature"]) == (7, 0.0)


def test_a_compatible_server_gets_a_max_tokens_bound(standin, monkeypatch):
    standin.reply(200, completion(VALID))
    run_plans(compatible_planner(standin, monkeypatch))
    assert standin.requests[0].body["max_tokens"] == 1024


def test_options_set_temperature_and_max_tokens(standin, monkeypatch):
    standin.reply(200, completion(VALID))
    run_plans(openai_planner(standin, monkeypatch, temperature="0.7", max_tokens="300"))
    body = standin.requests[0].body
    assert (body["temperature"], body["max_completion_tokens"]) == (0.7, 300)


def test_a_default_temperature_the_model_rejects_is_dropped_and_counted(standin, monkeypatch):
    standin.reply(400, TEMPERATURE_REJECTED)
    standin.reply(200, completion(VALID))
    standin.reply(200, completion(VALID))
    first, second = run_plans(openai_planner(standin, monkeypatch), count=2)
    assert ["temperature" in seen.body for seen in standin.requests] == [True, False, False]
    assert "dropped:temperature" in first.notes
    assert (first.retries, second.retries) == (1, 0)


def test_an_explicit_temperature_the_model_rejects_is_an_error(standin, monkeypatch):
    standin.reply(400, TEMPERATURE_REJECTED)
    with pytest.raises(PlannerCallError, match="400"):
        run_plans(openai_planner(standin, monkeypatch, temperature=0.2))


def test_every_resend_is_counted_on_the_plan(standin, monkeypatch):
    standin.reply(429, RATE_LIMIT_ERROR, {"retry-after-ms": "5"})
    standin.reply(503, {"error": {"message": "busy"}}, {"retry-after-ms": "5"})
    standin.reply(200, completion(VALID))
    [result] = run_plans(openai_planner(standin, monkeypatch))
    assert result.retries == 2


def test_resends_before_a_failure_are_counted_on_the_error(standin, monkeypatch):
    for _ in range(3):
        standin.reply(429, RATE_LIMIT_ERROR, {"retry-after-ms": "5"})
    with pytest.raises(PlannerCallError) as caught:
        run_plans(openai_planner(standin, monkeypatch, max_retries=2))
    assert caught.value.retries == 2


def test_an_unusable_reply_carries_the_raw_text(standin, monkeypatch):
    standin.reply(200, completion("Sure! Here is the body you asked for."))
    with pytest.raises(PlannerResponseError) as caught:
        run_plans(openai_planner(standin, monkeypatch))
    assert caught.value.raw == "Sure! Here is the body you asked for."


def test_a_truncated_reply_carries_what_was_written(standin, monkeypatch):
    standin.reply(200, completion('{"recipe": "pan', finish_reason="length"))
    with pytest.raises(PlannerResponseError, match="max_tokens") as caught:
        run_plans(openai_planner(standin, monkeypatch))
    assert caught.value.raw == '{"recipe": "pan'


def test_a_reply_the_request_schema_rejects_is_a_response_error(standin, monkeypatch):
    standin.reply(200, completion('{"recipe": "pancakes", "flour": 3}'))
    with pytest.raises(PlannerResponseError, match="does not match the request schema") as caught:
        run_plans(openai_planner(standin, monkeypatch))
    assert "flour" in str(caught.value)
    assert caught.value.raw == '{"recipe": "pancakes", "flour": 3}'


def test_json_object_fallback_refuses_an_echo_of_the_schema(standin, monkeypatch):
    echo = {"type": "object", "properties": {"recipe": "pancakes", "flour": "rice_flour"}}
    standin.reply(400, SCHEMA_REJECTED)
    standin.reply(200, completion(json.dumps(echo)))
    with pytest.raises(PlannerResponseError, match="echoes the JSON Schema"):
        run_plans(compatible_planner(standin, monkeypatch))


def test_tokens_of_a_compatible_server_are_reported_not_billed(standin, monkeypatch):
    standin.reply(200, completion(VALID))
    [compatible] = run_plans(compatible_planner(standin, monkeypatch))
    standin.reply(200, completion(VALID))
    [vendor] = run_plans(openai_planner(standin, monkeypatch))
    assert (compatible.usage.label, vendor.usage.label) == ("reported by server", "billed")
