"""``serve-mcp --log-format json`` (issue 42): the same option and code path as ``serve``'s, so
every stderr line of a real ``serve-mcp --transport http`` is a JSON object, its history notice
and its ``serving MCP at`` line included, while it serves an MCP client."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import httpx
import pytest
from tests.service.test_header_timeout import MCP_INITIALIZE

pytestmark = pytest.mark.mcp


def _port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_every_stderr_line_of_serve_mcp_with_json_logs_is_a_json_object(tmp_path):
    port = _port()
    command = [sys.executable, "-m", "invalidation_contracts.cli", "serve-mcp"]
    command += ["--domain", "acme_billing", "--transport", "http", "--port", str(port)]
    command += ["--db", str(tmp_path / "history.sqlite"), "--log-format", "json"]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    headers = {"Accept": "application/json, text/event-stream"}
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 60.0
        while True:
            assert process.poll() is None
            try:
                answer = httpx.post(url, json=MCP_INITIALIZE, headers=headers, timeout=10.0)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert answer.status_code == 200
    finally:
        process.terminate()
        _, err = process.communicate(timeout=20)
    lines = [json.loads(line) for line in err.splitlines() if line.strip()]

    assert all({"time", "level", "logger", "message"} <= set(line) for line in lines), err
    messages = [line["message"] for line in lines]
    assert any(m.startswith("starting a new history at") for m in messages), messages
    assert f"serving MCP at http://127.0.0.1:{port}/mcp" in messages
