"""How a provider declares an API: its tables, rules and routes (each route: schema + policies)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from .policies import Policy
from .registry import Registry
from .rules import Rule
from .state import RegistryState

M = TypeVar("M", bound=BaseModel)

SuccessHandler = Callable[[M, RegistryState], Mapping[str, Any]]
"""What a route returns on success, from its own validated request model and the state."""


@dataclass(frozen=True, slots=True)
class Route(Generic[M]):
    """One domain endpoint: the request schema, the policies it enforces, what success returns.

    Generic in the request model, so ``on_success`` takes that model (``Route[Shipment]``).
    ``patchable`` names the request fields a client may patch from a cached fix (None: every
    top-level field of the schema).
    """

    path: str
    request_model: type[M]
    policies: Sequence[Policy]
    on_success: SuccessHandler[M] | None = None
    method: str = "POST"
    patchable: frozenset[str] | None = None
    summary: str = ""

    @property
    def patchable_fields(self) -> frozenset[str]:
        if self.patchable is not None:
            return self.patchable
        return frozenset(self.request_model.model_fields)


@dataclass(frozen=True, slots=True)
class TableSpec:
    """An initial table: its rows and version."""

    rows: Mapping[str, Mapping[str, Any]]
    version: str = "1.0.0"


@dataclass(frozen=True, slots=True)
class Domain:
    """A provider's API in one value: what ``create_app`` serves and the harness drives."""

    name: str
    tables: Mapping[str, TableSpec]
    rules: Sequence[Rule]
    routes: Sequence[Route[Any]]
    description: str = ""
    extras: Mapping[str, Any] = field(default_factory=dict)

    def registry(self, **options: Any) -> Registry:
        """A fresh registry loaded with the domain's initial tables and rules."""
        return Registry(
            {name: spec.rows for name, spec in self.tables.items()},
            self.rules,
            versions={name: spec.version for name, spec in self.tables.items()},
            **options,
        )

    def route(self, path: str) -> Route[Any]:
        for route in self.routes:
            if route.path == path:
                return route
        raise KeyError(f"domain {self.name!r} has no route {path!r}")
