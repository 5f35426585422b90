"""Study 4 — client cost: the fix memory as it grows, on a real store, and against a hostile server.

Part one (this module): a ``FixMemory`` (row strategy, A2D, in-memory store) is filled through its
public API with cacheable L4 suggestions, each reading one row. ``HOT`` entries read rows of table
``hot``; the rest read rows of ten other tables. At each size, medians over repeats:

- *steady*: a 200 response whose stamps did not move (the common case) — the stamp check alone;
- *change*: a 200 response whose ``hot`` stamp moved, then the changes feed that names ``CHANGED``
  changed ``hot`` rows: the stamp check, the eviction of the entries on those rows and the restamp
  of the other ``hot`` entries. The entries of the other tables are untouched by the change, so
  this must not grow with their number;
- *same table*: the change again, but every entry reads a row of ``hot`` — each unchanged one must
  be restamped, so this grows with the entries *on the changed table* (shown for contrast);
- *lookup*: ``FixMemory.lookup`` for one draft (the injection path, before a request); beside
  it, the same selection by ``OriginIndex.matching`` alone, checked to agree.

Part two (``client_stores``): SQLite against in-memory, restamps of 10³ … 10⁵ entries, processes
sharing one file. Part three (``client_hostile``): an agent's peak RSS fed a hostile server.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from invalidation_contracts.client.events import Evicted, FetchChanges
from invalidation_contracts.client.limits import Limits
from invalidation_contracts.client.memory import FixMemory
from invalidation_contracts.client.shared.index import OriginIndex
from invalidation_contracts.client.values import Answer, Observed
from invalidation_contracts.protocol.models import ChangesFeed, RowChange, TableTransition

from . import client_hostile, client_stores
from .common import (
    Check,
    StudyResult,
    figure,
    loglog_axes,
    markdown_table,
    median,
    slope,
    time_calls,
    time_once,
)

NAME = "client"
TITLE = "Client cost: observing a response as memory grows"
ORIGIN = "https://api.example.test"
EPOCH = "bench-epoch"
HOT = 50
CHANGED = 10
COLD_TABLES = tuple(f"cold{i}" for i in range(10))
BATCH = 100
TARGET_SLOPE = 0.2


@dataclass(frozen=True, slots=True)
class Size:
    entries: tuple[int, ...]
    same_table: tuple[int, ...]
    repeats: int


FULL = Size(entries=(10**2, 10**3, 10**4, 10**5), same_table=(10**2, 10**3, 10**4), repeats=9)
QUICK = Size(entries=(10**2, 2 * 10**2), same_table=(10**2,), repeats=2)


class Client:
    """A memory and the synthetic server history it has seen."""

    def __init__(self) -> None:
        self.memory = FixMemory(
            strategy="row",
            detection="eager",
            limits=Limits(max_suggestions=BATCH, max_entries_per_origin=10**7),
        )
        self.seq = 0
        self.versions = {name: "1.0.0" for name in ("hot", *COLD_TABLES)}
        self.serial = 0
        self.minor = 0

    def contract(self) -> dict[str, Any]:
        return {
            "table_versions": dict(self.versions),
            "contract_seq": self.seq,
            "contract_epoch": EPOCH,
        }

    def learn(self, reads: Sequence[tuple[str, str]]) -> None:
        """Store one entry per ``(table, key)``, through 422s of up to ``BATCH`` suggestions."""
        for start in range(0, len(reads), BATCH):
            suggestions = []
            for table, key in reads[start : start + BATCH]:
                self.serial += 1
                suggestions.append(
                    {
                        "type": "USE_REQUIRED_VALUE",
                        "action": "add_field",
                        "parameters": {"value": key},
                        "cache_hint": "cacheable",
                        "table": table,
                        "scope": {"item": f"i{self.serial}"},
                        "tables": [
                            {"table": table, "version": self.versions[table], "keys": [key]}
                        ],
                    }
                )
            body = {
                "type": "urn:invalidation-contracts:problem:policy-violation",
                "status": 422,
                "success": False,
                "recovery_feedback": {"suggestions": suggestions},
                **self.contract(),
            }
            self.memory.observe(ORIGIN, Observed(None, 422, body))

    def steady(self) -> None:
        self.memory.observe(
            ORIGIN, Observed(None, 200, {"success": True, "result": {}, **self.contract()})
        )

    def change(self, keys: Sequence[str]) -> int:
        """A ``hot`` move seen on a 200 response, then its changes feed; returns the evictions."""
        old = self.versions["hot"]
        self.minor += 1
        new = f"1.{self.minor}.0"
        self.seq += 1
        self.versions["hot"] = new
        self.memory.observe(
            ORIGIN, Observed(None, 200, {"success": True, "result": {}, **self.contract()})
        )
        feed = ChangesFeed(
            contract_epoch=EPOCH,
            since=self.seq - 1,
            last_seq=self.seq,
            rows=[
                RowChange(
                    seq=self.seq, table="hot", key=k, op="changed", old_version=old, new_version=new
                )
                for k in keys
            ],
            tables=[TableTransition(seq=self.seq, table="hot", old_version=old, new_version=new)],
        )
        observation = self.memory.answer(FetchChanges(ORIGIN, feed.since), Answer.changes(feed))
        return sum(isinstance(e, Evicted) for e in observation.events)

    @property
    def size(self) -> int:
        return self.memory.stats(ORIGIN).stores - self.memory.stats(ORIGIN).evicted


def _timed_change(client: Client, keys: Sequence[str], repeats: int) -> list[float]:
    """Time ``change`` ``repeats`` times, re-learning the evicted rows (untimed) after each."""
    out = []
    for _ in range(repeats):
        seconds, evicted = time_once(lambda: client.change(keys))
        if evicted != len(keys):
            raise RuntimeError(f"expected {len(keys)} evictions, the memory made {evicted}")
        out.append(seconds)
        client.learn([("hot", k) for k in keys])
    return out


def grow(sizes: Sequence[int], repeats: int) -> list[dict[str, Any]]:
    """One memory grown through ``sizes``: HOT entries on ``hot``, the rest on the other tables."""
    client = Client()
    hot_keys = [f"h{i}" for i in range(HOT)]
    client.learn([("hot", k) for k in hot_keys])
    changed = hot_keys[:CHANGED]
    draft = {"item": "i1"}
    out = []
    cold = 0
    for n in sizes:
        want = n - HOT
        client.learn([(COLD_TABLES[i % len(COLD_TABLES)], f"c{i}") for i in range(cold, want)])
        cold = max(cold, want)
        out.append(
            {
                "entries": client.size,
                "steady_s": median(time_calls(client.steady, repeats=repeats)),
                "change_s": median(_timed_change(client, changed, repeats)),
                "lookup_s": median(
                    time_calls(lambda: client.memory.lookup(ORIGIN, draft).entries, repeats=repeats)
                ),
                "indexed_s": _indexed(client, draft, repeats),
            }
        )
    return out


def _indexed(client: Client, draft: dict[str, Any], repeats: int) -> float:
    """``OriginIndex.matching`` over the memory's entries, checked against a scan of ``matches``."""
    index = OriginIndex(client.memory.entries(ORIGIN))
    if [e.id for e in index.matching(draft)] != [e.id for e in index if e.matches(draft)]:
        raise RuntimeError("OriginIndex.matching disagrees with a scan of MemoryEntry.matches")
    return median(time_calls(lambda: index.matching(draft), repeats=repeats))


