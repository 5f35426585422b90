"""The ``local:`` planner: a GGUF model served by llama.cpp on 127.0.0.1, spoken to over HTTP.

``local:qwen2.5-coder-0.5b`` (a named model, fetched and verified into the cache on first use)
or ``local:/path/model.gguf``. The server is taken from the process's :data:`.server.POOL` on the
first plan and released by :meth:`LocalPlanner.aclose`; the calls go through the
OpenAI-compatible adapter, so validation, retries, seed and temperature work as for any
compatible server. Token counts are the server's ("reported by server"), not billed usage.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from ..._extras import require_extra
from ..base import Plan, PlanningContext
from ..errors import PlannerCallError, PlannerUnavailableError
from ..openai import OpenAIPlanner
from .assembly import check_gguf, ensure_model, resolve_model
from .models import NamedModel
from .server import (
    DEFAULT_CONTEXT,
    DEFAULT_START_TIMEOUT_S,
    POOL,
    LlamaServer,
    ServerConfig,
    ServerPool,
)

# openai and jsonschema_rs are the openai planner's (guarded there); xllamacpp runs in the child.
require_extra("local", "openai", "xllamacpp", "jsonschema_rs")

#: A local server neither rate-limits nor drops calls; a re-send only helps after a timeout.
DEFAULT_MAX_RETRIES = 1


def model_file(model: str, *, notify: bool = True) -> Path:
    """The verified file ``local:MODEL`` runs: a named model from the cache (fetched on first
    use) or the given GGUF path; PlannerConfigError when it is missing, corrupt or refused."""
    resolved = resolve_model(model)
    if isinstance(resolved, NamedModel):
        return ensure_model(resolved, notify=_stderr if notify else None)
    return check_gguf(resolved)


def model_alias(model: str) -> str:
    """The id the server answers with: the model's name, or the GGUF file's stem."""
    resolved = resolve_model(model)
    return resolved.name if isinstance(resolved, NamedModel) else resolved.stem


class LocalPlanner:
    """A :class:`~..base.Planner` backed by a llama.cpp server this process starts and stops."""

    simulated = False

    def __init__(
        self,
        model: str,
        *,
        parallel: int = 1,
        context: int = DEFAULT_CONTEXT,
        threads: int | None = None,
        port: int = 0,
        prompt_cache: bool = False,
        start_timeout: float = DEFAULT_START_TIMEOUT_S,
        timeout: float | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
        max_tokens: int | None = None,
        temperature: float | None = None,
        name: str | None = None,
        pool: ServerPool = POOL,
    ) -> None:
        resolve_model(model)  # an unknown name fails here, before any download
        self.name = name or f"local:{model}"
        self.model = model
        self.requested_model = model_alias(model)
        self.parallel = parallel
        self.context = context
        self.threads = threads
        self.port = port
        self.start_timeout = start_timeout
        self._adapter_options = {
            "timeout": timeout,
            "max_retries": max_retries,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "extra_body": {"cache_prompt": prompt_cache},
        }
        self._pool = pool
        self._server: LlamaServer | None = None
        self._config: ServerConfig | None = None
        self._adapter: OpenAIPlanner | None = None
        self._starting = asyncio.Lock()

    async def plan(self, context: PlanningContext) -> Plan:
        adapter, server = await self._ready()
        try:
            return await adapter.plan(context)
        except PlannerCallError as exc:
            if not server.alive():
                raise PlannerUnavailableError(server.failure()) from exc
            raise

    async def aclose(self) -> None:
        if self._adapter is not None:
            await self._adapter.aclose()
            self._adapter = None
        if self._config is not None:
            self._pool.release(self._config)
            self._config = self._server = None

    async def _ready(self) -> tuple[OpenAIPlanner, LlamaServer]:
        """The adapter and its server, starting (or joining) the server on first use."""
        async with self._starting:
            if self._adapter is None or self._server is None:
                path = await asyncio.to_thread(model_file, self.model)
                config = ServerConfig(
                    model_path=str(path),
                    alias=self.requested_model,
                    parallel=self.parallel,
                    context=self.context,
                    port=self.port,
                    **({"threads": self.threads} if self.threads else {}),
                )
                self._server = await asyncio.to_thread(
                    self._pool.acquire, config, timeout=self.start_timeout
                )
                self._config = config
                self._adapter = OpenAIPlanner(
                    self.requested_model,
                    base_url=self._server.url,
                    compatible=True,
                    name=self.name,
                    **self._adapter_options,  # type: ignore[arg-type]
                )
            return self._adapter, self._server


def _stderr(message: str) -> None:
    print(f"invalidation-contracts: {message}", file=sys.stderr, flush=True)
