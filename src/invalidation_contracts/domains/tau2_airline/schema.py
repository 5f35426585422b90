"""Request bodies of the routes: the parameters of τ²'s own airline tools, as τ² declares them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

#: τ²'s cabin classes (``tau2.domains.airline.data_model.CabinClass``), in its order.
CABINS = ("business", "economy", "basic_economy")
Cabin = Literal["business", "economy", "basic_economy"]


class FlightLeg(BaseModel):
    """One flight of a reservation (τ²'s ``FlightInfo``)."""

    model_config = ConfigDict(extra="forbid")

    flight_number: str = Field(min_length=1, max_length=16, description="Flight number.")
    date: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$", description="Date, YYYY-MM-DD.")


class UpdateFlights(BaseModel):
    """``update_reservation_flights``: the ENTIRE new itinerary of a reservation, its cabin, and
    the stored payment method that pays the difference."""

    model_config = ConfigDict(extra="forbid")

    reservation_id: str = Field(min_length=1, max_length=16, description="The reservation id.")
    cabin: Cabin = Field(description="Cabin class of the reservation.")
    flights: list[FlightLeg] = Field(
        min_length=1, max_length=8, description="Every flight of the new itinerary."
    )
    payment_id: str = Field(
        min_length=1, max_length=64, description="A payment method id from the user's profile."
    )


class UpdateBaggages(BaseModel):
    """``update_reservation_baggages``: the new bag counts and the stored payment method."""

    model_config = ConfigDict(extra="forbid")

    reservation_id: str = Field(min_length=1, max_length=16, description="The reservation id.")
    total_baggages: int = Field(ge=0, le=50, description="Total bags.")
    nonfree_baggages: int = Field(ge=0, le=50, description="Bags that are not free.")
    payment_id: str = Field(
        min_length=1, max_length=64, description="A payment method id from the user's profile."
    )


#: The fields a client may patch from a cached fix, per tool.
PATCHABLE = {
    "update_reservation_flights": frozenset({"cabin", "flights", "payment_id"}),
    "update_reservation_baggages": frozenset({"payment_id"}),
}
#: The request model of each tool served as a route.
MODELS: dict[str, type[BaseModel]] = {
    "update_reservation_flights": UpdateFlights,
    "update_reservation_baggages": UpdateBaggages,
}
