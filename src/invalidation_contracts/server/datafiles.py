"""Table snapshot files: ``{"table": ..., "version": ..., "rows": {key: row}}`` as JSON or TOML."""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal


class DataFileError(ValueError):
    """A snapshot file that cannot be read or does not have the expected shape."""


@dataclass(frozen=True, slots=True)
class SnapshotFile:
    table: str
    rows: dict[str, dict[str, Any]]
    version: str | None


def read_data(path: Path, syntax: Literal["JSON", "TOML"]) -> Any:
    """The JSON or TOML document in ``path``; ``DataFileError`` with the path and the reason when
    it cannot be read, is not UTF-8 text or does not parse."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DataFileError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    except UnicodeDecodeError:  # a binary or UTF-16 file (reliability audit 2, N17)
        raise DataFileError(f"{path}: not UTF-8 text") from None
    try:
        return tomllib.loads(text) if syntax == "TOML" else json.loads(text)
    except (ValueError, RecursionError) as exc:  # JSON/TOML errors, a 5,000-digit integer
        raise DataFileError(f"{path}: not valid {syntax} ({exc})") from exc


def read_snapshot(path: str | Path) -> SnapshotFile:
    """Read one snapshot file; raise ``DataFileError`` with the path and the reason."""
    path = Path(path)
    data = read_data(path, "TOML" if path.suffix == ".toml" else "JSON")
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("table"), str)
        or not isinstance(data.get("rows"), dict)
    ):
        raise DataFileError(
            f"{path}: expected an object with 'table' (string) and 'rows' (object of key → row)"
        )
    version = data.get("version")
    if version is not None and not isinstance(version, str):
        raise DataFileError(f"{path}: 'version' must be a string")
    bad = [k for k, v in data["rows"].items() if not isinstance(v, dict)]
    if bad:
        raise DataFileError(f"{path}: rows must be objects; {bad[0]!r} is not")
    return SnapshotFile(data["table"], data["rows"], version)
