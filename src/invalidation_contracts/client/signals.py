"""Signals: what the memory does with each thing a server says.

A response (``observe``), the answer to a need (``answer``: a changes feed, a rule listing, a 410,
a failure), a need that could not be fetched, an operator's eviction, the start of an episode.
Each is a ``Steps`` run by ``Transactions``; the decisions are the rooms' (``wire`` reads,
``Invalidation`` acts on the contract, ``Admission`` learns).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from pydantic import ValidationError

from ..protocol.models import ChangesFeed, RulesListing
from . import telemetry
from .admission import Admission, Lesson
from .detection import Detection
from .entries import EvictionReason
from .events import FetchChanges, FetchFailed, Need, Observation
from .invalidation import Invalidation
from .ledger import Ledger
from .limits import Limits, Refusal
from .stats import contract_bytes as measure_contract_bytes
from .steps import Steps
from .transaction import Transactions
from .trust import TrustPolicy
from .values import Answer, Observed
from .wire import (
    carries_contract,
    feed_items,
    instance_of,
    position_error,
    read_contract,
    read_suggestions,
    refuse,
)

M = TypeVar("M", ChangesFeed, RulesListing)


class Signals:
    """The memory's reactions to a server, under one configuration."""

    def __init__(
        self,
        calls: Transactions,
        invalidation: Invalidation,
        admission: Admission,
        *,
        detection: Detection,
        trust: TrustPolicy,
        limits: Limits,
    ) -> None:
        self.calls = calls
        self.invalidation = invalidation
        self.strategy = invalidation.strategy
        self.admission = admission
        self.detection = detection
        self.trust = trust
        self.limits = limits

    def begin_episode(self, origin: str, episode: int) -> Steps[list[Need]]:
        with self.calls.lock:
            self.calls.episodes[origin] = episode
        call = yield from self.calls.run(origin, episode, _nothing)
        needs = list(call.needs)
        st = call.tx.state
        if (
            self.detection.resyncs_before_episode
            and self.strategy.invalidates
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
        if not self.strategy.stores:
            return
        contract = read_contract(tx, body)
        # Malformed contract fields (``Ignored``) discredit the whole response: none of its
        # suggestions is learned, as for a contract the trust policy doubts (no partial store).
        readable = contract is not None or not carries_contract(body)
        suggestions = (
            read_suggestions(tx, body, self.limits) if r.status == 422 and readable else []
        )
        if contract is not None or suggestions:
            doubt = self.trust.doubt(body, r.signature, since=r.delta_since, now=tx.now)
            if doubt is not None:
                self.invalidation.distrust(tx, doubt, suggestions)
                contract, suggestions = None, []
        if contract is not None:
            tx.seq = contract.contract_seq
        invalidates = self.strategy.invalidates
        if invalidates and contract is not None and self.detection.reads_stamps(r.status):
            self.invalidation.read_stamps(tx, contract, r.delta_since)
        if suggestions and invalidates:
            self.invalidation.on_failure(tx, suggestions)
        injected = self.admission.injected(tx, r.injected)
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

    def apply_changes(
        self,
        origin: str,
        feed: ChangesFeed | Mapping[str, Any],
        episode: int | None,
        signature: str | None,
    ) -> Steps[Observation]:
        raw = feed.to_wire() if isinstance(feed, ChangesFeed) else feed
        items = feed_items(raw)
        if items > self.limits.max_feed_items:
            return (yield from self._lost_feed(origin, episode, "max_feed_items", items))
        parsed = feed if isinstance(feed, ChangesFeed) else ChangesFeed.model_validate(feed)
        return (yield from self._feed(origin, raw, parsed, episode, signature))

    def apply_rules(
        self,
        origin: str,
        listing: RulesListing | Mapping[str, Any],
        episode: int | None,
        signature: str | None,
    ) -> Steps[Observation]:
        raw = listing.to_wire() if isinstance(listing, RulesListing) else listing
        parsed = (
            listing if isinstance(listing, RulesListing) else RulesListing.model_validate(listing)
        )
        return (yield from self._rules(origin, raw, parsed, episode, signature))

    def resync_required(
        self,
        origin: str,
        episode: int | None,
        problem: Mapping[str, Any] | None,
        signature: str | None,
    ) -> Steps[Observation]:
        def work(tx: Ledger) -> None:
            if not self.strategy.invalidates:
                return
            doubt = self.trust.doubt(problem or {}, signature, since=None, now=tx.now)
            if doubt is not None:
                self.invalidation.distrust(tx, doubt)
            else:
                detail = "the server's change log no longer covers the memory's position"
                self.invalidation.resync(tx, detail)

        call = yield from self.calls.run(origin, episode, work)
        return call.observation

    def answer(self, need: Need, answer: Answer, episode: int | None) -> Steps[Observation]:
        status, body, signature = answer.status, answer.body, answer.signature
        body_bytes, refused = answer.body_bytes, answer.refused
        origin, changes = need.origin, isinstance(need, FetchChanges)
        if refused is not None:
            if changes:
                return (yield from self._lost_feed(origin, episode, refused.bound, refused.actual))
            return (yield from self._listing_too_large(origin, episode, refused))
        if body_bytes is not None and body_bytes > self.limits.max_feed_bytes:
            if changes:
                return (yield from self._lost_feed(origin, episode, "max_feed_bytes", body_bytes))
            refusal = Refusal("max_feed_bytes", body_bytes)
            return (yield from self._listing_too_large(origin, episode, refusal))
        if status == 410:
            problem = body if isinstance(body, Mapping) else None
            return (yield from self.resync_required(origin, episode, problem, signature))
        if status == 200 and isinstance(body, Mapping):
            if changes:
                items = feed_items(body)
                if items > self.limits.max_feed_items:
                    return (yield from self._lost_feed(origin, episode, "max_feed_items", items))
                valid = position_error(body, "contract_epoch", "last_seq") is None
                feed = _parsed(ChangesFeed, body) if valid else None
                if feed is not None:
                    return (yield from self._feed(origin, body, feed, episode, signature))
            else:
                listing = _parsed(RulesListing, body)
                if listing is not None:
                    return (yield from self._rules(origin, body, listing, episode, signature))
        return (yield from self.need_failed(need, episode))

    def need_failed(self, need: Need, episode: int | None) -> Steps[Observation]:
        def work(tx: Ledger) -> None:
            if isinstance(need, FetchChanges):
                self.invalidation.feed_unavailable(tx)
            else:
                self.strategy.on_rules_unavailable(tx)

        call = yield from self.calls.run(need.origin, episode, work)
        return call.observation

    def fetch_failed(self, need: Need, detail: str, episode: int | None) -> Steps[Observation]:
        def work(tx: Ledger) -> None:
            withheld = self.invalidation.withheld(tx, need)
            if self.calls.confirmations.pending(tx):
                withheld = tuple(entry.id for entry in tx.index)
            event = FetchFailed(
                origin=tx.origin,
                episode=tx.episode,
                path=need.path,
                detail=detail,
                withheld=withheld,
            )
            tx.emit(event)

        call = yield from self.calls.run(need.origin, episode, work)
        return call.observation

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

    def _feed(
        self,
        origin: str,
        raw: Mapping[str, Any],
        feed: ChangesFeed,
        episode: int | None,
        signature: str | None,
    ) -> Steps[Observation]:
        def act(tx: Ledger) -> None:
            self.invalidation.apply_feed(tx, feed)

        return (yield from self._verified(origin, raw, signature, episode, act))

    def _rules(
        self,
        origin: str,
        raw: Mapping[str, Any],
        listing: RulesListing,
        episode: int | None,
        signature: str | None,
    ) -> Steps[Observation]:
        return (
            yield from self._verified(
                origin,
                raw,
                signature,
                episode,
                lambda tx: self.invalidation.apply_rules(tx, listing),
            )
        )

    def _verified(
        self,
        origin: str,
        raw: Mapping[str, Any],
        signature: str | None,
        episode: int | None,
        act: Callable[[Ledger], None],
    ) -> Steps[Observation]:
        """Act on a fetched answer if the trust policy believes it; report it otherwise."""

        def work(tx: Ledger) -> None:
            if not self.strategy.invalidates:
                return
            doubt = self.trust.doubt(raw, signature, since=None, now=tx.now)
            if doubt is not None:
                self.invalidation.distrust(tx, doubt)
            else:
                act(tx)

        call = yield from self.calls.run(origin, episode, work)
        return call.observation

    def _lost_feed(
        self, origin: str, episode: int | None, bound: str, actual: int
    ) -> Steps[Observation]:
        """A changes feed over a bound: refused unread, so the history it held is lost."""
        cap = getattr(self.limits, bound)

        def work(tx: Ledger) -> None:
            refuse(tx, bound, "a changes feed over the cap was not read", cap=cap, actual=actual)
            if not self.strategy.invalidates:
                return
            if self.trust.require_signatures:
                self.invalidation.distrust(tx, "the feed was too large to verify")
            else:
                self.invalidation.resync(tx, f"the changes feed was over {bound}={cap}")

        call = yield from self.calls.run(origin, episode, work)
        return call.observation

    def _listing_too_large(
        self, origin: str, episode: int | None, refused: Refusal
    ) -> Steps[Observation]:
        """A rule listing over a bound: refused unread, as if no listing were served."""
        cap = getattr(self.limits, refused.bound)

        def work(tx: Ledger) -> None:
            refuse(
                tx,
                refused.bound,
                "a rule listing over the cap was not read",
                cap=cap,
                actual=refused.actual,
            )
            self.strategy.on_rules_unavailable(tx)

        call = yield from self.calls.run(origin, episode, work)
        return call.observation


#: The longest response id (``x-request-id`` or a problem's ``instance``) kept in provenance.
MAX_RESPONSE_ID = 256


def _response_id(value: str | None) -> str | None:
    """A response id to keep with the entries it taught; a longer one than any real id is not."""
    return value if value is not None and len(value) <= MAX_RESPONSE_ID else None


def _nothing(tx: Ledger) -> None:
    """A call that only reads: the needs still outstanding."""


def _parsed(model: type[M], body: Mapping[str, Any]) -> M | None:
    """``body`` as a ``model``, or None when it is not one (the need then failed)."""
    try:
        return model.model_validate(body)
    except ValidationError:
        return None
