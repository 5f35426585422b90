"""The retrofit study's with/without comparison in process, for a machine too loaded for uvicorn
runs to resolve 50 µs (benchmarks/NOTES.md, "The retrofit budget, part three").

Each request is one raw ASGI call of the study's ``plain_app`` or ``contract_app`` (the scope,
headers and body a keep-alive httpx client sends); a block's cost is this thread's CPU time
(``time.thread_time``, free of the other load's scheduling) over ``N`` requests. Per round the two
apps' blocks of a request run back to back, their order alternating; *extra* is the median over
rounds of with − without. Run it for two trees at the same time (``PYTHONPATH=<tree>/src``), so
both see the same load::

    python -m benchmarks.retrofit_inprocess 1500 15
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import retrofit_overhead as study

HEADERS = [
    (b"host", b"127.0.0.1:8000"),
    (b"user-agent", b"python-httpx/0.28"),
    (b"accept", b"*/*"),
    (b"accept-encoding", b"gzip, deflate"),
    (b"connection", b"keep-alive"),
]


def _scope(method: str, path: str, body: bytes, state: dict[str, Any]) -> dict[str, Any]:
    headers = list(HEADERS)
    if body:
        headers += [
            (b"content-length", str(len(body)).encode()),
            (b"content-type", b"application/json"),
        ]
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 5000),
        "scheme": "http",
        "method": method,
        "root_path": "",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": headers,
        "state": dict(state),
    }


async def _one(app: Any, method: str, path: str, body: bytes, state: dict[str, Any]) -> None:
    sent: list[dict[str, Any]] = []
    received = False

    async def receive() -> dict[str, Any]:
        nonlocal received
        if not received:
            received = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(_scope(method, path, body, state), receive, send)
    if sent[0]["status"] != 200:
        raise RuntimeError(f"{method} {path} answered {sent[0]['status']}")


async def _compare(n: int, rounds: int) -> dict[str, dict[str, float]]:
    plain, contract = study.plain_app(), study.contract_app()
    order = json.dumps(study.ORDER).encode()
    requests = {
        name: (method, path, order if method == "POST" else b"")
        for name, (method, path) in study.REQUESTS.items()
    }
    costs: dict[tuple[str, str], list[float]] = {}
    async with (
        plain.router.lifespan_context(plain) as plain_state,
        contract.router.lifespan_context(contract) as contract_state,
    ):
        apps = {"without": (plain, plain_state or {}), "with": (contract, contract_state or {})}
        for method, path, body in requests.values():  # warm both
            for app, state in apps.values():
                for _ in range(50):
                    await _one(app, method, path, body, state)
        for round_ in range(rounds):
            for name, (method, path, body) in requests.items():
                for which in list(apps)[:: 1 if round_ % 2 == 0 else -1]:
                    app, state = apps[which]
                    started = time.thread_time()
                    for _ in range(n):
                        await _one(app, method, path, body, state)
                    costs.setdefault((which, name), []).append((time.thread_time() - started) / n)
    return {
        name: {
            "without_us": statistics.median(costs[("without", name)]) * 1e6,
            "with_us": statistics.median(costs[("with", name)]) * 1e6,
            "extra_us": statistics.median(
                (w - o) * 1e6
                for w, o in zip(costs[("with", name)], costs[("without", name)], strict=True)
            ),
        }
        for name in requests
    }


def main(argv: list[str]) -> None:
    n, rounds = (int(argv[0]), int(argv[1])) if len(argv) == 2 else (1500, 15)
    with tempfile.TemporaryDirectory(prefix="retrofit-") as work:
        shop = Path(work) / "shop.db"
        with sqlite3.connect(shop) as db:
            db.execute("CREATE TABLE plans (id TEXT PRIMARY KEY, funding TEXT NOT NULL)")
            db.executemany("INSERT INTO plans VALUES (?, ?)", study.PLANS.items())
        os.environ["SHOP_DATABASE"] = f"sqlite:///{shop}"
        os.environ["SHOP_REGISTRY"] = str(Path(work) / "registry")
        figures = asyncio.run(_compare(n, rounds))
    for name, row in figures.items():
        print(
            f"{name}: without {row['without_us']:.1f} µs, with {row['with_us']:.1f} µs, "
            f"extra {row['extra_us']:+.1f} µs (budget {study.BUDGET_US:.0f})"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
