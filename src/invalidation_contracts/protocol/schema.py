"""JSON Schema (draft 2020-12) of every wire object."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .models import WIRE_MODELS


def json_schemas() -> dict[str, dict[str, Any]]:
    """The JSON Schema of each wire object, keyed by its model name."""
    return {name: model.model_json_schema(by_alias=True) for name, model in WIRE_MODELS.items()}


def write_schemas(directory: Path) -> list[Path]:
    """Write one ``<Name>.schema.json`` per wire object into ``directory``; return the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, schema in json_schemas().items():
        schema = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": name,
            **schema,
        }
        path = directory / f"{name}.schema.json"
        path.write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        written.append(path)
    return written
