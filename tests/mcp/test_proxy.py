"""The memory as a local MCP proxy: a real host (the Python SDK's client) drives a real
``mcp-proxy`` process, which fronts a real upstream process (``serve-mcp``, or a server that
speaks no contract).

Each proxy or upstream start costs a second or two of imports, so the default run keeps one test
per behaviour the brief of issue 36 names (a fix carried across sessions, a drifted one evicted
while away and while connected, passthrough, a dead upstream, an unusable memory file); the
other fault cases, and the HTTP transport, run in CI's study step."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.client.client import Client
from mcp.shared.exceptions import MCPError
from tests.mcp.conftest import run
from tests.mcp.test_restart_drift import GROWTH, drift_while_away
from tests.support.proxy import TOOL, environment, origin, plain_mcp, proxy, serve_mcp

from invalidation_contracts.client import FixMemory
from invalidation_contracts.client.entries import EvictionReason
from invalidation_contracts.mcp import names

pytestmark = [pytest.mark.mcp, pytest.mark.timeout(120)]


def texts(result: types.CallToolResult) -> list[str]:
    return [block.text for block in result.content if isinstance(block, types.TextContent)]


def shows_no_contract(result: types.CallToolResult) -> bool:
    keys = set(result.meta or {})
    body = json.loads(texts(result)[0])
    hidden = {"table_versions", "contract_seq", "contract_epoch", "rules_version"}
    return not any(k.startswith(names.PREFIX) for k in keys) and not hidden & set(body)


async def call(server: Any, tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
    async with Client(server) as host:
        return await host.call_tool(tool, arguments)


def test_a_fix_learned_in_one_host_session_is_applied_in_the_next(tmp_path: Path) -> None:
    upstream, memory = serve_mcp(tmp_path / "registry.sqlite"), tmp_path / "memory.sqlite"

    first = run(lambda: call(proxy(upstream, memory), TOOL, GROWTH))
    second = run(lambda: call(proxy(upstream, memory), TOOL, GROWTH))  # a new proxy process

    assert first.is_error and first.structured_content is None
    assert "SUMMERSALE25" in texts(first)[0] and shows_no_contract(first)
    assert not second.is_error  # the proxy patched the learned code in
    assert json.loads(texts(second)[0])["success"] is True and shows_no_contract(second)


def test_a_fix_the_data_moved_under_is_evicted_before_the_next_session(tmp_path: Path) -> None:
    registry, memory = tmp_path / "registry.sqlite", tmp_path / "memory.sqlite"
    upstream = serve_mcp(registry)
    run(lambda: call(proxy(upstream, memory), TOOL, GROWTH))  # learns SUMMERSALE25
    drift_while_away(registry)  # the CSM code rotates while nothing runs

    again = run(lambda: call(proxy(upstream, memory), TOOL, GROWTH))

    with FixMemory("row", store=memory) as kept:
        reasons = [t.reason for t in kept.tombstones(origin(upstream))]
    assert reasons == [EvictionReason.ROW_CHANGED]
    assert again.is_error  # the stale code was not patched in: the upstream names the new one
    assert "SUMMERSALE25" not in texts(again)[0]


def test_a_drift_while_the_host_is_connected_is_heard_and_evicts_the_fix(tmp_path: Path) -> None:
    registry, memory = tmp_path / "registry.sqlite", tmp_path / "memory.sqlite"
    upstream = serve_mcp(registry)

    async def session() -> tuple[list[EvictionReason], types.CallToolResult]:
        async with Client(proxy(upstream, memory)) as host:
            await host.call_tool(TOOL, GROWTH)  # learns SUMMERSALE25
            await anyio.to_thread.run_sync(drift_while_away, registry)  # a SQL write upstream
            reasons: list[EvictionReason] = []
            with anyio.fail_after(60):  # the proxy hears resources/updated and evicts
                while not reasons:
                    with FixMemory("row", store=memory) as kept:
                        reasons = [t.reason for t in kept.tombstones(origin(upstream))]
                    await anyio.sleep(0.2)
            return reasons, await host.call_tool(TOOL, GROWTH)

    reasons, after = run(session)

    assert reasons == [EvictionReason.ROW_CHANGED]
    assert after.is_error and "SUMMERSALE25" not in texts(after)[0]


@pytest.mark.study  # a proxy and an upstream process more: CI's study step
def test_the_tools_the_host_lists_carry_no_contract_metadata(tmp_path: Path) -> None:
    async def listing() -> tuple[list[types.Tool], list[str]]:
        async with Client(proxy(serve_mcp(tmp_path / "r.sqlite"), tmp_path / "m.sqlite")) as host:
            tools = (await host.list_tools()).tools
            resources = [str(r.uri) for r in (await host.list_resources()).resources]
            return tools, resources

    tools, resources = run(listing)

    assert TOOL in [tool.name for tool in tools]
    assert not any(key.startswith(names.PREFIX) for tool in tools for key in tool.meta or {})
    assert not any(uri.startswith("contract:") for uri in resources)


def test_an_upstream_speaking_no_contract_is_passed_through_and_said_so(tmp_path: Path) -> None:
    log = tmp_path / "proxy.log"

    async def session() -> tuple[list[str], types.CallToolResult, str, str]:
        async with Client(proxy(plain_mcp(), tmp_path / "m.sqlite", log=log)) as host:
            tools = [tool.name for tool in (await host.list_tools()).tools]
            echoed = await host.call_tool("echo", {"text": "hi"})
            read = await host.read_resource("plain://greeting")
            prompt = await host.get_prompt("ask", {"topic": "tides"})
            content = read.contents[0]
            message = prompt.messages[0].content
            assert isinstance(content, types.TextResourceContents)
            assert isinstance(message, types.TextContent)
            return tools, echoed, content.text, message.text

    tools, echoed, resource, prompt = run(session)

    assert {"echo", "die", "hang", "big"} <= set(tools)
    assert texts(echoed) == ["hi"] and echoed.structured_content == {"result": "hi"}
    assert resource == "hello from plain" and prompt == "Tell me about tides."
    said = [line for line in log.read_text().splitlines() if "speaks no contract" in line]
    assert len(said) == 1


def test_an_upstream_killed_mid_call_is_named_and_then_started_again(tmp_path: Path) -> None:
    async def session() -> tuple[MCPError, int, int]:
        async with Client(proxy(plain_mcp(), tmp_path / "m.sqlite")) as host:
            before = await host.call_tool("pid", {})
            with pytest.raises(MCPError) as died:
                await host.call_tool("die", {})
            after = await host.call_tool("pid", {})
            return died.value, int(texts(before)[0]), int(texts(after)[0])

    error, before, after = run(session)

    assert "tests.support.plain_mcp" in error.message  # names the upstream
    assert after != before  # a new upstream process answers


@pytest.mark.study  # a proxy and an upstream process more: CI's study step
def test_the_upstreams_progress_reaches_the_host_under_its_token(tmp_path: Path) -> None:
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async def session() -> str:
        async with Client(proxy(plain_mcp(), tmp_path / "m.sqlite"), mode="legacy") as host:
            result = await host.session.call_tool("touch", {}, progress_callback=on_progress)
            assert isinstance(result, types.CallToolResult)
            return texts(result)[0]

    assert run(session) == "touched"
    assert progress == [(1, 2, "half way")]


@pytest.mark.study  # a proxy and an upstream process more: CI's study step
def test_a_hung_upstream_is_named_and_replaced(tmp_path: Path) -> None:
    async def session() -> tuple[MCPError, str]:
        async with Client(proxy(plain_mcp(), tmp_path / "m.sqlite", "--call-timeout", "1")) as host:
            with pytest.raises(MCPError) as hung:
                await host.call_tool("hang", {})
            return hung.value, texts(await host.call_tool("echo", {"text": "back"}))[0]

    error, echoed = run(session)

    assert error.code == types.REQUEST_TIMEOUT and "tests.support.plain_mcp" in error.message
    assert echoed == "back"


@pytest.mark.study  # a proxy and an upstream process more: CI's study step
def test_an_oversized_result_is_refused_naming_the_upstream(tmp_path: Path) -> None:
    bound = ("--max-result-bytes", "50000")

    async def session() -> tuple[MCPError, str]:
        async with Client(proxy(plain_mcp(), tmp_path / "m.sqlite", *bound)) as host:
            with pytest.raises(MCPError) as big:
                await host.call_tool("big", {"size": 60000})
            return big.value, texts(await host.call_tool("big", {"size": 10}))[0]

    error, small = run(session)

    assert "tests.support.plain_mcp" in error.message and "50000" in error.message
    assert small == "x" * 10  # the connection stays


@pytest.mark.study  # a proxy and an upstream process more: CI's study step
def test_a_line_that_is_not_json_rpc_does_not_break_the_session(tmp_path: Path) -> None:
    async def session() -> list[str]:
        async with Client(proxy(plain_mcp(), tmp_path / "m.sqlite")) as host:
            return texts(await host.call_tool("garbage", {}))

    assert run(session) == ["after the garbage"]


@pytest.mark.parametrize(
    "kind",
    [
        "not a fix memory",
        pytest.param("a folder", marks=pytest.mark.study),
        pytest.param("in no folder", marks=pytest.mark.study),
    ],
)
def test_a_memory_file_it_cannot_open_is_said_at_start(tmp_path: Path, kind: str) -> None:
    path = {
        "not a fix memory": tmp_path / "garbage.sqlite",
        "a folder": tmp_path,
        "in no folder": tmp_path / "missing" / "memory.sqlite",
    }[kind]
    (tmp_path / "garbage.sqlite").write_bytes(b"\x00garbage" * 512)
    command = [sys.executable, "-m", "invalidation_contracts.cli", "mcp-proxy"]
    done = subprocess.run(
        [*command, "--memory", str(path), "--", *plain_mcp()],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        env=environment(),
    )

    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0]


@pytest.mark.study  # a proxy and an upstream process more: CI's study step
@pytest.mark.timeout(240)
def test_a_host_reaches_the_proxy_over_streamable_http_on_loopback(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "invalidation_contracts.cli", "mcp-proxy"]
    options = ["--memory", str(tmp_path / "m.sqlite"), "--transport", "http", "--port", "0"]
    upstream = serve_mcp(tmp_path / "registry.sqlite")
    with subprocess.Popen(
        [*command, *options, "--", *upstream],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(),
    ) as served:
        try:
            assert served.stderr is not None
            for _ in range(20):  # a bounded read of the start-up lines
                line = served.stderr.readline()
                if "serving MCP at " in line or not line:
                    break
            url = line.rsplit(" ", 1)[-1].strip()
            assert url.startswith("http://127.0.0.1:")
            first = run(lambda: call(url, TOOL, GROWTH))
            second = run(lambda: call(url, TOOL, GROWTH))  # a new host session, one proxy
        finally:
            served.terminate()
            try:
                served.wait(timeout=20)
            except subprocess.TimeoutExpired:
                served.kill()

    assert first.is_error and not second.is_error and shows_no_contract(second)


def test_a_fix_it_cannot_patch_is_shown_in_the_tools_description(tmp_path: Path) -> None:
    upstream = serve_mcp(tmp_path / "registry.sqlite", "tests.support.acme_unpatchable:domain")

    async def session() -> tuple[types.CallToolResult, types.Tool, types.CallToolResult]:
        async with Client(proxy(upstream, tmp_path / "memory.sqlite")) as host:
            first = await host.call_tool(TOOL, GROWTH)  # learns a fix it cannot patch in
            (tool,) = (await host.list_tools()).tools
            return first, tool, await host.call_tool(TOOL, GROWTH)

    first, tool, again = run(session)

    assert first.is_error
    assert "SUMMERSALE25" in (tool.description or "")  # shown before the model's next call
    assert "table_versions" not in (tool.description or "")  # at L2: no contract
    assert again.is_error and "SUMMERSALE25" in texts(again)[-1]  # not patched; shown again


@pytest.mark.study  # a proxy and an upstream process more: CI's study step
def test_stdio_that_is_a_file_is_served_by_the_sdks_threaded_reader(tmp_path: Path) -> None:
    """The proxy reads pipes on its event loop; a regular file (``< requests.jsonl``) cannot be
    watched so, and is read as the SDK reads it."""
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "file", "version": "1"},
        },
    }
    requests, answers = tmp_path / "requests.jsonl", tmp_path / "answers.jsonl"
    requests.write_text(json.dumps(initialize) + "\n")
    command = proxy(plain_mcp(), tmp_path / "m.sqlite")
    with requests.open() as stdin, answers.open("w") as stdout:
        subprocess.run(
            [command.command, *command.args],
            stdin=stdin,
            stdout=stdout,
            stderr=subprocess.DEVNULL,
            env=command.env,
            timeout=60,
            check=True,
        )

    (answer,) = [json.loads(line) for line in answers.read_text().splitlines()]
    assert (
        answer["id"] == 1
        and answer["result"]["serverInfo"]["name"] == "invalidation-contracts-proxy"
    )
