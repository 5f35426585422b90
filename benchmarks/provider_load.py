"""Study 2 — provider overhead: the domain route at L0 against L6 under concurrent loopback load.

Real uvicorn servers (``create_app`` on Acme billing at L0, L1 and L6) run in their own processes
on free loopback ports; a bounded closed-loop load generator (``loadgen``) runs in another process.
Trials rotate the levels, reversing the order every other round so drift on a shared machine
cancels, and each reported ratio is the median over rounds of two levels measured back to back. L1
sits between the two so the cost splits into structured feedback (L0 → L1: typed suggestions
instead of prose, what makes a fix cacheable at all) and the invalidation contract proper (L1 → L6:
dependency vectors, rules fingerprint). Two request mixes: every task family as planned without
memory (7 of 8 answered 422 with suggestions) and the same requests with their fixes merged (every
one answered 200 — the path a working memory produces).
"""

from __future__ import annotations

import json
import multiprocessing
import socket
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from invalidation_contracts.domains import get_catalog
from invalidation_contracts.server.provider import Provider

from . import loadgen
from .common import Check, StudyResult, figure, markdown_table, median, pct

NAME = "provider"
TITLE = "Provider overhead: L6 against L0 under load"
DOMAIN = "acme_billing"
LEVELS = (0, 1, 6)
#: (numerator, denominator) level pairs reported as ratios; the first is the target's.
PAIRS = ((6, 0), (1, 0), (6, 1))
TARGET = 0.10


@dataclass(frozen=True, slots=True)
class Size:
    requests: int
    rounds: int
    warmup: int
    concurrency: int = 8
    time_limit_s: float = 30.0


FULL = Size(requests=4000, rounds=5, warmup=1000)
QUICK = Size(requests=100, rounds=1, warmup=20, time_limit_s=10.0)


def serve(level: int, port: int) -> None:
    """The server process: Acme billing at ``level`` under uvicorn on ``127.0.0.1:port``."""
    import uvicorn

    from invalidation_contracts.domains import get_domain
    from invalidation_contracts.server.app import create_app

    app = create_app(get_domain(DOMAIN), level=level, admin_token="benchmark-only")
    config = uvicorn.Config(
        app, host=loadgen.LOOPBACK, port=port, log_level="warning", access_log=False
    )
    uvicorn.Server(config).run()


def free_port() -> int:
    with socket.socket() as s:
        s.bind((loadgen.LOOPBACK, 0))
        return s.getsockname()[1]


def request_mixes() -> dict[str, list[bytes]]:
    """``failures``: each task family's draft; ``successes``: the same with its fixes merged."""
    catalog = get_catalog(DOMAIN)
    provider = Provider(catalog.domain, level=6)
    drafts = [dict(family.fields) for family in catalog.task_families.values()]
    fixed = []
    for draft in drafts:
        request = dict(draft)
        for _ in range(5):
            outcome = provider.handle(catalog.route, request)
            if outcome.status == 200:
                fixed.append(request)
                break
            for suggestion in (
                outcome.body.to_wire().get("recovery_feedback", {}).get("suggestions", [])
            ):
                request.update(suggestion["parameters"])
    encode = lambda items: [json.dumps(item, separators=(",", ":")).encode() for item in items]
    return {"failures": encode(drafts), "successes": encode(fixed)}


def run(quick: bool = False, out_dir: Path | None = None) -> StudyResult:
    size = QUICK if quick else FULL
    figures_dir = (out_dir or Path(__file__).parent) / "figures"
    path = get_catalog(DOMAIN).route.path
    mixes = request_mixes()
    ctx = multiprocessing.get_context("spawn")
    servers: dict[int, tuple[int, Any]] = {}
    trials: dict[str, dict[int, list[loadgen.Trial]]] = {
        m: {lv: [] for lv in LEVELS} for m in mixes
    }
    try:
        for level in LEVELS:
            port = free_port()
            process = ctx.Process(
                target=serve, args=(level, port), daemon=True, name=f"bench-server-L{level}"
            )
            process.start()
            servers[level] = (port, process)
        with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
            for level, (port, _) in servers.items():
                pool.submit(loadgen.wait_ready, port).result()
            for mix, bodies in mixes.items():
                for level, (port, _) in servers.items():
                    pool.submit(
                        loadgen.run_trial,
                        port,
                        path,
                        bodies,
                        size.warmup,
                        size.concurrency,
                        size.time_limit_s,
                    ).result()
                for r in range(size.rounds):
                    for level in LEVELS if r % 2 == 0 else LEVELS[::-1]:
                        port = servers[level][0]
                        trial = pool.submit(
                            loadgen.run_trial,
                            port,
                            path,
                            bodies,
                            size.requests,
                            size.concurrency,
                            size.time_limit_s,
                        ).result()
                        trials[mix][level].append(trial)
    finally:
        for _, process in servers.values():
            process.terminate()
        for _, process in servers.values():
            process.join(10)
    return _report(trials, size, figures_dir)


def _ratios(by_level: Mapping[int, Sequence[loadgen.Trial]], high: int, low: int) -> dict[str, Any]:
    """Medians over rounds of ``high`` / ``low``, each round's pair measured back to back."""
    pairs = list(zip(by_level[low], by_level[high], strict=True))
    per_round = [h.rps / lo.rps for lo, h in pairs]
    return {
        "rps": median(per_round),
        "p50": median(h.quantile(0.5) / lo.quantile(0.5) for lo, h in pairs),
        "p99": median(h.quantile(0.99) / lo.quantile(0.99) for lo, h in pairs),
        "per_round_rps": per_round,
    }


