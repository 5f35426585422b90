"""One tool call as a framework adapter makes it: fixes looked up, applied or shown, result read.

What every adapter (PydanticAI, the Agents SDK, LangChain) and ``ContractSession.hook`` share:
the fixes relevant to the model's arguments are patched in (client apply mode) or were shown to
the model in its prompt (model mode: ``ContractSession.lookup`` without arguments, rendered at
L2); the call is made with them recorded as injected, so what the result teaches names what it
was derived from.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._deprecation import warn_moved
from ..client.entries import MemoryEntry
from ..client.memory import AsyncFixMemory, Lookup, PatchOutcome
from ..client.prompting import Consumption, consumption
from ..protocol.levels import Level

if TYPE_CHECKING:
    from .session import ToolReply

logger = logging.getLogger("invalidation_contracts.client")

#: How an adapter uses the relevant fixes: patched into the arguments, or shown to the model.
APPLY_MODES = ("client", "model")


def check_apply(apply: str) -> str:
    """``apply`` if it is one of ``APPLY_MODES``; else ``ValueError``."""
    if apply not in APPLY_MODES:
        raise ValueError(f"apply must be one of {APPLY_MODES}, not {apply!r}")
    return apply


class AgentCalls:
    """What an agent loop uses of a contract session: lookups, prompts, patches, the call hook.

    ``ContractSession`` is one; it provides ``memory``, ``origin``, ``apply`` and ``call_tool``.
    """

    memory: AsyncFixMemory
    apply: str

    @property
    def origin(self) -> str:
        raise NotImplementedError

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        episode: int | None = None,
        injected: Iterable[MemoryEntry | str] = (),
        meta: Mapping[str, Any] | None = None,
    ) -> ToolReply:
        raise NotImplementedError

    async def lookup(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        episode: int | None = None,
    ) -> Lookup:
        """The fixes of ``tool`` whose scope matches ``arguments`` (with the lookup's events).

        Without ``arguments``: every fix of ``tool`` the memory would serve, whatever the
        arguments, for a prompt written before the model drafts a call (render it at L2: each
        fix with its condition); not counted as a lookup.
        """
        return await self.memory.lookup(self.origin, arguments, operation=tool, episode=episode)

    async def relevant(
        self, tool: str, arguments: Mapping[str, Any], *, episode: int | None = None
    ) -> list[MemoryEntry]:
        """Deprecated (removed in 0.3.0): ``(await lookup(tool, arguments)).entries``."""
        warn_moved(f"{type(self).__name__}.relevant", f"{type(self).__name__}.lookup")
        return list((await self.lookup(tool, arguments, episode=episode)).entries)

    async def fixes_for(self, tool: str, *, episode: int | None = None) -> list[MemoryEntry]:
        """Deprecated (removed in 0.3.0): ``(await lookup(tool)).entries``."""
        warn_moved(f"{type(self).__name__}.fixes_for", f"{type(self).__name__}.lookup")
        return list((await self.lookup(tool, episode=episode)).entries)

    @staticmethod
    def prompt(
        base_system: str,
        entries: Sequence[MemoryEntry],
        level: Level | int | str,
        draft: Mapping[str, Any] | None = None,
    ) -> Consumption:
        """The system prompt and memory block for ``entries`` at consumption level L2 or L3."""
        return consumption(base_system, entries, level, draft)

    async def apply_patches(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        entries: Sequence[MemoryEntry],
        *,
        episode: int | None = None,
    ) -> PatchOutcome:
        """Client apply mode: the fixes' cached patches applied to a copy of the arguments."""
        return await self.memory.apply_patches(
            self.origin, arguments, entries, episode=episode, operation=tool
        )

    async def answer(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        apply: str | None = None,
        episode: int | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> ToolReply:
        """One call as an adapter makes it: the relevant fixes patched in (``apply="client"``)
        or left to the model, which was shown them (``"model"``); default: ``self.apply``.
        ``meta``: the framework's own request ``_meta``, sent beside the contract's."""
        chosen = self.apply if apply is None else apply
        return await answer(self, tool, arguments, chosen, episode, meta=meta)

    async def hook(self, tool: str, arguments: Mapping[str, Any] | None = None) -> tuple[str, bool]:
        """The framework-neutral call hook: ``(model text, is_error)`` of ``answer``."""
        reply = await self.answer(tool, arguments)
        return reply.for_model, reply.is_error


async def answer(
    contract: AgentCalls,
    tool: str,
    arguments: Mapping[str, Any] | None,
    apply: str,
    episode: int | None = None,
    *,
    meta: Mapping[str, Any] | None = None,
) -> ToolReply:
    """Call ``tool`` with ``arguments`` through ``contract`` in ``apply`` mode."""
    check_apply(apply)
    request = dict(arguments or {})
    fixes = list((await contract.lookup(tool, request, episode=episode)).entries)
    if fixes and apply == "client":
        try:
            patched = await contract.apply_patches(tool, request, fixes, episode=episode)
        except ValueError as exc:  # the server publishes no patchable fields
            logger.warning("%s: %s sent unpatched: %s", contract.origin, tool, exc)
        else:
            request = patched.request
    return await contract.call_tool(tool, request, episode=episode, injected=fixes, meta=meta)
