"""Plain MCP hosts, no contract code, against ``serve-mcp`` processes: the official TypeScript SDK
(``client.callTool``, as every TypeScript host calls it) at every protocol revision it offers, and
the official Python SDK v2 on both eras (the ``initialize`` handshake, and 2026-07-28's
``server/discover``), and the Python SDK v1 (``mcp`` 1.x, in its own environment: the two share
the import name) at every revision it offers, over stdio and streamable HTTP on 127.0.0.1.

Each host lists the tools, makes a passing call, reads the suggestions of a rejected call from
the text (the model's view) and the contract from ``_meta`` (a contract client's), fixes the
call with them, and hears ``resources/updated`` after another worker's reload; it polls the
events a reload made (``contract://events``, the Triggers & Events shape) and is pushed their
cursor. One connection per (SDK, revision, transport) serves all of the module's tests.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.mcp.conformance.conftest import (
    EXTENSION,
    GROWTH,
    OPERATION,
    STARTER,
    TOOL,
    drift,
)
from tests.support.mcp_hosts import (
    LineHost,
    Unavailable,
    py_host,
    py_v1_host,
    serve_mcp_args,
    ts_host,
)

from invalidation_contracts.mcp import events

pytestmark = [pytest.mark.mcp, pytest.mark.timeout(300)]

#: What @modelcontextprotocol/sdk 1.32.2 offers in ``initialize`` (SUPPORTED_PROTOCOL_VERSIONS);
#: the server speaks all but 2024-10-07, for which it counter-offers its latest handshake one.
TS_REVISIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05", "2024-10-07")
SERVER_HANDSHAKE_LATEST = "2025-11-25"
#: The Python SDK's eras: its ``initialize`` handshake (at its latest handshake revision, the
#: only one its client offers), and its default ``auto``: a ``server/discover`` probe, then
#: 2026-07-28's per-request envelope.
PY_REVISIONS = ("legacy", "auto")
#: What mcp 1.30.0 offers (mcp.shared.version.SUPPORTED_PROTOCOL_VERSIONS), latest first.
PY_V1_REVISIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
MODERN = "2026-07-28"
IC = "io.github.invalidation-contracts/"
EVENTS = "contract://events"
CONNECTIONS = [
    *(
        ("ts-sdk", revision, transport)
        for revision in TS_REVISIONS
        for transport in ("stdio", "http")
    ),
    *(
        ("py-sdk", revision, transport)
        for revision in PY_REVISIONS
        for transport in ("stdio", "http")
    ),
    *(
        ("py-sdk-v1", revision, transport)
        for revision in PY_V1_REVISIONS
        for transport in ("stdio", "http")
    ),
]


def _marks(sdk: str, revision: str, transport: str) -> list[pytest.MarkDecorator]:
    """``node`` for the TypeScript hosts; a stdio connection spawns its own server (seconds), so
    the default run takes stdio at each SDK's latest revision only (2025-11-25 is both the
    TypeScript SDK's and v1's) and the rest under ``study``
    (every revision runs over HTTP, which shares one server)."""
    marks = [pytest.mark.node] if sdk == "ts-sdk" else []
    if transport == "stdio" and revision not in (TS_REVISIONS[0], *PY_REVISIONS):
        marks.append(pytest.mark.study)
    return marks


PARAMS = [pytest.param(c, marks=_marks(*c), id="-".join(c)) for c in CONNECTIONS]


@dataclass
class Connected:
    """One host's connection to ``serve-mcp``, and what it negotiated."""

    host: LineHost
    sdk: str
    asked: str
    transport: str
    answer: dict[str, Any]


def _host(request: pytest.FixtureRequest, sdk: str) -> LineHost:
    if sdk == "ts-sdk":
        return ts_host(request.getfixturevalue("npm_modules"))
    if sdk == "py-sdk-v1":
        try:
            return py_v1_host()
        except Unavailable as exc:
            pytest.skip(str(exc))
    return py_host()


@pytest.fixture(scope="module", params=PARAMS)
def connected(request: pytest.FixtureRequest, registry: Path, http_url: str) -> Iterator[Connected]:
    sdk, revision, transport = request.param
    host = _host(request, sdk)
    target: dict[str, Any] = (
        {
            "command": sys.executable,
            "args": serve_mcp_args(registry, "--tool-name", f"{OPERATION}={TOOL}"),
            "env": dict(os.environ),  # the child imports this tree (PYTHONPATH)
        }
        if transport == "stdio"
        else {"url": http_url}
    )
    try:
        answer = host.ask("connect", transport=transport, version=revision, **target)
        yield Connected(host, sdk, revision, transport, answer)
    finally:
        host.close()


def _view(text: str) -> dict[str, Any]:
    view = json.loads(text)
    assert isinstance(view, dict)
    return view


