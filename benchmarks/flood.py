"""Anonymous slow connections against ``serve --workers 4``: a legitimate client's p99 (issue 42).

A flooder process (its open-file soft limit raised to the hard one, its priority lowered by
``--flooder-nice``, 0 by default) holds ``--slow`` anonymous connections to the server open, half
slowloris (a request line, then one header byte every ``DRIP_S``) and half slow-body (a ``POST``
of the domain route, the route that reads a body, announcing 1 MiB, then one body byte every
``DRIP_S``), reopening any the server closes. Meanwhile a legitimate client sends drafts of that
route one after another for ``--round-s`` seconds (long enough to meet the header timeout's cuts
and the flooder's reopening), each on a fresh connection (keep-alive off: a new client, the case
a connection cap hurts) through one ``httpx.Client`` (building a client per request, TLS context
and all, timed the client's CPU, not the server), with a ``TIMEOUT_S`` limit. Rounds alternate:
no flood, flood, no flood, flood ... (ratios within one run). Reported: the legitimate p50, p99,
p99.9 and max with and without the flood, the p99 ratio (target ≤ 2×), timeouts and answers other
than 200/422 (target 0), the workers' CPU seconds a second in each round, and how many slow
connections were open while the legitimate requests ran. A standalone script (not a registered
study): ``python -m benchmarks.flood [--slow 1000] [--round-s 30] [--rounds 4] [--flooder-nice 0]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import resource
import tempfile
import time
from multiprocessing.synchronize import Event
from pathlib import Path
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


async def _slow(port: int, path: str, kind: int, stop: Event, opened: Any) -> None:
    """One anonymous slow connection, reopened whenever the server closes it: a slowloris
    head, or a body the server reads (``path`` is the route that reads one: a body sent to a
    route that answers without reading it is shed at once, not held)."""
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
                    f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode()
                    + b"Content-Type: application/json\r\nContent-Length: 1048576\r\n\r\n"
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


def _flooder(port: int, path: str, slow: int, stop: Event, opened: Any, nice: int) -> None:
    raise_fd_limit()
    os.nice(nice)  # an attacker's CPU is not the server's: ``--flooder-nice`` says how much

    async def main() -> None:
        tasks = [asyncio.create_task(_slow(port, path, i % 2, stop, opened)) for i in range(slow)]
        while not stop.is_set():
            await asyncio.sleep(0.1)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())


def _legitimate(port: int, path: str, bodies: list[bytes], seconds: float) -> dict[str, Any]:
    """Drafts one after another for ``seconds``, each on a new connection (keep-alive off: a new
    client, the case a connection cap hurts) through one ``httpx.Client``, so the time measured
    is the server's and the network's, not the building of a client (TLS context and all) that
    ``httpx.post`` repeats on every call."""
    latencies, timeouts, bad = [], 0, 0
    limits = httpx.Limits(max_keepalive_connections=0)
    with httpx.Client(
        base_url=f"http://127.0.0.1:{port}", timeout=TIMEOUT_S, limits=limits
    ) as client:
        end, i = time.perf_counter() + seconds, 0
        while time.perf_counter() < end:
            i += 1
            started = time.perf_counter()
            try:
                reply = client.post(path, content=bodies[i % len(bodies)], headers=JSON)
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


def _family_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) that ``pid``'s child processes (the workers) have used."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text(encoding="ascii").rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def _round(port: int, path: str, bodies: list[bytes], seconds: float, pid: int) -> dict[str, Any]:
    """One round of legitimate requests, with the workers' CPU per second while it ran."""
    cpu, started = _family_cpu_s(pid), time.monotonic()
    result = _legitimate(port, path, bodies, seconds)
    result["workers_cpu"] = (_family_cpu_s(pid) - cpu) / (time.monotonic() - started)
    result["p99_ms"] = 1e3 * _quantile(result["latencies"], 0.99)
    return result


def run(slow: int, round_s: float, rounds: int, nice: int = 0) -> dict[str, Any]:
    limit = raise_fd_limit()
    path = get_catalog(DOMAIN).route.path
    mixes = request_mixes()
    bodies = mixes["failures"] + mixes["successes"]
    phases: dict[str, list[dict[str, Any]]] = {"none": [], "flood": []}
    opened_during: list[int] = []
    with tempfile.TemporaryDirectory() as folder:
        args = ["--domain", DOMAIN, "--workers", str(WORKERS), "--db", f"{folder}/r.sqlite"]
        with serve_command(*args) as server:
            _legitimate(server.port, path, bodies, 1.0)  # warm every worker
            for r in range(rounds):
                if r % 2 == 0:
                    phases["none"].append(_round(server.port, path, bodies, round_s, server.pid))
                    continue
                stop = multiprocessing.Event()
                opened = multiprocessing.Value("i", 0)
                flooder = multiprocessing.Process(
                    target=_flooder, args=(server.port, path, slow, stop, opened, nice)
                )
                flooder.start()
                deadline = time.monotonic() + 60
                while opened.value < slow and time.monotonic() < deadline:
                    time.sleep(0.1)
                at_start = opened.value
                phases["flood"].append(_round(server.port, path, bodies, round_s, server.pid))
                opened_during.append(min(at_start, opened.value))
                stop.set()
                flooder.join(30)
                if flooder.is_alive():
                    flooder.kill()
    out: dict[str, Any] = {
        "fd_limit": list(limit),
        "slow_asked": slow,
        "round_s": round_s,
        "flooder_nice": nice,
    }
    for name, runs in phases.items():
        latencies = sorted(x for run in runs for x in run["latencies"])
        out[name] = {
            "p50_ms": 1e3 * _quantile(latencies, 0.5),
            "p99_ms": 1e3 * _quantile(latencies, 0.99),
            "p999_ms": 1e3 * _quantile(latencies, 0.999),
            "max_ms": 1e3 * latencies[-1] if latencies else float("nan"),
            "p99_ms_per_round": [round(run["p99_ms"], 1) for run in runs],
            "workers_cpu_per_s": [round(run["workers_cpu"], 3) for run in runs],
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
    parser.add_argument("--round-s", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--flooder-nice", type=int, default=0)
    args = parser.parse_args()
    result = run(args.slow, args.round_s, args.rounds, args.flooder_nice)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
