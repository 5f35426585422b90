"""How rows and change-log records are written in a registry store (JSON text, one per row)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ...protocol.canonical import canonical_json
from ...protocol.models import RowChange, RuleChange, TableTransition
from ..changelog import LogRecord


def encode_row(row: Mapping[str, Any]) -> str:
    return canonical_json(row).decode("utf-8")


def encode_record(record: LogRecord) -> str:
    """A record as JSON: its transitions, the row changes as ``[table, op, key]``, a rule change,
    its commit time (``at``, Unix seconds; readers of older records find none)."""
    data: dict[str, Any] = {"seq": record.seq}
    if record.transitions:
        data["transitions"] = [t.to_wire() for t in record.transitions]
        data["rows"] = [[change.table, change.op, change.key] for change in record.rows]
    if record.rule_change is not None:
        data["rule_change"] = record.rule_change.to_wire()
    if record.committed_at is not None:
        data["at"] = record.committed_at
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def decode_record(seq: int, text: str) -> LogRecord:
    """The record filed under ``seq``; raises (KeyError, TypeError, ValueError) when unreadable.

    Reads both layouts: one ``transition`` with rows ``[op, key]`` (schema 1) and a list of
    ``transitions`` with rows ``[table, op, key]``.
    """
    data = json.loads(text)
    if data["seq"] != seq:
        raise ValueError("log record filed under another seq")
    if "transition" in data:  # schema 1: one table per record
        transitions = [TableTransition.model_validate(data["transition"])]
        table = transitions[0].table
        row_items = [(table, op, key) for op, key in data["rows"]]
    else:
        transitions = [TableTransition.model_validate(t) for t in data.get("transitions", ())]
        row_items = [(table, op, key) for table, op, key in data.get("rows", ())]
    rule_change = RuleChange.model_validate(data["rule_change"]) if "rule_change" in data else None
    seqs = [t.seq for t in transitions] + ([rule_change.seq] if rule_change else [])
    if not seqs or any(other != seq for other in seqs):
        raise ValueError("log record is empty or disagrees with its seq")
    by_table = {t.table: t for t in transitions}
    if len(by_table) != len(transitions):
        raise ValueError("log record moves one table twice")
    rows = tuple(
        RowChange(
            seq=seq,
            table=table,
            key=key,
            op=op,
            old_version=by_table[table].old_version,
            new_version=by_table[table].new_version,
        )
        for table, op, key in row_items
    )
    at = data.get("at")  # the commit time; absent from records written before it was kept
    committed_at = float(at) if isinstance(at, int | float) and not isinstance(at, bool) else None
    return LogRecord(
        seq=seq,
        transitions=tuple(transitions),
        rows=rows,
        rule_change=rule_change,
        committed_at=committed_at,
    )
