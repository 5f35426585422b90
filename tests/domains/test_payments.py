"""The payments backends: the SQLite ledger by default, Stripe only when configured."""

import sys
import types

import pytest

from invalidation_contracts.domains.acme_billing import build_domain
from invalidation_contracts.domains.acme_billing.payments import (
    LedgerBackend,
    PaymentsBackend,
    PaymentsConfigError,
    PaymentsError,
    StripeBackend,
    backend_from_env,
)

CHARGE = {
    "customer": "cus_a",
    "amount_cents": 2900,
    "currency": "usd",
    "token": "acme_pm_visa_corporate",
}


def test_ledger_records_each_charge():
    ledger = LedgerBackend()
    first = ledger.charge(**CHARGE, idempotency_key="k1")
    second = ledger.charge(**{**CHARGE, "amount_cents": 4900}, idempotency_key="k2")
    assert [c.charge_id for c in ledger.charges()] == [first.charge_id, second.charge_id]
    assert ledger.charges()[1].amount_cents == 4900 and first.charge_id != second.charge_id


def test_ledger_honours_the_idempotency_key():
    ledger = LedgerBackend()
    first = ledger.charge(**CHARGE, idempotency_key="k1")
    again = ledger.charge(**CHARGE, idempotency_key="k1")
    assert again.charge_id == first.charge_id and again.replayed and not first.replayed
    assert len(ledger.charges()) == 1


def test_ledger_refuses_a_key_reused_for_a_different_charge():
    ledger = LedgerBackend()
    ledger.charge(**CHARGE, idempotency_key="k1")
    with pytest.raises(PaymentsError, match="already used"):
        ledger.charge(**{**CHARGE, "amount_cents": 1}, idempotency_key="k1")
    assert len(ledger.charges()) == 1


def test_a_file_ledger_keeps_charges_across_connections(tmp_path):
    path = tmp_path / "ledger.db"
    LedgerBackend(str(path)).charge(**CHARGE, idempotency_key="k1")
    reopened = LedgerBackend(str(path))
    assert reopened.charge(**CHARGE, idempotency_key="k1").replayed


def test_backend_from_env_defaults_to_an_in_memory_ledger():
    backend = backend_from_env({})
    assert isinstance(backend, LedgerBackend) and backend.path == ":memory:"
    assert isinstance(backend, PaymentsBackend)


def test_backend_from_env_opens_the_configured_ledger_file(tmp_path):
    path = str(tmp_path / "l.db")
    assert backend_from_env({"INVALIDATION_CONTRACTS_LEDGER": path}).path == path


def test_an_unknown_backend_is_a_clear_error():
    with pytest.raises(PaymentsConfigError, match="'paypal' is not a payments backend"):
        backend_from_env({"INVALIDATION_CONTRACTS_PAYMENTS": "paypal"})


def test_stripe_is_never_selected_without_the_explicit_option():
    assert isinstance(backend_from_env({"STRIPE_API_KEY": "sk_test_x"}), LedgerBackend)


def test_stripe_without_the_sdk_fails_with_a_clear_message(monkeypatch):
    monkeypatch.setitem(sys.modules, "stripe", None)
    with pytest.raises(PaymentsConfigError, match=r"pip install '\.\[stripe\]'"):
        backend_from_env(
            {"INVALIDATION_CONTRACTS_PAYMENTS": "stripe", "STRIPE_API_KEY": "sk_test_x"}
        )


def test_stripe_without_a_key_fails_with_a_clear_message():
    with pytest.raises(PaymentsConfigError, match="STRIPE_API_KEY"):
        StripeBackend("")


class FakeStripeError(Exception):
    user_message = "Your card was declined."


def fake_stripe(calls, fail=False):
    def create(**params):
        calls.append(params)
        if fail:
            raise FakeStripeError("declined")
        return {"id": "pi_123", "status": "succeeded"}

    return types.SimpleNamespace(
        PaymentIntent=types.SimpleNamespace(create=create), StripeError=FakeStripeError
    )


def test_stripe_charges_a_confirmed_payment_intent_with_the_idempotency_key(monkeypatch):
    calls = []
    monkeypatch.setitem(sys.modules, "stripe", fake_stripe(calls))
    result = StripeBackend("sk_test_x").charge(**CHARGE, idempotency_key="k1")
    assert (result.charge_id, result.status) == ("pi_123", "succeeded")
    (params,) = calls
    assert (
        params["idempotency_key"] == "k1"
        and params["api_key"] == "sk_test_x"
        and params["confirm"] is True
    )
    assert (params["amount"], params["currency"], params["payment_method"]) == (
        2900,
        "usd",
        "acme_pm_visa_corporate",
    )


def test_a_stripe_refusal_becomes_a_payments_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "stripe", fake_stripe([], fail=True))
    with pytest.raises(PaymentsError, match="declined"):
        StripeBackend("sk_test_x").charge(**CHARGE, idempotency_key="k1")


def test_the_domain_charges_through_the_backend_it_is_given():
    ledger = LedgerBackend()
    domain = build_domain(payments=ledger)
    assert domain.extras["payments"] is ledger
