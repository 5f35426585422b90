"""Pydantic v2 models of every wire object (SPEC §3–§8).

Field names the paper defines are kept exactly; the extensions (``keys``, ``scope``, ``patch``,
``rules``, ``max_age_s``, ``contract_seq``, ``contract_epoch``) are optional. Unknown fields are
ignored when parsing, so a client keeps working against a newer server.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    PrivateAttr,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

Row = dict[str, JsonValue]
RuleTriple = tuple[str, str, str]
RulePattern = tuple[str, str | None, str | None]
"""A rule lookup ``[from_table, to_table, relation]``; ``None`` matches any table or relation."""
MAX_VERSION_LENGTH = 128
"""Longest table version an operator may name."""


class WireModel(BaseModel):
    """Base of every wire object: lenient on input, compact on output."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)

    def to_wire(self) -> dict[str, Any]:
        """The JSON-ready dict sent on the wire: aliases applied, absent optional fields dropped."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    def to_json(self) -> bytes:
        """``to_wire()`` as compact UTF-8 JSON, serialized in one pass (the response path)."""
        return self.__pydantic_serializer__.to_json(self, by_alias=True, exclude_none=True)


class CacheHint(str, Enum):  # noqa: UP042 - keeps str() and f-string output as is
    """Whether and how a client may keep a suggestion."""

    CACHEABLE = "cacheable"
    """The fix came from server-side reference tables: cache it, keyed on its dependencies."""
    RECOMPUTE = "recompute"
    """The fix is derivable from the request alone: nothing server-side to go stale."""
    NO_STORE = "no-store"
    """(ext) The fix must not be persisted."""


class Action(str, Enum):  # noqa: UP042 - keeps str() and f-string output as is
    """The shape of the change a suggestion asks for."""

    ADD_FIELD = "add_field"
    REWRITE_VALUE = "rewrite_value"
    CONDITIONAL_REWRITE = "conditional_rewrite"


class Membership(WireModel):
    """(ext) A read of a table's key set (iterating it, taking its length), and the rows also read.

    The fix depends on *which keys* the table holds — adding or removing a key can change it — and
    on the contents of the rows in ``keys``; a change to any other row's contents cannot.
    """

    keys: list[str] = Field(
        default_factory=list,
        description="Rows of the table whose contents the fix also read (absent ones included).",
    )


class TableDependency(WireModel):
    """One entry of a suggestion's dependency vector (L4)."""

    table: str
    version: str
    keys: list[str] | None = Field(
        default=None, description="(ext) The rows of `table` the fix read; absent means the table."
    )
    membership: Membership | None = Field(
        default=None,
        description=(
            "(ext) The fix read the table's key set: it depends on which keys the table holds and "
            "on the contents of `membership.keys`. `keys` is then absent, so a client that does "
            "not know this field holds the fix at table granularity."
        ),
    )


def field_pointer(name: str) -> str:
    """The RFC 6901 JSON Pointer of a top-level request field (``a/b`` → ``/a~1b``)."""
    return "/" + name.replace("~", "~0").replace("/", "~1")


