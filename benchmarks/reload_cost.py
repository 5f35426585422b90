"""Study 3 — reload cost: a table of 10^3 … 10^6 rows with 10 changed rows, full snapshot vs
row patch.

The registry holds ``src`` (N rows), ``dst`` (1,000 rows) and ``leaf`` (100 rows) under two rules,
``src → dst`` (via ``target``) and ``dst → leaf`` (via ``next``), so each changed ``src`` row has a
two-hop downstream subgraph whose size does not depend on N. Each reload changes the same number
of rows (10) spread across the table. Measured: the whole ``Registry.reload`` (the operator sends
every row) and ``Registry.patch`` (the operator sends the 10 rows), and inside them the two steps
the protocol prescribes — the diff and the pre-reload downstream walk. A second sweep holds N and
varies the number of changed rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from invalidation_contracts.protocol.models import ReloadResult
from invalidation_contracts.server.graph import node_id
from invalidation_contracts.server.registry import Registry
from invalidation_contracts.server.rules import Rule
from invalidation_contracts.server.tables import diff

from .common import (
    Check,
    StudyResult,
    figure,
    loglog_axes,
    markdown_table,
    median,
    ms,
    slope,
    time_calls,
    time_once,
)

NAME = "reload"
TITLE = "Reload cost: full snapshot against row patch"
TABLE = "src"
DST_ROWS = 1_000
LEAF_ROWS = 100
CHANGED = 10
RULES = (Rule("src", "dst", "points_to", "target"), Rule("dst", "leaf", "rolls_up_to", "next"))


@dataclass(frozen=True, slots=True)
class Size:
    rows: tuple[int, ...]
    patch_repeats: int
    full_repeats: Mapping[int, int]
    sweep_rows: int
    sweep_changed: tuple[int, ...]


FULL = Size(
    rows=(10**3, 10**4, 10**5, 10**6),
    patch_repeats=21,
    full_repeats={10**3: 7, 10**4: 5, 10**5: 3, 10**6: 1},
    sweep_rows=10**5,
    sweep_changed=(1, 10, 100, 1_000, 10_000),
)
QUICK = Size(
    rows=(10**2, 10**3), patch_repeats=3, full_repeats={}, sweep_rows=10**3, sweep_changed=(1, 10)
)


def src_row(i: int, generation: int = 0) -> dict[str, Any]:
    return {"target": f"t{(i + generation) % DST_ROWS}", "value": i, "generation": generation}


def build_registry(rows: int) -> Registry:
    return Registry(
        {
            TABLE: {f"k{i}": src_row(i) for i in range(rows)},
            "dst": {f"t{j}": {"next": f"u{j % LEAF_ROWS}"} for j in range(DST_ROWS)},
            "leaf": {f"u{j}": {"label": j} for j in range(LEAF_ROWS)},
        },
        RULES,
    )


def changed_keys(rows: int, count: int) -> list[str]:
    """``count`` keys spread across the table whose downstream subgraphs are disjoint at every N."""
    step = max(1, rows // count)
    return [f"k{(i * step + i) % rows}" for i in range(count)]


def measure_size(rows: int, size: Size) -> dict[str, Any]:
    """Every timing at one table size (seconds, medians over repeats)."""
    registry = build_registry(rows)
    keys = changed_keys(rows, CHANGED)
    generation = 0

    def patch_rows() -> dict[str, dict[str, Any]]:
        return {key: src_row(int(key[1:]), generation) for key in keys}

    patch_times, walk_sizes = [], []
    for _ in range(size.patch_repeats):
        generation += 1
        seconds, result = _patch(registry, patch_rows())
        patch_times.append(seconds)
        walk_sizes.append(len(result.affected_downstream))
    out: dict[str, Any] = {
        "rows": rows,
        "patch_s": median(patch_times),
        "affected": max(walk_sizes),
    }
    out.update(_steps(registry, keys, generation + 1, size.patch_repeats))
    repeats = size.full_repeats.get(rows, 0)
    if repeats:
        full_times = []
        plain = registry.state.snapshot(TABLE).plain_rows()
        for _ in range(repeats):
            generation += 1
            plain.update(patch_rows())
            full_times.append(time_once(lambda: registry.reload(TABLE, plain))[0])
        out["full_s"] = median(full_times)
    return out


def _patch(registry: Registry, upsert: dict[str, dict[str, Any]]) -> tuple[float, ReloadResult]:
    return time_once(lambda: registry.patch(TABLE, upsert))


def _steps(
    registry: Registry, keys: Sequence[str], generation: int, repeats: int
) -> dict[str, float]:
    """The diff (by patch keys and over the whole table) and the downstream walk, timed alone."""
    old = registry.state.snapshot(TABLE)
    new = old.with_changes("next", {key: src_row(int(key[1:]), generation) for key in keys})
    nodes = [node_id(TABLE, key) for key in keys]
    graph = registry.state.graph
    return {
        "diff_patch_s": median(time_calls(lambda: diff(old, new, keys), repeats=repeats)),
        "diff_full_s": median(time_calls(lambda: diff(old, new), repeats=max(1, min(repeats, 5)))),
        "walk_s": median(time_calls(lambda: graph.downstream(nodes), repeats=repeats)),
    }


def sweep(rows: int, counts: Sequence[int], repeats: int) -> list[dict[str, Any]]:
    """At one table size, the patch and its steps as the number of changed rows grows."""
    registry = build_registry(rows)
    out = []
    for count in counts:
        keys = changed_keys(rows, count)
        times, affected = [], 0
        for rep in range(repeats):
            seconds, result = _patch(
                registry, {key: src_row(int(key[1:]), 1000 + rep) for key in keys}
            )
            times.append(seconds)
            affected = len(result.affected_downstream)
        steps = _steps(registry, keys, 5000 + count, repeats)
        out.append({"changed": count, "patch_s": median(times), "affected": affected, **steps})
    return out


def run(quick: bool = False, out_dir: Path | None = None) -> StudyResult:
    size = QUICK if quick else FULL
    figures_dir = (out_dir or Path(__file__).parent) / "figures"
    points = [measure_size(rows, size) for rows in size.rows]
    swept = sweep(size.sweep_rows, size.sweep_changed, max(3, size.patch_repeats // 3))
    return _report(points, swept, size, figures_dir)


def _report(
    points: Sequence[dict[str, Any]], swept: Sequence[dict[str, Any]], size: Size, figures_dir: Path
) -> StudyResult:
    base = points[0]
    rows = []
    for p in points:
        full = p.get("full_s")
        rows.append(
            [
                f"{p['rows']:,}",
                ms(full, 1) if full else "–",
                ms(p["patch_s"]),
                f"{full / p['patch_s']:,.0f}×" if full else "–",
                ms(p["diff_full_s"], 2),
                ms(p["diff_patch_s"]),
                ms(p["walk_s"]),
                str(p["affected"]),
                f"{p['patch_s'] / base['patch_s']:.2f}",
                format(
                    (p["diff_patch_s"] + p["walk_s"]) / (base["diff_patch_s"] + base["walk_s"]),
                    ".2f",
                ),
            ]
        )
    ns = [p["rows"] for p in points]
    slopes = {
        "patch": slope(ns, [p["patch_s"] for p in points]),
        "diff+walk (patch)": slope(ns, [p["diff_patch_s"] + p["walk_s"] for p in points]),
        "diff (full)": slope(ns, [p["diff_full_s"] for p in points]),
    }
    full_points = [p for p in points if p.get("full_s")]
    if len(full_points) > 1:
        slopes["full reload"] = slope(
            [p["rows"] for p in full_points], [p["full_s"] for p in full_points]
        )
    sweep_rows = [
        [
            f"{s['changed']:,}",
            ms(s["patch_s"]),
            ms(s["diff_patch_s"]),
            ms(s["walk_s"]),
            str(s["affected"]),
            f"{s['patch_s'] / swept[0]['patch_s']:.1f}",
        ]
        for s in swept
    ]
    sweep_slope = slope(
        [s["changed"] for s in swept], [s["diff_patch_s"] + s["walk_s"] for s in swept]
    )
    grow = (points[-1]["diff_patch_s"] + points[-1]["walk_s"]) / (
        base["diff_patch_s"] + base["walk_s"]
    )
    checks = [
        Check(
            "patch form: diff + downstream walk does not grow with table size "
            f"({ns[0]:,} → {ns[-1]:,} rows)",
            f"×{grow:.2f} (log-log slope {slopes['diff+walk (patch)']:.2f})",
            slopes["diff+walk (patch)"] < 0.2,
        ),
        Check(
            f"patch form: diff + walk grows with changed rows (N = {size.sweep_rows:,})",
            f"log-log slope {sweep_slope:.2f} over "
            f"{swept[0]['changed']}–{swept[-1]['changed']} rows",
            sweep_slope > 0.5,
        ),
    ]
    fig = figure(figures_dir / "reload_cost.png", lambda f: _draw(f, points, swept))
    slope_text = ", ".join(f"{name} {value:.2f}" for name, value in slopes.items())
    md = "\n\n".join(
        [
            (
                f"Registry with `src` (N rows), `dst` ({DST_ROWS:,}) and `leaf` ({LEAF_ROWS}) "
                "under `src → dst → leaf`; "
                f"each reload changes {CHANGED} `src` rows spread across the table "
                "(their downstream subgraph does "
                "not depend on N). *Full*: `Registry.reload` with every row "
                "(validate, freeze and hash N rows, "
                "diff N keys). *Patch*: `Registry.patch` with the changed rows. "
                "*Diff* and *walk* are the two "
                "steps the protocol prescribes, timed alone on the same snapshots: "
                "the diff over the whole table, "
                "the diff over the patch keys, and the pre-reload downstream walk "
                "from the changed rows. "
                f"Medians over repeats (patch {size.patch_repeats}, "
                f"full {dict(size.full_repeats) or 'not run'}). "
                "The *× smallest* columns are ratios against the smallest table in the same run."
            ),
            markdown_table(
                [
                    "Rows",
                    "Full reload (ms)",
                    "Patch (ms)",
                    "Full / patch",
                    "Diff, whole table (ms)",
                    "Diff, patch keys (ms)",
                    "Walk (ms)",
                    "Affected nodes",
                    "Patch × smallest",
                    "Diff + walk × smallest",
                ],
                rows,
            ),
            f"Log-log slopes against N (0 = flat, 1 = linear): {slope_text}.",
            f"**Changed rows sweep** at N = {size.sweep_rows:,} (patch form):",
            markdown_table(
                [
                    "Changed rows",
                    "Patch (ms)",
                    "Diff, patch keys (ms)",
                    "Walk (ms)",
                    "Affected nodes",
                    "Patch × 1 row",
                ],
                sweep_rows,
            ),
            f"![reload cost]({fig.relative_to(figures_dir.parent).as_posix()})",
        ]
    )
    return StudyResult(
        NAME,
        TITLE,
        md,
        checks,
        [fig],
        {"sizes": list(points), "sweep": list(swept), "slopes": slopes},
    )


def _draw(fig: Any, points: Sequence[dict[str, Any]], swept: Sequence[dict[str, Any]]) -> None:
    ax = loglog_axes(
        fig,
        "rows in the table (N)",
        "milliseconds (median)",
        f"Reload of {CHANGED} changed rows: full snapshot vs row patch",
    )
    ns = [p["rows"] for p in points]
    full = [(p["rows"], 1000 * p["full_s"]) for p in points if p.get("full_s")]
    if full:
        ax.plot(*zip(*full, strict=True), "o-", label="full snapshot: Registry.reload")
    ax.plot(ns, [1000 * p["diff_full_s"] for p in points], "s--", label="diff over the whole table")
    ax.plot(ns, [1000 * p["patch_s"] for p in points], "o-", label="row patch: Registry.patch")
    ax.plot(
        ns,
        [1000 * (p["diff_patch_s"] + p["walk_s"]) for p in points],
        "^-",
        label="patch: diff + downstream walk",
    )
    ax.legend(fontsize=7)
