"""Every install line a page or an example gives runs from a fresh checkout.

The package is on no index: ``pip install 'invalidation-contracts[x]'`` fails in a fresh venv
(``No matching distribution found``). A line installs the checkout (``.``, ``'.[x]'``, ``-e``), a
built wheel (``dist/….whl``) or a direct reference (``'invalidation-contracts[x] @ git+…'``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .snippets import PAGES, ROOT

EXAMPLES = sorted((ROOT / "docs" / "examples").rglob("*.py"))
#: ``pip install`` and its arguments, up to the end of a code span, a line or a shell operator.
INSTALL = re.compile(r"pip install\s+([^`\n#;&|]*)")
#: The distribution named as an index requirement (optionally with extras).
BY_NAME = re.compile(r"^['\"]?invalidation[-_]contracts(\[[\w,-]+\])?['\"]?$")


def index_form(arguments: str) -> bool:
    """Whether ``arguments`` ask an index for the project (no path, no direct reference)."""
    if "@" in arguments:  # a direct reference: NAME[extras] @ git+https://… or a file URL
        return False
    return any(BY_NAME.match(word) for word in arguments.split())


def install_lines(path: Path) -> list[tuple[str, str]]:
    """``(file:line, arguments)`` of every ``pip install`` in ``path``."""
    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        for match in INSTALL.finditer(line):
            found.append((f"{path.relative_to(ROOT)}:{number}", match[1].strip()))
    return found


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ("'invalidation-contracts[server,sql]'", True),
        ("invalidation-contracts", True),
        ("'.[server,sql]'", False),
        (".", False),
        ("-e '.[test]'", False),
        ("'dist/invalidation_contracts-0.1.0-py3-none-any.whl[server]'", False),
        ("'invalidation-contracts[server] @ git+https://example.org/x.git@v0.1.0'", False),
        ("httpx2", False),
    ],
)
def test_the_reader_tells_an_index_install_from_a_checkout_one(arguments, expected):
    assert index_form(arguments) is expected


def test_the_pages_give_install_lines_to_check():
    # A reader that finds none passes vacuously: the guides give dozens.
    assert sum(len(install_lines(page)) for page in PAGES) > 20


@pytest.mark.parametrize("path", [*PAGES, *EXAMPLES], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_install_line_asks_an_index_for_the_project(path):
    assert [where for where, arguments in install_lines(path) if index_form(arguments)] == []
