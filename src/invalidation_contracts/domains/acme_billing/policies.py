"""Acme billing's five policies. Each reads tables and rules only through the tracking view, so
every suggestion's dependency vector is exactly what the policy consulted.

Rule triples gate the constraints: a relation that is not declared is not enforced, which is what
the rules stream (``acme_rules``) drifts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from invalidation_contracts.protocol import Action
from invalidation_contracts.server import TrackedTables, Violation, policy

ASSIGNED_BY_CSM = ("required_promo_policy", "active_csm_codes", "assigned_by_csm")
REQUIRES_RECOGNITION = ("active_csm_codes", "promo_eligibility", "requires_recognition")
SETTLES_UNDER = ("promo_eligibility", "funding_type_policy", "settles_under")
REPLACED_BY = ("token_funding_map", "recommended_credit_token", "replaced_by")

ADD_REQUIRED_PROMO_CODE = "ADD_REQUIRED_PROMO_CODE"
PROMO_CODE_UNAVAILABLE = "PROMO_CODE_UNAVAILABLE"
USE_REQUIRED_FUNDING_TYPE = "USE_REQUIRED_FUNDING_TYPE"
ROUND_AMOUNT_TO_WHOLE_UNITS = "ROUND_AMOUNT_TO_WHOLE_UNITS"
REMOVE_UNRECOGNIZED_PROMO_CODE = "REMOVE_UNRECOGNIZED_PROMO_CODE"
REMOVE_INELIGIBLE_PROMO_CODE = "REMOVE_INELIGIBLE_PROMO_CODE"


@policy("required_promo_policy")
def required_promo(request: Mapping[str, Any], tables: TrackedTables) -> Violation | None:
    """A plan governed by a CSM must carry the code its CSM assigned (an ``add_field`` hint).

    Enforced only while ``assigned_by_csm`` is declared; with ``requires_recognition`` declared the
    assigned code must also be known to ``promo_eligibility``.
    """
    plan = request["plan"]
    requirement = tables["required_promo_policy"].get(plan)
    if not requirement or not requirement.get("requires_csm_code"):
        return None
    if not tables.rules.declares(*ASSIGNED_BY_CSM):
        return None
    assigned = tables["active_csm_codes"].get(plan)
    code = assigned.get("code") if assigned else None
    recognized = isinstance(code, str)
    for rule in tables.rules.find(*REQUIRES_RECOGNITION):
        recognized = recognized and all(
            target in tables["promo_eligibility"] for target in rule.targets(plan, assigned)
        )
    if not recognized:
        return Violation(
            PROMO_CODE_UNAVAILABLE,
            f"plan {plan} needs a promotional code from its customer success manager, and none is "
            "currently assigned and recognized; ask the account's CSM",
            {},
            Action.ADD_FIELD,
            scope={"plan": plan},
            no_store=True,
        )
    if request.get("promo_code") == code:
        return None
    return Violation(
        ADD_REQUIRED_PROMO_CODE,
        f"plan {plan} requires the promotional code its customer success manager assigned",
        {"promo_code": code},
        Action.ADD_FIELD,
        scope={"plan": plan},
        table="active_csm_codes",
    )


@policy("funding_type_policy")
def funding_type(request: Mapping[str, Any], tables: TrackedTables) -> Violation | None:
    """A plan that requires credit, paid with a non-credit token, must use the recommended credit
    token of the token's network (a ``conditional_rewrite``: it holds only for that token).

    The fix is scoped by the plan and the token: the plan decides whether it is needed at all
    (``funding_type_policy``), the token which credit token replaces it. Scoped by the token alone
    it would be served to a plan that accepts the token as it is (SPEC §9: an entry is served to
    every draft whose fields equal its scope), and no scope the wire can state names "every plan
    that requires credit"; docs/decisions.md, "The funding fix is scoped by plan and token".
    """
    plan, token = request["plan"], request["payment_method_token"]
    requirement = tables["funding_type_policy"].get(plan)
    if not requirement or requirement.get("required_funding") != "credit":
        return None
    funding = tables["token_funding_map"].get(token)
    if funding is not None and funding.get("funding") == "credit":
        return None
    for rule in tables.rules.find(*REPLACED_BY):
        for key in rule.targets(token, funding or {}):
            recommended = tables["recommended_credit_token"].get(key)
            if recommended and isinstance(recommended.get("token"), str):
                return Violation(
                    USE_REQUIRED_FUNDING_TYPE,
                    f"plan {plan} must be paid with a credit card; this payment method is "
                    f"{funding.get('funding') if funding else 'unknown'}",
                    {"payment_method_token": recommended["token"]},
                    Action.CONDITIONAL_REWRITE,
                    scope={"plan": plan, "payment_method_token": token},
                    precondition={"payment_method_token": token},
                )
    return Violation(
        USE_REQUIRED_FUNDING_TYPE,
        f"plan {plan} must be paid with a credit card, and no replacement is on file for this "
        "payment method",
        {},
        Action.CONDITIONAL_REWRITE,
        scope={"plan": plan, "payment_method_token": token},
        no_store=True,
    )


@policy("amount_rounding_policy")
def amount_rounding(request: Mapping[str, Any], tables: TrackedTables) -> Violation | None:
    """Acme charges whole currency units: round half up (at least one unit). Reads no table, so
    the hint is ``recompute``."""
    amount = request["amount_cents"]
    if amount % 100 == 0:
        return None
    rounded = max(100, (amount + 50) // 100 * 100)
    return Violation(
        ROUND_AMOUNT_TO_WHOLE_UNITS,
        "Acme bills whole currency units; round the amount",
        {"amount_cents": rounded},
        Action.REWRITE_VALUE,
        scope={"amount_cents": amount},
    )


@policy("promo_recognition_policy")
def promo_recognition(request: Mapping[str, Any], tables: TrackedTables) -> Violation | None:
    """A promotional code must be one Acme recognizes; otherwise send the request without it.

    CSM-channel codes are recognized only while ``assigned_by_csm`` is declared.
    """
    code = request.get("promo_code")
    if code is None:
        return None
    row = tables["promo_eligibility"].get(code)
    if row is None:
        reason = f"promotional code {code} is not recognized"
    elif row.get("channel") == "csm" and not tables.rules.declares(*ASSIGNED_BY_CSM):
        reason = f"promotional code {code} is a CSM code, and CSM assignments are not in force"
    else:
        return None
    return _drop_code(REMOVE_UNRECOGNIZED_PROMO_CODE, reason, request)


@policy("promo_plan_policy")
def promo_plan(request: Mapping[str, Any], tables: TrackedTables) -> Violation | None:
    """While ``settles_under`` is declared, a recognized code is redeemable only on the plans it
    lists; on any other plan, send the request without it."""
    code = request.get("promo_code")
    if code is None:
        return None
    rules = tables.rules.find(*SETTLES_UNDER)
    if not rules:
        return None
    row = tables["promo_eligibility"].get(code)
    if row is None or all(request["plan"] in rule.targets(code, row) for rule in rules):
        return None
    reason = f"promotional code {code} cannot be redeemed on plan {request['plan']}"
    return _drop_code(REMOVE_INELIGIBLE_PROMO_CODE, reason, request)


def _drop_code(fix_type: str, reason: str, request: Mapping[str, Any]) -> Violation:
    code = request["promo_code"]
    return Violation(
        fix_type,
        reason + "; send the request without it",
        {"promo_code": None},
        Action.REWRITE_VALUE,
        scope={"plan": request["plan"], "promo_code": code},
        precondition={"promo_code": code},
    )


POLICIES = (required_promo, funding_type, amount_rounding, promo_recognition, promo_plan)
