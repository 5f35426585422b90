"""Study — retrofit overhead (issue 21): server CPU per request of one FastAPI shop with its routes
on a plain ``APIRouter`` against the same routes on the contract's router (``service.router()``,
whose route class runs the policy check and stamps the answer), same run.

Setup: the shop of docs/examples/retrofit_app.py (a ``plans`` table in SQLite made with plain
SQL, the ``funding_policy`` on ``POST /v1/orders``) plus ``GET /v1/plans/{plan}`` (a small answer)
and ``GET /v1/catalog`` (a ~20 KB one, ``CATALOG``). The handlers
are the same code in both apps and do no I/O (they answer from a dict), so the ratio is the
route class's whole cost against a near-empty endpoint: an upper bound for a real handler. Each
app is served by real uvicorn (one process each, started as ``uvicorn --factory``); a keep-alive
client sends blocks of requests, alternating app and method, and the server's CPU over each block
(every thread's time on a CPU, ``/proc/PID/task/*/schedstat``, in nanoseconds: the 10-ms ticks of
``/proc/PID/stat`` quantise a block of 1500 requests to ±2 %) is divided by its requests. The
POST is a passing order.

Each round sends one block per app and method, the two apps' blocks of a method back to back (the
order alternating between rounds), so a round's with/without ratio compares blocks a second
apart; the ratio reported is the median of the rounds' ratios (a load burst on a shared machine
moves one round, not the median), with the rounds' spread beside it.

Beside the ratio: the contract's *extra* CPU per request in µs (with − without), which does not
depend on what the endpoint costs, and an A/A ratio: a second copy of the app without the
contract, measured in the same rounds, against the first — the ratio this run gives to no
difference at all, so a reader can tell a gap of a few percent from the machine's noise.
"""

from __future__ import annotations

import cProfile
import importlib.util
import io
import os
import pstats
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
from fastapi import APIRouter, FastAPI

from .common import Check, StudyResult, cpu_since, markdown_table, median, thread_cpu

NAME = "retrofit"
TITLE = "Retrofit overhead: server CPU per request with and without the contract"
BUDGET_US = 50.0
"""What the contract may add to a retrofitted request, in µs of server CPU (issue 40: an absolute
budget replaces issue 21's ratio, which depends on how little the endpoint does)."""
IDLE_S = 3.0
AGAIN = "without (A/A)"
"""A second copy of the app without the contract: the run's noise floor (``run``)."""
ROOT = Path(__file__).resolve().parents[1]
PLANS = {"basic": "card", "enterprise": "invoice"}
ORDER = {"plan": "enterprise", "funding_type": "invoice"}
CATALOG = [
    {"id": i, "name": f"item {i}", "plan": "basic", "price": i * 1.5, "tags": ["a", "b"]}
    for i in range(300)
]
"""A larger answer (~20 KB of JSON): the part of the contract's cost that grows with the body."""
REQUESTS = {
    "POST": ("POST", "/v1/orders"),
    "GET": ("GET", "/v1/plans/enterprise"),
    "GET, 20 KB answer": ("GET", "/v1/catalog"),
}
"""The requests each round sends, by the name the tables give them: a passing order (its policy
check runs and passes), a small answer, and a large one."""


@dataclass(frozen=True, slots=True)
class Size:
    requests: int
    rounds: int


FULL = Size(requests=1500, rounds=15)
QUICK = Size(requests=100, rounds=1)


def _example() -> ModuleType:
    """docs/examples/retrofit_app.py, whose shop (``Order``, ``funding_policy``, ``DOMAIN``) both
    apps serve: the benchmark measures the example, not a copy of it."""
    name = "invalidation_contracts_retrofit_example"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "docs/examples/retrofit_app.py")
        assert spec is not None and spec.loader is not None
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[name]


Order = _example().Order
DOMAIN = _example().DOMAIN


def _routes(router: APIRouter) -> APIRouter:
    """The shop's own handlers, the same code on either router."""

    @router.post("/v1/orders")
    async def place_order(order: Order) -> dict[str, Any]:
        return {"order": "accepted", "plan": order.plan}

    @router.get("/v1/plans/{plan}")
    async def show_plan(plan: str) -> dict[str, Any]:
        return {"plan": plan, "funding": PLANS.get(plan)}

    @router.get("/v1/catalog")
    async def catalog() -> dict[str, Any]:
        return {"items": CATALOG}

    return router


