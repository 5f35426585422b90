"""Recipe conversion's policies: the dietary ladder, celiac-safe certification, and incompatible
combinations. Every hint rewrites an ingredient the request already names.

The ladder is data: a rung includes the rungs its ``includes`` field names, followed through the
declared ``includes`` rule; the categories a rung requires certified come through
``requires_certification``.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from invalidation_contracts.protocol import Action
from invalidation_contracts.server import TrackedTables, Violation, policy

from .schema import SLOTS

INCLUDES = ("dietary_ladder", "dietary_ladder", "includes")
REQUIRES_CERTIFICATION = ("dietary_ladder", "celiac_safe_brands", "requires_certification")

UNKNOWN_DIET = "UNKNOWN_DIET"
UNKNOWN_INGREDIENT = "UNKNOWN_INGREDIENT"
SUBSTITUTE_FOR_DIET = "SUBSTITUTE_FOR_DIET"
USE_CERTIFIED_CELIAC_BRAND = "USE_CERTIFIED_CELIAC_BRAND"
REPLACE_INCOMPATIBLE_INGREDIENT = "REPLACE_INCOMPATIBLE_INGREDIENT"

Rung = tuple[str, Mapping[str, Any]]


def chosen(request: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The (slot, ingredient) pairs the request fills, in slot order."""
    return [(slot, request[slot]) for slot in SLOTS if request.get(slot)]


def rungs(request: Mapping[str, Any], tables: TrackedTables) -> list[Rung] | None:
    """The requested rung and every rung it includes (None when the diet is not on the ladder)."""
    ladder = tables["dietary_ladder"]
    start = ladder.get(request["diet"])
    if start is None:
        return None
    found: list[Rung] = [(request["diet"], start)]
    seen = {request["diet"]}
    rules = tables.rules.find(*INCLUDES)
    for name, row in found:
        for rule in rules:
            for target in rule.targets(name, row):
                below = ladder.get(target) if target not in seen else None
                if below is not None:
                    seen.add(target)
                    found.append((target, below))
    return found


@policy("dietary_ladder_policy")
def dietary_ladder(request: Mapping[str, Any], tables: TrackedTables) -> list[Violation]:
    """An ingredient carrying a tag the rung (or a rung below it) forbids is replaced by its
    listed substitute."""
    diet = request["diet"]
    ladder = rungs(request, tables)
    if ladder is None:
        return [
            Violation(
                UNKNOWN_DIET,
                f"diet {diet} is not a rung of the dietary ladder",
                {},
                Action.REWRITE_VALUE,
                scope={"diet": diet},
                no_store=True,
            )
        ]
    forbidden = {tag for _, row in ladder for tag in row.get("forbids", ())}
    violations = []
    for slot, name in chosen(request):
        item = tables["ingredients"].get(name)
        if item is None:
            violations.append(
                Violation(
                    UNKNOWN_INGREDIENT,
                    f"{name} is not a known ingredient; use an ingredient id",
                    {},
                    Action.REWRITE_VALUE,
                    scope={slot: name},
                    no_store=True,
                )
            )
            continue
        clash = sorted(forbidden & set(item.get("tags", ())))
        if not clash:
            continue
        substitute = (tables["substitutions"].get(name) or {}).get("substitute")
        message = f"{name} is not {diet} (contains {', '.join(clash)})"
        if isinstance(substitute, str):
            violations.append(
                Violation(
                    SUBSTITUTE_FOR_DIET,
                    message + "; use its substitute",
                    {slot: substitute},
                    Action.REWRITE_VALUE,
                    scope={"diet": diet, slot: name},
                    precondition={slot: name},
                    table="substitutions",
                )
            )
        else:
            violations.append(
                Violation(
                    SUBSTITUTE_FOR_DIET,
                    message + "; no substitute is listed",
                    {},
                    Action.REWRITE_VALUE,
                    scope={"diet": diet, slot: name},
                    no_store=True,
                )
            )
    return violations


@policy("celiac_certification_policy")
def celiac_certification(request: Mapping[str, Any], tables: TrackedTables) -> list[Violation]:
    """On a rung that requires certification, an ingredient of a certified category must be a
    certified celiac-safe brand; otherwise use the category's first certified brand."""
    ladder = rungs(request, tables)
    if ladder is None:
        return []
    rules = tables.rules.find(*REQUIRES_CERTIFICATION)
    categories = {cat for name, row in ladder for rule in rules for cat in rule.targets(name, row)}
    if not categories:
        return []
    violations = []
    for slot, name in chosen(request):
        category = (tables["ingredients"].get(name) or {}).get("category")
        if category not in categories:
            continue
        brands = tables["celiac_safe_brands"].get(category) or {}
        certified = [b for b in brands.get("certified", ()) if isinstance(b, str)]
        if name in certified:
            continue
        message = f"{name} is not a certified celiac-safe {category}"
        if certified:
            violations.append(
                Violation(
                    USE_CERTIFIED_CELIAC_BRAND,
                    message + "; use a certified brand",
                    {slot: certified[0]},
                    Action.REWRITE_VALUE,
                    scope={"diet": request["diet"], slot: name},
                    precondition={slot: name},
                    table="celiac_safe_brands",
                )
            )
        else:
            violations.append(
                Violation(
                    USE_CERTIFIED_CELIAC_BRAND,
                    message + "; no certified brand is listed",
                    {},
                    Action.REWRITE_VALUE,
                    scope={"diet": request["diet"], slot: name},
                    no_store=True,
                )
            )
    return violations


def combination_key(a: str, b: str) -> str:
    """The ``incompatible_combinations`` key of a pair: the two ids sorted, joined by ``+``."""
    return "+".join(sorted((a, b)))


@policy("incompatible_combinations_policy")
def incompatible_combinations(request: Mapping[str, Any], tables: TrackedTables) -> list[Violation]:
    """Two ingredients that do not work together: the one the table names is replaced."""
    filled = chosen(request)
    slot_of = {name: slot for slot, name in filled}
    violations = []
    for (slot_a, a), (slot_b, b) in itertools.combinations(filled, 2):
        row = tables["incompatible_combinations"].get(combination_key(a, b))
        if row is None:
            continue
        slot = slot_of.get(row.get("replace"))
        replacement = row.get("with")
        if slot is None or not isinstance(replacement, str):
            continue
        violations.append(
            Violation(
                REPLACE_INCOMPATIBLE_INGREDIENT,
                f"{a} and {b} do not work together: {row.get('reason', 'incompatible')}",
                {slot: replacement},
                Action.REWRITE_VALUE,
                scope={slot_a: a, slot_b: b},
                precondition={slot: row["replace"]},
            )
        )
    return violations


POLICIES = (dietary_ladder, celiac_certification, incompatible_combinations)
