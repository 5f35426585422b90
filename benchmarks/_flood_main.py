"""Anonymous slow connections against ``serve --workers 4``: a legitimate client's p99 (issue 42).

A flooder process (its open-file soft limit raised to the hard one) holds ``--slow`` anonymous
connections to the server open, half slowloris (a request line, then one header byte every
``DRIP_S``) and half slow-body (a ``POST`` announcing 1 MiB, then one body byte every ``DRIP_S``),
reopening any the server closes. Meanwhile a legitimate client sends ``--requests`` drafts of the
domain route one after another, each on a fresh connection (a new client, the case a connection
cap hurts), with a ``TIMEOUT_S`` limit. Rounds alternate: no flood, flood, no flood, flood ...
(ratios within one run). Reported: the legitimate p50/p99 with and without the flood, their
ratio (target ≤ 2×), timeouts and non-2xx/422 answers (target 0), and how many slow connections
were open while the legitimate requests ran. A standalone script (not a registered study):
``python -m benchmarks.flood [--slow 1000] [--requests 300] [--rounds 4]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import resource
import tempfile
import time
from multiprocessing.synchronize import Event
from typing import Any

import httpx

from invalidation_contracts.domains import get_catalog

from .common import machine
from .provider_load import DOMAIN, request_mixes
from .servers import serve_command

WORKERS = 4
DRIP_S = 5.0
TIMEOUT_S = 5.0
TARGET = 2.0
JSON = {"Content-Type": "application/json"}


def raise_fd_limit() -> tuple[int, int]:
    """The open-file soft limit raised to the hard one; (soft, hard) after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


async def _slow(port: int, kind: int, stop: Event, opened: Any) -> None:
    """One anonymous slow connection, reopened whenever the server closes it."""
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.5)
            continue
        with opened.get_lock():
            opened.value += 1
        try:
            if kind == 0:  # slowloris: a head that never ends
                writer.write(b"GET /contract/versions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-a: ")
            else:  # slow body: a body announced and never sent
                writer.write(
                    b"POST /contract/versions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    b"Content-Type: application/json\r\nContent-Length: 1048576\r\n\r\n"
                )
            await writer.drain()
            while not stop.is_set() and not reader.at_eof():
                try:
                    await asyncio.wait_for(reader.read(1024), DRIP_S)
                except TimeoutError:
                    writer.write(b"a")
                    await writer.drain()
                else:
                    if reader.at_eof():
                        break
        except OSError:
            pass
        finally:
            with opened.get_lock():
                opened.value -= 1
            writer.close()


def _flooder(port: int, slow: int, stop: Event, opened: Any) -> None:
    raise_fd_limit()

    async def main() -> None:
        tasks = [asyncio.create_task(_slow(port, i % 2, stop, opened)) for i in range(slow)]
        while not stop.is_set():
            await asyncio.sleep(0.1)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())


def _legitimate(port: int, path: str, bodies: list[bytes], requests: int) -> dict[str, Any]:
    latencies, timeouts, bad = [], 0, 0
    url = f"http://127.0.0.1:{port}{path}"
    for i in range(requests):
        started = time.perf_counter()
        try:
            reply = httpx.post(
                url, content=bodies[i % len(bodies)], headers=JSON, timeout=TIMEOUT_S
            )
        except httpx.TimeoutException:
            timeouts += 1
            continue
        except httpx.TransportError:
            bad += 1
            continue
        latencies.append(time.perf_counter() - started)
        bad += reply.status_code not in (200, 422)
    latencies.sort()
    return {"latencies": latencies, "timeouts": timeouts, "bad": bad}


def _quantile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def run(slow: int, requests: int, rounds: int) -> dict[str, Any]:
    limit = raise_fd_limit()
    path = get_catalog(DOMAIN).route.path
    mixes = request_mixes()
    bodies = mixes["failures"] + mixes["successes"]
    phases: dict[str, list[dict[str, Any]]] = {"none": [], "flood": []}
    opened_during: list[int] = []
    with tempfile.TemporaryDirectory() as folder:
        args = ["--domain", DOMAIN, "--workers", str(WORKERS), "--db", f"{folder}/r.sqlite"]
        with serve_command(*args) as server:
            _legitimate(server.port, path, bodies, 30)  # warm every worker
            for r in range(rounds):
                flood = r % 2 == 1
                if not flood:
                    phases["none"].append(_legitimate(server.port, path, bodies, requests))
                    continue
                stop = multiprocessing.Event()
                opened = multiprocessing.Value("i", 0)
                flooder = multiprocessing.Process(
                    target=_flooder, args=(server.port, slow, stop, opened)
                )
                flooder.start()
                deadline = time.monotonic() + 60
                while opened.value < slow and time.monotonic() < deadline:
                    time.sleep(0.1)
                at_start = opened.value
                phases["flood"].append(_legitimate(server.port, path, bodies, requests))
                opened_during.append(min(at_start, opened.value))
                stop.set()
                flooder.join(30)
                if flooder.is_alive():
                    flooder.kill()
    out: dict[str, Any] = {"fd_limit": list(limit), "slow_asked": slow, "requests": requests}
    for name, runs in phases.items():
        latencies = sorted(x for run in runs for x in run["latencies"])
        out[name] = {
            "p50_ms": 1e3 * _quantile(latencies, 0.5),
            "p99_ms": 1e3 * _quantile(latencies, 0.99),
            "answered": len(latencies),
            "timeouts": sum(run["timeouts"] for run in runs),
            "bad": sum(run["bad"] for run in runs),
        }
    out["slow_open_during_flood"] = opened_during
    out["p99_ratio"] = out["flood"]["p99_ms"] / out["none"]["p99_ms"]
    out["target"] = TARGET
    out["met"] = out["p99_ratio"] <= TARGET and out["flood"]["timeouts"] == 0
    out["machine"] = {
        k: v for k, v in machine().items() if k in ("nproc", "load_average", "commit")
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slow", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    print(json.dumps(run(args.slow, args.requests, args.rounds), indent=2))


if __name__ == "__main__":
    main()
