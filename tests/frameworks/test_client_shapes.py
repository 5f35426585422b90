"""Every client shape docs/frameworks.md names works or fails at construction with a clear message,
and none falls back to a server-name origin two servers could share (issue 38, item 1)."""

from __future__ import annotations

import pytest

pytest.importorskip("pydantic_ai")
pytest.importorskip("agents")

from fastmcp import Client  # noqa: E402
from fastmcp.client.transports import SSETransport, StdioTransport, StreamableHttpTransport  # noqa: E402

from invalidation_contracts.client import FixMemory  # noqa: E402
from invalidation_contracts.openai_agents import ContractMCPServerStreamableHttp  # noqa: E402
from invalidation_contracts.pydantic_ai import ContractToolset  # noqa: E402

URL = "http://127.0.0.1:9/mcp"


@pytest.mark.parametrize(
    ("shape", "origin"),
    [
        (URL, f"mcp+{URL}"),
        (StreamableHttpTransport(URL), f"mcp+{URL}"),
        (SSETransport("http://127.0.0.1:9/sse"), "mcp+http://127.0.0.1:9/sse"),
        (StdioTransport("acme-mcp", ["--db", "a.sqlite"]), "mcp+stdio:acme-mcp --db a.sqlite"),
    ],
    ids=["url", "streamable-http-transport", "sse-transport", "stdio-transport"],
)
def test_a_toolset_takes_its_origin_from_the_shape_s_url_or_command(shape, origin):
    toolset = ContractToolset(shape, FixMemory("row"))

    assert toolset.session_options.origin == origin


def test_a_prebuilt_fastmcp_client_is_refused_at_construction_naming_its_transport():
    with pytest.raises(TypeError, match=r"pre-built fastmcp\.Client.*client\.transport"):
        ContractToolset(Client(URL), FixMemory("row"))


def test_a_shape_without_url_or_command_is_refused_before_the_framework_sees_it():
    with pytest.raises(ValueError, match="pass origin="):
        ContractToolset(object(), FixMemory("row"))  # type: ignore[arg-type]


def test_a_named_origin_wins_over_the_one_derived_from_the_shape():
    named = ContractToolset(StreamableHttpTransport(URL), FixMemory("row"), origin="mcp://a")

    assert named.session_options.origin == "mcp://a"


def test_an_agents_sdk_server_without_a_url_is_refused_at_construction():
    with pytest.raises(ValueError, match="pass origin="):
        ContractMCPServerStreamableHttp({"url": ""}, memory=FixMemory("row"))
