"""``serve --workers 4``: server CPU per request with ``--metrics`` against without (issue 42).

Two ``serve --workers 4`` of acme billing on SQLite registries, loaded in interleaved slots (the
order alternating by round) with the failures mix (every draft answered 422) over 8 keep-alive
connections, so every worker serves; the instrumented one is scraped once per slot (one scrape
merges every worker's published file). CPU is read from ``/proc/<pid>/task/*/schedstat`` of the
parent and of every worker (nanoseconds, every thread, the workers' publishing and flush threads
included); the figure is the median of per-round on/off ratios. A third server, ``--metrics
--client-scores worker``, is loaded in the same rounds: the cost of the shared scores apart. A
standalone script (not a registered study): ``python -m benchmarks.observe_workers [--rounds N]
[--round-s S]``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import httpx

from invalidation_contracts.domains import get_catalog

from . import loadgen
from .common import median, thread_cpu
from .provider_load import DOMAIN, request_mixes
from .servers import ADMIN_TOKEN, serve_command

WORKERS = 4
CONNECTIONS = 8
TARGET = 1.05


def _pids(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [pid, *(int(child) for child in children)]


def _cpu(pid: int) -> dict[tuple[int, str], int]:
    """CPU nanoseconds of every thread of ``pid`` and its worker processes."""
    out: dict[tuple[int, str], int] = {}
    for process in _pids(pid):
        try:
            out.update({(process, tid): ns for tid, ns in thread_cpu(process).items()})
        except (OSError, RuntimeError):
            continue
    return out


def _cpu_since(pid: int, before: dict[tuple[int, str], int]) -> float:
    now = _cpu(pid)
    return sum(ns - before.get(key, 0) for key, ns in now.items()) / 1e9


def run(rounds: int, round_s: float) -> dict[str, object]:
    path = get_catalog(DOMAIN).route.path
    bodies = request_mixes()["failures"]
    per_request: dict[str, list[float]] = {"off": [], "on": [], "on_worker_scores": []}
    with tempfile.TemporaryDirectory() as folder:
        common = ["--domain", DOMAIN, "--workers", str(WORKERS)]
        with (
            serve_command(*common, "--db", f"{folder}/off.sqlite") as off,
            serve_command(*common, "--db", f"{folder}/on.sqlite", "--metrics") as on,
            serve_command(
                *common, "--db", f"{folder}/own.sqlite", "--metrics", "--client-scores", "worker"
            ) as own,
        ):
            servers = {"off": off, "on": on, "on_worker_scores": own}
            names = list(servers)
            for server in servers.values():
                loadgen.run_side_by_side([server.port], path, bodies, CONNECTIONS, round_s)
            for r in range(rounds):
                for name in names[r % 3 :] + names[: r % 3]:
                    server = servers[name]
                    before = _cpu(server.pid)
                    (trial,) = loadgen.run_side_by_side(
                        [server.port], path, bodies, CONNECTIONS, round_s
                    )
                    if name != "off":
                        reply = httpx.get(
                            f"http://127.0.0.1:{server.port}/contract/metrics",
                            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
                        )
                        reply.raise_for_status()
                    used = _cpu_since(server.pid, before)
                    per_request[name].append(used / max(1, len(trial.latencies_s)))
    ratios = [h / lo for lo, h in zip(per_request["off"], per_request["on"], strict=True)]
    own = per_request["on_worker_scores"]
    worker_ratios = [h / lo for lo, h in zip(per_request["off"], own, strict=True)]
    return {
        "workers": WORKERS,
        "connections": CONNECTIONS,
        "rounds": rounds,
        "round_s": round_s,
        "cpu_per_request_us": {k: 1e6 * median(v) for k, v in per_request.items()},
        "ratio": median(ratios),
        "ratios": ratios,
        "ratio_worker_scores": median(worker_ratios),
        "ratios_worker_scores": worker_ratios,
        "target": TARGET,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--round-s", type=float, default=2.0)
    args = parser.parse_args()
    print(json.dumps(run(args.rounds, args.round_s), indent=2))


if __name__ == "__main__":
    main()
