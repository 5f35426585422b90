"""Drift windows: what a run did between one drift event and the next (DEFINITIONS "Drift").

``drift_events`` reads a run's events (its manifest, else its records); ``windows`` folds the
memory records between consecutive events into a ``DriftWindow`` each, events applied after the
same episode into one window with a ``DriftPart`` per event.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..artifacts import Run


@dataclass(frozen=True, slots=True)
class DriftPart:
    """One of several events applied after the same episode, with its own figures.

    Nothing runs between such events, so each eviction and restamp of the window is attributed by
    what it concerns: an eviction to each event that changed a table the evicted entry depended on
    (a rules event: an eviction for a rules change), a restamp to each event whose table (or the
    rules) it restamped. An entry depending on tables of two events counts under both; the
    window's own figures count it once."""

    target: str
    kind: str
    rules: bool
    evictions: int
    evictions_correct: int
    evictions_wrong: int
    restamps: int


@dataclass(frozen=True, slots=True)
class DriftWindow:
    """What a run did between one drift event and the next. Events applied after the same
    episode are one window (``_change_sets``): nothing runs between them to tell them apart."""

    after_episode: int
    kind: str
    target: str
    rules: bool
    until_episode: int | None
    """The next event's ``after_episode`` (the window's last episode); None for the last event."""
    reached: bool
    """Whether the run recorded any episode after the event."""
    evictions: int
    evictions_correct: int
    evictions_wrong: int
    restamps: int
    alert: int | None
    """Rule events: the episode the arm first learned the rules changed (DEFINITIONS "Alert")."""
    parts: tuple[DriftPart, ...] = ()
    """Each event of a window several share, with its own figures (empty for a single event)."""


def drift_events(run: Run) -> list[dict[str, Any]]:
    """The run's drift events in order: the manifest's (``extra["drift"]``), else the records."""
    manifest = run.meta.extra.get("drift")
    if manifest is not None:
        events = []
        for e in manifest:
            tables = [str(t["table"]) for t in e.get("tables") or ()]
            if tables:
                target = "tables " + " + ".join(tables)
            elif e.get("table"):
                tables, target = [str(e["table"])], f"table {e['table']}"
            else:
                target = f"rules {e.get('rules')}"
            events.append(
                {
                    "after_episode": int(e["after_episode"]),
                    "kind": e.get("kind", ""),
                    "target": target,
                    "rules": bool(e.get("rules")),
                    "tables": tables,
                }
            )
    else:
        events = [
            {
                "after_episode": int(r["after_episode"]),
                "kind": r.get("kind", ""),
                "target": str(r.get("target", "")),
                "rules": str(r.get("target", "")).startswith("rules"),
                "tables": _target_tables(str(r.get("target", ""))),
            }
            for r in run.of("drift")
        ]
    return sorted(events, key=lambda e: e["after_episode"])


def _target_tables(target: str) -> list[str]:
    """The tables a drift record's target names (``table a``, ``tables a + b``; rules: none)."""
    for prefix in ("tables ", "table "):
        if target.startswith(prefix):
            return [t.strip() for t in target[len(prefix) :].split("+")]
    return []


def _rules_version_before(attempts: Sequence[Mapping[str, Any]], episode: int) -> str | None:
    """The ``rules_version`` of the last response recorded up to the end of ``episode``."""
    seen = [
        a
        for a in attempts
        if int(a.get("episode", 0)) <= episode and a.get("rules_version") is not None
    ]
    if not seen:
        return None
    last = max(seen, key=lambda a: (int(a.get("episode", 0)), int(a.get("attempt", 0))))
    return str(last["rules_version"])


