"""Study 2 — provider overhead: the domain route at L0 against L6 under concurrent loopback load.

Real servers (Acme billing at L0, L1 and L6) run in their own processes on free loopback ports,
started the two ways users start them (``servers``): the shipped ``invalidation-contracts serve``
command, and ``create_app`` under bare uvicorn, so a regression in either shows. A closed-loop load
generator (``loadgen``) runs in another process and, each round, loads the three levels of one
launcher side by side over the same time window, so every ratio between levels compares servers
under the same machine conditions (on a shared two-core machine, back-to-back trials differed by up
to ±50% per round); each reported ratio is the median over rounds. L1 sits between the two levels so
the cost splits into structured feedback (L0 → L1: typed suggestions instead of prose, what makes a
fix cacheable at all) and the invalidation contract proper (L1 → L6: dependency vectors, rules
fingerprint). Three request mixes: every task family as planned without memory (7 of 8 answered
422 with suggestions), the same requests with their fixes merged (every one answered 200 — the path
a working memory produces), and the drafts made distinct (every one a 422 with a fix of its own, so
the provider's render cache never hits: what rendering costs cold).
"""

from __future__ import annotations

import json
import multiprocessing
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from invalidation_contracts.domains import get_catalog
from invalidation_contracts.server.provider import Provider

from . import loadgen
from .common import Check, StudyResult, figure, markdown_table, median, pct
from .servers import Server, bare_uvicorn, serve_command

NAME = "provider"
TITLE = "Provider overhead: L6 against L0 under load"
DOMAIN = "acme_billing"
LEVELS = (0, 1, 6)
#: (numerator, denominator) level pairs reported as ratios; the first is the target's.
PAIRS = ((6, 0), (1, 0), (6, 1))
#: The issue's targets on the failures mix: requests/s at least 0.95× L0, p99 at most 1.10× L0.
FAILURE_RPS, FAILURE_P99 = 0.95, 1.10
#: Elsewhere (successes, p50): within 10% of L0.
TARGET = 0.10
#: Mixes with targets; ``distinct`` (every document new: the render cache never hits) is shown
#: for what a cold cache costs, against no target.
TARGET_MIXES = ("failures", "successes")
#: How a server is started: the shipped ``serve`` command, or ``create_app`` under bare uvicorn.
LAUNCHERS = ("uvicorn", "serve")
#: Distinct requests in that mix: four times the render cache's capacity (``RenderCache``'s 1,024
#: documents), so none is still cached when the cycle comes back to it. A constant, not an import,
#: so this study also measures trees from before the cache.
DISTINCT = 4096


@dataclass(frozen=True, slots=True)
class Size:
    duration_s: float
    """One round: how long the three levels are loaded side by side."""
    rounds: int
    warmup_s: float
    concurrency: int = 8
    """Keep-alive connections per server."""


FULL = Size(duration_s=2.5, rounds=13, warmup_s=2.0)
QUICK = Size(duration_s=0.5, rounds=1, warmup_s=0.3)

Trials = dict[str, dict[str, dict[int, list[loadgen.Trial]]]]
"""mix → launcher → level → one trial per round."""


def request_mixes() -> dict[str, list[bytes]]:
    """``failures``: each task family's draft; ``successes``: the same with its fixes merged;
    ``distinct``: the drafts with an amount no two requests share (``DISTINCT`` of them), so every
    one fails with a fix of its own and the provider renders every document afresh."""
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
    distinct = [
        {**drafts[i % len(drafts)], "amount_cents": 10_000 + 100 * i + 37} for i in range(DISTINCT)
    ]
    return {"failures": _encode(drafts), "successes": _encode(fixed), "distinct": _encode(distinct)}


def _encode(items: Sequence[Mapping[str, Any]]) -> list[bytes]:
    return [json.dumps(item, separators=(",", ":")).encode() for item in items]


