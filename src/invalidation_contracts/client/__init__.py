"""The agent side: fix memory, invalidation strategies, prompting, patch application, httpx hooks.

The core (``FixMemory`` and the strategies) is sans-IO; ``stores`` holds the persistence adapters
and ``transport`` the httpx integration. See ``memory`` for the event/need protocol.
"""

from .detection import Detection
from .entries import Dependency, EvictionReason, MemoryEntry, MemoryKey, Provenance, Tombstone
from .events import (
    Evicted,
    FetchChanges,
    FetchRules,
    Ignored,
    MemoryEvent,
    Need,
    NotStored,
    Observation,
    Quarantined,
    Restamped,
    RulesAlert,
    Served,
    Stored,
    VersionMoved,
)
from .memory import FixMemory, Lookup, PatchOutcome
from .patching import ApplyMode, PatchRefused, PatchResult, apply_patch
from .prompting import L2_SENTENCE, Consumption, consumption, render_memory_block, system_prompt
from .state import OriginState
from .stats import OriginStats, contract_bytes
from .stores import InMemoryStore, SQLiteStore, Store, StoreError
from .strategies import (
    STRATEGY_CLASSES,
    NaiveMemory,
    NoMemory,
    RowInvalidation,
    RowWithConsumers,
    RowWithGraph,
    RulesOracle,
    RulesStamp,
    RulesStampWithVectors,
    Strategy,
    TableInvalidation,
    strategy_for,
)
from .transport import (
    AsyncContractTransport,
    ContractTransport,
    async_contract_client,
    contract_client,
)
from .trust import TrustPolicy

__all__ = [
    "L2_SENTENCE",
    "STRATEGY_CLASSES",
    "ApplyMode",
    "AsyncContractTransport",
    "Consumption",
    "ContractTransport",
    "Dependency",
    "Detection",
    "Evicted",
    "EvictionReason",
    "FetchChanges",
    "FetchRules",
    "FixMemory",
    "Ignored",
    "InMemoryStore",
    "Lookup",
    "MemoryEntry",
    "MemoryEvent",
    "MemoryKey",
    "NaiveMemory",
    "Need",
    "NoMemory",
    "NotStored",
    "Observation",
    "OriginState",
    "OriginStats",
    "PatchOutcome",
    "PatchRefused",
    "PatchResult",
    "Provenance",
    "Quarantined",
    "Restamped",
    "RowInvalidation",
    "RowWithConsumers",
    "RowWithGraph",
    "RulesAlert",
    "RulesOracle",
    "RulesStamp",
    "RulesStampWithVectors",
    "SQLiteStore",
    "Served",
    "Store",
    "StoreError",
    "Stored",
    "Strategy",
    "TableInvalidation",
    "Tombstone",
    "TrustPolicy",
    "VersionMoved",
    "apply_patch",
    "async_contract_client",
    "consumption",
    "contract_bytes",
    "contract_client",
    "render_memory_block",
    "strategy_for",
    "system_prompt",
]
