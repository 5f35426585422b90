"""The agent side: fix memory, invalidation strategies, prompting, patch application.

The core (``FixMemory`` and the strategies) is sans-IO; ``shared`` is how a memory lives in a
store shared by threads, processes and machines (the store interface, the layout, the replicas,
the conditional commit); ``stores`` holds the adapters of that interface (in memory, SQLite shared
by processes, PostgreSQL for fleets), imported on first use. The adapters that feed the memory
live beside the other integrations: ``invalidation_contracts.httpx`` (the httpx transports, the
``httpx`` extra) and ``invalidation_contracts.mcp`` (the MCP session). See ``memory`` for the
event/need protocol and ``limits`` for the bounds on what a server controls.

``__all__`` is the public surface. Names earlier versions also exported here (each strategy class,
the prompt helpers, ``OriginState``/``OriginStats``, the httpx clients, ...) still import from here
until 0.3.0, with a ``DeprecationWarning`` naming their home (``_MOVED``).
"""

from typing import TYPE_CHECKING

from .._deprecation import moved_names as _moved_names
from .._extras import lazy_exports as _lazy_exports
from .detection import Detection, DetectionName
from .entries import EvictionReason, MemoryEntry, MemoryKey, Tombstone
from .events import (
    Coarsened,
    Evicted,
    FetchChanges,
    FetchFailed,
    FetchRules,
    Ignored,
    MemoryEvent,
    MemoryFailed,
    MemorySetAside,
    Need,
    NotStored,
    Observation,
    PatchSkipped,
    PolicyChosen,
    PolicyStateReset,
    PositionDropped,
    Probing,
    Quarantined,
    ReadResource,
    Refused,
    Restamped,
    Revalidated,
    RulesAlert,
    Served,
    Stored,
    Unreadable,
    VersionMoved,
)
from .limits import Limits
from .memory import AsyncFixMemory, FixMemory, Lookup, PatchOutcome
from .patching import ApplyMode, PatchRefused
from .prompting import consumption
from .shared.store import Store, StoreError
from .strategies import Strategy, StrategyName, strategy_for
from .trust import TrustPolicy
from .values import Answer, Observed, Position

if TYPE_CHECKING:
    from .stores.inmemory import InMemoryStore
    from .stores.sqlite import SQLiteStore

__all__ = [
    "Answer",
    "ApplyMode",
    "AsyncFixMemory",
    "Coarsened",
    "Detection",
    "DetectionName",
    "Evicted",
    "EvictionReason",
    "FetchChanges",
    "FetchFailed",
    "FetchRules",
    "FixMemory",
    "Ignored",
    "InMemoryStore",
    "Limits",
    "Lookup",
    "MemoryEntry",
    "MemoryEvent",
    "MemoryFailed",
    "MemoryKey",
    "MemorySetAside",
    "Need",
    "NotStored",
    "Observation",
    "Observed",
    "PatchOutcome",
    "PatchRefused",
    "PatchSkipped",
    "PolicyChosen",
    "PolicyStateReset",
    "Position",
    "PositionDropped",
    "Probing",
    "Quarantined",
    "ReadResource",
    "Refused",
    "Restamped",
    "Revalidated",
    "RulesAlert",
    "SQLiteStore",
    "Served",
    "Store",
    "StoreError",
    "Stored",
    "Strategy",
    "StrategyName",
    "Tombstone",
    "TrustPolicy",
    "Unreadable",
    "VersionMoved",
    "consumption",
    "strategy_for",
]

#: Names earlier versions exported here, each with its home; they warn until 0.3.0 drops them.
_MOVED = {
    "Consumption": "invalidation_contracts.client.prompting",
    "Dependency": "invalidation_contracts.client.entries",
    "L2_SENTENCE": "invalidation_contracts.client.prompting",
    "NaiveMemory": "invalidation_contracts.client.strategies",
    "NoMemory": "invalidation_contracts.client.strategies",
    "OriginState": "invalidation_contracts.client.state",
    "OriginStats": "invalidation_contracts.client.stats",
    "PatchResult": "invalidation_contracts.client.patching",
    "Provenance": "invalidation_contracts.client.entries",
    "RowInvalidation": "invalidation_contracts.client.strategies",
    "RowWithConsumers": "invalidation_contracts.client.strategies",
    "RowWithGraph": "invalidation_contracts.client.strategies",
    "RulesOracle": "invalidation_contracts.client.strategies",
    "RulesStamp": "invalidation_contracts.client.strategies",
    "RulesStampWithVectors": "invalidation_contracts.client.strategies",
    "STRATEGY_CLASSES": "invalidation_contracts.client.strategies",
    "TableInvalidation": "invalidation_contracts.client.strategies",
    "apply_patch": "invalidation_contracts.client.patching",
    "contract_bytes": "invalidation_contracts.client.stats",
    "render_memory_block": "invalidation_contracts.client.prompting",
    "system_prompt": "invalidation_contracts.client.prompting",
    "async_contract_client": "invalidation_contracts.httpx",
    "contract_client": "invalidation_contracts.httpx",
}

#: The store adapters (``client.stores``), imported on first use: importing the client loads no
#: adapter and no database driver (tests/test_import_boundary_client.py).
_ADAPTERS = {"InMemoryStore": ".stores.inmemory", "SQLiteStore": ".stores.sqlite"}

__getattr__ = _moved_names(__name__, _MOVED, _lazy_exports(__name__, _ADAPTERS))