class PatchOperation(WireModel):
    """One RFC 6902 JSON Patch operation on the request body."""

    op: Literal["add", "remove", "replace", "move", "copy", "test"]
    path: str
    value: JsonValue | None = None
    from_: str | None = Field(default=None, alias="from")

    @model_serializer(mode="wrap")
    def _keep_null_value(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> dict[str, Any]:
        """``add``, ``replace`` and ``test`` always carry ``value``, even when it is null."""
        data: dict[str, Any] = handler(self)
        if self.op in ("add", "replace", "test"):
            data["value"] = self.value
        return data


class Suggestion(WireModel):
    """A recovery suggestion: a typed, machine-readable change that makes the request pass."""

    type: str = Field(description="Stable identifier of the fix, e.g. USE_REQUIRED_FUNDING_TYPE.")
    parameters: dict[str, JsonValue] = Field(description="The request fields to merge, verbatim.")
    action: Action
    message: str | None = Field(default=None, description="Human-readable explanation.")
    cache_hint: CacheHint | None = None
    table: str | None = Field(default=None, description="Primary table; only when cacheable (L1).")
    tables: list[TableDependency] | None = Field(
        default=None, description="Dependency vector (L4)."
    )
    rules: list[RuleTriple] | None = Field(
        default=None, description="(ext, L4) The rule triples the policy relied on."
    )
    rule_vias: list[str | None] | None = Field(
        default=None,
        description="(ext, L4) For each `rules` triple, in order, that rule's `via` as "
        "`/contract/rules` lists it (null: none) when the fix was made. Sent when one of them has "
        "a `via`; absent, none had one (or the server predates the field).",
    )
    absent_rules: list[RulePattern] | None = Field(
        default=None,
        description="(ext, L4) Rule lookups the fix relied on, null matching any table or "
        "relation: no declared rule matched one except those in `rules`. Declaring a matching "
        "rule can change the fix.",
    )
    scope: dict[str, JsonValue] | None = Field(
        default=None, description="(ext) Request fields and values the fix is keyed on, like Vary."
    )
    origin_wide: bool | None = Field(
        default=None,
        description=(
            "(ext) The fix holds for every request of the operation it was learned on, whatever "
            "the request's fields. A client keeps a fix with an empty scope only when this is true."
        ),
    )
    patch: list[PatchOperation] | None = Field(
        default=None, description="(ext) The same fix as RFC 6902 operations on patchable paths."
    )
    max_age_s: int | None = Field(
        default=None,
        ge=0,
        description="(ext) Freshness ceiling: revalidate after this many seconds.",
    )

    _unread_keys: dict[str, int] = PrivateAttr(default_factory=dict)
    """Row keys per table the client dropped unread as it parsed the body (over its key
    budget, ``client.limits.WideKeys``); never on the wire."""

    @property
    def unread_keys(self) -> dict[str, int]:
        """Row keys per table this suggestion named that the client did not read (over budget)."""
        return self._unread_keys

    def with_unread_keys(self, counts: dict[str, int]) -> Suggestion:
        """This suggestion, recording ``counts`` as its unread keys (``{}``: none)."""
        copy = self.model_copy()
        copy._unread_keys = counts
        return copy

    @model_validator(mode="after")
    def _one_via_per_rule(self) -> Suggestion:
        if self.rule_vias is not None and len(self.rule_vias) != len(self.rules or ()):
            raise ValueError(
                f"rule_vias has {len(self.rule_vias)} items for {len(self.rules or ())} rules"
            )
        return self

    def vias(self) -> dict[RuleTriple, str | None] | None:
        """Each rule's ``via`` when the fix was made (``rule_vias``); None when not sent."""
        if self.rule_vias is None or self.rules is None:
            return None
        return dict(zip(self.rules, self.rule_vias, strict=True))


class RecoveryFeedback(WireModel):
    suggestions: list[Suggestion]


class ContractFields(WireModel):
    """The response-level contract fields of every response (also `GET /contract/versions`)."""

    table_versions: dict[str, str] | None = Field(
        default=None, description="{table: version} (L1); only changed tables under Contract-Since."
    )
    rules_version: str | None = Field(default=None, description="Rules fingerprint (L6).")
    contract_seq: int | None = Field(
        default=None, ge=0, description="(ext) Registry history position."
    )
    contract_epoch: str | None = Field(default=None, description="(ext) Opaque id of the history.")


class SuccessResponse(ContractFields):
    """A request that passed every policy."""

    success: Literal[True] = True
    result: dict[str, JsonValue] | None = None


class Problem(ContractFields):
    """An RFC 9457 problem document, extended with the contract fields and recovery feedback."""

    type: str = "about:blank"
    title: str
    status: int = Field(ge=400, le=599)
    detail: str | None = None
    instance: str | None = None
    success: Literal[False] = False
    recovery_feedback: RecoveryFeedback | None = None
    errors: list[dict[str, JsonValue]] | None = Field(
        default=None, description="Input validation errors, one per offending location."
    )


class TableDiff(WireModel):
    """The keys a reload added, removed and changed (each list sorted)."""

    added: list[str] = Field(default_factory=list)
    removed: list[str] = Field(default_factory=list)
    changed: list[str] = Field(default_factory=list)

    @property
    def keys(self) -> list[str]:
        """Every key the reload touched, sorted."""
        return sorted({*self.added, *self.removed, *self.changed})

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)


class ReloadRequest(WireModel):
    """`POST /admin/reload-table`: replace a table's rows wholesale."""

    table: str
    rows: dict[str, Row]
    version: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_VERSION_LENGTH,
        description="Operator-chosen version; else bumped.",
    )


class PatchTableRequest(WireModel):
    """`POST /admin/patch-table` (ext): upsert and delete rows; cost scales with the change."""

    table: str
    upsert: dict[str, Row] = Field(default_factory=dict)
    delete: list[str] = Field(default_factory=list)
    version: str | None = Field(default=None, min_length=1, max_length=MAX_VERSION_LENGTH)


class TableChangeItem(WireModel):
    """(ext) One table of a change set: ``rows`` replaces the table (a reload), or ``upsert`` and
    ``delete`` patch it; never both."""

    table: str = Field(min_length=1)
    rows: dict[str, Row] | None = Field(default=None, description="The table's new rows (reload).")
    upsert: dict[str, Row] = Field(default_factory=dict)
    delete: list[str] = Field(default_factory=list)
    version: str | None = Field(default=None, min_length=1, max_length=MAX_VERSION_LENGTH)

    @model_validator(mode="after")
    def _reload_or_patch(self) -> TableChangeItem:
        if self.rows is not None and (self.upsert or self.delete):
            raise ValueError("a change names either rows (a reload) or upsert/delete (a patch)")
        return self


