"""Each example runs with exactly the extras it declares (``docs/examples/extras.toml``).

The default run checks the list against the examples (every one listed, each naming its extras in
its first lines). Under ``study`` each example runs in a virtual environment made from exactly its
extras: ``pip install '<checkout>[extras]'`` into a fresh venv, cached under the project's cache
directory by the extras and ``pyproject.toml``'s hash (pip's own cache serves the wheels), with
the checkout's ``src`` first on the path so the cached venv runs today's code. An example that
imports what its extras do not bring (Starlette's test client needing ``httpx2``) fails here.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

from invalidation_contracts.planners.local.assembly import cache_dir

from .snippets import ROOT

EXAMPLES = ROOT / "docs" / "examples"
DECLARED: dict[str, list[str]] = tomllib.loads((EXAMPLES / "extras.toml").read_text())
RUNNABLE = sorted(
    p.relative_to(EXAMPLES).as_posix() for p in EXAMPLES.rglob("*.py") if not p.name.startswith("_")
)
#: Seconds one venv may take to install (the framework extras pull ~50 distributions).
INSTALL_TIMEOUT_S = 900
RUN_TIMEOUT_S = 300


def install_line(extras: list[str]) -> str:
    return f"pip install '.[{','.join(extras)}]'" if extras else "pip install ."


def test_every_example_is_listed_with_its_extras():
    assert sorted(DECLARED) == RUNNABLE


@pytest.mark.parametrize("name", RUNNABLE)
def test_every_example_names_the_extras_it_is_listed_with(name):
    head = "\n".join((EXAMPLES / name).read_text().splitlines()[:5])
    extras = DECLARED[name]
    if extras and install_line(extras) not in head:
        assert all(f"``{extra}``" in head for extra in extras), head
    elif not extras:
        assert "pip install ." in head, head


def venv_key(extras: list[str], also: tuple[str, ...] = ()) -> str:
    """The cache key of a venv: its extras and other requirements, ``pyproject.toml`` (the
    dependencies) and Python."""
    digest = hashlib.sha256()
    digest.update(",".join(sorted(extras)).encode())
    digest.update(",".join(also).encode())
    digest.update((ROOT / "pyproject.toml").read_bytes())
    digest.update(sys.version.encode())
    return f"{'-'.join(sorted(extras)) or 'core'}{'+' if also else ''}-{digest.hexdigest()[:12]}"


def venv_with(extras: list[str], also: tuple[str, ...] = ()) -> Path:
    """The ``python`` of a venv holding the checkout with exactly ``extras``, and ``also`` (other
    requirements, e.g. a test runner), made once."""
    home = cache_dir() / "example-venvs" / venv_key(extras, also)
    python = home / "bin" / "python"
    if (home / "ready").exists():
        return python
    shutil.rmtree(home, ignore_errors=True)
    venv.EnvBuilder(with_pip=False).create(home)
    target = f"{ROOT}[{','.join(extras)}]" if extras else str(ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", target, *also],
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (home / "ready").write_text(target)
    return python


@pytest.mark.study
@pytest.mark.parametrize("name", RUNNABLE)
def test_the_example_runs_in_a_venv_of_exactly_its_extras(name, tmp_path):
    python = venv_with(DECLARED[name])
    done = subprocess.run(
        [str(python), str(EXAMPLES / name)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip()
