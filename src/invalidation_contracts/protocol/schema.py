"""JSON Schema (draft 2020-12) of every wire object."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

from .models import WIRE_MODELS


def json_schemas() -> dict[str, dict[str, Any]]:
    """The JSON Schema of each wire object, keyed by its model name."""
    return {name: model.model_json_schema(by_alias=True) for name, model in WIRE_MODELS.items()}


def _write_no_follow(path: Path, text: str) -> None:
    """Write ``path`` without following a link: ``OSError`` if it is one; else a new file
    (``O_EXCL | O_NOFOLLOW``) renamed over it, so a link planted meanwhile is replaced, never
    written through (hostile audit H13)."""
    if path.is_symlink():
        raise OSError(f"{path} is a symbolic link; refusing to write through it")
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(temporary, flags, 0o644)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_schemas(directory: Path) -> list[Path]:
    """Write one ``<Name>.schema.json`` per wire object into ``directory``; return the paths.
    ``OSError`` for a name there that is a symbolic link (nothing is written through one)."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, schema in json_schemas().items():
        schema = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": name,
            **schema,
        }
        path = directory / f"{name}.schema.json"
        _write_no_follow(path, json.dumps(schema, indent=2, sort_keys=True) + "\n")
        written.append(path)
    return written
