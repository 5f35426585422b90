"""Existing validation code run as it is (``wrapped_policy``): reads tracked, writes refused with a
``PolicyError`` naming the place, messages mapped to suggestions by ``ErrorRule``s."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from pydantic import BaseModel

from invalidation_contracts.protocol import Action
from invalidation_contracts.server import (
    Domain,
    ErrorRule,
    PolicyError,
    Provider,
    Route,
    TableSpec,
    TrackedTables,
    policy,
    wrapped_policy,
)

CARDS = {"c1": {"balance": 5}, "c2": {"balance": 9}}
CARD_RULE = ErrorRule(
    r"registered cards: (?P<cards>.+)$",
    "USE_REGISTERED_CARD",
    Action.REWRITE_VALUE,
    {"card": "{cards[0]}"},
    scope=["card"],
)


class Pay(BaseModel):
    card: str


def provider(check: Any) -> tuple[Provider, Route]:
    route = Route("/v1/pay", Pay, [check])
    return Provider(Domain("wallet", {"cards": TableSpec(CARDS)}, [], [route])), route


def wrap(function: Any, **options: Any) -> Any:
    return wrapped_policy(
        "legacy", function, tables={"cards": "cards"}, errors=[CARD_RULE], **options
    )


def listing(request: dict[str, Any], cards: Mapping[str, Any]) -> None:
    if request["card"] not in cards:
        raise ValueError(f"card not registered; registered cards: {', '.join(sorted(cards))}")


def test_a_message_becomes_the_suggestion_its_rule_describes_keyed_on_the_key_set():
    prov, route = provider(wrap(listing))
    [fix] = prov.handle(route, {"card": "c9"}).body.to_wire()["recovery_feedback"]["suggestions"]
    assert (fix["type"], fix["parameters"], fix["scope"]) == (
        "USE_REGISTERED_CARD",
        {"card": "c1"},
        {"card": "c9"},
    )
    assert fix["tables"] == [{"table": "cards", "version": "1.0.0", "membership": {"keys": ["c9"]}}]


def test_code_that_passes_draws_no_suggestion():
    prov, route = provider(wrap(listing))
    assert prov.handle(route, {"card": "c1"}).status == 200


@pytest.mark.parametrize(
    "write, where",
    [
        (lambda cards: cards["c1"].__setitem__("balance", 0), "key 'c1', field 'balance'"),
        (lambda cards: cards.__setitem__("c3", {}), "key 'c3'"),
        (lambda cards: cards.pop("c1"), "key 'c1', pop"),
        (lambda cards: cards["c2"].update(balance=0), "key 'c2', field '*', update"),
    ],
    ids=["row-field", "new-key", "pop", "row-update"],
)
def test_a_write_to_a_tracked_table_is_a_policy_error_naming_table_and_key(write, where):
    def debit(request: dict[str, Any], cards: Mapping[str, Any]) -> None:
        cards["c1"]
        write(cards)

    prov, route = provider(wrap(debit))
    with pytest.raises(PolicyError) as caught:
        prov.handle(route, {"card": "c1"})
    assert caught.value.policy == "legacy" and caught.value.table == "cards"
    assert f"writes to table 'cards' ({where})" in str(caught.value)


def test_copy_on_write_runs_the_write_on_a_copy_the_next_call_does_not_see():
    seen = []

    def debit(request: dict[str, Any], cards: Mapping[str, Any]) -> None:
        card = cards[request["card"]]
        seen.append(card["balance"])
        card["balance"] -= 5
        if card["balance"] < 0:
            raise ValueError("card not registered; registered cards: c2")

    prov, route = provider(wrap(debit, copy_on_write=True))
    assert [prov.handle(route, {"card": "c1"}).status for _ in range(2)] == [200, 200]
    assert seen == [5, 5]
    assert dict(prov.registry.state.tables["cards"].rows["c1"]) == {"balance": 5}


def test_a_message_no_rule_matches_is_a_policy_error_quoting_it():
    def odd(request: dict[str, Any], cards: Mapping[str, Any]) -> None:
        raise ValueError("insufficient funds")

    prov, route = provider(wrap(odd))
    with pytest.raises(PolicyError, match="raised ValueError\\('insufficient funds'\\)"):
        prov.handle(route, {"card": "c1"})


def test_an_unmatched_message_may_be_a_refusal_the_client_does_not_keep():
    def odd(request: dict[str, Any], cards: Mapping[str, Any]) -> None:
        cards.get(request["card"])
        raise ValueError("insufficient funds")

    prov, route = provider(wrap(odd, unmatched="PAYMENT_REFUSED"))
    [fix] = prov.handle(route, {"card": "c1"}).body.to_wire()["recovery_feedback"]["suggestions"]
    assert (fix["type"], fix["cache_hint"], fix["message"]) == (
        "PAYMENT_REFUSED",
        "no-store",
        "insufficient funds",
    )


def test_an_exception_outside_raises_propagates_as_the_provider_bug_it_is():
    def broken(request: dict[str, Any], cards: Mapping[str, Any]) -> None:
        raise KeyError("nope")

    prov, route = provider(wrap(broken))
    with pytest.raises(KeyError):
        prov.handle(route, {"card": "c1"})


def test_a_template_naming_an_unknown_group_is_a_policy_error_naming_it():
    rule = ErrorRule(r"registered", "FIX", Action.REWRITE_VALUE, {"card": "{cards}"})
    check = wrapped_policy("legacy", listing, tables={"cards": "cards"}, errors=[rule])
    prov, route = provider(check)
    with pytest.raises(PolicyError, match="template names 'cards'"):
        prov.handle(route, {"card": "c9"})


def test_an_origin_wide_rule_with_a_scope_is_refused_when_declared():
    with pytest.raises(ValueError, match="origin_wide with scope \\['card'\\]"):
        ErrorRule("x", "FIX", Action.REWRITE_VALUE, {}, scope=["card"], origin_wide=True)


def test_a_table_mapped_to_a_parameter_the_function_lacks_is_refused_when_wrapped():
    with pytest.raises(ValueError, match="listing has no parameter 'wallets'"):
        wrapped_policy("legacy", listing, tables={"wallets": "cards"}, errors=[])


def test_a_native_policy_writing_to_a_row_it_read_gets_a_policy_error_naming_the_table():
    @policy("debit")
    def debit(request: Mapping[str, Any], tables: TrackedTables) -> None:
        row = tables["cards"][request["card"]]
        row["balance"] = 0  # type: ignore[index]

    prov, route = provider(debit)
    with pytest.raises(PolicyError) as caught:
        prov.handle(route, {"card": "c2"})
    assert (caught.value.policy, caught.value.table) == ("debit", "cards")
    assert "writes to a row of table 'cards' (the last row it read: 'c2')" in str(caught.value)


def test_a_native_policy_writing_to_a_table_gets_a_policy_error_naming_table_and_key():
    @policy("register")
    def register(request: Mapping[str, Any], tables: TrackedTables) -> None:
        tables["cards"][request["card"]] = {"balance": 0}  # type: ignore[index]

    prov, route = provider(register)
    with pytest.raises(PolicyError, match="writes to table 'cards' \\(key 'c7'\\)"):
        prov.handle(route, {"card": "c7"})
