"""No header, query or body on any route gets a 5xx or an error that is not a problem document.

Property test against the real ASGI app through ``httpx.ASGITransport``, which passes header
bytes as sent (latin-1, superscript digits, thousands of digits) where a test client would
re-encode them. Bodies are arbitrary bytes, JSON of any shape (integers of thousands of digits
included) and bodies aimed at the real tables; admin calls carry the token half the time.
"""

from __future__ import annotations

import asyncio
import json
import string

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from invalidation_contracts.protocol.models import Problem
from invalidation_contracts.server.http.app import create_app
from invalidation_contracts.server.trust import TrustOptions

TOKEN = "s3cret-admin-token"
PROBLEM = "application/problem+json"
HEADER_NAMES = [
    "Contract-Since",
    "Contract-Epoch",
    "Contract-Sign",
    "Authorization",
    "Content-Type",
    "Accept",
    "X-Anything",
]
HUGE = "<an integer of 5,000 digits>"
"""Placed in a JSON value, then written as digits (json.dumps and repr refuse such an int)."""
LATIN1 = "".join(chr(c) for c in range(0x20, 0x100) if c != 0x7F)
NUMBERISH = st.sampled_from(
    ["0", "1", "-1", "²", "1¹", "٣", "null", "1.5", "9" * 5000, str(2**53), " 7 ", "", "0x10"]
)
header_values = st.one_of(NUMBERISH, st.text(alphabet=LATIN1, max_size=40))
headers = st.dictionaries(st.sampled_from(HEADER_NAMES), header_values, max_size=4)

json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False),
        st.text(max_size=20),
        st.sampled_from([HUGE, -(2**63), 2**53 + 1]),
    ),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


def bodies(tables: list[str]) -> st.SearchStrategy[bytes]:
    aimed = st.fixed_dictionaries(
        {"table": st.sampled_from(tables)},
        optional={
            "rows": st.dictionaries(st.text(max_size=6), json_values, max_size=3),
            "upsert": st.dictionaries(st.text(max_size=6), json_values, max_size=3),
            "delete": st.lists(st.text(max_size=6), max_size=3),
            "version": NUMBERISH | st.text(max_size=10),
        },
    )
    rules = st.fixed_dictionaries(
        {
            "rules": st.lists(
                st.fixed_dictionaries(
                    {
                        "from_table": st.sampled_from(tables) | st.text(max_size=4),
                        "to_table": st.sampled_from(tables) | st.text(max_size=4),
                        "relation": st.text(max_size=4),
                    },
                    optional={"via": st.text(max_size=4) | st.none()},
                ),
                max_size=3,
            )
        }
    )
    as_json = st.one_of(json_values, aimed, rules).map(
        lambda value: json.dumps(value).replace(json.dumps(HUGE), "9" * 5000).encode("utf-8")
    )
    return st.one_of(as_json, st.binary(max_size=64), st.just(b'{"plan": ' + b"9" * 5000 + b"}"))


def queries() -> st.SearchStrategy[dict[str, str]]:
    text = st.one_of(NUMBERISH, st.text(alphabet=string.printable, max_size=12))
    return st.dictionaries(st.sampled_from(["since", "tables", "epoch", "x"]), text, max_size=3)


def request_for(app, tables):
    # Routes a router contributes are listed by the OpenAPI document, not by ``app.routes``.
    direct = {route.path for route in app.routes if hasattr(route, "path")}
    documented = app.openapi()["paths"]
    # A stream (the watch) never ends, and the in-process transport waits for the whole body:
    # its bad input is tested over a real socket in tests/service/test_watch.py.
    streams = {
        path
        for path, operations in documented.items()
        for operation in operations.values()
        if "text/event-stream" in operation.get("responses", {}).get("200", {}).get("content", {})
    }
    paths = sorted((direct | set(documented) | {"/nope", "/admin/nope"}) - streams)
    return st.fixed_dictionaries(
        {
            "method": st.sampled_from(["GET", "POST", "PUT", "DELETE"]),
            "path": st.sampled_from(paths),
            "headers": headers,
            "query": queries(),
            "body": bodies(tables),
            "json": st.booleans(),
            "admin": st.booleans(),
        }
    )


async def send(app, request: dict) -> httpx.Response:
    headers = dict(request["headers"])
    if request["json"]:
        headers["Content-Type"] = "application/json"
    if request["admin"]:
        headers["Authorization"] = f"Bearer {TOKEN}"
    raw = {name: header_bytes(value) for name, value in headers.items()}
    transport = httpx.ASGITransport(app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://shop.test") as client:
        return await client.request(
            request["method"],
            request["path"],
            params=request["query"],
            headers=raw,
            content=request["body"] if request["method"] in ("POST", "PUT") else None,
        )


def header_bytes(value: str) -> bytes:
    """Latin-1 where it can carry the text (``²`` is one byte), else UTF-8 (as curl sends)."""
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:
        return value.encode("utf-8")


def check(response: httpx.Response) -> None:
    assert response.status_code < 500, response.text[:500]
    if response.status_code >= 400:
        assert response.headers["content-type"] == PROBLEM, response.text[:200]
        problem = Problem.model_validate_json(response.content)
        assert problem.status == response.status_code


APPS = {
    "plain": dict(),
    "signing-and-opaque": dict(
        trust=TrustOptions(
            signing_keys={"k1": Ed25519PrivateKey.generate()}, opaque_key=b"0123456789abcdef"
        )
    ),
}


@pytest.mark.parametrize("variant", sorted(APPS))
def test_no_input_on_any_route_gets_a_server_error_or_a_non_problem_error(domain, variant):
    app = create_app(domain, admin_token=TOKEN, **APPS[variant])
    tables = sorted(domain.tables)

    @settings(
        max_examples=250,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(request_for(app, tables))
    def probe(request):
        check(asyncio.run(send(app, request)))

    probe()
