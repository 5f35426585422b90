"""``serve`` listens as uvicorn does, so every keep-alive connection gets TCP_NODELAY.

A socket made with protocol 0 (``socket.create_server``) makes asyncio skip TCP_NODELAY, and
Nagle's algorithm then meets the client's delayed ACK: ~44 ms per keep-alive request.
"""

from __future__ import annotations

import asyncio
import socket

import pytest

from invalidation_contracts.server.http import listen


async def nodelay_of_an_accepted_connection(listener: socket.socket) -> int:
    loop = asyncio.get_running_loop()
    seen: asyncio.Future[int] = loop.create_future()

    class Probe(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            sock = transport.get_extra_info("socket")
            seen.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            transport.close()

    server = await loop.create_server(Probe, sock=listener)
    host, port = listener.getsockname()[:2]
    _, writer = await asyncio.open_connection(host, port)
    try:
        return await asyncio.wait_for(seen, 10)
    finally:
        writer.close()
        server.close()


def test_a_listener_made_with_protocol_0_leaves_nagle_on() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    assert asyncio.run(nodelay_of_an_accepted_connection(listener)) == 0


def test_serve_listens_so_that_every_connection_gets_tcp_nodelay() -> None:
    listener = listen("127.0.0.1", 0)
    assert listener.proto == socket.IPPROTO_TCP
    assert asyncio.run(nodelay_of_an_accepted_connection(listener)) != 0


def test_a_port_in_use_is_an_os_error_for_the_caller() -> None:
    with listen("127.0.0.1", 0) as taken:
        with pytest.raises(OSError):
            listen("127.0.0.1", taken.getsockname()[1])


def test_several_workers_need_an_import_string() -> None:
    from invalidation_contracts.server.http import serve

    with pytest.raises(ValueError, match="import string"):
        serve(object(), workers=2)
