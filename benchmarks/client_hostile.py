"""Peak RSS of an agent fed a hostile server's inputs, against the same agent fed an honest one.

The agent is a separate process (``python -m benchmarks.client_hostile URL``) that does what the
docs tell an agent builder to do: an ``httpx.Client`` over ``ContractTransport`` and a
``FixMemory`` on an SQLite file. Each of its ``ROUNDS`` rounds sends four requests: one that
fails with an honest fix (learned), two more failures, and one success whose stamp moved (the
memory then asks ``/contract/changes``). It reports its peak resident set (``VmHWM``). The
server runs in the benchmark's own process (uvicorn on 127.0.0.1), in one of three modes:

- *benign*: the two failures carry one honest fix each (a few hundred bytes); the changes feed
  says one row changed (a few hundred bytes);
- *hostile*: the three inputs of the reliability audit — a 422 carrying 20,001 suggestions, a 422
  whose fix has a 10 MB parameter, and a 60 MB ``/contract/changes`` answer (made by the server as
  it is read);
- *same bytes*: the hostile run's sizes with honest content — the two failures as large as the
  hostile ones (the bulk in ``detail``, which the contract does not read) and a 60 MB feed of
  real row changes — what an agent that downloads those bytes holds whatever they say;
- *bombs* (reliability audit 2, N1 and N5): the two failures are a gzip bomb (``BOMB_BYTES``
  decoded from well under 1 MB sent), once with ``Content-Length`` and once chunked, and the
  changes feed is JSON nested ``NESTED_DEPTH`` deep;
- *depth* (issue 38, H1): the two failures are the crafted body ``"`` + ``\"``×n + ``[``×129 of
  ``CRAFTED_BYTES`` (1 MiB; quadratic to scan before, ~54 min), gzip-encoded;
- *keys* (issue 38, H2): the two failures carry ``KEY_SUGGESTIONS`` suggestions of
  ``KEYS_PER_SUGGESTION`` row keys each (0.8 MB, within every byte cap; +26 MB of RSS each
  before); *keys-unbudgeted* is the same with the key budget lifted (``Limits``), as before it.

Each agent also reports its CPU seconds (user + system); and ``depth_scan`` times the depth scan
of the crafted 1 MiB body against ``json.loads`` of an honest 1 MiB body, in the same process.

The memory's cost is the hostile run against the benign one; the same-bytes run separates it from
what the agent's own HTTP client holds for the same bytes.
"""

from __future__ import annotations

import functools
import json
import resource
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

from .common import Check, markdown_table

ROUTE = "/v1/orders"
ROUNDS = 2
SUGGESTIONS = 20_001
PARAMETER_BYTES = 10_000_000
FEED_BYTES = 60 * 1024 * 1024
CHUNK = 64 * 1024
TARGET_RATIO = 1.10
BOMB_BYTES = 900 * 1024 * 1024
NESTED_DEPTH = 500_000
CRAFTED_BYTES = 1 << 20
KEY_SUGGESTIONS = 64
KEYS_PER_SUGGESTION = 1_000
DEPTH_TARGET_S = 0.050


