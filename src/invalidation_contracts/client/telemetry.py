"""The fix memory's figures as OpenTelemetry metrics, through the global meter provider.

Every committed memory call hands its counters and events here (``CallRunner.run``). When no
OpenTelemetry meter provider is configured this costs one dictionary lookup: the API module is
never imported by the memory (a configured provider means the application imported it), and with
only the API's proxy or no-op provider nothing is built or recorded. Once an application sets a
provider (``metrics.set_meter_provider``), the next call builds the instruments from it. A call
then adds to plain integer totals; observable counters hand them to the SDK when it collects, so
no SDK code runs on a lookup's path.

Instruments (scope ``invalidation_contracts.client``, attribute ``origin`` on each):
lookups, hits, misses, entries served for injection, entries injected into requests, fixes
stored, evictions by ``reason``, restamps, quarantines, suggestions not stored by ``reason``,
input refused by ``bound``, fetch failures, responses, contract bytes seen, and contract tokens
kept from the model — an estimate at four bytes a token, labelled ``estimate``.
"""

from __future__ import annotations

import operator
import sys
import threading
from collections.abc import Sequence
from typing import Any

from .events import Evicted, MemoryEvent, NotStored, Refused
from .stats import OriginStats

SCOPE = "invalidation_contracts.client"
BYTES_PER_TOKEN = 4
"""The estimate of contract tokens kept from the model (the harness's ``est.`` figure)."""
TOKEN_ESTIMATE = f"{BYTES_PER_TOKEN}-bytes-per-token"

_UNCONFIGURED = frozenset({"_ProxyMeterProvider", "NoOpMeterProvider", "_DefaultMeterProvider"})
_lock = threading.Lock()
_built: tuple[Any, _Instruments | None] | None = None
"""The meter provider the instruments were built from, and them (None: a no-op provider)."""


#: (name, unit, description) of every counter, in ``invalidation_contracts.memory.<name>``.
_COUNTERS = (
    ("lookups", "{lookup}", "Lookups (hits and misses)."),
    ("hits", "{lookup}", "Lookups that served at least one entry."),
    ("misses", "{lookup}", "Lookups that served no entry."),
    ("served", "{entry}", "Entries lookups returned for injection."),
    ("injected", "{entry}", "Entries injected into sent requests."),
    ("stores", "{entry}", "Fixes learned from suggestions."),
    ("evictions", "{entry}", "Entries evicted, by reason."),
    ("restamps", "{entry}", "Entries found valid and restamped."),
    ("quarantines", "{entry}", "Entries put out of service."),
    ("not_stored", "{suggestion}", "Suggestions not kept, by reason."),
    ("refused", "{input}", "Server input refused by a client-side bound, by bound."),
    ("fetch_failures", "{fetch}", "Needs that failed to fetch."),
    ("responses", "{response}", "Responses fed to the memory."),
    ("contract_bytes", "By", "Contract bytes in the responses the memory saw."),
    (
        "contract_tokens_kept",
        "{token}",
        "Contract tokens kept from the model (an estimate: contract bytes / 4).",
    ),
)
_STATS = (
    "lookups",
    "hits",
    "misses",
    "served",
    "stores",
    "restamps",
    "quarantines",
    "fetch_failures",
    "responses",
    "contract_bytes",
)

_read_stats = operator.attrgetter(*_STATS)
Labels = tuple[tuple[str, str], ...]


class _Instruments:
    """The memory's counters on one meter: totals kept here, read by the SDK when it collects.

    A memory call only adds to plain integers (no SDK call on the hot path); each counter is an
    observable counter whose callback reports the totals, so the cost of a measurement is paid
    at collection time, not per lookup.
    """

    def __init__(self, meter: Any) -> None:
        self._totals: dict[str, dict[Labels, int]] = {name: {} for name, _, _ in _COUNTERS}
        self._lock = threading.Lock()
        for name, unit, description in _COUNTERS:
            meter.create_observable_counter(
                f"invalidation_contracts.memory.{name}",
                callbacks=[self._reader(name)],
                unit=unit,
                description=description,
            )

    def _reader(self, name: str) -> Any:
        from opentelemetry.metrics import Observation

        def observe(_options: Any) -> Any:
            with self._lock:
                items = list(self._totals[name].items())
            return [Observation(value, dict(labels)) for labels, value in items]

        return observe

    def add(self, name: str, value: int, labels: Labels) -> None:
        with self._lock:
            table = self._totals[name]
            table[labels] = table.get(labels, 0) + value

    def record(self, origin: str, stats: OriginStats, events: Sequence[MemoryEvent]) -> None:
        where = (("origin", origin),)
        with self._lock:
            totals = self._totals
            for name, value in zip(_STATS, _read_stats(stats), strict=True):
                if value:
                    table = totals[name]
                    table[where] = table.get(where, 0) + value
            if stats.contract_bytes:
                kept = totals["contract_tokens_kept"]
                key = (*where, ("estimate", TOKEN_ESTIMATE))
                kept[key] = kept.get(key, 0) + stats.contract_bytes // BYTES_PER_TOKEN
            for event in events:
                if isinstance(event, Evicted):
                    name, key = "evictions", (*where, ("reason", event.reason.value))
                elif isinstance(event, Refused):
                    name, key = "refused", (*where, ("bound", event.bound))
                elif isinstance(event, NotStored):
                    name, key = "not_stored", (*where, ("reason", event.reason))
                else:
                    continue
                table = totals[name]
                table[key] = table.get(key, 0) + 1


def _instruments() -> _Instruments | None:
    """The instruments of the global meter provider now; None while none is configured."""
    global _built
    api = sys.modules.get("opentelemetry.metrics")
    if api is None:
        return None
    provider = api.get_meter_provider()
    built = _built
    if built is not None and built[0] is provider:
        return built[1]
    with _lock:
        instruments = None
        if type(provider).__name__ not in _UNCONFIGURED:
            from .. import __version__

            instruments = _Instruments(provider.get_meter(SCOPE, __version__))
        _built = (provider, instruments)
    return instruments


def record(origin: str, stats: OriginStats, events: Sequence[MemoryEvent]) -> None:
    """Report one committed call's counters and events (nothing while no provider is set)."""
    instruments = _instruments()
    if instruments is not None:
        try:
            instruments.record(origin, stats, events)
        except Exception:  # noqa: S110 - metrics must never fail a memory call
            pass


def injected(origin: str, count: int) -> None:
    """Report ``count`` entries injected into a request sent to ``origin``."""
    instruments = _instruments() if count else None
    if instruments is not None:
        try:
            instruments.add("injected", count, (("origin", origin),))
        except Exception:  # noqa: S110 - metrics must never fail a memory call
            pass
