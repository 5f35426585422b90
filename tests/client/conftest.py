"""A reference server in miniature, and a driver that plays the adapter's part for the memory.

``FakeOrigin`` keeps versioned tables, rules and a change log, and produces the wire bodies a
contract server sends (success, 422 problem, changes feed, rules listing). ``Driver`` observes its
responses with a ``FixMemory`` and fulfils the memory's needs, as the httpx transport would.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from invalidation_contracts.client import FetchChanges, FixMemory, Observation
from invalidation_contracts.client.values import Answer, Observed
from invalidation_contracts.protocol import ProblemType, rules_version

ORIGIN = "https://api.test"
R_PROMO = ("codes", "promos", "requires_recognition")
R_CREDIT = ("tokens", "recommended", "funds")
R_EXTRA = ("promos", "codes", "assigned_by")


class Gone(Exception):
    """The change log no longer covers the requested position (HTTP 410)."""


class FakeOrigin:
    def __init__(
        self,
        tables: Mapping[str, Mapping[str, Any]],
        rules: Iterable[tuple[str, str, str]] = (),
        *,
        url: str = ORIGIN,
        epoch: str = "epoch-1",
    ) -> None:
        self.url = url
        self.epoch = epoch
        self.tables = {
            name: {key: _copy(row) for key, row in rows.items()} for name, rows in tables.items()
        }
        self.minor = {name: 0 for name in tables}
        self.changed_at = {name: 0 for name in tables}
        self.rules = set(rules)
        self.vias: dict[tuple[str, str, str], str] = {}
        self.sends_vias = True
        """Whether fixes carry ``rule_vias`` (False: a server predating the field)."""
        self.seq = 0
        self.floor = 0
        self.row_log: list[dict[str, Any]] = []
        self.table_log: list[dict[str, Any]] = []
        self.rule_log: list[dict[str, Any]] = []

    # -- drift
    def version(self, table: str) -> str:
        return f"1.0.{self.minor[table]}"

    def reload(
        self, table: str, rows: Mapping[str, Any], *, affected: Iterable[str] = ()
    ) -> dict[str, list[str]]:
        old, new = self.tables[table], {key: _copy(row) for key, row in rows.items()}
        diff = {
            "added": sorted(set(new) - set(old)),
            "removed": sorted(set(old) - set(new)),
            "changed": sorted(k for k in set(old) & set(new) if old[k] != new[k]),
        }
        self.seq += 1
        old_version = self.version(table)
        self.minor[table] += 1
        new_version = self.version(table)
        for op, keys in diff.items():
            for key in keys:
                self.row_log.append(
                    {
                        "seq": self.seq,
                        "table": table,
                        "key": key,
                        "op": op,
                        "old_version": old_version,
                        "new_version": new_version,
                    }
                )
        self.table_log.append(
            {
                "seq": self.seq,
                "table": table,
                "old_version": old_version,
                "new_version": new_version,
                "touch": not any(diff.values()),
                "affected_downstream": list(affected),
            }
        )
        self.tables[table] = new
        self.changed_at[table] = self.seq
        return diff

    def update(self, table: str, key: str, row: Any = None, **kwargs: Any) -> dict[str, list[str]]:
        """Change (or with ``row=None`` remove) one row, as a reload of the whole table."""
        rows = dict(self.tables[table])
        if row is None:
            rows.pop(key, None)
        else:
            rows[key] = row
        return self.reload(table, rows, **kwargs)

    def touch(self, table: str) -> dict[str, list[str]]:
        return self.reload(table, self.tables[table])

    def set_rules(self, rules: Iterable[tuple[str, str, str]]) -> None:
        new = set(rules)
        self.seq += 1
        self.rule_log.append(
            {
                "seq": self.seq,
                "old_rules_version": self.rules_version,
                "new_rules_version": self._fingerprint(new),
                "added": sorted(new - self.rules),
                "removed": sorted(self.rules - new),
            }
        )
        self.rules = new

    def set_via(self, rule: tuple[str, str, str], via: str | None) -> None:
        """Change which field of the from-row a rule follows: the triples stay, the stamp moves."""
        if via is None:
            self.vias.pop(rule, None)
        else:
            self.vias[rule] = via
        self.seq += 1

    def _fingerprint(self, rules: Iterable[tuple[str, str, str]]) -> str:
        return rules_version((*rule, self.vias.get(rule)) for rule in rules)

    def forget_log(self) -> None:
        """Truncate the change log: a ``since`` before now gets 410."""
        self.floor = self.seq

    def new_epoch(self, epoch: str) -> None:
        self.epoch = epoch
        self.forget_log()

    @property
    def rules_version(self) -> str:
        return self._fingerprint(self.rules)

    # -- wire bodies
    def contract(self, since: int | None = None) -> dict[str, Any]:
        tables = (
            sorted(self.tables)
            if since is None
            else sorted(t for t in self.tables if self.changed_at[t] > since)
        )
        return {
            "table_versions": {t: self.version(t) for t in tables},
            "rules_version": self.rules_version,
            "contract_seq": self.seq,
            "contract_epoch": self.epoch,
        }

    def success(self, since: int | None = None) -> dict[str, Any]:
        return {"success": True, "result": {"id": "ok"}, **self.contract(since)}

    def failure(self, *suggestions: dict[str, Any], since: int | None = None) -> dict[str, Any]:
        kind = ProblemType.POLICY_VIOLATION
        return {
            "type": kind.uri,
            "title": kind.title,
            "status": 422,
            "success": False,
            "recovery_feedback": {"suggestions": list(suggestions)},
            **self.contract(since),
        }

    def fix(
        self,
        type: str,
        parameters: dict[str, Any],
        *,
        scope: dict[str, Any] | None = None,
        reads: Mapping[str, Iterable[str] | None] | None = None,
        rules: Iterable[tuple[str, str, str]] = (),
        action: str = "add_field",
        cache_hint: str = "cacheable",
        level: int = 4,
        **extra: Any,
    ) -> dict[str, Any]:
        """A suggestion as the server emits it; ``reads`` is ``{table: keys or None}``."""
        out: dict[str, Any] = {
            "type": type,
            "parameters": parameters,
            "action": action,
            "cache_hint": cache_hint,
        }
        reads = dict(reads or {})
        if cache_hint == "cacheable" and reads:
            out["table"] = next(iter(reads))
            if level >= 4:
                out["tables"] = [
                    {
                        "table": t,
                        "version": self.version(t),
                        **({"keys": sorted(k)} if k is not None else {}),
                    }
                    for t, k in reads.items()
                ]
                out["rules"] = [list(r) for r in sorted(rules)]
                vias = [self.vias.get(r) for r in sorted(rules)]
                if self.sends_vias and any(v is not None for v in vias):
                    out["rule_vias"] = vias
        if scope:
            out["scope"] = scope
        else:
            out["origin_wide"] = True  # an unscoped fix is kept only when marked origin-wide
        out.update(extra)
        return {name: value for name, value in out.items() if value is not None}

    def changes(self, since: int, epoch: str | None = None) -> dict[str, Any]:
        if since < self.floor or since > self.seq or epoch not in (None, self.epoch):
            raise Gone(since)
        return {
            "contract_epoch": self.epoch,
            "since": since,
            "last_seq": self.seq,
            "rows": [r for r in self.row_log if r["seq"] > since],
            "tables": [t for t in self.table_log if t["seq"] > since],
            "rules": [r for r in self.rule_log if r["seq"] > since],
        }

    def rules_listing(self) -> dict[str, Any]:
        return {
            "rules_version": self.rules_version,
            "rules": [
                {"from_table": a, "to_table": b, "relation": c, "via": self.vias.get((a, b, c))}
                for a, b, c in sorted(self.rules)
            ],
        }


class Driver:
    """Plays the adapter: sends the server's bodies to the memory and fulfils its needs."""

    def __init__(self, memory: FixMemory, server: FakeOrigin, *, conditional: bool = False) -> None:
        self.memory = memory
        self.server = server
        self.conditional = conditional
        self.episode = 0

    @property
    def origin(self) -> str:
        return self.server.url

    def begin(self, episode: int | None = None) -> list[Any]:
        self.episode = episode if episode is not None else self.episode + 1
        needs = self.memory.begin_episode(self.origin, self.episode)
        return self.settle(Observation((), tuple(needs)))

    def ok(
        self, request: dict[str, Any] | None = None, *, injected: Iterable[str] = ()
    ) -> list[Any]:
        since = self.memory.position(self.origin).seq if self.conditional else None
        body = self.server.success(since)
        return self._observe(request, 200, body, injected, since)

    def fail(
        self,
        *suggestions: dict[str, Any],
        request: dict[str, Any] | None = None,
        injected: Iterable[str] = (),
    ) -> list[Any]:
        since = self.memory.position(self.origin).seq if self.conditional else None
        body = self.server.failure(*suggestions, since=since)
        return self._observe(request, 422, body, injected, since)

    def _observe(self, request, status, body, injected, since) -> list[Any]:
        obs = self.memory.observe(
            self.origin,
            Observed(request, status, body, injected=injected, delta_since=since),
            episode=self.episode,
        )
        return self.settle(obs)

    def settle(self, obs: Observation) -> list[Any]:
        events = list(obs.events)
        needs = list(obs.needs)
        for _ in range(5):
            if not needs:
                break
            follow = []
            for need in needs:
                if isinstance(need, FetchChanges):
                    try:
                        feed = self.server.changes(need.since, need.epoch)
                    except Gone:
                        answer = Answer.resync()
                    else:
                        answer = Answer.changes(feed)
                else:
                    answer = Answer.rules(self.server.rules_listing())
                result = self.memory.answer(need, answer, episode=self.episode)
                events.extend(result.events)
                follow.extend(result.needs)
            needs = follow
        return events


