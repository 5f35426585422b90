"""Responses: what the memory does with a server's response, an episode's start, an eviction.

Each is a ``Steps`` run by ``CallRunner``; the decisions are the rooms' (``wire`` reads,
``Invalidation`` acts on the contract, ``Admission`` learns). What it does with the answer to a
need is ``client.answers``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Any

from ..protocol.models import ContractFields
from . import telemetry
from .admission import Admission
from .detection import Detection
from .entries import EvictionReason
from .events import FetchChanges, Need, NotStored, Observation
from .invalidation import Invalidation
from .lesson import Lesson
from .limits import Limits
from .readers import SuggestionReader
from .revalidation import read_cites
from .shared.ledger import Ledger
from .shared.steps import Steps
from .stats import contract_bytes as measure_contract_bytes
from .transaction import CallRunner
from .values import Observed
from .wire import (
    carries_contract,
    instance_of,
    read_contract,
    read_suggestions,
    refuse,
)


@dataclass(slots=True, eq=False)
class Responses:
    """The memory's reactions to the responses a server sends, under one configuration."""

    calls: CallRunner
    invalidation: Invalidation
    """Its strategy acts, its trust policy decides what is believed."""
    admission: Admission
    _: KW_ONLY
    detection: Detection
    limits: Limits
    reader: SuggestionReader | None = None
    """Reads failures in other shapes than ``recovery_feedback`` (``client.readers``)."""

    def begin_episode(self, origin: str, episode: int) -> Steps[list[Need]]:
        with self.calls.lock:
            self.calls.episodes[origin] = episode
        call = yield from self.calls.run(origin, episode, _nothing)
        needs = list(call.needs)
        st = call.tx.state
        if (
            self.detection.resyncs_before_episode
            and self.invalidation.strategy.invalidates
            and len(call.tx.index)
            and not any(isinstance(need, FetchChanges) for need in needs)
        ):
            needs.insert(0, FetchChanges(origin, st.synced_seq or 0, st.epoch))
        return needs

    def observe(
        self, origin: str, response: Observed, episode: int | None, operation: str | None
    ) -> Steps[Observation]:
        def work(tx: Ledger) -> None:
            self._read(tx, response)

        call = yield from self.calls.run(origin, episode, work, operation=operation)
        telemetry.injected(origin, len(response.injected))
        return call.observation

    def _read(self, tx: Ledger, r: Observed) -> None:
        body: Mapping[str, Any] = r.body if isinstance(r.body, Mapping) else {}
        tx.stats.responses += 1
        if r.refused is not None:
            bound, actual = r.refused.bound, r.refused.actual
            cap = getattr(self.limits, bound)
            refuse(
                tx,
                bound,
                f"a body over {bound}={cap}; its contract was not read",
                cap=cap,
                actual=actual,
            )
            return
        if r.response_bytes is not None:
            tx.stats.response_bytes += r.response_bytes
            if r.response_bytes > self.limits.max_body_bytes:
                refuse(
                    tx,
                    "max_body_bytes",
                    f"a {r.response_bytes}-byte body; its contract was not read",
                    cap=self.limits.max_body_bytes,
                    actual=r.response_bytes,
                )
                return
        tx.stats.contract_bytes += (
            r.contract_bytes if r.contract_bytes is not None else measure_contract_bytes(body)
        )
        if not self.invalidation.strategy.stores:
            return
        contract = read_contract(tx, body)
        # Malformed contract fields (``Ignored``) discredit the whole response: none of its
        # suggestions is learned, as for a contract the trust policy doubts (no partial store).
        readable = contract is not None or not carries_contract(body)
        if r.status == 422 and readable and self.reader is not None:
            body = self._translated(tx, body, r.request)
        suggestions = (
            read_suggestions(tx, body, self.limits) if r.status == 422 and readable else []
        )
        self.admission.policies.notice(tx, body, suggestions)
        if suggestions:
            read_cites(tx, body, r.cites)
        if contract is not None or suggestions:
            doubt = self.invalidation.trust.doubt(
                body, r.signature, since=r.delta_since, now=tx.now, binding=r.binding
            )
            signed = r.signature is not None and self.invalidation.trust.requests_signatures
            if doubt is None and signed and contract is not None:
                doubt = _replayed(tx, contract)
            if doubt is not None:
                self.invalidation.distrust(tx, doubt, suggestions)
                contract, suggestions = None, []
        if contract is not None:
            tx.seq = contract.contract_seq
        invalidates = self.invalidation.strategy.invalidates
        if invalidates and contract is not None and self.detection.reads_stamps(r.status):
            self.invalidation.read_stamps(tx, contract, r.delta_since)
        if suggestions and invalidates:
            self.invalidation.on_failure(tx, suggestions)
        injected = self.admission.injected(tx, r.injected)
        if r.status is not None and 200 <= r.status < 300:
            for entry_id in injected:
                entry = tx.index.get(entry_id)
                if entry is not None:
                    self.admission.policies.of(tx).on_accepted(tx, entry)
        lesson = Lesson(
            tuple(suggestions),
            contract,
            injected,
            _response_id(r.response_id or instance_of(body)),
            self.admission.contradicted(tx, suggestions, injected, r.request),
            tx.operation,
            dict(r.request) if r.request is not None else None,
        )
        if suggestions and self.invalidation.needs(tx):
            # Invalidate first, then learn: storing now would supersede the very entries the
            # pending diff is about to judge, hiding a stale entry as a mere replacement.
            tx.lessons.append(lesson)
        else:
            self.calls.settle(tx)
            self.admission.learn(tx, lesson)

    def _translated(
        self, tx: Ledger, body: Mapping[str, Any], request: Mapping[str, Any] | None
    ) -> Mapping[str, Any]:
        """``body`` with the reader's suggestions as its ``recovery_feedback`` (if it has none);
        each error the reader cannot make deterministic is reported, not stored."""
        if body.get("recovery_feedback") is not None or self.reader is None:
            return body
        reading = self.reader.read(body, request)
        for kind, reason in reading.unread:
            tx.emit(
                NotStored(origin=tx.origin, episode=tx.episode, suggestion_type=kind, reason=reason)
            )
        return {**body, "recovery_feedback": {"suggestions": reading.suggestions}}

    def evict(
        self,
        origin: str,
        targets: Iterable[str] | None,
        table: str | None,
        reason: EvictionReason,
        detail: str,
        episode: int | None,
    ) -> Steps[Observation]:
        ids = list(dict.fromkeys(targets)) if targets is not None else None

        def work(tx: Ledger) -> None:
            if ids is not None:
                chosen = ids
            elif table is not None:
                chosen = [entry.id for entry in tx.index.on_table(table)]
            else:
                chosen = [entry.id for entry in tx.index]
            for entry_id in chosen:
                tx.evict(entry_id, reason, detail)

        call = yield from self.calls.run(origin, episode, work)
        return call.observation


#: The longest response id (``x-request-id`` or a problem's ``instance``) kept in provenance.
MAX_RESPONSE_ID = 256


def _response_id(value: str | None) -> str | None:
    """A response id to keep with the entries it taught; a longer one than any real id is not."""
    return value if value is not None and len(value) <= MAX_RESPONSE_ID else None


def _nothing(tx: Ledger) -> None:
    """A call that only reads: the needs still outstanding."""


def _replayed(tx: Ledger, contract: ContractFields) -> str | None:
    """Why a signed statement older than the memory's position must change nothing (a replay, or
    an answer overtaken by a change the memory already read); None when it is current."""
    st, seq = tx.state, contract.contract_seq
    if st.known_seq is None or seq is None or st.epoch != contract.contract_epoch:
        return None
    if seq >= st.known_seq:
        return None
    return (
        f"the signed statement is at contract_seq {contract.contract_seq}, older than the "
        f"memory's position {st.known_seq} (a replay, or overtaken): nothing of it is acted on"
    )
