"""Study — keep-alive latency of ``serve-mcp --transport http`` against ``serve``.

Reliability audit 2, N6: ``serve-mcp`` listened on a socket made with protocol 0, so asyncio never
set ``TCP_NODELAY`` and each keep-alive answer waited for the client's delayed ACK (48 ms against
4-8 ms). Both servers now listen with ``IPPROTO_TCP``. One keep-alive ``httpx.Client`` per server
sends sequential requests for the same contract read: ``resources/read contract://versions`` on
one MCP session (``serve-mcp``) and ``GET /contract/versions`` (``serve``), the same fields from
the same registry; ``tools/list`` is measured beside them for scale. The requests take turns one
by one (a burst of load on the shared machine lands on all of them); each ratio is the median of
per-round p50 ratios. Latency is measured at the client.

Second baseline (issue 26): the MCP SDK's own floor — a bare SDK ``Server`` with one trivial
resource (a fixed 70-byte text), the SDK's ``streamable_http_app`` under uvicorn on the same
``TCP_NODELAY`` listener, read the same way. ``serve-mcp`` / bare SDK is what this project adds
over the SDK; bare SDK / ``serve`` is what the SDK's transport costs over a plain route. Both
eras are timed: a session after ``initialize`` (2025-06-18, an SSE stream per POST) and the
2026-07-28 single-exchange POST (no session; a JSON answer when the handler sends no
notification).
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


MCP_READ = "serve-mcp --transport http: resources/read contract://versions"
SERVE_READ = "serve: GET /contract/versions"
MCP_LIST = "serve-mcp --transport http: tools/list"
BARE_READ = "bare MCP SDK server: resources/read of a fixed resource"
MCP_MODERN = "serve-mcp, 2026-07-28 request: resources/read contract://versions"
BARE_MODERN = "bare MCP SDK server, 2026-07-28 request: resources/read"
REQUESTS = (MCP_READ, SERVE_READ, MCP_LIST, BARE_READ, MCP_MODERN, BARE_MODERN)
MODERN = "2026-07-28"
FLOOR = "bare SDK / serve (the SDK's floor)"
ADDED = "serve-mcp / bare SDK (what this project adds)"
BARE_URI = "bench://versions"

#: The bare SDK server: one resource, nothing of this project but the listener.
_BARE_SDK = """
import sys
import mcp_types as types
import uvicorn
from mcp.server.lowlevel import Server
from invalidation_contracts.sockets import listen

TEXT = '{"table_versions":{"a":"1.0.0"},"contract_seq":0,"contract_epoch":"ep"}'


async def read(ctx, params):
    content = types.TextResourceContents(
        uri=str(params.uri), mime_type="application/json", text=TEXT
    )
    return types.ReadResourceResult(contents=[content])


async def listing(ctx, params):
    return types.ListResourcesResult(resources=[])


app = Server("bare", on_read_resource=read, on_list_resources=listing).streamable_http_app(
    host="127.0.0.1"
)
with listen("127.0.0.1", int(sys.argv[1])) as sock:
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_keep_alive=5)
    uvicorn.Server(config).run(sockets=[sock])
