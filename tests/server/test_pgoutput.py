"""pgoutput messages decoded into capture records (sans-IO): the bytes PostgreSQL's logical
decoding sends, built here by hand as the protocol documents them."""

from __future__ import annotations

import struct

import pytest

from invalidation_contracts.server.capture.pgoutput import (
    VERSION_PREFIX,
    XID_SPAN,
    Commit,
    Declared,
    DecodeError,
    decode,
    visible,
)

TABLES = {
    ("public", "plans"): Declared("plans", ("id",)),
    ("public", "pairs"): Declared("p", ("a", "b")),
}


def s(text: str) -> bytes:
    return text.encode() + b"\0"


def relation(relid: int, name: str, columns: list[tuple[str, int]]) -> bytes:
    body = struct.pack(">I", relid) + s("public") + s(name) + b"d" + struct.pack(">h", len(columns))
    for column, oid in columns:
        body += b"\x01" + s(column) + struct.pack(">Ii", oid, -1)
    return b"R" + body


def tup(*values: str | None) -> bytes:
    out = struct.pack(">h", len(values))
    for value in values:
        out += (
            b"n"
            if value is None
            else b"t" + struct.pack(">I", len(value.encode())) + value.encode()
        )
    return out


def begin(xid: int) -> bytes:
    return b"B" + struct.pack(">QqI", 100, 0, xid)


def commit(end: int) -> bytes:
    return b"C" + b"\0" + struct.pack(">QQq", end - 8, end, 0)


PLANS = relation(1, "plans", [("id", 25), ("funding", 25)])


def test_an_insert_is_an_upsert_of_its_key_in_its_transaction():
    records, commits = decode(
        TABLES,
        [
            (1, begin(7)),
            (1, PLANS),
            (2, b"I" + struct.pack(">I", 1) + b"N" + tup("basic", "card")),
            (3, commit(40)),
        ],
    )
    assert [(r.tx, r.table, r.op, r.key) for r in records] == [
        ("7", "plans", "upsert", '["basic"]')
    ]
    assert commits == [Commit(7, 40)]


def test_an_update_that_moves_the_key_is_a_delete_and_an_upsert():
    update = b"U" + struct.pack(">I", 1) + b"K" + tup("old", None) + b"N" + tup("new", "card")
    records, _ = decode(TABLES, [(1, begin(7)), (1, PLANS), (2, update), (3, commit(40))])
    assert [(r.op, r.key) for r in records] == [("delete", '["old"]'), ("upsert", '["new"]')]


def test_a_delete_names_the_old_key():
    delete = b"D" + struct.pack(">I", 1) + b"K" + tup("basic", None)
    records, _ = decode(TABLES, [(1, begin(7)), (1, PLANS), (2, delete), (3, commit(40))])
    assert [(r.op, r.key) for r in records] == [("delete", '["basic"]')]


def test_an_integer_key_column_is_a_json_integer_in_a_composite_key():
    pairs = relation(2, "pairs", [("a", 23), ("b", 25), ("v", 25)])
    insert = b"I" + struct.pack(">I", 2) + b"N" + tup("12", "x", "y")
    records, _ = decode(TABLES, [(1, begin(7)), (1, pairs), (2, insert), (3, commit(40))])
    assert [(r.table, r.key) for r in records] == [("p", '[12, "x"]')]


def test_a_table_nobody_declared_is_skipped():
    other = relation(3, "audit", [("id", 25)])
    insert = b"I" + struct.pack(">I", 3) + b"N" + tup("a")
    records, commits = decode(TABLES, [(1, begin(7)), (1, other), (2, insert), (3, commit(40))])
    assert records == [] and commits == [Commit(7, 40)]


def test_a_truncate_names_each_declared_table():
    truncate = b"T" + struct.pack(">IbII", 2, 0, 1, 9)
    other = relation(9, "audit", [("id", 25)])
    records, _ = decode(
        TABLES, [(1, begin(7)), (1, PLANS), (1, other), (2, truncate), (3, commit(9))]
    )
    assert [(r.table, r.op) for r in records] == [("plans", "truncate")]


def test_a_version_message_names_the_tables_next_version():
    content = b'{"table": "plans", "version": "2.0.0"}'
    message = (
        b"M\x01"
        + struct.pack(">Q", 5)
        + s(VERSION_PREFIX)
        + struct.pack(">I", len(content))
        + content
    )
    records, _ = decode(TABLES, [(1, begin(7)), (2, message), (3, commit(40))])
    assert [(r.table, r.op, r.row) for r in records] == [("plans", "version", "2.0.0")]


def test_a_message_of_another_prefix_is_skipped():
    message = b"M\x01" + struct.pack(">Q", 5) + s("someone.else") + struct.pack(">I", 2) + b"hi"
    assert decode(TABLES, [(1, begin(7)), (2, message), (3, commit(40))])[0] == []


@pytest.mark.parametrize(
    "data",
    [b"", b"Z", b"I\x00\x00\x00\x05N", b"B\x00"],
    ids=["empty", "unknown", "unknown-relation", "truncated"],
)
def test_bytes_that_are_no_pgoutput_message_are_a_decode_error(data):
    with pytest.raises(DecodeError):
        decode(TABLES, [(1, data)])


@pytest.mark.parametrize("epoch", [0, 7])
def test_a_commit_at_or_past_the_snapshots_xmax_is_not_visible_nor_are_those_after_it(epoch):
    # Flushed (so decoded) but ended after the snapshot: the newest transaction is at xmax.
    xmax = epoch * XID_SPAN + 1000
    commits = [Commit(998, 1), Commit(999, 2), Commit(1000, 3), Commit(997, 4)]
    assert visible(commits, xmax, set()) == commits[:2]
    assert visible(commits[:2], xmax, {xmax - 1}) == commits[:1], "one still running (xip)"
    assert visible([Commit(1001, 5)], xmax, set()) == []


def test_a_commit_from_before_the_xid_counter_wrapped_is_visible():
    xmax = 3 * XID_SPAN + 5
    assert visible([Commit(XID_SPAN - 2, 1), Commit(4, 2)], xmax, set()) == [
        Commit(XID_SPAN - 2, 1),
        Commit(4, 2),
    ]
    assert visible([Commit(5, 1)], xmax, set()) == []
