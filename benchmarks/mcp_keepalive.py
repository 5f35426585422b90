"""Study — keep-alive latency of ``serve-mcp --transport http`` against ``serve``.

Reliability audit 2, N6: ``serve-mcp`` listened on a socket made with protocol 0, so asyncio never
set ``TCP_NODELAY`` and each keep-alive answer waited for the client's delayed ACK (48 ms against
4-8 ms). Both servers now listen with ``IPPROTO_TCP``. One keep-alive ``httpx.Client`` per server
sends sequential requests: ``tools/list`` on one MCP session (``serve-mcp``) and ``GET
/contract/versions`` (``serve``), the cheapest read each serves; rounds alternate the servers and
each ratio is the median of per-round p50 ratios. Latency is measured at the client.
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import httpx

from .common import Check, StudyResult, markdown_table, median
from .servers import free_port, process

NAME = "mcp_keepalive"
TITLE = "Keep-alive latency: `serve-mcp --transport http` against `serve`"
TARGET = 1.10
DOMAIN = "acme_billing"
MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


@dataclass(frozen=True, slots=True)
class Size:
    requests: int
    rounds: int
    warmup: int


FULL = Size(requests=300, rounds=3, warmup=30)
QUICK = Size(requests=20, rounds=1, warmup=5)


def _mcp_session(client: httpx.Client) -> dict[str, str]:
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "bench", "version": "0"},
        },
    }
    answer = client.post("/mcp", json=init, headers=MCP_HEADERS)
    answer.raise_for_status()
    headers = {**MCP_HEADERS, "mcp-session-id": answer.headers["mcp-session-id"]}
    done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    client.post("/mcp", json=done, headers=headers).raise_for_status()
    return headers


def _timed(send: Any, n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        send().raise_for_status()
        out.append(time.perf_counter() - start)
    return out


def _p50(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def run(quick: bool = False, out_dir: Any = None) -> StudyResult:
    size = QUICK if quick else FULL
    cli = [sys.executable, "-m", "invalidation_contracts.cli"]
    rounds: dict[str, list[list[float]]] = {"serve-mcp --transport http": [], "serve": []}
    with ExitStack() as stack:
        mcp_port, serve_port = free_port(), free_port()
        stack.enter_context(
            process(
                [*cli, "serve-mcp", "--domain", DOMAIN, "--ephemeral", "--transport", "http"]
                + ["--port", str(mcp_port)],
                mcp_port,
            )
        )
        stack.enter_context(
            process([*cli, "serve", "--domain", DOMAIN, "--port", str(serve_port)], serve_port)
        )
        mcp = stack.enter_context(httpx.Client(base_url=f"http://127.0.0.1:{mcp_port}"))
        plain = stack.enter_context(httpx.Client(base_url=f"http://127.0.0.1:{serve_port}"))
        headers = _mcp_session(mcp)
        listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        senders = {
            "serve-mcp --transport http": lambda: mcp.post("/mcp", json=listing, headers=headers),
            "serve": lambda: plain.get("/contract/versions"),
        }
        for send in senders.values():
            _timed(send, size.warmup)
        names = list(senders)
        for r in range(size.rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                rounds[name].append(_timed(senders[name], size.requests))
    ratio = median(
        _p50(m) / _p50(s)
        for m, s in zip(rounds["serve-mcp --transport http"], rounds["serve"], strict=True)
    )
    rows, data = [], {"servers": {}, "ratio_p50": ratio}
    for name, trials in rounds.items():
        p50 = 1000 * median(_p50(t) for t in trials)
        p99 = 1000 * median(sorted(t)[int(0.99 * (len(t) - 1))] for t in trials)
        data["servers"][name] = {"p50_ms": p50, "p99_ms": p99}
        rows.append([name, f"{p50:.2f}", f"{p99:.2f}", str(sum(len(t) for t in trials))])
    rows.append(["**serve-mcp / serve**", f"**{ratio:.3f}**", "", "ratio"])
    check = Check(
        f"`serve-mcp --transport http` keep-alive p50 within {TARGET:.1f}× of `serve`",
        f"{ratio:.3f}×",
        ratio <= TARGET,
    )
    md = "\n\n".join(
        [
            (
                f"One keep-alive `httpx.Client` per server, {size.requests} sequential requests "
                f"per server and round, {size.rounds} round(s) alternating the servers after "
                f"{size.warmup} warm-up requests each: `tools/list` on one MCP session of "
                f"`serve-mcp --domain {DOMAIN} --ephemeral --transport http`, and `GET "
                f"/contract/versions` on `serve --domain {DOMAIN}`. Latency at the client; the "
                "ratio is the median of per-round p50 ratios."
            ),
            markdown_table(["Server", "p50 (ms)", "p99 (ms)", "Requests"], rows),
        ]
    )
    return StudyResult(NAME, TITLE, md, [check], [], json.loads(json.dumps(data)))