def plain_app() -> FastAPI:
    """The shop without the contract."""
    app = FastAPI(title="Shop")
    app.include_router(_routes(APIRouter()))
    return app


def contract_app() -> FastAPI:
    """The shop with the contract (database and registry from the environment)."""
    from invalidation_contracts.server.http import ContractService

    contract = ContractService.open(
        DOMAIN,
        database=os.environ["SHOP_DATABASE"],
        store=os.environ["SHOP_REGISTRY"],
        admin_token="bench",
    )
    app = FastAPI(title="Shop", lifespan=contract.lifespan)
    app.include_router(contract.contract_router(), prefix="/api")
    app.include_router(_routes(contract.router()))
    return app


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _uvicorn(factory: str, env: Mapping[str, str]) -> Iterator[tuple[int, int]]:
    """``uvicorn --factory`` serving ``factory``; yields (pid, port) once it answers."""
    port = _port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "--factory",
            factory,
            "--port",
            str(port),
            "--log-level",
            "warning",
            "--no-access-log",
        ],
        cwd=ROOT,
        env={**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])},
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v1/plans/basic").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"{factory} did not start")
            time.sleep(0.1)
        yield proc.pid, port
    finally:
        proc.terminate()
        proc.wait(30)


def _answer_size(request: str) -> int:
    """The bytes of JSON the shop's handler answers to ``request`` (without the contract)."""
    from fastapi.testclient import TestClient

    method, path = REQUESTS[request]
    with TestClient(plain_app()) as http:
        return len(http.request(method, path, json=ORDER if method == "POST" else None).content)


def _idle(pid: int, seconds: float) -> float:
    """The server's CPU seconds per second while no request arrives (its background work)."""
    before = thread_cpu(pid)
    time.sleep(seconds)
    return cpu_since(pid, before) / seconds


def _block(http: httpx.Client, pid: int, request: str, n: int) -> tuple[float, float]:
    """Server CPU seconds, and wall seconds, per request over ``n`` of ``REQUESTS[request]``."""
    method, path = REQUESTS[request]
    body = ORDER if method == "POST" else None
    before, started = thread_cpu(pid), time.monotonic()
    for _ in range(n):
        answer = http.request(method, path, json=body)
        if answer.status_code != 200:
            raise RuntimeError(f"{request} answered {answer.status_code}: {answer.text[:200]}")
    return cpu_since(pid, before) / n, (time.monotonic() - started) / n


def _profile(env: Mapping[str, str], n: int) -> str:
    """Where the contract app's CPU goes: ``n`` passing POSTs in process (the ASGI app called in
    this thread, its lifespan running), the library's functions by cumulative time."""
    import asyncio

    os.environ.update(env)
    app = contract_app()
    profiler = cProfile.Profile()

    async def drive() -> None:
        transport = httpx.ASGITransport(app=app)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http,
        ):
            await http.post("/v1/orders", json=ORDER)
            profiler.enable()
            for _ in range(n):
                await http.post("/v1/orders", json=ORDER)
            profiler.disable()

    asyncio.run(drive())
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out).sort_stats("cumulative")
    stats.print_stats(r"invalidation_contracts", 12)
    stats.sort_stats("tottime").print_stats(8)
    return out.getvalue()


