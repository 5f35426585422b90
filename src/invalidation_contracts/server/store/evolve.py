"""A domain whose tables changed since its registry was stored: evolved, not refused.

- A table the domain now declares and the store lacks is added at its declared version, empty
  for a SQL table (the reconciliation that runs when the worker opens then records its rows as a
  change set: rows added, version bump, ``seq``) or with its declared rows for an in-memory one
  (no client can hold a fix that read a table that did not exist). The domain's rules that name it
  are added. A table the retained log already knows (removed by a rollback, re-added by a
  redeploy) comes back by a change set of its own, at a version past every one the log gave it,
  so the log still tells each table's version and the epoch holds.
- A stored table the domain does not declare stays: another version of the domain (a rolling
  deploy's new workers, or the old ones after a rollback) serves it from the same history. Removal
  is explicit (``invalidation-contracts db remove-table``, :func:`remove`): one change set that
  removes every row (version bump, the row removals in the feed, so clients evict the fixes that
  read it), then the table leaves the state; stored rules that name it go with it.

History is kept: same epoch, positions stay valid. Column changes need nothing here: a worker's
reconciliation at open records them as changed rows.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from ...protocol.models import RowChange, TableTransition
from ..changelog import LogRecord
from ..domain import Domain
from ..tables import Snapshot
from ..versions import fresh_version
from .dialect import Connection, Statements, StorageError
from .records import encode_record, encode_row

logger = logging.getLogger(__name__)


def _transitions(s: Statements[Connection]) -> dict[str, list[TableTransition]]:
    """Each table's version transitions in the retained log, in seq order."""
    from .reader import read_log

    out: dict[str, list[TableTransition]] = {}
    for record in read_log(s, -1):
        for transition in record.transitions:
            out.setdefault(transition.table, []).append(transition)
    return out


def evolve(s: Statements[Connection], domain: Domain, stored: Mapping[str, Snapshot]) -> None:
    """Bring the stored tables to the ones ``domain`` declares (see the module docstring)."""
    added = sorted(set(domain.tables) - set(stored))
    meta = s.meta()
    seq = int(meta.get("seq", "0"))
    history = _transitions(s) if added else {}
    for name in added:
        spec = domain.tables[name]
        rows = getattr(spec, "rows", None) or {}
        version, changed_at = spec.version, 0
        earlier = history.get(name)
        if earlier:  # re-added (a rollback, then a redeploy): a change set the log can tell
            seq += 1
            old = earlier[-1].new_version
            version = fresh_version(
                old, {v for t in earlier for v in (t.old_version, t.new_version)}
            )
            changed_at = seq
            record = LogRecord(
                seq,
                (TableTransition(seq=seq, table=name, old_version=old, new_version=version),),
                tuple(
                    RowChange(
                        seq=seq,
                        table=name,
                        key=key,
                        op="added",
                        old_version=old,
                        new_version=version,
                    )
                    for key in sorted(rows)
                ),
            )
            s.run("INSERT INTO {log} (seq, record) VALUES (?, ?)", (seq, encode_record(record)))
        s.run(
            "INSERT INTO {tables} (name, version, changed_at) VALUES (?, ?, ?)",
            (name, version, changed_at),
        )
        s.run_many(
            "INSERT INTO {rows} (table_name, key, data) VALUES (?, ?, ?)",
            [(name, key, encode_row(row)) for key, row in sorted(rows.items())],
        )
    new = set(added)
    s.run_many(
        "INSERT INTO {rules} (from_table, to_table, relation, via) VALUES (?, ?, ?, ?)",
        [
            (r.from_table, r.to_table, r.relation, r.via)
            for r in domain.rules
            if r.from_table in new or r.to_table in new
        ],
    )
    if seq != int(meta.get("seq", "0")):
        s.set_meta(seq=seq)
    logger.warning(
        "%s: domain %r evolved: tables added %s (same history, seq %d)",
        s.where,
        domain.name,
        added,
        seq,
    )


def remove(s: Statements[Connection], names: Sequence[str]) -> int:
    """Remove the stored tables ``names`` by one change set each (the module docstring); the
    seq after it. A name the store does not hold is a ``StorageError``."""
    from .reader import read_tables

    stored, _ = read_tables(s)
    unknown = sorted(set(names) - set(stored))
    if unknown:
        raise StorageError(f"{s.where} holds no table named {', '.join(map(repr, unknown))}")
    meta = s.meta()
    seq = int(meta.get("seq", "0"))
    for name in names:
        seq += 1
        snapshot = stored[name]
        version = fresh_version(snapshot.version, ())  # total: a non-numeric version gets v+1
        record = LogRecord(
            seq,
            (
                TableTransition(
                    seq=seq, table=name, old_version=snapshot.version, new_version=version
                ),
            ),
            tuple(
                RowChange(
                    seq=seq,
                    table=name,
                    key=key,
                    op="removed",
                    old_version=snapshot.version,
                    new_version=version,
                )
                for key in sorted(snapshot.rows)
            ),
        )
        s.run("INSERT INTO {log} (seq, record) VALUES (?, ?)", (seq, encode_record(record)))
        s.run("DELETE FROM {rows} WHERE table_name = ?", (name,))
        s.run("DELETE FROM {tables} WHERE name = ?", (name,))
        s.run("DELETE FROM {rules} WHERE from_table = ? OR to_table = ?", (name, name))
    s.set_meta(seq=seq)
    logger.warning("%s: tables removed %s (same history, seq %d)", s.where, list(names), seq)
    return seq
