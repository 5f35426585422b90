"""What the three framework examples share: the Acme server and a scripted "model".

No LLM is reachable from these examples, so the model is scripted: it calls the tool with its
task's draft and, when it is shown a rejection, merges the suggestions' parameters it reads in
the text (what a compliant model does). Everything else is the framework's own machinery.
"""

import json

from invalidation_contracts.domains import get_catalog
from invalidation_contracts.mcp import contract_server
from invalidation_contracts.server import Provider

TOOL = "create_subscription"
ACME = get_catalog("acme_billing")
DRAFT = ACME.family("governed-partner-growth").draft()


def acme_server():
    """The Acme billing provider as an MCP server (``serve-mcp`` in process)."""
    provider = Provider(ACME.domain)
    return contract_server(provider, tool_names={"POST /v1/subscriptions": TOOL})


def next_arguments(previous: dict, shown: str) -> dict:
    """The arguments a model sends after reading ``shown`` for its failing call."""
    body = json.loads(shown[shown.index("{") :])
    merged = dict(previous)
    for suggestion in body.get("recovery_feedback", {}).get("suggestions", []):
        merged.update(suggestion.get("parameters") or {})
    return merged
