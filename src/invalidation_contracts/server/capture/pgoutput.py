"""PostgreSQL's logical replication messages (``pgoutput``, protocol 1) as capture records, sans-IO.

A logical source peeks a replication slot's changes as bytes (one message per row of
``pg_logical_slot_peek_binary_changes``); ``Decoder`` turns them into ``Captured`` records: the
key of each written row of a declared table (its image is read again from the table in the
reader's snapshot, as the trigger capture's PostgreSQL records are), a ``truncate`` per table, and
a ``version`` record per logical message a writer emitted with ``VERSION_PREFIX``. Relation
messages name the tables; every other table's changes, and messages of other prefixes, are
skipped. A record's id is its change's LSN (increasing within a row's history: a writer waits
for the row's lock, so its change is logged after the earlier writer's commit).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .records import DELETE, TRUNCATE, UPSERT, VERSION, Captured

VERSION_PREFIX = "invalidation_contracts.version"
"""The prefix of the logical message an admin write emits to name a table's next version
(content: ``{"table": name, "version": version}``)."""

#: PostgreSQL's integer types (int2, int4, int8): a key column of these is a JSON integer.
INTEGER_OIDS = frozenset({20, 21, 23})


class DecodeError(ValueError):
    """Bytes that are not a pgoutput message this decoder knows."""


@dataclass(frozen=True, slots=True)
class Relation:
    """A relation message: a table's schema, name and columns (name, type oid)."""

    schema: str
    name: str
    columns: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class Declared:
    """A declared table as the decoder needs it: its reference name and key columns."""

    name: str
    key: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Commit:
    """A transaction's end: its xid and the LSN after its commit record (where a reader that
    consumed it resumes)."""

    xid: int
    end_lsn: int


@dataclass
class Decoder:
    """Decodes one peek's messages, in order; ``tables`` maps (schema, table) to declarations.

    Relations are remembered across messages (pgoutput sends one before a table's first change
    in each decoding session)."""

    tables: Mapping[tuple[str, str], Declared]
    relations: dict[int, Relation] = field(default_factory=dict)
    _xid: int | None = None

    def feed(self, lsn: int, data: bytes) -> list[Captured] | Commit | None:
        """One message: the records it makes, a ``Commit`` at a transaction's end, else None."""
        if not data:
            raise DecodeError("an empty message")
        kind, body = data[:1], _Reader(data[1:])
        if kind == b"B":
            body.int64()
            body.int64()
            self._xid = body.int32()
            return None
        if kind == b"C":
            body.int8()
            body.int64()
            end = body.int64()
            xid, self._xid = self._xid, None
            return Commit(xid if xid is not None else 0, end)
        if kind == b"R":
            relid = body.int32()
            schema, name = body.string(), body.string()
            body.int8()
            columns = []
            for _ in range(body.int16()):
                body.int8()
                column = body.string()
                oid = body.int32()
                body.int32()
                columns.append((column, oid))
            self.relations[relid] = Relation(schema, name, tuple(columns))
            return None
        if kind in (b"I", b"U", b"D"):
            return self._row(kind, lsn, body)
        if kind == b"T":
            count = body.int32()
            body.int8()
            relids = [body.int32() for _ in range(count)]
            out = []
            for relid in relids:
                declared = self._relation(relid)[1]
                if declared is not None:
                    out.append(Captured(lsn, self._tx(), declared.name, TRUNCATE, None, None))
            return out
        if kind == b"M":
            body.int8()
            body.int64()
            prefix = body.string()
            content = body.take(body.int32())
            return self._message(lsn, prefix, content)
        if kind in (b"O", b"Y"):
            return None
        raise DecodeError(f"unknown pgoutput message {kind!r}")

    def _row(self, kind: bytes, lsn: int, body: _Reader) -> list[Captured]:
        relation, declared = self._relation(body.int32())
        marker = body.take(1)
        old: list[str | None] | None = None
        if kind == b"U" and marker in (b"K", b"O"):
            old = body.tuple()
            marker = body.take(1)
        if kind == b"D":
            old = body.tuple()
            new = None
        else:
            if marker != b"N":
                raise DecodeError(f"expected a new tuple, got {marker!r}")
            new = body.tuple()
        if declared is None:
            return []
        out = []
        new_key = self._key(relation, declared, new) if new is not None else None
        old_key = self._key(relation, declared, old) if old is not None else None
        if old_key is not None and old_key != new_key:
            out.append(Captured(lsn, self._tx(), declared.name, DELETE, old_key, None))
        if new_key is not None:
            out.append(Captured(lsn, self._tx(), declared.name, UPSERT, new_key, None))
        return out

    def _message(self, lsn: int, prefix: str, content: bytes) -> list[Captured]:
        if prefix != VERSION_PREFIX:
            return []
        try:
            named = json.loads(content)
            table, version = str(named["table"]), str(named["version"])
        except (ValueError, KeyError, TypeError):
            return []
        return [Captured(lsn, self._tx(), table, VERSION, None, version)]

    def _relation(self, relid: int) -> tuple[Relation, Declared | None]:
        """The relation ``relid`` names, and its declaration (None: not a declared table)."""
        relation = self.relations.get(relid)
        if relation is None:
            raise DecodeError(f"a change of relation {relid} before its relation message")
        return relation, self.tables.get((relation.schema, relation.name))

    def _key(
        self, relation: Relation, declared: Declared, values: Sequence[str | None]
    ) -> str | None:
        """The row's key as a JSON array (None: a key column the message does not hold)."""
        by_name = {
            name: (oid, value) for (name, oid), value in zip(relation.columns, values, strict=False)
        }
        out: list[object] = []
        for column in declared.key:
            oid, value = by_name.get(column, (0, None))
            if value is None:
                return None
            out.append(int(value) if oid in INTEGER_OIDS else value)
        return json.dumps(out, ensure_ascii=False, separators=(", ", ": "))

    def _tx(self) -> str | None:
        return None if self._xid is None else str(self._xid)


