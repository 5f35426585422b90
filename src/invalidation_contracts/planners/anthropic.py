"""The Anthropic planner: Claude through the official ``anthropic`` SDK and a forced tool call.

The request schema is the ``input_schema`` of one tool the model is forced to call, so the answer
is the tool's input object. Rate limits (429), 408/409 and 5xx responses, and connection errors
are retried by the SDK itself (exponential backoff from 0.5 s, capped at 8 s, honouring
``retry-after`` and ``retry-after-ms``) up to ``max_retries`` times; what still fails raises
:class:`PlannerCallError`.
"""

# ruff: noqa: E402 (the extra is checked before the third-party imports)
from __future__ import annotations

from .._extras import require_extra

require_extra("anthropic", "anthropic")

import json
import os
from typing import Any

import anthropic

from .base import Plan, PlanningContext, Usage
from .errors import PlannerCallError, PlannerConfigError, PlannerResponseError
from .rendering import render_prompt

API_KEY_ENV = "ANTHROPIC_API_KEY"
TOOL_NAME = "submit_request"
DEFAULT_MAX_TOKENS = 1024
DEFAULT_MAX_RETRIES = 4
DEFAULT_TIMEOUT_S = 60.0


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
        self._client = anthropic.AsyncAnthropic(
            api_key=key, base_url=base_url, max_retries=max_retries, timeout=timeout
        )

    async def plan(self, context: PlanningContext) -> Plan:
        prompt = render_prompt(context)
        arguments: dict[str, Any] = {
            "model": self.requested_model,
            "max_tokens": self.max_tokens,
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
        try:
            message = await self._client.messages.create(**arguments)
        except anthropic.APIResponseValidationError as exc:
            raise PlannerResponseError(f"Anthropic reply is not a valid message: {exc}") from exc
        except anthropic.APIStatusError as exc:
            raise PlannerCallError(
                f"Anthropic API answered HTTP {exc.status_code} for {self.requested_model}: "
                f"{exc.message}"
            ) from exc
        except anthropic.APIConnectionError as exc:
            raise PlannerCallError(f"cannot reach the Anthropic API: {exc}") from exc
        request = _tool_input(message)
        return Plan(
            request=request,
            usage=_billed_usage(message),
            served_model=getattr(message, "model", None),
            raw=json.dumps(request, sort_keys=True, ensure_ascii=False),
        )

    async def aclose(self) -> None:
        await self._client.close()


def _tool_input(message: Any) -> dict[str, Any]:
    if not isinstance(message, anthropic.types.Message) or not isinstance(
        getattr(message, "content", None), list
    ):
        raise PlannerResponseError(f"Anthropic reply is not a message: {str(message)[:120]!r}")
    if getattr(message, "stop_reason", None) == "max_tokens":
        raise PlannerResponseError(
            "Anthropic reply was cut off at max_tokens before the request body"
        )
    for block in message.content:
        if getattr(block, "type", None) == "tool_use" and getattr(block, "name", None) == TOOL_NAME:
            if not isinstance(block.input, dict):
                raise PlannerResponseError(
                    f"Anthropic tool input is a {type(block.input).__name__}, not a JSON object"
                )
            return block.input
    kinds = ", ".join(getattr(b, "type", "?") for b in message.content) or "nothing"
    raise PlannerResponseError(f"Anthropic reply has no {TOOL_NAME} tool call (got {kinds})")


def _billed_usage(message: Any) -> Usage:
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
