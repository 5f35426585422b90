"""The Anthropic planner: Claude through the official ``anthropic`` SDK and a forced tool call.

The request schema is the ``input_schema`` of one tool the model is forced to call, so the answer
is the tool's input object, checked against the request schema on the client
(:mod:`.validation`). ``temperature`` is sent (0 unless set) for reproducible runs; the Messages
API takes no seed. Rate limits (429), 408/409 and 5xx responses, timeouts and connection errors
are retried by the SDK itself (exponential backoff from 0.5 s, capped at 8 s, honouring
``retry-after`` and ``retry-after-ms``) up to ``max_retries`` times; every re-sent request is
counted in :attr:`Plan.retries`, and what still fails raises :class:`PlannerCallError`.
"""

from __future__ import annotations

import json
import os
from typing import Any

from .._extras import missing, require_extra

try:
    require_extra("anthropic", "jsonschema_rs")  # used, not imported, here
    import anthropic
except ModuleNotFoundError as exc:
    raise missing(exc, "anthropic") from exc

from .base import Plan, PlanningContext, Usage
from .errors import PlannerCallError, PlannerConfigError, PlannerResponseError
from .rendering import render_prompt
from .sends import count_send, counting_sends
from .validation import check_request

API_KEY_ENV = "ANTHROPIC_API_KEY"
TOOL_NAME = "submit_request"
DEFAULT_MAX_TOKENS = 1024
DEFAULT_MAX_RETRIES = 4
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_TEMPERATURE = 0.0


class AnthropicPlanner:
    """A :class:`~.base.Planner` backed by the Anthropic Messages API; usage is the billed usage."""

    simulated = False

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        temperature: float = DEFAULT_TEMPERATURE,
        name: str | None = None,
    ) -> None:
        key = api_key or os.environ.get(API_KEY_ENV)
        if not key:
            raise PlannerConfigError(
                f"{API_KEY_ENV} is not set; export it to use anthropic:{model}"
            )
        self.name = name or f"anthropic:{model}"
        self.requested_model = model
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.timeout = timeout
        self._client = anthropic.AsyncAnthropic(
            api_key=key,
            base_url=base_url,
            max_retries=max_retries,
            timeout=timeout,
            http_client=anthropic.DefaultAsyncHttpxClient(event_hooks={"request": [count_send]}),
        )

    async def plan(self, context: PlanningContext) -> Plan:
        prompt = render_prompt(context)
        arguments: dict[str, Any] = {
            "model": self.requested_model,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "messages": [{"role": "user", "content": prompt.user}],
            "tools": [
                {
                    "name": TOOL_NAME,
                    "description": "Submit the request body to send to the API.",
                    "input_schema": _object_schema(context.request_schema),
                }
            ],
            "tool_choice": {"type": "tool", "name": TOOL_NAME, "disable_parallel_tool_use": True},
        }
        if prompt.system:
            arguments["system"] = prompt.system
        with counting_sends() as sends:
            message = await self._send(arguments)
            value = _tool_input(message)
            raw = json.dumps(value, sort_keys=True, ensure_ascii=False)
            request = check_request(value, context.request_schema, raw=raw)
            usage = _billed_usage(message)
        return Plan(
            request=request,
            usage=usage,
            served_model=getattr(message, "model", None),
            raw=raw,
            retries=sends.retries,
        )

    async def _send(self, arguments: dict[str, Any]) -> Any:
        try:
            return await self._client.messages.create(**arguments)
        except anthropic.APIResponseValidationError as exc:
            raise PlannerResponseError(f"Anthropic reply is not a valid message: {exc}") from exc
        except anthropic.APIStatusError as exc:
            raise PlannerCallError(
                f"Anthropic API answered HTTP {exc.status_code} for {self.requested_model}: "
                f"{exc.message}"
            ) from exc
        except anthropic.APITimeoutError as exc:
            raise PlannerCallError(
                f"the Anthropic API did not answer within {self.timeout:g} s "
                "(raise it with the planner option timeout=SECONDS)"
            ) from exc
        except anthropic.APIConnectionError as exc:
            raise PlannerCallError(f"cannot reach the Anthropic API: {exc}") from exc

    async def aclose(self) -> None:
        await self._client.close()


def _tool_input(message: object) -> Any:
    if not isinstance(message, anthropic.types.Message) or not isinstance(
        getattr(message, "content", None), list
    ):
        raise PlannerResponseError(f"Anthropic reply is not a message: {str(message)[:120]!r}")
    if getattr(message, "stop_reason", None) == "max_tokens":
        raise PlannerResponseError(
            "Anthropic reply was cut off at max_tokens before the request body"
        )
    for block in message.content:
        if isinstance(block, anthropic.types.ToolUseBlock) and block.name == TOOL_NAME:
            return block.input
    kinds = ", ".join(getattr(b, "type", "?") for b in message.content) or "nothing"
    text = "".join(getattr(b, "text", "") for b in message.content) or None
    raise PlannerResponseError(
        f"Anthropic reply has no {TOOL_NAME} tool call (got {kinds})", raw=text
    )


def _billed_usage(message: object) -> Usage:
    usage = getattr(message, "usage", None)
    if usage is None or not isinstance(getattr(usage, "input_tokens", None), int):
        raise PlannerResponseError("Anthropic reply carries no usage; billed tokens are unknown")
    billed_input = (
        usage.input_tokens
        + (usage.cache_creation_input_tokens or 0)
        + (usage.cache_read_input_tokens or 0)
    )
    return Usage(billed_input, usage.output_tokens, estimated=False)


def _object_schema(schema: dict[str, Any]) -> dict[str, Any]:
    return schema if "type" in schema else {"type": "object", **schema}
