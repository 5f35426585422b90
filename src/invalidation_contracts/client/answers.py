"""Answers: what the memory does with the answer to a need, or with a need left unanswered.

A changes feed or a rule listing, a 410, an answer that cannot be used (all through ``answer``),
a need that could not be fetched (``fetch_failed``). Each is a ``Steps`` run by ``CallRunner``;
what is believed is the trust policy's, what is evicted or restamped the ``Invalidation``'s.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import ValidationError

from ..protocol.models import ChangesFeed, RulesListing
from .contractless import tick
from .events import FetchChanges, FetchFailed, Need, Observation, ReadResource
from .invalidation import Invalidation
from .limits import Limits, Refusal
from .revalidation import resource_answered
from .shared.ledger import Ledger
from .shared.steps import Steps
from .transaction import CallRunner
from .values import Answer
from .wire import feed_items, position_error, refuse

M = TypeVar("M", ChangesFeed, RulesListing)
_NOT_COVERED = "the server's change log no longer covers the memory's position"
"""Why a 410 the trust policy believes resyncs the memory."""


@dataclass(slots=True, eq=False)
class Answers:
    """The memory's reactions to what it fetched for its needs, under one configuration."""

    calls: CallRunner
    invalidation: Invalidation
    """Its strategy acts, its trust policy decides what is believed."""
    limits: Limits

    def answer(self, need: Need, answer: Answer, episode: int | None) -> Steps[Observation]:
        if isinstance(need, ReadResource):
            return (yield from self._resource(need, answer.status, answer.etag, episode))
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
            problem = body if isinstance(body, Mapping) else {}
            resync = functools.partial(self.invalidation.resync, detail=_NOT_COVERED)
            return (yield from self._verified(origin, problem, signature, episode, resync))
        if status == 200 and isinstance(body, Mapping):
            if changes:
                items = feed_items(body)
                if items > self.limits.max_feed_items:
                    return (yield from self._lost_feed(origin, episode, "max_feed_items", items))
                valid = position_error(body, "contract_epoch", "last_seq") is None
                feed = _parsed(ChangesFeed, body) if valid else None
                if feed is not None:
                    apply: Callable[[Ledger], None] = functools.partial(
                        self.invalidation.apply_feed, feed=feed
                    )
                    return (yield from self._verified(origin, body, signature, episode, apply))
            else:
                listing = _parsed(RulesListing, body)
                if listing is not None:
                    apply = functools.partial(self.invalidation.apply_rules, listing=listing)
                    return (yield from self._verified(origin, body, signature, episode, apply))
        return (yield from self._need_failed(need, episode))

    def _need_failed(self, need: Need, episode: int | None) -> Steps[Observation]:
        def work(tx: Ledger) -> None:
            if isinstance(need, FetchChanges):
                self.invalidation.feed_unavailable(tx)
            else:
                self.invalidation.strategy.on_rules_unavailable(tx)

        call = yield from self.calls.run(need.origin, episode, work)
        return call.observation

    def _resource(
        self, need: ReadResource, status: int | None, etag: str | None, episode: int | None
    ) -> Steps[Observation]:
        """A resource a fix cites was read (``verify``'s conditional read); None: not fetched."""

        def work(tx: Ledger) -> None:
            resource_answered(tx, need, status, etag, tick(tx))

        call = yield from self.calls.run(need.origin, episode, work)
        return call.observation

    def fetch_failed(self, need: Need, detail: str, episode: int | None) -> Steps[Observation]:
        if isinstance(need, ReadResource):
            return (yield from self._resource(need, None, None, episode))

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

    def _verified(
        self,
        origin: str,
        raw: Mapping[str, Any],
        signature: str | None,
        episode: int | None,
        act: Callable[[Ledger], None],
    ) -> Steps[Observation]:
        """Act on a fetched answer (a feed, a listing, a 410's problem document) if the trust
        policy believes it; report it otherwise."""

        def work(tx: Ledger) -> None:
            if not self.invalidation.strategy.invalidates:
                return
            doubt = self.invalidation.trust.doubt(raw, signature, since=None, now=tx.now)
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
            if not self.invalidation.strategy.invalidates:
                return
            if self.invalidation.trust.require_signatures:
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
            self.invalidation.strategy.on_rules_unavailable(tx)

        call = yield from self.calls.run(origin, episode, work)
        return call.observation


def _parsed(model: type[M], body: Mapping[str, Any]) -> M | None:
    """``body`` as a ``model``, or None when it is not one (the need then failed)."""
    try:
        return model.model_validate(body)
    except ValidationError:
        return None
