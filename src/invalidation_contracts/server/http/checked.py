"""The policy check of a retrofitted route, run on the model FastAPI validated for its endpoint.

An endpoint that takes the domain route's request model as a parameter is wrapped: FastAPI reads,
parses and validates the body as it always does, and the wrapper runs the route's policies on the
very model the endpoint is about to receive. What was checked is what runs — a body with a
repeated name, a ``NaN`` or of any size is checked like any other — and the body is parsed and
validated once. The route handler hands the wrapper the request's registry state and position
through a context variable, since FastAPI passes an endpoint only the parameters it declares.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import fastapi.routing
from fastapi import Request
from pydantic import BaseModel
from starlette.responses import Response

from ...protocol.problems import ProtocolError
from ..asked import Asked
from ..domain import Route
from ..state import RegistryState
from .discovery import add_link
from .errors import Answering, answer, outcome_response, problem_of

if TYPE_CHECKING:
    from ..provider import Provider


class Checking(Answering, Protocol):
    """What checking a validated model needs: the provider's policies, and problem answers."""

    @property
    def provider(self) -> Provider: ...


@dataclass(slots=True)
class Pending:
    """One request's check, set by the route handler for the endpoint's wrapper to run."""

    service: Checking
    route: Route[Any]
    parameter: str
    state: RegistryState
    asked: Asked
    request: Request
    refused: bool = False
    """Whether the wrapper answered instead of the endpoint (the answer is then final)."""

    def refusal(self, arguments: dict[str, Any]) -> Response | None:
        """The 422 answer when the endpoint's validated model violates a policy, else None."""
        model = arguments.get(self.parameter)
        if not isinstance(model, self.route.request_model):
            return None  # an optional body the client did not send: nothing to check
        try:
            outcome = self.service.provider.check(self.route, model, self.state, self.asked)
        except ProtocolError as exc:
            self.refused = True
            return answer(self.service, self.request, *problem_of(self.request, exc))
        if outcome is None:
            return None
        self.refused = True
        return add_link(self.service, self.request, outcome_response(outcome, self.asked.since))


PENDING: ContextVar[Pending | None] = ContextVar("invalidation_contracts_pending", default=None)
"""The check of the request being answered, if its endpoint is wrapped (one per request task)."""


def model_parameters(
    endpoint: Callable[..., Any], models: Iterable[type[BaseModel]]
) -> dict[type[BaseModel], str]:
    """Each of ``models`` that ``endpoint`` takes as a parameter (``Model`` or ``Model | None``),
    with the first such parameter's name. Empty when the endpoint cannot be wrapped: not a plain
    function or coroutine function, or annotations that do not resolve."""
    if not inspect.isfunction(endpoint) and not inspect.ismethod(endpoint):
        return {}
    if inspect.isgeneratorfunction(endpoint) or inspect.isasyncgenfunction(endpoint):
        return {}
    try:
        hints = typing.get_type_hints(endpoint)
        names = list(inspect.signature(endpoint).parameters)
    except (NameError, TypeError, ValueError):
        return {}
    wanted = set(models)
    found: dict[type[BaseModel], str] = {}
    for name in names:
        for model in _models(hints.get(name)):
            if model in wanted:
                found.setdefault(model, name)
    return found


def _models(annotation: object) -> tuple[object, ...]:
    """The classes an annotation names: itself, or the members of an ``X | None`` union."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = typing.get_args(annotation)
        if len(members) == 2 and type(None) in members:
            return tuple(m for m in members if m is not type(None))
        return ()
    return (annotation,)


def checking(endpoint: Callable[..., Any]) -> Callable[..., Any]:
    """``endpoint``, running the pending check (if any) on its arguments first; FastAPI sees the
    endpoint's own signature (``functools.wraps``) and runs a sync one in its thread pool, which
    carries the context variable along."""
    if inspect.iscoroutinefunction(endpoint):

        @functools.wraps(endpoint)
        async def checked_async(*args: Any, **kwargs: Any) -> Any:
            refusal = _refusal(kwargs)
            return refusal if refusal is not None else await endpoint(*args, **kwargs)

        _name_the_endpoint(checked_async, endpoint)
        return checked_async

    @functools.wraps(endpoint)
    def checked(*args: Any, **kwargs: Any) -> Any:
        refusal = _refusal(kwargs)
        return refusal if refusal is not None else endpoint(*args, **kwargs)

    _name_the_endpoint(checked, endpoint)
    return checked


def _refusal(arguments: dict[str, Any]) -> Response | None:
    """The pending check's refusal of the endpoint's ``arguments``, if a check is pending."""
    pending = PENDING.get()
    return None if pending is None else pending.refusal(arguments)


def _name_the_endpoint(wrapper: Callable[..., Any], endpoint: Callable[..., Any]) -> None:
    """FastAPI's validation messages name the endpoint's file and line, read once per function
    it calls and kept by its id; ``inspect.getsourcefile`` does not follow ``__wrapped__``, so
    without this they would name this module. FastAPI has no public hook for it: where its
    private cache is not there (another release), the messages name this module, nothing else
    changes (``tests/service/test_retrofit_checked.py`` notices)."""
    cache = getattr(fastapi.routing, "_endpoint_context_cache", None)
    extract = getattr(fastapi.routing, "_extract_endpoint_context", None)
    if isinstance(cache, dict) and callable(extract):
        cache[id(wrapper)] = extract(endpoint)
