"""``serve-mcp --transport http`` and ``running_http`` listen as ``serve`` does, so every
keep-alive connection gets TCP_NODELAY (reliability audit 2, N6: 48 ms per keep-alive request
with ``socket.create_server``, 4-8 ms without Nagle)."""

from __future__ import annotations

import asyncio
import socket

import pytest
from tests.service.test_serve import nodelay_of_an_accepted_connection

pytest.importorskip("mcp")

from invalidation_contracts.mcp.serve import listen  # noqa: E402


def test_the_mcp_listener_gives_every_connection_tcp_nodelay() -> None:
    with listen("127.0.0.1", 0) as listener:
        assert listener.proto == socket.IPPROTO_TCP
        assert asyncio.run(nodelay_of_an_accepted_connection(listener)) != 0


def test_the_mcp_listener_binds_ipv6_loopback_too() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    try:
        listener = listen("::1", 0)
    except OSError:
        pytest.skip("::1 cannot be bound here")
    with listener:
        assert asyncio.run(nodelay_of_an_accepted_connection(listener)) != 0