def _breakdown(env: Mapping[str, str], n: int) -> dict[str, float]:
    """CPU µs per call of the route class's parts, in process: the policy check itself (run
    inline on the event loop), stamping a small JSON answer, and reading the registry state."""
    import asyncio

    from fastapi.responses import JSONResponse

    from invalidation_contracts.server import Asked
    from invalidation_contracts.server.http import ContractService
    from invalidation_contracts.server.http.stamping import stamp

    service = ContractService.open(
        DOMAIN, database=env["SHOP_DATABASE"], store=env["SHOP_REGISTRY"], admin_token="bench"
    )
    app = FastAPI(lifespan=service.lifespan)
    route, model = DOMAIN.routes[0], Order.model_validate(ORDER)
    out: dict[str, float] = {}

    async def drive() -> None:
        async with app.router.lifespan_context(app):
            state = await service.state_for(None, None)
            started = time.process_time()
            for _ in range(n):
                service.provider.check(route, model, state, Asked(instance="/"))
            out["policy check (`provider.check`)"] = (time.process_time() - started) / n * 1e6
            answers = [JSONResponse({"order": "accepted", "plan": "enterprise"}) for _ in range(n)]
            started = time.process_time()
            for answer in answers:
                stamp(service, answer, state, None, None)
            out["stamping the answer (`stamp`)"] = (time.process_time() - started) / n * 1e6
            started = time.process_time()
            for _ in range(n):
                await service.state_for(None, None)
            out["registry state (`state_for`)"] = (time.process_time() - started) / n * 1e6

    asyncio.run(drive())
    return out


