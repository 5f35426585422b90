"""Stale injections in the drift window (issue 38 item 3): a lookup issued at once after an
agent hears that a drift was announced serves no fix the drift made stale.

Real processes on 127.0.0.1: ``invalidation-contracts serve --domain acme_billing --db DB`` (the
operator's worker; its ``/admin/reload-table`` makes the drift) and ``serve-mcp --transport http``
on the same ``--db``. Two agents, each a ``FixMemory("row")``:

- *HTTP watch*: ``httpx.Client`` over ``ContractTransport(memory, watch=True)`` to ``serve``;
- *MCP*: ``invalidation_contracts.mcp.connect(URL, memory)`` (notifications on) to ``serve-mcp``.

Per iteration the agent's failing call teaches the current promo code of ``plan_partner_growth``;
the operator reloads ``active_csm_codes`` with a new code; the adapter hears the change (the
watch event, the notification) and calls ``FixMemory.announced``. The probe wraps that call:
one lookup just before it (what the memory would serve without the withholding) and one lookup
at once after it, in the same thread, before the memory has read anything. A stale injection is
a lookup that returns the replaced code. Also counted: lookups made from the moment the reload
answered until the announcement arrived (the server's push latency, which a client cannot
withhold) that served the stale code.

``python -m benchmarks.drift_window [--iterations N]``
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .common import markdown_table
from .servers import ADMIN_TOKEN, ENV, serve_command

ITERATIONS = 200
TOOL = "create_subscription"
ROUTE = "/v1/subscriptions"
GROWTH = {
    "customer": "cus_northwind",
    "plan": "plan_partner_growth",
    "payment_method_token": "acme_pm_visa_corporate",
    "amount_cents": 19900,
    "currency": "usd",
}
OTHER_ROWS = {
    "plan_partner_starter": {"code": "PARTNERSTART10", "csm": "csm_jordan_blake"},
    "plan_agency_pro": {"code": "AGENCYPRO15", "csm": "csm_jordan_blake"},
}
CODES = ("WINTERLAUNCH26", "SPRINGRENEW27", "AUTUMNBOOST28", "SUMMERSALE25")
WAIT_S = 10.0


def codes(entries: Any) -> set[str]:
    return {str(e.suggestion.parameters.get("promo_code")) for e in entries}


def probe_memory(operation: str, draft: dict[str, Any]) -> Any:
    """A ``FixMemory("row")`` whose ``announced`` looks up just before and at once after."""
    from invalidation_contracts.client import FixMemory

    class Probe(FixMemory):
        stale: str | None = None
        heard = threading.Event()
        record: dict[str, Any] = {}

        def announced(self, origin: str, seq: int | None = None, epoch: str | None = None) -> None:
            before = codes(self.lookup(origin, draft, operation=operation).entries)
            super().announced(origin, seq, epoch)
            after = codes(self.lookup(origin, draft, operation=operation).entries)
            if self.stale is not None and not self.heard.is_set():
                self.record = {
                    "before": self.stale in before,
                    "after": self.stale in after,
                    "at": time.monotonic(),
                }
                self.heard.set()

    return Probe("row")


def reload_body(code: str) -> dict[str, Any]:
    rows = {"plan_partner_growth": {"code": code, "csm": "csm_avery_chen"}, **OTHER_ROWS}
    return {"table": "active_csm_codes", "rows": rows}


def drift(admin: Any, memory: Any, old: str, new: str, lookup: Any) -> dict[str, Any]:
    """Reload ``new`` over ``old``; wait until the adapter announces it; count what served."""
    memory.stale = old
    memory.heard.clear()
    answer = admin.post("/admin/reload-table", json=reload_body(new))
    answer.raise_for_status()
    answered, early, early_stale = time.monotonic(), 0, 0
    while not memory.heard.is_set():  # until the adapter hears: the server's push latency
        early += 1
        early_stale += old in lookup()
        if time.monotonic() - answered > WAIT_S:
            break
        memory.heard.wait(0.001)
    record = dict(memory.record) if memory.heard.is_set() else {"missed": True}
    memory.stale = None
    record.update(early=early, early_stale=early_stale)
    if "at" in record:
        record["push_ms"] = (record.pop("at") - answered) * 1000
    return record


def http_watch(base: str, iterations: int) -> list[dict[str, Any]]:
    import httpx

    from invalidation_contracts.httpx import ContractTransport

    memory = probe_memory(f"POST {ROUTE}", GROWTH)
    transport = ContractTransport(memory, watch=True)
    admin = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    records = []
    with httpx.Client(transport=transport, base_url=base, timeout=30) as client, admin:

        def lookup() -> set[str]:
            return codes(memory.lookup(base, GROWTH, operation=f"POST {ROUTE}").entries)

        current = learn_http(client, lookup, None)
        for i in range(iterations):
            new = CODES[i % len(CODES)] if CODES[i % len(CODES)] != current else CODES[-1]
            records.append(drift(admin, memory, current, new, lookup))
            current = learn_http(client, lookup, new)
    memory.close()
    return records


def learn_http(client: Any, lookup: Any, code: str | None) -> str:
    """Send the failing request until the memory serves ``code`` (any code when None: the
    first); the watch's read may race the failure."""
    deadline = time.monotonic() + WAIT_S
    while not learned(lookup(), code) and time.monotonic() < deadline:
        client.post(ROUTE, json=GROWTH)
        if not learned(lookup(), code):
            time.sleep(0.01)
    return learned(lookup(), code) or _never(code)


