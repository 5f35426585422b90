"""Store I/O as data: a memory call is a generator of store batches, run sync or async.

A call that needs the store yields a list of operations and is sent their results (or has the
store's ``StoreError`` thrown into it); its return value is the call's result. ``run_sync`` runs
it with ``Store.batch``, ``run_async`` with ``Store.abatch``, so one implementation of every call
serves the sync memory and the async one, and the core never touches a store itself. ``drive`` and
``adrive`` are those runners for any effects (the httpx transports drive their exchanges with
them).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Generator, Iterable
from typing import Any, TypeVar

from .store import Op, Result, Store, StoreError

T = TypeVar("T")
E = TypeVar("E")


class Wait(tuple[Op, ...]):
    """Not a batch: a pause of ``seconds`` the runner makes before sending back ``[]`` (a call
    waiting for another writer's turn, ``client.shared.turn``)."""

    seconds: float

    def __new__(cls, seconds: float) -> Wait:
        wait = super().__new__(cls)
        wait.seconds = seconds
        return wait


#: A computation that needs store I/O: it yields batches and is sent their results.
Steps = Generator[Iterable[Op], list[Result], T]


def run_sync(store: Store, steps: Steps[T]) -> T:
    """Run ``steps`` against ``store``, blocking."""
    return drive(steps, functools.partial(_batch, store), (StoreError,))


async def run_async(store: Store, steps: Steps[T]) -> T:
    """Run ``steps`` against ``store`` without blocking the event loop (``Store.abatch``)."""
    return await adrive(steps, functools.partial(_abatch, store), (StoreError,))


def _batch(store: Store, ops: Iterable[Op]) -> list[Result]:
    if isinstance(ops, Wait):
        time.sleep(ops.seconds)
        return []
    return store.batch(ops)


async def _abatch(store: Store, ops: Iterable[Op]) -> list[Result]:
    if isinstance(ops, Wait):
        await asyncio.sleep(ops.seconds)
        return []
    return await store.abatch(ops)


def drive(
    steps: Generator[E, Any, T],
    perform: Callable[[E], Any],
    thrown: tuple[type[Exception], ...],
) -> T:
    """Run ``steps``, blocking: each effect it yields is performed and its result sent back; a
    failure of a ``thrown`` type is thrown into ``steps`` instead (any other ends the run)."""
    try:
        effect = next(steps)
        while True:
            effect = _resume(steps, _attempt(perform, effect, thrown))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def adrive(
    steps: Generator[E, Any, T],
    perform: Callable[[E], Awaitable[Any]],
    thrown: tuple[type[Exception], ...],
) -> T:
    """``drive`` with every effect awaited."""
    try:
        effect = next(steps)
        while True:
            effect = _resume(steps, await _aattempt(perform, effect, thrown))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


#: What performing an effect came to: its result, or the failure to throw into the steps.
_Outcome = tuple[Any, Exception | None]


def _attempt(
    perform: Callable[[E], Any], effect: E, thrown: tuple[type[Exception], ...]
) -> _Outcome:
    try:
        return perform(effect), None
    except thrown as exc:
        return None, exc


async def _aattempt(
    perform: Callable[[E], Awaitable[Any]], effect: E, thrown: tuple[type[Exception], ...]
) -> _Outcome:
    try:
        return await perform(effect), None
    except thrown as exc:
        return None, exc


def _resume(steps: Generator[E, Any, Any], outcome: _Outcome) -> E:
    """Send ``steps`` its effect's result, or throw the effect's failure into it."""
    result, error = outcome
    return steps.send(result) if error is None else steps.throw(error)
