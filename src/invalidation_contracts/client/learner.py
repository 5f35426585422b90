"""Drift learned from what the memory observes, for origins that speak no contract.

Without stamps the only evidence of a change is the server's own answers: a fix taught again
with another value for its key (a *refutation*: the value changed somewhere after the fix was last
known good), or the same value again (a *confirmation*). Each refutation bounds a change of that
fix type to an interval ``(last known good, refuted at]``; refutations of one type whose intervals
overlap are one change (a rotation seen from several scopes). From the changes the learner reads
a lifetime (the mean time from learning to change), a period (the gaps between successive
changes, each dated when seen, within a quarter of their mean: assumed from the first gap,
kept while later gaps agree) and
co-drift (types whose changes overlap). Pure logic over a JSON dict kept in
``OriginState.learner``; times are *ticks* (the episode number when the caller gives one, else
the clock in seconds).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

VERSION = 1
#: Changes kept per fix type (older ones are forgotten: bounded state).
MAX_CHANGES = 16
#: Per-entry confirmation ticks kept beyond the live entries before pruning.
SLACK = 64
#: Per-entry ticks are kept in this many shards, so a write copies one shard.
SHARDS = 64
#: How far successive gaps may stray from their mean and still be one period (a share of it).
PERIOD_TOLERANCE = 0.25
#: A co-drifting pair: changes that overlapped in at least this share of the rarer type's changes.
CO_DRIFT_SHARE = 0.5

Interval = tuple[float, float]
"""A change bounded by observation: after the first tick, at or before the second."""


def fresh() -> dict[str, Any]:
    """An empty learner state."""
    return {"v": VERSION, "types": {}, "checked": {}, "probed": {}}


#: The state a learner reads before its first write (never written to).
EMPTY: Mapping[str, Any] = fresh()


class _Owner(Protocol):
    """What holds a learner state (``OriginState``)."""

    learner: dict[str, Any]


def copy_learner(data: Mapping[str, Any]) -> dict[str, Any]:
    """The learner state for another memory call: the same object, since ``Learner`` never
    changes one in place (it writes a new state, copying only the parts it changes)."""
    return data  # type: ignore[return-value]


def shard(entry_id: str) -> str:
    """The shard of an entry's ticks: a write copies one shard, not every entry's tick."""
    return str(sum(entry_id.encode()) % SHARDS)


def readable_learner(data: object) -> dict[str, Any]:
    """``data`` if it is a learner state this version reads; otherwise a marker saying why it is
    not (``{"unreadable": why}``): the policy resets it with an event on its next call."""
    if data == {}:
        return {}
    why = problem(data)
    return {"unreadable": why} if why is not None else dict(data)  # type: ignore[call-overload]


def problem(data: object) -> str | None:
    """Why ``data`` is not a learner state of this version, or None."""
    if not isinstance(data, Mapping):
        return f"a {type(data).__name__}, not an object"
    if data.get("v") != VERSION:
        return f"version {data.get('v')!r}, expected {VERSION}"
    types, checked, probed = data.get("types"), data.get("checked"), data.get("probed")
    if not all(isinstance(part, Mapping) for part in (types, checked, probed)):
        return "types, checked and probed must be objects"
    if not all(isinstance(data.get(part, {}), Mapping) for part in ("cites", "validators")):
        return "cites and validators must be objects"
    assert isinstance(types, Mapping) and isinstance(checked, Mapping)
    assert isinstance(probed, Mapping)
    for name, record in types.items():
        if not isinstance(record, Mapping):
            return f"type {name!r} is not an object"
        changes, life = record.get("changes"), record.get("life")
        if not (isinstance(changes, list) and all(_interval(c) for c in changes)):
            return f"type {name!r}: changes must be [lo, hi] pairs"
        if not (isinstance(life, list) and len(life) == 2 and all(_number(x) for x in life)):
            return f"type {name!r}: life must be [count, sum]"
    for part in (checked, probed):
        for ticks in part.values():
            if not isinstance(ticks, Mapping) or not all(_number(t) for t in ticks.values()):
                return "checked and probed must map shards to {entry: tick}"
    return None


@dataclass(frozen=True, slots=True)
class Forecast:
    """What the learner expects of one fix type at a tick."""

    lifetime: float | None
    """Mean ticks from learning to change, once a change has been seen."""
    period: Interval | None
    """``(shortest, longest)`` period consistent with every gap, once two changes are seen."""
    last_change: Interval | None
    next_change: Interval | None
    """Where the next change falls if the type is periodic."""


class Learner:
    """A view over one origin's learner state. It never changes a state in place: each write
    puts a new state on ``owner.learner`` that shares every part it did not change."""

    def __init__(self, owner: _Owner) -> None:
        self.owner = owner

    @property
    def data(self) -> Mapping[str, Any]:
        return self.owner.learner or EMPTY

    def _edit(self, name: str) -> dict[str, Any]:
        """A new state with a fresh copy of part ``name``, installed; that copy, to write."""
        data = dict(self.data)
        part = data[name] = dict(data[name])
        self.owner.learner = data
        return part

    def _set_tick(self, name: str, entry_id: str, tick: float) -> None:
        outer = self._edit(name)
        where = shard(entry_id)
        inner = outer[where] = dict(outer.get(where, {}))
        inner[entry_id] = tick

    def _tick(self, name: str, entry_id: str) -> float | None:
        found = self.data[name].get(shard(entry_id), {}).get(entry_id)
        return None if found is None else float(found)

    # ------------------------------------------------------------------ observations

    def checked(self, entry_id: str, tick: float) -> None:
        """The entry's fix was known good at ``tick`` (confirmed, or accepted when injected)."""
        self._set_tick("checked", entry_id, tick)

    def last_good(self, entry_id: str, learned: float) -> float:
        """When the entry's fix was last known good: its last confirmation, else its learning."""
        tick = self._tick("checked", entry_id)
        return tick if tick is not None else learned

    def refuted(self, fix_type: str, since: float, at: float, learned: float) -> Interval:
        """A fix of ``fix_type`` good at ``since`` (learned at ``learned``) was refuted at ``at``:
        one change in ``(since, at]``, merged with the type's last change when they overlap."""
        types = self._edit("types")
        old = types.get(fix_type) or {"changes": [], "life": [0, 0.0]}
        changes: list[list[float]] = [list(c) for c in old["changes"]]
        lo, hi = min(since, at), at
        if changes and overlaps((changes[-1][0], changes[-1][1]), (lo, hi)):
            last = changes[-1]
            changes[-1] = [max(last[0], lo), min(last[1], hi)]
        else:
            changes.append([lo, hi])
            del changes[:-MAX_CHANGES]
        count, total = old["life"]
        types[fix_type] = {"changes": changes, "life": [count + 1, total + max(0.0, hi - learned)]}
        return (changes[-1][0], changes[-1][1])

    def probe(self, entry_id: str, tick: float) -> bool:
        """Mark the entry probed at ``tick``; False if it already was (a probe once per tick)."""
        if self._tick("probed", entry_id) == tick:
            return False
        self._set_tick("probed", entry_id, tick)
        return True

    def prune(self, live: int, ids: Callable[[], Iterable[str]]) -> None:
        """Forget the ticks of entries no longer live (``ids``), once they outnumber the ``live``
        entries by ``SLACK``."""
        for name in ("checked", "probed"):
            if sum(len(ticks) for ticks in self.data[name].values()) <= live + SLACK:
                continue
            keep = set(ids())
            outer = self._edit(name)
            for where, ticks in list(outer.items()):
                outer[where] = {k: v for k, v in ticks.items() if k in keep}

    # ------------------------------------------------------------------ forecasts

    def changes(self, fix_type: str) -> list[Interval]:
        record = self.data["types"].get(fix_type)
        return [(c[0], c[1]) for c in record["changes"]] if record else []

    def forecast(self, fix_type: str) -> Forecast:
        record = self.data["types"].get(fix_type)
        if not record or not record["changes"]:
            return Forecast(None, None, None, None)
        changes = self.changes(fix_type)
        count, total = record["life"]
        lifetime = total / count if count else None
        found = period(changes)
        last = changes[-1]
        upcoming = (last[1] + found[0], last[1] + found[1]) if found is not None else None
        return Forecast(lifetime, found, last, upcoming)

    def co_drifting(self, fix_type: str) -> list[str]:
        """The other types whose changes overlapped this type's in at least ``CO_DRIFT_SHARE`` of
        the rarer one's changes."""
        mine = self.changes(fix_type)
        out = []
        for other in sorted(self.data["types"]):
            if other == fix_type:
                continue
            theirs = self.changes(other)
            if mine and theirs and co_drift(mine, theirs) >= CO_DRIFT_SHARE:
                out.append(other)
        return out

    def suspect(self, fix_type: str, good_at: float, now: float) -> str | None:
        """Why a fix of ``fix_type`` last known good at ``good_at`` may have changed by ``now``:
        a change of its type (or of a co-drifting type) seen since, a periodic change predicted
        due, or an age past the learned lifetime; None when there is no reason to doubt it."""
        mine = self.changes(fix_type)
        if mine and good_at < mine[-1][1] <= now:
            return f"its type changed in ({mine[-1][0]:g}, {mine[-1][1]:g}]"
        for other, record in self.data["types"].items():
            last = record["changes"][-1] if record["changes"] else None
            if other == fix_type or last is None or not good_at < last[1] <= now:
                continue  # only a change seen since the fix was known good can doubt it
            if mine and co_drift(mine, self.changes(other)) >= CO_DRIFT_SHARE:
                return f"co-drifting type {other} changed in ({last[0]:g}, {last[1]:g}]"
        cast = self.forecast(fix_type)
        if cast.next_change is not None:
            if good_at < cast.next_change[1] and now >= cast.next_change[0]:
                lo, hi = cast.next_change
                return f"a periodic change is due in ({lo:g}, {hi:g}]"
            return None
        if cast.lifetime is not None and now - good_at >= cast.lifetime:
            return f"{now - good_at:g} ticks since known good, learned lifetime {cast.lifetime:g}"
        return None

    def summary(self) -> dict[str, Any]:
        """Per fix type: changes seen, lifetime, period and co-drifting types (for inspection)."""
        out: dict[str, Any] = {}
        for fix_type in sorted(self.data["types"]):
            cast = self.forecast(fix_type)
            out[fix_type] = {
                "changes": [list(c) for c in self.changes(fix_type)],
                "lifetime": cast.lifetime,
                "period": list(cast.period) if cast.period else None,
                "next_change": list(cast.next_change) if cast.next_change else None,
                "co_drifting": self.co_drifting(fix_type),
            }
        return out


