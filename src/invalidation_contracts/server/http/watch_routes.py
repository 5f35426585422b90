"""``GET /contract/watch``: the registry's moves as Server-Sent Events (SPEC §8.4).


Push over plain HTTP: an idle agent hears of a change as it commits and evicts what it made stale
before its next request. The stream itself is ``server.watch``; this module is its HTTP edge —
validating the position (410 for another epoch or a position past the head, before any byte is
streamed), catching a worker up to a position another worker gave the client (SPEC §8.2, 3.),
and documenting the route.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Annotated, Protocol

from fastapi import APIRouter, Query, Request
from pydantic import WithJsonSchema
from starlette.responses import StreamingResponse

from ...protocol.levels import Level
from ...protocol.problems import ProblemType, ProtocolError
from ..tables import MAX_SAFE_INTEGER
from ..watch import (
    DEFAULT_WATCH_TIMEOUT_S,
    MAX_WATCH_STREAMS,
    MAX_WATCH_STREAMS_PER_CLIENT,
    MAX_WATCH_TIMEOUT_S,
    WATCH_HEARTBEAT_S,
    WatchHub,
    watch_stream,
)
from .openapi import STATUS_DESCRIPTIONS

if TYPE_CHECKING:
    from ..registry import Registry
    from ..state import RegistryState


class Watchable(Protocol):
    """What the watch route needs: the registry, whether the worker vouches for it, the level
    check, and the state at a client's position."""

    @property
    def registry(self) -> Registry: ...

    @property
    def available(self) -> bool: ...

    def require_level(self, level: Level, what: str) -> None: ...

    async def state_for(
        self, since: int | None = None, epoch: str | None = None
    ) -> RegistryState: ...


EVENT_STREAM = "text/event-stream"

_DESCRIPTION = (
    "One `versions` event (`id` = contract_seq, data `{contract_seq, contract_epoch}`) for each "
    "position after `since` (coalesced), a `: heartbeat` comment when idle, and an `error` event "
    "(a problem document) that ends the stream when the history is replaced."
)


def add_watch_route(router: APIRouter, service: Watchable) -> None:
    """Add ``GET /contract/watch`` to ``router`` (one hub per router, fed by the registry).

    The hub's caps are the service's ``watch_max_streams`` and ``watch_max_per_client`` (set by
    ``serve --max-watch-streams`` / ``--max-watch-per-client``), read at each watch; a client
    is its address (uvicorn's, so a trusted proxy's ``X-Forwarded-For``)."""
    hub = WatchHub(service.registry)

    @router.get(
        "/contract/watch",
        tags=["contract"],
        summary="The contract's moves as Server-Sent Events (the Kubernetes watch model)",
        response_class=StreamingResponse,
        responses={
            200: {"description": _DESCRIPTION, "content": {EVENT_STREAM: {}}},
            **{
                status: {"description": STATUS_DESCRIPTIONS[status]}
                for status in (404, 410, 422, 500, 503)
            },
        },
    )
    async def watch(
        request: Request,
        since: Annotated[
            int | None,
            Query(ge=0, le=MAX_SAFE_INTEGER, description="The last seq the client has seen."),
            WithJsonSchema({"type": "integer", "minimum": 0, "maximum": MAX_SAFE_INTEGER}),
        ] = None,
        epoch: Annotated[
            str | None,
            Query(max_length=128, description="The epoch `since` belongs to."),
            WithJsonSchema({"type": "string", "maxLength": 128}),
        ] = None,
        timeout: Annotated[
            int,
            Query(ge=1, le=MAX_WATCH_TIMEOUT_S, description="Seconds before the server ends it."),
        ] = DEFAULT_WATCH_TIMEOUT_S,
    ) -> StreamingResponse:
        service.require_level(Level.STRUCTURED, "GET /contract/watch")
        state = await service.state_for(since, epoch)
        if epoch is not None and epoch != state.epoch:
            raise ProtocolError(
                ProblemType.RESYNC_REQUIRED, f"epoch {epoch!r} is not this registry's history"
            )
        if since is not None and since > state.seq:
            raise ProtocolError(
                ProblemType.RESYNC_REQUIRED,
                f"position {since} is not in this history (last is {state.seq})",
            )
        hub.max_streams = int(getattr(service, "watch_max_streams", MAX_WATCH_STREAMS))
        hub.max_per_client = int(
            getattr(service, "watch_max_per_client", MAX_WATCH_STREAMS_PER_CLIENT)
        )
        # Claimed before the response starts: over a cap is a 503 with Retry-After (SPEC 8.4).
        slot = hub.claim(request.client.host if request.client is not None else "")
        body = watch_stream(
            slot,
            lambda: service.registry.state,
            since=since,
            epoch=state.epoch,
            timeout_s=float(timeout),
            heartbeat_s=float(getattr(service, "watch_heartbeat_s", WATCH_HEARTBEAT_S)),
            available=lambda: service.available,
        )
        weakref.finalize(body, slot.release)  # a stream dropped before its first byte
        return StreamingResponse(
            body,
            media_type=EVENT_STREAM,
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )
