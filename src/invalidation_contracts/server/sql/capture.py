"""Change capture at the source: triggers on the declared tables write every committed change.

Each declared table gets triggers that write, in the writer's own transaction, one record per
changed row into a capture table: the key and the new row image, rendered to JSON by the same SQL
expressions the full load uses (so a captured row and a loaded row can never disagree). If the
record cannot be written — the capture table is gone, a value has no JSON form — the trigger
fails and so does the writer's statement: nothing is lost silently.

- SQLite: ``ic_capture`` with an AUTOINCREMENT id (writers are serialized by the database lock,
  and a rollback gives the ids back, so committed ids are contiguous); the reader polls.
- PostgreSQL: ``<schema>.capture`` with ids from a sequence (no row every writer locks, so writers
  of different tables never wait on each other) and the writer's transaction id (``xid8``); a
  reader resumes at its snapshot's ``pg_snapshot_xmin`` (every transaction below it has ended, so
  no record can appear there later) and replaces each record's image with the row's current image
  in the same snapshot, so records applied out of commit order cannot leave an older image
  (``SQLSource.read``); a statement trigger for TRUNCATE. Writers send no ``NOTIFY``: a
  transaction that notifies holds PostgreSQL's one notification-queue lock through its commit,
  which would serialise every capturing writer's commit. The worker leading the capture polls
  the capture's head instead (``sql.lead``), and its registry commit wakes the other workers.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

from ..capture.records import Captured, Frontier
from .declare import BoundTable, Column
from .guards import pg_declared_check, pg_value_checks, sqlite_checks
from .quarantine import QuarantineTable

DEFAULT_CAPTURE_SCHEMA = "invalidation_contracts"
CAPTURE_FORMAT = "ic-capture/4"
"""The capture's schema version: part of every installed table's digest."""


def literal(value: str) -> str:
    """``value`` as a SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


