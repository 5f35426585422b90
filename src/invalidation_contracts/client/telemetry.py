"""The fix memory's figures as OpenTelemetry metrics, through the global meter provider.

Every committed memory call hands its counters and events here (``Transactions.run``). When no
OpenTelemetry meter provider is configured this costs one dictionary lookup: the API module is
never imported by the memory (a configured provider means the application imported it), and with
only the API's proxy or no-op provider nothing is built or recorded. Once an application sets a
provider (``metrics.set_meter_provider``), the next call builds the instruments from it.

Instruments (scope ``invalidation_contracts.client``, attribute ``origin`` on each):
lookups, hits, misses, entries served for injection, entries injected into requests, fixes
stored, evictions by ``reason``, restamps, quarantines, suggestions not stored by ``reason``,
input refused by ``bound``, fetch failures, responses, contract bytes seen, and contract tokens
kept from the model — an estimate at four bytes a token, labelled ``estimate``.
"""

from __future__ import annotations

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


class _Instruments:
    """The memory's instruments from one meter."""

    def __init__(self, meter: Any) -> None:
        def counter(name: str, unit: str, description: str) -> Any:
            return meter.create_counter(f"invalidation_contracts.memory.{name}", unit, description)

        self.lookups = counter("lookups", "{lookup}", "Lookups (hits and misses).")
        self.hits = counter("hits", "{lookup}", "Lookups that served at least one entry.")
        self.misses = counter("misses", "{lookup}", "Lookups that served no entry.")
        self.served = counter("served", "{entry}", "Entries lookups returned for injection.")
        self.injected = counter("injected", "{entry}", "Entries injected into sent requests.")
        self.stores = counter("stores", "{entry}", "Fixes learned from suggestions.")
        self.evictions = counter("evictions", "{entry}", "Entries evicted, by reason.")
        self.restamps = counter("restamps", "{entry}", "Entries found valid and restamped.")
        self.quarantines = counter("quarantines", "{entry}", "Entries put out of service.")
        self.not_stored = counter("not_stored", "{suggestion}", "Suggestions not kept, by reason.")
        self.refused = counter(
            "refused", "{input}", "Server input refused by a client-side bound, by bound."
        )
        self.fetch_failures = counter("fetch_failures", "{fetch}", "Needs that failed to fetch.")
        self.responses = counter("responses", "{response}", "Responses fed to the memory.")
        self.contract_bytes = counter(
            "contract_bytes", "By", "Contract bytes in the responses the memory saw."
        )
        self.tokens_kept = counter(
            "contract_tokens_kept",
            "{token}",
            "Contract tokens kept from the model (an estimate: contract bytes / 4).",
        )

    def record(self, origin: str, stats: OriginStats, events: Sequence[MemoryEvent]) -> None:
        where = {"origin": origin}
        for instrument, value in (
            (self.lookups, stats.lookups),
            (self.hits, stats.hits),
            (self.misses, stats.misses),
            (self.served, stats.served),
            (self.stores, stats.stores),
            (self.restamps, stats.restamps),
            (self.quarantines, stats.quarantines),
            (self.fetch_failures, stats.fetch_failures),
            (self.responses, stats.responses),
            (self.contract_bytes, stats.contract_bytes),
        ):
            if value:
                instrument.add(value, where)
        if stats.contract_bytes:
            self.tokens_kept.add(
                stats.contract_bytes // BYTES_PER_TOKEN, {**where, "estimate": TOKEN_ESTIMATE}
            )
        for event in events:
            if isinstance(event, Evicted):
                self.evictions.add(1, {**where, "reason": event.reason.value})
            elif isinstance(event, Refused):
                self.refused.add(1, {**where, "bound": event.bound})
            elif isinstance(event, NotStored):
                self.not_stored.add(1, {**where, "reason": event.reason})


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
            instruments.injected.add(count, {"origin": origin})
        except Exception:  # noqa: S110 - metrics must never fail a memory call
            pass
