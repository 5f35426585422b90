"""Stale injections by transport (issue 22, "Measured", first bullet): ``payments-drifted``, row
arm, ``simulated:exact``, over HTTP without push, HTTP with the watch stream (SPEC §8.4) and MCP
with ``resources/updated`` notifications.

Each cell is the shipped command, ``invalidation-contracts run --scenario payments-drifted
--planner simulated:exact --arm row`` with ``--watch`` (HTTP: the in-process server then listens on
127.0.0.1 and the agent's ``AsyncContractTransport`` keeps the watch open), or ``--transport
mcp-http --mcp-notifications`` (a real MCP client and ``serve-mcp`` child), run in a child process;
the figures are read back from its artifacts (``bench.metrics.score``). Without push the first
request after the CSM rotation carries the stale code (the stream's pre-registered stale slot);
with push the eviction precedes that request. Wall time per run is shown for scale only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from invalidation_contracts.bench.artifacts import read_runs
from invalidation_contracts.bench.metrics import score

from .common import Check, StudyResult, markdown_table

NAME = "stale"
TITLE = "Stale injections by transport: HTTP, HTTP with the watch, MCP with notifications"
SCENARIO = "payments-drifted"
RUN = ["--scenario", SCENARIO, "--planner", "simulated:exact", "--arm", "row"]
#: (label, the transport's options, whether it pushes changes to the agent)
TRANSPORTS: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("HTTP, no push (`AsyncContractTransport`)", (), False),
    ("HTTP with the watch stream (`--watch`)", ("--watch",), True),
    (
        "MCP streamable HTTP with notifications (`--transport mcp-http --mcp-notifications`)",
        ("--transport", "mcp-http", "--mcp-notifications"),
        True,
    ),
)
#: Seconds one child run may take (a stuck server must not hang the study).
RUN_TIMEOUT_S = 600


@dataclass(frozen=True, slots=True)
class Size:
    seeds: str


FULL = Size("0,1,2")
QUICK = Size("0")


def command(options: tuple[str, ...], seeds: str, out: Path) -> list[str]:
    """The shipped CLI's ``run`` for one transport (``--no-progress``, a fresh ``--out``)."""
    return [
        sys.executable,
        "-m",
        "invalidation_contracts.cli",
        "run",
        *RUN,
        "--seeds",
        seeds,
        *options,
        "--out",
        str(out),
        "--no-progress",
    ]


def measure(options: tuple[str, ...], seeds: str, out: Path) -> tuple[dict[str, Any], float]:
    """Run one transport's cell; its figures summed over seeds, and the wall time."""
    start = time.perf_counter()
    done = subprocess.run(
        command(options, seeds, out),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
        env={**os.environ},
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        tail = " ".join((done.stderr or done.stdout).split()[-60:])
        raise RuntimeError(f"{' '.join(options) or 'http'} exited {done.returncode}: {tail}")
    runs = [m for m in score(read_runs(out)) if m.scenario == SCENARIO]
    return {
        "runs": len(runs),
        "stale_injections": sum(m.stale_injections for m in runs),
        "outside_slots": sum(m.stale_injections_outside_slots for m in runs),
        "evictions_correct": sum(m.evictions_correct for m in runs),
        "evictions_wrong": sum(m.evictions_wrong for m in runs),
        "completed": sum(m.completed_episodes for m in runs),
        "episodes": sum(m.episodes for m in runs),
    }, wall


def run(quick: bool = False, out_dir: Path | None = None) -> StudyResult:
    size = QUICK if quick else FULL
    load_before = os.getloadavg()[0]
    cells: dict[str, dict[str, Any]] = {}
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-stale-") as tmp:
        for index, (label, options, _) in enumerate(TRANSPORTS):
            figures, wall = measure(options, size.seeds, Path(tmp) / str(index))
            cells[label] = {**figures, "wall_s": wall, "options": list(options)}
            rows.append(
                [
                    label,
                    str(figures["runs"]),
                    f"**{figures['stale_injections']}** ({figures['outside_slots']})",
                    f"{figures['evictions_correct']}/{figures['evictions_wrong']}",
                    f"{figures['completed']}/{figures['episodes']}",
                    f"{wall:.1f}",
                ]
            )
    load_after = os.getloadavg()[0]
    seeds = size.seeds.replace(",", ", ")
    markdown = (
        f"`invalidation-contracts run {' '.join(RUN)} --seeds {size.seeds}` with each transport's "
        f"options, each in a child process (seeds {seeds}, summed); the figures are read from "
        "the runs' artifacts. Stale injections: a cached fix the oracle calls stale put into a "
        "request (in parentheses: outside the stream's pre-registered stale slot, episode 12). "
        f"1-minute load average {load_before:.2f} before, {load_after:.2f} after; wall time "
        "includes starting the child and, over MCP, its server.\n\n"
        + markdown_table(
            [
                "transport",
                "runs",
                "stale injections (outside slots)",
                "evictions c/w",
                "completed",
                "wall (s)",
            ],
            rows,
        )
    )
    checks = [
        Check(
            f"{label}: 0 stale injections",
            str(cells[label]["stale_injections"]),
            cells[label]["stale_injections"] == 0,
        )
        for label, _, pushes in TRANSPORTS
        if pushes
    ]
    unpushed = cells[TRANSPORTS[0][0]]["stale_injections"]
    checks.append(
        Check(
            "HTTP without push: the stale slot's injection, one per run (today's figure)",
            str(unpushed),
            unpushed == cells[TRANSPORTS[0][0]]["runs"],
        )
    )
    return StudyResult(NAME, TITLE, markdown, checks, data={"cells": cells})
