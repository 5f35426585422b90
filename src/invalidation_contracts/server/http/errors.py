"""Every error as an RFC 9457 problem document carrying the contract fields of the current state.

Two ways in: ``ProblemRoute`` turns the errors of the contract's own routes into problem documents
whatever app they are included in (the app's exception handlers are never touched), and
``install_problem_handlers`` does the same app-wide for the standalone app (``create_app``),
where routing errors (404, 405) are the contract's too. A worker that cannot read its registry
answers 503 without contract fields: it sends no stamps it cannot vouch for. Request bodies are
read here too, strictly (``parse_json``, ``read_json``, ``read_model``): a body that is not
interoperable JSON is a problem document like any other error, never a stack trace.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Callable, Coroutine, Iterable, Mapping
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response

from ...protocol.headers import is_json_media_type
from ...protocol.models import Problem, WireModel
from ...protocol.problems import ProblemType, ProtocolError, problem
from ..config import DEFAULT_MAX_BODY_BYTES as DEFAULT_MAX_BODY_BYTES
from ..faults import PolicyError
from ..ingest import SourceError
from ..provider import Outcome, validation_errors
from ..store import StorageError
from ..tables import MAX_SAFE_INTEGER as SAFE_INTEGER
from .discovery import Discoverable, add_link
from .headers import CONTRACT_SINCE, lenient_epoch, lenient_since

if TYPE_CHECKING:
    from ...protocol.models import ContractFields
    from ..registry import Registry
    from ..state import RegistryState


class Answering(Discoverable, Protocol):
    """What answering a problem needs: whether the worker vouches for its state, that state's
    contract fields, and the contract's location (``discovery``)."""

    @property
    def available(self) -> bool: ...

    @property
    def registry(self) -> Registry: ...

    def contract(
        self, state: RegistryState, since: int | None = None, epoch: str | None = None
    ) -> ContractFields: ...


PROBLEM_MEDIA_TYPE = "application/problem+json"
MAX_JSON_DEPTH = 64

M = TypeVar("M", bound=BaseModel)

#: Statuses Starlette raises itself (routing), mapped to the protocol's problem types.
_HTTP_STATUS_TYPES = {
    ProblemType.NOT_FOUND.status: ProblemType.NOT_FOUND,
    ProblemType.METHOD_NOT_ALLOWED.status: ProblemType.METHOD_NOT_ALLOWED,
    ProblemType.PAYLOAD_TOO_LARGE.status: ProblemType.PAYLOAD_TOO_LARGE,
    ProblemType.UNSUPPORTED_MEDIA_TYPE.status: ProblemType.UNSUPPORTED_MEDIA_TYPE,
}


def problem_response(
    body: Problem, headers: Mapping[str, str] | None = None, content: bytes | None = None
) -> Response:
    """``body`` as ``application/problem+json``; ``content``: its encoding, if already made."""
    return Response(
        body.to_json() if content is None else content,
        status_code=body.status,
        headers=dict(headers or {}),
        media_type=PROBLEM_MEDIA_TYPE,
    )


def status_problem_type(status: int) -> ProblemType | None:
    """The protocol problem type of an HTTP status Starlette raised, if the protocol names one."""
    return _HTTP_STATUS_TYPES.get(status)


def plain_status_problem(status: int, detail: str | None = None) -> Problem:
    """RFC 9457 ``about:blank`` document for a status the protocol has no type for."""
    try:
        title = HTTPStatus(status).phrase
    except ValueError:
        title = "Error"
    return Problem(title=title, status=status if 400 <= status <= 599 else 500, detail=detail)


