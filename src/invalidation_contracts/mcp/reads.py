"""The contract resources a session reads for its memory: the answers to its needs, and the
versions a ``resources/updated`` notification said moved.

``ContractReads`` is the session's read side: each read sends the memory's position in
``_meta`` (a worker behind it catches up before answering, SPEC §8.2 rule 3) and asks for a
signature when the trust policy wants one; an answer that never came (a closed connection, a
timeout) leaves the need outstanding, an answer that cannot be used is given to the memory as
such.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

import anyio
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError

from ..client.events import MemoryEvent, Need, ReadResource
from ..client.memory import AsyncFixMemory
from ..client.needs import need_loop
from ..client.shared.steps import adrive
from ..client.values import Answer, Observed
from . import names
from .options import Listener
from .results import read_resource_result

logger = logging.getLogger("invalidation_contracts.client")

#: MCP error codes that mean the request never got an answer (the need stays outstanding).
_UNANSWERED = frozenset({types.CONNECTION_CLOSED, types.REQUEST_TIMEOUT})

Emit = Callable[[Iterable[MemoryEvent], Listener | None], None]


class ContractReads:
    """Reads the contract resources of ``session``'s server into ``memory`` (under the origin
    ``origin()`` names); ``emit`` hands each read's events to the session's listeners."""

    def __init__(
        self,
        session: ClientSession,
        memory: AsyncFixMemory,
        origin: Callable[[], str],
        emit: Emit,
        *,
        conditional: bool,
    ) -> None:
        self.session = session
        self.memory = memory
        self._origin = origin
        self._emit = emit
        self.conditional = conditional

    async def fulfil(
        self,
        needs: Iterable[Need],
        *,
        episode: int | None = None,
        listener: Listener | None = None,
    ) -> tuple[Need, ...]:
        """Read each need and feed the answer to the memory, for up to ``MAX_NEED_ROUNDS``
        rounds; returns the needs still outstanding."""
        rounds = need_loop(tuple(needs))
        return await adrive(rounds, lambda need: self._fulfil(need, episode, listener), ())

    async def _fulfil(
        self, need: Need, episode: int | None, listener: Listener | None
    ) -> tuple[Need, ...] | None:
        if isinstance(need, ReadResource):  # an HTTP resource: no MCP form (the probe stands in)
            obs = await self.memory.fetch_failed(need, "no MCP form", episode=episode)
            self._emit(obs.events, listener)
            return None
        try:
            known = await self.known()
            meta = {**known.to_meta(), **self.sign_meta()}
            result = await self.session.read_resource(names.need_uri(need), meta=request_meta(meta))
        except MCPError as exc:
            if exc.code in _UNANSWERED:
                obs = await self.memory.fetch_failed(need, f"MCPError: {exc}", episode=episode)
                self._emit(obs.events, listener)
                return None
            obs = await self.memory.answer(need, Answer.unusable(), episode=episode)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
            detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            obs = await self.memory.fetch_failed(need, detail, episode=episode)
            self._emit(obs.events, listener)
            return None
        else:
            read = read_resource_result(result, self.memory.limits)
            answer = Answer(
                read.status,
                read.body,
                signature=read.signature,
                body_bytes=read.body_bytes,
                refused=read.refused,
            )
            obs = await self.memory.answer(need, answer, episode=episode)
        self._emit(obs.events, listener)
        return obs.needs

    async def refresh(self, listener: Listener | None) -> int | None:
        """Read the versions into the memory (a notification said they moved); the seq read,
        or None when nothing readable came."""
        origin = self._origin()
        position = await self.position()
        uri = names.VERSIONS + position.query()
        result = await self.session.read_resource(uri, meta=request_meta(self.sign_meta()))
        answer = read_resource_result(result, self.memory.limits, "max_body_bytes")
        if answer.status != 200 or not isinstance(answer.body, dict):
            status = answer.status if answer.status is not None else "nothing readable"
            logger.warning("%s answered %s for its versions", origin, status)
            return None
        observed = Observed(
            None,
            200,
            answer.body,
            delta_since=answer.delta_since,
            response_bytes=answer.body_bytes,
            signature=answer.signature,
        )
        obs = await self.memory.observe(origin, observed)
        self._emit(obs.events, listener)
        await self.fulfil(obs.needs, listener=listener)
        seq = answer.body.get("contract_seq", position.since)  # absent: still at ``since``
        return seq if isinstance(seq, int) and not isinstance(seq, bool) else None

    async def position(self) -> names.MetaPosition:
        """The position a tool call sends: the memory's, when the session is conditional."""
        if not self.conditional:
            return names.MetaPosition()
        return await self.known()

    async def known(self) -> names.MetaPosition:
        """The position the memory knows of this server (sent with every contract read)."""
        known = await self.memory.position(self._origin())
        return names.MetaPosition(known.seq, known.epoch)

    def sign_meta(self) -> dict[str, Any]:
        """The ``_meta`` entry that asks for a signed answer, when the trust policy wants one."""
        if not self.memory.trust.requests_signatures:
            return {}
        return {names.key_for(names.SIGN, self.spelling): "1"}

    @property
    def spelling(self) -> str:
        """How this server spells the ``_meta`` keys: ``meta`` (reverse DNS) when it advertises
        the extension (``extensions`` on 2026-07-28, ``experimental`` before), else ``inline``
        (0.1's prefix, which every server reads)."""
        capabilities = self.session.server_capabilities
        if capabilities is None:
            return names.INLINE_ENVELOPE
        for advertised in (capabilities.extensions, capabilities.experimental):
            if advertised and names.EXTENSION in advertised:
                return names.META_ENVELOPE
        return names.INLINE_ENVELOPE


def request_meta(entries: Mapping[str, Any]) -> types.RequestParamsMeta | None:
    """Request ``_meta`` for the SDK (an open mapping), or None when there is nothing to send."""
    return cast(types.RequestParamsMeta, dict(entries)) if entries else None
