"""Run artifacts: one JSONL of records per run plus a run-metadata JSON beside it.

The JSONL is the single source of truth for metrics and reports: a report is rebuilt from
artifacts alone. Each line is one record with a ``record`` discriminator:

``attempt``  one attempt: ``episode, attempt, status, request, response_bytes, contract_bytes,
             envelope_bytes, suggestion_bytes, patch_bytes, suggestion_types, tokens_in,
             tokens_out, tokens_estimated, planner_retries``. An attempt whose planner reply was
             unusable sent nothing: ``status`` and ``request`` are null and ``planner_error`` is
             ``{kind: response | call, detail, raw}`` (``raw``: the reply's text, if there was one)
``memory``   one memory event: ``episode, attempt, event`` (store | evict | restamp | inject
             | supersede | quarantine | alert), ``entry, key, reason, stale`` (the oracle's label:
             for evict, whether the entry was stale when evicted, never null; for inject, whether
             the injected fix was stale for that episode's request; otherwise null). A store
             also carries ``fix: {type, parameters}``, the values the memory cached; a consumer
             eviction (A2DC) ``cascaded_from``, the entry whose eviction it followed. Attempt 0 is
             the fetches before the episode's first attempt (resync detection)
``stale``    the oracle found a live entry stale right after a drift event: ``episode, entry``
``drift``    an operator action: ``after_episode, kind, target, result``
``episode``  one finished episode: ``episode, family, klass, action, attempts, first_try,
             completed, faithful, unfaithful_fields, stale_slot, injected, stale_injected,
             planner_errors, planner_retries, tokens_in, tokens_out, tokens_estimated``.
             ``faithful`` (null when not completed): the accepted request carries the task's fields,
             changed only as a fix the episode saw says (``bench.faithfulness``);
             ``unfaithful_fields`` the fields where it does not
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO


@dataclass(frozen=True, slots=True)
class RunKey:
    """Identifies one cell of the grid."""

    scenario: str
    planner: str
    arm: str
    seed: int
    detection: str = "eager"
    apply_mode: str = "planner"

    @property
    def slug(self) -> str:
        planner = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.planner)
        variant = (
            ""
            if (self.detection, self.apply_mode) == ("eager", "planner")
            else f"-{self.detection}-{self.apply_mode}"
        )
        arm = self.arm.replace("+", "_")
        return f"{self.scenario}/{planner}/{arm}{variant}/seed-{self.seed}"


@dataclass(slots=True)
class RunMetadata:
    """What a report needs to know about a run besides its records."""

    key: RunKey
    package_version: str
    scenario_digest: str
    level: int
    planner_simulated: bool
    planner_requested: str
    planner_served: str | None
    episodes: int
    completed: bool = False
    completed_episodes: int = 0
    started_at: str = ""
    finished_at: str = ""
    preflight: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    """Why the run stopped before its last episode (``completed`` is then false)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunMetadata:
        data = dict(data)
        data["key"] = RunKey(**data["key"])
        return cls(**data)


def paths(root: Path, key: RunKey) -> tuple[Path, Path]:
    """(records JSONL, metadata JSON) of ``key`` under ``root``."""
    base = root / "runs" / key.slug
    return base.with_suffix(".jsonl"), base.with_suffix(".meta.json")


def is_complete(root: Path, key: RunKey) -> bool:
    """True when the run's metadata says it finished (a resumed grid skips it)."""
    _, meta = paths(root, key)
    try:
        return bool(json.loads(meta.read_text(encoding="utf-8")).get("completed"))
    except (OSError, ValueError):
        return False


class ArtifactWriter:
    """Writes one run's records; the metadata is written last, atomically (``completed`` says
    whether the run finished)."""

    def __init__(self, root: Path, key: RunKey) -> None:
        self.records_path, self.meta_path = paths(root, key)
        self.records_path.parent.mkdir(parents=True, exist_ok=True)
        self._file: TextIO = self.records_path.open("w", encoding="utf-8")

    def write(self, record: str, **fields: object) -> None:
        self._file.write(
            json.dumps({"record": record, **fields}, separators=(",", ":"), default=str) + "\n"
        )

    def finish(self, metadata: RunMetadata) -> None:
        self._file.close()
        tmp = self.meta_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(metadata.to_json(), indent=2, default=str), encoding="utf-8")
        os.replace(tmp, self.meta_path)

    def abort(self) -> None:
        """Close the records without metadata (the run reads as unfinished)."""
        self._file.close()


@dataclass(frozen=True, slots=True)
class Run:
    """A finished run read back: its metadata and records."""

    meta: RunMetadata
    records: tuple[dict[str, Any], ...]

    def of(self, record: str) -> Iterator[dict[str, Any]]:
        return (r for r in self.records if r["record"] == record)


def read_run(meta_path: Path) -> Run:
    meta = RunMetadata.from_json(json.loads(meta_path.read_text(encoding="utf-8")))
    records_path = meta_path.with_name(meta_path.name.removesuffix(".meta.json") + ".jsonl")
    with records_path.open(encoding="utf-8") as fh:
        records = tuple(json.loads(line) for line in fh if line.strip())
    return Run(meta, records)


def read_runs(root: Path) -> list[Run]:
    """Every completed run under ``root``, in a stable order."""
    runs = []
    for meta_path in sorted((root / "runs").rglob("*.meta.json")):
        run = read_run(meta_path)
        if run.meta.completed:
            runs.append(run)
    return runs
