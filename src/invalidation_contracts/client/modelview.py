"""What the model is shown of a response: the body without the contract's metadata.

The contract is for the memory, not for the model: every byte of it a model is shown is billed
as input tokens. ``model_view`` drops the response-level fields (``table_versions``,
``rules_version``, ``contract_seq``, ``contract_epoch``) and keeps of each suggestion only what a
model acts on — its ``type``, ``action``, ``message`` and ``parameters`` — so dependency vectors,
scopes, patches, rule vectors and cache hints (and any later contract extension) never reach it.
Everything else (the problem's title and detail, validation errors, a success's result) stays.
The memory keeps the raw body; this is a copy.

``joined_detail=False`` (what MCP hosts and adapters show) also drops a problem's ``detail`` when
it is only its suggestions' messages joined by ``"; "`` (the provider's detail of a policy
violation): the model reads each message once, beside the fix it explains. The harness keeps the
detail, so the prompts of recorded runs stay byte for byte what they were.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..protocol.wirecost import ENVELOPE_FIELDS

#: The members of a suggestion the model is shown; every other member is contract metadata.
SUGGESTION_MEMBERS = ("type", "action", "message", "parameters")


def model_view(body: Mapping[str, Any], *, joined_detail: bool = True) -> dict[str, Any]:
    """``body`` (a response or tool result's JSON object) as the model is shown it."""
    out = {name: value for name, value in body.items() if name not in ENVELOPE_FIELDS}
    feedback = out.get("recovery_feedback")
    if isinstance(feedback, Mapping):
        suggestions = feedback.get("suggestions")
        out["recovery_feedback"] = {
            **feedback,
            **(
                {"suggestions": [_suggestion(s) for s in suggestions]}
                if isinstance(suggestions, list)
                else {}
            ),
        }
        if not joined_detail and isinstance(suggestions, list) and suggestions:
            messages = [s.get("message") for s in suggestions if isinstance(s, Mapping)]
            texts = [m for m in messages if isinstance(m, str)]
            if len(texts) == len(suggestions) and out.get("detail") == "; ".join(texts):
                del out["detail"]
    return out


def model_text(body: Mapping[str, Any], *, joined_detail: bool = True) -> str:
    """``model_view(body)`` as the JSON text a prompt quotes (sorted keys, UTF-8)."""
    return json.dumps(
        model_view(body, joined_detail=joined_detail), sort_keys=True, ensure_ascii=False
    )


def _suggestion(item: object) -> Any:
    if not isinstance(item, Mapping):
        return item
    return {name: item[name] for name in SUGGESTION_MEMBERS if name in item}
