"""The compliance preflight (paper §6.1): does this planner apply known-valid fixes first try?

Each probe is a synthetic task with one known-valid fix placed in the memory block. The planner
gets one attempt; it complies when its request carries the fix's parameters verbatim. The report
gives the first-try compliance per action type and the model ids the vendor served, so it can be
recorded in a run's metadata before any memory system is built for the model.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, computed_field

from ..client.prompting import consumption
from ..protocol.canonical import canonical_json
from ..protocol.levels import Level
from ..protocol.models import Action, CacheHint, Suggestion
from .base import Planner, PlanningContext, Usage
from .errors import PlannerResponseError

if TYPE_CHECKING:
    from rich.table import Table

BASE_SYSTEM_PROMPT = (
    "You plan the JSON body of one HTTP request to an API on behalf of a user. Use the task's "
    "values, and apply the fixes listed in the memory block: the API rejected requests without "
    "them."
)


@dataclass(frozen=True, slots=True)
class Probe:
    """One synthetic task and the known-valid fix the memory block carries for it."""

    name: str
    task: str
    task_fields: dict[str, Any]
    fix: Suggestion

    @property
    def action(self) -> Action:
        return self.fix.action

    def request_schema(self) -> dict[str, Any]:
        """A request schema naming the task's fields (required) and the fix's fields."""
        values = {**self.task_fields, **self.fix.parameters}
        properties = {key: {"type": _json_type(value)} for key, value in sorted(values.items())}
        return {
            "type": "object",
            "properties": properties,
            "required": sorted(self.task_fields),
            "additionalProperties": False,
        }

    def context(self, *, level: Level, seed: int, episode: int) -> PlanningContext:
        """What a planner sees for this probe: first attempt, the fix in memory at ``level``."""
        shown = consumption(BASE_SYSTEM_PROMPT, [self.fix], level, self.task_fields)
        return PlanningContext(
            system_prompt=shown.system_prompt,
            task=self.task,
            task_fields=dict(self.task_fields),
            request_schema=self.request_schema(),
            memory_block=shown.memory_block,
            memory=shown.memory,
            amended_input=shown.amended_input,
            seed=seed,
            episode=episode,
            attempt=1,
        )


def _fix(type_: str, action: Action, parameters: dict[str, Any], message: str) -> Suggestion:
    return Suggestion(
        type=type_,
        parameters=parameters,
        action=action,
        message=message,
        cache_hint=CacheHint.CACHEABLE,
    )


#: The built-in probes: three tasks per action type.
PROBES: tuple[Probe, ...] = (
    Probe(
        "promo-code",
        "Create a subscription for customer cus_1042 on the enterprise_annual plan, paid by card.",
        {"customer_id": "cus_1042", "plan": "enterprise_annual", "payment_method": "card"},
        _fix(
            "ADD_REQUIRED_PROMO_CODE",
            Action.ADD_FIELD,
            {"promo_code": "ENTQ3-7731"},
            "Enterprise annual plans require the current promotional code.",
        ),
    ),
    Probe(
        "customs-code",
        "Book a shipment of 3 parcels of leather handbags from Lyon to Porto.",
        {"origin": "Lyon", "destination": "Porto", "parcels": 3, "contents": "leather handbags"},
        _fix(
            "ADD_REQUIRED_CUSTOMS_CODE",
            Action.ADD_FIELD,
            {"customs_code": "HS-4202.21"},
            "Leather goods need a harmonised customs code.",
        ),
    ),
    Probe(
        "data-region",
        "Open a storage bucket named audit-logs for tenant acme-eu.",
        {"bucket": "audit-logs", "tenant": "acme-eu"},
        _fix(
            "ADD_REQUIRED_DATA_REGION",
            Action.ADD_FIELD,
            {"data_region": "eu-central-2", "residency_attested": True},
            "EU tenants must pin a data region and attest residency.",
        ),
    ),
    Probe(
        "gluten-free-flour",
        "Convert the pancake recipe for a celiac guest; it uses wheat_flour.",
        {"recipe": "pancakes", "diet": "celiac", "flour": "wheat_flour"},
        _fix(
            "USE_GLUTEN_FREE_FLOUR",
            Action.REWRITE_VALUE,
            {"flour": "rice_flour"},
            "wheat_flour is not allowed on a celiac diet.",
        ),
    ),
    Probe(
        "current-plan-id",
        "Upgrade account acc_77 to the pro_monthly plan.",
        {"account_id": "acc_77", "plan": "pro_monthly"},
        _fix(
            "USE_CURRENT_PLAN_ID",
            Action.REWRITE_VALUE,
            {"plan": "pro_monthly_2024"},
            "pro_monthly was retired; use its current id.",
        ),
    ),
    Probe(
        "active-warehouse",
        "Ship order ord_5120 from warehouse wh_south with standard delivery.",
        {"order_id": "ord_5120", "warehouse": "wh_south", "delivery": "standard"},
        _fix(
            "USE_ACTIVE_WAREHOUSE",
            Action.REWRITE_VALUE,
            {"warehouse": "wh_south_2"},
            "wh_south is closed; orders ship from its replacement.",
        ),
    ),
    Probe(
        "funding-type",
        "Pay invoice inv_88 of 1200 EUR with the card token tok_visa_4242.",
        {
            "invoice_id": "inv_88",
            "amount": 1200,
            "currency": "EUR",
            "payment_token": "tok_visa_4242",
        },
        _fix(
            "USE_REQUIRED_FUNDING_TYPE",
            Action.CONDITIONAL_REWRITE,
            {"payment_token": "tok_sepa_debit_eu"},
            "EUR payments above 1000 must be funded by SEPA debit.",
        ),
    ),
    Probe(
        "tax-regime",
        "Invoice customer cus_209 in Northern Ireland 300 GBP under the uk tax regime.",
        {"customer_id": "cus_209", "amount": 300, "currency": "GBP", "tax_regime": "uk"},
        _fix(
            "USE_REGIONAL_TAX_REGIME",
            Action.CONDITIONAL_REWRITE,
            {"tax_regime": "uk_ni_eu_goods"},
            "Goods invoiced to Northern Ireland follow the EU goods regime.",
        ),
    ),
    Probe(
        "cold-chain-carrier",
        "Send 2 boxes of vaccines from Basel to Vienna with carrier road_std.",
        {"origin": "Basel", "destination": "Vienna", "boxes": 2, "carrier": "road_std"},
        _fix(
            "USE_COLD_CHAIN_CARRIER",
            Action.CONDITIONAL_REWRITE,
            {"carrier": "road_cold_2to8", "temperature_log": "required"},
            "Vaccines must travel on a 2-8 °C cold-chain carrier with a temperature log.",
        ),
    ),
)


class ActionCompliance(BaseModel):
    """First-try compliance for one action type."""

    model_config = ConfigDict(frozen=True)

    action: str
    injected: int
    compliant: int
    errors: int = 0
    """Probes whose reply was not a request body (counted as not compliant)."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def rate(self) -> float:
        return self.compliant / self.injected if self.injected else 0.0


