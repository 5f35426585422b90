"""What every study shares: its result shape, the machine description, timing and figure helpers."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from invalidation_contracts import __version__
from invalidation_contracts.bench.report import markdown_table

__all__ = [
    "Check",
    "StudyResult",
    "figure",
    "loglog_axes",
    "machine",
    "markdown_table",
    "median",
    "ms",
    "pct",
    "postgres_cluster",
    "slope",
    "time_calls",
    "time_once",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Check:
    """One target of the issue, and whether this run met it."""

    target: str
    measured: str
    met: bool


@dataclass(slots=True)
class StudyResult:
    """What one study hands to the report: a Markdown section, its figures, checks and raw data."""

    name: str
    title: str
    markdown: str
    checks: list[Check] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


@contextmanager
def postgres_cluster() -> Iterator[Any]:
    """A PostgreSQL server for one study's run (``tests.support.postgres.PostgresCluster``:
    embedded, or the external one the tests' environment names), stopped after it."""
    from tests.support.postgres import PostgresCluster

    cluster = PostgresCluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def machine() -> dict[str, Any]:
    """The machine and software a result was measured on."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        usable = os.cpu_count()
    return {
        "nproc": usable,
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "package_version": __version__,
        "commit": _commit(),
        "uncommitted": _uncommitted(),
        "load_average": _load_average(),
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _git(*args: str) -> subprocess.CompletedProcess[str] | None:
    """``git ARGS`` in the checkout (None: git is missing or did not answer in time)."""
    try:
        return subprocess.run(
            ["git", "-C", str(REPO_ROOT), *args],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None


def _commit() -> str | None:
    out = _git("rev-parse", "--short", "HEAD")
    return (out.stdout.strip() or None) if out is not None else None


def _uncommitted() -> bool | None:
    """Whether tracked files differ from the commit (None: not a git checkout, or git failed)."""
    out = _git("status", "--porcelain", "--untracked-files=no")
    return bool(out.stdout.strip()) if out is not None and out.returncode == 0 else None


def _load_average() -> str | None:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:  # pragma: no cover
        return None


def time_once(fn: Callable[[], T]) -> tuple[float, T]:
    """Seconds of one call of ``fn``, and what it returned."""
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def time_calls(
    fn: Callable[[], Any], *, repeats: int, setup: Callable[[], Any] | None = None
) -> list[float]:
    """Seconds of ``repeats`` calls of ``fn``, each after an untimed ``setup``."""
    out = []
    for _ in range(repeats):
        if setup is not None:
            setup()
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def median(values: Iterable[float]) -> float:
    return statistics.median(list(values))


def pct(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{100 * value:.{digits}f}%"


def ms(seconds: float, digits: int = 3) -> str:
    return f"{1000 * seconds:.{digits}f}"


def figure(
    path: Path, draw: Callable[[Any], None], *, size: tuple[float, float] = (7.0, 4.2)
) -> Path:
    """Draw one PNG with matplotlib's Agg canvas (no display, no pyplot state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=120)
    FigureCanvasAgg(fig)
    draw(fig)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path


def loglog_axes(fig: Any, xlabel: str, ylabel: str, title: str) -> Any:
    """One log-log axis with the labels every scaling figure uses."""
    ax = fig.add_subplot(1, 1, 1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    return ax


def slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """The least-squares slope of log(y) on log(x): 0 is flat, 1 is linear growth."""
    import math

    lx = [math.log(x) for x in xs]
    ly = [math.log(max(y, 1e-12)) for y in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    den = sum((x - mx) ** 2 for x in lx)
    return sum((x - mx) * (y - my) for x, y in zip(lx, ly, strict=True)) / den if den else 0.0


def thread_cpu(pid: int) -> dict[str, int]:
    """CPU nanoseconds of each thread of ``pid`` (``/proc/<pid>/task/<tid>/schedstat``)."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out[task.name] = int((task / "schedstat").read_text(encoding="ascii").split()[0])
        except (OSError, ValueError, IndexError):
            continue  # the thread ended
    if not out:
        raise RuntimeError("server CPU time is not readable here (/proc/<pid>/task/*/schedstat)")
    return out


def cpu_since(pid: int, before: dict[str, int]) -> float:
    """Seconds of CPU ``pid``'s threads used since ``before`` (a thread that ended in between
    loses its share: the server's thread pool keeps its threads while it is loaded)."""
    now = thread_cpu(pid)
    return sum(ns - before.get(tid, 0) for tid, ns in now.items()) / 1e9
