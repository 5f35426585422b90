"""``invalidation-contracts db upgrade``: install the change capture once per schema version;
``db remove-table``: the explicit removal of a table no version of the domain serves any more.

Run it from a deploy step (before the new workers start) with the same ``--domain``,
``--database`` and ``--declare`` as ``serve``: it checks every declaration and (re)installs the
capture triggers of the tables whose capture is missing or out of date, under an advisory lock and
a ``lock_timeout``. Workers opened afterwards find the capture current and take no lock.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .command import Subparsers


def register(sub: Subparsers) -> None:
    p = sub.add_parser("db", help="manage the change capture in the provider's database")
    actions = p.add_subparsers(dest="db_action", metavar="ACTION", required=True)
    up = actions.add_parser(
        "upgrade", help="install or upgrade the capture triggers of every declared table"
    )
    up.add_argument("--domain", required=True, help="the domain whose tables to capture")
    up.add_argument("--database", required=True, metavar="URL", help="the provider's database")
    up.add_argument("--declare", type=Path, default=None, metavar="TOML", help="as for serve")
    up.add_argument(
        "--schema",
        default=None,
        metavar="NAME",
        help="the provider's registry schema (PostgreSQL, default invalidation_contracts): its "
        "capture lives there too, apart from other providers' on the same database",
    )
    up.add_argument(
        "--lock-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="how long to wait for one table's lock (default 5)",
    )
    up.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 when an upgrade is due"
    )
    up.set_defaults(handler=_upgrade)
    rm = actions.add_parser(
        "remove-table",
        help="remove tables no version of the domain serves any more from the shared registry",
        description="Workers never remove a stored table they do not declare (a rolling deploy "
        "runs versions side by side). Once every worker that served a table is gone, this "
        "removes it by a change set of the same history: clients evict the fixes that read it.",
    )
    rm.add_argument("tables", nargs="+", metavar="TABLE", help="the registry tables to remove")
    rm.add_argument(
        "--db", required=True, metavar="PATH|URL", help="the registry store, as for serve"
    )
    rm.add_argument(
        "--schema", default=None, metavar="NAME", help="the registry schema (PostgreSQL)"
    )
    rm.set_defaults(handler=_remove_table)


def _upgrade(args: argparse.Namespace) -> int:
    from ..domains import get_domain
    from ..server.capture.steps import SourceError
    from ..server.sql import DeclarationError, SQLSource, read_declarations, sql_domain
    from ..server.sql.capture import DEFAULT_CAPTURE_SCHEMA
    from ..server.sql.install import DEFAULT_LOCK_TIMEOUT_S
    from .command import CommandError, UsageError

    if args.lock_timeout is not None and args.lock_timeout <= 0:
        raise UsageError("--lock-timeout must be positive")
    try:
        declared = read_declarations(args.declare) if args.declare else None
        domain = sql_domain(get_domain(args.domain), declared)
    except KeyError as exc:
        raise UsageError(exc.args[0] if exc.args else f"unknown domain {args.domain!r}") from exc
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    source = SQLSource(
        args.database,
        domain.sql_tables,
        lock_timeout_s=args.lock_timeout or DEFAULT_LOCK_TIMEOUT_S,
        capture_schema=args.schema or DEFAULT_CAPTURE_SCHEMA,
    )
    try:
        done = source.upgrade(mode="check" if args.check else "upgrade")
    except (DeclarationError, SourceError) as exc:
        raise CommandError(str(exc)) from exc
    finally:
        source.close()
    if done:
        print(f"installed the change capture on {', '.join(done)}")
    else:
        print(f"the change capture of {len(domain.sql_tables)} table(s) is up to date")
    return 0


def _remove_table(args: argparse.Namespace) -> int:
    from ..server.store import StorageError, open_store
    from .command import CommandError

    try:
        with open_store(args.db, schema=args.schema) as store:
            seq = store.remove_tables(args.tables)
    except StorageError as exc:
        raise CommandError(str(exc)) from exc
    print(f"removed {', '.join(args.tables)} from the registry (seq {seq})")
    return 0
