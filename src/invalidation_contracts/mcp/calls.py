"""One tool call as a framework adapter makes it: fixes looked up, applied or shown, result read.

What every adapter (PydanticAI, the Agents SDK, LangChain) and ``ContractSession.hook`` share:
the fixes relevant to the model's arguments are patched in (client apply mode) or were shown to
the model in its prompt (model mode: ``ContractSession.lookup`` without arguments, rendered at
L2 by ``AgentCalls.shown``); the call is made with the fixes it carries recorded as injected, so
what the result teaches names what it was derived from. In client mode a fix the client cannot
patch (no patch, or no patchable field for it) is shown to the model too, and its skipped patch is
a ``PatchSkipped`` event, not an injection: the memory is never silently unused.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .._deprecation import warn_moved
from ..client.entries import MemoryEntry
from ..client.events import MemoryEvent, PatchSkipped
from ..client.memory import AsyncFixMemory, Lookup, PatchOutcome
from ..client.patching import ApplyMode, ApplyModeName, is_patchable, written_paths
from ..client.prompting import Consumption, consumption
from ..protocol.levels import Level
from .reply import ToolReply

logger = logging.getLogger("invalidation_contracts.client")


class AgentCalls:
    """What an agent loop uses of a contract session: lookups, prompts, patches, the call hook.

    ``ContractSession`` is one; it provides ``memory``, ``origin``, ``apply`` and ``call_tool``.
    """

    memory: AsyncFixMemory
    apply: ApplyMode

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

    def emit(self, events: Iterable[MemoryEvent]) -> None:
        """Hand events the adapter caused (not the memory) to the session's listener."""

    async def shown(self, tool: str) -> list[MemoryEntry]:
        """The fixes of ``tool`` the model must be shown: every one in model apply mode; in
        client mode those the client cannot patch in (no patch, or a field not patchable)."""
        fixes = list((await self.lookup(tool)).entries)
        if self.apply is ApplyMode.PLANNER or not fixes:
            return fixes
        patchable = (await self.memory.state(self.origin)).patchable
        return [fix for fix in fixes if not client_patches(fix, patchable)]

    async def tool_prompt(self, tool: str) -> str:
        """``shown(tool)`` at L2 for a tool description or instructions; ``""`` for none."""
        fixes = await self.shown(tool)
        if not fixes:
            return ""
        rendered = consumption("", fixes, Level.PATCH_PROTOCOL)
        return f"{rendered.system_prompt}\n{rendered.memory_block}"

    async def instructions(self, tools: Iterable[str]) -> str:
        """``tool_prompt`` of each of ``tools`` with its name, for a framework's instructions."""
        blocks = []
        for tool in sorted(tools):
            prompt = await self.tool_prompt(tool)
            if prompt:
                blocks.append(f"Tool {tool}: {prompt}")
        return "\n\n".join(blocks)

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
        apply: ApplyMode | ApplyModeName | None = None,
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
    apply: ApplyMode | ApplyModeName,
    episode: int | None = None,
    *,
    meta: Mapping[str, Any] | None = None,
) -> ToolReply:
    """Call ``tool`` with ``arguments`` through ``contract`` in ``apply`` mode."""
    apply = ApplyMode.parse(apply)
    request = dict(arguments or {})
    fixes = list((await contract.lookup(tool, request, episode=episode)).entries)
    injected = fixes
    if fixes and apply is ApplyMode.CLIENT:
        try:
            patched = await contract.apply_patches(tool, request, fixes, episode=episode)
        except ValueError as exc:  # the server publishes no patchable fields
            warn_bypass(contract.origin, f"{tool} sent unpatched: {exc}")
            skipped = [(fix.id, str(exc)) for fix in fixes]
        else:
            request = patched.request
            skipped = list(patched.skipped)
        injected = [fix for fix in fixes if fix.id not in dict(skipped)]
        contract.emit(_skipped(contract.origin, episode, fixes, skipped))
    return await contract.call_tool(tool, request, episode=episode, injected=injected, meta=meta)


_bypassed: set[str] = set()
"""Origins a bypass warning was logged for (``warn_bypass``), in this process."""


def warn_bypass(origin: str, why: str) -> None:
    """Log a warning that calls to ``origin`` bypass the memory (in part or whole), once per
    origin and process: the first bypass is never silent, and the log is not flooded."""
    if origin not in _bypassed:
        _bypassed.add(origin)
        logger.warning("%s: calls bypass the fix memory: %s", origin, why)


def client_patches(entry: MemoryEntry, patchable: Sequence[str] | None) -> bool:
    """Whether client apply mode can patch ``entry`` in: it has a patch and every path it
    writes is patchable."""
    patch = entry.suggestion.patch
    if not patch or patchable is None:
        return False
    return all(is_patchable(path, patchable) for path in written_paths(patch))


def _skipped(
    origin: str, episode: int | None, fixes: Sequence[MemoryEntry], skipped: list[tuple[str, str]]
) -> list[MemoryEvent]:
    by_id = {fix.id: fix for fix in fixes}
    return [
        PatchSkipped(origin=origin, episode=episode, entry_id=i, key=by_id[i].key, detail=why)
        for i, why in skipped
        if i in by_id
    ]
