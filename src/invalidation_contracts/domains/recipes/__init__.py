"""Recipe conversion: ``POST /v1/recipes/convert`` over a four-rung dietary ladder, celiac-safe
brands and incompatible combinations. Every hint is a ``rewrite_value`` of a named ingredient.

Built only on the public provider API; tables, rules, snapshots and tasks are data files here.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from invalidation_contracts.protocol import fingerprint
from invalidation_contracts.server import Domain, RegistryState, Route

from ..catalog import DomainCatalog, load_rules, load_tables
from .policies import POLICIES
from .schema import PATCHABLE, SLOTS, ConversionRequest

HERE = Path(__file__).parent
NAME = "recipes"
ROUTE_PATH = "/v1/recipes/convert"


def _converted(request: ConversionRequest, state: RegistryState) -> Mapping[str, Any]:
    body = request.model_dump(mode="json")
    return {
        "conversion_id": "conv_" + fingerprint(body, 24),
        "recipe": request.recipe,
        "diet": request.diet,
        "servings": request.servings,
        "ingredients": {slot: body[slot] for slot in SLOTS if body[slot] is not None},
    }


def build_domain() -> Domain:
    """The recipe-conversion domain with its initial tables and rules."""
    route = Route(
        ROUTE_PATH,
        ConversionRequest,
        POLICIES,
        on_success=_converted,
        patchable=PATCHABLE,
        summary="Convert a recipe to a rung of the dietary ladder",
    )
    return Domain(
        NAME,
        load_tables(HERE / "data"),
        load_rules(HERE / "rules" / "initial.json"),
        [route],
        description=(
            "Recipe conversion: dietary ladder, celiac-safe brands, incompatible combinations."
        ),
    )


def catalog() -> DomainCatalog:
    """``recipes``: snapshots ``celiac_safe_brands.breaking`` and
    ``incompatible_combinations.benign``."""
    return DomainCatalog.from_directory(build_domain(), HERE, ROUTE_PATH)


__all__ = [
    "ConversionRequest",
    "NAME",
    "PATCHABLE",
    "POLICIES",
    "ROUTE_PATH",
    "SLOTS",
    "build_domain",
    "catalog",
]