def crafted(size: int = CRAFTED_BYTES) -> bytes:
    """The audit's depth body: an unterminated string of escaped quotes, then 129 brackets."""
    return b'"' + b'\\"' * ((size - 130) // 2) + b"[" * 129


def wide(n: int) -> dict[str, Any]:
    """A suggestion whose vector names ``KEYS_PER_SUGGESTION`` rows."""
    keys = [f"r{n:x}-{k:04d}" for k in range(KEYS_PER_SUGGESTION)]
    return {**suggestion(n), "tables": [{"table": "codes", "version": "1.0.0", "keys": keys}]}


def suggestion(n: int, value: Any = None) -> dict[str, Any]:
    return {
        "type": f"FIX_{n}",
        "parameters": {"promo_code": value if value is not None else f"CODE{n}"},
        "action": "add_field",
        "cache_hint": "cacheable",
        "scope": {"plan": "plan_a"},
        "tables": [{"table": "codes", "version": "1.0.0", "keys": ["plan_a"]}],
    }


def problem(suggestions: list[dict[str, Any]], filler: int = 0) -> bytes:
    body: dict[str, Any] = {
        "type": "urn:invalidation-contracts:problem:policy-violation",
        "title": "Policy violation",
        "status": 422,
        "success": False,
        "recovery_feedback": {"suggestions": suggestions},
        "table_versions": {"codes": "1.0.0"},
        "contract_seq": 0,
        "contract_epoch": "ep",
    }
    if filler:
        body["detail"] = "x" * filler
    return json.dumps(body).encode()


@functools.lru_cache(maxsize=1)
def gzip_bomb(decoded: int) -> bytes:
    """A 422-looking body of ``decoded`` bytes once gunzipped."""
    encoder = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    parts = [encoder.compress(b'{"detail":"')]
    block = b"0" * (1 << 20)
    parts.extend(encoder.compress(block) for _ in range(decoded >> 20))
    parts.append(encoder.compress(b'"}') + encoder.flush())
    return b"".join(parts)


def app(mode: str) -> Any:
    """The server of one mode, as an ASGI app."""
    bomb = gzip_bomb(BOMB_BYTES) if mode == "bombs" else b""
    depth_body = zlib.compress(crafted(), 9, zlib.MAX_WBITS | 16) if mode == "depth" else b""
    rounds = {"n": 0}
    hostile_bodies = {
        1: problem([suggestion(n) for n in range(SUGGESTIONS)]),
        2: problem([suggestion(1, "X" * PARAMETER_BYTES)]),
    }
    sizes = {kind: len(body) for kind, body in hostile_bodies.items()}
    server = FastAPI()
    state = {"seq": 0}

    @server.post(ROUTE)
    async def orders(request: Request) -> Response:
        kind = int(request.query_params.get("kind", "0"))
        if kind == 0:
            content = problem([suggestion(0)])
            return Response(content, 422, media_type="application/problem+json")
        if kind in hostile_bodies and mode == "depth":
            headers = {"content-encoding": "gzip"}
            return Response(depth_body, 422, headers=headers, media_type="application/problem+json")
        if kind in hostile_bodies and mode.startswith("keys"):
            rounds["n"] += 1
            base = rounds["n"] * KEY_SUGGESTIONS
            wide_body = problem([wide(base + n) for n in range(KEY_SUGGESTIONS)])
            return Response(wide_body, 422, media_type="application/problem+json")
        if kind in hostile_bodies and mode == "bombs":
            headers = {"content-encoding": "gzip"}
            kind_of = "application/problem+json"
            if kind == 1:
                return Response(bomb, 422, headers=headers, media_type=kind_of)
            chunks = (bomb[i : i + CHUNK] for i in range(0, len(bomb), CHUNK))
            return StreamingResponse(chunks, 422, headers=headers, media_type=kind_of)
        if kind in hostile_bodies:
            if mode == "hostile":
                content = hostile_bodies[kind]
            else:
                filler = sizes[kind] if mode == "same-bytes" else 0
                content = problem([suggestion(kind)], filler)
            return Response(content, 422, media_type="application/problem+json")
        state["seq"] += 1
        body = {
            "success": True,
            "table_versions": {"codes": f"1.{state['seq']}.0"},
            "contract_seq": state["seq"],
            "contract_epoch": "ep",
        }
        return Response(json.dumps(body), 200, media_type="application/json")

    @server.get("/contract/changes")
    async def changes(request: Request, since: int) -> Response:
        last = state["seq"]
        if mode == "bombs":
            nested = b"[" * NESTED_DEPTH + b"]" * NESTED_DEPTH
            return Response(nested, 200, media_type="application/json")
        if mode in ("benign", "depth", "keys", "keys-unbudgeted"):
            feed = _feed_head(since, last) + _row(last, "plan_a") + b"]," + _tables(since, last)
            return Response(feed, 200, media_type="application/json")
        return StreamingResponse(_big_feed(request, since, last), media_type="application/json")

    return server


def _feed_head(since: int, last: int) -> bytes:
    return f'{{"contract_epoch":"ep","since":{since},"last_seq":{last},"rows":['.encode()


def _row(seq: int, key: str) -> bytes:
    return (
        f'{{"seq":{seq},"table":"codes","key":"{key}","op":"changed",'
        f'"old_version":"1.{seq - 1}.0","new_version":"1.{seq}.0"}}'
    ).encode()


def _tables(since: int, last: int) -> bytes:
    moves = ",".join(
        f'{{"seq":{s},"table":"codes","old_version":"1.{s - 1}.0","new_version":"1.{s}.0"}}'
        for s in range(since + 1, last + 1)
    )
    return f'"tables":[{moves}]}}'.encode()


async def _big_feed(request: Request, since: int, last: int) -> AsyncIterator[bytes]:
    """A ``FEED_BYTES`` feed of row changes, made as it is read (until the client hangs up)."""
    yield _feed_head(since, last)
    sent, n = 0, 0
    while sent < FEED_BYTES:
        if await request.is_disconnected():
            return
        rows = b",".join(_row(last, f"k{n + i}") for i in range(400))
        n += 400
        chunk = (b"," if sent else b"") + rows
        sent += len(chunk)
        yield chunk
    yield b"]," + _tables(since, last)


def agent(url: str, db: str, reads: bool, budget: bool = True) -> dict[str, Any]:
    """The agent process: ``ROUNDS`` rounds of four requests; returns its peak RSS.

    ``reads``: the agent reads every response body (``client.post``); otherwise it streams and
    reads only what the memory reads (a body within ``max_body_bytes``).
    """
    import httpx

    from invalidation_contracts.client import FixMemory, Limits
    from invalidation_contracts.httpx import ContractTransport

    events: list[str] = []
    unbounded = Limits(max_keys_per_entry=1 << 40, max_keys_per_origin=1 << 40)
    with FixMemory("row", store=db, limits=None if budget else unbounded) as memory:
        transport = ContractTransport(memory, listener=lambda e: events.append(e.kind))
        with httpx.Client(transport=transport, base_url=url, timeout=120) as client:
            for _ in range(ROUNDS):
                for kind in (0, 1, 2, 3):
                    params, body = {"kind": kind}, {"plan": "plan_a"}
                    if reads:
                        client.post(ROUTE, params=params, json=body)
                    else:
                        with client.stream("POST", ROUTE, params=params, json=body):
                            pass
        entries = len(memory.entries(url))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mb": peak_rss_kb() / 1024,
        "entries": entries,
        "refused": events.count("refused"),
        "stored": events.count("stored"),
        "evicted": events.count("evicted"),
    }


