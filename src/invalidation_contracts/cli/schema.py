"""``invalidation-contracts schema``: the JSON Schema of every wire object."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from .command import CommandError

if TYPE_CHECKING:
    from .command import Subparsers


def register(sub: Subparsers) -> None:
    p = sub.add_parser("schema", help="write the JSON Schema of every wire object")
    p.add_argument(
        "--out", type=Path, default=None, help="directory to write <Name>.schema.json into"
    )
    p.set_defaults(handler=_schema)


def _schema(args: argparse.Namespace) -> int:
    from ..protocol.schema import json_schemas, write_schemas

    if args.out is None:
        print(json.dumps(json_schemas(), indent=2, sort_keys=True))
        return 0
    try:
        paths = write_schemas(args.out)
    except OSError as exc:
        raise CommandError(f"cannot write schemas to {args.out}: {exc.strerror or exc}") from exc
    print(f"wrote {len(paths)} schemas to {args.out}")
    return 0
