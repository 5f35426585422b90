"""A worker's surveys: the periodic reconciliation of a surveyed source, beside the follower.

The follower starts a survey (``capture.survey``) when a source's reconciliation is due and this
worker leads its capture; the survey reads the tables on a thread of its own, outside the
registry's lock and the follower's stall bound, so the worker keeps confirming (and serving) while
a large table is compared. What it found waits here as a ``Recheck`` until a follower round reads
the candidates again under the lock; a failed survey is logged and tried at the next interval.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from ..capture.survey import Recheck

if TYPE_CHECKING:
    from ..capture.source import SurveyedSource
    from ..registry import Registry

logger = logging.getLogger(__name__)


class Reconciler:
    """At most one survey per source at a time, and its result until it is rechecked."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[str, threading.Thread] = {}
        self._found: dict[str, Recheck] = {}

    def start(self, registry: Registry, source: SurveyedSource) -> None:
        """Survey ``source`` against the registry as it stands now (unless one runs or waits)."""
        name = source.name
        with self._lock:
            if name in self._running or name in self._found:
                return
            thread = threading.Thread(
                target=self._survey,
                args=(registry, source),
                name=f"invalidation-contracts-survey-{name}",
                daemon=True,
            )
            self._running[name] = thread
        thread.start()

    def adopt(self, name: str, recheck: Recheck) -> None:
        """A recheck found elsewhere (a start's survey, postponed by a lock): the next round's."""
        with self._lock:
            self._found.setdefault(name, recheck)

    def pending(self, name: str) -> Recheck | None:
        """The candidates of source ``name`` waiting to be read again under the lock."""
        with self._lock:
            return self._found.get(name)

    def rechecked(self, name: str, recheck: Recheck) -> None:
        """Forget ``recheck`` once a round read its candidates again."""
        with self._lock:
            if recheck.done and self._found.get(name) is recheck:
                del self._found[name]

    def running(self) -> bool:
        with self._lock:
            return bool(self._running)

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._lock:
            threads = list(self._running.values())
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _survey(self, registry: Registry, source: SurveyedSource) -> None:
        name = source.name
        state = registry.state
        marks = {table: f"{state.epoch}/{snap.version}" for table, snap in state.tables.items()}
        started = time.monotonic()
        try:
            found = source.survey(state.tables, marks)
            source.mark_verified(found.verified)
            logger.info(
                "%s: surveyed %d rows in %.1f s; %d candidates to recheck",
                name,
                found.read,
                time.monotonic() - started,
                sum(len(keys) for keys in found.candidates.values()),
            )
            with self._lock:
                if found.candidates:
                    self._found[name] = Recheck(found.candidates)
        except Exception as exc:  # the next interval tries again; the worker serves on
            logger.warning("%s: the reconciliation's survey failed: %s", name, exc)
        finally:
            with self._lock:
                self._running.pop(name, None)
