"""The payments backend behind ``POST /v1/subscriptions``: a local SQLite ledger by default, Stripe
only when explicitly configured.

Selection (:func:`backend_from_env`): ``INVALIDATION_CONTRACTS_PAYMENTS=ledger`` (the default) with
``INVALIDATION_CONTRACTS_LEDGER=<path>`` (default ``:memory:``), or
``INVALIDATION_CONTRACTS_PAYMENTS=stripe`` with ``STRIPE_API_KEY`` set and the ``stripe`` package
installed (it is not a dependency of this project).
"""

from __future__ import annotations

import dataclasses
import secrets
import sqlite3
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from invalidation_contracts._extras import MissingExtra, require_extra

PAYMENTS_ENV = "INVALIDATION_CONTRACTS_PAYMENTS"
LEDGER_ENV = "INVALIDATION_CONTRACTS_LEDGER"
STRIPE_KEY_ENV = "STRIPE_API_KEY"


class PaymentsError(Exception):
    """A charge that cannot be made (for example an idempotency key reused for another charge)."""


class PaymentsConfigError(PaymentsError):
    """The configured backend cannot be used (missing SDK, missing key, unknown backend)."""


@dataclass(frozen=True, slots=True)
class ChargeResult:
    """One charge as the backend recorded it; ``replayed`` is True when the key was seen before."""

    charge_id: str
    customer: str
    amount_cents: int
    currency: str
    token: str
    idempotency_key: str
    status: str = "succeeded"
    replayed: bool = False


@runtime_checkable
class PaymentsBackend(Protocol):
    """Takes a payment; the same ``idempotency_key`` never charges twice."""

    name: str

    def charge(
        self, customer: str, amount_cents: int, currency: str, token: str, idempotency_key: str
    ) -> ChargeResult: ...


_SCHEMA = """
CREATE TABLE IF NOT EXISTS charges (
    charge_id TEXT PRIMARY KEY,
    idempotency_key TEXT NOT NULL UNIQUE,
    customer TEXT NOT NULL,
    amount_cents INTEGER NOT NULL,
    currency TEXT NOT NULL,
    token TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
)
"""


class LedgerBackend:
    """A local ledger in SQLite (a file, or ``":memory:"``): every charge is a row, keyed by its
    idempotency key. Safe to share between threads."""

    name = "ledger"

    def __init__(self, path: str = ":memory:") -> None:
        self.path = str(path)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        if self.path != ":memory:":
            self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(_SCHEMA)

    def charge(
        self, customer: str, amount_cents: int, currency: str, token: str, idempotency_key: str
    ) -> ChargeResult:
        """Record the charge, or return the one already recorded under ``idempotency_key``."""
        wanted = (customer, amount_cents, currency, token)
        with self._lock:
            existing = self._find(idempotency_key)
            if existing is not None:
                if (
                    existing.customer,
                    existing.amount_cents,
                    existing.currency,
                    existing.token,
                ) != wanted:
                    raise PaymentsError(
                        f"idempotency key {idempotency_key!r} "
                        "was already used for a different charge"
                    )
                return dataclasses.replace(existing, replayed=True)
            result = ChargeResult(
                charge_id=f"ch_{secrets.token_hex(12)}",
                customer=customer,
                amount_cents=amount_cents,
                currency=currency,
                token=token,
                idempotency_key=idempotency_key,
            )
            self._db.execute(
                "INSERT INTO charges"
                " (charge_id, idempotency_key, customer, amount_cents, currency, token, status)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    result.charge_id,
                    idempotency_key,
                    customer,
                    amount_cents,
                    currency,
                    token,
                    result.status,
                ),
            )
            return result

    def charges(self) -> list[ChargeResult]:
        """Every recorded charge, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT charge_id, customer, amount_cents, currency, token, idempotency_key, status"
                " FROM charges ORDER BY rowid"
            ).fetchall()
        return [ChargeResult(*row) for row in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _find(self, idempotency_key: str) -> ChargeResult | None:
        row = self._db.execute(
            "SELECT charge_id, customer, amount_cents, currency, token, idempotency_key, status"
            " FROM charges WHERE idempotency_key = ?",
            (idempotency_key,),
        ).fetchone()
        return ChargeResult(*row) if row else None


class StripeBackend:
    """Charges through Stripe PaymentIntents (confirmed off-session). Needs the ``stripe`` SDK,
    imported only when this backend is built."""

    name = "stripe"

    def __init__(self, api_key: str) -> None:
        if not api_key:
            raise PaymentsConfigError(f"the Stripe backend needs an API key (set {STRIPE_KEY_ENV})")
        try:
            require_extra("stripe", "stripe")
        except MissingExtra as exc:
            raise PaymentsConfigError(f"the Stripe backend needs the SDK: {exc}") from exc
        import stripe  # type: ignore[import-not-found,unused-ignore]

        self._stripe = stripe
        self._error = getattr(stripe, "StripeError", None) or stripe.error.StripeError
        self._api_key = api_key

    def charge(
        self, customer: str, amount_cents: int, currency: str, token: str, idempotency_key: str
    ) -> ChargeResult:
        try:
            intent = self._stripe.PaymentIntent.create(
                api_key=self._api_key,
                idempotency_key=idempotency_key,
                amount=amount_cents,
                currency=currency,
                customer=customer,
                payment_method=token,
                confirm=True,
                off_session=True,
            )
        except self._error as exc:
            raise PaymentsError(
                f"Stripe refused the charge: {getattr(exc, 'user_message', None) or exc}"
            ) from exc
        return ChargeResult(
            charge_id=intent["id"],
            customer=customer,
            amount_cents=amount_cents,
            currency=currency,
            token=token,
            idempotency_key=idempotency_key,
            status=intent["status"],
        )


def backend_from_env(environ: Mapping[str, str]) -> PaymentsBackend:
    """The backend ``environ`` selects; the in-memory ledger when nothing is set."""
    choice = environ.get(PAYMENTS_ENV, "ledger").strip().lower() or "ledger"
    if choice == "ledger":
        return LedgerBackend(environ.get(LEDGER_ENV, ":memory:"))
    if choice == "stripe":
        return StripeBackend(environ.get(STRIPE_KEY_ENV, ""))
    raise PaymentsConfigError(
        f"{PAYMENTS_ENV}={choice!r} is not a payments backend; use 'ledger' or 'stripe'"
    )
