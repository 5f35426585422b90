"""The checks a capture trigger runs before recording a row: what the contract cannot carry is
refused in the writer's own transaction, with a message naming the table, the column and the row.

The contract carries JSON (I-JSON, RFC 7493): integers within ±(2^53−1), finite numbers, text,
booleans, null; a row key that is not NULL. A value outside that would commit and then be
unservable, so the trigger refuses it instead (SPEC §8.3). Keys are exempt from the integer range:
they travel as strings. PostgreSQL reads the row once with ``to_jsonb`` — so a declared column that
was renamed or dropped is a clear error naming the declaration, not a PL/pgSQL internal one; SQLite
(whose ``RAISE`` takes only a literal message before 3.47) names the table and the column.
"""

from __future__ import annotations

from .declare import BoundTable

MAX_SAFE = 9007199254740991
"""2^53 − 1, the largest integer every JSON reader represents exactly."""
MAX_FLOAT = "1.7976931348623157e308"
MIN_NORMAL = "2.2250738585072014e-308"
"""The smallest normal double: a smaller magnitude (but zero) is refused in jsonb, not rounded."""
PREFIX = "invalidation-contracts"


def _lit(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


#: A jsonb number the contract cannot carry (I-JSON): one a double does not hold as written. jsonb
#: keeps no difference between 6.02e23 and the integer 602000000000000000000000, so a number is
#: carried when its text is a double's shortest text (every finite double written by a JSON
#: writer: 1e300, 0.1, 2^53 as 9007199254740992) and refused otherwise: an integer beyond
#: ±(2^53−1) a double does not hold (9007199254740993), a decimal with more digits than a double
#: holds (0.10000000000000000555), a magnitude beyond a double's range (1e400, 1e-400). Numbers
#: beyond ±(2^53−1) are served as doubles (``capture.records.row_value``).
_JSON_NUMBERS = 'strict $.** ? (@.type() == "number")'
_JSON_LOSSY = (
    f"EXISTS (SELECT 1 FROM jsonb_path_query({{ref}}, {_lit(_JSON_NUMBERS)}) AS n (v)"
    " WHERE CASE WHEN v::text::numeric = 0 THEN false"
    f" WHEN abs(v::text::numeric) NOT BETWEEN {MIN_NORMAL} AND {MAX_FLOAT} THEN true"
    " ELSE v::text::numeric <> v::text::float8::text::numeric END)"
)
#: Per column kind, the PostgreSQL test finding a value the contract cannot carry in ``{ref}`` (a
#: jsonb value), and why it cannot; the other kinds carry every value they hold.
_PG_UNCARRIABLE = {
    "integer": (
        f"jsonb_typeof({{ref}}) = 'number' AND abs(({{ref}})::numeric) > {MAX_SAFE}",
        "outside the interoperable integer range ±(2^53−1)",
    ),
    "float": (
        "jsonb_typeof({ref}) = 'string'",
        "which is not a finite number (JSON has no NaN or Infinity)",
    ),
    "json": (
        _JSON_LOSSY,
        "a number a double does not hold as written: an integer beyond ±(2^53−1), a decimal "
        "with more digits than a double holds, or one beyond a double's range (I-JSON)",
    ),
}
#: The same for SQLite, on the column ``{ref}`` as stored.
_SQLITE_UNCARRIABLE = {
    "integer": (
        f"typeof({{ref}}) = 'integer' AND ({{ref}} > {MAX_SAFE} OR {{ref}} < -{MAX_SAFE})",
        "holds an integer outside the interoperable range ±(2^53−1)",
    ),
    "float": (
        f"typeof({{ref}}) = 'real' AND ({{ref}} > {MAX_FLOAT} OR {{ref}} < -{MAX_FLOAT})",
        "holds Infinity, which is not a JSON number",
    ),
    "json": (
        "json_valid({ref}) AND EXISTS (SELECT 1 FROM json_tree({ref}) WHERE type IN "
        f"('integer', 'real') AND (atom > {MAX_SAFE} OR atom < -{MAX_SAFE}))",
        "holds a number outside the interoperable range ±(2^53−1)",
    ),
}


def pg_declared_check(table: BoundTable, var: str, *, key_only: bool) -> str:
    """PL/pgSQL: fail with a clear message when the row ``var`` (jsonb) lacks a declared column."""
    names = [c.name for c in table.key] + ([] if key_only else [c.name for c in table.columns])
    array = "ARRAY[" + ", ".join(_lit(n) for n in names) + "]::text[]"
    head = f"{PREFIX}: {table.where} declares column(s) "
    tail = (
        ", which the table no longer has (renamed or dropped); change the declaration, then run "
        "`invalidation-contracts db upgrade`, or restore the column"
    )
    missing = f"(SELECT string_agg(c, ', ') FROM unnest({array}) c WHERE NOT {var} ? c)"
    return (
        f"IF NOT ({var} ?& {array}) THEN RAISE EXCEPTION USING ERRCODE = 'undefined_column', "
        f"MESSAGE = {_lit(head)} || {missing} || {_lit(tail)}; END IF;"
    )


def pg_value_checks(table: BoundTable, var: str, key: str) -> str:
    """PL/pgSQL refusing what the contract cannot carry in row ``var`` (jsonb), keyed ``key``."""
    checks = []
    for column in table.key:
        ref = f"{var}->{_lit(column.name)}"
        checks.append(
            f"IF jsonb_typeof({ref}) = 'null' THEN RAISE EXCEPTION USING "
            "ERRCODE = 'null_value_not_allowed', MESSAGE = "
            + _lit(f"{PREFIX}: {table.where}: key column {column.name!r} is NULL in row ")
            + f" || {var}::text || "
            + _lit("; a row key names the row, so it must not be NULL")
            + "; END IF;"
        )
    for column in table.columns:
        if column.kind not in _PG_UNCARRIABLE:
            continue
        ref = f"{var}->{_lit(column.name)}"
        where = f"{PREFIX}: {table.where}: column {column.name!r} of row "
        test, why = _PG_UNCARRIABLE[column.kind]
        checks.append(
            f"IF {test.format(ref=ref)} THEN RAISE EXCEPTION USING "
            "ERRCODE = 'numeric_value_out_of_range', "
            f"MESSAGE = {_lit(where)} || {key} || ' holds ' || ({ref})::text || {_lit(', ' + why)};"
            " END IF;"
        )
    return "\n    ".join(checks)


def sqlite_checks(table: BoundTable, alias: str, quote: object) -> str:
    """SQLite trigger statements refusing what the contract cannot carry in row ``alias``."""
    q = quote if callable(quote) else str
    out = []
    for column in table.key:
        ref = f"{alias}.{q(column.name)}"
        message = f"{PREFIX}: {table.where}: key column {column.name!r} is NULL; a key must not be"
        out.append(f"SELECT RAISE(ABORT, {_lit(message)}) WHERE {ref} IS NULL;")
    for column in (*table.key, *table.columns):
        ref = f"{alias}.{q(column.name)}"
        message = f"{PREFIX}: {table.where}: column {column.name!r} holds a BLOB (no JSON form)"
        out.append(f"SELECT RAISE(ABORT, {_lit(message)}) WHERE typeof({ref}) = 'blob';")
    for column in table.columns:
        if column.kind not in _SQLITE_UNCARRIABLE:
            continue
        ref = f"{alias}.{q(column.name)}"
        test, why = _SQLITE_UNCARRIABLE[column.kind]
        message = f"{PREFIX}: {table.where}: column {column.name!r} {why}"
        out.append(f"SELECT RAISE(ABORT, {_lit(message)}) WHERE {test.format(ref=ref)};")
    return " ".join(out)