def decode(
    tables: Mapping[tuple[str, str], Declared], messages: Iterable[tuple[int, bytes]]
) -> tuple[list[Captured], list[Commit]]:
    """Every record of ``messages`` (LSN, bytes) and the commits that end their transactions."""
    decoder = Decoder(tables)
    records: list[Captured] = []
    commits: list[Commit] = []
    for lsn, data in messages:
        out = decoder.feed(lsn, data)
        if isinstance(out, Commit):
            commits.append(out)
        elif out:
            records.extend(out)
    return records, commits


XID_SPAN = 1 << 32
"""Decoding names a transaction by its 32-bit xid; a snapshot's xids have 64 bits."""


def visible(commits: Iterable[Commit], xmax: int, xip: Collection[int]) -> list[Commit]:
    """The leading ``commits`` whose transactions a snapshot sees (``xmax``, ``xip``: its
    64-bit ``pg_snapshot_xmax`` and ``pg_snapshot_xip``). A commit is logged (and flushed, so
    decoded) before its transaction becomes visible: one at or past ``xmax``, or in ``xip``,
    ended after the snapshot was taken, and stops the list."""
    out = []
    for commit in commits:
        xid = widen_xid(commit.xid, xmax)
        if xid >= xmax or xid in xip:
            break
        out.append(commit)
    return out


def widen_xid(xid: int, near: int) -> int:
    """The 64-bit xid with the low 32 bits ``xid`` nearest ``near`` (a snapshot's xmax: a
    transaction decoding meets is within 2^31 of it, as PostgreSQL's own xid comparison
    assumes), so ``xmax`` itself and the xids just past it stay in its epoch."""
    wide = (near & ~(XID_SPAN - 1)) | xid
    if wide > near + XID_SPAN // 2:
        return wide - XID_SPAN
    if wide < near - XID_SPAN // 2:
        return wide + XID_SPAN
    return wide


def lsn_text(value: int) -> str:
    """An integer as a ``pg_lsn``."""
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


class _Reader:
    """A cursor over one message's bytes (big-endian, NUL-terminated strings)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.data):
            raise DecodeError("a truncated pgoutput message")
        out = self.data[self.at : self.at + n]
        self.at += n
        return out

    def int8(self) -> int:
        return int(self.take(1)[0])

    def int16(self) -> int:
        return int(struct.unpack(">h", self.take(2))[0])

    def int32(self) -> int:
        return int(struct.unpack(">I", self.take(4))[0])

    def int64(self) -> int:
        return int(struct.unpack(">Q", self.take(8))[0])

    def string(self) -> str:
        end = self.data.find(b"\0", self.at)
        if end < 0:
            raise DecodeError("an unterminated string")
        out = self.data[self.at : end].decode("utf-8")
        self.at = end + 1
        return out

    def tuple(self) -> list[str | None]:
        """A tuple's column values as text (None: NULL, or an unchanged TOASTed value)."""
        values: list[str | None] = []
        for _ in range(self.int16()):
            kind = self.take(1)
            if kind in (b"n", b"u"):
                values.append(None)
            elif kind in (b"t", b"b"):
                values.append(self.take(self.int32()).decode("utf-8"))
            else:
                raise DecodeError(f"unknown tuple column kind {kind!r}")
        return values