def run(quick: bool = False, out_dir: Path | None = None) -> StudyResult:
    size = QUICK if quick else FULL
    with tempfile.TemporaryDirectory(prefix="retrofit-") as work:
        shop = Path(work) / "shop.db"
        with sqlite3.connect(shop) as db:
            db.execute("CREATE TABLE plans (id TEXT PRIMARY KEY, funding TEXT NOT NULL)")
            db.executemany("INSERT INTO plans VALUES (?, ?)", PLANS.items())
        env = {"SHOP_DATABASE": f"sqlite:///{shop}", "SHOP_REGISTRY": str(Path(work) / "reg")}
        per: dict[tuple[str, str], list[float]] = {}
        net: dict[tuple[str, str], list[float]] = {}
        with (
            _uvicorn("benchmarks.retrofit_overhead:plain_app", env) as plain,
            _uvicorn("benchmarks.retrofit_overhead:contract_app", env) as contract,
            _uvicorn("benchmarks.retrofit_overhead:plain_app", env) as again,
        ):
            servers = {"without": plain, "with": contract, AGAIN: again}
            clients = {
                name: httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
                for name, (_, port) in servers.items()
            }
            try:
                for name, (pid, _) in servers.items():  # warm each
                    for request in REQUESTS:
                        _block(clients[name], pid, request, 20)
                idle = {name: _idle(pid, IDLE_S) for name, (pid, _) in servers.items()}
                for round_ in range(size.rounds):
                    for method in REQUESTS:
                        # "without" in the middle: both pairs a round compares run back to back
                        order = ["with", "without", AGAIN][:: 1 if round_ % 2 == 0 else -1]
                        for name in order:
                            pid = servers[name][0]
                            cost, wall = _block(clients[name], pid, method, size.requests)
                            per.setdefault((name, method), []).append(cost)
                            net.setdefault((name, method), []).append(cost - idle[name] * wall)
            finally:
                for client in clients.values():
                    client.close()
        medians = {k: median(v) for k, v in per.items()}
        rounds = {m: _ratios(per, m) for m in REQUESTS}
        noise = {m: _ratios(per, m, AGAIN) for m in REQUESTS}
        ratios = {m: median(rounds[m]) for m in REQUESTS}
        nets = {k: median(v) for k, v in net.items()}
        net_ratios = {m: median(_ratios(net, m)) for m in REQUESTS}
        extra = {m: (medians[("with", m)] - medians[("without", m)]) * 1e6 for m in REQUESTS}
        above = max(extra.values()) > BUDGET_US
        profile = _profile(env, 50 if quick else 300) if above else ""
        parts = _breakdown(env, 200 if quick else 2000) if above else {}
    rows = [
        [
            method,
            f"{medians[('without', method)] * 1e6:.0f}",
            f"{medians[('with', method)] * 1e6:.0f}",
            f"**{ratios[method]:.2f}×**",
            f"{min(rounds[method]):.2f}–{max(rounds[method]):.2f}×",
            f"**{extra[method]:+.0f}**",
            f"{median(noise[method]):.2f}× ({min(noise[method]):.2f}–{max(noise[method]):.2f}×)",
            f"{nets[('without', method)] * 1e6:.0f}",
            f"{nets[('with', method)] * 1e6:.0f}",
            f"{net_ratios[method]:.2f}×",
        ]
        for method in REQUESTS
    ]
    md = (
        f"The same FastAPI shop, each served by real uvicorn (one process), blocks of "
        f"{size.requests} keep-alive requests alternating app and method, {size.rounds} round(s); "
        "server CPU (every thread of the uvicorn process, from schedstat in ns) per request, "
        "median over rounds; "
        "the ratio is the median of the rounds' ratios (each round's two blocks of a method run "
        "back to back), its range the rounds' lowest and highest. "
        "Handlers answer from a dict (no I/O), so the ratio is an upper bound for a real "
        "handler. POST is a passing order (the policy check runs and passes); the GETs answer "
        f"{_answer_size('GET')} and {_answer_size('GET, 20 KB answer')} bytes of JSON.\n\n"
        + markdown_table(
            [
                "request",
                "without the contract (µs CPU)",
                "with the contract (µs CPU)",
                "ratio (median of rounds)",
                "rounds' range",
                "extra (µs CPU)",
                "A/A: a second app without / without (rounds' range)",
                "without, net of idle (µs)",
                "with, net of idle (µs)",
                "ratio net of idle",
            ],
            rows,
        )
        + f"\n\nBudget: the contract adds ≤ {BUDGET_US:.0f} µs of server CPU per request. "
        "*Extra*: the contract's own CPU per request, with − "
        "without (medians); it is what the contract adds whatever the app costs, while the "
        "ratio shrinks as the endpoint does more and grows on a faster server stack. *A/A*: a "
        "second copy of the app without the contract, measured in the same rounds and taken "
        "the same way, against the first: how far this run's ratios move with no difference "
        "at all (1.00× if the machine were quiet). "
        f"Idle CPU (no requests, {IDLE_S:g} s): without the contract "
        f"{idle['without'] * 100:.1f} % (the second copy {idle[AGAIN] * 100:.1f} %), with it "
        f"{idle['with'] * 100:.1f} % of a core "
        "(the contract app's follower); *net of idle* subtracts that rate over each block's "
        "wall time. The ratio that counts is the first (the server's whole CPU)."
    )
    if profile:
        md += (
            "\n\nOver the budget: where the contract app's time goes (cProfile of passing "
            "POSTs, the ASGI app driven in process; the library's functions by cumulative "
            "time, then all by own time; the endpoint's wrapper (`checked_async`) runs the "
            "policy inline, on the event loop, on the model FastAPI validated):\n\n```\n"
            + _trim(profile)
            + "\n```\n\nParts of the route class timed alone in process (CPU µs per call; the "
            "rest of the difference is the contract headers, handing the check to the endpoint, "
            "the Link header, routing past the contract router and the follower):\n\n"
            + markdown_table(["part", "µs CPU"], [[k, f"{v:.1f}"] for k, v in parts.items()])
        )
    checks = [
        Check(
            f"{m}: the contract adds ≤ {BUDGET_US:.0f} µs of server CPU per request (issue 40)",
            f"{extra[m]:+.0f} µs ({ratios[m]:.2f}×)",
            extra[m] <= BUDGET_US,
        )
        for m in REQUESTS
    ]
    data = {
        "cpu_s_per_request": {f"{n}/{m}": v for (n, m), v in per.items()},
        "ratios": ratios,
        "round_ratios": rounds,
        "extra_us": extra,
        "noise_ratios": {m: median(noise[m]) for m in REQUESTS},
        "net_ratios": net_ratios,
        "idle_cpu_per_s": idle,
        "profile": profile,
        "parts_us": parts,
    }
    return StudyResult(NAME, TITLE, md, checks, [], data)


def _ratios(
    per: dict[tuple[str, str], list[float]], method: str, server: str = "with"
) -> list[float]:
    """Each round's ``server`` / without ratio for ``method`` (its two blocks ran back to back)."""
    return [s / o for s, o in zip(per[(server, method)], per[("without", method)], strict=True)]


def _trim(profile: str) -> str:
    keep = [
        line.replace(str(ROOT) + "/", "").replace(str(Path(os.__file__).parent) + "/", "")
        for line in profile.splitlines()
        if line.strip() and not line.lstrip().startswith(("Ordered by", "List reduced"))
    ]
    return "\n".join(keep)
