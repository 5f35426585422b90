"""``--config FILE.toml``: every long option of a command read from a TOML file; flags override.

A key is a long option without its dashes (``max-lag = 3``, ``metrics = true``, ``allowed-host =
["a.example"]``); its value is what the flag would take, converted and checked by the option's own
type and choices, so a file can say exactly what a command line can and no more. An unknown key,
a value of the wrong kind or two options of one exclusive group are usage errors (exit 2). The
file becomes the parser's defaults before it parses, so an option also given as a flag keeps the
flag's value (and a flag of an exclusive group drops the file's other members).
"""

from __future__ import annotations

import argparse
import tomllib
from collections.abc import Sequence
from pathlib import Path

CONFIG_OPTION = "--config"


class ConfigFileError(ValueError):
    """A config file that cannot be read or says what no flag could: a usage error."""


def add_config_option(p: argparse.ArgumentParser) -> None:
    """``--config TOML``: what ``apply_config`` reads before the rest of the command line."""
    p.add_argument(
        CONFIG_OPTION,
        type=Path,
        default=None,
        metavar="TOML",
        help="read options from a TOML file, a key per long option without its dashes "
        '(max-lag = 3, metrics = true, allowed-host = ["a.example"]); flags override it',
    )


def apply_config(parser: argparse.ArgumentParser, arg_strings: Sequence[str]) -> None:
    """Make the file ``--config`` names in ``arg_strings`` (if any) ``parser``'s defaults;
    ``ConfigFileError`` for a file that cannot be applied."""
    path = _config_path(arg_strings)
    if path is None:
        return
    table = _read(path)
    options = _long_options(parser)
    given = _given(parser, arg_strings)
    from_file: dict[str, tuple[str, argparse.Action]] = {}
    defaults: dict[str, object] = {}
    for key, value in table.items():
        action = options.get(key)
        if action is None:
            raise ConfigFileError(
                f"{path}: unknown key {key!r}: there is no --{key} "
                "(a key is a long option without its dashes)"
            )
        from_file[action.dest] = (key, action)
        if action.dest in given:
            continue  # the flag wins
        defaults[action.dest] = _convert(path, key, action, value)
    for group in parser._mutually_exclusive_groups:
        members = [a for a in group._group_actions if a.dest in from_file]
        if len(members) > 1:
            keys = " and ".join(repr(from_file[a.dest][0]) for a in members)
            raise ConfigFileError(f"{path}: {keys} cannot both be set")
        if members and any(a.dest in given for a in group._group_actions):
            defaults.pop(members[0].dest, None)  # another member given as a flag wins
    for dest in defaults:
        from_file[dest][1].required = False
    parser.set_defaults(**defaults)


def _config_path(arg_strings: Sequence[str]) -> Path | None:
    """The ``--config`` value among ``arg_strings``, the last if repeated, as argparse keeps
    (options end at ``--``)."""
    found: Path | None = None
    for i, text in enumerate(arg_strings):
        if text == "--":
            break
        if text == CONFIG_OPTION:
            if i + 1 >= len(arg_strings):
                raise ConfigFileError(f"argument {CONFIG_OPTION}: expected one argument")
            found = Path(arg_strings[i + 1])
        elif text.startswith(CONFIG_OPTION + "="):
            found = Path(text.partition("=")[2])
    return found


def _read(path: Path) -> dict[str, object]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigFileError(
            f"cannot read the config file {path}: {exc.strerror or exc}"
        ) from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigFileError(f"{path} is not a TOML file: {exc}") from None


def _long_options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Each long option a file may set, by its key (help, version and --config itself aside)."""
    found: dict[str, argparse.Action] = {}
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._VersionAction):
            continue
        for option in action.option_strings:
            if option.startswith("--") and option != CONFIG_OPTION:
                found[option[2:]] = action
    return found


def _given(parser: argparse.ArgumentParser, arg_strings: Sequence[str]) -> set[str]:
    """The destinations of the options ``arg_strings`` gives as flags."""
    given: set[str] = set()
    for text in arg_strings:
        if text == "--":
            break
        action = parser._option_string_actions.get(text.partition("=")[0])
        if action is not None:
            given.add(action.dest)
    return given


def _convert(path: Path, key: str, action: argparse.Action, value: object) -> object:
    """``value`` as the flag would have made it (its type and choices), else ConfigFileError."""
    where = f"{path}: {key}"
    if isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
        if not isinstance(value, bool):
            raise ConfigFileError(f"{where}: expected true or false, not {value!r}")
        return value if isinstance(action, argparse._StoreTrueAction) else not value
    if isinstance(action, argparse._AppendAction):
        if not isinstance(value, list):
            raise ConfigFileError(f"{where}: expected a list (the flag is repeatable)")
        return [_one(where, action, item) for item in value]
    if action.nargs not in (None, "?"):
        raise ConfigFileError(f"{where}: this option cannot be set from a file")
    return _one(where, action, value)


def _one(where: str, action: argparse.Action, value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ConfigFileError(f"{where}: expected a string or a number, not {value!r}")
    text = str(value)
    try:
        converted = action.type(text) if callable(action.type) else text
    except (argparse.ArgumentTypeError, TypeError, ValueError) as exc:
        raise ConfigFileError(f"{where}: {exc}") from None
    if action.choices is not None and converted not in action.choices:
        choices = ", ".join(repr(c) for c in action.choices)
        raise ConfigFileError(f"{where}: {text!r} is not one of {choices}")
    return converted
