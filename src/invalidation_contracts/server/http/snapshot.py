"""The reference data a handler reads: the snapshot its request's policies were checked against.

``ContractSnapshot`` is a FastAPI dependency for the routes of ``service.router()``: the handler
reads rows from the same committed registry state the policy check read and the stamps name
(SPEC §8.2.2), never from the database directly, where a change committed a moment ago — that
this worker has not yet adopted — would price the request with data the check never saw.

    @orders.post("/v1/orders")
    async def place(order: Order, data: ContractSnapshot) -> dict:
        plan = data.row("plans", order.plan)   # what funding_policy read
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import Depends, Request

from ..state import RegistryState
from ..tables import thaw

STATE_ATTRIBUTE = "contract_state"
"""``request.state.contract_state``: the registry state the request was checked against."""


class ReferenceData:
    """Read-only rows of one registry state (no I/O): ``data["plans"]["basic"]``."""

    def __init__(self, state: RegistryState) -> None:
        self.state = state

    @property
    def seq(self) -> int:
        return self.state.seq

    @property
    def epoch(self) -> str:
        return self.state.epoch

    def table(self, name: str) -> Mapping[str, Mapping[str, Any]]:
        """Every row of table ``name`` (key → read-only row, not copied; ``row`` gives a plain
        copy to return); 404 ``unknown-table`` for another name."""
        return self.state.snapshot(name).rows

    def row(self, table: str, key: str) -> dict[str, Any] | None:
        """One row as a plain JSON object (a copy a handler may change or return as is), or
        None when the table has no such key."""
        row = self.table(table).get(key)
        return None if row is None else thaw(row)

    def version(self, table: str) -> str:
        return self.state.snapshot(table).version

    def __getitem__(self, name: str) -> Mapping[str, Mapping[str, Any]]:
        return self.table(name)


def reference_data(request: Request) -> ReferenceData:
    """The dependency behind ``ContractSnapshot``."""
    state = getattr(request.state, STATE_ATTRIBUTE, None)
    if not isinstance(state, RegistryState):
        raise RuntimeError(
            "ContractSnapshot is for routes of service.router() (route_class=service.route_class),"
            " which check the request against one registry state before the endpoint runs"
        )
    return ReferenceData(state)


ContractSnapshot = Annotated[ReferenceData, Depends(reference_data)]
"""A handler parameter: the reference data its request was checked against."""
