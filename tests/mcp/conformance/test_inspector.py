"""The MCP Inspector CLI (pinned ``@modelcontextprotocol/inspector-cli``, on the TypeScript SDK)
against ``serve-mcp``: it lists the tools, prints a rejected call's suggestions (it exited 1 on
every rejection while error results carried the problem view as structured content), and reads
the contract's versions. Over streamable HTTP, and the rejected call over stdio too.

The Inspector is one-shot (one request a run), so notifications are left to ``test_hosts``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.mcp.conformance.conftest import GROWTH
from tests.support.mcp_hosts import inspector, serve_mcp_args

pytestmark = [pytest.mark.mcp, pytest.mark.node, pytest.mark.timeout(300)]

#: The Inspector re-splits a server argument holding a space (``--tool-name 'POST /v1/... = ...'``
#: does not reach serve-mcp whole), so over stdio the tool keeps its default name.
STDIO_TOOL = "post_v1_subscriptions"
HTTP_TOOL = "create_subscription"


def _growth_args() -> list[str]:
    return ["--tool-arg", *(f"{k}={v}" for k, v in GROWTH.items())]


def _printed(run: Any) -> dict[str, Any]:
    assert run.returncode == 0, f"the Inspector exited {run.returncode}: {run.stderr[-800:]}"
    printed = json.loads(run.stdout[run.stdout.index("{") :])
    assert isinstance(printed, dict)
    return printed


def _suggestions(result: dict[str, Any]) -> list[dict[str, Any]]:
    assert result["isError"] is True and "structuredContent" not in result
    (text,) = result["content"]
    return list(json.loads(text["text"])["recovery_feedback"]["suggestions"])


def test_the_inspector_lists_the_tools_over_http(npm_modules: Path, http_url: str):
    listed = _printed(
        inspector(npm_modules, http_url, "--transport", "http", "--method", "tools/list")
    )

    assert [tool["name"] for tool in listed["tools"]] == [HTTP_TOOL]


def test_the_inspector_prints_a_rejected_calls_suggestions_over_http(
    npm_modules: Path, http_url: str
):
    called = inspector(
        npm_modules, http_url, "--transport", "http", "--method", "tools/call",
        "--tool-name", HTTP_TOOL, *_growth_args(),
    )  # fmt: skip

    (suggestion,) = _suggestions(_printed(called))
    assert set(suggestion["parameters"]) == {"promo_code"}


def test_the_inspector_prints_a_rejected_calls_suggestions_over_stdio(
    npm_modules: Path, registry: Path
):
    called = inspector(
        npm_modules, sys.executable, *serve_mcp_args(registry),
        "--method", "tools/call", "--tool-name", STDIO_TOOL, *_growth_args(),
    )  # fmt: skip

    (suggestion,) = _suggestions(_printed(called))
    assert set(suggestion["parameters"]) == {"promo_code"}


def test_the_inspector_reads_the_contract_versions_over_http(npm_modules: Path, http_url: str):
    read = _printed(
        inspector(npm_modules, http_url, "--transport", "http", "--method", "resources/read",
                  "--uri", "contract://versions")
    )  # fmt: skip

    (content,) = read["contents"]
    assert content["mimeType"] == "application/json"
    assert "contract_seq" in json.loads(content["text"])