def learned(served: set[str], code: str | None) -> str | None:
    if code is None:
        return next(iter(served), None) if len(served) == 1 else None
    return code if code in served else None


def _never(code: str | None) -> str:
    raise RuntimeError(f"the agent never learned {code or 'the current code'}")


async def mcp(url: str, base: str, iterations: int) -> list[dict[str, Any]]:
    import anyio
    import httpx

    from invalidation_contracts.mcp import connect

    memory = probe_memory(TOOL, GROWTH)
    admin = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    records = []
    async with connect(url, memory) as tools:
        origin = tools.origin

        def lookup() -> set[str]:
            return codes(memory.lookup(origin, GROWTH, operation=TOOL).entries)

        async def learn(code: str | None) -> str:
            deadline = time.monotonic() + WAIT_S
            while not learned(lookup(), code) and time.monotonic() < deadline:
                await tools.call_tool(TOOL, GROWTH)
                if not learned(lookup(), code):
                    await anyio.sleep(0.01)
            return learned(lookup(), code) or _never(code)

        def drift_in_thread(old: str, new: str) -> dict[str, Any]:
            return drift(admin, memory, old, new, lookup)

        current = await learn(None)
        for i in range(iterations):
            new = CODES[i % len(CODES)] if CODES[i % len(CODES)] != current else CODES[-1]
            # the event loop stays free to hear the notification while the drift is awaited
            records.append(await anyio.to_thread.run_sync(drift_in_thread, current, new))
            current = await learn(new)
    admin.close()
    return records


@contextmanager
def serve_mcp(db: str) -> Iterator[str]:
    """``serve-mcp --transport http`` on ``db``; yields the URL it announces."""
    with tempfile.NamedTemporaryFile("w+b", suffix=".log") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "invalidation_contracts.cli",
                "serve-mcp",
                "--domain",
                "acme_billing",
                "--db",
                db,
                "--transport",
                "http",
                "--port",
                "0",
                "--tool-name",
                f"POST {ROUTE}={TOOL}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env={**os.environ, **ENV},
        )
        try:
            deadline = time.monotonic() + 90
            while True:
                found = re.search(rb"serving MCP at (\S+)", Path(log.name).read_bytes())
                if found:
                    yield found.group(1).decode()
                    break
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(Path(log.name).read_text()[-2000:])
                time.sleep(0.1)
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def run(iterations: int) -> dict[str, list[dict[str, Any]]]:
    import anyio

    with tempfile.TemporaryDirectory(prefix="drift-") as tmp:
        db = str(Path(tmp) / "registry.sqlite")
        with serve_command("--domain", "acme_billing", "--db", db) as server:
            base = f"http://127.0.0.1:{server.port}"
            results = {"HTTP watch (`ContractTransport(watch=True)` → `serve`)": []}
            results[next(iter(results))] = http_watch(base, iterations)
            with serve_mcp(db) as url:
                mcp_records = anyio.run(mcp, url, base, iterations)
            results["MCP streamable HTTP, notifications (`mcp.connect` → `serve-mcp`)"] = (
                mcp_records
            )
    return results


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else float("nan")


def report(results: dict[str, list[dict[str, Any]]]) -> str:
    rows = []
    for name, records in results.items():
        heard = [r for r in records if "missed" not in r]
        push = [r["push_ms"] for r in heard]
        rows.append(
            [
                name,
                f"{len(heard)} / {len(records)}",
                f"**{sum(r['after'] for r in heard)}**",
                str(sum(r["before"] for r in heard)),
                f"{sum(r['early_stale'] for r in records)} / {sum(r['early'] for r in records)}",
                f"{_median(push):.1f}",
                f"{max(push):.1f}" if push else "—",
            ]
        )
    return markdown_table(
        [
            "adapter",
            "drifts heard",
            "stale at once after the announcement",
            "stale just before it (without withholding)",
            "stale / lookups before it was heard",
            "push p50 (ms, from the reload's answer)",
            "push max (ms)",
        ],
        rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--iterations", type=int, default=ITERATIONS)
    args = parser.parse_args()
    started = os.getloadavg()[0]
    results = run(args.iterations)
    print(json.dumps(results))
    print(report(results))
    print(f"\nLoad average (1 min): {started:.2f} before, {os.getloadavg()[0]:.2f} after.")


if __name__ == "__main__":
    main()
