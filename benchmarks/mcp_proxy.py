"""Study — what the local memory proxy adds to a host's tool call (issue 36).

One host process (the official Python SDK's ``Client``) holds four stdio sessions at once: one
straight to ``serve-mcp --domain acme_billing --ephemeral`` (a child process), one through
``mcp-proxy`` fronting its own such ``serve-mcp`` (a child and a grandchild), and the library's
in-process ``ContractSession`` over a third (the memory without the proxy's hop). All make the same
tool call: a subscription that passes (the starter family's draft with its fix already in), so
through the proxy each call is a memory lookup, a patch that changes nothing, the call, the
result read into the memory and the model view built. The calls take turns one by one (a burst
of load on the shared machine lands on both); latency is measured at the host, the ratio is the
median of per-round p50 ratios, and the CPU of every process of each path (host excluded: the
same code on both) is read from ``/proc`` per call. A fourth session goes through
``benchmarks.relay`` (a process that copies lines and interprets nothing): the floor of one more
process on the path, which no proxy can go under.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from .common import Check, StudyResult, cpu_since, markdown_table, median, thread_cpu

NAME = "mcp_proxy"
TITLE = "Local memory proxy: a host's tool call through `mcp-proxy` against straight to the server"
TARGET_RATIO = 1.10
TARGET_ADDED_MS = 1.0
DOMAIN = "acme_billing"
OPERATION = "POST /v1/subscriptions"
TOOL = "create_subscription"
STRAIGHT = "straight to serve-mcp"
PROXIED = "through mcp-proxy"
RELAY = "through a relay that interprets nothing (the floor of one more process)"
#: Another tree's ``src`` to time its proxy beside this one's (before/after in one run).
BASELINE_ENV = "IC_PROXY_BASELINE_SRC"
BASELINE = "through mcp-proxy of the baseline tree (`$IC_PROXY_BASELINE_SRC`)"
LIBRARY = "in process: ContractSession over serve-mcp (the library's memory, no proxy)"


@dataclass(frozen=True, slots=True)
class Size:
    requests: int
    rounds: int
    warmup: int


FULL = Size(requests=100, rounds=7, warmup=20)
QUICK = Size(requests=10, rounds=1, warmup=3)


def _server() -> list[str]:
    return [
        *(sys.executable, "-m", "invalidation_contracts.cli", "serve-mcp"),
        *("--domain", DOMAIN, "--ephemeral", "--tool-name", f"{OPERATION}={TOOL}"),
    ]


def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (from ``/proc/*/stat``)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [pid]
    while frontier:
        here = frontier.pop()
        kids = [child for child, parent in parents.items() if parent == here]
        found.extend(kids)
        frontier.extend(kids)
    return found


def _p50(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


async def _measure(size: Size, memory: Path) -> dict[str, Any]:
    from mcp import StdioServerParameters
    from mcp.client.client import Client

    from invalidation_contracts.client import AsyncFixMemory
    from invalidation_contracts.domains import get_catalog
    from invalidation_contracts.mcp import connect

    draft = get_catalog(DOMAIN).family("control-partner-starter").draft()
    env = dict(os.environ)
    straight_params = StdioServerParameters(command=_server()[0], args=_server()[1:], env=env)
    hosts = {
        STRAIGHT: straight_params,
        PROXIED: _proxy(memory, env),
        RELAY: _params([sys.executable, "-m", "benchmarks.relay", *_server()], env),
    }
    baseline = os.environ.get(BASELINE_ENV)
    if baseline:  # the same proxy command, importing another tree (before/after in one run)
        hosts[BASELINE] = _proxy(
            memory.with_name("baseline.sqlite"), {**env, "PYTHONPATH": baseline}
        )
    async with contextlib.AsyncExitStack() as stack:
        clients: dict[str, Any] = {}
        pids: dict[str, list[int]] = {}
        seen = set(_children(os.getpid()))
        for name, params in hosts.items():
            clients[name] = await stack.enter_async_context(Client(params))
            now = set(_children(os.getpid()))
            pids[name], seen = sorted(now - seen), now
        kept = await stack.enter_async_context(
            AsyncFixMemory("row", store=memory.with_name("library.sqlite"))
        )
        library = await stack.enter_async_context(connect(straight_params, kept))
        pids[LIBRARY] = sorted(set(_children(os.getpid())) - seen)
        return await _rounds(size, clients, library, draft, pids)


def _params(argv: list[str], env: dict[str, str]) -> Any:
    from mcp import StdioServerParameters

    return StdioServerParameters(command=argv[0], args=argv[1:], env=env)


def _proxy(memory: Path, env: dict[str, str]) -> Any:
    """``mcp-proxy --memory memory -- serve-mcp ...`` as a host spawns it."""
    argv = [
        *(sys.executable, "-m", "invalidation_contracts.cli", "mcp-proxy"),
        *("--memory", str(memory), "--", *_server()),
    ]
    return _params(argv, env)


async def _rounds(
    size: Size,
    clients: dict[str, Any],
    library: Any,
    draft: dict[str, Any],
    pids: dict[str, list[int]],
) -> dict[str, Any]:
    """The timed calls of each path, in turns (every session is open)."""
    first = await clients[STRAIGHT].call_tool(TOOL, draft)  # learn the starter's fix ...
    for name, client in clients.items():  # ... on every path
        if name != STRAIGHT:
            await client.call_tool(TOOL, draft)
    await library.answer(TOOL, draft)
    fix = json.loads(first.content[0].text)["recovery_feedback"]["suggestions"][0]
    request = {**draft, **fix["parameters"]}

    def call(client: Any) -> Callable[[], Awaitable[Any]]:
        return lambda: client.call_tool(TOOL, request)

    sessions: dict[str, Callable[[], Awaitable[Any]]] = {
        STRAIGHT: call(clients[STRAIGHT]),
        PROXIED: call(clients[PROXIED]),
        LIBRARY: lambda: library.answer(TOOL, request),
        **{name: call(c) for name, c in clients.items() if name not in (STRAIGHT, PROXIED)},
    }
    for name, call in sessions.items():
        answer = await call()
        if getattr(answer, "is_error", False):
            raise RuntimeError(f"{name}: the passing call failed")
        for _ in range(size.warmup):
            await call()
    cpu = {name: 0.0 for name in sessions}
    rounds: dict[str, list[list[float]]] = {name: [] for name in sessions}
    for r in range(size.rounds):
        order = list(sessions) if r % 2 == 0 else list(sessions)[::-1]
        trial: dict[str, list[float]] = {name: [] for name in sessions}
        for _ in range(size.requests):
            for name in order:
                marks = {pid: thread_cpu(pid) for pid in pids[name]}
                start = time.perf_counter()
                await sessions[name]()
                trial[name].append(time.perf_counter() - start)
                cpu[name] += sum(cpu_since(pid, marks[pid]) for pid in pids[name])
        for name in sessions:
            rounds[name].append(trial[name])
    calls = size.requests * size.rounds
    return {"rounds": rounds, "cpu_per_call_s": {k: v / calls for k, v in cpu.items()}}


def run(quick: bool = False, out_dir: Any = None) -> StudyResult:
    size = QUICK if quick else FULL
    with tempfile.TemporaryDirectory(prefix="ic-proxy-bench-") as folder:
        measured = anyio.run(_measure, size, Path(folder) / "memory.sqlite")
    rounds: dict[str, list[list[float]]] = measured["rounds"]
    cpu: dict[str, float] = measured["cpu_per_call_s"]
    ratio = median(
        _p50(p) / _p50(s) for p, s in zip(rounds[PROXIED], rounds[STRAIGHT], strict=True)
    )
    p50 = {name: 1000 * median(_p50(t) for t in trials) for name, trials in rounds.items()}
    added_ms = p50[PROXIED] - p50[STRAIGHT]
    cpu_ratio = cpu[PROXIED] / cpu[STRAIGHT] if cpu[STRAIGHT] else float("inf")
    over_library = median(
        _p50(p) / _p50(s) for p, s in zip(rounds[PROXIED], rounds[LIBRARY], strict=True)
    )
    rows = [
        [name, f"{p50[name]:.2f}", f"{1000 * cpu[name]:.2f}", str(sum(map(len, rounds[name])))]
        for name in rounds
    ]
    rows.append(["**through / straight**", f"**{ratio:.3f}×**", f"**{cpu_ratio:.3f}×**", "ratio"])
    rows.append(["**added by the proxy**", f"**{added_ms:.2f} ms**", "", ""])
    rows.append(["**through / in process (the hop alone)**", f"**{over_library:.3f}×**", "", ""])
    relay_ratio = median(
        _p50(r) / _p50(s) for r, s in zip(rounds[RELAY], rounds[STRAIGHT], strict=True)
    )
    rows.append(["**relay / straight (the floor)**", f"**{relay_ratio:.3f}×**", "", ""])
    baseline_ratio = None
    if BASELINE in rounds:
        baseline_ratio = median(
            _p50(b) / _p50(s) for b, s in zip(rounds[BASELINE], rounds[STRAIGHT], strict=True)
        )
        rows.append(["**baseline / straight**", f"**{baseline_ratio:.3f}×**", "", ""])
    met = p50[PROXIED] <= TARGET_RATIO * p50[STRAIGHT] + TARGET_ADDED_MS
    check = Check(
        f"a host's tool call through `mcp-proxy` within {TARGET_RATIO:.2f}× plus "
        f"{TARGET_ADDED_MS:g} ms of straight to the server (p50, stdio on one machine)",
        f"{ratio:.3f}× ({added_ms:+.2f} ms at p50; CPU of the path {cpu_ratio:.2f}×)",
        met,
    )
    data = {
        "p50_ms": p50,
        "ratio_p50": ratio,
        "added_ms": added_ms,
        "cpu_ms_per_call": {k: 1000 * v for k, v in cpu.items()},
        "cpu_ratio": cpu_ratio,
        "ratio_over_library": over_library,
        "ratio_relay": relay_ratio,
        "ratio_baseline": baseline_ratio,
    }
    md = "\n\n".join(
        [
            (
                f"One host process (the Python SDK's `Client`), four stdio sessions: straight to "
                f"`serve-mcp --domain {DOMAIN} --ephemeral`, and through `mcp-proxy --memory M -- "
                f"serve-mcp ...` (its own upstream). The same passing `{TOOL}` call on both (the "
                "starter draft with its fix in: through the proxy, a lookup, a patch, the call "
                f"and the memory's read of its result), {size.requests} calls per path and round, "
                f"{size.rounds} round(s), taking turns one by one after {size.warmup} warm-up "
                "calls. Third path, what the memory costs wherever it runs: the same server under "
                "library's `ContractSession` in the host process (`answer`, client apply mode). "
                "Latency at the host; CPU: every process of the path (the server; the "
                "proxy and its server), from `/proc`, per call; the host's own CPU is the same "
                "code on every path and is left out (so the in-process path's CPU shows its "
                "server's only: its memory runs in the host). Fourth path, the floor of any "
                "proxy: `python -m benchmarks.relay serve-mcp ...`, a process that copies lines "
                "both ways and interprets nothing. With `$IC_PROXY_BASELINE_SRC` set, a fifth: "
                "the same proxy command importing that tree (another checkout's `src`), before "
                "beside after."
            ),
            markdown_table(["Path", "p50 (ms)", "CPU per call (ms)", "Calls"], rows),
        ]
    )
    return StudyResult(NAME, TITLE, md, [check], [], json.loads(json.dumps(data)))
