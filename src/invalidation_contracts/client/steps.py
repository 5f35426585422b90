"""Store I/O as data: a memory call is a generator of store batches, run sync or async.

A call that needs the store yields a list of operations and is sent their results (or has the
store's ``StoreError`` thrown into it); its return value is the call's result. ``run_sync`` runs
it with ``Store.batch``, ``run_async`` with ``Store.abatch``, so one implementation of every call
serves the sync memory and the async one, and the core never touches a store itself.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator, Iterable
from typing import TypeVar

from .stores import Op, Result, Store, StoreError

T = TypeVar("T")


class Wait(tuple[Op, ...]):
    """Not a batch: a pause of ``seconds`` the runner makes before sending back ``[]`` (a call
    waiting for another writer's turn, ``client.turn``)."""

    seconds: float

    def __new__(cls, seconds: float) -> Wait:
        wait = super().__new__(cls)
        wait.seconds = seconds
        return wait


#: A computation that needs store I/O: it yields batches and is sent their results.
Steps = Generator[Iterable[Op], list[Result], T]


def run_sync(store: Store, steps: Steps[T]) -> T:
    """Run ``steps`` against ``store``, blocking."""
    try:
        ops = next(steps)
        while True:
            if isinstance(ops, Wait):
                time.sleep(ops.seconds)
                ops = steps.send([])
                continue
            try:
                results = store.batch(ops)
            except StoreError as exc:
                ops = steps.throw(exc)
            else:
                ops = steps.send(results)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def run_async(store: Store, steps: Steps[T]) -> T:
    """Run ``steps`` against ``store`` without blocking the event loop (``Store.abatch``)."""
    try:
        ops = next(steps)
        while True:
            if isinstance(ops, Wait):
                await asyncio.sleep(ops.seconds)
                ops = steps.send([])
                continue
            try:
                results = await store.abatch(ops)
            except StoreError as exc:
                ops = steps.throw(exc)
            else:
                ops = steps.send(results)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
