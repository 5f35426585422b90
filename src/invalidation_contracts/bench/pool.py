"""Runs of a grid spread over worker processes, so in-process grids use every core.

Each worker is a spawned Python process with its own event loop that runs up to ``slots`` runs at
once, taking them from a shared queue. The parent hands out a run only when a slot is free, so
it can stop handing them out after a failure that would repeat (the server or the planner gone);
it hears when each run starts and ends (for its progress bar) and notices a worker that died.
Every run writes its own artifact under the same root, exactly as in one process.
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import os
import pickle
import queue
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from multiprocessing.context import SpawnProcess
from pathlib import Path
from types import FrameType
from typing import Any

from .errors import HarnessError
from .runner import RunSpec, run_one

#: How long the parent waits for news before it checks that its workers are alive (seconds).
_POLL_S = 0.5
#: How often an idle slot looks for work (seconds); a worker holds no blocked thread.
_IDLE_S = 0.02


class RunFailed(HarnessError):
    """A run failed in a worker with an error that could not travel back as itself."""


class WorkerDied(HarnessError):
    """A worker process ended while a run was in flight in it."""


@dataclass(frozen=True, slots=True)
class RunJob:
    """What every run of a grid shares: the results root and ``run_one``'s options (picklable)."""

    root: Path
    options: Mapping[str, Any] = field(default_factory=dict)


Started = Callable[[RunSpec], None]
Finished = Callable[[RunSpec, BaseException | None], None]
Next = Callable[[], RunSpec | None]


async def run_in_processes(
    job: RunJob,
    next_spec: Next,
    *,
    processes: int,
    slots: int,
    started: Started,
    finished: Finished,
) -> None:
    """Run the specs ``next_spec`` hands out in ``processes`` workers of ``slots`` runs each.

    ``started`` and ``finished`` are called in this process, in order, for each run.
    """
    pickle.dumps(job)  # fail here, clearly, if an option cannot reach a worker
    context = multiprocessing.get_context("spawn")
    tasks: multiprocessing.Queue[tuple[int, RunSpec] | None] = context.Queue()
    news: multiprocessing.Queue[tuple[str, int, int, BaseException | None]] = context.Queue()
    workers = [
        context.Process(target=_worker, args=(tasks, news, slots, job), daemon=True)
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    pending: dict[int, RunSpec] = {}
    owner: dict[int, int] = {}
    ids = itertools.count()

    def feed() -> None:
        while len(pending) < processes * slots and (spec := next_spec()) is not None:
            task = next(ids)
            pending[task] = spec
            tasks.put((task, spec))

    clean = False
    try:
        feed()
        while pending:
            message = await asyncio.to_thread(_receive, news)
            if message is None:
                _reap(workers, pending, owner, finished)
                continue
            kind, task, pid, error = message
            if kind == "start":
                owner[task] = pid
                started(pending[task])
            else:
                owner.pop(task, None)
                finished(pending.pop(task), error)
                feed()
        clean = True
    finally:
        _stop(workers, tasks, processes * slots, clean)


def _receive(
    news: multiprocessing.Queue[tuple[str, int, int, BaseException | None]],
) -> tuple[str, int, int, BaseException | None] | None:
    try:
        return news.get(timeout=_POLL_S)
    except queue.Empty:
        return None


def _reap(
    workers: list[SpawnProcess],
    pending: dict[int, RunSpec],
    owner: dict[int, int],
    finished: Finished,
) -> None:
    """Fail the runs of workers that died; with no worker left, fail every run still pending."""
    dead = {w.pid: w.exitcode for w in workers if not w.is_alive()}
    for task, pid in list(owner.items()):
        if pid in dead:
            del owner[task]
            finished(pending.pop(task), WorkerDied(f"worker process exited ({dead[pid]})"))
    if len(dead) == len(workers):
        for task in list(pending):
            finished(pending.pop(task), WorkerDied("every worker process exited"))


def _stop(
    workers: list[SpawnProcess],
    tasks: multiprocessing.Queue[tuple[int, RunSpec] | None],
    slots: int,
    clean: bool,
) -> None:
    """Let idle workers finish; on an error or interrupt, stop them (their runs write metadata)."""
    if clean:
        for _ in range(slots):
            tasks.put(None)
    for worker in workers:
        if not clean and worker.is_alive():
            worker.terminate()
        worker.join(timeout=10)
        if worker.is_alive():
            worker.kill()
            worker.join()
    tasks.close()
    tasks.cancel_join_thread()


# ------------------------------------------------------------------ in the worker process


def _worker(
    tasks: multiprocessing.Queue[tuple[int, RunSpec] | None],
    news: multiprocessing.Queue[tuple[str, int, int, BaseException | None]],
    slots: int,
    job: RunJob,
) -> None:
    """A worker's main: Ctrl-C is the parent's to handle; its SIGTERM interrupts the runs; a
    worker whose parent is gone stops when it next has nothing to do."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        asyncio.run(_serve(tasks, news, slots, job))
    except KeyboardInterrupt:
        # The runs in flight wrote their metadata; the service's idle worker threads (anyio's)
        # would hold a normal exit for their idle timeout, and nothing is left to flush.
        os._exit(130)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


async def _serve(
    tasks: multiprocessing.Queue[tuple[int, RunSpec] | None],
    news: multiprocessing.Queue[tuple[str, int, int, BaseException | None]],
    slots: int,
    job: RunJob,
) -> None:
    pid = os.getpid()
    parent = multiprocessing.parent_process()

    async def slot() -> None:
        while True:
            try:
                item = tasks.get_nowait()
            except queue.Empty:
                if parent is not None and not parent.is_alive():
                    return
                await asyncio.sleep(_IDLE_S)
                continue
            if item is None:
                return
            task, spec = item
            news.put(("start", task, pid, None))
            error: BaseException | None = None
            try:
                await run_one(spec, job.root, **job.options)
            except Exception as exc:  # noqa: BLE001 - the parent reports it with its run
                error = _portable(exc)
            news.put(("done", task, pid, error))

    await asyncio.gather(*(slot() for _ in range(slots)))


def _portable(exc: Exception) -> BaseException:
    """``exc`` itself when it survives pickling, else a ``RunFailed`` with its message."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:  # noqa: BLE001 - any failure to travel means: send the text
        return RunFailed(f"{type(exc).__name__}: {exc}")
    return exc
