"""Synthetic run artifacts for the metrics and report tests, written by the real ``ArtifactWriter``.

Load it from a test module with ``load_builder()`` (tests run with ``--import-mode=importlib``, so a
sibling module is not importable by name).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from invalidation_contracts.bench.artifacts import ArtifactWriter, RunKey, RunMetadata

ARM_CODES = {
    "none": "A0",
    "naive": "A1",
    "table": "A2",
    "row": "A2D",
    "row+consumers": "A2DC",
    "row+graph": "A2DG",
    "rules-oracle": "A2DO",
    "rules-stamp": "A2DR",
    "rules-stamp+vectors": "A2DRC",
}
ACTIONS = {"governed": "add_field", "funding": "conditional_rewrite", "control": "rewrite_value"}


@dataclass(frozen=True)
class Ep:
    """One episode to record: its class, and how the planner fared."""

    klass: str
    first_try: bool = True
    attempts: int | None = None
    completed: bool = True
    tokens: int = 100
    """Input tokens per attempt (output tokens are a tenth of it)."""

    @property
    def n_attempts(self) -> int:
        if self.attempts is not None:
            return self.attempts
        return 1 if self.first_try else 2


#: A 12-episode payments-like stream: a breaking rotation after 5 (stale slot 6), a benign bump
#: after 8.
STREAM = (
    "governed",
    "funding",
    "governed",
    "control",
    "none",
    "governed",
    "funding",
    "governed",
    "funding",
    "governed",
    "funding",
    "control",
)
DRIFT = (
    {"after_episode": 5, "kind": "breaking", "table": "promo_policy", "rules": None},
    {"after_episode": 8, "kind": "benign", "table": "funding_policy", "rules": None},
)
SLOTS = (6,)


def episodes(
    misses: Sequence[int] = (), stream: Sequence[str] = STREAM, **overrides: Any
) -> list[Ep]:
    """The stream's episodes, first-try except the 1-based episode numbers in ``misses``."""
    return [Ep(k, first_try=(i + 1) not in misses, **overrides) for i, k in enumerate(stream)]


def write_run(
    root: Path,
    eps: Sequence[Ep],
    *,
    scenario: str = "payments-drifted",
    planner: str = "simulated:compliant",
    arm: str = "row",
    seed: int = 1,
    detection: str = "eager",
    apply_mode: str = "planner",
    memory: Sequence[dict[str, Any]] = (),
    stale: Sequence[tuple[int, str]] = (),
    drift: Sequence[dict[str, Any]] | None = DRIFT,
    stale_slots: Sequence[int] | None = SLOTS,
    simulated: bool = True,
    level: int = 6,
    max_attempts: int = 5,
    wire: tuple[int, int, int, int] = (800, 120, 100, 20),
    command: str | None = None,
    rules_versions: Sequence[tuple[int, str]] = (),
    paper_bytes: tuple[int, int] | None = None,
    departures: Sequence[dict[str, Any]] | None = None,
    conditional: bool = False,
    unfaithful: Sequence[int] = (),
    planner_errors: Sequence[int] = (),
) -> RunKey:
    """Write one finished run; ``wire``: (response, contract, envelope, suggestion) bytes of a 422.

    ``rules_versions``: (first episode, fingerprint) steps the responses carry from then on;
    ``paper_bytes``: (paper's L1 field bytes, of them ``table_versions``) of every response;
    ``unfaithful``: episodes accepted on a request unfaithful to the task; ``planner_errors``:
    episodes whose first attempt was an unusable planner reply.
    """
    key = RunKey(scenario, planner, arm, seed, detection, apply_mode)
    writer = ArtifactWriter(root, key)
    for event in drift or ():
        target = f"table {event['table']}" if event.get("table") else f"rules {event['rules']}"
        writer.write(
            "drift",
            after_episode=event["after_episode"],
            kind=event["kind"],
            target=target,
            result={},
        )
    for number, ep in enumerate(eps, start=1):
        fingerprint = next(
            (v for first, v in sorted(rules_versions, reverse=True) if number >= first), None
        )
        for attempt in range(1, ep.n_attempts + 1):
            success = ep.completed and attempt == ep.n_attempts
            response, contract, envelope, suggestion = wire
            paper: dict[str, Any] = {}
            if paper_bytes is not None:
                paper = {
                    "paper_contract_bytes": paper_bytes[0],
                    "paper_envelope_bytes": paper_bytes[1],
                }
            if attempt == 1 and number in planner_errors and not success:
                writer.write(
                    "attempt",
                    episode=number,
                    attempt=attempt,
                    status=None,
                    request=None,
                    planner_error={"kind": "invalid_json", "detail": "not JSON", "raw": "oops"},
                    tokens_in=ep.tokens,
                    tokens_out=ep.tokens // 10,
                    tokens_estimated=simulated,
                )
                continue
            writer.write(
                "attempt",
                episode=number,
                attempt=attempt,
                status=200 if success else 422,
                request={},
                response_bytes=response // 2 if success else response,
                contract_bytes=envelope if success else contract,
                envelope_bytes=envelope,
                suggestion_bytes=0 if success else suggestion,
                suggestion_types=[] if success else ["ADD_REQUIRED_PROMO_CODE"],
                rules_version=fingerprint,
                tokens_in=ep.tokens,
                tokens_out=ep.tokens // 10,
                tokens_estimated=simulated,
                **paper,
            )
        writer.write(
            "episode",
            episode=number,
            family=f"{ep.klass}-family",
            klass=ep.klass,
            action=ACTIONS.get(ep.klass),
            attempts=ep.n_attempts if ep.completed else max_attempts,
            first_try=ep.first_try and ep.completed,
            completed=ep.completed,
            faithful=number not in unfaithful,
            unfaithful_fields=["amount_cents"] if number in unfaithful else [],
            stale_slot=number in (stale_slots or ()),
            injected=0,
            stale_injected=0,
            tokens_in=ep.tokens * ep.n_attempts,
            tokens_out=ep.tokens // 10 * ep.n_attempts,
        )
    for m in memory:
        writer.write(
            "memory",
            episode=m["episode"],
            attempt=m.get("attempt", 1),
            event=m["event"],
            entry=m.get("entry", "e1"),
            key=m.get("key", ["origin", "TYPE", {}]),
            reason=m.get("reason"),
            stale=m.get("stale"),
            **{k: m[k] for k in ("fix", "cascaded_from", "tables") if k in m},
        )
    for episode, entry in stale:
        writer.write("stale", episode=episode, entry=entry)
    extra: dict[str, Any] = {"arm_code": ARM_CODES.get(arm, arm)}
    if drift is not None:
        extra["drift"] = [dict(e) for e in drift]
    if stale_slots is not None:
        extra["stale_slots"] = list(stale_slots)
    if command is not None:
        extra["command"] = command
    if departures is not None:
        extra["departures"] = [dict(d) for d in departures]
    extra["conditional"] = conditional
    writer.finish(
        RunMetadata(
            key=key,
            package_version="0.1.0",
            scenario_digest="0" * 64,
            level=level,
            planner_simulated=simulated,
            planner_requested=planner,
            planner_served=None if simulated else planner,
            episodes=len(eps),
            completed=True,
            completed_episodes=sum(1 for e in eps if e.completed),
            extra=extra,
        )
    )
    return key
