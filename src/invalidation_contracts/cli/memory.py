"""``invalidation-contracts memory``: inspect and edit an agent's fix memory (SQLite file)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from .command import CommandError
from .options import _console

if TYPE_CHECKING:
    from .command import Subparsers


def register(sub: Subparsers) -> None:
    p = sub.add_parser("memory", help="inspect and edit an agent's fix memory (SQLite file)")
    actions = p.add_subparsers(dest="memory_action", metavar="ACTION", required=True)

    stats = actions.add_parser("stats", help="counters per origin: hits, misses, evictions, ...")
    stats.add_argument("--db", type=Path, required=True, help="the fix-memory SQLite file")
    stats.add_argument("--origin", default=None, help="only this origin")
    stats.add_argument("--json", action="store_true", help="print JSON instead of a table")
    stats.set_defaults(handler=_memory_stats)

    listing = actions.add_parser("list", help="list live entries (or tombstones)")
    listing.add_argument("--db", type=Path, required=True, help="the fix-memory SQLite file")
    listing.add_argument("--origin", default=None, help="only this origin")
    listing.add_argument("--tombstones", action="store_true", help="list evicted entries instead")
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    listing.set_defaults(handler=_memory_list)

    evict = actions.add_parser("evict", help="evict entries (reason: operator)")
    evict.add_argument("--db", type=Path, required=True, help="the fix-memory SQLite file")
    evict.add_argument("--origin", required=True, help="the origin whose entries to evict")
    which = evict.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--id", dest="ids", action="append", metavar="ID", help="an entry id (repeatable)"
    )
    which.add_argument("--table", help="every entry depending on this table")
    which.add_argument("--all", dest="everything", action="store_true", help="every entry of it")
    evict.set_defaults(handler=_memory_evict)


def _memory_stats(args: argparse.Namespace) -> int:
    from . import operator

    try:
        rows = operator.origin_stats(args.db, args.origin)
    except operator.OperatorError as exc:
        raise CommandError(str(exc)) from exc
    if args.json:
        print(json.dumps(rows, indent=2, sort_keys=True))
    else:
        _console().print(operator.stats_table(rows))
    return 0


def _memory_list(args: argparse.Namespace) -> int:
    from . import operator

    try:
        rows = operator.entry_rows(args.db, args.origin, tombstones=args.tombstones)
    except operator.OperatorError as exc:
        raise CommandError(str(exc)) from exc
    if args.json:
        print(json.dumps(rows, indent=2, sort_keys=True))
    else:
        _console().print(operator.entries_table(rows, tombstones=args.tombstones))
    return 0


def _memory_evict(args: argparse.Namespace) -> int:
    from . import operator

    try:
        evicted = operator.evict(
            args.db, args.origin, entry_ids=args.ids, table=args.table, everything=args.everything
        )
    except operator.OperatorError as exc:
        raise CommandError(str(exc)) from exc
    noun = "entry" if len(evicted) == 1 else "entries"
    listed = f": {', '.join(evicted)}" if evicted else ""
    print(f"evicted {len(evicted)} {noun} of {args.origin}{listed}")
    return 0