def overlaps(a: Interval, b: Interval) -> bool:
    """Whether two change intervals ``(lo, hi]`` can hold the same change."""
    return a[0] < b[1] and b[0] < a[1]


def period(changes: list[Interval]) -> Interval | None:
    """``(shortest, longest)`` period when the gaps between successive changes (each dated by when
    it was seen) agree within ``PERIOD_TOLERANCE`` of their mean (at least one tick): assumed from
    two changes (one gap), dropped when a later gap disagrees; else None."""
    if len(changes) < 2:
        return None
    seen = [hi for _, hi in changes]
    gaps = [b - a for a, b in zip(seen, seen[1:], strict=False)]
    mean = sum(gaps) / len(gaps)
    slack = max(1.0, PERIOD_TOLERANCE * mean)
    if mean <= 0 or any(abs(gap - mean) > slack for gap in gaps):
        return None
    return (mean - slack, mean + slack)


def co_drift(a: list[Interval], b: list[Interval]) -> float:
    """The share of the rarer type's changes that overlap a change of the other."""
    rare, common = (a, b) if len(a) <= len(b) else (b, a)
    hits = sum(1 for x in rare if any(overlaps(x, y) for y in common))
    return hits / len(rare)


def _interval(value: object) -> bool:
    return isinstance(value, list) and len(value) == 2 and all(_number(x) for x in value)


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
