"""The rooms one fix memory is made of, built once and shared by its sync and async shells.

``MemoryCore`` holds the configuration (strategy, detection, trust, limits), the store, and the
rooms every call goes through: ``CallRunner`` (one call end to end, against this process's
replicas), ``Responses`` (what the memory does with a response), ``Answers`` (with the answer to a
need) and ``Serving`` (lookups and patches). ``client.calls`` writes each memory call once over
it, as ``Steps``; ``FixMemory`` runs them blocking and ``AsyncFixMemory`` awaits them, over one
core or the same one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from os import PathLike
from pathlib import Path

from .admission import Admission
from .answers import Answers
from .confirmation import Confirmations
from .detection import Detection, DetectionName
from .invalidation import Invalidation
from .limits import DEFAULT_LIMITS, Limits
from .policies import Policies, contractless_policy
from .readers import SuggestionReader
from .responses import Responses
from .serving import Serving
from .shared.replica import Replicas
from .shared.store import Store
from .strategies import Strategy, StrategyName, strategy_for
from .transaction import CallRunner
from .trust import TrustPolicy

logger = logging.getLogger("invalidation_contracts.client")


def path_of(store: Store) -> Path | None:
    return getattr(store, "path", None)


class MemoryCore:
    """One memory's configuration, store and rooms (see ``FixMemory`` for the arguments)."""

    def __init__(
        self,
        strategy: StrategyName | Strategy | type[Strategy],
        detection: DetectionName | Detection,
        store: Store | str | PathLike[str] | None,
        *,
        clock: Callable[[], float],
        close_store: bool | None,
        trust: TrustPolicy | None,
        limits: Limits | None,
        contractless: StrategyName | Strategy | type[Strategy] | None = None,
        reader: SuggestionReader | None = None,
    ) -> None:
        self.strategy = strategy_for(strategy)
        self.policies = Policies(
            self.strategy, contractless_policy(contractless) if contractless is not None else None
        )
        self.trust = trust if trust is not None else TrustPolicy()
        self.detection = Detection.parse(detection)
        self.limits = limits if limits is not None else DEFAULT_LIMITS
        self.owns_store = not isinstance(store, Store) if close_store is None else close_store
        aside: Path | None = None
        if store is None:
            from .stores.inmemory import InMemoryStore  # the adapters load on first use

            store = InMemoryStore()
        elif not isinstance(store, Store):
            from .stores.sqlite import open_or_set_aside

            store, aside = open_or_set_aside(store)
            if aside is not None:
                logger.warning(
                    "the fix memory %s could not be opened; set aside as %s, a new one started",
                    path_of(store),
                    aside,
                )
        self.store = store
        lock = threading.RLock()
        invalidation = Invalidation(self.strategy, self.trust)
        admission = Admission(invalidation, self.trust, self.limits, self.policies)
        confirmations = Confirmations(
            active=self.strategy.invalidates and self.detection is not Detection.LAZY
        )
        self.calls = CallRunner(
            Replicas(store, lock),
            invalidation,
            admission,
            lock=lock,
            clock=clock,
            confirmations=confirmations,
        )
        if aside is not None:
            self.calls.set_aside = (str(aside), str(path_of(self.store)))
        self.responses = Responses(
            self.calls,
            invalidation,
            admission,
            detection=self.detection,
            limits=self.limits,
            reader=reader,
        )
        self.answers = Answers(self.calls, invalidation, self.limits)
        self.serving = Serving(self.calls, self.strategy, self.trust, self.policies)
