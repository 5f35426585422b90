"""The change capture as one sans-IO core: what a source captured and what it does to the registry.

``records``: captured rows, change sets, gaps, quarantine entries (and a PostgreSQL reader's
frontier); ``steps``: consuming a source into the registry and reconciling it with the tables;
``source``: the ``ChangeSource`` protocol a worker takes (``server.sql.SQLSource``, triggers, the
default; ``server.sql.logical.LogicalSource``, PostgreSQL logical decoding; or a provider's own);
``pgoutput``: PostgreSQL's logical replication messages, decoded from bytes. No SQL, no I/O here:
the sources (``server.sql``) read the database and hand this core their batches.
"""

from __future__ import annotations

from .records import (
    CaptureBatch,
    Captured,
    CapturedTransaction,
    Frontier,
    QuarantineEntry,
    change_sets,
    fold,
    gap,
    key_text,
    merged,
    row_value,
    screen,
)
from .source import ChangeSource, CommitProbe, LeadWakeup, Wakeup
from .steps import Progress, SourceError, consume, ingest, reconcile, trim

__all__ = [
    "CaptureBatch",
    "Captured",
    "CapturedTransaction",
    "ChangeSource",
    "CommitProbe",
    "Frontier",
    "LeadWakeup",
    "Progress",
    "QuarantineEntry",
    "SourceError",
    "Wakeup",
    "change_sets",
    "consume",
    "fold",
    "gap",
    "ingest",
    "key_text",
    "merged",
    "reconcile",
    "row_value",
    "screen",
    "trim",
]
