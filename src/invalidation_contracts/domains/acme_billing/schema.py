"""The request body of ``POST /v1/subscriptions``, and the result of a success."""

from __future__ import annotations

from pydantic import BaseModel, Field


class SubscriptionRequest(BaseModel):
    """Subscribe a customer to a plan and take the first payment."""

    customer: str = Field(min_length=1, description="The customer id the task names.")
    plan: str = Field(min_length=1, description="The plan id the task names.")
    payment_method_token: str = Field(
        min_length=1, description="The stored payment method to charge."
    )
    amount_cents: int = Field(gt=0, le=100_000_000, description="The first charge, in minor units.")
    currency: str = Field(
        pattern=r"^[a-z]{3}$", description="ISO 4217 currency code, three lower-case letters."
    )
    promo_code: str | None = Field(
        default=None, description="A promotional code, when the plan takes one."
    )


class Subscription(BaseModel):
    """A subscription taken, and its first charge."""

    subscription_id: str
    charge_id: str
    amount_cents: int
    currency: str
    plan: str


#: The request fields a client may patch from a cached fix. The payment method is the customer's
#: instrument, not the client's to swap from memory (SPEC §10.4: identity fields stay outside).
PATCHABLE = frozenset({"promo_code", "amount_cents"})