class ProbeResult(BaseModel):
    """One probe's outcome."""

    model_config = ConfigDict(frozen=True)

    probe: str
    action: str
    episode: int
    compliant: bool
    request: dict[str, Any] | None = None
    served_model: str | None = None
    error: str | None = None


class TokenTotals(BaseModel):
    """Tokens of every answered probe, and how they were counted (see :attr:`Usage.label`)."""

    model_config = ConfigDict(frozen=True)

    input_tokens: int = 0
    output_tokens: int = 0
    estimated: bool = False
    reported_by_server: bool = False

    @computed_field  # type: ignore[prop-decorator]
    @property
    def label(self) -> str:
        return Usage(0, 0, self.estimated, self.reported_by_server).label


class PreflightReport(BaseModel):
    """The preflight of one planner; ``to_json()`` is what a run's metadata records."""

    model_config = ConfigDict(frozen=True)

    planner: str
    simulated: bool
    requested_model: str | None
    served_model: str | None
    """The model id the vendor reported most often (None when no probe got an answer)."""
    served_models: list[str]
    """Every distinct served model id, sorted."""
    l2: bool
    seed: int
    actions: list[ActionCompliance]
    probes: list[ProbeResult]
    usage: TokenTotals

    def rate(self, action: Action | str) -> float:
        """First-try compliance for ``action``."""
        name = Action(action).value
        return next(a.rate for a in self.actions if a.action == name)

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return self.model_dump(mode="json")