def _report(
    trials: Mapping[str, Mapping[int, Sequence[loadgen.Trial]]], size: Size, figures_dir: Path
) -> StudyResult:
    rows, data, checks = [], {}, []
    for mix, by_level in trials.items():
        stats = {
            level: {
                "rps": median(t.rps for t in ts),
                "p50_ms": 1000 * median(t.quantile(0.5) for t in ts),
                "p99_ms": 1000 * median(t.quantile(0.99) for t in ts),
                "errors": sum(t.errors for t in ts),
                "timed_out": any(t.timed_out for t in ts),
                "statuses": _sum_statuses(ts),
                "rps_range": (min(t.rps for t in ts), max(t.rps for t in ts)),
            }
            for level, ts in by_level.items()
        }
        ratios = {f"L{h}/L{lo}": _ratios(by_level, h, lo) for h, lo in PAIRS}
        for level in LEVELS:
            s = stats[level]
            rows.append(
                [
                    mix,
                    f"L{level}",
                    f"{s['rps']:.0f}",
                    f"{s['rps_range'][0]:.0f}–{s['rps_range'][1]:.0f}",
                    f"{s['p50_ms']:.2f}",
                    f"{s['p99_ms']:.2f}",
                    _statuses(s["statuses"]),
                    str(s["errors"]),
                ]
            )
        for name, r in ratios.items():
            bold = "**" if name == "L6/L0" else ""
            rows.append(
                [
                    mix,
                    f"{bold}{name}{bold}",
                    f"{bold}{r['rps']:.3f}{bold}",
                    "",
                    f"{bold}{r['p50']:.3f}{bold}",
                    f"{bold}{r['p99']:.3f}{bold}",
                    "",
                    "",
                ]
            )
        data[mix] = {"levels": stats, "ratios": ratios}
        target = ratios["L6/L0"]
        checks += [
            Check(
                f"L6 requests/s within 10% of L0 ({mix} mix)",
                f"{target['rps']:.3f}× L0",
                target["rps"] >= 1 - TARGET,
            ),
            Check(
                f"L6 p50 latency within 10% of L0 ({mix} mix)",
                f"{target['p50']:.3f}× L0",
                target["p50"] <= 1 + TARGET,
            ),
            Check(
                f"L6 p99 latency within 10% of L0 ({mix} mix)",
                f"{target['p99']:.3f}× L0",
                target["p99"] <= 1 + TARGET,
            ),
        ]
    fig = figure(figures_dir / "provider_load.png", lambda f: _draw(f, data))
    md = "\n\n".join(
        [
            (
                f"Acme billing `POST {get_catalog(DOMAIN).route.path}` served by uvicorn (one worker, "
                f"`create_app`, in-memory registry), one process per level; a closed-loop load generator "
                f"(`benchmarks/loadgen.py`) in another process keeps {size.concurrency} keep-alive connections "
                f"busy on 127.0.0.1. Each trial: {size.requests} requests (bounded, and stopped after "
                f"{size.time_limit_s:.0f} s), after {size.warmup} warm-up requests per server and mix; "
                f"{size.rounds} rounds, the level order reversed every other round. Absolute figures are "
                f"medians over rounds (the range is over rounds); each ratio is the median of its per-round "
                f"ratios, the two levels measured back to back. Latency is per request at the client, "
                f"queueing included."
            ),
            markdown_table(
                [
                    "Mix",
                    "Level",
                    "Requests/s",
                    "Range",
                    "p50 (ms)",
                    "p99 (ms)",
                    "Statuses",
                    "Errors",
                ],
                rows,
            ),
            f"![provider load]({fig.relative_to(figures_dir.parent).as_posix()})",
        ]
    )
    return StudyResult(NAME, TITLE, md, checks, [fig], data)


def _sum_statuses(trials: Sequence[loadgen.Trial]) -> dict[int, int]:
    out: dict[int, int] = {}
    for t in trials:
        for status, n in t.statuses.items():
            out[status] = out.get(status, 0) + n
    return dict(sorted(out.items()))


def _statuses(statuses: Mapping[int, int]) -> str:
    total = sum(statuses.values()) or 1
    return ", ".join(f"{s}: {pct(n / total, 0)}" for s, n in statuses.items())


def _draw(fig: Any, data: Mapping[str, Any]) -> None:
    ax = fig.add_subplot(1, 1, 1)
    mixes = list(data)
    names = [f"L{h}/L{lo}" for h, lo in PAIRS]
    width = 0.8 / (3 * len(names))
    for j, name in enumerate(names):
        for i, (key, label) in enumerate((("rps", "requests/s"), ("p50", "p50"), ("p99", "p99"))):
            offset = (j * 3 + i - (3 * len(names) - 1) / 2) * width
            ax.bar(
                [m + offset for m in range(len(mixes))],
                [data[m]["ratios"][name][key] for m in mixes],
                width,
                label=f"{name} {label}",
                color=f"C{i}",
                alpha=1.0 - 0.3 * j,
            )
    ax.axhline(1.0, color="#7f7f7f", linewidth=0.8)
    ax.axhspan(1 - TARGET, 1 + TARGET, color="#2ca02c", alpha=0.12, label="±10%")
    ax.set_xticks(range(len(mixes)))
    ax.set_xticklabels(mixes)
    ax.set_ylabel("ratio (median over rounds)")
    ax.set_title("Provider cost of the contract under loopback load", fontsize=10)
    ax.legend(fontsize=6, ncol=3)
