"""The OpenAI planner: chat completions via the official ``openai`` SDK, for OpenAI and compatibles.

With ``base_url`` the same adapter talks to any OpenAI-compatible server (vLLM, Ollama, llama.cpp,
gateways). The answer is constrained with ``response_format`` ``json_schema``; a compatible server
that rejects that (HTTP 400/422) is asked once more with ``json_object``, and keeps that mode once
it works. Rate limits (429), 408/409 and 5xx responses, and connection errors are retried by the
SDK itself (exponential backoff, honouring ``retry-after`` and ``retry-after-ms``) up to
``max_retries`` times; what still fails raises :class:`PlannerCallError`.
"""

# ruff: noqa: E402 (the extra is checked before the third-party imports)
from __future__ import annotations

from .._extras import require_extra

require_extra("openai", "openai")

import json
import os
from typing import Any

import openai
from openai.types.chat import ChatCompletion

from .base import Plan, PlanningContext, Usage
from .errors import PlannerCallError, PlannerConfigError, PlannerResponseError
from .rendering import estimate_tokens, render_prompt

API_KEY_ENV = "OPENAI_API_KEY"
#: Sent as the key to a compatible server when none is set; local servers ignore it.
PLACEHOLDER_KEY = "not-needed"
DEFAULT_MAX_RETRIES = 4
DEFAULT_TIMEOUT_S = 60.0
SCHEMA_NAME = "request_body"


class OpenAIPlanner:
    """A :class:`~.base.Planner` backed by chat completions; usage is billed usage when reported."""

    simulated = False

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        compatible: bool = False,
        max_retries: int = DEFAULT_MAX_RETRIES,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_tokens: int | None = None,
        temperature: float | None = None,
        name: str | None = None,
    ) -> None:
        key = api_key or os.environ.get(API_KEY_ENV)
        if not key:
            if not compatible:
                raise PlannerConfigError(
                    f"{API_KEY_ENV} is not set; export it to use openai:{model}"
                )
            key = PLACEHOLDER_KEY
        if compatible and not base_url:
            raise PlannerConfigError(f"openai-compatible:{model} needs a base URL (MODEL@URL)")
        self.name = name or (
            f"openai-compatible:{model}@{base_url}" if compatible else f"openai:{model}"
        )
        self.requested_model = model
        self.compatible = compatible
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.response_format_mode = "json_schema"
        """``json_schema``, or ``json_object`` after a compatible server rejected the schema."""
        self._client = openai.AsyncOpenAI(
            api_key=key, base_url=base_url, max_retries=max_retries, timeout=timeout
        )

    async def plan(self, context: PlanningContext) -> Plan:
        prompt = render_prompt(context)
        messages = [{"role": "user", "content": prompt.user}]
        if prompt.system:
            messages.insert(0, {"role": "system", "content": prompt.system})
        mode = self.response_format_mode
        try:
            completion = await self._complete(messages, context.request_schema, mode)
        except (openai.BadRequestError, openai.UnprocessableEntityError) as exc:
            if not (self.compatible and mode == "json_schema"):
                raise self._call_error(exc) from exc
            mode = "json_object"
            try:
                completion = await self._complete(messages, context.request_schema, mode)
            except openai.APIStatusError as retry_exc:
                raise self._call_error(retry_exc) from retry_exc
            self.response_format_mode = mode
        except openai.APIStatusError as exc:
            raise self._call_error(exc) from exc
        request, raw = _parse_completion(completion)
        notes: tuple[str, ...] = () if mode == "json_schema" else ("response_format:json_object",)
        billed = getattr(completion, "usage", None)
        if billed is None or not isinstance(getattr(billed, "prompt_tokens", None), int):
            usage = Usage(
                estimate_tokens(prompt.system) + estimate_tokens(prompt.user),
                estimate_tokens(raw),
                estimated=True,
            )
            notes += ("usage-not-reported",)
        else:
            usage = Usage(billed.prompt_tokens, billed.completion_tokens or 0, estimated=False)
        return Plan(
            request=request,
            usage=usage,
            served_model=getattr(completion, "model", None),
            raw=raw,
            notes=notes,
        )

    async def aclose(self) -> None:
        await self._client.close()

    async def _complete(
        self, messages: list[dict[str, str]], schema: dict[str, Any], mode: str
    ) -> Any:
        arguments: dict[str, Any] = {
            "model": self.requested_model,
            "messages": messages,
            "response_format": _response_format(schema, mode),
        }
        if self.max_tokens is not None:
            key = "max_tokens" if self.compatible else "max_completion_tokens"
            arguments[key] = self.max_tokens
        if self.temperature is not None:
            arguments["temperature"] = self.temperature
        try:
            return await self._client.chat.completions.create(**arguments)
        except openai.APIResponseValidationError as exc:
            raise PlannerResponseError(f"reply is not a valid chat completion: {exc}") from exc
        except openai.APIConnectionError as exc:
            raise PlannerCallError(f"cannot reach {self._client.base_url}: {exc}") from exc

    def _call_error(self, exc: openai.APIStatusError) -> PlannerCallError:
        return PlannerCallError(
            f"{self._client.base_url} answered HTTP {exc.status_code} for "
            f"{self.requested_model}: {exc.message}"
        )


def _response_format(schema: dict[str, Any], mode: str) -> dict[str, Any]:
    if mode == "json_object":
        return {"type": "json_object"}
    return {
        "type": "json_schema",
        "json_schema": {"name": SCHEMA_NAME, "schema": schema, "strict": False},
    }


def _parse_completion(completion: Any) -> tuple[dict[str, Any], str]:
    if not isinstance(completion, ChatCompletion):
        raise PlannerResponseError(f"reply is not a chat completion: {str(completion)[:120]!r}")
    if not getattr(completion, "choices", None):
        raise PlannerResponseError("chat completion has no choices")
    choice = completion.choices[0]
    if choice.finish_reason == "length":
        raise PlannerResponseError("reply was cut off at the token limit before the request body")
    message = choice.message
    if getattr(message, "refusal", None):
        raise PlannerResponseError(f"model refused: {message.refusal}")
    if not message.content:
        raise PlannerResponseError("chat completion has no content")
    raw = message.content
    try:
        value = json.loads(_strip_fence(raw))
    except json.JSONDecodeError as exc:
        raise PlannerResponseError(f"reply is not JSON ({exc.msg}): {raw[:120]!r}") from exc
    if not isinstance(value, dict):
        raise PlannerResponseError(f"reply is a JSON {type(value).__name__}, not an object")
    return value, raw


def _strip_fence(text: str) -> str:
    """Compatible servers in ``json_object`` mode sometimes wrap the JSON in a Markdown fence."""
    body = text.strip()
    if body.startswith("```") and body.endswith("```"):
        body = body[3:-3]
        first_line, _, rest = body.partition("\n")
        body = rest if first_line.strip().isalpha() or not first_line.strip() else body
    return body.strip()
