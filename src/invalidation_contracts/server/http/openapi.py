"""The OpenAPI documentation of the contract's routes (responses as problem documents)."""

from __future__ import annotations

import copy
import functools
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from ...protocol.models import (
    ChangesFeed,
    ContractFields,
    GraphListing,
    PatchTableRequest,
    Problem,
    ReloadRequest,
    ReloadResult,
    RulesListing,
    RulesRequest,
    RulesResult,
    SuccessResponse,
)
from ..domain import Domain
from .errors import PROBLEM_MEDIA_TYPE

COMPONENTS = "#/components/schemas/{model}"
BODY_ERRORS = (400, 413, 415, 422)
AUTH_ERRORS = (401, 403)

STATUS_DESCRIPTIONS = {
    400: "Malformed JSON (`malformed-json`).",
    401: "No bearer token, or none configured (`unauthorized`).",
    403: "Wrong bearer token (`forbidden`).",
    404: "Unknown table or route, or not served at this level "
    "(`unknown-table`, `not-found`, `level-too-low`).",
    409: "The version does not move forward (`version-conflict`).",
    410: "The log no longer covers `since`, or another epoch (`resync-required`).",
    413: "The body is too large (`payload-too-large`).",
    415: "The body is not application/json (`unsupported-media-type`).",
    422: "Schema mismatch or policy violation "
    "(`invalid-request`, `invalid-rules`, `policy-violation`).",
    500: "Internal error (`internal-error`); never a stack trace.",
    503: "The worker cannot read the registry (`registry-unavailable`); no contract fields.",
}


def ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": COMPONENTS.format(model=model.__name__)}


def request_body(model: type[BaseModel], *, inline: bool = False) -> dict[str, Any]:
    """The ``requestBody`` of a route that reads its body itself (strict I-JSON parsing).

    ``inline``: the model's schema written out in full, so the route documents correctly in any
    app (FastAPI registers components only for models it parses itself).
    """
    schema = inline_schema(model) if inline else ref(model)
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def inline_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON Schema with every definition written in place (a fresh copy each call:
    pydantic's schema is made once per model, not once per app)."""
    return copy.deepcopy(_inlined(model))


@functools.cache
def _inlined(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema(ref_template="#/$defs/{model}")
    defs = schema.pop("$defs", {})

    def resolve(node: object, seen: frozenset[str]) -> Any:
        if isinstance(node, dict):
            target = node.get("$ref")
            if isinstance(target, str) and target.startswith("#/$defs/"):
                name = target.rsplit("/", 1)[1]
                if name in seen:
                    raise ValueError(f"{model.__name__}: recursive schema {name} cannot be inlined")
                return resolve(defs[name], seen | {name})
            return {key: resolve(value, seen) for key, value in node.items()}
        if isinstance(node, list):
            return [resolve(item, seen) for item in node]
        return node

    resolved: dict[str, Any] = resolve(schema, frozenset())
    return resolved


def responses(
    model: type[BaseModel], description: str, *problem_statuses: int
) -> dict[int | str, dict[str, Any]]:
    """A route's documented answers; ``model`` registers each schema wherever the router goes.

    ``Problem`` is given as a model on the first problem status only (that registers it); the
    others cite it under both media types, the document FastAPI writes for a model. A model costs
    a pydantic adapter per route, built twice per app (at the route and at its first request):
    five of them per route were a tenth of an in-process harness run.
    """
    out: dict[int | str, dict[str, Any]] = {200: {"description": description, "model": model}}
    for number, status in enumerate(sorted({*problem_statuses, 500, 503})):
        problem = {PROBLEM_MEDIA_TYPE: {"schema": ref(Problem)}}
        out[status] = {"description": STATUS_DESCRIPTIONS[status]}
        if number == 0:
            out[status] |= {"model": Problem, "content": problem}
        else:
            out[status]["content"] = {**problem, "application/json": {"schema": ref(Problem)}}
    return out


WIRE_MODELS: tuple[type[BaseModel], ...] = (
    ReloadRequest,
    PatchTableRequest,
    RulesRequest,
    ReloadResult,
    RulesResult,
    ChangesFeed,
    GraphListing,
    RulesListing,
    ContractFields,
    SuccessResponse,
    Problem,
)


def install_openapi(app: FastAPI, domain: Domain) -> None:
    """Publish the wire models and the domain's request models under ``components/schemas``."""
    models = [*WIRE_MODELS, *(route.request_model for route in domain.routes)]

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            _, defs = models_json_schema(
                [(model, "validation") for model in dict.fromkeys(models)], ref_template=COMPONENTS
            )
            document.setdefault("components", {}).setdefault("schemas", {}).update(
                defs.get("$defs", {})
            )
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
