"""The fenced blocks of README.md and docs/, as the docs tests read them."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The pages a newcomer reads; recorded results (docs/results) are artifacts, not pages.
PAGES = sorted(
    [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("docs/*/*.md")],
    key=lambda p: str(p),
)
PAGES = [p for p in PAGES if "results" not in p.relative_to(ROOT).parts]

_FENCE = re.compile(r"^```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^```", re.S | re.M)


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language tag, its text, and the prose just before it."""

    page: Path
    line: int
    lang: str
    body: str
    before: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks() -> list[Block]:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in _FENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            before = "\n".join(text[: m.start()].splitlines()[-3:])
            found.append(Block(page, line, m["lang"], m["body"], before))
    return found


def shell_blocks() -> list[Block]:
    """The blocks that hold shell commands: tagged as a shell, or untagged and starting with one
    (the other untagged blocks are layouts, transcripts or header lines)."""
    found = blocks()
    tagged = [b for b in found if b.lang in ("bash", "sh", "shell", "console")]
    commands_ = ("invalidation-contracts", "pytest")
    untagged = [b for b in found if not b.lang and b.body.lstrip().startswith(commands_)]
    return tagged + untagged


@dataclass(frozen=True)
class Command:
    """One shell command of a block: its words (environment assignments dropped) and its line."""

    words: tuple[str, ...]
    line: str
    synopsis: bool
    """A usage synopsis (optional parts in brackets, alternatives), not a runnable command."""
    env: tuple[str, ...] = ()
    """The ``NAME=VALUE`` assignments before the command, as a shell passes them to it."""


_OPERATORS = {"&&", "||", ";", "|", "&"}
_ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")


def commands(body: str) -> list[Command]:
    """The shell commands of a block: continuations joined, comments dropped, ``&&`` split."""
    found: list[Command] = []
    for line in _logical_lines(body):
        synopsis = bool(re.search(r"\[-|\(--|\|\s*--", line))
        if synopsis:  # brackets and bars are notation here, not shell operators
            found.append(Command(tuple(line.split()), line, True))
            continue
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        try:
            tokens = list(lexer)
        except ValueError:
            tokens = line.split()
        words: list[str] = []
        for token in [*tokens, ";"]:
            if token in _OPERATORS or set(token) <= set("&|;"):
                env: list[str] = []
                while words and _ASSIGNMENT.match(words[0]):
                    env.append(words.pop(0))
                if words:
                    found.append(Command(tuple(words), line, synopsis, tuple(env)))
                words = []
            else:
                words.append(token)
    return found


def _logical_lines(body: str) -> list[str]:
    lines: list[str] = []
    pending = ""
    for raw in body.splitlines():
        if lines and not pending and raw.strip().startswith(("[", "(")):
            lines[-1] += " " + raw.strip()  # a synopsis wrapped onto the next line
            continue
        line = (pending + " " + raw.strip()) if pending else raw.rstrip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1].rstrip()
            continue
        if line.strip() and not line.strip().startswith("#"):
            lines.append(line.strip())
    return lines


@dataclass(frozen=True)
class TableCommand:
    """A command written in the first column of a table headed ``command`` (a summary row)."""

    page: Path
    line: int
    text: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def table_commands() -> list[TableCommand]:
    """Each code span of the first cell of every ``| command | …`` table of the pages."""
    found = []
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        in_table = False
        for number, line in enumerate(lines, 1):
            if re.match(r"^\|\s*command\s*\|", line):
                in_table = True
                continue
            if not line.startswith("|"):
                in_table = False
            if in_table and not set(line) <= set("|-: "):
                first = line.strip("|").split("|")[0]
                found += [
                    TableCommand(page, number, span) for span in re.findall(r"`([^`]+)`", first)
                ]
    return found
