"""The request body of ``POST /v1/recipes/convert``."""

from __future__ import annotations

from pydantic import BaseModel, Field

#: The ingredient slots of a conversion, in the order policies examine them.
SLOTS = ("protein", "starch", "dairy", "thickener")


class ConversionRequest(BaseModel):
    """Convert a recipe to a rung of the dietary ladder with the ingredient chosen for each slot."""

    recipe: str = Field(min_length=1, description="The recipe's id, as the task names it.")
    diet: str = Field(
        min_length=1,
        description="The diet's id (a rung of the dietary ladder), as the task names it.",
    )
    servings: int = Field(ge=1, le=100)
    protein: str = Field(min_length=1, description="Ingredient id for the protein.")
    starch: str = Field(
        min_length=1, description="Ingredient id for the starch (pasta, rice, ...)."
    )
    dairy: str | None = Field(
        default=None, description="Ingredient id for the dairy element, if any."
    )
    thickener: str | None = Field(
        default=None, description="Ingredient id for the thickener, if any."
    )


#: The request fields a client may patch from a cached fix.
PATCHABLE = frozenset(SLOTS)