def test_the_host_negotiates_a_revision_and_is_told_of_the_extension(connected: Connected):
    expected = {"legacy": SERVER_HANDSHAKE_LATEST, "2024-10-07": SERVER_HANDSHAKE_LATEST}
    negotiated = connected.answer["negotiated"]

    assert negotiated == expected.get(
        connected.asked, MODERN if connected.asked == "auto" else connected.asked
    )
    # server/discover's capabilities.extensions on 2026-07-28; initialize's
    # capabilities.experimental before it (those revisions' schemas have no extensions)
    where = "extensions" if negotiated == MODERN else "experimental"
    assert connected.answer[where][EXTENSION] == {"version": 1, "envelope": "meta"}


def test_the_host_lists_the_tool_with_its_operation_in_meta(connected: Connected):
    (tool,) = connected.host.ask("list")["tools"]

    assert tool["name"] == TOOL
    assert tool["meta"]["io.github.invalidation-contracts/operation"] == OPERATION
    assert tool["outputSchema"]["required"] == ["result", "success"]


def test_a_passing_call_is_returned_with_structured_content_the_schema_admits(
    connected: Connected,
):
    reply = connected.host.ask("call", name=TOOL, arguments=STARTER)

    assert not reply["isError"]
    assert reply["structuredContent"]["success"] is True
    assert _view(reply["text"]) == reply["structuredContent"]


def test_a_rejected_call_reaches_the_host_whose_suggestion_then_fixes_it(connected: Connected):
    rejected = connected.host.try_ask("call", name=TOOL, arguments=GROWTH)

    assert rejected["ok"], f"the host's SDK raised on a rejection: {rejected.get('error')}"
    assert rejected["isError"] and rejected["structuredContent"] is None
    (suggestion,) = _view(rejected["text"])["recovery_feedback"]["suggestions"]
    contract = rejected["meta"]["io.github.invalidation-contracts/contract"]
    assert contract["status"] == 422 and "table_versions" in contract
    assert "table_versions" not in rejected["text"]  # the model is shown no contract
    fixed = connected.host.ask("call", name=TOOL, arguments={**GROWTH, **suggestion["parameters"]})
    assert not fixed["isError"]


def test_a_drift_written_by_another_worker_is_notified_to_the_subscribed_host(
    connected: Connected, registry: Path
):
    connected.host.ask("subscribe", uri="contract://versions")

    code = drift(registry)

    heard = connected.host.ask("updates", uri="contract://versions", timeout_ms=20_000)
    assert "contract://versions" in heard["updates"]
    rejected = connected.host.ask("call", name=TOOL, arguments=GROWTH)
    (suggestion,) = _view(rejected["text"])["recovery_feedback"]["suggestions"]
    assert code in json.dumps(suggestion["parameters"])  # the drifted row, read from the text


def test_a_re_call_presenting_the_validator_is_answered_not_modified(connected: Connected):
    full = connected.host.ask("call", name=TOOL, arguments=GROWTH)
    held = {IC + "if-none-match": full["meta"][IC + "validator"]}

    short = connected.host.try_ask("call", name=TOOL, arguments=GROWTH, meta=held)

    assert short["ok"], f"the host's SDK raised on a not-modified answer: {short.get('error')}"
    assert short["isError"] and short["meta"][IC + "not-modified"] is True
    assert json.loads(short["text"])["not_modified"] is True


def test_the_host_polls_the_events_a_drift_made_and_is_pushed_their_cursor(
    connected: Connected, registry: Path
):
    start = connected.host.ask("poll")["page"]
    connected.host.ask("subscribe", uri=EVENTS)

    drift(registry)

    heard = connected.host.ask("updates", uri=EVENTS, timeout_ms=20_000)
    page = connected.host.ask("poll", cursor=start["cursor"])["page"]
    assert start["events"] == [] and start["truncated"] is False
    assert page["truncated"] is False and page["hasMore"] is False
    (event,) = page["events"]
    assert event["type"] == "contract.changed"
    assert [t["table"] for t in event["data"]["tables"]] == ["active_csm_codes"]
    pushed = [n["meta"].get(IC + "cursor") for n in heard["notes"] if n["uri"] == EVENTS]
    if connected.answer["negotiated"] == MODERN:  # a listen stream's _meta is the SDK's
        assert pushed and set(pushed) == {None}
    else:
        assert pushed == [page["cursor"]]  # the push carries the cursor the poll reaches
    assert connected.host.ask("poll", cursor=page["cursor"])["page"]["events"] == []


def test_a_cursor_of_another_history_is_answered_truncated_then_polled_from_its_cursor(
    connected: Connected,
):
    foreign = events.cursor_for(0, "another-history")

    page = connected.host.ask("poll", cursor=foreign)["page"]

    assert page["truncated"] is True and page["events"] == []
    assert connected.host.ask("poll", cursor=page["cursor"])["page"]["truncated"] is False
