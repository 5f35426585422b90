"""``python -m benchmarks``: run every study; write ``benchmarks/RESULTS.md`` and ``results.json``.

``--quick`` runs each study at its smoke-test size and, unless ``--out`` says otherwise, writes to a
temporary directory so the recorded results are not overwritten. ``--only`` runs some studies and
keeps the others' recorded sections (from ``results.json``, else from ``RESULTS.md``), each
labelled with the command that measured it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from . import (
    client_cost,
    confirmation_cost,
    consumer_cost,
    dependencies,
    harness_throughput,
    learned_cost,
    logical_capture,
    mcp_conditional,
    mcp_keepalive,
    mcp_proxy,
    mcp_proxy_stale,
    observe_overhead,
    pg_replica,
    production,
    provider_load,
    provider_ops,
    push_contention,
    reconcile_cost,
    recovery,
    reload_cost,
    retrofit_overhead,
    serve_latency,
    stale_transports,
    two_writers,
    wire_cost,
)
from .common import Check, StudyResult, machine, markdown_table

HERE = Path(__file__).resolve().parent
MODULES: tuple[ModuleType, ...] = (
    wire_cost,
    provider_load,
    reload_cost,
    client_cost,
    harness_throughput,
    serve_latency,
    mcp_keepalive,
    mcp_conditional,
    mcp_proxy,
    production,
    observe_overhead,
    dependencies,
    push_contention,
    pg_replica,
    recovery,
    confirmation_cost,
    reconcile_cost,
    two_writers,
    retrofit_overhead,
    stale_transports,
    consumer_cost,
    learned_cost,
    mcp_proxy_stale,
    logical_capture,
    provider_ops,
)
STUDIES: dict[str, Callable[..., StudyResult]] = {m.NAME: m.run for m in MODULES}
TITLES: dict[str, str] = {m.NAME: m.TITLE for m in MODULES}


@dataclass(frozen=True, slots=True)
class Run:
    """One invocation of ``python -m benchmarks``: what it was, when, on what."""

    command: str
    started: str
    machine: Mapping[str, Any] = field(hash=False, compare=False)
    quick: bool = False


@dataclass(frozen=True, slots=True)
class Section:
    """A study's recorded section: this run's, or one kept from an earlier run."""

    result: StudyResult
    run: Run


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument(
        "--quick", action="store_true", help="smoke-test sizes (seconds, not minutes)"
    )
    parser.add_argument(
        "--only",
        default=",".join(STUDIES),
        help=f"comma-separated studies to run (default: all of {', '.join(STUDIES)})",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="where RESULTS.md, results.json and figures/ go (default: benchmarks/)",
    )
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = sorted(set(names) - set(STUDIES))
    if unknown or not names:
        parser.error(f"unknown studies {unknown}; choose from {', '.join(STUDIES)}")
    args.names = names
    return args


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(argv)
    out = args.out or (Path(tempfile.mkdtemp(prefix="benchmarks-quick-")) if args.quick else HERE)
    out.mkdir(parents=True, exist_ok=True)
    run = Run(
        shlex.join(["python", "-m", "benchmarks", *argv]),
        dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        machine(),
        args.quick,
    )
    sections = recorded(out)
    for name in args.names:
        print(f"[benchmarks] {name} …", file=sys.stderr, flush=True)
        start = time.perf_counter()
        result = STUDIES[name](quick=args.quick, out_dir=out)
        result.seconds = time.perf_counter() - start
        print(f"[benchmarks] {name}: {result.seconds:.1f} s", file=sys.stderr, flush=True)
        sections[name] = Section(result, run)
    ordered = [sections[name] for name in STUDIES if name in sections]
    (out / "RESULTS.md").write_text(render(ordered), encoding="utf-8")
    (out / "results.json").write_text(
        json.dumps(
            {
                # The latest run; each study names its own.
                "command": run.command,
                "started": run.started,
                "machine": run.machine,
                "quick": run.quick,
                "studies": {
                    s.result.name: {
                        "title": s.result.title,
                        "run": _run_json(s.run),
                        "seconds": s.result.seconds,
                        "checks": [vars_of(c) for c in s.result.checks],
                        "markdown": s.result.markdown,
                        "data": s.result.data,
                    }
                    for s in ordered
                },
            },
            indent=1,
            default=str,
        ),
        encoding="utf-8",
    )
    print(f"[benchmarks] wrote {out / 'RESULTS.md'}", file=sys.stderr)
    return 0


def vars_of(check: object) -> dict[str, object]:
    return {name: getattr(check, name) for name in ("target", "measured", "met")}


def recorded(out: Path) -> dict[str, Section]:
    """The sections recorded in ``out`` by earlier runs (none if it holds no results)."""
    try:
        saved = json.loads((out / "results.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    legacy = _legacy_sections(out / "RESULTS.md")
    top = _run_of(saved)
    sections = {}
    for name, study in saved.get("studies", {}).items():
        if name not in STUDIES:
            continue
        title = study.get("title", TITLES[name])
        markdown = study.get("markdown", legacy.get(title))
        if markdown is None:
            continue
        checks = [Check(c["target"], c["measured"], c["met"]) for c in study.get("checks", [])]
        result = StudyResult(name, title, markdown, checks, [], study.get("data", {}))
        result.seconds = study.get("seconds", 0.0)
        sections[name] = Section(result, _run_of(study["run"]) if "run" in study else top)
    return sections


def _legacy_sections(path: Path) -> dict[str, str]:
    """Section title → Markdown body, from a RESULTS.md written before sections were saved."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return {}
    out = {}
    for block in re.split(r"^## ", text, flags=re.MULTILINE)[1:]:
        heading, _, body = block.partition("\n")
        match = re.match(r"\d+\. (.+)", heading)
        if match:
            out[match.group(1)] = re.sub(r"^_Measured by .*_\n\n", "", body.strip())
    return out