def peak_rss_kb() -> int:
    """This process's peak resident set (``VmHWM``). Not ``ru_maxrss``: Linux carries that over
    from the parent across fork and exec, and the parent here is the server."""
    for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # not Linux: the closest figure


def measure(mode: str, reads: bool, work: Path) -> dict[str, Any]:
    """Serve ``mode`` on 127.0.0.1 and run one agent process against it."""
    import uvicorn

    config = uvicorn.Config(
        app(mode), host="127.0.0.1", port=0, log_level="warning", lifespan="off"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("the benchmark server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.client_hostile",
                f"http://127.0.0.1:{port}",
                str(work / f"{mode}-{reads}.sqlite"),
                "reads" if reads else "streams",
                "unbudgeted" if mode == "keys-unbudgeted" else "budgeted",
            ],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
            cwd=Path(__file__).resolve().parent.parent,
        )
    finally:
        server.should_exit = True
        thread.join(timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"the {mode} agent failed: {done.stderr.strip()[-400:]}")
    return {"mode": mode, **json.loads(done.stdout.strip().splitlines()[-1])}


#: The runs: ``(agent, mode)``; each agent's ratios are against its own benign run.
RUNS = (
    ("streams", "benign"),
    ("streams", "hostile"),
    ("streams", "bombs"),
    ("streams", "depth"),
    ("streams", "keys"),
    ("streams", "keys-unbudgeted"),
    ("reads", "benign"),
    ("reads", "hostile"),
    ("reads", "same-bytes"),
)


def run(work: Path, quick: bool = False) -> list[dict[str, Any]]:
    """Every run of ``RUNS`` (quick: the streaming agent's two)."""
    runs = RUNS[:6] if quick else RUNS
    results = [{"agent": style, **measure(mode, style == "reads", work)} for style, mode in runs]
    base = {r["agent"]: r for r in results if r["mode"] == "benign"}
    for result in results:
        result["ratio"] = result["peak_rss_mb"] / base[result["agent"]]["peak_rss_mb"]
        result["cpu_ratio"] = result["cpu_s"] / base[result["agent"]]["cpu_s"]
    results.append({"agent": "in-process", "mode": "depth-scan", **depth_scan()})
    return results


