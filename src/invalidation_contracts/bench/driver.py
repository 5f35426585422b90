"""The drift driver: applies a scenario's drift events between episodes, as an operator would.

Each event goes through the provider's admin endpoints over HTTP (in-process ASGI or a real URL),
and the same change is applied to the evaluator's shadow registry so the oracle sees what the
server sees.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Mapping
from typing import Any

import httpx

from ..domains.catalog import DomainCatalog
from ..server import DataFileError, Registry, RegistryState, TableChange
from .scenario import DriftEvent

#: A reload whose rows serialise to more than this goes as a patch of the rows that changed
#: (half the server's default request-body limit, 1 MiB).
RELOAD_BODY_BYTES = 512 * 1024
METRICS_PATH = "/contract/metrics"
WORKERS_BOUND_S = 30.0
"""How long an admin write may take to reach every worker (they publish their seq every second)."""
_WORKER_SEQ = re.compile(r"^invalidation_contracts_worker_seq(?:\{[^}]*\})? (\S+)", re.M)


class DriftError(RuntimeError):
    """A drift event the server refused, or whose files cannot be read."""


class DriftDriver:
    """Applies events to the server (through ``client``) and to the shadow registry."""

    def __init__(
        self, client: httpx.AsyncClient, catalog: DomainCatalog, shadow: Registry, admin_token: str
    ) -> None:
        self._client = client
        self._catalog = catalog
        self._shadow = shadow
        self._headers = {"Authorization": f"Bearer {admin_token}"}
        self._scrape: bool | None = None
        """Whether the server answers its metrics scrape (None: not asked yet)."""

    async def apply(self, event: DriftEvent) -> dict[str, Any]:
        """Apply one event; return the server's result (ReloadResult or RulesResult as JSON)."""
        try:
            if event.tables is not None:
                result = await self._change_set(event)
            elif event.table is not None:
                snap = self._catalog.read_snapshot(event.snapshot or "")
                if snap.table != event.table:
                    raise DriftError(
                        f"snapshot {event.snapshot!r} is for table {snap.table!r}, "
                        f"not {event.table!r}"
                    )
                version = event.version or snap.version
                result = await self._reload(snap.table, snap.rows, version)
                self._shadow.reload(snap.table, snap.rows, version)
            else:
                rules = self._catalog.read_rule_set(event.rules or "")
                declarations = [r.to_declaration().to_wire() for r in rules]
                result = await self._post("/admin/rules", {"rules": declarations})
                self._shadow.set_rules(rules)
        except (KeyError, DataFileError) as exc:
            raise DriftError(str(exc.args[0] if isinstance(exc, KeyError) else exc)) from exc
        return result

    async def _reload(
        self, table: str, rows: Mapping[str, Any], version: str | None
    ) -> dict[str, Any]:
        """Reload ``table`` with ``rows``; a table too large for one request body (τ²'s 9,000
        flight dates) goes as ``/admin/patch-table`` of the rows that differ from the shadow's,
        which leaves the server with the same rows (a reload that changes nothing stays a
        reload, so a touch still moves the version)."""
        body: dict[str, Any] = {"table": table, "rows": rows}
        if version:
            body["version"] = version
        if len(json.dumps(rows, separators=(",", ":"))) <= RELOAD_BODY_BYTES:
            return await self._post("/admin/reload-table", body)
        current = self._shadow.state.tables[table].plain_rows()
        upsert = {key: row for key, row in rows.items() if current.get(key) != row}
        delete = sorted(key for key in current if key not in rows)
        if not upsert and not delete:
            return await self._post("/admin/reload-table", body)
        patch: dict[str, Any] = {"table": table, "upsert": upsert, "delete": delete}
        if version:
            patch["version"] = version
        return await self._post("/admin/patch-table", patch)

    async def _change_set(self, event: DriftEvent) -> dict[str, Any]:
        """A multi-table event: one ``POST /admin/change-set``, one change set on the shadow."""
        items: list[dict[str, Any]] = []
        changes: dict[str, TableChange] = {}
        for part in event.table_drifts():
            snap = self._catalog.read_snapshot(part.snapshot)
            if snap.table != part.table:
                raise DriftError(
                    f"snapshot {part.snapshot!r} is for table {snap.table!r}, not {part.table!r}"
                )
            version = part.version or snap.version
            item: dict[str, Any] = {"table": snap.table, "rows": snap.rows}
            if version:
                item["version"] = version
            items.append(item)
            changes[snap.table] = TableChange.reload(snap.rows, version)
        result = await self._post("/admin/change-set", {"tables": items})
        self._shadow.apply(changes)
        return result

    async def reset(self, state: RegistryState) -> None:
        """Bring the server back to ``state``'s content (every table's rows and the rules).

        Versions cannot go backwards, so the server's stamps may then differ from ``state``'s;
        the oracle compares fix content only, so that does not matter.
        """
        for name, snapshot in state.tables.items():
            await self._post("/admin/reload-table", {"table": name, "rows": snapshot.plain_rows()})
        declarations = [r.to_declaration().to_wire() for r in state.rules]
        await self._post("/admin/rules", {"rules": declarations})

    async def _post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        response = await self._client.post(path, json=body, headers=self._headers)
        if response.status_code != 200:
            json_body = response.headers.get("content-type", "").split(";")[0].endswith("json")
            detail = response.json().get("detail") if json_body else response.text
            raise DriftError(f"{path} answered {response.status_code}: {detail}")
        answer: dict[str, Any] = response.json()
        seq = answer.get("contract_seq")
        if isinstance(seq, int) and not isinstance(seq, bool):
            await self._every_worker_serves(seq)
        return answer

    async def _every_worker_serves(self, seq: int) -> None:
        """Wait (bounded) until every worker of the server serves ``seq``, as its metrics scrape
        says (``serve --workers N --metrics``): the next request may reach any worker, and one
        that has not adopted the write yet (milliseconds) would answer from the state before
        it, which the shadow registry no longer holds. A server without the metrics route (one
        worker, or no ``--metrics``) serves the write at once: nothing to wait for."""
        if self._scrape is False:
            return
        deadline = time.monotonic() + WORKERS_BOUND_S
        while True:
            response = await self._client.get(METRICS_PATH, headers=self._headers)
            if response.status_code != 200:
                self._scrape = False
                return
            self._scrape = True
            seqs = [float(m) for m in _WORKER_SEQ.findall(response.text)]
            if seqs and min(seqs) >= seq:
                return
            if time.monotonic() > deadline:
                raise DriftError(f"the server's workers did not all serve seq {seq} in time")
            await asyncio.sleep(0.05)