class ChangeSetRequest(WireModel):
    """`POST /admin/change-set` (ext): change several tables at once, under one ``contract_seq``
    (one operator configuration change, SPEC §8.1)."""

    tables: list[TableChangeItem] = Field(min_length=1)

    @model_validator(mode="after")
    def _each_table_once(self) -> ChangeSetRequest:
        names = [item.table for item in self.tables]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"a change set names each table once; twice: {', '.join(twice)}")
        return self


class ChangeSetResult(WireModel):
    """The results of a change set, one per table in request order; every one has the same seq."""

    results: list[ReloadResult]
    contract_seq: int
    contract_epoch: str


class QuarantinedRow(WireModel):
    """(ext) A row the contract cannot carry, set aside (SPEC §8.3): an RFC 9457 problem object."""

    type: str = "urn:invalidation-contracts:problem:unservable-row"
    title: str = "A row of a reference table cannot be carried"
    detail: str
    table: str
    key: str
    capture_id: int | None = Field(
        default=None, description="The capture record's id; absent when a full read found it."
    )


class QuarantineListing(WireModel):
    """(ext) `GET /admin/quarantine`: every quarantined row; each keeps its last carried image."""

    quarantined: list[QuarantinedRow] = Field(default_factory=list)


class ReloadResult(WireModel):
    table: str
    old_version: str
    new_version: str
    diff: TableDiff
    affected_downstream: list[str] = Field(
        description="Graph nodes reachable from the changed rows in the graph as it was before."
    )
    touch: bool = Field(default=False, description="Version moved but no row changed.")
    contract_seq: int
    contract_epoch: str


class RuleDeclaration(WireModel):
    """A derivation rule: each row of `from_table` relates to a row of `to_table`."""

    from_table: str = Field(min_length=1)
    to_table: str = Field(min_length=1)
    relation: str = Field(min_length=1)
    via: str | None = Field(
        default=None,
        min_length=1,
        description="Field of the from-row whose value(s) name the to-row key; "
        "absent: the same key.",
    )

    @property
    def triple(self) -> RuleTriple:
        return (self.from_table, self.to_table, self.relation)


class RulesRequest(WireModel):
    """`POST /admin/rules`: replace the rule declarations."""

    rules: list[RuleDeclaration]


class RulesResult(WireModel):
    old_rules_version: str
    new_rules_version: str
    added: list[RuleTriple]
    removed: list[RuleTriple]
    contract_seq: int
    contract_epoch: str


class RulesListing(WireModel):
    """`GET /contract/rules`."""

    rules_version: str
    rules: list[RuleDeclaration]


class RowChange(WireModel):
    seq: int
    table: str
    key: str
    op: Literal["added", "removed", "changed"]
    old_version: str
    new_version: str


class TableTransition(WireModel):
    seq: int
    table: str
    old_version: str
    new_version: str
    touch: bool = False
    affected_downstream: list[str] = Field(default_factory=list)
    reconciled: Literal[True] | None = Field(
        default=None,
        description="(ext) The change was found by comparing the table with the provider's "
        "database, not recorded by its capture (a write around the triggers). Omitted otherwise.",
    )


class RuleChange(WireModel):
    seq: int
    old_rules_version: str
    new_rules_version: str
    added: list[RuleTriple]
    removed: list[RuleTriple]


class ChangesFeed(WireModel):
    """`GET /contract/changes?since=SEQ`: every change after `since`, in seq order."""

    contract_epoch: str
    since: int
    last_seq: int
    rows: list[RowChange] = Field(default_factory=list)
    tables: list[TableTransition] = Field(default_factory=list)
    rules: list[RuleChange] = Field(default_factory=list)


class GraphNode(WireModel):
    """A row of a table a rule names, or a key an edge points at that has no row (``absent``)."""

    table: str
    key: str
    version: str = Field(description="The version of the node's table.")
    absent: Literal[True] | None = Field(
        default=None,
        description="(ext) The table has no row with this key; an edge points at it. Omitted "
        "for rows.",
    )


class GraphEdge(WireModel):
    from_: str = Field(alias="from")
    to: str
    relation: str


class GraphListing(WireModel):
    """`GET /contract/graph` (L5): nodes are `table:key`, edges one per rule instance.

    Every edge's ends are nodes, so ``affected_downstream`` (a walk over these edges) names
    only nodes listed here.
    """

    nodes: dict[str, GraphNode]
    edges: list[GraphEdge]
    rules_version: str | None = None
    contract_seq: int | None = None


#: Every wire object, by the name its JSON Schema is published under.
WIRE_MODELS: dict[str, type[WireModel]] = {
    model.__name__: model
    for model in (
        Suggestion,
        TableDependency,
        Membership,
        PatchOperation,
        RecoveryFeedback,
        ContractFields,
        SuccessResponse,
        Problem,
        TableDiff,
        ReloadRequest,
        PatchTableRequest,
        TableChangeItem,
        ChangeSetRequest,
        ChangeSetResult,
        ReloadResult,
        RuleDeclaration,
        RulesRequest,
        RulesResult,
        RulesListing,
        RowChange,
        TableTransition,
        RuleChange,
        ChangesFeed,
        GraphNode,
        GraphEdge,
        GraphListing,
    )
}
