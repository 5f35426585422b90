"""The agent side: fix memory, invalidation strategies, prompting, patch application.

The core (``FixMemory`` and the strategies) is sans-IO; ``stores`` holds the persistence adapters
(in memory, SQLite shared by processes, PostgreSQL for fleets). The adapters that feed the memory
live beside the other integrations: ``invalidation_contracts.httpx`` (the httpx transports, the
``httpx`` extra) and ``invalidation_contracts.mcp`` (the MCP session). See ``memory`` for the
event/need protocol and ``limits`` for the bounds on what a server controls.

``__all__`` is the public surface. The names below it (each strategy class, the prompt helpers,
``OriginState``/``OriginStats``, ...) stay importable from here for code written against earlier
versions; their home is their submodule.
"""

from .detection import Detection, DetectionName
from .entries import Dependency as Dependency
from .entries import EvictionReason, MemoryEntry, MemoryKey, Tombstone
from .entries import Provenance as Provenance
from .events import (
    Evicted,
    FetchChanges,
    FetchFailed,
    FetchRules,
    Ignored,
    MemoryEvent,
    MemoryFailed,
    Need,
    NotStored,
    Observation,
    PolicyChosen,
    PolicyStateReset,
    PositionDropped,
    Probing,
    Quarantined,
    Refused,
    Restamped,
    RulesAlert,
    Served,
    Stored,
    VersionMoved,
)
from .limits import Limits
from .memory import AsyncFixMemory, FixMemory, Lookup, PatchOutcome
from .patching import ApplyMode, PatchRefused
from .patching import PatchResult as PatchResult
from .patching import apply_patch as apply_patch
from .prompting import L2_SENTENCE as L2_SENTENCE
from .prompting import Consumption as Consumption
from .prompting import consumption
from .prompting import render_memory_block as render_memory_block
from .prompting import system_prompt as system_prompt
from .state import OriginState as OriginState
from .stats import OriginStats as OriginStats
from .stats import contract_bytes as contract_bytes
from .stores import InMemoryStore, SQLiteStore, Store, StoreError
from .strategies import STRATEGY_CLASSES as STRATEGY_CLASSES
from .strategies import NaiveMemory as NaiveMemory
from .strategies import NoMemory as NoMemory
from .strategies import RowInvalidation as RowInvalidation
from .strategies import RowWithConsumers as RowWithConsumers
from .strategies import RowWithGraph as RowWithGraph
from .strategies import RulesOracle as RulesOracle
from .strategies import RulesStamp as RulesStamp
from .strategies import RulesStampWithVectors as RulesStampWithVectors
from .strategies import Strategy, StrategyName, strategy_for
from .strategies import TableInvalidation as TableInvalidation
from .trust import TrustPolicy
from .values import Answer, Observed, Position

__all__ = [
    "Answer",
    "ApplyMode",
    "AsyncFixMemory",
    "Detection",
    "DetectionName",
    "Evicted",
    "EvictionReason",
    "FetchChanges",
    "FetchFailed",
    "FetchRules",
    "FixMemory",
    "Ignored",
    "MemoryFailed",
    "PositionDropped",
    "PolicyChosen",
    "PolicyStateReset",
    "Probing",
    "InMemoryStore",
    "Limits",
    "Lookup",
    "MemoryEntry",
    "MemoryEvent",
    "MemoryKey",
    "Need",
    "NotStored",
    "Observation",
    "Observed",
    "PatchOutcome",
    "PatchRefused",
    "Position",
    "Quarantined",
    "Refused",
    "Restamped",
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
    "VersionMoved",
    "consumption",
    "strategy_for",
]
