"""The OpenAI planner: chat completions via the official ``openai`` SDK, for OpenAI and compatibles.

With ``base_url`` the same adapter talks to any OpenAI-compatible server (vLLM, Ollama, llama.cpp,
gateways). The answer is constrained with ``response_format`` ``json_schema``; a compatible server
that rejects that (HTTP 400/422) is asked once more with ``json_object``, and keeps that mode once
it works. Every reply is then checked against the request schema on the client
(:mod:`.validation`): whatever the server's mode, only a body the schema accepts becomes a plan.

Sampling is pinned for reproducible runs: ``temperature`` (0 unless set) and ``seed`` (the run's
seed) are sent, and a server that rejects one it was not explicitly given (some OpenAI models take
no temperature) is asked again without it. Rate limits (429), 408/409 and 5xx responses, timeouts
and connection errors are retried by the SDK itself (exponential backoff, honouring
``retry-after``) up to ``max_retries`` times; every re-sent request is counted in
:attr:`Plan.retries`, and what still fails raises :class:`PlannerCallError`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from .._extras import missing, require_extra

try:
    require_extra("openai", "jsonschema_rs")  # used, not imported, here
    import openai
    from openai.types.chat import ChatCompletion
except ModuleNotFoundError as exc:
    raise missing(exc, "openai") from exc

from .base import Plan, PlanningContext, Usage
from .errors import PlannerCallError, PlannerConfigError, PlannerResponseError
from .rendering import estimate_tokens, render_prompt
from .sends import count_send, counting_sends
from .validation import check_request

API_KEY_ENV = "OPENAI_API_KEY"
#: Sent as the key to a compatible server when none is set; local servers ignore it.
PLACEHOLDER_KEY = "not-needed"
DEFAULT_MAX_RETRIES = 4
#: The OpenAI API answers within seconds; a minute is a stalled call.
DEFAULT_TIMEOUT_S = 60.0
#: A self-hosted server on a CPU takes up to about a minute per call when busy (5x that margin).
COMPATIBLE_TIMEOUT_S = 300.0
#: A request body is well under this; it bounds a runaway generation on a compatible server.
COMPATIBLE_MAX_TOKENS = 1024
DEFAULT_TEMPERATURE = 0.0
SCHEMA_NAME = "request_body"
#: Sampling parameters sent by default, dropped when a server rejects them (HTTP 400 naming one).
_DEFAULT_SAMPLING = ("temperature", "seed")


class OpenAIPlanner:
    """A :class:`~.base.Planner` backed by chat completions.

    Usage is billed usage for the OpenAI API and "reported by server" for a compatible server.
    """

    simulated = False

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        compatible: bool = False,
        max_retries: int = DEFAULT_MAX_RETRIES,
        timeout: float | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        extra_body: Mapping[str, Any] | None = None,
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
        self.timeout = timeout or (COMPATIBLE_TIMEOUT_S if compatible else DEFAULT_TIMEOUT_S)
        self.max_tokens = max_tokens or (COMPATIBLE_MAX_TOKENS if compatible else None)
        self.temperature = DEFAULT_TEMPERATURE if temperature is None else temperature
        self._explicit = {"temperature"} if temperature is not None else set()
        self._dropped: set[str] = set()
        """Default sampling parameters this server rejected; no longer sent."""
        self.extra_body = dict(extra_body or {})
        self.response_format_mode = "json_schema"
        """``json_schema``, or ``json_object`` after a compatible server rejected the schema."""
        self._client = openai.AsyncOpenAI(
            api_key=key,
            base_url=base_url,
            max_retries=max_retries,
            timeout=self.timeout,
            http_client=openai.DefaultAsyncHttpxClient(event_hooks={"request": [count_send]}),
        )

    async def plan(self, context: PlanningContext) -> Plan:
        prompt = render_prompt(context)
        messages = [{"role": "user", "content": prompt.user}]
        if prompt.system:
            messages.insert(0, {"role": "system", "content": prompt.system})
        with counting_sends() as sends:
            completion, notes = await self._complete_adapting(messages, context)
            content = _content(completion)
            request = check_request(_parse_json(content), context.request_schema, raw=content)
        reported = getattr(completion, "usage", None)
        if reported is None or not isinstance(getattr(reported, "prompt_tokens", None), int):
            usage = Usage(
                estimate_tokens(prompt.system) + estimate_tokens(prompt.user),
                estimate_tokens(content),
                estimated=True,
            )
            notes += ("usage-not-reported",)
        else:
            usage = Usage(
                reported.prompt_tokens,
                reported.completion_tokens or 0,
                estimated=False,
                reported_by_server=self.compatible,
            )
        return Plan(
            request=request,
            usage=usage,
            served_model=getattr(completion, "model", None),
            raw=content,
            notes=notes,
            retries=sends.retries,
        )

    async def aclose(self) -> None:
        await self._client.close()

    async def _complete_adapting(
        self, messages: list[dict[str, str]], context: PlanningContext
    ) -> tuple[Any, tuple[str, ...]]:
        """One completion, re-asked without what the server rejects (a default sampling
        parameter, then ``json_schema`` on a compatible server); returns it and the notes."""
        notes: list[str] = []
        mode = self.response_format_mode
        while True:
            try:
                completion = await self._complete(messages, context, mode)
            except (openai.BadRequestError, openai.UnprocessableEntityError) as exc:
                param = getattr(exc, "param", None)
                if param in _DEFAULT_SAMPLING and param not in self._explicit | self._dropped:
                    self._dropped.add(param)
                    notes.append(f"dropped:{param}")
                    continue
                if self.compatible and mode == "json_schema":
                    mode = "json_object"
                    continue
                raise self._call_error(exc) from exc
            except openai.APIStatusError as exc:
                raise self._call_error(exc) from exc
            self.response_format_mode = mode
            if mode == "json_object":
                notes.append("response_format:json_object")
            return completion, tuple(notes)

    async def _complete(
        self, messages: list[dict[str, str]], context: PlanningContext, mode: str
    ) -> Any:
        arguments: dict[str, Any] = {
            "model": self.requested_model,
            "messages": messages,
            "response_format": _response_format(context.request_schema, mode),
        }
        if "temperature" not in self._dropped:
            arguments["temperature"] = self.temperature
        if "seed" not in self._dropped:
            arguments["seed"] = context.seed
        if self.max_tokens is not None:
            key = "max_tokens" if self.compatible else "max_completion_tokens"
            arguments[key] = self.max_tokens
        if self.extra_body:
            arguments["extra_body"] = self.extra_body
        try:
            return await self._client.chat.completions.create(**arguments)
        except openai.APIResponseValidationError as exc:
            raise PlannerResponseError(f"reply is not a valid chat completion: {exc}") from exc
        except openai.APITimeoutError as exc:
            raise PlannerCallError(
                f"{self._client.base_url} did not answer within {self.timeout:g} s "
                "(raise it with the planner option timeout=SECONDS)"
            ) from exc
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


def _content(completion: object) -> str:
    """The text of the first choice; PlannerResponseError when there is no usable text."""
    if not isinstance(completion, ChatCompletion):
        raise PlannerResponseError(
            f"reply is not a chat completion: {str(completion)[:120]!r}", raw=str(completion)
        )
    if not getattr(completion, "choices", None):
        raise PlannerResponseError("chat completion has no choices")
    choice = completion.choices[0]
    message = choice.message
    if choice.finish_reason == "length":
        raise PlannerResponseError(
            "reply was cut off at the token limit before the request body ended "
            "(raise it with the planner option max_tokens=N)",
            raw=message.content,
        )
    if getattr(message, "refusal", None):
        raise PlannerResponseError(f"model refused: {message.refusal}", raw=message.refusal)
    if not message.content or not message.content.strip():
        raise PlannerResponseError("chat completion has no content", raw=message.content)
    return message.content


def _parse_json(raw: str) -> Any:
    try:
        return json.loads(_strip_fence(raw))
    except json.JSONDecodeError as exc:
        message = f"reply is not JSON ({exc.msg}): {raw[:120]!r}"
        raise PlannerResponseError(message, raw=raw) from exc


def _strip_fence(text: str) -> str:
    """Compatible servers in ``json_object`` mode sometimes wrap the JSON in a Markdown fence."""
    body = text.strip()
    if body.startswith("```") and body.endswith("```"):
        body = body[3:-3]
        first_line, _, rest = body.partition("\n")
        body = rest if first_line.strip().isalpha() or not first_line.strip() else body
    return body.strip()
