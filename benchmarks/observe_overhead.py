"""Study — what the instrumentation costs, and how fast the operator page follows a COMMIT.

1. **Request overhead.** Two `serve` processes of acme billing at L6, one with `--metrics`
   (OpenTelemetry SDK, Prometheus reader, client scoring, the operator page) and one without,
   loaded side by side with the failures mix (every draft, answered 422) on one keep-alive
   connection each; the figure is server CPU per request (from ``/proc``), the ratio the median
   of per-round ratios. The instrumented server is scraped once per round.
2. **Memory lookup overhead.** ``FixMemory.lookup`` on a memory holding the fixes of every
   acme billing family, in two fresh interpreters run at once: one with no meter provider, one
   with the SDK's ``MeterProvider`` (an in-memory reader) set globally.
3. **Page update latency from COMMIT.** ``serve --metrics`` over a SQLite database; a plain-SQL
   ``UPDATE`` is committed, and the time until (a) the state document shows the new seq (polled
   every 5 ms: capture → worker propagation) and (b) the page in Debian's headless Chromium shows
   the new version (its script polls every 500 ms) is recorded, p50 and p99.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from invalidation_contracts.domains import get_catalog, get_domain
from invalidation_contracts.server.sql import create_tables

from . import loadgen
from .common import Check, StudyResult, cpu_since, markdown_table, median, thread_cpu
from .provider_load import DOMAIN, request_mixes
from .servers import ADMIN_TOKEN, Server, serve_command

NAME = "observe"
TITLE = "Instrumentation overhead and operator-page latency"
REQUEST_TARGET = 1.05
LOOKUP_TARGET = 1.05


@dataclass(frozen=True, slots=True)
class Size:
    requests: int
    """Unused: the request study runs for ``round_s`` per server and round."""
    rounds: int
    warmup: int
    lookups: int
    commits: int
    round_s: float
    handle_chunks: int
    handle_chunk: int
    lookup_rounds: int
    scrapes: int
    time_limit_s: float = 120.0


FULL = Size(
    requests=0,
    rounds=30,
    warmup=60,
    lookups=6_000,
    commits=20,
    round_s=1.0,
    handle_chunks=60,
    handle_chunk=200,
    lookup_rounds=9,
    scrapes=20,
)
QUICK = Size(
    requests=0,
    rounds=1,
    warmup=10,
    lookups=600,
    commits=2,
    round_s=0.5,
    handle_chunks=2,
    handle_chunk=20,
    lookup_rounds=1,
    scrapes=2,
)


def run(quick: bool = False, out_dir: Path | None = None) -> StudyResult:
    size = QUICK if quick else FULL
    data: dict[str, Any] = {
        "handle": _handle_path(size),
        "asgi": _asgi_path(size),
        "requests": _requests(size),
        "lookups": _lookups(size),
        "page": _page(size),
    }
    return _report(data, size)


# -- 1. request overhead ----------------------------------------------------------------------


def _requests(size: Size) -> dict[str, Any]:
    """Server CPU per request, ``--metrics`` against without, in interleaved slots; a second
    uninstrumented server is measured the same way as a noise floor (A/A: the same configuration
    twice, whose ratio would be 1.00 with no noise).

    Each round loads each server alone for ``round_s`` (one keep-alive connection), the order
    rotating from round to round so every configuration takes every position; a round's ratios
    compare slots a few seconds apart, so slow drifts of the machine's load cancel. CPU time is
    read from ``/proc/<pid>/task/*/schedstat`` (nanoseconds, every thread), not the 10-ms ticks of
    ``/proc/<pid>/stat``. The instrumented server is scraped once in each of its slots, and that
    scrape's CPU is counted."""
    path = get_catalog(DOMAIN).route.path
    bodies = request_mixes()["failures"]
    names = ("off", "on", "again")
    per_request: dict[str, list[float]] = {name: [] for name in names}
    with (
        serve_command("--domain", DOMAIN) as off,
        serve_command("--domain", DOMAIN, "--metrics") as on,
        serve_command("--domain", DOMAIN) as again,
    ):
        servers = {"off": off, "on": on, "again": again}
        for server in servers.values():
            loadgen.run_trial(server.port, path, bodies, size.warmup, 1, size.time_limit_s)
        for r in range(size.rounds):
            for name in names[r % 3 :] + names[: r % 3]:
                server = servers[name]
                before = thread_cpu(server.pid)
                (trial,) = loadgen.run_side_by_side([server.port], path, bodies, 1, size.round_s)
                if name == "on":
                    _scrape(server)
                used = cpu_since(server.pid, before)
                per_request[name].append(used / max(1, len(trial.latencies_s)))
    ratios = [h / lo for lo, h in zip(per_request["off"], per_request["on"], strict=True)]
    floor = [h / lo for lo, h in zip(per_request["off"], per_request["again"], strict=True)]
    return {
        "cpu_per_request_us": {k: 1e6 * median(v) for k, v in per_request.items()},
        "ratio": median(ratios),
        "ratios": ratios,
        "spread": _spread(ratios),
        "aa_ratio": median(floor),
        "aa_ratios": floor,
        "aa_spread": _spread(floor),
        "rounds": size.rounds,
        "method": "interleaved slots, schedstat CPU",
    }


def _spread(ratios: list[float]) -> dict[str, float]:
    """The quartiles and extremes of per-round ratios."""
    ordered = sorted(ratios)
    if len(ordered) < 2:
        return {"p25": ordered[0], "p75": ordered[0], "min": ordered[0], "max": ordered[0]}
    p25, _, p75 = statistics.quantiles(ordered, n=4, method="inclusive")
    return {"p25": p25, "p75": p75, "min": ordered[0], "max": ordered[-1]}


def _scrape(server: Server) -> None:
    reply = httpx.get(f"http://127.0.0.1:{server.port}/contract/metrics", headers=_headers())
    reply.raise_for_status()


def _chunked(chunks: dict[str, list[float]], size: Size) -> dict[str, Any]:
    """The figures of interleaved off/on chunks: CPU per request, the median of the chunks'
    on/off ratios and their spread."""
    ratios = [h / lo for lo, h in zip(chunks["off"], chunks["on"], strict=True)]
    return {
        "cpu_per_request_us": {k: 1e6 * median(v) for k, v in chunks.items()},
        "ratio": median(ratios),
        "spread": _spread(ratios),
        "chunks": size.handle_chunks,
        "requests_per_chunk": size.handle_chunk,
    }


def _handle_path(size: Size) -> dict[str, Any]:
    """The provider's request path in one process, with and without ``instrument``, in
    interleaved chunks (both see the same machine load): ``ContractService.handle``."""
    from invalidation_contracts.observe import instrument
    from invalidation_contracts.server import Asked
    from invalidation_contracts.server.http.app import create_app

    catalog = get_catalog(DOMAIN)
    payloads = [json.loads(body) for body in request_mixes()["failures"]]
    services = {}
    for name in ("off", "on"):
        app = create_app(catalog.domain, level=6, registry=catalog.domain.registry())
        if name == "on":
            instrument(app, app.state.service)
        services[name] = app.state.service
    chunks: dict[str, list[float]] = {"off": [], "on": []}
    count = size.handle_chunk

    def chunk(service: Any) -> float:
        start = time.process_time()
        for i in range(count):
            service.handle(
                catalog.route, payloads[i % len(payloads)], Asked(instance=catalog.route.path)
            )
        return (time.process_time() - start) / count

    for name in ("off", "on"):
        chunk(services[name])  # warm-up
    for r in range(size.handle_chunks):
        for name in ("off", "on") if r % 2 == 0 else ("on", "off"):
            chunks[name].append(chunk(services[name]))
    return _chunked(chunks, size)


def _asgi_path(size: Size) -> dict[str, Any]:
    """The whole app ``serve`` runs (``AppSpec.build``: middleware, routing, FastAPI, the thread
    pool, ``handle``, telemetry and client scoring), with and without ``--metrics``, driven in
    this process through ASGI calls in interleaved chunks, process CPU time (every thread). The
    server adds HTTP parsing and socket I/O, the same with and without, so its ratio is at most
    this one. Then the CPU of one scrape of the metrics route."""
    import asyncio
    import os

    from invalidation_contracts.cli.launch import AppSpec
    from invalidation_contracts.server.auth import ADMIN_TOKEN_ENV

    path = get_catalog(DOMAIN).route.path
    bodies = request_mixes()["failures"]
    saved = os.environ.get(ADMIN_TOKEN_ENV)
    os.environ[ADMIN_TOKEN_ENV] = ADMIN_TOKEN
    try:
        apps = {name: AppSpec(DOMAIN, metrics=name == "on").build() for name in ("off", "on")}
    finally:
        if saved is None:
            os.environ.pop(ADMIN_TOKEN_ENV, None)
        else:
            os.environ[ADMIN_TOKEN_ENV] = saved
    count = size.handle_chunk
    chunks: dict[str, list[float]] = {"off": [], "on": []}

    async def chunk(app: Any) -> float:
        start = time.process_time()
        for i in range(count):
            status = await _asgi_call(app, "POST", path, bodies[i % len(bodies)])
            if status != 422 and status != 200:
                raise RuntimeError(f"the app answered {status}")
        return (time.process_time() - start) / count

    async def measure() -> float:
        for app in apps.values():
            await chunk(app)  # warm-up
        for r in range(size.handle_chunks):
            for name in ("off", "on") if r % 2 == 0 else ("on", "off"):
                chunks[name].append(await chunk(apps[name]))
        start = time.process_time()
        for _ in range(size.scrapes):
            if await _asgi_call(apps["on"], "GET", "/contract/metrics", b"") != 200:
                raise RuntimeError("the metrics route did not answer 200")
        return (time.process_time() - start) / size.scrapes

    scrape = asyncio.run(measure())
    return {**_chunked(chunks, size), "scrape_cpu_ms": 1e3 * scrape}


async def _asgi_call(app: Any, method: str, path: str, body: bytes) -> int:
    """One HTTP request through ``app``'s ASGI interface (a GET with the admin token, as the
    scraper sends it; a POST without, as the load generator); its status."""
    headers = [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")]
    headers.append((b"content-length", str(len(body)).encode()))
    if method == "GET":
        headers.append((b"authorization", f"Bearer {ADMIN_TOKEN}".encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    sent = False
    status = []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])

    await app(scope, receive, send)
    return status[0]


# -- 2. memory lookup overhead ----------------------------------------------------------------

_LOOKUPS = """
import json, statistics, sys, time
mode, count = sys.argv[1], int(sys.argv[2])
if mode == "sdk":
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))
from invalidation_contracts.client import FixMemory, Observed
from invalidation_contracts.domains import get_catalog
from invalidation_contracts.server import Provider
catalog = get_catalog("acme_billing")
provider = Provider(catalog.domain, level=6)
memory = FixMemory("row")
origin = "https://acme.example"
drafts = [dict(f.fields) for f in catalog.task_families.values()]
for draft in drafts:
    outcome = provider.handle(catalog.route, draft)
    memory.observe(origin, Observed(draft, outcome.status, outcome.body.to_wire()))
chunks = []
for _ in range(30):
    start = time.process_time()
    for i in range(count // 30):
        memory.lookup(origin, drafts[i % len(drafts)])
    chunks.append((time.process_time() - start) / (count // 30))
print(json.dumps(statistics.median(chunks)))
"""


def _lookups(size: Size) -> dict[str, Any]:
    per_call: dict[str, list[float]] = {"none": [], "sdk": []}
    code = textwrap.dedent(_LOOKUPS)
    for _ in range(size.lookup_rounds):
        running = {
            mode: subprocess.Popen(
                [sys.executable, "-c", code, mode, str(size.lookups)],
                stdout=subprocess.PIPE,
                text=True,
            )
            for mode in ("none", "sdk")
        }
        for mode, proc in running.items():
            out, _ = proc.communicate(timeout=600)
            if proc.returncode != 0:
                raise RuntimeError(f"the {mode} lookup run failed")
            per_call[mode].append(float(json.loads(out.strip().splitlines()[-1])))
    ratios = [s / n for n, s in zip(per_call["none"], per_call["sdk"], strict=True)]
    return {
        "per_lookup_us": {k: 1e6 * median(v) for k, v in per_call.items()},
        "ratio": median(ratios),
        "spread": _spread(ratios),
        "lookups_per_round": size.lookups,
    }


# -- 3. page update latency from COMMIT -------------------------------------------------------


def _page(size: Size) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-observe-") as tmp:
        database = Path(tmp) / "acme.db"
        create_tables(f"sqlite:///{database}", get_domain(DOMAIN))
        args = ["--domain", DOMAIN, "--metrics", "--db", str(Path(tmp) / "registry.sqlite")]
        args += ["--database", f"sqlite:///{database}"]
        with serve_command(*args) as server:
            base = f"http://127.0.0.1:{server.port}"
            state = _state_latencies(base, database, size.commits)
            page = _browser_latencies(base, database, size.commits)
    return {"state_s": state, "page_s": page, "commits": size.commits}


def _commit(database: Path, i: int) -> float:
    with sqlite3.connect(database) as db:
        db.execute(
            "UPDATE active_csm_codes SET code = ? WHERE key = 'plan_partner_growth'",
            (f"BENCH{i:05d}",),
        )
    return time.perf_counter()


def _headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def _state_latencies(base: str, database: Path, commits: int) -> list[float]:
    out = []
    with httpx.Client(base_url=base, headers=_headers()) as client:
        for i in range(commits):
            seq = client.get("/contract/operator/state").json()["seq"]
            committed = _commit(database, i)
            while client.get("/contract/operator/state").json()["seq"] == seq:
                if time.perf_counter() - committed > 30:
                    raise RuntimeError("the state document never showed the commit")
                time.sleep(0.005)
            out.append(time.perf_counter() - committed)
    return out


def _browser_latencies(base: str, database: Path, commits: int) -> list[float] | None:
    with _chromium() as driver:
        if driver is None:
            return None
        driver.get(base + "/contract/operator")
        script = """return document.querySelector('[data-table="active_csm_codes"] .version')
            .textContent"""
        out = []
        for i in range(commits):
            before = driver.execute_script(script)
            committed = _commit(database, 10_000 + i)
            while driver.execute_script(script) == before:
                if time.perf_counter() - committed > 30:
                    raise RuntimeError("the page never showed the commit")
                time.sleep(0.01)
            out.append(time.perf_counter() - committed)
        return out


@contextmanager
def _chromium() -> Iterator[Any]:
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        yield None
        return
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": _headers()})
        yield driver
    finally:
        driver.quit()


# -- report -----------------------------------------------------------------------------------


def _quantiles(values: list[float] | None) -> tuple[str, str]:
    if not values:
        return "–", "–"
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return f"{1000 * median(ordered):.0f}", f"{1000 * p99:.0f}"


def _spread_cells(spread: dict[str, float] | None) -> list[str]:
    if not spread:
        return ["–", "–"]
    return [
        f"{spread['p25']:.3f}–{spread['p75']:.3f}",
        f"{spread['min']:.3f}–{spread['max']:.3f}",
    ]


def _report(data: dict[str, Any], size: Size) -> StudyResult:
    requests, lookups, page = data["requests"], data["lookups"], data["page"]
    handle = data["handle"]
    asgi = data["asgi"]
    checks = [
        Check(
            f"provider request path with `instrument` within {REQUEST_TARGET:.2f}× of without "
            "(in-process, interleaved)",
            f"{handle['ratio']:.3f}×",
            handle["ratio"] <= REQUEST_TARGET,
        ),
        Check(
            f"the whole app with `--metrics` within {REQUEST_TARGET:.2f}× of without (in-process "
            "ASGI, interleaved; an upper bound on the server's ratio)",
            f"{asgi['ratio']:.3f}×",
            asgi["ratio"] <= REQUEST_TARGET,
        ),
        Check(
            f"server CPU per request with `--metrics` within {REQUEST_TARGET:.2f}× of without "
            "(interleaved slots)",
            f"{requests['ratio']:.3f}×",
            requests["ratio"] <= REQUEST_TARGET,
        ),
        Check(
            f"memory lookup with a meter provider within {LOOKUP_TARGET:.2f}× of none",
            f"{lookups['ratio']:.3f}×",
            lookups["ratio"] <= LOOKUP_TARGET,
        ),
    ]
    cpu = requests["cpu_per_request_us"]
    per = lookups["per_lookup_us"]
    own = handle["cpu_per_request_us"]
    overhead = markdown_table(
        ["Measure", "Off (µs)", "On (µs)", "On / off (median)", "Quartiles", "Range"],
        [
            [
                "`ContractService.handle`, in-process CPU per request (failures mix, 422)",
                f"{own['off']:.0f}",
                f"{own['on']:.0f}",
                f"**{handle['ratio']:.3f}**",
                *_spread_cells(handle.get("spread")),
            ],
            [
                "the whole app `serve` runs, in-process through ASGI: CPU per request (failures "
                "mix, 422; middleware, routing, thread pool, `handle`; no sockets)",
                f"{asgi['cpu_per_request_us']['off']:.0f}",
                f"{asgi['cpu_per_request_us']['on']:.0f}",
                f"**{asgi['ratio']:.3f}**",
                *_spread_cells(asgi.get("spread")),
            ],
            [
                "server CPU per request (failures mix, 422)",
                f"{cpu['off']:.0f}",
                f"{cpu['on']:.0f}",
                f"**{requests['ratio']:.3f}**",
                *_spread_cells(requests.get("spread")),
            ],
            [
                "noise floor: a second server without `--metrics` against the first (A/A)",
                f"{cpu['off']:.0f}",
                f"{cpu.get('again', float('nan')):.0f}",
                f"{requests.get('aa_ratio', float('nan')):.3f}",
                *_spread_cells(requests.get("aa_spread")),
            ],
            [
                "`FixMemory.lookup`, CPU per call (no provider / SDK provider)",
                f"{per['none']:.2f}",
                f"{per['sdk']:.2f}",
                f"**{lookups['ratio']:.3f}**",
                *_spread_cells(lookups.get("spread")),
            ],
        ],
    )
    state50, state99 = _quantiles(page["state_s"])
    page50, page99 = _quantiles(page["page_s"])
    latency = markdown_table(
        ["From COMMIT to", "p50 (ms)", "p99 (ms)", "Commits"],
        [
            ["the state document (capture → worker)", state50, state99, str(page["commits"])],
            [
                "the page in headless Chromium (script polls every 500 ms)",
                page50,
                page99,
                str(page["commits"]) if page["page_s"] is not None else "no chromium",
            ],
        ],
    )
    md = "\n\n".join(
        [
            (
                "Every ratio is the median of per-round (or per-chunk) ratios, with their "
                "quartiles and range. Requests: three servers (without `--metrics`, with it, and "
                "a second one without as a noise floor, A/A), each loaded alone in its slot of "
                f"{size.round_s:g} s, the order rotating, {size.rounds} round(s); one keep-alive "
                "connection, sequential `POST /v1/subscriptions` of the failures mix (every "
                f"draft, answered 422), after {size.warmup} warm-up requests; server CPU per "
                "request from `/proc/<pid>/task/*/schedstat` (ns, every thread), the instrumented "
                "server's one scrape per slot included. Lookups: two fresh interpreters at once "
                f"(same load), {size.lookup_rounds} round(s) of {size.lookups} lookups each, "
                "process CPU time, the median of 30 chunks. In-process: "
                f"{size.handle_chunks} interleaved chunks of {size.handle_chunk} requests "
                "through `ContractService.handle` (policies, rendering, telemetry and client "
                "scoring; no HTTP), process CPU time; the whole app the same way through ASGI "
                f"calls, then {size.scrapes} scrapes of the metrics route: "
                f"{asgi['scrape_cpu_ms']:.1f} ms of CPU each. Page: "
                f"{size.commits} plain-SQL `UPDATE`s of one row of `active_csm_codes` committed "
                "to the provider's SQLite database, one at a time."
            ),
            overhead,
            latency,
        ]
    )
    return StudyResult(NAME, TITLE, md, checks, [], json.loads(json.dumps(data)))
