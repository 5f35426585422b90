"""Study 6 — keep-alive latency: the shipped ``serve`` command against bare uvicorn.

An agent's HTTP client keeps one connection open and sends one request at a time. That is where a
server that leaves Nagle's algorithm on (no ``TCP_NODELAY`` on accepted sockets) meets the client's
delayed ACKs and adds tens of milliseconds to every response; throughput tests with many
connections hide it. Here each trial is sequential requests on one keep-alive connection
(``loadgen`` with one connection), against Acme billing at L6 started by
``invalidation-contracts serve`` (as users do; also with ``--workers 2`` where this checkout's
``serve`` has the option) and by ``create_app`` under bare ``uvicorn.run`` with the same logging
(uvicorn's defaults), so the ratio isolates what ``serve`` adds. Two requests: ``GET
/contract/versions`` and the domain route answering 422 with suggestions.
"""

from __future__ import annotations

import json
import multiprocessing
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from invalidation_contracts.domains import get_catalog

from . import launch, loadgen
from .common import Check, StudyResult, figure, markdown_table, median

NAME = "keepalive"
TITLE = "Keep-alive latency: `serve` against bare uvicorn"
DOMAIN = "acme_billing"
LEVEL = 6
BASELINE = "uvicorn"
#: ``serve``'s p50 at most this many times bare uvicorn's (issue 18).
TARGET = 1.10


@dataclass(frozen=True, slots=True)
class Size:
    requests: int
    rounds: int
    warmup: int
    time_limit_s: float
    """Per trial; a Nagle-delayed server (~44 ms a request) stops here instead of running on."""


FULL = Size(requests=400, rounds=5, warmup=50, time_limit_s=15.0)
QUICK = Size(requests=20, rounds=1, warmup=5, time_limit_s=5.0)


@dataclass(frozen=True, slots=True)
class Probe:
    """One kind of request the study sends: a method, a path and the bodies it cycles."""

    label: str
    method: str
    path: str
    bodies: tuple[bytes, ...] = (b"",)


def probes() -> list[Probe]:
    catalog = get_catalog(DOMAIN)
    draft = next(iter(catalog.task_families.values())).fields
    body = json.dumps(dict(draft), separators=(",", ":")).encode()
    return [
        Probe("GET /contract/versions", "GET", "/contract/versions"),
        Probe(f"POST {catalog.route.path} (422)", "POST", catalog.route.path, (body,)),
    ]


def variants() -> list[tuple[str, str, int]]:
    """(name, launcher, workers) of every server measured; the baseline first."""
    out = [(BASELINE, "uvicorn", 1), ("serve", "serve", 1)]
    if launch.serve_supports_workers():
        out.append(("serve --workers 2", "serve", 2))
    return out


Trials = dict[str, dict[str, list[loadgen.Trial]]]
"""probe label → variant name → one trial per round."""


def run(quick: bool = False, out_dir: Path | None = None) -> StudyResult:
    size = QUICK if quick else FULL
    figures_dir = (out_dir or Path(__file__).parent) / "figures"
    kinds = probes()
    servers: dict[str, launch.Server] = {}
    trials: Trials = {p.label: {} for p in kinds}
    try:
        for name, launcher, workers in variants():
            servers[name] = launch.start(
                launcher, LEVEL, domain=DOMAIN, workers=workers, quiet=False
            )
        for server in servers.values():
            server.wait_ready()
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:

            def trial(server: launch.Server, probe: Probe, requests: int) -> loadgen.Trial:
                return pool.submit(
                    loadgen.run_trial,
                    server.port,
                    probe.path,
                    list(probe.bodies),
                    requests,
                    1,
                    size.time_limit_s,
                    probe.method,
                ).result()

            for probe in kinds:
                for server in servers.values():
                    trial(server, probe, size.warmup)
                names = list(servers)
                for r in range(size.rounds):
                    for name in names if r % 2 == 0 else names[::-1]:
                        result = trial(servers[name], probe, size.requests)
                        trials[probe.label].setdefault(name, []).append(result)
    finally:
        for server in servers.values():
            server.stop()
    return _report(trials, size, figures_dir)


def _ratio(high: Sequence[loadgen.Trial], low: Sequence[loadgen.Trial], q: float) -> list[float]:
    return [h.quantile(q) / lo.quantile(q) for lo, h in zip(low, high, strict=True)]