def start(launcher: str, level: int) -> AbstractContextManager[Server]:
    """Acme billing at ``level``, started by ``launcher``: ``serve`` or bare ``uvicorn``."""
    from invalidation_contracts.cli.launch import AppSpec

    if launcher == "serve":
        return serve_command("--domain", DOMAIN, "--level", str(level), "--ephemeral")
    return bare_uvicorn(AppSpec(DOMAIN, level).to_env())


def run(quick: bool = False, out_dir: Path | None = None) -> StudyResult:
    size = QUICK if quick else FULL
    figures_dir = (out_dir or Path(__file__).parent) / "figures"
    path = get_catalog(DOMAIN).route.path
    mixes = request_mixes()
    ctx = multiprocessing.get_context("spawn")
    trials: Trials = {m: {name: {lv: [] for lv in LEVELS} for name in LAUNCHERS} for m in mixes}
    with ExitStack() as stack:
        servers = {
            (launcher, level): stack.enter_context(start(launcher, level))
            for launcher in LAUNCHERS
            for level in LEVELS
        }
        pool = stack.enter_context(ProcessPoolExecutor(max_workers=1, mp_context=ctx))

        def side_by_side(launcher: str, bodies: list[bytes], seconds: float) -> list[loadgen.Trial]:
            group = [servers[launcher, level] for level in LEVELS]
            before = [server.cpu_seconds() for server in group]
            window: list[loadgen.Trial] = pool.submit(
                loadgen.run_side_by_side,
                [server.port for server in group],
                path,
                bodies,
                size.concurrency,
                seconds,
            ).result()
            for trial, server, start_s in zip(window, group, before, strict=True):
                end_s = server.cpu_seconds()
                if start_s is not None and end_s is not None:
                    trial.server_cpu_s = end_s - start_s
            return window

        for mix, bodies in mixes.items():
            for launcher in LAUNCHERS:
                side_by_side(launcher, bodies, size.warmup_s)
            for r in range(size.rounds):
                for launcher in LAUNCHERS if r % 2 == 0 else LAUNCHERS[::-1]:
                    window = side_by_side(launcher, bodies, size.duration_s)
                    for level, result in zip(LEVELS, window, strict=True):
                        trials[mix][launcher][level].append(result)
    return _report(trials, size, figures_dir)


def _ratios(high: Sequence[loadgen.Trial], low: Sequence[loadgen.Trial]) -> dict[str, Any]:
    """Medians over rounds of ``high`` / ``low``, each round's pair measured together."""
    pairs = list(zip(low, high, strict=True))
    per_round = [h.rps / lo.rps for lo, h in pairs]
    cpu = [
        h.cpu_per_request_s / lo.cpu_per_request_s
        for lo, h in pairs
        if h.cpu_per_request_s is not None and lo.cpu_per_request_s
    ]
    return {
        "rps": median(per_round),
        "p50": median(h.quantile(0.5) / lo.quantile(0.5) for lo, h in pairs),
        "p99": median(h.quantile(0.99) / lo.quantile(0.99) for lo, h in pairs),
        "cpu": median(cpu) if cpu else None,
        "per_round_rps": per_round,
        "per_round_p99": [h.quantile(0.99) / lo.quantile(0.99) for lo, h in pairs],
        "per_round_cpu": cpu,
    }


def _stats(ts: Sequence[loadgen.Trial]) -> dict[str, Any]:
    cpu = [t.cpu_per_request_s for t in ts if t.cpu_per_request_s is not None]
    return {
        "cpu_us": 1e6 * median(cpu) if cpu else None,
        "rps": median(t.rps for t in ts),
        "p50_ms": 1000 * median(t.quantile(0.5) for t in ts),
        "p99_ms": 1000 * median(t.quantile(0.99) for t in ts),
        "errors": sum(t.errors for t in ts),
        "timed_out": any(t.timed_out for t in ts),
        "statuses": _sum_statuses(ts),
        "rps_range": (min(t.rps for t in ts), max(t.rps for t in ts)),
    }


