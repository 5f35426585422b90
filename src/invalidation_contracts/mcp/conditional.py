"""Conditional tool calls: a validator on a tool result, and the short answer to a re-call that
presents it while every stamp the answer relied on is unchanged (HTTP's ``If-None-Match``/304).

Pure functions. A validator is an opaque tag (``ic1-`` + 32 hex digits) over the tool, its
arguments (canonical JSON) and the contract stamps of the state the answer came from: the epoch,
the rules version and every table's version. Equal tags mean equal inputs, and an answer
computed from the registry's state alone is then the same answer, so the server may say "not
modified" instead of sending it again. Only such answers carry one: a policy violation (422)
or a request that fails the schema (400). A success is never answered "not modified": a tool
call may act (a POST charges), and a re-call must run.

Every table's version, not only those the violated rules read: a table no violated rule read
may still turn a passing rule into a violated one, so the tag is conservative (any table move
answers in full) and never wrong.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import mcp_types as types

from . import names

#: The problem statuses an answer that carries a validator may have (from arguments and state).
CONDITIONAL_STATUSES = frozenset({400, 422})
_TAG_PREFIX = "ic1-"
_MAX_TAG_LENGTH = 64
#: The text a host shows the model for a not-modified answer.
NOT_MODIFIED_TEXT = (
    '{"not_modified": true, "message": "unchanged: the previous answer to this call stands"}'
)


def call_validator(
    tool: str,
    arguments: Mapping[str, Any],
    *,
    epoch: str | None,
    rules_version: str | None,
    table_versions: Mapping[str, str] | None,
) -> str | None:
    """The validator of a call of ``tool`` with ``arguments`` answered from a state with these
    stamps; None when the stamps are not all known (nothing could show them unchanged)."""
    if epoch is None or rules_version is None or not table_versions:
        return None
    inputs = {
        "tool": tool,
        "arguments": dict(arguments),
        "epoch": epoch,
        "rules": rules_version,
        "tables": dict(table_versions),
    }
    canonical = json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=str)
    return _TAG_PREFIX + hashlib.sha256(canonical.encode()).hexdigest()[:32]


def presented(meta: Mapping[str, Any] | None) -> str | None:
    """The validator a request presents in its ``_meta`` (``IF_NONE_MATCH``), if well formed."""
    value = names.meta_value(meta, names.IF_NONE_MATCH)
    if isinstance(value, str) and value.startswith(_TAG_PREFIX) and len(value) <= _MAX_TAG_LENGTH:
        return value
    return None


def not_modified_result(
    validator: str, envelope: str = names.META_ENVELOPE
) -> types.CallToolResult:
    """The short answer to a re-call whose validator still holds: still ``isError`` (the answer
    it stands for was a rejection), a one-line text for the model, the validator in ``_meta``."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=NOT_MODIFIED_TEXT)],
        is_error=True,
        _meta={
            names.key_for(names.NOT_MODIFIED, envelope): True,
            names.key_for(names.VALIDATOR, envelope): validator,
        },
    )
