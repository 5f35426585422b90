"""Liveness and readiness of one worker: ``GET /contract/live`` and ``GET /contract/ready``.

Both answer from what the worker already knows (no database call), so a probe never queues
behind the database it is asking about. Ready: the worker confirmed within ``max_lag_s`` that it
is at the shared head, so it stamps; not ready: ``503 registry-unavailable`` with ``Retry-After``
(as every domain and contract route answers then), carrying the same fields as extension members.
Live: the follower thread runs and its loop turns; not live means only a restart helps.
"""

from __future__ import annotations

import json
import os
from functools import partial
from typing import Any, Protocol

from fastapi import APIRouter
from pydantic import Field
from starlette.responses import Response

from ...protocol.models import WireModel
from ...protocol.problems import ProblemType, problem
from ..worker.contract import RETRY_AFTER_S
from ..worker.runtime import WorkerHealth
from .errors import PROBLEM_MEDIA_TYPE


class Probed(Protocol):
    """What the probes need: the worker's health, known without I/O."""

    def health(self) -> WorkerHealth: ...


class HealthReport(WireModel):
    """A worker's state as the probes report it."""

    live: bool = Field(description="The follower runs; false: restart this worker.")
    ready: bool = Field(description="Confirmed current within max_lag_s: it stamps responses.")
    state: str = Field(
        description="idle, following, catching-up (consuming a capture backlog in batches), "
        "retrying (the databases fail), stopped, dead, standalone."
    )
    contract_epoch: str = Field(description="The epoch of the last confirmed position.")
    contract_seq: int = Field(description="The seq of the last confirmed position.")
    lag_s: float = Field(description="Seconds since the worker last confirmed it was current.")
    max_lag_s: float = Field(description="Beyond this lag the worker answers 503.")
    capture_leader: dict[str, bool] = Field(
        default_factory=dict,
        description="Per SQL source: whether this worker consumes its change capture.",
    )
    catching_up: dict[str, int | None] | None = Field(
        default=None,
        description="(ext) Per SQL source this worker is consuming a capture backlog of: the "
        "records still waiting (null: unknown). Omitted when it is not catching up.",
    )
    reason: str | None = Field(default=None, description="Why the worker is not ready.")
    pid: int = Field(description="The worker's process id (which worker answered).")

    @classmethod
    def of(cls, health: WorkerHealth) -> HealthReport:
        return cls(
            live=health.live,
            ready=health.ready,
            state=str(health.state),
            contract_epoch=health.epoch,
            contract_seq=health.seq,
            lag_s=health.lag_s,
            max_lag_s=health.max_lag_s,
            capture_leader=dict(health.leads),
            catching_up=dict(health.backlog) or None,
            reason=health.reason,
            pid=os.getpid(),
        )


def report(health: WorkerHealth, ok: bool, detail: str) -> Response:
    """200 with the report, or 503 ``registry-unavailable`` carrying it as extension members."""
    body = HealthReport.of(health)
    headers = {"Cache-Control": "no-store"}
    if ok:
        return Response(body.to_json(), media_type="application/json", headers=headers)
    document: dict[str, Any] = problem(ProblemType.REGISTRY_UNAVAILABLE, detail).to_wire()
    document.update(body.to_wire())
    return Response(
        json.dumps(document, separators=(",", ":")).encode(),
        status_code=503,
        media_type=PROBLEM_MEDIA_TYPE,
        headers={**headers, "Retry-After": str(RETRY_AFTER_S)},
    )


def add_health_routes(router: APIRouter, service: Probed) -> None:
    """``/contract/live`` and ``/contract/ready`` on ``router``."""
    unavailable: dict[int | str, dict[str, Any]] = {
        503: {
            "description": "Not live / not ready (`registry-unavailable`), with `Retry-After`; "
            "the report's fields are extension members of the problem document.",
            "content": {PROBLEM_MEDIA_TYPE: {"schema": {"type": "object"}}},
        }
    }

    probe = partial(router.get, tags=["health"], response_model=HealthReport, responses=unavailable)

    @probe("/contract/live", summary="Liveness: the worker's follower runs")
    async def live() -> Response:
        health = service.health()
        detail = "the follower thread is not running; restart this worker"
        return report(health, health.live, detail)

    @probe(
        "/contract/ready", summary="Readiness: the worker confirmed it is current within max_lag_s"
    )
    async def ready() -> Response:
        health = service.health()
        detail = (
            "this worker cannot read the registry, so it answers nothing it cannot vouch for"
            + (f": {health.reason}" if health.reason else "")
        )
        return report(health, health.ready and health.live, detail)
