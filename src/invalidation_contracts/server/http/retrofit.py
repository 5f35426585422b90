"""The contract on an existing app's own routes: an ``APIRoute`` class that adds it per route.

``APIRouter(route_class=service.route_class)`` (or ``service.router()``): each route of that
router whose method and path the domain declares gets the domain route's policy check before the
endpoint runs — a violation is answered 422 with the recovery suggestions, from one registry
state — and every JSON object the endpoint answers gains the response-level contract fields of
that same state (``table_versions``, ``rules_version``, ``contract_seq``, ``contract_epoch``;
names the contract reserves).

The check runs on what the endpoint receives. An endpoint that takes the domain route's request
model gets it validated by FastAPI as always, and the policies run on that very model just before
the endpoint does (``checked``: after the app's dependencies, so its authentication answers
first). An endpoint that reads the body itself gets it checked as ``Request.json()`` reads it. A
body that does not parse or match the route's schema is left to the endpoint, so the app's own
validation and exception handlers answer it as they always did.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from fastapi import Request
from pydantic import ValidationError
from starlette.responses import Response
from starlette.types import Scope

from ...protocol.links import CONTRACT_RELATION
from ...protocol.models import Problem
from ...protocol.problems import ProtocolError
from ..asked import Asked
from ..domain import Route
from ..state import RegistryState
from .checked import PENDING, Checking, Pending, checking, model_parameters
from .discovery import add_link
from .errors import PROBLEM_MEDIA_TYPE, Handler, ProblemRoute, answer, outcome_response, problem_of
from .headers import CONTRACT_SINCE, POSITION_HEADERS, first_headers, position_of
from .openapi import STATUS_DESCRIPTIONS, ref
from .routing import effective_routes, path_matches, route_path
from .snapshot import STATE_ATTRIBUTE
from .stamping import Stamping, stamp

if TYPE_CHECKING:
    from ..domain import Domain


class Retrofitted(Checking, Stamping, Protocol):
    """What the contract on an app's own routes needs: the domain, the state to answer from
    (the client's position's, or the vouched one), the policy check and the stamps."""

    @property
    def domain(self) -> Domain: ...

    async def state_for(
        self, since: int | None = None, epoch: str | None = None
    ) -> RegistryState: ...

    def vouched(self) -> RegistryState: ...


class ContractRoute(ProblemRoute):
    """A route of an existing app that carries the contract (see the module docstring)."""

    service: Retrofitted

    def __init__(self, path: str, endpoint: Any, **kwargs: Any) -> None:
        documented = dict(kwargs.pop("responses", None) or {})
        success = kwargs.get("status_code") or 200
        for status, answer_doc in contract_responses(success).items():
            documented.setdefault(status, answer_doc)
        models = {route.request_model for route in self.service.domain.routes}
        self.model_parameters = model_parameters(endpoint, models)
        """The domain's request models the endpoint takes, by parameter name: for those the
        check runs on the model FastAPI validated (``checked``), for others on the body."""
        if self.model_parameters:
            endpoint = checking(endpoint)
        super().__init__(path, endpoint, responses=documented, **kwargs)

    def candidates(self) -> tuple[Route[Any], ...]:
        """The domain routes this route may implement: same method, and a path that is this
        route's path or ends with it (the rest being the prefix it is included under)."""
        methods = self.methods or set()
        return tuple(
            route
            for route in self.service.domain.routes
            if route.method.upper() in methods
            and (route.path == self.path or route.path.endswith(self.path))
        )

    def declared(self, path: str | None = None) -> Route[Any] | None:
        """The domain route this route implements when serving ``path`` (its full path within
        the app, prefixes included; None: this route's own path), if any."""
        path = self.path if path is None else path
        return next((r for r in self.candidates() if path_matches(r.path, path)), None)

    def get_route_handler(self) -> Handler:
        original = super(ProblemRoute, self).get_route_handler()
        service = self.service
        implemented = _implementation(self.candidates())
        parameters = self.model_parameters

        async def handler(request: Request) -> Response:
            scope = request.scope
            pending = None
            try:
                found = first_headers(scope, POSITION_HEADERS)
                if found:
                    since, epoch = position_of(found)
                    state = await service.state_for(since, epoch)
                else:  # no position: nothing to catch up to (most requests)
                    since = epoch = None
                    state = service.vouched()
                # What ``setattr(request.state, STATE_ATTRIBUTE, state)`` stores, and where
                # ``request.state`` reads it from (Starlette keeps it in the scope).
                scope.setdefault("state", {})[STATE_ATTRIBUTE] = state
                declared = implemented(scope)
                if declared is not None:
                    asked = Asked(since, epoch, lambda: request.url.path)
                    parameter = parameters.get(declared.request_model)
                    if parameter is not None:
                        pending = Pending(service, declared, parameter, state, asked, request)
                    else:
                        refusal = await _check(service, declared, request, state, asked)
                        if refusal is not None:
                            return add_link(service, request, refusal)
            except ProtocolError as exc:
                return answer(service, request, *problem_of(request, exc))
            if pending is None:
                response = await original(request)
            else:
                token = PENDING.set(pending)
                try:
                    response = await original(request)
                finally:
                    PENDING.reset(token)
                if pending.refused:
                    return response
            response = stamp(service, response, state, since, epoch)
            telemetry = service.provider.telemetry
            if telemetry is not None and declared is not None:
                telemetry.stamped(declared, response.status_code, getattr(response, "body", b""))
            return add_link(service, request, response)

        return handler


