"""The contract on an existing app's own routes: an ``APIRoute`` class that adds it per route.

``APIRouter(route_class=service.route_class)`` (or ``service.router()``): each route of that
router whose method and path the domain declares gets the domain route's policy check before the
endpoint runs — a violation is answered 422 with the recovery suggestions, from one registry
state — and every JSON object the endpoint answers gains the response-level contract fields of
that same state (``table_versions``, ``rules_version``, ``contract_seq``, ``contract_epoch``;
names the contract reserves). A body that is not JSON or does not match the route's schema is left
to the endpoint, so the app's own validation and exception handlers answer it as they always did.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from pydantic import ValidationError
from starlette.responses import Response

from ...protocol.headers import is_json_media_type
from ...protocol.problems import ProtocolError
from ..domain import Route
from ..http_errors import parse_json
from ..state import RegistryState
from .errors import Handler, ProblemRoute, answer, problem_of, wire
from .headers import CONTRACT_SINCE, lenient_epoch, lenient_since

STATE_ATTRIBUTE = "contract_state"
"""``request.state.contract_state``: the registry state the request was checked against."""


class ContractRoute(ProblemRoute):
    """A route of an existing app that carries the contract (see the module docstring)."""

    def declared(self) -> Route[Any] | None:
        """The domain route this route implements (same method and path), if any."""
        routes: tuple[Route[Any], ...] = tuple(self.service.domain.routes)
        for route in routes:
            if route.path == self.path and route.method.upper() in (self.methods or ()):
                return route
        return None

    def get_route_handler(self) -> Handler:
        original = super(ProblemRoute, self).get_route_handler()
        service = self.service
        declared = self.declared()

        async def handler(request: Request) -> Response:
            since, epoch = lenient_since(request), lenient_epoch(request)
            try:
                state = await service.state_for(since, epoch)
                setattr(request.state, STATE_ATTRIBUTE, state)
                if declared is not None:
                    refusal = await _check(service, declared, request, state, since, epoch)
                    if refusal is not None:
                        return refusal
            except ProtocolError as exc:
                return answer(service, request, *problem_of(request, exc))
            response = await original(request)
            return stamp(service, response, state, since, epoch)

        return handler


async def _check(
    service: Any,
    route: Route[Any],
    request: Request,
    state: RegistryState,
    since: int | None,
    epoch: str | None,
) -> Response | None:
    if not is_json_media_type(request.headers.get("content-type")):
        return None
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > service.max_body_bytes:
        return None  # the app's own limits decide
    try:
        # request.body() keeps the bytes on the request, so the endpoint reads them again.
        body = await request.body()
        if len(body) > service.max_body_bytes:
            return None
        payload = parse_json(body)
        model = route.request_model.model_validate(payload)
    except (ProtocolError, ValidationError):
        return None  # the endpoint's own validation answers it, as the app always did
    outcome = await run_in_threadpool(
        service.provider.check,
        route,
        model,
        state,
        since=since,
        epoch=epoch,
        instance=request.url.path,
    )
    if outcome is None:
        return None
    return wire(outcome.body, status=outcome.status, since=since, content=outcome.content)


def stamp(
    service: Any, response: Response, state: RegistryState, since: int | None, epoch: str | None
) -> Response:
    """``response`` with the contract fields of ``state`` merged into its JSON object body."""
    media = response.media_type or response.headers.get("content-type")
    body = getattr(response, "body", None)
    if not isinstance(body, bytes) or not is_json_media_type(media):
        return response
    try:
        document = json.loads(body)
    except ValueError:
        return response
    if not isinstance(document, dict):
        return response
    document.update(service.contract(state, since, epoch).model_dump(exclude_none=True))
    content = json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    stamped = Response(content, status_code=response.status_code, background=response.background)
    dropped = {b"content-length", CONTRACT_SINCE.lower().encode("latin-1")}
    stamped.raw_headers = [
        *((k, v) for k, v in response.raw_headers if k.lower() not in dropped),
        (b"content-length", str(len(content)).encode("latin-1")),
        *(
            [(CONTRACT_SINCE.lower().encode("latin-1"), str(since).encode())]
            if since is not None
            else []
        ),
    ]
    return stamped


def contract_route_class(service: Any) -> type[ContractRoute]:
    return type("ContractRoute", (ContractRoute,), {"service": service})
