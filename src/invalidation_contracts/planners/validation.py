"""Client-side checks of a model's reply before it is sent as a request body.

A constrained decoder (a server's ``json_schema`` mode, a forced tool call) usually returns a
body that matches the request schema, but nothing guarantees it: a server may ignore the schema,
fall back to ``json_object``, or the model may echo the schema itself. Every reply is validated
against the request's JSON Schema here, with ``jsonschema-rs`` (pure check, no I/O). The vendor
adapters import this module after checking their extra, which carries ``jsonschema-rs``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

import jsonschema_rs

from .errors import PlannerResponseError

#: Keywords of a JSON Schema object; a reply holding them (and no such property) echoes a schema.
_SCHEMA_KEYWORDS = frozenset(
    {"$schema", "properties", "required", "additionalProperties", "$defs", "definitions"}
)
_MAX_REPORTED_ERRORS = 3


def check_request(value: object, schema: Mapping[str, Any], *, raw: str | None) -> dict[str, Any]:
    """``value`` when it is a JSON object that ``schema`` accepts; else PlannerResponseError."""
    if not isinstance(value, dict):
        raise PlannerResponseError(
            f"reply is a JSON {type(value).__name__}, not an object", raw=raw
        )
    if echoes_schema(value, schema):
        raise PlannerResponseError(
            "reply echoes the JSON Schema's shape instead of giving a request body", raw=raw
        )
    errors = [
        f"{'/'.join(str(p) for p in error.instance_path) or '(body)'}: {error.message}"
        for error in _validator(_schema_key(schema)).iter_errors(value)
    ]
    if errors:
        more = len(errors) - _MAX_REPORTED_ERRORS
        shown = "; ".join(errors[:_MAX_REPORTED_ERRORS])
        shown += f"; and {more} more" if more > 0 else ""
        raise PlannerResponseError(f"reply does not match the request schema: {shown}", raw=raw)
    return value


def echoes_schema(value: Mapping[str, Any], schema: Mapping[str, Any]) -> bool:
    """True when ``value`` looks like a JSON Schema rather than a body the schema describes.

    It has ``properties`` (or another schema keyword, or ``type: object``) that the request
    schema does not declare as a property of the body.
    """
    declared = set(schema.get("properties", {}))
    keywords = (set(value) & _SCHEMA_KEYWORDS) - declared
    typed = value.get("type") == "object" and "type" not in declared
    return bool(keywords) or typed


def _schema_key(schema: Mapping[str, Any]) -> str:
    return json.dumps(schema, sort_keys=True, separators=(",", ":"))


@functools.lru_cache(maxsize=64)
def _validator(key: str) -> jsonschema_rs.Validator:
    """One compiled validator per distinct schema (a run shows the same schema every time)."""
    return jsonschema_rs.validator_for(json.loads(key))
