"""The llama.cpp server child: a start that cannot succeed says why in one line, leaves nothing.

These start the real server (``xllamacpp``) but need no model: binding and loading fail first.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from invalidation_contracts.planners import (
    PlannerConfigError,
    PlannerUnavailableError,
    PlanningContext,
    create_planner,
)
from invalidation_contracts.planners.local.server import LlamaServer, ServerConfig, ServerPool

pytest.importorskip("xllamacpp")


@pytest.fixture
def truncated_gguf(tmp_path: Path) -> Path:
    path = tmp_path / "truncated.gguf"
    path.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 32)
    return path


def test_a_truncated_model_is_a_config_error_and_no_process_is_left(truncated_gguf):
    config = ServerConfig(model_path=str(truncated_gguf), alias="t", threads=1)
    pool = ServerPool()
    with pytest.raises(PlannerConfigError, match="cannot load .*truncated.gguf"):
        pool.acquire(config, timeout=120)
    assert pool.running() == []


def test_a_port_in_use_is_named(truncated_gguf):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = ServerConfig(model_path=str(truncated_gguf), alias="t", threads=1, port=port)
        with pytest.raises(
            PlannerUnavailableError, match=f"port {port} on 127.0.0.1 will not bind"
        ):
            LlamaServer.start(config, timeout=120)


def test_the_local_planner_reports_a_bad_model_on_its_first_plan(truncated_gguf):
    context = PlanningContext(
        system_prompt="s", task="t", task_fields={}, request_schema={"type": "object"}
    )

    async def go() -> None:
        planner = create_planner(f"local:{truncated_gguf}", {"threads": "1"})
        try:
            await planner.plan(context)
        finally:
            await planner.aclose()

    with pytest.raises(PlannerConfigError, match="not a complete GGUF model"):
        asyncio.run(go())
