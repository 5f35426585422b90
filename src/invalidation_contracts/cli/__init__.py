"""The ``invalidation-contracts`` command line: parses arguments and calls the packages.

Each command group is one module of this package (``bench``, ``service``, ``mcp``, ...) whose
``register(subparsers)`` adds its subcommands. A command returns an exit status. Every failure is
one line on stderr, never a traceback: exit status 2 for a command line that cannot run as given
(``UsageError``, argparse), 1 for a command that could not be done (``CommandError``, a missing
extra, an OS error). Secrets never travel in argv: the admin token comes from
``$INVALIDATION_CONTRACTS_ADMIN_TOKEN`` or ``--admin-token-file PATH``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .. import __version__
from .._extras import MissingExtra

if TYPE_CHECKING:
    Subparsers = argparse._SubParsersAction["_Parser"]

DEBUG_ENV = "INVALIDATION_CONTRACTS_DEBUG"
"""Set to 1 to see the traceback of an unexpected error instead of its one-line summary."""


class CommandError(Exception):
    """A command that could not be done: printed as one line, exit status 1."""

    status = 1


class UsageError(CommandError):
    """A command line that cannot run as given (a bad value, a missing setting): exit status 2."""

    status = 2


Handler = Callable[[argparse.Namespace], int]

DOMAIN_HELP = (
    "a shipped domain (acme_billing, acme_rules, recipes), an installed entry point of the group "
    "invalidation_contracts.domains, or an import path package.module:attribute"
)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line with exit status 2, like every error."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # No abbreviations: ``--admin-token SECRET`` must not pass for ``--admin-token-file``.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """A command with ``--config`` takes the file's options as its defaults first."""
        if args is not None and "--config" in self._option_string_actions:
            from .config_file import ConfigFileError, apply_config

            try:
                apply_config(self, args)
            except ConfigFileError as exc:
                self.error(str(exc))
        return super().parse_known_args(args, namespace)


def _registrars() -> list[Callable[[Subparsers], None]]:
    """Every command group's ``register``, in the order ``--help`` lists them."""
    from . import bench, db, mcp, memory, planners, proxy, schema, service

    return [
        bench.register,
        schema.register,
        planners.register,
        service.register,
        mcp.register,
        proxy.register,
        memory.register,
        db.register,
    ]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="invalidation-contracts",
        description="Invalidation contracts for cross-episode agent memory.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for register in _registrars():
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
    from .say import say

    first = message.strip().splitlines()[0] if message.strip() else "failed"
    say(f"invalidation-contracts: error: {first}", level=logging.ERROR)
    return status
