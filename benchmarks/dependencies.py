"""Study — membership dependencies: row precision on a stream whose errors list valid keys, and
the cost of key-set tracking on the provider's failure path.

The domain is a card wallet in the style of ``docs/examples/wrapped_validator.py``: a payment with
an unregistered card fails with "card not registered; registered cards: …", and the fix is the
first registered card. The same check is run two ways that give the same answers: listing the
cards by iterating the table (a key-set read: a ``membership`` dependency) and by reading every
row (``items()``: the whole table, which is what listing the keys recorded before key-set
dependencies existed). A row-level memory (A2D) learns one fix per unregistered card; a seeded
stream of drift events (a card's balance changes, a card is added, a card is removed) follows,
each event one change set. After each event the memory reads the diff; every eviction is judged
by brute force (would the server now send the same suggestion for the fix's draft, message
included?), and each evicted fix is learned again. Precision = correct / all evictions; a
fix left in memory that the oracle calls stale is a miss (recall).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from invalidation_contracts.client import FetchChanges, FixMemory
from invalidation_contracts.client.values import Answer, Observed
from invalidation_contracts.domains.catalog import is_fix_current
from invalidation_contracts.protocol import Action
from invalidation_contracts.server import (
    Domain,
    Provider,
    Route,
    TableChange,
    TableSpec,
    TrackedTables,
    Violation,
    policy,
)

from .common import Check, StudyResult, markdown_table, median, time_calls

NAME = "dependencies"
TITLE = "Membership dependencies: row precision and failure-path cost"
ORIGIN = "https://wallet.bench"
OPERATION = "POST /v1/pay"


class Pay(BaseModel):
    card: str


def _fix(request: Mapping[str, Any], listed: list[str]) -> Violation:
    return Violation(
        "USE_REGISTERED_CARD",
        f"card not registered; registered cards: {', '.join(listed)}",
        {"card": listed[0]},
        Action.REWRITE_VALUE,
        scope={"card": request["card"]},
    )


@policy("registered_cards")
def by_key_set(request: Mapping[str, Any], tables: TrackedTables) -> Violation | None:
    """Lists the cards by iterating the table: depends on its key set."""
    cards = tables["cards"]
    if request["card"] in cards:
        return None
    return _fix(request, sorted(cards))


@policy("registered_cards")
def by_every_row(request: Mapping[str, Any], tables: TrackedTables) -> Violation | None:
    """Lists the cards by reading every row: depends on the whole table."""
    cards = tables["cards"]
    if request["card"] in cards:
        return None
    return _fix(request, sorted(dict(cards.items())))


def wallet(check: Any, cards: int) -> Domain:
    rows = {f"card-{i:03d}": {"balance": 100 + i} for i in range(cards)}
    return Domain("wallet", {"cards": TableSpec(rows)}, [], [Route("/v1/pay", Pay, [check])])


def _settle(memory: FixMemory, provider: Provider, needs: tuple[Any, ...]) -> None:
    while needs:
        feeds = [
            (n, provider.registry.changes(n.since, epoch=n.epoch))
            for n in needs
            if isinstance(n, FetchChanges)
        ]
        needs = tuple(x for n, f in feeds for x in memory.answer(n, Answer.changes(f)).needs)


def _send(memory: FixMemory, provider: Provider, draft: dict[str, Any]) -> None:
    outcome = provider.handle(provider.domain.routes[0], draft)
    obs = memory.observe(
        ORIGIN, Observed(draft, outcome.status, outcome.body.to_wire()), operation=OPERATION
    )
    _settle(memory, provider, obs.needs)


def _event(rng: random.Random, rows: Mapping[str, Any], serial: int) -> TableChange:
    kind = rng.choices(["balance", "add", "remove"], weights=[6, 2, 2])[0]
    keys = sorted(rows)
    if kind == "add" or len(keys) < 3:
        key = f"card-{rng.randrange(1000):03d}x{serial}"
        return TableChange.patch({key: {"balance": rng.randrange(500)}})
    if kind == "remove":
        return TableChange.patch(delete=[rng.choice(keys)])
    key = rng.choice(keys)
    return TableChange.patch({key: {"balance": rng.randrange(500)}})


def _same_suggestion(
    provider: Provider, draft: dict[str, Any], message: str | None, state: Any
) -> bool:
    """Whether the server would now answer ``draft`` with the same suggestion, message included
    (the message is the list of valid keys the agent reads)."""
    found = provider.findings(provider.domain.routes[0], draft, state)
    return [f.violation.message for f in found] == [message]


def stream(check: Any, *, cards: int, drafts: int, events: int, seed: int) -> dict[str, int]:
    """Run the drift stream under one check; counts of correct and wrong evictions and misses."""
    domain = wallet(check, cards)
    provider = Provider(domain)
    route = domain.routes[0]
    memory = FixMemory("row")
    rng = random.Random(seed)
    draft_of = {f"other-{i}": {"card": f"other-{i}"} for i in range(drafts)}
    for draft in draft_of.values():
        _send(memory, provider, draft)
    counts = {"correct": 0, "wrong": 0, "missed": 0, "events": events, "wrong_by_value": 0}
    for serial in range(events):
        state = provider.registry.state
        before = {e.id: e for e in memory.entries(ORIGIN)}
        provider.registry.apply({"cards": _event(rng, state.tables["cards"].rows, serial)})
        after_state = provider.registry.state
        registered = next(iter(after_state.tables["cards"].rows))
        _send(memory, provider, {"card": registered})  # a success carries the stamps too
        live = {e.id for e in memory.entries(ORIGIN)}
        for entry_id, entry in before.items():
            draft = draft_of[str(entry.key.scope_fields["card"])]
            current = _same_suggestion(provider, draft, entry.suggestion.message, after_state)
            if entry_id not in live:
                counts["correct" if not current else "wrong"] += 1
                if is_fix_current(route, draft, entry.suggestion, after_state):
                    counts["wrong_by_value"] += 1
                _send(memory, provider, draft)
            elif not current:
                counts["missed"] += 1
    return counts


def failure_path(check: Any, *, cards: int, calls: int, rounds: int) -> list[float]:
    """Seconds per ``Provider.handle`` of a failing payment, one median per round."""
    domain = wallet(check, cards)
    provider = Provider(domain)
    route = domain.routes[0]
    body = {"card": "not-registered"}
    return [
        median(time_calls(lambda: provider.handle(route, body), repeats=calls))
        for _ in range(rounds)
    ]


def run(quick: bool = False, out_dir: Path | None = None) -> StudyResult:
    size = (
        {"cards": 8, "drafts": 5, "events": 20, "calls": 200, "rounds": 2}
        if quick
        else {"cards": 8, "drafts": 10, "events": 300, "calls": 2000, "rounds": 5}
    )
    stream_args = {k: size[k] for k in ("cards", "drafts", "events")}
    results = {
        "key set (membership)": stream(by_key_set, seed=0, **stream_args),
        "whole table (every row read)": stream(by_every_row, seed=0, **stream_args),
    }
    member_times: list[float] = []
    whole_times: list[float] = []
    for _ in range(size["rounds"]):  # alternate, so drift of the machine hits both alike
        member_times += failure_path(by_key_set, cards=size["cards"], calls=size["calls"], rounds=1)
        whole_times += failure_path(
            by_every_row, cards=size["cards"], calls=size["calls"], rounds=1
        )
    ratio = median(member_times) / median(whole_times)
    rows = []
    for name, c in results.items():
        evicted = c["correct"] + c["wrong"]
        stale = c["correct"] + c["missed"]
        rows.append(
            [
                name,
                str(c["correct"]),
                str(c["wrong"]),
                str(c["missed"]),
                f"{c['correct'] / evicted:.2f}" if evicted else "–",
                f"{c['correct'] / stale:.2f}" if stale else "–",
                f"{1 - c['wrong_by_value'] / evicted:.2f}" if evicted else "–",
            ]
        )
    membership = results["key set (membership)"]
    markdown = "\n".join(
        [
            f"{size['drafts']} cached fixes on a wallet of {size['cards']} cards, "
            f"{size['events']} drift events (seed 0; 60 % a balance change, 20 % a card added, "
            "20 % a card removed), row-level memory (A2D); every eviction judged by brute force "
            "(would the server now send the same suggestion for the fix's draft, its message — "
            "the list of registered cards — included?). The last column judges by the fix's "
            "value alone (`is_fix_current`: the first registered card), under which a card "
            "added after the first is a change the fix survives.",
            "",
            markdown_table(
                [
                    "Dependency",
                    "Correct",
                    "Wrong",
                    "Missed",
                    "Precision",
                    "Recall",
                    "Precision (value only)",
                ],
                rows,
            ),
            "",
            f"Failure path (`Provider.handle` of a failing payment, {size['calls']} calls × "
            f"{size['rounds']} rounds alternating): key-set tracking "
            f"{1e6 * median(member_times):.1f} µs against {1e6 * median(whole_times):.1f} µs "
            f"reading every row: **{ratio:.2f}×**.",
        ]
    )
    checks = [
        Check(
            "membership: no miss (recall 1.00)",
            f"{membership['missed']} missed",
            membership["missed"] == 0,
        ),
        Check(
            "membership: row precision 1.00",
            f"{membership['wrong']} wrong evictions",
            membership["wrong"] == 0,
        ),
    ]
    return StudyResult(NAME, TITLE, markdown, checks, [], {"streams": results, "ratio": ratio})
