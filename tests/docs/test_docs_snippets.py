"""Every fenced block of README.md and docs/ is checked against the code it describes.

- ``invalidation-contracts`` commands parse with the shipped CLI's own parser (a usage synopsis:
  every option it names exists); ``pip install`` names existing extras; ``pytest``, ``python`` and
  ``uvicorn`` name files that exist; any other command is one of a short list of outside tools.
- Python blocks run as they are, in a fresh interpreter in an empty folder, unless every line of
  the block is in one file under ``docs/examples/`` (an excerpt of an example that runs as a
  whole: each example names its extra and is run by a test, both checked here).
- JSON and TOML blocks parse.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from invalidation_contracts.cli import build_parser

from .snippets import ROOT, Block, Command, blocks, commands, shell_blocks

BLOCKS = blocks()
SHELL = shell_blocks()
PYTHON = [b for b in BLOCKS if b.lang == "python"]
#: Outside tools the docs may use beside the project's own commands.
OUTSIDE_TOOLS = {
    "sqlite3",
    "curl",
    "psql",
    "git",
    "cd",
    "export",
    "python3",
    "source",
    ".",
    "docker",
}
EXTRAS = set(
    tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
)


def _ids(items: list[Block]) -> list[str]:
    return [b.where for b in items]


def _where(block: Block) -> str:
    return block.where


def _subparser(parser: argparse.ArgumentParser, words: list[str]) -> argparse.ArgumentParser:
    """The parser of the deepest subcommand ``words`` names (``memory list`` and the like)."""
    while words:
        actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not actions or words[0] not in actions[0].choices:
            break
        parser = actions[0].choices[words.pop(0)]
    return parser


def _check_cli(command: Command) -> None:
    args = list(command.words[1:])
    if command.synopsis:
        parser = _subparser(build_parser(), list(args))
        known = {o for a in parser._actions for o in a.option_strings}
        named = set(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", command.line))
        assert named <= known, f"options that do not exist: {sorted(named - known)}"
        return
    try:
        build_parser().parse_args(args)
    except SystemExit as exc:
        pytest.fail(f"`{command.line}` does not parse (exit {exc.code})")


def _check_pip(command: Command) -> None:
    for word in command.words[2:]:
        if (match := re.search(r"\[([\w,-]+)\]$", word)) is not None:
            unknown = set(match[1].split(",")) - EXTRAS
            assert not unknown, f"no such extra: {sorted(unknown)}"


def _check_files(command: Command) -> None:
    tool, *args = command.words
    if tool == "pytest":
        paths = [a for a in args if not a.startswith("-")]
    elif tool == "python" and args[:1] == ["-m"]:
        paths = [] if args[1] == "benchmarks" else [args[1].replace(".", "/") + ".py"]
    elif tool == "python":
        paths = [args[0]]
    else:  # uvicorn --app-dir DIR module:attr
        folder = args[args.index("--app-dir") + 1] if "--app-dir" in args else "."
        target = next(a for a in args if ":" in a and not a.startswith("-"))
        module, attribute = target.split(":")
        source = ROOT / folder / f"{module}.py"
        assert source.exists(), f"{source} does not exist"
        assert re.search(
            rf"^(def|async def|class) {attribute}\b|^{attribute} =", source.read_text(), re.M
        )
        return
    for path in paths:
        assert (ROOT / path.split("::")[0]).exists(), f"{path} does not exist"


@pytest.mark.parametrize("block", SHELL, ids=_ids(SHELL))
def test_every_command_in_the_docs_names_what_exists(block: Block) -> None:
    found = commands(block.body)
    assert found, f"{block.where}: a shell block with no command"
    for command in found:
        tool = command.words[0]
        if tool == "invalidation-contracts":
            _check_cli(command)
        elif tool == "pip":
            _check_pip(command)
        elif tool in ("pytest", "python", "uvicorn"):
            _check_files(command)
        else:
            assert tool in OUTSIDE_TOOLS, f"{block.where}: unknown command {tool!r}"


def _code_lines(text: str) -> list[str]:
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]


EXAMPLES = sorted((ROOT / "docs" / "examples").rglob("*.py"))
EXAMPLE_LINES = {path: set(_code_lines(path.read_text())) for path in EXAMPLES}


@pytest.mark.parametrize("block", PYTHON, ids=_ids(PYTHON))
def test_every_python_block_runs_or_is_an_excerpt_of_a_runnable_example(block, tmp_path):
    lines = _code_lines(block.body)
    if any(set(lines) <= source for source in EXAMPLE_LINES.values()):
        return  # an excerpt of an example that runs as a whole (each example has its own test)
    done = subprocess.run(
        [sys.executable, "-c", block.body],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 0, (
        f"{block.where}: neither an excerpt of an example nor runnable:\n{done.stderr[-2000:]}"
    )


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang == "json"], ids=_where)
def test_every_json_block_parses(block):
    json.loads(block.body)


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang == "toml"], ids=_where)
def test_every_toml_block_parses(block):
    tomllib.loads(block.body)


TESTS = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("test_*.py"))


RUNNABLE = [path for path in EXAMPLES if not path.name.startswith("_")]  # _x.py: shared helpers


@pytest.mark.parametrize("example", RUNNABLE, ids=lambda p: p.name)
def test_every_example_names_its_extra_in_its_first_lines(example: Path) -> None:
    head = "\n".join(example.read_text().splitlines()[:5])
    assert "Needs" in head and ("extra" in head or "pip install ." in head), head


@pytest.mark.parametrize("example", RUNNABLE, ids=lambda p: p.name)
def test_every_example_is_run_by_a_test(example: Path) -> None:
    assert example.stem in TESTS, f"no test names {example.name}"