def same_table(sizes: Sequence[int], repeats: int) -> list[dict[str, Any]]:
    """Every entry on ``hot``: the change restamps all the unchanged ones."""
    client = Client()
    out = []
    have = 0
    for n in sizes:
        client.learn([("hot", f"h{i}") for i in range(have, n)])
        have = n
        changed = [f"h{i}" for i in range(CHANGED)]
        out.append(
            {"entries": client.size, "change_s": median(_timed_change(client, changed, repeats))}
        )
    return out


def run(quick: bool = False, out_dir: Path | None = None) -> StudyResult:
    size = QUICK if quick else FULL
    figures_dir = (out_dir or Path(__file__).parent) / "figures"
    points = grow(size.entries, size.repeats)
    contrast = same_table(size.same_table, max(3, size.repeats // 3))
    result = _report(points, contrast, size, figures_dir)
    stores = client_stores.run(quick)
    md, checks, figs = client_stores.report(stores, figures_dir)
    with tempfile.TemporaryDirectory(prefix="client-hostile-") as work:
        hostile = client_hostile.run(Path(work), quick=quick)
    hostile_md, hostile_checks = client_hostile.report(hostile)
    result.markdown = "\n\n".join([result.markdown, md, hostile_md])
    result.checks += checks + hostile_checks
    result.figures += figs
    result.data.update(stores=stores, hostile=hostile)
    return result


def _report(
    points: Sequence[dict[str, Any]],
    contrast: Sequence[dict[str, Any]],
    size: Size,
    figures_dir: Path,
) -> StudyResult:
    base = points[0]
    ns = [p["entries"] for p in points]
    slopes = {
        name: slope(ns, [p[f"{name}_s"] for p in points])
        for name in ("steady", "change", "lookup", "indexed")
    }
    same_slope = (
        slope([c["entries"] for c in contrast], [c["change_s"] for c in contrast])
        if len(contrast) > 1
        else 0.0
    )
    same = {c["entries"]: c["change_s"] for c in contrast}
    rows = [
        [
            f"{p['entries']:,}",
            f"{1e6 * p['steady_s']:.1f}",
            f"{p['steady_s'] / base['steady_s']:.2f}",
            f"{1e6 * p['change_s']:.0f}",
            f"{p['change_s'] / base['change_s']:.2f}",
            f"{1e6 * same[p['entries']]:,.0f}" if p["entries"] in same else "–",
            f"{same[p['entries']] / contrast[0]['change_s']:.1f}" if p["entries"] in same else "–",
            f"{1e6 * p['lookup_s']:,.0f}",
            f"{p['lookup_s'] / base['lookup_s']:.1f}",
            f"{1e6 * p['indexed_s']:.1f}",
            f"{p['indexed_s'] / base['indexed_s']:.2f}",
        ]
        for p in points
    ]
    checks = [
        Check(
            f"steady response: observe cost flat in entries ({ns[0]:,} → {ns[-1]:,})",
            f"×{points[-1]['steady_s'] / base['steady_s']:.2f} (slope {slopes['steady']:.2f})",
            slopes["steady"] < TARGET_SLOPE,
        ),
        Check(
            "change: stamp check + eviction + restamp flat in entries untouched by the change",
            f"×{points[-1]['change_s'] / base['change_s']:.2f} (slope {slopes['change']:.2f})",
            slopes["change"] < TARGET_SLOPE,
        ),
        Check(
            "lookup for a draft does not scan every entry",
            f"slope {slopes['lookup']:.2f} (`OriginIndex.matching` alone {slopes['indexed']:.2f})",
            slopes["lookup"] < TARGET_SLOPE,
        ),
    ]
    fig = figure(
        figures_dir / "client_cost.png", lambda f: _draw(f, points, contrast), size=(7.0, 5.2)
    )
    md = "\n\n".join(
        [
            (
                '`FixMemory(strategy="row")` over the in-memory store, filled through `observe` '
                f"with cacheable L4 suggestions (one row each): {HOT} entries on table `hot`, the "
                f"rest spread over {len(COLD_TABLES)} other tables. *Steady*: `observe` of a 200 "
                "response with unmoved stamps. *Change*: `observe` of a 200 response whose `hot` "
                f"stamp moved plus `answer` of the feed naming {CHANGED} changed `hot` rows "
                f"— {CHANGED} evictions, {HOT - CHANGED} restamps (checked on every repeat); the "
                "evicted rows are re-learned, untimed, before the next repeat. *Same table*: the "
                "change when every entry reads a `hot` row (all unchanged ones restamped). "
                "*Lookup*: `lookup` for one draft; *indexed selection*: `OriginIndex.matching` "
                f"alone for the same draft, the same entries (checked). Medians of {size.repeats} "
                f"repeats (same table: {max(3, size.repeats // 3)}); *×* columns are ratios "
                "against the smallest memory in the same run."
            ),
            markdown_table(
                [
                    "Entries",
                    "Steady (µs)",
                    "× smallest",
                    "Change (µs)",
                    "× smallest",
                    "Same table (µs)",
                    "× smallest",
                    "Lookup (µs)",
                    "× smallest",
                    "Indexed selection (µs)",
                    "× smallest",
                ],
                rows,
            ),
            (
                "Log-log slopes against entries (0 = flat, 1 = linear): steady "
                f"{slopes['steady']:.2f}, change {slopes['change']:.2f}, same table "
                f"{same_slope:.2f}, lookup {slopes['lookup']:.2f}, indexed selection "
                f"{slopes['indexed']:.2f}."
            ),
            f"![client cost]({fig.relative_to(figures_dir.parent).as_posix()})",
        ]
    )
    data = {
        "sizes": list(points),
        "same_table": list(contrast),
        "slopes": {**slopes, "same_table": same_slope},
    }
    return StudyResult(NAME, TITLE, md, checks, [fig], data)


def _draw(fig: Any, points: Sequence[dict[str, Any]], contrast: Sequence[dict[str, Any]]) -> None:
    ax = loglog_axes(
        fig, "entries in memory", "microseconds (median)", "Client cost of observing a response"
    )
    ns = [p["entries"] for p in points]
    ax.plot(ns, [1e6 * p["steady_s"] for p in points], "o-", label="steady response (stamp check)")
    ax.plot(
        ns,
        [1e6 * p["change_s"] for p in points],
        "s-",
        label=f"change: {CHANGED} rows of a {HOT}-entry table (check + evict + restamp)",
    )
    ax.plot(
        [c["entries"] for c in contrast],
        [1e6 * c["change_s"] for c in contrast],
        "^--",
        label="change when every entry is on the changed table",
    )
    ax.plot(
        ns,
        [1e6 * p["lookup_s"] for p in points],
        "x:",
        label="lookup for one draft",
    )
    ax.plot(
        ns,
        [1e6 * p["indexed_s"] for p in points],
        "+:",
        label="the same selection by OriginIndex.matching",
    )
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
