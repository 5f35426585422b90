"""The provider side: versioned reference tables, rules, graph, policies and the feedback generator.

The core here is sans-IO; ``http`` (FastAPI, with ``http.app`` the standalone app), ``store`` (the
registry's history in SQLite or PostgreSQL) and ``sql`` (reference tables in the provider's own
database, captured at the source) are adapters at the edge.
"""

from .asked import Asked
from .config import WorkerConfig
from .datafiles import DataFileError, SnapshotFile, read_data, read_snapshot
from .domain import Domain, Route, SQLTable, TableSpec
from .faults import PolicyError
from .graph import KnowledgeGraph, node_id, split_node
from .policies import Finding, FunctionPolicy, Policy, Violation, evaluate, policy
from .provider import Outcome, Provider, current_fix
from .registry import Registry, RegistryTransaction
from .rules import Rule, RuleSet
from .state import RegistryState
from .tables import Snapshot, diff, freeze, thaw
from .tracking import ReadTracker, TrackedTable, TrackedTables
from .transitions import TableChange
from .trust import TrustOptions
from .wrapping import ErrorRule, wrapped_policy

__all__ = [
    "Asked",
    "DataFileError",
    "Domain",
    "ErrorRule",
    "Finding",
    "FunctionPolicy",
    "KnowledgeGraph",
    "Outcome",
    "Policy",
    "PolicyError",
    "Provider",
    "ReadTracker",
    "Registry",
    "RegistryState",
    "RegistryTransaction",
    "Route",
    "Rule",
    "RuleSet",
    "SQLTable",
    "Snapshot",
    "SnapshotFile",
    "TableChange",
    "TableSpec",
    "TrackedTable",
    "TrackedTables",
    "TrustOptions",
    "Violation",
    "WorkerConfig",
    "current_fix",
    "diff",
    "evaluate",
    "freeze",
    "node_id",
    "policy",
    "read_data",
    "read_snapshot",
    "split_node",
    "thaw",
    "wrapped_policy",
]