class CaptureDialect(ABC):
    """The capture's SQL for one database."""

    by_transaction: bool
    """Whether records carry their transaction (so a change set is exactly one transaction)."""
    quarantine: QuarantineTable

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._quote = engine.dialect.identifier_preparer.quote

    def qualified(self, table: BoundTable) -> str:
        name = self._quote(table.sql.table)
        return f"{self._quote(table.sql.schema)}.{name}" if table.sql.schema else name

    @abstractmethod
    def install_base(self, conn: Connection) -> None:
        """Create the capture's own tables (idempotent; takes no lock on a declared table)."""

    @abstractmethod
    def table_ddl(self, table: BoundTable) -> list[str]:
        """The statements that (re)create ``table``'s capture triggers."""

    @abstractmethod
    def triggers_live(self, conn: Connection, table: BoundTable) -> bool:
        """Whether ``table``'s triggers exist and fire (not disabled)."""

    @property
    @abstractmethod
    def installed_table(self) -> str:
        """The table recording, per declared SQL table, the digest of its installed triggers."""

    def lock(self, conn: Connection, lock_timeout_s: float) -> None:  # noqa: B027 - SQLite: none
        """Serialise installers (and bound their waits) for the rest of ``conn``'s transaction."""

    def digest(self, table: BoundTable) -> str:
        """What identifies ``table``'s installed capture: a change of it means install again."""
        text_ = "\n".join([CAPTURE_FORMAT, *self.table_ddl(table)])
        return hashlib.sha256(text_.encode("utf-8")).hexdigest()

    def has_base(self, conn: Connection) -> bool:
        """Whether the capture's own tables exist (a read of the catalog)."""
        return self.has_table(conn, self.installed_table)

    def current(self, conn: Connection, table: BoundTable) -> bool:
        """Whether ``table``'s capture is installed at this release's schema version, live."""
        row = conn.execute(
            text(f"SELECT digest FROM {self.installed_table} WHERE table_name = :t"),
            {"t": self.qualified(table)},
        ).first()
        return row is not None and row[0] == self.digest(table) and self.triggers_live(conn, table)

    def install_table(self, conn: Connection, table: BoundTable) -> None:
        """(Re)create ``table``'s triggers and record their digest, in ``conn``'s transaction."""
        for statement in self.table_ddl(table):
            conn.exec_driver_sql(statement)
        conn.execute(
            text(
                f"INSERT INTO {self.installed_table} (table_name, digest) VALUES (:t, :d)"
                " ON CONFLICT (table_name) DO UPDATE SET digest = excluded.digest"
            ),
            {"t": self.qualified(table), "d": self.digest(table)},
        )

    @abstractmethod
    def has_table(self, conn: Connection, name: str) -> bool:
        """Whether the capture's own table ``name`` (as quoted here) exists."""

    @abstractmethod
    def key_expr(self, table: BoundTable, alias: str) -> str:
        """SQL rendering the key columns of row ``alias`` as a JSON array (text)."""

    @abstractmethod
    def row_expr(self, table: BoundTable, alias: str) -> str:
        """SQL rendering the row columns of row ``alias`` as a JSON object (text)."""

    @abstractmethod
    def head_sql(self) -> str:
        """SQL returning the capture's head: a number that changes whenever a record commits
        (contiguous ids: the last id handed out; one row, one column; no row: 0)."""

    contiguous: bool = True
    """Whether record ids are contiguous in commit order (a missing id is a gap)."""

    def position_sql(self) -> str:
        """SQL returning where a reader that read in this snapshot resumes (default: the head)."""
        return self.head_sql()

    def position(self, conn: Connection) -> int:
        row = conn.exec_driver_sql(self.position_sql()).first()
        return int(row[0]) if row is not None and row[0] is not None else 0

    @abstractmethod
    def records_sql(self) -> str:
        """SQL returning ``id, tx, table_name, op, key, row`` after ``:after``, in id order."""

    @abstractmethod
    def trim_sql(self) -> str:
        """SQL deleting the records up to ``:upto``."""

    verified_table: str | None = None
    """Per table, the digest last verified equal to the registry, and at which version."""

    def digests(self, conn: Connection, tables: Sequence[BoundTable]) -> dict[str, str]:
        """Each table's content digest, computed in the database (none where it cannot)."""
        return {}

    def verified(self, conn: Connection) -> dict[str, tuple[str, str]]:
        if self.verified_table is None:
            return {}
        rows = conn.exec_driver_sql(f"SELECT table_name, digest, mark FROM {self.verified_table}")
        return {name: (digest, mark) for name, digest, mark in rows}

    def mark_verified(self, conn: Connection, marks: Mapping[str, tuple[str, str]]) -> None:
        if self.verified_table is None or not marks:
            return
        conn.execute(
            text(
                f"INSERT INTO {self.verified_table} (table_name, digest, mark) VALUES (:t, :d, :m)"
                " ON CONFLICT (table_name) DO UPDATE SET digest = excluded.digest,"
                " mark = excluded.mark"
            ),
            [{"t": t, "d": d, "m": m} for t, (d, m) in sorted(marks.items())],
        )

    def begin_read(self, conn: Connection) -> Connection:
        """``conn`` set up for one consistent read snapshot."""
        return conn

    def select_sql(self, table: BoundTable) -> str:
        return (
            f"SELECT {self.key_expr(table, 't')}, {self.row_expr(table, 't')} "
            f"FROM {self.qualified(table)} AS t"
        )

    @abstractmethod
    def record_version(self, conn: Connection, table: str, version: str) -> None:
        """Write a ``version`` record: the next version of ``table``, in ``conn``'s transaction."""

    def transaction_id(self, conn: Connection) -> str | None:
        """The id capture records of ``conn``'s transaction carry (None: records name none)."""
        return None

    def head(self, conn: Connection) -> int:
        row = conn.exec_driver_sql(self.head_sql()).first()
        return int(row[0]) if row is not None and row[0] is not None else 0

    def records(self, conn: Connection, after: int) -> list[Captured]:
        return [
            Captured(int(i), tx, table, op, key, row)
            for i, tx, table, op, key, row in conn.execute(
                text(self.records_sql()), {"after": after}
            )
        ]


