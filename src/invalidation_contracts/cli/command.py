"""What a command group shares with the dispatcher: the parser class, the subparsers a group's
``register`` adds to, a handler's type, and a command's two failures (each one line on stderr)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    Subparsers = argparse._SubParsersAction["Parser"]


class CommandError(Exception):
    """A command that could not be done: printed as one line, exit status 1."""

    status = 1


class UsageError(CommandError):
    """A command line that cannot run as given (a bad value, a missing setting): exit status 2."""

    status = 2


Handler = Callable[[argparse.Namespace], int]


class Parser(argparse.ArgumentParser):
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
