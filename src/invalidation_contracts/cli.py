"""The ``invalidation-contracts`` command line: parses arguments and calls the packages.

Each command group registers its subcommands in one ``_add_<group>`` function below. A command
returns an exit status; a ``CommandError`` becomes a one-line message on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from . import __version__


class CommandError(Exception):
    """A user-facing failure: printed as one line, exit status 2."""


Handler = Callable[[argparse.Namespace], int]


def _add_schema(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("schema", help="write the JSON Schema of every wire object")
    p.add_argument("--out", type=Path, default=None, help="directory to write <Name>.schema.json into")
    p.set_defaults(handler=_schema)


def _schema(args: argparse.Namespace) -> int:
    from .protocol.schema import json_schemas, write_schemas

    if args.out is None:
        print(json.dumps(json_schemas(), indent=2, sort_keys=True))
        return 0
    try:
        paths = write_schemas(args.out)
    except OSError as exc:
        raise CommandError(f"cannot write schemas to {args.out}: {exc.strerror or exc}") from exc
    print(f"wrote {len(paths)} schemas to {args.out}")
    return 0


#: One registrar per command group, in help order.
_REGISTRARS: list[Callable[[argparse._SubParsersAction], None]] = [_add_schema]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="invalidation-contracts",
        description="Invalidation contracts for cross-episode agent memory.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for register in _REGISTRARS:
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return handler(args)
    except CommandError as exc:
        print(f"invalidation-contracts: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("invalidation-contracts: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