def request_validation_errors(errors: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """FastAPI's parameter errors as ``{loc, msg, type}`` items, the shape the core gives bodies."""
    return [
        {
            "loc": [str(p) for p in err.get("loc", ())],
            "msg": str(err.get("msg", "")),
            "type": str(err.get("type", "")),
        }
        for err in errors
    ]


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The request body, refused (413) past ``max_bytes`` whether declared or streamed."""
    declared = (request.headers.get("content-length") or "").strip()
    if (
        declared.isascii()
        and declared.isdigit()
        and (len(declared) > 18 or int(declared) > max_bytes)
    ):
        raise _too_large(max_bytes)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise _too_large(max_bytes)
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json(request: Request, max_bytes: int = DEFAULT_MAX_BODY_BYTES) -> Any:
    """The request's JSON body: 415 unless JSON, 413 when too large, 400/422 when not I-JSON."""
    content_type = request.headers.get("content-type")
    if not is_json_media_type(content_type):
        raise ProtocolError(
            ProblemType.UNSUPPORTED_MEDIA_TYPE,
            f"send the body as application/json, not {content_type or 'no content type'}",
        )
    return parse_json(await read_body(request, max_bytes))


async def read_model(
    request: Request, model: type[M], max_bytes: int = DEFAULT_MAX_BODY_BYTES
) -> M:
    """The request body parsed and validated as ``model`` (422 invalid-request with the errors)."""
    payload = await read_json(request, max_bytes)
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        raise ProtocolError(
            ProblemType.INVALID_REQUEST,
            f"the body does not match the {model.__name__} schema",
            errors=validation_errors(exc),
        ) from None


def parse_json(raw: bytes) -> Any:
    """Parse ``raw`` as I-JSON (RFC 7493): UTF-8, no duplicate names, interoperable numbers.

    Syntax errors, NaN/Infinity and repeated member names are 400 malformed-json; JSON that
    canonical JSON cannot carry (integers beyond ±(2^53-1), numbers beyond double precision, lone
    surrogates, nesting deeper than ``MAX_JSON_DEPTH``) is 422 invalid-request.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(
            ProblemType.MALFORMED_JSON, f"the body is not UTF-8 (byte {exc.start})"
        ) from None
    try:
        value = _STRICT.decode(text)
    except json.JSONDecodeError as exc:
        raise ProtocolError(
            ProblemType.MALFORMED_JSON, f"{exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except _NotJSON as exc:
        raise ProtocolError(ProblemType.MALFORMED_JSON, str(exc)) from None
    except ValueError:
        # json.loads refuses integer literals past sys.get_int_max_str_digits() (4,300 digits).
        raise _not_interoperable((), "an integer with too many digits") from None
    except RecursionError:
        raise ProtocolError(
            ProblemType.MALFORMED_JSON, "the body is nested too deeply to parse"
        ) from None
    if _may_not_interoperate(text):
        _check_interoperable(value)
    return value


def _may_not_interoperate(text: str) -> bool:
    """Whether the value parsed from ``text`` could fail ``_check_interoperable``; False only
    where it cannot, so the walk is skipped for the common small body: nesting past
    ``MAX_JSON_DEPTH`` needs more opening brackets than that; a lone surrogate (text decoded from
    UTF-8 has none) needs a ``\\u`` escape; an integer past 2^53-1 needs 16 digits in a row; a
    non-finite float (NaN and Infinity are refused by the parser) needs an exponent after a
    digit or 309 digits. Brackets, escapes and digits inside strings only make it walk."""
    return (
        text.count("{") + text.count("[") > MAX_JSON_DEPTH or _MAYBE_UNSAFE.search(text) is not None
    )


_MAYBE_UNSAFE = re.compile(r"\\u|\d{16}|\d[eE]")


class _NotJSON(ValueError):
    """Raised from the parser's hooks for input Python's json module accepts but JSON does not."""


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise _NotJSON("an object repeats a member name")
    return obj


def _reject_constant(name: str) -> NoReturn:
    raise _NotJSON(f"{name} is not a JSON value")


_STRICT = json.JSONDecoder(object_pairs_hook=_unique_object, parse_constant=_reject_constant)
"""What ``json.loads(text, object_pairs_hook=..., parse_constant=...)`` builds on every call."""


def _check_interoperable(value: object) -> None:
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        if len(path) > MAX_JSON_DEPTH:
            raise _not_interoperable(path, f"nesting deeper than {MAX_JSON_DEPTH} levels")
        if isinstance(item, dict):
            for key, child in item.items():
                _check_string(key, path)
                stack.append((child, (*path, key)))
        elif isinstance(item, list):
            stack.extend((child, (*path, i)) for i, child in enumerate(item))
        elif isinstance(item, str):
            _check_string(item, path)
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if abs(item) > SAFE_INTEGER:
                raise _not_interoperable(path, "an integer outside ±(2^53-1)")
        elif isinstance(item, float) and not math.isfinite(item):
            raise _not_interoperable(path, "a number beyond IEEE 754 double precision")


def _check_string(text: str, path: tuple[str | int, ...]) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise _not_interoperable(path, "a lone surrogate in a string") from None


def _not_interoperable(path: tuple[str | int, ...], what: str) -> ProtocolError:
    return ProtocolError(
        ProblemType.INVALID_REQUEST,
        f"the body holds {what}; bodies must be I-JSON (RFC 7493)",
        errors=[{"loc": ["body", *map(str, path)], "msg": what, "type": "i_json"}],
    )


def _too_large(max_bytes: int) -> ProtocolError:
    return ProtocolError(ProblemType.PAYLOAD_TOO_LARGE, f"the body exceeds {max_bytes} bytes")


logger = logging.getLogger(__name__)

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


def wire(
    body: WireModel, *, status: int = 200, since: int | None = None, content: bytes | None = None
) -> Response:
    """A wire object as the response (a problem document as ``application/problem+json``).

    ``content``: the body already encoded (``Outcome.content``), sent as it is.
    """
    headers = {CONTRACT_SINCE: str(since)} if since is not None else None
    if isinstance(body, Problem):
        return problem_response(body, headers, content)
    return Response(
        body.to_json() if content is None else content,
        status_code=status,
        headers=headers,
        media_type="application/json",
    )


def outcome_response(outcome: Outcome, since: int | None) -> Response:
    """A route's answer as sent (its body already encoded), echoing the client's ``since``."""
    return wire(outcome.body, status=outcome.status, since=since, content=outcome.content)


def answer(
    service: Answering,
    request: Request,
    body: Problem,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """``body`` with the request's path as ``instance`` and the current contract fields."""
    update: dict[str, Any] = {"instance": body.instance or request.url.path}
    out = dict(headers or {})
    unreadable = body.type == ProblemType.REGISTRY_UNAVAILABLE.uri
    if not unreadable and service.available:
        since = lenient_since(request)
        epoch = lenient_epoch(request) if since is not None else None
        update.update(
            service.contract(service.registry.state, since, epoch).model_dump(exclude_none=True)
        )
        if since is not None:
            out[CONTRACT_SINCE] = str(since)
    return add_link(service, request, problem_response(body.model_copy(update=update), out))


def problem_of(request: Request, exc: Exception) -> tuple[Problem, Mapping[str, str] | None]:
    """The problem document (and headers) an exception is answered with."""
    if isinstance(exc, ProtocolError):
        return exc.to_problem(), exc.extra.get("headers")
    if isinstance(exc, RequestValidationError):
        errors = request_validation_errors(exc.errors())
        detail = "a query parameter or header is invalid"
        return problem(ProblemType.INVALID_REQUEST, detail, errors=errors), None
    if isinstance(exc, StarletteHTTPException):
        kind = status_problem_type(exc.status_code)
        if kind is ProblemType.NOT_FOUND:
            body = problem(kind, f"no resource at {request.method} {request.url.path}")
        elif kind is ProblemType.METHOD_NOT_ALLOWED:
            body = problem(kind, f"{request.method} is not allowed on {request.url.path}")
        elif kind is not None:
            body = problem(kind, str(exc.detail))
        else:
            body = plain_status_problem(exc.status_code, str(exc.detail))
        return body, exc.headers
    if isinstance(exc, StorageError):
        logger.error("registry change not persisted: %s", exc)
        detail = "the change could not be persisted; the registry is unchanged"
        return problem(ProblemType.INTERNAL, detail), None
    if isinstance(exc, PolicyError):
        logger.error("%s %s: provider bug: %s", request.method, request.url.path, exc)
        return problem(ProblemType.INTERNAL, "the server failed to answer this request"), None
    if isinstance(exc, SourceError):
        logger.error("the provider's database failed: %s", exc)
        return problem(ProblemType.REGISTRY_UNAVAILABLE, str(exc)), {"Retry-After": "1"}
    return problem(ProblemType.INTERNAL, "the server failed to answer this request"), None


#: What the contract's own routes turn into problem documents themselves.
HANDLED: tuple[type[Exception], ...] = (
    ProtocolError,
    RequestValidationError,
    StarletteHTTPException,
    StorageError,
    SourceError,
    PolicyError,
)


class ProblemRoute(APIRoute):
    """A route whose protocol errors are answered as problem documents by the route itself."""

    service: Answering

    def get_route_handler(self) -> Handler:
        original = super().get_route_handler()
        service = self.service

        async def handler(request: Request) -> Response:
            try:
                response = await original(request)
            except HANDLED as exc:
                return answer(service, request, *problem_of(request, exc))
            return add_link(service, request, response)

        return handler


def problem_route_class(service: Answering) -> type[ProblemRoute]:
    return type("ContractProblemRoute", (ProblemRoute,), {"service": service})


def install_problem_handlers(app: FastAPI, service: Answering) -> None:
    """App-wide: every error of the standalone app is a problem document (``create_app``)."""

    async def on_error(request: Request, exc: Exception) -> Response:
        # For an unexpected exception Starlette re-raises after sending this, so the ASGI server
        # logs the traceback once.
        return answer(service, request, *problem_of(request, exc))

    for kind in (*HANDLED, Exception):
        app.add_exception_handler(kind, on_error)
    app.add_exception_handler(ClientDisconnect, on_disconnect)


async def on_disconnect(request: Request, exc: Exception) -> Response:
    """A client that hung up mid-body: one log line, not a 5 KB traceback per disconnect (any
    client could flood the log with them: reliability audit 2, N14). Nobody reads the answer."""
    client = request.client.host if request.client is not None else "?"
    logger.warning(
        "%s %s: the client (%s) disconnected mid-body", request.method, request.url.path, client
    )
    return Response(status_code=400)
