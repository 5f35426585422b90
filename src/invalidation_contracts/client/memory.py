"""The cross-episode fix memory: a sans-IO core that learns fixes and keeps them honest.

A fix memory never performs network I/O. It is driven with what a client saw (``observe`` an
``Observed`` response), asked what to inject (``lookup``), and answers every call with an
``Observation``: typed events (stored, served, evicted, restamped, refused, ...) and needs
(``FetchChanges``, ``FetchRules``) that an adapter — the httpx transport, the MCP session, or the
evaluation harness — fulfils and feeds back (``answer``, or ``fetch_failed`` for a network
error). ``position`` is where its knowledge stands, for the adapter to send in its own spelling.

``FixMemory`` and ``AsyncFixMemory`` are one surface: every call is written once in
``client.calls`` as ``Steps`` over a ``MemoryCore``; ``FixMemory`` runs them blocking,
``AsyncFixMemory`` awaits them with the store's I/O off the event loop. ``AsyncFixMemory.over``
(and ``FixMemory.over``) gives the other kind of shell over the same core, so sync and async code
share one memory.

**Shared memory.** Threads, processes and machines may share one store (an ``SQLiteStore`` file,
a ``PostgresStore`` database). A call is computed against the memory's replica of the origin and
written as one batch, on the condition that the origin's generation has not moved; a call that
lost the race to another writer is recomputed on what that writer committed. Each call first makes
sure the replica is current, so no process serves an entry another has evicted, and entry ids are
unique across all of them. Every origin is separate: a response from one origin never evicts or
restamps another's entries.

**Reads do no I/O.** When the store's change token has not moved, a lookup or a steady observe
touches no store at all; counters are written with the next real write, or by ``close``.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from collections.abc import Callable, Coroutine
from os import PathLike
from typing import Any, Concatenate, Generic, ParamSpec, Self, TypeVar, overload

from .._deprecation import warn_moved
from . import _legacy, calls
from .core import MemoryCore
from .detection import Detection, DetectionName
from .limits import Limits
from .readers import SuggestionReader
from .serving import Lookup, PatchOutcome
from .shared.steps import Steps, run_async, run_sync
from .shared.store import Store
from .strategies import Strategy, StrategyName
from .trust import TrustPolicy

__all__ = ["AsyncFixMemory", "FixMemory", "Lookup", "PatchOutcome"]

P = ParamSpec("P")
T = TypeVar("T")


class _Call(Generic[P, T]):
    """One memory call written once (a function of the core returning ``Steps``): blocking on a
    ``FixMemory``, a coroutine on an ``AsyncFixMemory``. It documents itself as the method it
    binds to: ``help()`` and ``inspect.signature`` show the call's parameters, result and
    docstring. ``renamed``: the call is deprecated, it warns naming that home. ``adapt``: an
    earlier spelling of the arguments it still takes, with a warning."""

    offloaded = False

    def __init__(
        self,
        function: Callable[Concatenate[MemoryCore, P], Any],
        *,
        renamed: str | None = None,
        adapt: _legacy.Spelling | None = None,
    ) -> None:
        self.function = function
        self.name = self.__name__ = self.__qualname__ = function.__name__
        self.__doc__ = function.__doc__
        self.__module__ = __name__
        self.renamed = renamed
        self.adapt = adapt
        signature = inspect.signature(function)
        core, *parameters = signature.parameters.values()
        self.signature = signature.replace(
            parameters=parameters, return_annotation=_result(signature.return_annotation)
        )
        itself = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        self.__signature__ = self.signature.replace(parameters=[itself, *parameters])

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self.name = self.__name__ = name
        self.__qualname__ = f"{owner.__qualname__}.{name}"

    def __call__(self, memory: _Surface, /, *args: Any, **kwargs: Any) -> Any:
        """``FixMemory.observe(memory, ...)``: the call through the class, as a method allows."""
        bound: Callable[..., Any] = getattr(memory, self.name)
        return bound(*args, **kwargs)

    @overload
    def __get__(self, memory: None, owner: type[Any]) -> Self: ...
    @overload
    def __get__(self, memory: FixMemory, owner: type[Any]) -> Callable[P, T]: ...
    @overload
    def __get__(
        self, memory: AsyncFixMemory, owner: type[Any]
    ) -> Callable[P, Coroutine[Any, Any, T]]: ...
    def __get__(self, memory: _Surface | None, owner: type[Any]) -> Any:
        if memory is None:
            return self
        bound = memory._bind(self)
        if self.adapt is not None or self.renamed is not None:
            bound = _guarded(bound, self, type(memory).__name__)
        functools.update_wrapper(bound, self.function)
        bound.__name__ = self.name
        bound.__qualname__ = f"{type(memory).__qualname__}.{self.name}"
        bound.__signature__ = self.signature  # type: ignore[attr-defined]
        del bound.__wrapped__  # type: ignore[attr-defined]
        memory.__dict__[self.name] = bound  # bound once per memory
        return bound


def _result(annotation: object) -> object:
    """What a call returns on the memory: ``T`` of its ``Steps[T]`` (a string under PEP 563)."""
    if isinstance(annotation, str) and annotation.startswith("Steps[") and annotation.endswith("]"):
        return annotation[len("Steps[") : -1]
    return annotation


def _guarded(bound: Callable[..., Any], call: _Call[Any, Any], kind: str) -> Callable[..., Any]:
    """``bound`` behind a deprecated call's warning, or an earlier spelling's translation."""

    def today(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        if call.renamed is not None:
            warn_moved(f"{kind}.{call.name}", f"{kind}.{call.renamed}", stacklevel=4)
        elif call.adapt is not None and (adapted := call.adapt.translate(args, kwargs)):
            earlier, now = call.adapt.spellings
            warn_moved(f"{kind}.{earlier}", f"{kind}.{now}", stacklevel=4)
            return adapted
        return args, kwargs

    if inspect.iscoroutinefunction(bound):

        async def awaited(*args: Any, **kwargs: Any) -> Any:
            args, kwargs = today(args, kwargs)
            return await bound(*args, **kwargs)

        return awaited

    def blocking(*args: Any, **kwargs: Any) -> Any:
        args, kwargs = today(args, kwargs)
        return bound(*args, **kwargs)

    return blocking


class _Steps(_Call[P, T]):
    """A call that runs ``Steps`` against the store."""

    def __init__(
        self,
        function: Callable[Concatenate[MemoryCore, P], Steps[T]],
        *,
        renamed: str | None = None,
        adapt: _legacy.Spelling | None = None,
    ) -> None:
        super().__init__(function, renamed=renamed, adapt=adapt)


class _Reader(_Call[P, T]):
    """A call that pages through the store with its sync reader (the async memory runs it in a
    worker thread)."""

    offloaded = True

    def __init__(self, function: Callable[Concatenate[MemoryCore, P], T]) -> None:
        super().__init__(function)


class _Surface:
    """The surface ``FixMemory`` and ``AsyncFixMemory`` share, each call named once."""

    _core: MemoryCore

    def __init__(
        self,
        strategy: StrategyName | Strategy | type[Strategy] = "row",
        detection: DetectionName | Detection = "eager",
        store: Store | str | PathLike[str] | None = None,
        *,
        clock: Callable[[], float] = time.time,
        close_store: bool | None = None,
        trust: TrustPolicy | None = None,
        limits: Limits | None = None,
        contractless: StrategyName | Strategy | type[Strategy] | None = None,
        reader: SuggestionReader | None = None,
    ) -> None:
        self._core = MemoryCore(
            strategy,
            detection,
            store,
            clock=clock,
            close_store=close_store,
            trust=trust,
            limits=limits,
            contractless=contractless,
            reader=reader,
        )

    @classmethod
    def over(cls, memory: _Surface) -> Self:
        """A memory of this kind over ``memory``'s core: the same store, replicas and lock, so
        sync and async code share one memory (closing either closes it)."""
        if isinstance(memory, cls):
            return memory
        shell = cls.__new__(cls)
        shell._core = memory._core
        return shell

    @property
    def strategy(self) -> Strategy:
        return self._core.strategy

    @property
    def detection(self) -> Detection:
        return self._core.detection

    @property
    def trust(self) -> TrustPolicy:
        return self._core.trust

    @property
    def limits(self) -> Limits:
        return self._core.limits

    @property
    def store(self) -> Store:
        return self._core.store

    def reopened(self, origin: str) -> None:
        """A connection to ``origin`` (re)opened: serve none of its entries until the position
        is confirmed again (what moved while it was closed is read first)."""
        self._core.calls.confirmations.reopened(origin)

    def announced(self, origin: str, seq: int | None = None, epoch: str | None = None) -> None:
        """The server announced a change of ``origin`` (at ``seq`` of ``epoch`` when it said):
        serve none of its entries until the memory has read past it (no stale fix meanwhile)."""
        self._core.calls.confirmations.announce(origin, seq, epoch)

    def _bind(self, call: _Call[Any, Any]) -> Callable[..., Any]:
        raise NotImplementedError

    # Driving the memory.
    begin_episode = _Steps(calls.begin_episode)
    needs = _Steps(calls.needs)
    lookup = _Steps(calls.lookup)
    observe = _Steps(calls.observe, adapt=_legacy.OBSERVE)
    answer = _Steps(calls.answer)
    fetch_failed = _Steps(calls.fetch_failed)
    evict = _Steps(calls.evict)
    # Client apply mode.
    set_patchable = _Steps(calls.set_patchable)
    # Where each origin's contract lives (the transport's ``Link`` discovery, kept).
    set_contract_location = _Steps(calls.set_contract_location)
    # Origins without a contract.
    set_policy = _Steps(calls.set_policy)
    apply_patches = _Steps(calls.apply_patches)
    # Reading the memory.
    entries = _Steps(calls.entries)
    stats = _Steps(calls.stats)
    unreadable = _Steps(calls.unreadable)
    state = _Steps(calls.state)
    position = _Steps(calls.position)
    tombstones = _Reader(calls.tombstones)
    origins = _Reader(calls.origins)
    close = _Steps(calls.close)
    # Deprecated spellings (earlier versions), removed in 0.3.0.
    relevant = _Steps(_legacy.relevant, renamed="lookup")
    fixes_for = _Steps(_legacy.fixes_for, renamed="lookup")


class FixMemory(_Surface):
    """A fix memory with one invalidation strategy and one detection policy over one store.

    ``strategy``: a name (``"row"``), an arm code (``"A2D"``) or a ``Strategy``.
    ``detection``: ``"eager"`` (default), ``"lazy"`` or ``"resync"``.
    ``store``: a ``Store``; a path opens an ``SQLiteStore`` there; ``None`` keeps it in memory.
    ``close_store``: whether ``close()`` closes the store (default: when the memory opened it).
    ``trust``: the defences against a dishonest server (``TrustPolicy``); default: none.
    ``limits``: the caps on what a server controls (``Limits``); default: ``Limits()``.
    ``contractless``: the policy (``ttl``, ``verify``, ``learned``) an origin is switched to when
    its failures carry suggestions and no contract field (default: none, such fixes are not kept);
    ``set_policy`` chooses one for an origin explicitly (``client.policies``).
    ``reader``: reads failures in another shape than ``recovery_feedback`` as suggestions
    (``client.readers``; ``ProblemErrorsReader`` reads an RFC 9457 ``errors`` list).
    """

    def _bind(self, call: _Call[Any, Any]) -> Callable[..., Any]:
        core, function = self._core, call.function
        if call.offloaded:
            return functools.partial(function, core)

        def blocking(*args: Any, **kwargs: Any) -> Any:
            return run_sync(core.store, function(core, *args, **kwargs))

        return blocking

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncFixMemory(_Surface):
    """``FixMemory``'s surface with every call that may touch the store a coroutine: the same
    calls, with the store's I/O off the event loop (``Store.abatch``; a worker thread for the
    SQLite and PostgreSQL stores). Reads that find the store unchanged do no I/O at all."""

    def _bind(self, call: _Call[Any, Any]) -> Callable[..., Any]:
        core, function = self._core, call.function
        if call.offloaded:

            async def offloaded(*args: Any, **kwargs: Any) -> Any:
                return await asyncio.to_thread(function, core, *args, **kwargs)

            return offloaded

        async def awaiting(*args: Any, **kwargs: Any) -> Any:
            return await run_async(core.store, function(core, *args, **kwargs))

        return awaiting

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