def depth_scan(repeats: int = 5) -> dict[str, Any]:
    """Median seconds of ``parse_json`` on the crafted 1 MiB body, and of ``json.loads`` on an
    honest 1 MiB body (the baseline), interleaved in this process."""
    from invalidation_contracts.client.limits import parse_json

    body = crafted()
    honest = json.dumps({"detail": "x" * (CRAFTED_BYTES - 20)}).encode()
    scan, baseline = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        parse_json(body, 128)
        scan.append(time.perf_counter() - started)
        started = time.perf_counter()
        json.loads(honest)
        baseline.append(time.perf_counter() - started)
    scan.sort()
    baseline.sort()
    return {"scan_s": scan[repeats // 2], "loads_s": baseline[repeats // 2], "bytes": len(body)}


def _ratios(result: dict[str, Any]) -> str:
    return f"{result['ratio']:.3f}× (CPU {result['cpu_ratio']:.2f}×)"


def report(results: list[dict[str, Any]]) -> tuple[str, list[Check]]:
    """The hostile-inputs part of the client study: Markdown and checks."""
    by = {(r["agent"], r["mode"]): r for r in results}
    scan = by["in-process", "depth-scan"]
    results = [r for r in results if r["agent"] != "in-process"]
    checks = [
        Check(
            "the crafted depth body of 1 MiB is scanned within 50 ms (linear; ~54 min before)",
            f"{scan['scan_s'] * 1000:.1f} ms ({scan['scan_s'] / scan['loads_s']:.2f}× "
            "json.loads of an honest 1 MiB body)",
            scan["scan_s"] <= DEPTH_TARGET_S,
        ),
        Check(
            "peak RSS fed the crafted depth body within 10% of a benign run (agent streaming)",
            _ratios(by["streams", "depth"]),
            by["streams", "depth"]["ratio"] <= TARGET_RATIO,
        ),
        Check(
            "peak RSS fed 64 × 1,000 dependency keys per failure within 10% of a benign run",
            _ratios(by["streams", "keys"]),
            by["streams", "keys"]["ratio"] <= TARGET_RATIO,
        ),
        Check(
            "peak RSS fed the hostile inputs within 10% of a benign run (agent streaming bodies)",
            f"{by['streams', 'hostile']['ratio']:.3f}×",
            by["streams", "hostile"]["ratio"] <= TARGET_RATIO,
        ),
        Check(
            "peak RSS fed gzip bombs (Content-Length, chunked) and a nested feed within 10% of "
            "a benign run (agent streaming bodies)",
            f"{by['streams', 'bombs']['ratio']:.3f}×",
            by["streams", "bombs"]["ratio"] <= TARGET_RATIO,
        ),
    ]
    if ("reads", "same-bytes") in by:
        ratio = by["reads", "hostile"]["peak_rss_mb"] / by["reads", "same-bytes"]["peak_rss_mb"]
        checks.append(
            Check(
                "… agent reading every body: within 10% of the same bytes with honest content",
                f"{ratio:.3f}× (against benign: {by['reads', 'hostile']['ratio']:.2f}×)",
                ratio <= TARGET_RATIO,
            )
        )
    table = markdown_table(
        [
            "Agent",
            "Server",
            "Peak RSS (MB)",
            "× benign",
            "CPU (s)",
            "× benign",
            "Stored",
            "Refused",
            "Evicted",
        ],
        [
            [
                r["agent"],
                r["mode"],
                f"{r['peak_rss_mb']:.1f}",
                f"{r['ratio']:.3f}",
                f"{r['cpu_s']:.2f}",
                f"{r['cpu_ratio']:.2f}",
                str(r["stored"]),
                str(r["refused"]),
                str(r["evicted"]),
            ]
            for r in results
        ],
    )
    md = "\n\n".join(
        [
            "### Against a hostile server",
            (
                "An agent process (`httpx.Client` over `ContractTransport`, `FixMemory` on an "
                f"SQLite file) makes {ROUNDS} rounds of four requests to a server on 127.0.0.1: an "
                "honest failure (a fix is learned), two more failures, and a success whose stamp "
                "moved (the memory fetches `/contract/changes`). *Hostile*: the failures carry "
                f"{SUGGESTIONS:,} suggestions and a {PARAMETER_BYTES / 1e6:.0f} MB parameter, the "
                f"feed is {FEED_BYTES // 2**20} MB. *Bombs*: the failures are a gzip body of "
                f"{len(gzip_bomb(BOMB_BYTES)) / 1e6:.2f} MB that decodes to "
                f"{BOMB_BYTES // 2**20} MiB (with `Content-Length`, then chunked) and the feed "
                f"is JSON nested {NESTED_DEPTH:,} deep. *Benign*: small honest failures and feed. "
                "*Same bytes*: the hostile sizes with honest content. The *streams* agent reads "
                "only what the memory reads; the *reads* agent reads every body, as `client.post` "
                "does. Peak RSS is the agent's `VmHWM`; *× benign* is against the same agent's "
                "benign run."
            ),
            table,
            (
                "Every hostile input is refused (a `Refused` event and a warning each): the "
                "failures are over `max_body_bytes` and never parsed, the feed is read up to "
                "`max_feed_bytes` and dropped (a resync). What the memory adds to a hostile run "
                "is that buffer; the rest of the reading agent's growth is its own HTTP client "
                "holding the bodies it downloads, the same with honest content of the same size."
            ),
            (
                "*Depth* (issue 38, H1): the crafted body is not JSON (its string never ends), "
                "so nothing is refused or learned; what it costs is one linear scan and the "
                f"1 MiB it decodes to. The in-process scan took {scan['scan_s'] * 1000:.1f} ms "
                f"(median of 5; `json.loads` of an honest 1 MiB body: "
                f"{scan['loads_s'] * 1000:.1f} ms). *Keys* (H2): every wide fix is stored at "
                "table granularity (`Coarsened`), its key list dropped as the body is parsed "
                "(`client.limits.WideKeys`), so no more than one list's strings exist at a time: "
                "*keys-unbudgeted* (the budget lifted) shows what the keys held cost before."
            ),
        ]
    )
    return md, checks


if __name__ == "__main__":
    print(
        json.dumps(
            agent(sys.argv[1], sys.argv[2], sys.argv[3] == "reads", sys.argv[4] != "unbudgeted")
        )
    )
