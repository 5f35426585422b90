"""Shared pieces of the framework tests: a scripted planner that reads only what the framework
shows the model, the Acme server over streamable HTTP and stdio, and the operator's rotation.

Every test drives a real framework (its own deterministic test model) through real tool calls to
a real MCP server: in this event loop over streamable HTTP on 127.0.0.1 (``running_http``), or a
``serve-mcp`` child process over stdio. No LLM is called.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any

import pytest

from invalidation_contracts.domains import get_catalog
from invalidation_contracts.domains.catalog import DomainCatalog
from invalidation_contracts.mcp import contract_server
from invalidation_contracts.server import Provider

OPERATION = "POST /v1/subscriptions"
TOOL = "create_subscription"
SERVE_MCP = [
    *("-m", "invalidation_contracts.cli", "serve-mcp", "--domain", "acme_billing"),
    *("--tool-name", f"{OPERATION}={TOOL}"),
]
PYTHON = sys.executable


@dataclass
class Planner:
    """A model that calls ``TOOL`` with its task's draft and, after a failure, merges the
    suggestions' parameters it was shown (text only, as a model reads it); records each call."""

    draft: dict[str, Any]
    calls: list[dict[str, Any]] = field(default_factory=list)
    shown: list[str] = field(default_factory=list)

    def first(self, prompt: str = "") -> dict[str, Any]:
        """The draft, with the fixes ``prompt`` shows (L2 lines) whose condition holds in it."""
        arguments = dict(self.draft)
        for parameters, condition in fixes_in(prompt):
            if all(arguments.get(name) == value for name, value in condition.items()):
                arguments.update(parameters)
        self.calls.append(arguments)
        return dict(arguments)

    def retry(self, shown: str) -> dict[str, Any]:
        """The next arguments after the model was shown ``shown`` for a failing call."""
        self.shown.append(shown)
        merged = dict(self.calls[-1])
        for suggestion in suggestions_in(shown):
            merged.update(suggestion.get("parameters") or {})
        self.calls.append(merged)
        return merged


def fixes_in(prompt: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """``(parameters, condition)`` of each fix an L2 instruction list in ``prompt`` shows, read
    as a model reads the text: ``... parameters {...} when NAME is VALUE and ....``."""
    found = []
    for line in prompt.splitlines():
        head, marker, rest = line.partition(" parameters ")
        if not marker or not head.strip()[:1].isdigit():
            continue
        parameters, end = json.JSONDecoder().raw_decode(rest)
        clauses = rest[end:].partition(" when ")[2].split(". Reason:")[0].rstrip(".")
        condition = {}
        for clause in filter(None, clauses.split(" and ")):
            name, _, value = clause.partition(" is ")
            condition[name] = json.loads(value)
        found.append((parameters, condition))
    return found


def suggestions_in(text: str) -> list[dict[str, Any]]:
    """The suggestions a model reads in a failing call's text (the first JSON object in it)."""
    start = text.find("{")
    if start < 0:
        return []
    try:
        body, _ = json.JSONDecoder().raw_decode(text[start:])
    except ValueError:
        return []
    if isinstance(body, dict) and isinstance(body.get("error"), str):  # PydanticAI's retry
        return suggestions_in(body["error"])
    feedback = body.get("recovery_feedback") if isinstance(body, dict) else None
    found = feedback.get("suggestions") if isinstance(feedback, dict) else None
    return [s for s in found or () if isinstance(s, dict)]


@pytest.fixture
def acme() -> DomainCatalog:
    return get_catalog("acme_billing")


@pytest.fixture
def provider(acme: DomainCatalog) -> Provider:
    return Provider(acme.domain)


@pytest.fixture
def server(provider: Provider) -> Any:
    return contract_server(provider, tool_names={OPERATION: TOOL})


def rotate(acme: DomainCatalog, provider: Provider, snapshot: str = "active_csm_codes.rotation-1"):
    """The operator reloads a table from one of the domain's snapshots; the new contract seq."""
    snap = acme.read_snapshot(snapshot)
    result = provider.registry.reload(snap.table, snap.rows, snap.version)
    return result.contract_seq
