"""The ``invalidation-contracts`` command line: parses arguments and calls the packages.

Each command group is one module of this package (``bench``, ``service``, ``mcp``, ...) whose
``register(subparsers)`` adds its subcommands; ``dispatch`` builds the parser and runs a command,
``command`` is what a group shares with it, ``options`` the options several groups take. A command
returns an exit status. Every failure is one line on stderr, never a traceback: exit status 2 for a
command line that cannot run as given (``UsageError``, argparse), 1 for a command that could not be
done (``CommandError``, a missing extra, an OS error). Secrets never travel in argv: the admin
token comes from ``$INVALIDATION_CONTRACTS_ADMIN_TOKEN`` or ``--admin-token-file PATH``.
"""

from .command import CommandError, Handler, UsageError
from .dispatch import DEBUG_ENV, build_parser, main
from .options import DOMAIN_HELP

__all__ = [
    "DEBUG_ENV",
    "DOMAIN_HELP",
    "CommandError",
    "Handler",
    "UsageError",
    "build_parser",
    "main",
]