def _implementation(
    candidates: tuple[Route[Any], ...],
) -> Callable[[Scope], Route[Any] | None]:
    """The domain route a request of a route with these ``candidates`` implements, if any: the
    first whose path matches the request's path within its app. When every candidate's path is
    literal, a lookup of that path (the first candidate of a path kept) instead of a scan."""
    if not candidates:
        return lambda scope: None
    if any("{" in route.path for route in candidates):
        return lambda scope: next(
            (r for r in candidates if path_matches(r.path, route_path(scope))), None
        )
    literal: dict[str, Route[Any]] = {}
    for route in candidates:
        literal.setdefault(route.path, route)
    return lambda scope: literal.get(route_path(scope))


async def _check(
    service: Retrofitted,
    route: Route[Any],
    request: Request,
    state: RegistryState,
    asked: Asked,
) -> Response | None:
    """The refusal of a request ``route`` declares, for an endpoint that does not take the
    route's model (it reads the body itself), or None: it passes, or its body is not the model.

    The body is parsed as the endpoint will read it (``Request.json()``: ``json.loads``, whatever
    the media type, the value kept for the endpoint), so a repeated name, a ``NaN`` or a large
    body is checked like any other; a body that does not parse or validate is not a request of
    this route's model, and is left to the endpoint, which answers it as the app always did."""
    body = await request.body()
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        return None
    _share_parsed(request, payload)
    try:
        model = route.request_model.model_validate(payload)
    except ValidationError:
        return None
    # Inline, on the event loop: the state is already chosen (``state_for`` took the thread for a
    # catch-up), and a policy check reads only that in-memory state, a few µs — far less than
    # the hop to a worker thread it used to take (benchmarks/NOTES.md §9).
    outcome = service.provider.check(route, model, state, asked)
    if outcome is None:
        return None
    return outcome_response(outcome, asked.since)


def _share_parsed(request: Request, payload: Any) -> None:
    """Hand the parsed body to the endpoint: Starlette's ``Request.json()`` parses once per
    request and keeps the value in ``_json``, so the endpoint reads the very value checked."""
    vars(request).setdefault("_json", payload)


def contract_route_class(service: Retrofitted) -> type[ContractRoute]:
    return type("ContractRoute", (ContractRoute,), {"service": service})


def check_routes(service: Retrofitted, app: Any) -> None:
    """Refuse to start an app that carries the contract on some of its own routes but serves a
    domain route at no endpoint (a prefix that moved it, a typo): its policies would never run.
    """
    served: set[tuple[str, str]] = set()
    retrofitted = False
    # Paths within each mount: a request's route is matched on its path without the root_path
    # a mount adds (``route_path``), so start-up checks the very path requests are matched on.
    for path, route in effective_routes(getattr(app, "routes", ()), mount_paths=False):
        if getattr(route, "service", None) is not service:
            continue
        retrofitted = retrofitted or isinstance(route, ContractRoute)
        served.update((method.upper(), path) for method in getattr(route, "methods", None) or ())
    if not retrofitted:
        return
    missing = [
        f"{route.method.upper()} {route.path}"
        for route in service.domain.routes
        if not any(m == route.method.upper() and path_matches(route.path, p) for m, p in served)
        and (route.method.upper(), route.path) not in served
    ]
    if missing:
        raise RuntimeError(
            f"domain {service.domain.name!r} declares {', '.join(missing)}, which no route of "
            "service.router() serves at that full path (prefixes included); its policies would "
            "never run. Declare the endpoint at that path, or fix the domain's Route path."
        )


def contract_responses(success: int) -> dict[int | str, dict[str, Any]]:
    """What the contract adds to a retrofitted route's OpenAPI: the stamps on its success, the
    policy violation (422) and the unavailable worker (503), both problem documents."""
    stamps = (
        "The endpoint's own answer; a JSON object gains the response-level contract fields "
        "`table_versions`, `rules_version`, `contract_seq` and `contract_epoch` (SPEC §3)."
    )
    problem_doc = {"model": Problem, "content": {PROBLEM_MEDIA_TYPE: {"schema": ref(Problem)}}}
    return {
        success: {
            "description": stamps,
            "headers": {
                CONTRACT_SINCE: {
                    "description": "Echoes the request's Contract-Since (conditional form).",
                    "schema": {"type": "integer", "minimum": 0},
                },
                "Link": {
                    "description": f'`<…/contract>; rel="{CONTRACT_RELATION}"`: where the '
                    "contract routes live (SPEC §8).",
                    "schema": {"type": "string"},
                },
            },
        },
        422: {
            "description": "Policy violation (`policy-violation`, with `recovery_feedback`), or a "
            "malformed Contract-Since / Contract-Epoch (`invalid-request`). A body the route's "
            "schema refuses is answered by the app's own validation.",
            **problem_doc,
        },
        503: {"description": STATUS_DESCRIPTIONS[503], **problem_doc},
    }
