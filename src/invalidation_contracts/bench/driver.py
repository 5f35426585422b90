"""The drift driver: applies a scenario's drift events between episodes, as an operator would.

Each event goes through the provider's admin endpoints over HTTP (in-process ASGI or a real URL),
and the same change is applied to the evaluator's shadow registry so the oracle sees what the server sees.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from ..protocol.models import ReloadRequest, RuleDeclaration, RulesRequest
from ..server import Registry, Rule, read_snapshot
from .scenario import DriftEvent


class DriftError(RuntimeError):
    """A drift event the server refused, or whose files cannot be read."""


@dataclass(frozen=True, slots=True)
class DriftSources:
    """Where a domain keeps its drift material: snapshot files and rule-declaration files by name."""

    snapshots: Mapping[str, Path]
    rule_sets: Mapping[str, Path]

    def snapshot_request(self, event: DriftEvent) -> ReloadRequest:
        path = self.snapshots.get(event.snapshot or "")
        if path is None:
            raise DriftError(f"no snapshot named {event.snapshot!r}; known: {', '.join(sorted(self.snapshots))}")
        snap = read_snapshot(path)
        if snap.table != event.table:
            raise DriftError(f"snapshot {event.snapshot!r} is for table {snap.table!r}, not {event.table!r}")
        return ReloadRequest(table=snap.table, rows=snap.rows, version=event.version or snap.version)

    def rules_request(self, event: DriftEvent) -> RulesRequest:
        path = self.rule_sets.get(event.rules or "")
        if path is None:
            raise DriftError(f"no rule set named {event.rules!r}; known: {', '.join(sorted(self.rule_sets))}")
        try:
            declarations = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise DriftError(f"{path}: cannot read rule declarations ({exc})") from exc
        if isinstance(declarations, dict):
            declarations = declarations.get("rules", [])
        return RulesRequest(rules=[RuleDeclaration.model_validate(d) for d in declarations])


class DriftDriver:
    """Applies events to the server (through ``client``) and to the shadow registry."""

    def __init__(
        self, client: httpx.AsyncClient, sources: DriftSources, shadow: Registry, admin_token: str
    ) -> None:
        self._client = client
        self._sources = sources
        self._shadow = shadow
        self._headers = {"Authorization": f"Bearer {admin_token}"}

    async def apply(self, event: DriftEvent) -> dict[str, Any]:
        """Apply one event; return the server's result (ReloadResult or RulesResult as JSON)."""
        if event.table is not None:
            request = self._sources.snapshot_request(event)
            result = await self._post("/admin/reload-table", request.to_wire())
            self._shadow.reload(request.table, request.rows, request.version)
        else:
            request = self._sources.rules_request(event)
            result = await self._post("/admin/rules", request.to_wire())
            self._shadow.set_rules(Rule.from_declaration(d) for d in request.rules)
        return result

    async def _post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        response = await self._client.post(path, json=body, headers=self._headers)
        if response.status_code != 200:
            detail = response.json().get("detail") if response.headers.get("content-type", "").endswith("json") else response.text
            raise DriftError(f"{path} answered {response.status_code}: {detail}")
        return response.json()


ResolveSources = Callable[[str], DriftSources]