def _report(trials: Trials, size: Size, figures_dir: Path) -> StudyResult:
    rows: list[list[str]] = []
    data: dict[str, Any] = {}
    checks: list[Check] = []
    for mix, by_launcher in trials.items():
        data[mix] = {}
        for name, by_level in by_launcher.items():
            stats = {level: _stats(ts) for level, ts in by_level.items()}
            ratios = {f"L{h}/L{lo}": _ratios(by_level[h], by_level[lo]) for h, lo in PAIRS}
            for level in LEVELS:
                s = stats[level]
                rows.append(
                    [
                        mix,
                        f"`{name}`",
                        f"L{level}",
                        f"{s['rps']:.0f}",
                        f"{s['rps_range'][0]:.0f}–{s['rps_range'][1]:.0f}",
                        f"{s['p50_ms']:.2f}",
                        f"{s['p99_ms']:.2f}",
                        "–" if s["cpu_us"] is None else f"{s['cpu_us']:.0f}",
                        _statuses(s["statuses"]) + (" (timed out)" if s["timed_out"] else ""),
                        str(s["errors"]),
                    ]
                )
            for pair, r in ratios.items():
                bold = "**" if pair == "L6/L0" else ""
                rows.append(
                    [
                        mix,
                        f"`{name}`",
                        f"{bold}{pair}{bold}",
                        f"{bold}{r['rps']:.3f}{bold}",
                        _spread(r["per_round_rps"]),
                        f"{bold}{r['p50']:.3f}{bold}",
                        f"{bold}{r['p99']:.3f}{bold}",
                        _cpu_ratio(r),
                        "",
                        "",
                    ]
                )
            data[mix][name] = {"levels": stats, "ratios": ratios}
            if mix in TARGET_MIXES:
                checks += _checks(mix, name, ratios["L6/L0"])
        if "serve" in by_launcher and "uvicorn" in by_launcher:
            for level in LEVELS:
                r = _ratios(by_launcher["serve"][level], by_launcher["uvicorn"][level])
                data[mix].setdefault("serve/uvicorn", {})[f"L{level}"] = r
                rows.append(
                    [
                        mix,
                        "`serve`/`uvicorn`",
                        f"L{level}",
                        f"{r['rps']:.3f}",
                        _spread(r["per_round_rps"]),
                        f"{r['p50']:.3f}",
                        f"{r['p99']:.3f}",
                        _cpu_ratio(r),
                        "",
                        "",
                    ]
                )
    fig = figure(figures_dir / "provider_load.png", lambda f: _draw(f, data))
    md = "\n\n".join(
        [
            (
                f"Acme billing `POST {get_catalog(DOMAIN).route.path}` at L0, L1 and L6, one "
                "process per level and launcher (one worker, in-memory registry): `serve` is the "
                "shipped `invalidation-contracts serve` command, `uvicorn` the same app under bare "
                "`uvicorn.run` (uvicorn binds the socket); both log as uvicorn does by default "
                "(`info`, access log on; output discarded). A "
                "closed-loop load generator (`benchmarks/loadgen.py`) in another process keeps "
                f"{size.concurrency} keep-alive connections per server busy on 127.0.0.1. Each "
                f"round loads the three levels of one launcher side by side for "
                f"{size.duration_s:g} s (the same window, so the levels share the machine's "
                f"conditions), after {size.warmup_s:g} s of warm-up per launcher and mix; "
                f"{size.rounds} rounds, the launcher order reversed every other round. "
                "Requests/s and latencies are per server within its window (three servers share "
                "two cores, so absolute figures are for scale only); absolute figures are medians "
                "over rounds (*Range*: over rounds); each level ratio is the median of its "
                "per-round ratios (*Range*: their minimum and maximum). *Server CPU*: the server "
                "process's user + system time over its window (from `/proc`) per answered "
                "request; beside a ratio, the median of per-round ratios (range in brackets) — "
                "what a request costs the server, nearly free of the other load on the machine. "
                "`serve`/`uvicorn` compares adjacent windows, not one window, so it is noisier. "
                "Latency is per request at "
                f"the client, queueing included. Mixes: *failures*, each task family's draft "
                "(7 of 8 answered 422); *successes*, the same with the fixes merged; *distinct*, "
                f"{DISTINCT} drafts with amounts no two share (each a 422 with its own fix, so "
                "the render cache never hits). Targets: on the failures mix L6/L0 ≥ "
                f"{FAILURE_RPS} in requests/s and ≤ {FAILURE_P99} at p99 (and p50 within 10%); on "
                "the successes mix all three within 10%; none on the distinct mix."
            ),
            markdown_table(
                [
                    "Mix",
                    "Launcher",
                    "Level",
                    "Requests/s",
                    "Range",
                    "p50 (ms)",
                    "p99 (ms)",
                    "Server CPU (µs/request)",
                    "Statuses",
                    "Errors",
                ],
                rows,
            ),
            f"![provider load]({fig.relative_to(figures_dir.parent).as_posix()})",
        ]
    )
    return StudyResult(NAME, TITLE, md, checks, [fig], data)


