"""serve-mcp over HTTP on any address: Host and Origin checked, a bearer token off loopback, the
graph protectable, a stalled body cut off. Real uvicorn servers, all listening on 127.0.0.1 (an
app guarded as if bound to 0.0.0.0 is served on loopback)."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import httpx2
import pytest
import uvicorn
from mcp.client.streamable_http import streamable_http_client
from tests.mcp.conftest import run

from invalidation_contracts.cli import main
from invalidation_contracts.client import FixMemory
from invalidation_contracts.mcp import connect, contract_server
from invalidation_contracts.mcp.http import HttpOptions, http_app
from invalidation_contracts.mcp.serve import running_http
from invalidation_contracts.server import Provider

pytestmark = [pytest.mark.mcp, pytest.mark.timeout(120)]

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "1"},
    },
}
JSON = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


@contextlib.asynccontextmanager
async def guarded_as(server: Any, bind: str, http: HttpOptions) -> AsyncIterator[int]:
    """``server`` guarded as if bound to ``bind``, listening on 127.0.0.1 (tests stay on
    loopback); yields the port."""
    app = http_app(server, bind, http)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        runner = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(runner.serve, [listener])
            with anyio.fail_after(30):
                while not runner.started:
                    await anyio.sleep(0.01)
            try:
                yield listener.getsockname()[1]
            finally:
                runner.should_exit = True


def _initialize(server: Any, http: HttpOptions, bind: str, **headers: str) -> int:
    """The status an ``initialize`` POST gets with ``headers`` (guarded as bound to ``bind``)."""

    async def body() -> int:
        async with guarded_as(server, bind, http) as port, httpx.AsyncClient() as client:
            sent = {**JSON, **headers}
            reply = await client.post(f"http://127.0.0.1:{port}/mcp", json=INITIALIZE, headers=sent)
            return reply.status_code

    return run(body)


def test_on_loopback_a_foreign_host_is_refused(server):
    assert _initialize(server, HttpOptions(), "127.0.0.1", host="evil.example") == 421


def test_on_loopback_a_foreign_origin_is_refused(server):
    assert _initialize(server, HttpOptions(), "127.0.0.1", origin="http://evil.example") == 403


def test_on_every_address_only_the_allowed_host_and_origin_pass(server):
    http = HttpOptions(allowed_hosts=("mcp.example:*",), token="s3cret-token")
    auth = {"authorization": "Bearer s3cret-token"}

    def status(**headers: str) -> int:
        return _initialize(server, http, "0.0.0.0", **{**auth, **headers})

    assert status(host="evil.example:80") == 421
    assert status(host="mcp.example:80", origin="http://evil.example") == 403
    assert status(host="mcp.example:80") == 200


def test_an_allowed_host_named_without_a_port_is_allowed_on_any_port(server):
    """``--allowed-host mcp.example`` (the form the wildcard bind's error suggests) matches
    ``Host: mcp.example:8080`` as ``serve`` does (hostile audit H12)."""
    http = HttpOptions(allowed_hosts=("mcp.example",), token="s3cret-token")
    auth = {"authorization": "Bearer s3cret-token"}

    assert _initialize(server, http, "0.0.0.0", host="mcp.example:8080", **auth) == 200
    assert _initialize(server, http, "0.0.0.0", host="mcp.example", **auth) == 200
    assert _initialize(server, http, "0.0.0.0", host="other.example:8080", **auth) == 421


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "Bearer"])
def test_the_bearer_scheme_is_matched_case_insensitively(server, scheme):
    http = HttpOptions(allowed_hosts=("mcp.example:*",), token="s3cret-token")
    sent = {"host": "mcp.example:80", "authorization": f"{scheme} s3cret-token"}

    assert _initialize(server, http, "0.0.0.0", **sent) == 200


def test_a_token_under_another_scheme_is_refused(server):
    http = HttpOptions(allowed_hosts=("mcp.example:*",), token="s3cret-token")
    sent = {"host": "mcp.example:80", "authorization": "Basic s3cret-token"}

    assert _initialize(server, http, "0.0.0.0", **sent) == 401


def test_off_loopback_a_request_without_the_token_is_refused(server):
    http = HttpOptions(allowed_hosts=("mcp.example:*",), token="s3cret-token")

    assert _initialize(server, http, "0.0.0.0", host="mcp.example:80") == 401
    wrong = {"host": "mcp.example:80", "authorization": "Bearer guess"}
    assert _initialize(server, http, "0.0.0.0", **wrong) == 401


@pytest.mark.parametrize(
    ("host", "options", "message"),
    [
        ("0.0.0.0", HttpOptions(allowed_hosts=("mcp.example",)), "needs a bearer token"),
        ("192.0.2.7", HttpOptions(), "needs a bearer token"),
        ("0.0.0.0", HttpOptions(token="t0ken"), "--allowed-host"),
    ],
)
def test_an_unsafe_configuration_is_refused_before_it_listens(server, host, options, message):
    with pytest.raises(ValueError, match=message):
        http_app(server, host, options)


def test_the_command_refuses_a_public_bind_without_a_token(capsys, monkeypatch):
    monkeypatch.delenv("INVALIDATION_CONTRACTS_ADMIN_TOKEN", raising=False)
    argv = ["serve-mcp", "--domain", "acme_billing", "--transport", "http", "--host", "0.0.0.0"]

    assert main([*argv, "--allowed-host", "mcp.example"]) == 2
    assert "needs a bearer token" in capsys.readouterr().err


def test_a_client_with_the_token_works_on_loopback(server, acme):
    http = HttpOptions(token="s3cret-token")

    async def body() -> int:
        async with running_http(server, http=http) as url:
            client = httpx2.AsyncClient(headers={"authorization": "Bearer s3cret-token"})
            transport = streamable_http_client(url, http_client=client)
            async with client, connect(transport, FixMemory("row"), origin="mcp+" + url) as tools:
                reply = await tools.call_tool(
                    "create_subscription", acme.family("plain-starter-monthly").draft()
                )
                return reply.status

    assert run(body) == 200


def test_a_protected_graph_is_neither_listed_nor_read(acme):
    server = contract_server(Provider(acme.domain), protect_graph=True)

    async def body() -> tuple[list[str], str]:
        from mcp import Client

        async with Client(server) as client:
            listed = [str(r.uri) for r in (await client.list_resources()).resources]
            read = await client.read_resource("contract://graph")
            return listed, read.contents[0].text  # type: ignore[union-attr]

    listed, text = run(body)

    assert "contract://graph" not in listed and "contract://versions" in listed
    assert '"status":403' in text.replace(" ", "") and "protected" in text


def test_a_stalled_request_body_is_cut_off(server):
    http = HttpOptions(body_timeout_s=0.5)

    async def body() -> bytes:
        async with running_http(server, http=http) as url:
            port = int(url.rsplit(":", 1)[1].split("/")[0])

            def stall() -> bytes:
                with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                    head = (
                        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        "Content-Type: application/json\r\n"
                        "Accept: application/json, text/event-stream\r\n"
                        "Content-Length: 500\r\n\r\n{"
                    )
                    sock.sendall(head.encode())
                    started = time.monotonic()
                    answer = sock.recv(4096)
                    assert time.monotonic() - started < 8
                    return answer

            return await anyio.to_thread.run_sync(stall)

    assert run(body).startswith(b"HTTP/1.1 408")
