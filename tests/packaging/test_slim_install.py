"""``pip install invalidation-contracts`` (no extras) is slim, typed, and says what it lacks.

A real install: a fresh virtual environment, ``pip install <checkout>`` with no extras (pip reaches
the package index, as a user's would), then the core and the CLI run there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_DIRECT_DEPENDENCIES = 6
MAX_DISTRIBUTIONS = 15
EDGE_MODULES = (
    "httpx",
    "fastapi",
    "uvicorn",
    "cryptography",
    "rich",
    "matplotlib",
    "anthropic",
    "openai",
)


@pytest.fixture(scope="module")
def slim(tmp_path_factory) -> Path:
    """A fresh venv with only ``invalidation-contracts`` installed; returns its ``bin`` folder.

    The venv gets no pip of its own (this interpreter's pip installs into it), so every
    distribution in it came with the package.
    """
    home = tmp_path_factory.mktemp("slim") / "venv"
    venv.EnvBuilder(with_pip=False).create(home)
    bin_dir = home / ("Scripts" if os.name == "nt" else "bin")
    python = bin_dir / "python"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return bin_dir


def in_slim(slim: Path, code: str) -> dict:
    done = subprocess.run(
        [slim / "python", "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_core_has_few_direct_dependencies_and_installs_few_distributions(slim):
    report = in_slim(
        slim,
        "import json, importlib.metadata as md\n"
        "requires = md.requires('invalidation-contracts') or []\n"
        "direct = [r for r in requires if 'extra ==' not in r]\n"
        "names = sorted(d.metadata['Name'].lower() for d in md.distributions())\n"
        "print(json.dumps({'direct': direct, 'installed': names}))",
    )
    installed = report["installed"]

    assert len(report["direct"]) <= MAX_DIRECT_DEPENDENCIES, report["direct"]
    assert len(installed) <= MAX_DISTRIBUTIONS, installed
    assert not set(EDGE_MODULES) & set(installed)


def test_the_protocol_and_the_client_import_and_ship_py_typed(slim):
    report = in_slim(
        slim,
        "import json, sys, pathlib\n"
        "import invalidation_contracts.client, invalidation_contracts.protocol\n"
        "import invalidation_contracts.server\n"
        "from invalidation_contracts.client import FixMemory\n"
        "FixMemory('row').close()\n"
        "root = pathlib.Path(invalidation_contracts.__file__).parent\n"
        "print(json.dumps({'py.typed': (root / 'py.typed').exists(),"
        f" 'edge': sorted(m for m in {EDGE_MODULES!r} if m in sys.modules)}}))",
    )
    assert report == {"py.typed": True, "edge": []}


@pytest.mark.parametrize(
    ("module", "extra"),
    [
        ("invalidation_contracts.httpx", "httpx"),
        ("invalidation_contracts.server.http.app", "server"),
        ("invalidation_contracts.bench.figures", "bench"),
        ("invalidation_contracts.bench.grid", "cli"),
        ("invalidation_contracts.cli.operator", "cli"),
        ("invalidation_contracts.planners.anthropic", "anthropic"),
        ("invalidation_contracts.planners.openai", "openai"),
    ],
)
def test_an_edge_module_names_its_extra(slim, module, extra):
    report = in_slim(
        slim,
        "import json\n"
        "from invalidation_contracts._extras import MissingExtra\n"
        f"try:\n    import {module}\n"
        "except MissingExtra as exc:\n    print(json.dumps({'extra': exc.extra}))\n"
        "else:\n    print(json.dumps({'extra': None}))",
    )
    assert report == {"extra": extra}


def test_the_cli_without_the_server_extra_says_which_extra_in_one_line(slim):
    done = subprocess.run(
        [slim / "invalidation-contracts", "serve", "--domain", "acme_billing"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "INVALIDATION_CONTRACTS_ADMIN_TOKEN": "t" * 24},
    )
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    assert "pip install '.[server]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_cli_writes_the_protocol_schemas_without_any_extra(slim, tmp_path):
    done = subprocess.run(
        [slim / "invalidation-contracts", "schema", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert len(list(tmp_path.glob("*.schema.json"))) >= 20


def test_ladder_on_a_slim_install_names_every_missing_extra_at_once(slim, tmp_path):
    done = subprocess.run(
        [slim / "invalidation-contracts", "ladder", "--out", str(tmp_path / "results")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    assert "pip install '.[cli,server,bench]'" in done.stderr
    assert not (tmp_path / "results").exists()
