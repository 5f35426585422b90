"""The hosts a recipe of docs/hosts.md is driven by: each starts the proxy exactly as the recipe
says (its ``command``, ``args`` and ``env``, in a folder of its own) and makes tool calls.

A driver is anything with ``call``: ``PythonSDKHost`` is the official Python SDK's client,
``TypeScriptSDKHost`` the official TypeScript SDK's (a Node process, no project code in it). The
recipe tests run every recipe under every driver in ``DRIVERS``, each with its ``markers``.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import anyio
import mcp_types as types
from mcp import StdioServerParameters
from mcp.client.client import Client
from tests.support.mcp_hosts import node_modules, ts_host
from tests.support.proxy import environment


@dataclass(frozen=True)
class Recipe:
    """One host configuration of docs/hosts.md: where it is, and how it starts the proxy."""

    where: str
    command: str
    args: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Answer:
    """What the host got from a tool call: whether it failed, and its text."""

    is_error: bool
    text: str


class HostDriver(Protocol):
    name: str
    #: The pytest markers of the real components the driver needs (beside ``mcp``).
    markers: tuple[str, ...]

    async def call(
        self, recipe: Recipe, folder: Path, tool: str, calls: Sequence[Mapping[str, Any]]
    ) -> list[Answer]:
        """Start the proxy as ``recipe`` says, in ``folder`` (its working directory and state
        home), make each call of ``tool`` in one session, and close it."""
        ...


def host_environment(recipe: Recipe, folder: Path) -> dict[str, str]:
    """What a host gives the proxy: this checkout importable, the project's command on the
    ``PATH`` (as an install puts it), a state directory of the folder's own, the recipe's env."""
    env = environment()
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["XDG_STATE_HOME"] = str(folder / "state")
    return env | dict(recipe.env)


class PythonSDKHost:
    """A host on the official Python SDK (``mcp.client.client.Client``), over stdio."""

    name = "python-sdk"
    markers: tuple[str, ...] = ()

    async def call(
        self, recipe: Recipe, folder: Path, tool: str, calls: Sequence[Mapping[str, Any]]
    ) -> list[Answer]:
        env = host_environment(recipe, folder)
        command = shutil.which(recipe.command, path=env["PATH"]) or recipe.command
        server = StdioServerParameters(
            command=command, args=list(recipe.args), env=env, cwd=str(folder)
        )
        answers = []
        async with Client(server) as host:
            for arguments in calls:
                result = await host.call_tool(tool, dict(arguments))
                text = "\n".join(b.text for b in result.content if isinstance(b, types.TextContent))
                answers.append(Answer(bool(result.is_error), text))
        return answers


class TypeScriptSDKHost:
    """A host on the official TypeScript SDK (``Client`` + ``StdioClientTransport`` of the pinned
    ``@modelcontextprotocol/sdk``), over stdio: ``node/mcp_host.mjs``, spawning the recipe's
    ``command`` as Node does (looked up on the env's ``PATH``) with its ``args``, ``env`` and
    the folder as working directory. ``node_modules`` raises ``Unavailable`` without Node."""

    name = "typescript-sdk"
    markers: tuple[str, ...] = ("node",)

    async def call(
        self, recipe: Recipe, folder: Path, tool: str, calls: Sequence[Mapping[str, Any]]
    ) -> list[Answer]:
        return await anyio.to_thread.run_sync(self._session, recipe, folder, tool, calls)

    def _session(
        self, recipe: Recipe, folder: Path, tool: str, calls: Sequence[Mapping[str, Any]]
    ) -> list[Answer]:
        host = ts_host(node_modules())
        try:
            host.ask(
                "connect",
                transport="stdio",
                command=recipe.command,
                args=list(recipe.args),
                env=host_environment(recipe, folder),
                cwd=str(folder),
            )
            answers = []
            for arguments in calls:
                got = host.ask("call", name=tool, arguments=dict(arguments))
                answers.append(Answer(bool(got["isError"]), str(got["text"])))
            return answers
        finally:
            host.close()


DRIVERS: list[HostDriver] = [PythonSDKHost(), TypeScriptSDKHost()]