"""


@dataclass(frozen=True, slots=True)
class Size:
    requests: int
    rounds: int
    warmup: int


FULL = Size(requests=200, rounds=9, warmup=30)
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


def _modern_read(client: httpx.Client, uri: str) -> httpx.Response:
    """One 2026-07-28 ``resources/read``: no session, the envelope in ``_meta`` and headers."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    body = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "resources/read",
        "params": {"uri": uri, "_meta": meta},
    }
    headers = {
        **MCP_HEADERS,
        "mcp-protocol-version": MODERN,
        "mcp-method": "resources/read",
        "mcp-name": uri,
    }
    return client.post("/mcp", json=body, headers=headers)


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
    rounds: dict[str, list[list[float]]] = {name: [] for name in REQUESTS}
    with ExitStack() as stack:
        mcp_port, serve_port, bare_port = free_port(), free_port(), free_port()
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
        stack.enter_context(process([sys.executable, "-c", _BARE_SDK, str(bare_port)], bare_port))
        mcp = stack.enter_context(httpx.Client(base_url=f"http://127.0.0.1:{mcp_port}"))
        plain = stack.enter_context(httpx.Client(base_url=f"http://127.0.0.1:{serve_port}"))
        bare = stack.enter_context(httpx.Client(base_url=f"http://127.0.0.1:{bare_port}"))
        modern_mcp = stack.enter_context(httpx.Client(base_url=f"http://127.0.0.1:{mcp_port}"))
        modern_bare = stack.enter_context(httpx.Client(base_url=f"http://127.0.0.1:{bare_port}"))
        headers = _mcp_session(mcp)
        bare_headers = _mcp_session(bare)
        read = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "resources/read",
            "params": {"uri": "contract://versions"},
        }
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        bare_read = {**read, "params": {"uri": BARE_URI}}
        senders = {
            MCP_READ: lambda: mcp.post("/mcp", json=read, headers=headers),
            SERVE_READ: lambda: plain.get("/contract/versions"),
            MCP_LIST: lambda: mcp.post("/mcp", json=listing, headers=headers),
            BARE_READ: lambda: bare.post("/mcp", json=bare_read, headers=bare_headers),
            MCP_MODERN: lambda: _modern_read(modern_mcp, "contract://versions"),
            BARE_MODERN: lambda: _modern_read(modern_bare, BARE_URI),
        }
        for name in (MCP_READ, BARE_READ, MCP_MODERN, BARE_MODERN):
            answer = senders[name]()
            answer.raise_for_status()
            if "contract_epoch" not in answer.text:  # the same read, or the ratio means nothing
                raise RuntimeError(f"{name} answered {answer.text[:200]}")
        for send in senders.values():
            _timed(send, size.warmup)
        names = list(senders)
        for r in range(size.rounds):
            # request by request, in turns: a burst of load on the shared machine lands on both
            order = names if r % 2 == 0 else names[::-1]
            trial: dict[str, list[float]] = {name: [] for name in names}
            for _ in range(size.requests):
                for name in order:
                    trial[name].extend(_timed(senders[name], 1))
            for name in names:
                rounds[name].append(trial[name])

    def ratio_of(a: str, b: str) -> float:
        return median(_p50(x) / _p50(y) for x, y in zip(rounds[a], rounds[b], strict=True))

    ratio = ratio_of(MCP_READ, SERVE_READ)
    ratios = {
        "serve-mcp / serve, the same read": ratio,
        FLOOR: ratio_of(BARE_READ, SERVE_READ),
        ADDED: ratio_of(MCP_READ, BARE_READ),
        "2026-07-28: serve-mcp / serve": ratio_of(MCP_MODERN, SERVE_READ),
        "2026-07-28: bare SDK / serve": ratio_of(BARE_MODERN, SERVE_READ),
        "2026-07-28: serve-mcp / bare SDK": ratio_of(MCP_MODERN, BARE_MODERN),
    }
    rows, data = [], {"servers": {}, "ratio_p50": ratio, "ratios": ratios}
    for name, trials in rounds.items():
        p50 = 1000 * median(_p50(t) for t in trials)
        p99 = 1000 * median(sorted(t)[int(0.99 * (len(t) - 1))] for t in trials)
        data["servers"][name] = {"p50_ms": p50, "p99_ms": p99}
        rows.append([name, f"{p50:.2f}", f"{p99:.2f}", str(sum(len(t) for t in trials))])
    for label, value in ratios.items():
        rows.append([f"**{label}**", f"**{value:.3f}**", "", "ratio"])
    check = Check(
        f"`serve-mcp --transport http` keep-alive p50 within {TARGET:.1f}× of `serve` "
        "(the same contract read)",
        f"{ratio:.3f}×",
        ratio <= TARGET,
    )
    added = ratios[ADDED]
    floor = Check(
        f"… what this project adds over a bare MCP SDK server within {TARGET:.1f}× (the SDK's "
        "own floor measured beside it)",
        f"{added:.3f}× (bare SDK / serve: {ratios[FLOOR]:.3f}×)",
        added <= TARGET,
    )
    md = "\n\n".join(
        [
            (
                f"One keep-alive `httpx.Client` per server, {size.requests} sequential requests "
                f"per server and round, {size.rounds} round(s), the requests taking turns one by "
                f"one, after {size.warmup} warm-up requests each. The same contract read on both: "
                "`resources/read contract://versions` on one MCP session of "
                f"`serve-mcp --domain {DOMAIN} --ephemeral --transport http`, and `GET "
                f"/contract/versions` on `serve --domain {DOMAIN}`; `tools/list` on the MCP "
                "session for scale; the same read as a 2026-07-28 request (no session). Second "
                "baseline: a bare MCP SDK server (one fixed resource, the SDK's streamable HTTP "
                "app on the same listener), read in both eras: the SDK's own floor. Latency at "
                "the client; each ratio is the median of per-round p50 ratios."
            ),
            markdown_table(["Server", "p50 (ms)", "p99 (ms)", "Requests"], rows),
        ]
    )
    return StudyResult(NAME, TITLE, md, [check, floor], [], json.loads(json.dumps(data)))
