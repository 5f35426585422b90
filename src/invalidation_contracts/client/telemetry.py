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

import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .events import Evicted, MemoryEvent, NotStored, Refused
from .stats import OriginStats

if TYPE_CHECKING:
    from collections.abc import Iterable

    from opentelemetry.metrics import CallbackOptions, Meter, Observation

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
_STATS = (  # the columns of an origin's row of totals, in the order ``record`` adds them
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

Labels = tuple[tuple[str, str], ...]
_BY_EVENT: dict[type[MemoryEvent], tuple[str, Callable[[Any], str]]] = {
    Evicted: ("evictions", lambda event: event.reason.value),
    Refused: ("refused", lambda event: event.bound),
    NotStored: ("not_stored", lambda event: event.reason),
}
"""The events counted by a label of their own: counter name and the label's value."""
_LABEL = {"evictions": "reason", "refused": "bound", "not_stored": "reason"}


class _Instruments:
    """The memory's counters on one meter: totals kept here, read by the SDK when it collects.

    A memory call only adds to plain integers (no SDK call on the hot path): the call's nonzero
    counters are added to its origin's row of totals (a list indexed by ``_COLUMN``), and only
    the rare labelled events (evictions, refusals, suggestions not stored) touch a dictionary.
    Each counter is an observable counter whose callback reports the totals, so the cost of a
    measurement is paid at collection time, not per lookup.
    """

    def __init__(self, meter: Meter) -> None:
        self._rows: dict[str, list[int]] = {}
        """Origin -> its totals of ``_STATS``, then contract tokens kept, then injected."""
        self._labelled: dict[str, dict[Labels, int]] = {name: {} for name in _LABEL}
        self._lock = threading.Lock()
        for name, unit, description in _COUNTERS:
            meter.create_observable_counter(
                f"invalidation_contracts.memory.{name}",
                callbacks=[self._reader(name)],
                unit=unit,
                description=description,
            )

    def _reader(self, name: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        from opentelemetry.metrics import Observation

        if name in _LABEL:

            def labelled(_options: CallbackOptions) -> Iterable[Observation]:
                with self._lock:
                    items = list(self._labelled[name].items())
                return [Observation(value, dict(labels)) for labels, value in items]

            return labelled
        index = _COLUMN[name]
        extra = {"estimate": TOKEN_ESTIMATE} if name == "contract_tokens_kept" else {}

        def observe(_options: CallbackOptions) -> Iterable[Observation]:
            with self._lock:
                items = [(origin, row[index]) for origin, row in self._rows.items()]
            return [
                Observation(value, {"origin": origin, **extra}) for origin, value in items if value
            ]

        return observe

    def _row(self, origin: str) -> list[int]:
        row = self._rows.get(origin)
        if row is None:
            row = self._rows[origin] = [0] * len(_COLUMN)
        return row

    def add(self, name: str, value: int, origin: str) -> None:
        with self._lock:
            self._row(origin)[_COLUMN[name]] += value

    def record(self, origin: str, stats: OriginStats, events: Sequence[MemoryEvent]) -> None:
        with self._lock:
            row = self._row(origin)
            # one attribute read per counter (most are 0 in a call): cheaper than a generic pass
            if stats.lookups:
                row[0] += stats.lookups
            if stats.hits:
                row[1] += stats.hits
            if stats.misses:
                row[2] += stats.misses
            if stats.served:
                row[3] += stats.served
            if stats.stores:
                row[4] += stats.stores
            if stats.restamps:
                row[5] += stats.restamps
            if stats.quarantines:
                row[6] += stats.quarantines
            if stats.fetch_failures:
                row[7] += stats.fetch_failures
            if stats.responses:
                row[8] += stats.responses
            if stats.contract_bytes:
                row[9] += stats.contract_bytes
                row[_TOKENS] += stats.contract_bytes // BYTES_PER_TOKEN
            for event in events:
                found = _BY_EVENT.get(type(event))
                if found is not None:
                    name, label = found
                    key = (("origin", origin), (_LABEL[name], label(event)))
                    table = self._labelled[name]
                    table[key] = table.get(key, 0) + 1


_WIDTH = len(_STATS)
_TOKENS = _WIDTH
_COLUMN = {name: i for i, name in enumerate(_STATS)} | {
    "contract_tokens_kept": _TOKENS,
    "injected": _TOKENS + 1,
}
"""Each unlabelled counter's column in an origin's row of totals."""
_final: _Instruments | None = None
"""The instruments once a real provider was seen: the API sets the global provider at most once,
so from then on a call skips the provider lookup."""


def _instruments() -> _Instruments | None:
    """The instruments of the global meter provider now; None while none is configured."""
    global _built, _final
    if _final is not None:
        return _final
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
            _final = instruments
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
            instruments.add("injected", count, origin)
        except Exception:  # noqa: S110 - metrics must never fail a memory call
            pass