def _alert(
    event: Mapping[str, Any],
    inside: Sequence[Mapping[str, Any]],
    attempts: Sequence[Mapping[str, Any]],
    until: int | None,
    detection: str,
) -> int | None:
    """DEFINITIONS "Alert": the first ``alert`` record, else (lazy) the first failure-gated one."""
    if not event["rules"]:
        return None
    alerts = [int(m["episode"]) for m in inside if m.get("event") == "alert"]
    if alerts:
        return min(alerts)
    if detection != "lazy":
        return None
    start = event["after_episode"]
    before = _rules_version_before(attempts, start)
    if before is None:
        return None
    sightings = [
        int(a["episode"])
        for a in attempts
        if start < int(a.get("episode", 0)) <= (until if until is not None else 1 << 30)
        and a.get("status") == 422
        and a.get("rules_version") not in (None, before)
    ]
    return min(sightings, default=None)


KIND_RANK = {"breaking": 0, "benign": 1, "touch": 2}


def _change_sets(events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Events applied after the same episode, as one: no episode runs between them, so what
    follows answers to all of them together. Its target names each part with its own label
    (``table a (benign) + table b (breaking)``), its kind is the strongest part's."""
    merged: list[dict[str, Any]] = []
    for event in events:
        if merged and merged[-1]["after_episode"] == event["after_episode"]:
            last = merged[-1]
            last.setdefault("events", [dict(last)]).append(dict(event))
            parts = last.setdefault("parts", [(last["target"], last["kind"])])
            parts.append((event["target"], event["kind"]))
            last["target"] = " + ".join(f"{target} ({kind})" for target, kind in parts)
            last["kind"] = min((k for _, k in parts), key=lambda k: KIND_RANK.get(k, 3))
            last["rules"] = bool(last["rules"] or event["rules"])
        else:
            merged.append(dict(event))
    return merged


def windows(
    events: list[dict[str, Any]],
    memory: list[dict[str, Any]],
    attempts: list[dict[str, Any]],
    last_episode: int,
    detection: str,
) -> tuple[DriftWindow, ...]:
    windows = []
    events = _change_sets(events)
    # Each entry's dependency tables, as its store record names them.
    depends = {
        str(m.get("entry")): set(m.get("tables") or ()) for m in memory if m.get("event") == "store"
    }
    for i, event in enumerate(events):
        start = event["after_episode"]
        until = events[i + 1]["after_episode"] if i + 1 < len(events) else None
        inside = [
            m
            for m in memory
            if int(m.get("episode", 0)) > start
            and (until is None or int(m.get("episode", 0)) <= until)
        ]
        evicts = [m for m in inside if m.get("event") == "evict"]
        windows.append(
            DriftWindow(
                after_episode=start,
                kind=event["kind"],
                target=event["target"],
                rules=event["rules"],
                until_episode=until,
                reached=last_episode > start,
                evictions=len(evicts),
                evictions_correct=sum(1 for m in evicts if m.get("stale") is True),
                evictions_wrong=sum(1 for m in evicts if m.get("stale") is False),
                restamps=sum(1 for m in inside if m.get("event") == "restamp"),
                alert=_alert(event, inside, attempts, until, detection),
                parts=tuple(_part(e, inside, depends) for e in event.get("events", ())),
            )
        )
    return tuple(windows)


def _part(
    event: Mapping[str, Any], inside: Sequence[Mapping[str, Any]], depends: Mapping[str, set[str]]
) -> DriftPart:
    """One event of a shared window, with the evictions and restamps attributed to it."""
    tables = set(event.get("tables") or ())

    def evicted_by(m: Mapping[str, Any]) -> bool:
        if event["rules"]:
            return m.get("reason") == "rules"
        return bool(depends.get(str(m.get("entry")), set()) & tables)

    def restamped_by(m: Mapping[str, Any]) -> bool:
        touched = set(m.get("tables") or ())
        return "rules" in touched if event["rules"] else bool(touched & tables)

    evicts = [m for m in inside if m.get("event") == "evict" and evicted_by(m)]
    return DriftPart(
        target=event["target"],
        kind=event["kind"],
        rules=event["rules"],
        evictions=len(evicts),
        evictions_correct=sum(1 for m in evicts if m.get("stale") is True),
        evictions_wrong=sum(1 for m in evicts if m.get("stale") is False),
        restamps=sum(1 for m in inside if m.get("event") == "restamp" and restamped_by(m)),
    )
