"""The provider core: validate a request, run its policies on one snapshot, render the contract.

Sans-IO: takes a payload, returns a status, a wire object and its encoding. The FastAPI app is a
thin adapter. Contract fields and policy-violation documents are rendered once per registry
state (``RenderCache``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from ..protocol.canonical import canonical_json
from ..protocol.levels import Level
from ..protocol.models import ContractFields, Problem, SuccessResponse
from ..protocol.problems import ProblemType, ProtocolError, problem
from . import feedback, reads
from .asked import PLAIN, Asked
from .domain import Domain, Route
from .opaque import OpaqueNames
from .policies import Finding, evaluate
from .reads import ContractRead, ReadAnswer
from .registry import Registry
from .render_cache import RenderCache
from .state import RegistryState
from .tables import Snapshot

C = TypeVar("C", bound=ContractFields)
M = TypeVar("M", bound=BaseModel)


class Telemetry(Protocol):
    """What a provider tells an observer (``observe.ProviderTelemetry``); it must never raise."""

    def evaluating(
        self, route: Route[Any], state: RegistryState
    ) -> AbstractContextManager[Any] | None:
        """A context around one policy evaluation (a span carrying the state's position); None
        when there is nothing to wrap it in (no tracing: the request pays no context manager)."""
        ...

    def checked(
        self,
        route: Route[Any],
        request: Mapping[str, Any],
        state: RegistryState,
        refusal: Outcome | None,
    ) -> None:
        """A valid request's policy check: None when it passed, else the 422 answer."""
        ...

    def answered(self, route: Route[Any], outcome: Outcome) -> None:
        """An answer of ``handle`` other than a 422: the 400 of an invalid body, or a 200."""
        ...

    def stamped(self, route: Route[Any], status: int, content: bytes) -> None:
        """An existing app's own answer on a declared route, with the contract merged in."""
        ...


@dataclass(frozen=True, slots=True)
class Outcome:
    """A route's answer: the HTTP status, the body, the findings and state it came from, and
    ``content``, the body as sent (``body.to_json()``: compact UTF-8 JSON)."""

    status: int
    body: Problem | SuccessResponse
    findings: tuple[Finding, ...]
    state: RegistryState
    content: bytes


def validation_errors(exc: ValidationError) -> list[dict[str, Any]]:
    """Pydantic errors as JSON-ready ``{loc, msg, type}`` items (no echoed input)."""
    return [
        {"loc": [str(p) for p in err["loc"]], "msg": err["msg"], "type": err["type"]}
        for err in exc.errors(include_url=False, include_input=False)
    ]


def findings(route: Route[Any], payload: Mapping[str, Any], state: RegistryState) -> list[Finding]:
    """The violations of a valid payload against ``state``, as ``Provider.handle`` finds them."""
    request = route.request_model.model_validate(dict(payload)).model_dump(mode="json")
    return _evaluate(route, request, state)


def current_fix(
    route: Route[Any],
    draft: Mapping[str, Any],
    fix_type: str,
    scope: Mapping[str, Any] | None,
    state: RegistryState,
) -> dict[str, Any] | None:
    """The parameters the provider would suggest now for ``(fix_type, scope)`` on ``draft``
    against ``state``, or None (a fix is identified as a client's memory identifies it: by its
    type and its scope, so a request that draws several fixes of one type is judged per fix)."""
    wanted = canonical_json(dict(scope or {}))
    for finding in findings(route, draft, state):
        v = finding.violation
        if v.type == fix_type and canonical_json(dict(v.scope)) == wanted:
            return dict(v.parameters)
    return None


def strict_request(model: type[M], payload: object) -> M:
    """``payload`` (parsed JSON) as ``model``, validated as JSON in strict mode: an integer field
    takes a JSON integer, not ``"5000"``, ``true`` or ``5000.0`` (SPEC §5: a body that does not
    match the published schema is ``invalid-request``; reliability audit 2, N15)."""
    return model.model_validate_json(json.dumps(payload), strict=True)


def request_fields(model: type[BaseModel]) -> frozenset[str] | None:
    """The fields a fix may name on ``model``'s requests (names and aliases); None: any field."""
    try:
        return _REQUEST_FIELDS[model]
    except KeyError:
        pass
    if model.model_config.get("extra") == "allow":
        fields = None
    else:
        names = {*model.model_fields}
        names.update(f.alias for f in model.model_fields.values() if f.alias is not None)
        fields = frozenset(names)
    _REQUEST_FIELDS[model] = fields
    return fields


_REQUEST_FIELDS: dict[type[BaseModel], frozenset[str] | None] = {}
"""``request_fields`` per request model (asked on every request; a model's fields are fixed)."""


def _evaluate(
    route: Route[Any],
    request: Mapping[str, Any],
    state: RegistryState,
    refused: Mapping[str, str] = MappingProxyType({}),
) -> list[Finding]:
    fields = request_fields(route.request_model)
    tables = RefusingTables(state.tables, refused) if refused else state.tables
    return evaluate(route.policies, request, tables, state.rules, fields=fields)


class RefusingTables(Mapping[str, Snapshot]):
    """The registry's tables as a policy reads them, where reading a refused table (its
    declared column renamed, dropped or retyped in the database) is a 503 naming the table and
    the column: that route refuses, the routes that read other tables serve."""

    __slots__ = ("_refused", "_tables")

    def __init__(self, tables: Mapping[str, Snapshot], refused: Mapping[str, str]) -> None:
        self._tables, self._refused = tables, refused

    def __getitem__(self, name: str) -> Snapshot:
        reason = self._refused.get(name)
        if reason is not None:
            raise ProtocolError(
                ProblemType.REGISTRY_UNAVAILABLE,
                f"this route reads table {name!r}, which this worker does not serve until the "
                f"database matches its declaration again: {reason}",
                headers={"Retry-After": "1"},
            )
        return self._tables[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tables)

    def __len__(self) -> int:
        return len(self._tables)


class Provider:
    """A domain's routes over a registry at a contract level."""

    def __init__(
        self,
        domain: Domain,
        registry: Registry | None = None,
        level: Level | int = Level.RULES_FINGERPRINT,
        *,
        opaque: OpaqueNames | None = None,
    ):
        """``opaque``: send keyed tags instead of table names, row keys and relations."""
        self.domain = domain
        self.registry = registry if registry is not None else domain.registry()
        self.level = Level.parse(level)
        self.opaque = opaque
        self.rendered = RenderCache(self.level, self._present)
        self.refused: Mapping[str, str] = MappingProxyType({})
        """Tables whose reads are a 503 naming why (a worker's ``Runtime.refused``)."""
        self.telemetry: Telemetry | None = None
        """Told of every policy evaluation and answer when set (``observe.instrument``)."""

    def contract(
        self, state: RegistryState, since: int | None = None, epoch: str | None = None
    ) -> ContractFields:
        """The response-level fields of ``state`` at this provider's level (tagged if opaque)."""
        return self.rendered.contract(state, since, epoch)

    def read(
        self, request: ContractRead, state: RegistryState, *, what: str | None = None
    ) -> ReadAnswer:
        """Answer one of the contract's reads (versions, changes, rules, graph) from ``state``,
        the state at ``request.catch_up``: the one read API every transport calls
        (``server.reads``); ``what`` names the read in a level-too-low problem."""
        return reads.answer(self, request, state, what)

    def findings(
        self, route: Route[Any], payload: Mapping[str, Any], state: RegistryState | None = None
    ) -> list[Finding]:
        """The violations of a valid payload against ``state`` (default: the current one)."""
        return findings(route, payload, state if state is not None else self.registry.state)

    def handle(
        self,
        route: Route[Any],
        payload: object,
        asked: Asked = PLAIN,
        *,
        state: RegistryState | None = None,
    ) -> Outcome:
        """Answer one request; every stamp and suggestion comes from the same snapshot.

        ``asked``: the client's position and the request's URI; ``state`` the snapshot to answer
        from (default: the registry's current one).
        """
        state = state if state is not None else self.registry.state
        try:
            model = strict_request(route.request_model, payload)
        except ValidationError as exc:
            body = problem(
                ProblemType.INVALID_REQUEST,
                f"the body does not match the {route.request_model.__name__} schema",
                contract=self.contract(state, asked.since, asked.epoch),
                errors=validation_errors(exc),
                instance=asked.instance_uri(),
            )
            invalid = Outcome(body.status, body, (), state, body.to_json())
            if self.telemetry is not None:
                self.telemetry.answered(route, invalid)
            return invalid
        refusal = self.check(route, model, state, asked)
        if refusal is not None:
            return refusal
        result = route.on_success(model, state) if route.on_success is not None else None
        contract = self.rendered.raw_contract(state, asked.since, asked.epoch)
        passed = self._present(feedback.success_document(contract, result))
        outcome = Outcome(200, passed, (), state, passed.to_json())
        if self.telemetry is not None:
            self.telemetry.answered(route, outcome)
        return outcome

    def check(
        self, route: Route[Any], model: BaseModel, state: RegistryState, asked: Asked = PLAIN
    ) -> Outcome | None:
        """The 422 answer when a validated request violates a policy on ``state``, else None."""
        request = model.model_dump(mode="json")
        telemetry = self.telemetry
        if telemetry is None:
            found = tuple(_evaluate(route, request, state, self.refused))
        else:
            span = telemetry.evaluating(route, state)
            if span is None:
                found = tuple(_evaluate(route, request, state, self.refused))
            else:
                with span:
                    found = tuple(_evaluate(route, request, state, self.refused))
        if not found:
            if telemetry is not None:
                telemetry.checked(route, request, state, None)
            return None
        failure = self.rendered.failure(found, state, asked, route.patchable_fields)
        refusal = Outcome(failure.body.status, failure.body, found, state, failure.content)
        if telemetry is not None:
            telemetry.checked(route, request, state, refusal)
        return refusal

    def _present(self, body: C) -> C:
        return self.opaque.contract(body) if self.opaque is not None else body