class SQLiteCapture(CaptureDialect):
    by_transaction = False
    TABLE = "ic_capture"

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.quarantine = QuarantineTable("ic_quarantine")

    installed_table = "ic_installed"

    def install_base(self, conn: Connection) -> None:
        conn.exec_driver_sql(
            f"CREATE TABLE IF NOT EXISTS {self.TABLE} (id INTEGER PRIMARY KEY AUTOINCREMENT,"
            " table_name TEXT NOT NULL, op TEXT NOT NULL, key TEXT, row TEXT)"
        )
        conn.exec_driver_sql(self.quarantine.create_sql())
        conn.exec_driver_sql(
            f"CREATE TABLE IF NOT EXISTS {self.installed_table} (table_name TEXT PRIMARY KEY,"
            " digest TEXT NOT NULL)"
        )

    def has_table(self, conn: Connection, name: str) -> bool:
        found = conn.exec_driver_sql(f"SELECT 1 FROM sqlite_master WHERE name = {literal(name)}")
        return found.first() is not None

    def _trigger_names(self, table: BoundTable) -> list[str]:
        return [f"ic_capture_{table.name}_{event}" for event in ("insert", "update", "delete")]

    def table_ddl(self, table: BoundTable) -> list[str]:
        out = []
        target = self._quote(table.sql.table)
        schema = f"{self._quote(table.sql.schema)}." if table.sql.schema else ""
        for event, body in self._triggers(table).items():
            name = self._quote(f"ic_capture_{table.name}_{event}")
            out.append(f"DROP TRIGGER IF EXISTS {schema}{name}")
            out.append(
                f"CREATE TRIGGER {schema}{name} AFTER {event.upper()} ON {target} BEGIN {body} END"
            )
        return out

    def triggers_live(self, conn: Connection, table: BoundTable) -> bool:
        schema = f"{self._quote(table.sql.schema)}." if table.sql.schema else ""
        found = {
            row[0]
            for row in conn.exec_driver_sql(
                f"SELECT name FROM {schema}sqlite_master WHERE type = 'trigger'"
            )
        }
        return set(self._trigger_names(table)) <= found

    def _triggers(self, table: BoundTable) -> dict[str, str]:
        insert = f"INSERT INTO {self.TABLE} (table_name, op, key, row) "
        name = literal(table.name)
        upsert = (
            f"{sqlite_checks(table, 'NEW', self._quote)} "
            f"{insert}VALUES ({name}, 'upsert', {self.key_expr(table, 'NEW')}, "
            f"{self.row_expr(table, 'NEW')});"
        )
        delete = f"{insert}VALUES ({name}, 'delete', {self.key_expr(table, 'OLD')}, NULL);"
        moved = (
            f"{insert}SELECT {name}, 'delete', {self.key_expr(table, 'OLD')}, NULL "
            f"WHERE {self.key_expr(table, 'OLD')} IS NOT {self.key_expr(table, 'NEW')};"
        )
        return {"insert": upsert, "update": moved + " " + upsert, "delete": delete}

    def key_expr(self, table: BoundTable, alias: str) -> str:
        return "json_array(" + ", ".join(self._value(c, alias) for c in table.key) + ")"

    def row_expr(self, table: BoundTable, alias: str) -> str:
        members = ", ".join(f"{literal(c.name)}, {self._value(c, alias)}" for c in table.columns)
        return f"json_object({members})"

    def _value(self, column: Column, alias: str) -> str:
        ref = f"{alias}.{self._quote(column.name)}"
        if column.kind == "boolean":
            return (
                f"CASE WHEN {ref} IS NULL THEN NULL WHEN {ref} THEN json('true') "
                "ELSE json('false') END"
            )
        if column.kind == "float":
            # SQLite's JSON renders REAL with 15 digits; 17 round-trip every double exactly.
            exact = f"json(printf('%!.17g', {ref}))"
            return f"CASE WHEN typeof({ref}) = 'real' THEN {exact} ELSE {ref} END"
        if column.kind == "json":
            return f"json({ref})"
        return ref

    def record_version(self, conn: Connection, table: str, version: str) -> None:
        conn.execute(
            text(
                f"INSERT INTO {self.TABLE} (table_name, op, key, row)"
                " VALUES (:t, 'version', NULL, :v)"
            ),
            {"t": table, "v": version},
        )

    def head_sql(self) -> str:
        # Naming the capture table makes the statement fail when it is gone (a 503, not a 0).
        return (
            f"SELECT (SELECT seq FROM sqlite_sequence WHERE name = {literal(self.TABLE)})"
            f" FROM (SELECT count(*) FROM {self.TABLE} WHERE 0)"
        )

    def records_sql(self) -> str:
        return (
            f"SELECT id, NULL, table_name, op, key, row FROM {self.TABLE} "
            "WHERE id > :after ORDER BY id"
        )

    def trim_sql(self) -> str:
        return f"DELETE FROM {self.TABLE} WHERE id <= :upto"