def _report(trials: Trials, size: Size, figures_dir: Path) -> StudyResult:
    rows: list[list[str]] = []
    checks: list[Check] = []
    data: dict[str, Any] = {}
    for label, by_variant in trials.items():
        base = by_variant[BASELINE]
        data[label] = {}
        for name, ts in by_variant.items():
            p50s = [t.quantile(0.5) for t in ts]
            entry: dict[str, Any] = {
                "p50_ms": 1000 * median(p50s),
                "p99_ms": 1000 * median(t.quantile(0.99) for t in ts),
                "p50_range_ms": (1000 * min(p50s), 1000 * max(p50s)),
                "requests": sum(len(t.latencies_s) for t in ts),
                "timed_out": any(t.timed_out for t in ts),
                "errors": sum(t.errors for t in ts),
            }
            if name != BASELINE:
                entry["p50_ratio"] = _ratio(ts, base, 0.5)
                entry["p99_ratio"] = _ratio(ts, base, 0.99)
            data[label][name] = entry
            ratio50 = entry.get("p50_ratio")
            ratio99 = entry.get("p99_ratio")
            rows.append(
                [
                    label,
                    f"`{name}`",
                    f"{entry['p50_ms']:.3f}",
                    f"{entry['p50_range_ms'][0]:.3f}–{entry['p50_range_ms'][1]:.3f}",
                    f"{entry['p99_ms']:.3f}",
                    "1" if ratio50 is None else f"**{median(ratio50):.3f}**",
                    "" if ratio50 is None else f"{min(ratio50):.3f}–{max(ratio50):.3f}",
                    "1" if ratio99 is None else f"{median(ratio99):.3f}",
                    f"{entry['requests']}" + (" (timed out)" if entry["timed_out"] else ""),
                    str(entry["errors"]),
                ]
            )
            if ratio50 is not None:
                checks.append(
                    Check(
                        f"`{name}` keep-alive p50 ≤ {TARGET}× bare uvicorn ({label})",
                        f"{median(ratio50):.3f}× ({min(ratio50):.3f}–{max(ratio50):.3f})",
                        median(ratio50) <= TARGET,
                    )
                )
    fig = figure(figures_dir / "keepalive.png", lambda f: _draw(f, data))
    md = "\n\n".join(
        [
            (
                f"Acme billing at L{LEVEL}, one process per server on a free loopback port, each "
                "with uvicorn's default logging (`info`, access log on; output discarded): "
                "`uvicorn` is `create_app` under bare `uvicorn.run` (it binds the socket), `serve` "
                "the shipped `invalidation-contracts serve` command. One trial: "
                f"{size.requests} sequential requests on one keep-alive connection (one in "
                f"flight; stopped after {size.time_limit_s:.0f} s), after {size.warmup} warm-up "
                f"requests per server and request; {size.rounds} rounds, the server order "
                "reversed every other round. Latency is per request at the client. Absolute "
                "figures are medians over rounds (*p50 range*: over rounds); each ratio is the "
                "median of its per-round ratios against `uvicorn`, the two measured back to back "
                "(*range*: per-round minimum and maximum)."
            ),
            markdown_table(
                [
                    "Request",
                    "Server",
                    "p50 (ms)",
                    "p50 range (ms)",
                    "p99 (ms)",
                    "p50 / uvicorn",
                    "Range",
                    "p99 / uvicorn",
                    "Requests",
                    "Errors",
                ],
                rows,
            ),
            f"![keep-alive latency]({fig.relative_to(figures_dir.parent).as_posix()})",
        ]
    )
    return StudyResult(NAME, TITLE, md, checks, [fig], data)


def _draw(fig: Any, data: Mapping[str, Any]) -> None:
    ax = fig.add_subplot(1, 1, 1)
    labels = list(data)
    names = list(next(iter(data.values()))) if data else []
    width = 0.8 / max(1, len(names))
    for j, name in enumerate(names):
        ax.bar(
            [i + (j - (len(names) - 1) / 2) * width for i in range(len(labels))],
            [data[label][name]["p50_ms"] for label in labels],
            width,
            label=name,
            color=f"C{j}",
        )
    ax.set_yscale("log")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("p50 per request (ms, log scale)")
    ax.set_title("Sequential requests on one keep-alive connection", fontsize=10)
    ax.legend(fontsize=8)
