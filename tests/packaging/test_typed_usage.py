"""The documented usage type-checks: ``mypy --strict`` on the examples a user copies, as a user,
and refuses a misspelt or mistyped worker or session option, or an SDK's keyword mixed among the
session's (issue 40: ``**options`` are typed; the SDK's keywords go in ``sdk=``).

mypy runs outside the checkout (so the project's own mypy configuration does not apply) against
the installed package, which ships ``py.typed``. One run checks both (mypy is slow to start).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"

#: Each line marked ``# refused`` must be a mypy error, and no other line.
MISUSE = """\
from invalidation_contracts.client import FixMemory
from invalidation_contracts.mcp import SessionOptions, connect
from invalidation_contracts.server import Domain, WorkerConfig
from invalidation_contracts.server.http import ContractService
from invalidation_contracts.server.http.app import create_app
from invalidation_contracts.server.worker.runtime import open_runtime


def misuse(domain: Domain) -> None:
    create_app(domain, stroe="r.sqlite")  # refused
    create_app(domain, WorkerConfig(), max_lag_s="2")  # refused
    ContractService.open(domain, heartbeat=1.0)  # refused
    open_runtime(domain, poll_interval_s=None)  # refused
    WorkerConfig().replace(store_shema="s")  # refused
    create_app(domain, WorkerConfig(store="r.sqlite"), max_lag_s=3.0, protect_graph=True)


def session_misuse(memory: FixMemory, url: str) -> None:
    connect(url, memory, wathc=False)  # refused
    connect(url, memory, apply="server")  # refused
    connect(url, memory, read_timeout_seconds=5)  # refused
    SessionOptions().but(origni="mcp://a")  # refused
    connect(url, memory, SessionOptions(watch=False), apply="model", sdk={"mode": "legacy"})
"""


def test_the_examples_pass_mypy_strict_and_a_wrong_worker_or_session_option_does_not(tmp_path):
    misuse = tmp_path / "misuse.py"
    misuse.write_text(MISUSE, encoding="utf-8")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--cache-dir",
            str(tmp_path / "cache"),
            str(EXAMPLES / "minimal_provider.py"),
            str(EXAMPLES / "agent_memory.py"),
            str(EXAMPLES / "wrapped_validator.py"),
            str(misuse),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        check=False,
    )
    errors = re.findall(r"^(.*?):(\d+): error:", done.stdout, re.M)
    assert {file for file, _ in errors} == {"misuse.py"}, done.stdout + done.stderr
    refused = {n for n, line in enumerate(MISUSE.splitlines(), 1) if line.endswith("# refused")}
    assert {int(line) for _, line in errors} == refused, done.stdout