class PostgresCapture(CaptureDialect):
    by_transaction = True
    contiguous = False

    def __init__(self, engine: Engine, schema: str = DEFAULT_CAPTURE_SCHEMA) -> None:
        super().__init__(engine)
        self.schema = schema
        self.lead = f"ic-ingest:{schema}_capture"
        """The session advisory lock the worker consuming this capture holds (one at a time)."""
        s = self._quote(schema)
        self.capture = f"{s}.capture"
        self.sequence = f"{s}.capture_seq"
        self.trimmed = f"{s}.capture_trimmed"
        self.quarantine = QuarantineTable(f"{s}.quarantine")
        self.verified_table = f"{s}.verified"

    def begin_read(self, conn: Connection) -> Connection:
        return conn.execution_options(isolation_level="REPEATABLE READ")

    @property
    def installed_table(self) -> str:
        return f"{self._quote(self.schema)}.installed"

    def digests(self, conn: Connection, tables: Sequence[BoundTable]) -> dict[str, str]:
        out = {}
        for table in tables:
            (digest,) = conn.exec_driver_sql(
                "SELECT count(*)::text || ':' || coalesce(sum(hashtextextended(k || r, 0)), 0)"
                f" FROM ({self.select_sql(table)}) AS s (k, r)"
            ).one()
            out[table.name] = str(digest) + table.others_tag
        return out

    def has_table(self, conn: Connection, name: str) -> bool:
        return bool(
            conn.execute(text("SELECT to_regclass(:t) IS NOT NULL"), {"t": name}).scalar_one()
        )

    def lock(self, conn: Connection, lock_timeout_s: float) -> None:
        conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{max(1, int(lock_timeout_s * 1000))}ms'")
        conn.execute(
            text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))"),
            {"k": f"ic-capture:{self.schema}"},
        )

    def install_base(self, conn: Connection) -> None:
        s = self._quote(self.schema)
        conn.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {s}")
        conn.exec_driver_sql(f"CREATE SEQUENCE IF NOT EXISTS {self.sequence}")
        # How many records trim has deleted, kept by the trimmers only (writers never touch it):
        # with the records' count it makes a head that moves at every commit of a record.
        conn.exec_driver_sql(
            f"CREATE TABLE IF NOT EXISTS {self.trimmed} (id int PRIMARY KEY CHECK (id = 1),"
            " total bigint NOT NULL)"
        )
        conn.exec_driver_sql(
            f"INSERT INTO {self.trimmed} (id, total) VALUES (1, 0) ON CONFLICT DO NOTHING"
        )
        conn.exec_driver_sql(
            f"CREATE TABLE IF NOT EXISTS {self.capture} (id bigint PRIMARY KEY,"
            " tx text NOT NULL, table_name text NOT NULL, op text NOT NULL, key text, row text)"
        )
        self._install_ledgers(conn)

    def _install_ledgers(self, conn: Connection) -> None:
        """The quarantine, and the tables of the triggers installed and the digests verified."""
        conn.exec_driver_sql(self.quarantine.create_sql())
        conn.exec_driver_sql(
            f"CREATE TABLE IF NOT EXISTS {self.installed_table} (table_name text PRIMARY KEY,"
            " digest text NOT NULL)"
        )
        conn.exec_driver_sql(
            f"CREATE TABLE IF NOT EXISTS {self.verified_table} (table_name text PRIMARY KEY,"
            " digest text NOT NULL, mark text NOT NULL)"
        )

    @property
    def trigger_names(self) -> tuple[str, str]:
        """Row and truncate triggers, suffixed outside the default schema (one per capture)."""
        suffix = "" if self.schema == DEFAULT_CAPTURE_SCHEMA else f"_{self.schema}"
        return f"ic_capture{suffix}", f"ic_capture_truncate{suffix}"

    def table_ddl(self, table: BoundTable) -> list[str]:
        function = f"{self._quote(self.schema)}.{self._quote('capture_' + _digest(table))}"
        target = self.qualified(table)
        row, truncate = (self._quote(name) for name in self.trigger_names)
        # ENABLE ALWAYS: the triggers fire under session_replication_role = replica too.
        return [
            self._function(table, function),
            f"CREATE OR REPLACE TRIGGER {row} AFTER INSERT OR UPDATE OR DELETE ON "
            f"{target} FOR EACH ROW EXECUTE FUNCTION {function}()",
            f"CREATE OR REPLACE TRIGGER {truncate} AFTER TRUNCATE ON {target} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {function}()",
            f"ALTER TABLE {target} ENABLE ALWAYS TRIGGER {row}",
            f"ALTER TABLE {target} ENABLE ALWAYS TRIGGER {truncate}",
        ]

    def triggers_live(self, conn: Connection, table: BoundTable) -> bool:
        query = (  # enabled, and calling this capture's function (not another capture's)
            "SELECT count(*) FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid WHERE t.tgrelid"
            " = to_regclass(:t) AND t.tgname = ANY(:n) AND t.tgenabled = 'A'"
            " AND p.pronamespace = to_regnamespace(:s)"
        )
        params = {"t": self.qualified(table), "n": list(self.trigger_names), "s": self.schema}
        return int(conn.execute(text(query), params).one()[0]) == 2

    def _function(self, table: BoundTable, function: str) -> str:
        name = literal(table.name)
        record = f"n := nextval({literal(self.sequence)});"
        insert = (
            f"INSERT INTO {self.capture} (id, tx, table_name, op, key, row)"
            f" VALUES (n, pg_current_xact_id()::text, {name},"
        )
        old_key = self._key_of(table, "o")
        new_key = self._key_of(table, "j")
        return f"""CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $ic$
DECLARE n bigint; o jsonb; j jsonb; old_key text; new_key text;
BEGIN
  IF TG_OP = 'TRUNCATE' THEN
    {record}
    {insert} 'truncate', NULL, NULL);
  ELSE
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
      o := to_jsonb(OLD);
      {pg_declared_check(table, "o", key_only=True)}
      old_key := {old_key};
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
      j := to_jsonb(NEW);
      {pg_declared_check(table, "j", key_only=False)}
      new_key := {new_key};
      {pg_value_checks(table, "j", "new_key")}
    END IF;
    IF old_key IS NOT NULL AND old_key IS DISTINCT FROM new_key THEN
      {record}
      {insert} 'delete', old_key, NULL);
    END IF;
    IF new_key IS NOT NULL THEN
      {record}
      {insert} 'upsert', new_key, {self._row_of(table, "j")});
    END IF;
  END IF;
  RETURN NULL;
END $ic$"""

    def _key_of(self, table: BoundTable, var: str) -> str:
        refs = ", ".join(f"{var}->{literal(c.name)}" for c in table.key)
        return f"jsonb_build_array({refs})::text"

    def _row_of(self, table: BoundTable, var: str) -> str:
        """The row image from the jsonb row ``var``: the same JSON ``row_expr`` renders."""
        return self._object(table, lambda c: f"{var}->{literal(c.name)}")

    def key_expr(self, table: BoundTable, alias: str) -> str:
        refs = ", ".join(f"{alias}.{self._quote(c.name)}" for c in table.key)
        return f"jsonb_build_array({refs})::text"

    def row_expr(self, table: BoundTable, alias: str) -> str:
        return self._object(table, lambda c: f"{alias}.{self._quote(c.name)}")

    def _object(self, table: BoundTable, ref: Callable[[Column], str]) -> str:
        if not table.columns:
            return "'{}'"
        chunks = [table.columns[i : i + 40] for i in range(0, len(table.columns), 40)]
        parts = [
            "jsonb_build_object(" + ", ".join(f"{literal(c.name)}, {ref(c)}" for c in chunk) + ")"
            for chunk in chunks
        ]
        return "(" + " || ".join(parts) + ")::text"

    def record_version(self, conn: Connection, table: str, version: str) -> None:
        n = conn.exec_driver_sql(f"SELECT nextval({literal(self.sequence)})").scalar_one()
        conn.execute(
            text(
                f"INSERT INTO {self.capture} (id, tx, table_name, op, key, row) VALUES "
                "(:n, pg_current_xact_id()::text, :t, 'version', NULL, :v)"
            ),
            {"n": n, "t": table, "v": version},
        )

    def transaction_id(self, conn: Connection) -> str | None:
        return str(conn.exec_driver_sql("SELECT pg_current_xact_id()::text").scalar_one())

    def head_sql(self) -> str:
        # The followers' "anything new?" signal: every record ever committed (those present plus
        # those trimmed), read in one snapshot, so it moves exactly when a record commits. Not
        # the sequence: nextval is not transactional (an id taken before a head read can commit
        # after it without moving the head) and a fresh sequence's last_value stays 1 across
        # its first nextval.
        return (
            f"SELECT (SELECT count(*) FROM {self.capture})"
            f" + (SELECT total FROM {self.trimmed} WHERE id = 1)"
        )

    def position_sql(self) -> str:
        # Every transaction below the snapshot's xmin has ended: their records are all visible
        # now and no later insert can carry such an xid, so this is where a reader resumes.
        return "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint"

    def records_sql(self) -> str:
        return (
            f"SELECT id, tx, table_name, op, key, row FROM {self.capture} "
            "WHERE tx::xid8 >= CAST(CAST(:after AS bigint) AS text)::xid8 ORDER BY tx::xid8, id"
        )

    def snapshot(self, conn: Connection) -> tuple[int, int, list[int]]:
        """This read's snapshot: ``(xmin, xmax, xip)`` (transactions in progress)."""
        xmin, xmax, xip = conn.exec_driver_sql(
            "SELECT pg_snapshot_xmin(s)::text::bigint, pg_snapshot_xmax(s)::text::bigint,"
            " ARRAY(SELECT x::text::bigint FROM pg_snapshot_xip(s) AS x)"
            " FROM pg_current_snapshot() AS s"
        ).one()
        return int(xmin), int(xmax), [int(x) for x in xip]

    _UNCONSUMED = (
        "(tx::xid8 >= CAST(CAST(:cursor AS bigint) AS text)::xid8"
        " OR tx = ANY(CAST(:pending AS text[])))"
    )

    def unconsumed(
        self, conn: Connection, frontier: Frontier, limit: int
    ) -> tuple[list[Captured], bool]:
        """The records of the transactions ``frontier`` has not consumed, in transaction order:
        at most ``limit`` and then the rest of the last transaction read; True when more wait."""
        params = {"cursor": frontier.cursor, "pending": [str(t) for t in frontier.pending]}
        columns = f"SELECT id, tx, table_name, op, key, row FROM {self.capture}"
        rows = list(
            conn.execute(
                text(f"{columns} WHERE {self._UNCONSUMED} ORDER BY tx::xid8, id LIMIT :limit"),
                {**params, "limit": limit},
            )
        )
        more = len(rows) == limit
        if more:
            last_id, last_tx = rows[-1][0], rows[-1][1]
            rows += conn.execute(
                text(f"{columns} WHERE tx = :tx AND id > :id ORDER BY id"),
                {"tx": last_tx, "id": last_id},
            )
        captured = [Captured(int(i), tx, t, op, key, row) for i, tx, t, op, key, row in rows]
        return captured, more

    def waiting(self, conn: Connection, frontier: Frontier) -> int:
        """How many records of transactions ``frontier`` has not consumed are visible now."""
        return int(
            conn.execute(
                text(f"SELECT count(*) FROM {self.capture} WHERE {self._UNCONSUMED}"),
                {"cursor": frontier.cursor, "pending": [str(t) for t in frontier.pending]},
            ).scalar_one()
        )

    def trim_consumed(self, conn: Connection, frontier: Frontier) -> None:
        """Delete every record ``frontier`` has consumed (those above its position included)."""
        conn.execute(
            text(
                f"WITH d AS (DELETE FROM {self.capture}"
                " WHERE tx::xid8 < CAST(CAST(:cursor AS bigint) AS text)::xid8"
                " AND NOT tx = ANY(CAST(:pending AS text[])) RETURNING 1)"
                f" UPDATE {self.trimmed} SET total = total + (SELECT count(*) FROM d) WHERE id = 1"
            ),
            {"cursor": frontier.cursor, "pending": [str(t) for t in frontier.pending]},
        )

    def trim_sql(self) -> str:
        # One statement: the deleted count joins the total in the same commit (concurrent
        # trimmers each count only the rows they deleted).
        return (
            f"WITH d AS (DELETE FROM {self.capture}"
            " WHERE tx::xid8 < CAST(CAST(:upto AS bigint) AS text)::xid8 RETURNING 1)"
            f" UPDATE {self.trimmed} SET total = total + (SELECT count(*) FROM d) WHERE id = 1"
        )


def _digest(table: BoundTable) -> str:
    qualified = f"{table.sql.schema or ''}.{table.sql.table}"
    return hashlib.sha256(qualified.encode("utf-8")).hexdigest()[:16]


def capture_dialect(engine: Engine, schema: str = DEFAULT_CAPTURE_SCHEMA) -> CaptureDialect:
    """The capture SQL for ``engine``'s database (SQLite or PostgreSQL)."""
    if engine.dialect.name == "sqlite":
        return SQLiteCapture(engine)
    if engine.dialect.name == "postgresql":
        return PostgresCapture(engine, schema)
    raise ValueError(f"change capture supports SQLite and PostgreSQL, not {engine.dialect.name}")
