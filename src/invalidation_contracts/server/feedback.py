"""The feedback generator: renders findings and registry state as the wire contract at a level."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from ..protocol.levels import Level
from ..protocol.models import (
    Action,
    CacheHint,
    ContractFields,
    Problem,
    RecoveryFeedback,
    RuleTriple,
    SuccessResponse,
    Suggestion,
    field_pointer,
)
from ..protocol.problems import ProblemType, problem
from .asked import PLAIN, Asked
from .policies import Finding
from .state import RegistryState


def patch_for(finding: Finding) -> list[dict[str, Any]]:
    """The violation's fix as RFC 6902 operations (JSON objects, validated as part of the
    suggestion that carries them): ``test`` preconditions, then add or replace."""
    v = finding.violation
    ops = [
        {"op": "test", "path": field_pointer(f), "value": val} for f, val in v.precondition.items()
    ]
    verb = "add" if v.action is Action.ADD_FIELD else "replace"
    ops += [{"op": verb, "path": field_pointer(f), "value": val} for f, val in v.parameters.items()]
    return ops


def contract_fields(
    state: RegistryState, level: Level, since: int | None = None, epoch: str | None = None
) -> ContractFields:
    """The response-level fields of ``state`` at ``level``.

    With ``since`` (the client's ``Contract-Since``) this is the conditional form: only what moved
    after ``since`` — the changed tables, ``rules_version`` if a rule changed, ``contract_seq`` if
    it is not ``since``, ``contract_epoch`` unless the client's ``Contract-Epoch`` names it. A
    client that knew the state at ``since`` rebuilds the full fields from it.
    """
    if not level.structured:
        return ContractFields()
    if since is None:
        return ContractFields(
            table_versions=state.versions(),
            rules_version=state.rules.version if level.rules_fingerprint else None,
            contract_seq=state.seq,
            contract_epoch=state.epoch,
        )
    return ContractFields(
        table_versions=state.versions(since) or None,
        rules_version=(
            state.rules.version
            if level.rules_fingerprint and state.rules_changed_at > since
            else None
        ),
        contract_seq=state.seq if state.seq != since else None,
        contract_epoch=state.epoch if epoch != state.epoch else None,
    )


def suggestion(
    finding: Finding,
    state: RegistryState,
    level: Level,
    patchable: Collection[str] | None = None,
    *,
    conditional: bool = False,
) -> Suggestion:
    """One finding as a suggestion carrying exactly the fields ``level`` adds.

    ``conditional`` (the client sent ``Contract-Since``, so it reads ``tables``): the scalar
    ``table`` is left out wherever ``tables`` is sent, since ``tables`` takes precedence.
    """
    v = finding.violation
    if v.no_store:
        hint = CacheHint.NO_STORE
    elif finding.cacheable:
        hint = CacheHint.CACHEABLE
    else:
        hint = CacheHint.RECOMPUTE
    fields: dict[str, Any] = {
        "type": v.type,
        "message": v.message,
        "parameters": dict(v.parameters),
        "action": v.action,
        "cache_hint": hint,
        "scope": dict(v.scope) or None,
        "origin_wide": True if v.origin_wide else None,
        "max_age_s": v.max_age_s,
    }
    if level is Level.NONE:
        # Suggestions only: no contract field (``cache_hint``, ``table``, ``max_age_s``, ...).
        fields["cache_hint"] = fields["max_age_s"] = None
    elif hint is CacheHint.CACHEABLE:
        fields["table"] = finding.primary_table
    touched = {*v.parameters, *v.precondition}
    if patchable is None or touched <= set(patchable):
        fields["patch"] = patch_for(finding)
    if level.dependency_vectors and finding.reads:
        fields["tables"] = [
            _dependency(table, state.tables[table].version, keys, table in finding.key_sets)
            for table in finding.tables_in_read_order
            for keys in (finding.reads[table],)
        ]
        fields["rules"] = list(finding.rules) or None
        fields["rule_vias"] = rule_vias(finding.rules, state.rules.vias)
        fields["absent_rules"] = list(finding.absent_rules) or None
        if conditional:
            fields["table"] = None
    # One validation of the whole suggestion, its patch and dependency vector included.
    return Suggestion.model_validate(fields)


def rule_vias(
    rules: Sequence[RuleTriple], vias: Mapping[RuleTriple, str]
) -> list[str | None] | None:
    """``rule_vias`` for a fix relying on ``rules``: each rule's ``via``, or None when none has
    one (so a domain without ``via`` sends the same bytes as before the field)."""
    if not any(rule in vias for rule in rules):
        return None
    return [vias.get(rule) for rule in rules]


def failure(
    findings: Sequence[Finding],
    state: RegistryState,
    level: Level,
    asked: Asked = PLAIN,
    patchable: Collection[str] | None = None,
) -> Problem:
    """The 422 policy-violation problem document for ``findings`` (prose only at L0), answering
    a request that ``asked``; ``patchable``: the route's fields a patch may touch.

    Renders everything afresh; ``Provider`` serves the same document from its ``RenderCache``.
    """
    instance = asked.instance_uri()
    if not level.suggests:
        return failure_document(findings, level, instance=instance)
    return failure_document(
        findings,
        level,
        contract=contract_fields(state, level, asked.since, asked.epoch),
        suggestions=[
            suggestion(f, state, level, patchable, conditional=asked.conditional) for f in findings
        ],
        instance=instance,
    )


def failure_document(
    findings: Sequence[Finding],
    level: Level,
    *,
    contract: ContractFields | None = None,
    suggestions: Sequence[Suggestion] | None = None,
    instance: str | None = None,
) -> Problem:
    """The policy-violation document from its rendered parts (ignored at L0, which sends prose;
    ``none`` sends the suggestions and no contract field)."""
    detail = "; ".join(f.violation.message for f in findings)
    if not level.suggests:
        return problem(ProblemType.POLICY_VIOLATION, detail, instance=instance)
    return problem(
        ProblemType.POLICY_VIOLATION,
        detail,
        contract=contract,
        recovery_feedback=RecoveryFeedback(suggestions=list(suggestions or ())),
        instance=instance,
    )


def success_document(
    contract: ContractFields, result: Mapping[str, Any] | None = None
) -> SuccessResponse:
    """The 200 body from already rendered contract fields."""
    fields = contract.model_dump(exclude_none=True)
    return SuccessResponse(result=dict(result) if result is not None else None, **fields)


def _dependency(
    table: str, version: str, keys: frozenset[str] | None, key_set: bool
) -> dict[str, Any]:
    """A dependency-vector item as JSON: whole table, rows, or the key set and rows."""
    if keys is None:
        return {"table": table, "version": version}
    if key_set:
        return {"table": table, "version": version, "membership": {"keys": sorted(keys)}}
    return {"table": table, "version": version, "keys": sorted(keys)}
