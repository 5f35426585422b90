"""How a provider declares an API: its tables, rules and routes (each route: schema + policies)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from .policies import Policy
from .registry import LOG_CAPACITY, Registry
from .rules import Rule
from .state import RegistryState
from .tables import Snapshot

M = TypeVar("M", bound=BaseModel)

SuccessHandler = Callable[[M, RegistryState], Mapping[str, Any]]
"""What a route returns on success, from its own validated request model and the state."""


@dataclass(frozen=True, slots=True)
class Route(Generic[M]):
    """One domain endpoint: the request schema, the policies it enforces, what success returns.

    Generic in the request model, so ``on_success`` takes that model (``Route[Shipment]``).
    ``patchable`` names the request fields a client may patch from a cached fix (None: every
    top-level field of the schema). ``response_model``, when given, describes what
    ``on_success`` returns (published as the MCP tool's ``outputSchema``).
    """

    path: str
    request_model: type[M]
    policies: Sequence[Policy]
    on_success: SuccessHandler[M] | None = None
    method: str = "POST"
    patchable: frozenset[str] | None = None
    summary: str = ""
    response_model: type[BaseModel] | None = None

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
class SQLTable:
    """A reference table read from one of the provider's own SQL tables (``server.sql``).

    ``table`` is the SQL table (in ``schema``, PostgreSQL); ``key`` the column or columns whose
    values name a row (default: the table's primary key); ``columns`` the columns a row holds
    (default: every other column). A single-column key is the column's value as a string; a
    composite key is the canonical JSON array of its values. The declaration is checked against
    the database when it is opened (``server.sql.SQLSource``): a table without a key, a column
    that does not exist or a type a reference table cannot hold is refused there, naming table
    and column.
    """

    table: str
    key: str | Sequence[str] | None = None
    columns: Sequence[str] | None = None
    schema: str | None = None
    version: str = "1.0.0"
    """The version the table starts at when a registry is first created."""

    def __post_init__(self) -> None:
        if not isinstance(self.table, str) or not self.table:
            raise ValueError(f"a SQL table declaration needs a table name, not {self.table!r}")
        key = (self.key,) if isinstance(self.key, str) else self.key
        if key is not None:
            key = tuple(key)
            if not key or not all(isinstance(k, str) and k for k in key):
                raise ValueError(f"SQL table {self.table!r}: the key names no column")
            if len(set(key)) != len(key):
                raise ValueError(f"SQL table {self.table!r}: the key repeats a column")
        columns = tuple(self.columns) if self.columns is not None else None
        if columns is not None:
            if not all(isinstance(c, str) and c for c in columns) or len(set(columns)) != len(
                columns
            ):
                raise ValueError(f"SQL table {self.table!r}: columns must be distinct names")
            clash = sorted(set(columns) & set(key or ()))
            if clash:
                raise ValueError(
                    f"SQL table {self.table!r}: column {clash[0]!r} is part of the key; a row "
                    "holds only the other columns"
                )
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "columns", columns)

    @property
    def key_columns(self) -> tuple[str, ...] | None:
        """The declared key columns (None: the table's primary key)."""
        return None if self.key is None else tuple(self.key)


TableDeclaration = TableSpec | SQLTable


@dataclass(frozen=True, slots=True)
class Domain:
    """A provider's API in one value: what ``create_app`` serves and the harness drives."""

    name: str
    tables: Mapping[str, TableDeclaration]
    rules: Sequence[Rule]
    routes: Sequence[Route[Any]]
    description: str = ""
    extras: Mapping[str, Any] = field(default_factory=dict)
    _initial: dict[str, Snapshot] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def registry(self, *, epoch: str | None = None, log_capacity: int = LOG_CAPACITY) -> Registry:
        """A fresh registry loaded with the domain's initial tables and rules (``epoch`` and
        ``log_capacity`` as ``Registry``'s).

        Only for in-memory tables: a domain with ``SQLTable`` declarations is opened with its
        database (``server.worker.runtime.open_runtime`` or ``create_app(domain, database=...)``).
        """
        sql = sorted(self.sql_tables)
        if sql:
            raise ValueError(
                f"domain {self.name!r} reads tables {sql} from SQL; open it with its database "
                "(create_app(domain, database=URL))"
            )
        return Registry(
            self.initial_snapshots(), self.rules, epoch=epoch, log_capacity=log_capacity
        )

    def initial_snapshots(self) -> list[Snapshot]:
        """The in-memory tables as snapshots (rows frozen, row etags computed), built once per
        domain: a snapshot is never mutated, so every registry of the domain shares them (a
        domain of 10,000 rows pays for its etags once, not once per registry). A ``TableSpec``'s
        rows are read when the first registry is built; change them after that and build a new
        ``Domain``."""
        for name, spec in self.memory_tables.items():
            if name not in self._initial:
                self._initial[name] = Snapshot.build(name, spec.version, spec.rows)
        return [self._initial[name] for name in self.memory_tables]

    @property
    def memory_tables(self) -> dict[str, TableSpec]:
        """The tables whose rows the declaration holds."""
        return {n: t for n, t in self.tables.items() if isinstance(t, TableSpec)}

    @property
    def sql_tables(self) -> dict[str, SQLTable]:
        """The tables read from the provider's SQL database."""
        return {n: t for n, t in self.tables.items() if isinstance(t, SQLTable)}

    def route(self, path: str) -> Route[Any]:
        for route in self.routes:
            if route.path == path:
                return route
        raise KeyError(f"domain {self.name!r} has no route {path!r}")
