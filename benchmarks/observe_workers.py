"""``serve --workers 4``: server CPU per request with ``--metrics`` against without (issue 42).

Two ``serve --workers 4`` of acme billing on SQLite registries, loaded in interleaved slots (the
order alternating by round) with the failures mix (every draft answered 422) over 8 keep-alive
connections, so every worker serves; the instrumented one is scraped once per slot (one scrape
merges every worker's published file). CPU is read from ``/proc/<pid>/task/*/schedstat`` of the
parent and of every worker (nanoseconds, every thread, the workers' publishing and flush threads
included); the figure is the median of per-round on/off ratios. A third server, ``--metrics
--client-scores worker``, is loaded in the same rounds: the cost of the shared scores apart. A
standalone script (not a registered study): ``python -m benchmarks.observe_workers [--rounds N]
[--round-s S] [--against SRC]`` (``SRC``: another tree's ``src``, e.g. main's, loaded without and
with ``--metrics`` in the same rounds: an A/B in one run).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path

import httpx

from invalidation_contracts.domains import get_catalog

from . import loadgen
from . import servers as _servers
from .common import median, thread_cpu
from .provider_load import DOMAIN, request_mixes
from .servers import ADMIN_TOKEN, Server, free_port, serve_command

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


def _serve(against: str | None, *args: str) -> AbstractContextManager[Server]:
    """``serve ARGS`` from this tree, or from the source tree ``against`` (its ``src``)."""
    if against is None:
        return serve_command(*args)
    port = free_port()
    command = [sys.executable, "-m", "invalidation_contracts.cli", "serve", *args]
    env = {**os.environ, "PYTHONPATH": against}
    return _servers.process([*command, "--port", str(port)], port, env)


def _ratios(per_request: dict[str, list[float]], on: str, off: str) -> list[float]:
    return [h / lo for lo, h in zip(per_request[off], per_request[on], strict=True)]


def run(rounds: int, round_s: float, against: str | None = None) -> dict[str, object]:
    """``against``: also load ``serve`` from that source tree (e.g. main's ``src``) without and
    with ``--metrics``, in the same rounds (an A/B in one run)."""
    path = get_catalog(DOMAIN).route.path
    bodies = request_mixes()["failures"]
    with tempfile.TemporaryDirectory() as folder, ExitStack() as stack:
        common = ["--domain", DOMAIN, "--workers", str(WORKERS)]
        shape = {
            "off": (None, ()),
            "on": (None, ("--metrics",)),
            "on_worker_scores": (None, ("--metrics", "--client-scores", "worker")),
        }
        if against is not None:
            shape |= {"against_off": (against, ()), "against_on": (against, ("--metrics",))}
        servers = {
            name: stack.enter_context(
                _serve(tree, *common, "--db", f"{folder}/{name}.sqlite", *extra)
            )
            for name, (tree, extra) in shape.items()
        }
        per_request: dict[str, list[float]] = {name: [] for name in servers}
        names = list(servers)
        for server in servers.values():
            loadgen.run_side_by_side([server.port], path, bodies, CONNECTIONS, round_s)
        for r in range(rounds):
            shift = r % len(names)
            for name in names[shift:] + names[:shift]:
                server = servers[name]
                before = _cpu(server.pid)
                (trial,) = loadgen.run_side_by_side(
                    [server.port], path, bodies, CONNECTIONS, round_s
                )
                if name.endswith(("on", "scores")):
                    reply = httpx.get(
                        f"http://127.0.0.1:{server.port}/contract/metrics",
                        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
                    )
                    reply.raise_for_status()
                used = _cpu_since(server.pid, before)
                per_request[name].append(used / max(1, len(trial.latencies_s)))
    ratios = _ratios(per_request, "on", "off")
    worker_ratios = _ratios(per_request, "on_worker_scores", "off")
    out: dict[str, object] = {
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
    if against is not None:
        theirs = _ratios(per_request, "against_on", "against_off")
        out |= {"against": against, "ratio_against": median(theirs), "ratios_against": theirs}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--round-s", type=float, default=2.0)
    parser.add_argument(
        "--against", default=None, metavar="SRC", help="another source tree to A/B (its src/)"
    )
    args = parser.parse_args()
    print(json.dumps(run(args.rounds, args.round_s, args.against), indent=2))


if __name__ == "__main__":
    main()