def _copy(row: Any) -> Any:
    return dict(row) if isinstance(row, Mapping) else row


def standard_tables() -> dict[str, dict[str, Any]]:
    return {
        "codes": {"plan_a": {"code": "SUMMER"}, "plan_b": {"code": "SPRING"}},
        "tokens": {"tok_x": {"funding": "debit"}, "tok_y": {"funding": "debit"}},
        "promos": {"SUMMER": {"ok": True}, "SPRING": {"ok": True}},
    }


@pytest.fixture(scope="session")
def fake_origin() -> type[FakeOrigin]:
    return FakeOrigin


@pytest.fixture(scope="session")
def driver_class() -> type[Driver]:
    return Driver


@pytest.fixture
def server() -> FakeOrigin:
    return FakeOrigin(standard_tables(), {R_PROMO, R_CREDIT})


@pytest.fixture
def standard_fixes():
    """The three fixes most tests start from: two on ``codes`` rows, one on a ``tokens`` row."""

    def make(server: FakeOrigin) -> list[dict[str, Any]]:
        return [
            server.fix(
                "ADD_PROMO",
                {"promo_code": "SUMMER"},
                scope={"plan": "plan_a"},
                reads={"codes": ["plan_a"]},
                rules=[R_PROMO],
            ),
            server.fix(
                "ADD_PROMO",
                {"promo_code": "SPRING"},
                scope={"plan": "plan_b"},
                reads={"codes": ["plan_b"]},
                rules=[R_PROMO],
            ),
            server.fix(
                "USE_CREDIT",
                {"token": "tok_z"},
                scope={"token": "tok_x"},
                reads={"tokens": ["tok_x"]},
                rules=[R_CREDIT],
            ),
        ]

    return make


@pytest.fixture
def rules() -> dict[str, tuple[str, str, str]]:
    return {"promo": R_PROMO, "credit": R_CREDIT, "extra": R_EXTRA}