def _run_of(data: Mapping[str, Any]) -> Run:
    return Run(
        str(data.get("command", "unknown")),
        str(data.get("started", "unknown")),
        data.get("machine", {}),
        bool(data.get("quick", False)),
    )


def _run_json(run: Run) -> dict[str, Any]:
    return {
        "command": run.command,
        "started": run.started,
        "machine": run.machine,
        "quick": run.quick,
    }


def render(sections: Sequence[Section]) -> str:
    runs = list(dict.fromkeys(s.run for s in sections))
    lines = [
        "# Benchmark results",
        "",
        (
            "Generated by the commands below; do not edit by hand (the analysis, the "
            "optimizations made and the changes recommended are in [NOTES.md](NOTES.md)). Every "
            "figure is a ratio against a baseline measured in the same run, because the machine "
            "is shared and noisy; absolute times are shown beside them for scale only."
        ),
    ]
    for i, run in enumerate(runs, 1):
        mine = [s.result for s in sections if s.run == run]
        lines += ["", *_run_lines(i if len(runs) > 1 else None, run, mine)]
    lines += [
        "",
        "## Targets",
        "",
        markdown_table(
            ["Study", "Target", "Measured", "Met"],
            [
                [s.result.title, c.target, c.measured, "yes" if c.met else "**no**"]
                for s in sections
                for c in s.result.checks
            ],
        ),
    ]
    for i, s in enumerate(sections, 1):
        lines += ["", f"## {i}. {s.result.title}", ""]
        if len(runs) > 1:
            lines += [f"_Measured by `{s.run.command}`, started {s.run.started}._", ""]
        lines.append(s.result.markdown)
    return "\n".join(lines) + "\n"


def _run_lines(number: int | None, run: Run, results: Sequence[StudyResult]) -> list[str]:
    host = run.machine
    total = sum(r.seconds for r in results)
    label = "Command" if number is None else f"Run {number}"
    return [
        f"- {label}: `{run.command}` (from the repository root"
        f"{'; quick sizes' if run.quick else ''})",
        (
            f"- Started: {run.started}; total {total:.0f} s "
            f"({', '.join(f'{r.name} {r.seconds:.0f} s' for r in results)})"
        ),
        (
            f"- Machine: `nproc` = {host.get('nproc')} ({host.get('cpu_count')} CPUs visible), "
            f"{host.get('cpu_model')}, load average at start {host.get('load_average')}"
        ),
        (
            f"- Python {host.get('python')} ({host.get('implementation')}), "
            f"{host.get('platform')}; invalidation-contracts {host.get('package_version')} "
            f"at commit {host.get('commit') or 'unknown'}{tree_state(host)}"
        ),
    ]


def tree_state(host: Mapping[str, Any]) -> str:
    """What the run's checkout held beside its commit, as measured (nothing when not recorded)."""
    uncommitted = host.get("uncommitted")
    if uncommitted is None:
        return ""
    return " (plus uncommitted work in the tree)" if uncommitted else " (a clean tree)"


if __name__ == "__main__":
    raise SystemExit(main())
