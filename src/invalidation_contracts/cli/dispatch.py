"""The command line's dispatcher: the parser built from every command group's ``register``, and
``main``, which runs the chosen command and turns each failure into one line and an exit status."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .. import __version__
from .._extras import MissingExtra
from . import bench, db, mcp, memory, planners, proxy, schema, service
from .command import CommandError, Handler, Parser
from .say import say

if TYPE_CHECKING:
    from .command import Subparsers

DEBUG_ENV = "INVALIDATION_CONTRACTS_DEBUG"
"""Set to 1 to see the traceback of an unexpected error instead of its one-line summary."""

#: Every command group's ``register``, in the order ``--help`` lists them.
REGISTRARS: tuple[Callable[[Subparsers], None], ...] = (
    bench.register,
    schema.register,
    planners.register,
    service.register,
    mcp.register,
    proxy.register,
    memory.register,
    db.register,
)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="invalidation-contracts",
        description="Invalidation contracts for cross-episode agent memory.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for register in REGISTRARS:
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
        status = handler(args)
        sys.stdout.flush()
        return status
    except CommandError as exc:
        return _fail(str(exc), exc.status)
    except MissingExtra as exc:
        return _fail(str(exc), 1)
    except KeyboardInterrupt:
        print("invalidation-contracts: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (``... | head``): stop quietly, and let no flush at exit complain.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except Exception as exc:
        if os.environ.get(DEBUG_ENV) == "1":
            raise
        return _fail(f"unexpected {type(exc).__name__}: {exc} (set {DEBUG_ENV}=1 for details)", 1)


def _fail(message: str, status: int) -> int:
    first = message.strip().splitlines()[0] if message.strip() else "failed"
    say(f"invalidation-contracts: error: {first}", level=logging.ERROR)
    return status