def carries_fix(request: Mapping[str, Any], fix: Suggestion) -> bool:
    """True when ``request`` holds every parameter of ``fix`` with exactly its value."""
    return all(
        key in request and canonical_json(request[key]) == canonical_json(value)
        for key, value in fix.parameters.items()
    )


async def preflight(
    planner: Planner,
    *,
    seed: int = 0,
    rounds: int = 1,
    l2: bool = True,
    probes: Sequence[Probe] = PROBES,
    concurrency: int = 4,
) -> PreflightReport:
    """Run every probe ``rounds`` times (one first attempt each) and report compliance per action.

    ``l2`` probes at the harness's consumption level (L3, which carries the L2 sentence); without
    it, at L1 (the fix as a plain instruction list, no merge-verbatim sentence).
    A reply that is not a request body counts as not compliant; a failed API call propagates once
    every probe has settled, so no call is left running.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    level = Level.AMENDED_INPUT if l2 else Level.STRUCTURED
    jobs = [
        (probe, round_ * len(probes) + index)
        for round_ in range(rounds)
        for index, probe in enumerate(probes)
    ]
    gate = asyncio.Semaphore(max(1, concurrency))

    async def run(probe: Probe, episode: int) -> tuple[ProbeResult, Usage | None]:
        context = probe.context(level=level, seed=seed, episode=episode)
        async with gate:
            try:
                plan = await planner.plan(context)
            except PlannerResponseError as exc:
                failed = ProbeResult(
                    probe=probe.name,
                    action=probe.action.value,
                    episode=episode,
                    compliant=False,
                    error=str(exc),
                )
                return failed, None
        result = ProbeResult(
            probe=probe.name,
            action=probe.action.value,
            episode=episode,
            compliant=carries_fix(plan.request, probe.fix),
            request=plan.request,
            served_model=plan.served_model,
        )
        return result, plan.usage

    settled = await asyncio.gather(
        *(run(probe, episode) for probe, episode in jobs), return_exceptions=True
    )
    failure = next((o for o in settled if isinstance(o, BaseException)), None)
    if failure is not None:
        raise failure
    outcomes = [o for o in settled if not isinstance(o, BaseException)]
    results = [result for result, _ in outcomes]
    usages = [usage for _, usage in outcomes if usage is not None]
    total = sum(usages, Usage(0, 0, estimated=False))
    served = Counter(r.served_model for r in results if r.served_model)
    return PreflightReport(
        planner=planner.name,
        simulated=planner.simulated,
        requested_model=getattr(planner, "requested_model", None),
        served_model=served.most_common(1)[0][0] if served else None,
        served_models=sorted(served),
        l2=l2,
        seed=seed,
        actions=_per_action(results, (p.action for p in probes)),
        probes=results,
        usage=TokenTotals(
            input_tokens=total.input_tokens,
            output_tokens=total.output_tokens,
            estimated=total.estimated,
            reported_by_server=total.reported_by_server,
        ),
    )


def preflight_table(report: PreflightReport) -> Table:
    """The report as a ``rich`` table: one row per action type, the served model in the caption."""
    from rich.table import Table

    label = " (simulated)" if report.simulated else ""
    table = Table(title=f"Compliance preflight: {report.planner}{label}")
    table.add_column("Action")
    table.add_column("Injected", justify="right")
    table.add_column("First-try compliant", justify="right")
    table.add_column("Rate", justify="right")
    for action in report.actions:
        table.add_row(
            action.action, str(action.injected), str(action.compliant), f"{action.rate:.2f}"
        )
    served = ", ".join(report.served_models) or "none"
    table.caption = (
        f"served model: {served}; requested: {report.requested_model or 'n/a'}; "
        f"tokens ({report.usage.label}): {report.usage.input_tokens} in / "
        f"{report.usage.output_tokens} out"
    )
    if report.simulated:
        table.caption += "; simulated planner, not a model"
    return table


def _per_action(
    results: Sequence[ProbeResult], actions: Iterable[Action]
) -> list[ActionCompliance]:
    order = list(dict.fromkeys(a.value for a in actions))
    return [
        ActionCompliance(
            action=action,
            injected=sum(r.action == action for r in results),
            compliant=sum(r.action == action and r.compliant for r in results),
            errors=sum(r.action == action and r.error is not None for r in results),
        )
        for action in order
    ]


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"
