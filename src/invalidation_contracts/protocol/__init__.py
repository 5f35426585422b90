"""The wire protocol: typed models, levels, canonical JSON and fingerprints, problem documents.

Pure data and pure functions; nothing here performs I/O.
"""

from .canonical import canonical_json, fingerprint, row_etag, rules_version
from .levels import Level
from .models import (
    Action,
    CacheHint,
    ChangesFeed,
    ContractFields,
    GraphEdge,
    GraphListing,
    GraphNode,
    Membership,
    PatchOperation,
    PatchTableRequest,
    Problem,
    RecoveryFeedback,
    ReloadRequest,
    ReloadResult,
    RowChange,
    RuleChange,
    RuleDeclaration,
    RulesListing,
    RulesRequest,
    RulesResult,
    SuccessResponse,
    Suggestion,
    TableDependency,
    TableDiff,
    TableTransition,
)
from .problems import ProblemType

__all__ = [
    "Action",
    "CacheHint",
    "ChangesFeed",
    "ContractFields",
    "GraphEdge",
    "GraphListing",
    "GraphNode",
    "Level",
    "Membership",
    "PatchOperation",
    "PatchTableRequest",
    "Problem",
    "ProblemType",
    "RecoveryFeedback",
    "ReloadRequest",
    "ReloadResult",
    "RowChange",
    "RuleChange",
    "RuleDeclaration",
    "RulesListing",
    "RulesRequest",
    "RulesResult",
    "SuccessResponse",
    "Suggestion",
    "TableDependency",
    "TableDiff",
    "TableTransition",
    "canonical_json",
    "fingerprint",
    "row_etag",
    "rules_version",
]
