"""Profile the provider's failure path: where a 422 on the failures mix spends its time.

``python -m benchmarks.profile_failure_path`` prints, per level, the CPU microseconds per failing
request of each stage of ``Provider.handle`` in-process (request validation, policy evaluation,
rendering, encoding; process time, best of repeats) and a cProfile of the whole call.
``--py-spy SECONDS`` also samples a real server (bare uvicorn, one per level) under the
failures mix with py-spy (``pip install py-spy``; not a project dependency) and prints the share
of samples in each layer. It runs against whichever ``invalidation_contracts`` is importable, so
the same command measures an older tree (``PYTHONPATH=/tmp/old/src``); see NOTES.md.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import json
import multiprocessing
import pstats
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from invalidation_contracts.domains import get_catalog
from invalidation_contracts.protocol.levels import Level
from invalidation_contracts.server import feedback
from invalidation_contracts.server.provider import Provider, _evaluate

try:  # this tree: a request's position and URI are one value
    from invalidation_contracts.server.asked import Asked

    AT_X: dict[str, Any] = {"asked": Asked(instance="/x")}
except ImportError:  # an older tree: keywords
    AT_X = {"instance": "/x"}

from . import loadgen
from .provider_load import DOMAIN, request_mixes
from .servers import free_port, process

LEVELS = (0, 1, 6)
#: Where a sampled server stack is counted: the first layer whose pattern matches it, trying the
#: stack-wide ones (any frame) first, then the innermost frame's. Every sample counts once. On a
#: busy machine py-spy also samples threads that are only waiting (a worker thread's
#: ``Condition.wait``, the loop's ``select``): ``WAITING`` counts those apart.
WAITING = ("waiting (Condition.wait, select)", r"^(Condition\.wait|EpollSelector\.select) ")
STACK_LAYERS = (
    ("Provider.handle (the sans-IO core)", r"Provider\.handle "),
    ("reading the body (read_json)", r"read_json "),
)
LEAF_LAYERS = (
    ("thread hop (anyio worker threads)", r"(anyio|threading|concurrent)[/.]"),
    ("FastAPI and Starlette", r"(fastapi|starlette)/"),
    ("uvicorn and h11", r"(uvicorn|h11)/"),
    ("asyncio event loop and sockets", r"(asyncio|selectors|socket)[/.]"),
)
OTHER = "other"


def best_us(fn: Callable[[int], object], n: int = 1000, repeats: int = 15) -> float:
    """CPU microseconds per call of ``fn(i)``, best of ``repeats`` runs of ``n`` calls."""
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        for i in range(n):
            fn(i)
        best = min(best, (time.process_time() - start) / n)
    return 1e6 * best


def stages(level: int) -> dict[str, float]:
    """µs per failing request of each stage of ``Provider.handle`` at ``level``."""
    catalog = get_catalog(DOMAIN)
    route = catalog.route
    provider = Provider(catalog.domain, level=level)
    state = provider.registry.state
    bodies = [json.loads(b) for b in request_mixes()["failures"]]
    failing = [b for b in bodies if provider.handle(route, b).status != 200]
    requests = [route.request_model.model_validate(b).model_dump(mode="json") for b in failing]
    found = [tuple(_evaluate(route, r, state)) for r in requests]
    k = len(failing)
    patchable = route.patchable_fields
    cached = getattr(provider, "rendered", None)

    def render(i: int) -> object:
        if cached is not None:  # this tree: the render cache, which also encodes
            return cached.failure(found[i % k], state, patchable=patchable, **AT_X)
        body = feedback.failure(found[i % k], state, Level(level), patchable=patchable)
        return provider._present(body)

    rendered = [render(i) for i in range(k)]

    def encode(i: int) -> object:
        item = rendered[i % k]
        return item.content if cached is not None else item.to_json()  # type: ignore[attr-defined]

    def handle(i: int) -> object:
        outcome = provider.handle(route, failing[i % k], **AT_X)
        content = getattr(outcome, "content", None)
        return content if content is not None else outcome.body.to_json()

    return {
        "validate": best_us(
            lambda i: route.request_model.model_validate(failing[i % k]).model_dump(mode="json")
        ),
        "evaluate": best_us(lambda i: _evaluate(route, requests[i % k], state)),
        "render": best_us(render),
        "encode": best_us(encode),
        "handle": best_us(handle),
    }


def profile(level: int, calls: int = 5000, top: int = 12) -> str:
    catalog = get_catalog(DOMAIN)
    provider = Provider(catalog.domain, level=level)
    bodies = [json.loads(b) for b in request_mixes()["failures"]]
    failing = [b for b in bodies if provider.handle(catalog.route, b).status != 200]
    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
    for i in range(calls):
        outcome = provider.handle(catalog.route, failing[i % len(failing)], **AT_X)
        if getattr(outcome, "content", None) is None:
            outcome.body.to_json()
    profiler.disable()
    out = tempfile.SpooledTemporaryFile(mode="w+")
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    out.seek(0)
    return str(out.read())


def sample(level: int, seconds: float) -> dict[str, float]:
    """Share of py-spy samples in each layer, one bare-uvicorn server under load."""
    bodies = request_mixes()["failures"]
    path = get_catalog(DOMAIN).route.path
    port = free_port()
    command = [sys.executable, "-c", _SERVER, DOMAIN, str(level), str(port)]
    ctx = multiprocessing.get_context("spawn")
    with (
        tempfile.TemporaryDirectory() as tmp,
        process(command, port) as server,
        ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool,
    ):
        raw = Path(tmp) / "stacks.txt"
        pool.submit(loadgen.run_side_by_side, [port], path, bodies, 8, 2.0).result()
        spy = subprocess.Popen(
            ["py-spy", "record", "--pid", str(server.pid)]
            + ["--duration", str(int(seconds)), "--rate", "200", "--format", "raw"]
            + ["--output", str(raw), "--nonblocking", "--threads"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        load = pool.submit(loadgen.run_side_by_side, [port], path, bodies, 8, seconds + 1)
        spy.wait()
        load.result()
        return layers(raw.read_text(encoding="utf-8").splitlines())


#: ``create_app`` under bare uvicorn, quiet; written against the API older trees share.
_SERVER = """
import sys, uvicorn
from invalidation_contracts.domains import get_domain
from invalidation_contracts.server.http.app import create_app
app = create_app(get_domain(sys.argv[1]), level=int(sys.argv[2]), admin_token="benchmark-only")
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[3]), log_level="warning", access_log=False)
"""


def layers(lines: Sequence[str]) -> dict[str, float]:
    """Share of samples per layer (``STACK_LAYERS``, then ``LEAF_LAYERS``, else ``OTHER``)."""
    counts: collections.Counter[str] = collections.Counter()
    stack_rx = [(name, re.compile(p)) for name, p in STACK_LAYERS]
    leaf_rx = [(name, re.compile(p)) for name, p in (WAITING, *LEAF_LAYERS)]
    for line in lines:
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        frames = stack.split(";")
        layer = next((n for n, rx in stack_rx if any(rx.search(f) for f in frames)), None)
        if layer is None:
            layer = next((n for n, rx in leaf_rx if rx.search(frames[-1])), OTHER)
        counts[layer] += int(count)
    total = sum(counts.values()) or 1
    names = (*STACK_LAYERS, *LEAF_LAYERS, (OTHER, ""), WAITING)
    return {name: counts[name] / total for name, _ in names}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_failure_path")
    parser.add_argument("--py-spy", type=float, default=0, metavar="SECONDS")
    parser.add_argument("--cprofile", action="store_true", help="print a cProfile per level")
    args = parser.parse_args(argv)
    results: dict[int, dict[str, Any]] = {level: stages(level) for level in LEVELS}
    names = list(results[LEVELS[0]])
    print("| µs per failing request | " + " | ".join(f"L{lv}" for lv in LEVELS) + " |")
    print("|---|" + "---:|" * len(LEVELS))
    for name in names:
        print(f"| {name} | " + " | ".join(f"{results[lv][name]:.1f}" for lv in LEVELS) + " |")
    if args.cprofile:
        for level in LEVELS:
            print(f"\ncProfile, L{level}:\n{profile(level)}")
    if args.py_spy:
        if shutil.which("py-spy") is None:
            print("py-spy is not installed (pip install py-spy)", file=sys.stderr)
            return 1
        shares = {level: sample(level, args.py_spy) for level in LEVELS}
        print("\n| share of server samples | " + " | ".join(f"L{lv}" for lv in LEVELS) + " |")
        print("|---|" + "---:|" * len(LEVELS))
        for name in shares[LEVELS[0]]:
            cells = " | ".join(f"{100 * shares[lv][name]:.1f}%" for lv in LEVELS)
            print(f"| {name} | {cells} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