def _checks(mix: str, launcher: str, target: Mapping[str, Any]) -> list[Check]:
    where = f"({mix} mix, `{launcher}`)"
    rps_floor = FAILURE_RPS if mix == "failures" else 1 - TARGET
    p99_ceiling = FAILURE_P99 if mix == "failures" else 1 + TARGET
    return [
        Check(
            f"L6 requests/s ≥ {rps_floor:.2f}× L0 {where}",
            f"{target['rps']:.3f}× L0 ({_spread(target['per_round_rps'])})",
            target["rps"] >= rps_floor,
        ),
        Check(
            f"L6 p50 latency within 10% of L0 {where}",
            f"{target['p50']:.3f}× L0",
            target["p50"] <= 1 + TARGET,
        ),
        Check(
            f"L6 p99 latency ≤ {p99_ceiling:.2f}× L0 {where}",
            f"{target['p99']:.3f}× L0 ({_spread(target['per_round_p99'])})",
            target["p99"] <= p99_ceiling,
        ),
    ]


def _cpu_ratio(ratio: Mapping[str, Any]) -> str:
    if ratio["cpu"] is None:
        return "–"
    return f"{ratio['cpu']:.3f} ({_spread(ratio['per_round_cpu'])})"


def _spread(values: Sequence[float]) -> str:
    return f"{min(values):.3f}–{max(values):.3f}" if values else ""


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
    groups = [(mix, name) for mix in data for name in LAUNCHERS if name in data[mix]]
    names = [f"L{h}/L{lo}" for h, lo in PAIRS]
    width = 0.8 / (3 * len(names))
    for j, name in enumerate(names):
        for i, (key, label) in enumerate((("rps", "requests/s"), ("p50", "p50"), ("p99", "p99"))):
            offset = (j * 3 + i - (3 * len(names) - 1) / 2) * width
            ax.bar(
                [g + offset for g in range(len(groups))],
                [data[mix][launcher]["ratios"][name][key] for mix, launcher in groups],
                width,
                label=f"{name} {label}",
                color=f"C{i}",
                alpha=1.0 - 0.3 * j,
            )
    ax.axhline(1.0, color="#7f7f7f", linewidth=0.8)
    ax.axhspan(FAILURE_RPS, FAILURE_P99, color="#2ca02c", alpha=0.12, label="failures target")
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([f"{mix}\n{launcher}" for mix, launcher in groups])
    ax.set_ylabel("ratio (median over rounds)")
    ax.set_title("Provider cost of the contract under loopback load", fontsize=10)
    ax.legend(fontsize=6, ncol=3)
