"""The retrofit's cheap paths answer exactly what the general ones do (brute-force oracles).

``LiteralRouter`` skips asking each of its routes when the path ends with none of them;
``strict_position`` reads both position headers in one pass over the scope; ``parse_json`` skips
the interoperability walk where a look at the text shows it cannot fail; ``stamp`` merges the
contract fields without decoding and re-encoding them. Each is checked against the plain version
on generated input: same answers, same errors.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest
from fastapi import APIRouter, FastAPI
from fastapi.testclient import TestClient
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from tests.service.conftest import TOKEN, make_domain

from invalidation_contracts.protocol.models import ContractFields
from invalidation_contracts.protocol.problems import ProtocolError
from invalidation_contracts.server import Route
from invalidation_contracts.server.http import ContractService, stamping
from invalidation_contracts.server.http.errors import (
    _check_interoperable,
    _may_not_interoperate,
    parse_json,
)
from invalidation_contracts.server.http.headers import strict_epoch, strict_position, strict_since
from invalidation_contracts.server.http.retrofit import _implementation
from invalidation_contracts.server.http.routing import LiteralRouter, path_matches, route_path
from invalidation_contracts.server.http.stamping import stamp

LITERAL = ("/contract/versions", "/contract/changes", "/admin/rules")


def _router(kind: type[APIRouter], paths: tuple[str, ...], prefix: str = "") -> APIRouter:
    router = kind(prefix=prefix)
    for path in paths:

        async def endpoint(path: str = path) -> dict[str, str]:
            return {"route": path}

        router.add_api_route(path, endpoint, methods=["GET"])
    return router


def _app(kind: type[APIRouter], paths: tuple[str, ...], prefix: str, inner: str) -> FastAPI:
    """The contract-like router under ``prefix``, then an app route of its own."""
    app = FastAPI()
    app.include_router(_router(kind, paths, inner), prefix=prefix)

    @app.get("/v1/{item}")
    async def own(item: str) -> dict[str, str]:
        return {"own": item}

    return app


def _answer(client: TestClient, method: str, path: str) -> tuple[int, str, str | None]:
    response = client.request(method, path, follow_redirects=False)
    return response.status_code, response.text, response.headers.get("location")


SEGMENTS = st.sampled_from(["api", "contract", "versions", "changes", "admin", "rules", "v1"])
PATHS = st.lists(SEGMENTS, max_size=4).map(lambda parts: "/" + "/".join(parts))


@pytest.mark.parametrize(
    ("prefix", "inner", "paths"),
    [
        ("/api", "", LITERAL),
        ("", "", LITERAL),
        ("/api", "/v2", LITERAL),
        ("/api", "", (*LITERAL, "/contract/{name}")),  # a template: no shortcut
    ],
    ids=["prefixed", "bare", "router-prefix", "templated"],
)
@given(path=PATHS, method=st.sampled_from(["GET", "POST", "HEAD"]), slash=st.booleans())
def test_a_literal_router_answers_every_request_as_a_plain_router_does(
    prefix: str, inner: str, paths: tuple[str, ...], path: str, method: str, slash: bool
) -> None:
    path = path + "/" if slash and not path.endswith("/") else path
    with (
        TestClient(_app(APIRouter, paths, prefix, inner)) as plain,
        TestClient(_app(LiteralRouter, paths, prefix, inner)) as literal,
    ):
        assert _answer(literal, method, path) == _answer(plain, method, path)


def test_a_route_added_after_the_first_request_is_served() -> None:
    router = _router(LiteralRouter, LITERAL)
    app = FastAPI()
    app.include_router(router, prefix="/api")
    with TestClient(app) as client:
        assert client.get("/api/contract/versions").status_code == 200
        assert client.get("/api/contract/late").status_code == 404

        @router.get("/contract/late")
        async def late() -> dict[str, str]:
            return {"late": "yes"}

        assert client.get("/api/contract/late").json() == {"late": "yes"}


def test_a_wrong_method_on_a_literal_route_is_still_405() -> None:
    with TestClient(_app(LiteralRouter, LITERAL, "/api", "")) as client:
        assert client.post("/api/contract/versions").status_code == 405


HEADER_NAMES = st.sampled_from([b"contract-since", b"contract-epoch", b"content-type", b"x-other"])
HEADER_VALUES = st.one_of(
    st.sampled_from([b"0", b"12", b" 7 ", b"-1", b"1.5", b"9007199254740992", b"", b"ep-1"]),
    st.binary(max_size=80),
)


def _outcome(read: Any) -> tuple[str, Any]:
    try:
        return "ok", read()
    except ProtocolError as exc:
        return "error", (exc.kind, exc.detail, exc.extra)


@given(headers=st.lists(st.tuples(HEADER_NAMES, HEADER_VALUES), max_size=6))
def test_strict_position_reads_what_the_two_header_readers_read(
    headers: list[tuple[bytes, bytes]],
) -> None:
    scope = {"type": "http", "headers": headers}
    request = Request(scope)

    def separately() -> tuple[int | None, str | None]:
        return strict_since(request), strict_epoch(request)

    assert _outcome(lambda: strict_position(scope)) == _outcome(separately)


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**60), max_value=2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(categories=["L", "N", "Cs", "P"]), max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=30,
)
EDGE_TEXTS = [
    "1e999",
    "[-1E400]",
    "9007199254740992",
    "[9007199254740991, -9007199254740991]",
    '"\\ud800"',
    '{"\\udfff": 1}',
    "[" * 65 + "]" * 65,
    "[" * 64 + "]" * 64,
    "1" * 400 + ".5",
    '{"plan": "enterprise", "funding_type": "invoice"}',
]


def _unsafe(text: str) -> bool:
    try:
        _check_interoperable(json.loads(text))
    except ProtocolError:
        return True
    return False


@given(value=JSON_VALUES, ascii_only=st.booleans())
def test_the_interoperability_walk_is_skipped_only_where_it_finds_nothing(
    value: Any, ascii_only: bool
) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    try:
        text.encode("utf-8")  # parse_json sees only text decoded from UTF-8
    except UnicodeEncodeError:
        return
    if not _may_not_interoperate(text):
        assert not _unsafe(text)


@pytest.mark.parametrize("text", EDGE_TEXTS)
def test_each_edge_of_interoperability_is_walked_or_harmless(text: str) -> None:
    assert _may_not_interoperate(text) or not _unsafe(text)
    if _unsafe(text):  # and the answer is the walk's
        with pytest.raises(ProtocolError):
            parse_json(text.encode())


RESERVED = ["table_versions", "rules_version", "contract_seq", "contract_epoch"]
DOCUMENTS = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(st.characters(categories=["L", "N", "Cs", "P", "Cc", "Zs"]), max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(RESERVED) | st.text(max_size=4), inner, max_size=5)
    ),
    max_leaves=30,
)
WRITINGS = st.sampled_from(
    [
        {"separators": (",", ":"), "ensure_ascii": False},  # what JSONResponse sends
        {"separators": (",", ":"), "ensure_ascii": True},
        {},  # spaces after separators
        {"indent": 1},
    ]
)
WRAPPINGS = st.sampled_from(["{}", " {} ", "{} \n", "\ufeff{}", "{}x", "[{}]"])
ENCODINGS = st.sampled_from(["utf-8", "utf-8", "utf-16", "utf-16-le", "utf-32"])


@functools.cache
def _service() -> ContractService:
    return ContractService.open(make_domain("stamp_oracle"), admin_token=TOKEN)


def _stamped_as_defined(response: Response, since: int | None, epoch: str | None) -> Response:
    """The stamp spelled out (``server/http/stamping.py``): a body that starts with ``{`` and a
    non-NUL byte, ends with ``}``, and holds neither ``\\u`` nor a field's name in quotes is
    spliced unread: the fields' members added before its closing brace; so is a UTF-8 body that
    starts with ``{``, ends with its object and names none of the fields; any other JSON object
    is ``json.loads`` of it, updated with the fields, compactly re-encoded. The headers are kept
    but for one new content-length (and the echo)."""
    service = _service()
    media = response.media_type or response.headers.get("content-type")
    body = getattr(response, "body", None)
    if not isinstance(body, bytes) or not (media or "").lower().startswith("application/json"):
        return response
    dumped = service.contract(service.state(), since, epoch).model_dump(exclude_none=True)
    members = json.dumps(dumped, separators=(",", ":"), ensure_ascii=False)[1:-1]
    utf8 = body[:1] == b"{" and b"\x00" not in body[:2] and body[-1:] == b"}"
    quoted = [json.dumps(name).encode() for name in dumped]
    if utf8 and b"\\u" not in body and not any(name in body for name in quoted):
        separator = "," if body[1:-1].strip(b" \t\n\r") and members else ""
        content = body[:-1] + (separator + members).encode("utf-8") + b"}"
        return _with_headers(response, content, since)
    try:
        document = json.loads(body)
    except ValueError:
        return response
    if not isinstance(document, dict):
        return response
    if utf8 and not set(dumped) & set(document):
        separator = "," if document and members else ""
        content = body[:-1] + (separator + members).encode("utf-8") + b"}"
    else:
        document.update(dumped)
        content = json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return _with_headers(response, content, since)


def _with_headers(response: Response, content: bytes, since: int | None) -> Response:
    replaced = (b"content-length", b"contract-since")
    headers = [(k, v) for k, v in response.raw_headers if k.lower() not in replaced]
    headers.append((b"content-length", str(len(content)).encode()))
    if since is not None:
        headers.append((b"contract-since", str(since).encode()))
    answer = Response(content, status_code=response.status_code)
    answer.raw_headers = headers
    return answer


def _sent(make: Any, stamping: Any) -> tuple[str, Any]:
    try:
        answer = stamping(make())
    except Exception as exc:  # the stamp may fail as the definition does (a lone surrogate)
        return "error", type(exc)
    return "ok", (answer.status_code, bytes(answer.body), list(answer.raw_headers))


@given(
    document=DOCUMENTS,
    writing=WRITINGS,
    wrapping=WRAPPINGS,
    encoding=ENCODINGS,
    media=st.sampled_from(["application/json", "application/JSON; charset=utf-8", "text/plain"]),
    as_json_response=st.booleans(),
    extra=st.sampled_from([[], [(b"Content-Length", b"3")], [(b"contract-since", b"9")]]),
    position=st.sampled_from([(None, None), (0, None), (3, "other-epoch")]),
)
def test_the_stamp_sends_the_bytes_its_definition_does(
    document: Any,
    writing: dict[str, Any],
    wrapping: str,
    encoding: str,
    media: str,
    as_json_response: bool,
    extra: list[tuple[bytes, bytes]],
    position: tuple[int | None, str | None],
) -> None:
    try:
        text = json.dumps(document, **writing)
    except ValueError:
        return
    try:
        body = wrapping.replace("{}", text).encode(encoding, "surrogatepass")
    except UnicodeEncodeError:
        return
    since, epoch = position

    def make() -> Response:
        if as_json_response:
            answer: Response = JSONResponse(None, headers={"X-Shop": "kept"})
            answer.body = body
            answer.raw_headers[:] = [(b"content-type", media.encode()), (b"x-shop", b"kept")]
        else:
            answer = Response(body, media_type=media, headers={"X-Shop": "kept"})
        answer.raw_headers.extend(extra)
        return answer

    fast = _sent(make, lambda answer: stamp(_service(), answer, _service().state(), since, epoch))
    assert fast == _sent(make, lambda answer: _stamped_as_defined(answer, since, epoch))


@pytest.mark.parametrize(
    "body",
    [
        b"{}",
        b"{ \t\n}",
        b'{"a":1}',
        b'{"a":{"table_versions":1}}',
        b'{"table_versions":1,"a":2}',
        b'{"a":"\\u00e9"}',
        b"{not json}",
        b"{\x0c}",
        b"{",
        b"{\x00}",
        b'{"a":1} ',
        b'{"a":1}{}',
        b'{"a":"\\ud800"}',
        b"\xff",
        '{"a":1}'.encode("utf-16-le"),
        "{}".encode("utf-16-le"),
    ],
)
def test_the_stamp_of_each_edge_body_is_its_definitions(body: bytes) -> None:
    def make() -> Response:
        return Response(body, media_type="application/json")

    service = _service()
    fast = _sent(make, lambda answer: stamp(service, answer, service.state(), None, None))
    assert fast == _sent(make, lambda answer: _stamped_as_defined(answer, None, None))


TEMPLATES = st.sampled_from(
    ["/v1/orders", "/api/v1/orders", "/orders", "/v1/{item}", "/v1/orders/{id}", "/{any}/orders"]
)


@given(
    paths=st.lists(TEMPLATES, max_size=4),
    path=st.sampled_from(["/v1/orders", "/api/v1/orders", "/v1/x", "/v2/orders", "/orders", ""]),
    root=st.sampled_from(["", "/api", "/shop"]),
)
def test_the_route_a_request_implements_is_the_first_candidate_its_path_matches(
    paths: list[str], path: str, root: str
) -> None:
    candidates = tuple(Route(template, PassingModel, []) for template in paths)
    scope = {"type": "http", "path": root + path, "root_path": root}
    scan = next((r for r in candidates if path_matches(r.path, route_path(scope))), None)
    assert _implementation(candidates)(scope) is scan


class PassingModel(BaseModel):
    """A request model (the matching never looks at it)."""


def test_the_stamps_grouped_searches_find_each_contract_field_name_and_only_those() -> None:
    fields = ContractFields(
        table_versions={"t": "1"}, rules_version="r", contract_seq=1, contract_epoch="e"
    )
    encoded = stamping._encoded(fields)
    for name in ContractFields.model_fields:
        body = b'{"a":1,"' + name.encode() + b'":2}'
        assert stamping._unread(body, encoded) is None, name  # read: the name is a member
    for body in (b'{"api_version":1,"contract":2}', b'{"a":"x_y"}', b'{"a":1}'):
        assert stamping._unread(body, encoded) == body[:-1] + b"," + encoded[1] + b"}"
