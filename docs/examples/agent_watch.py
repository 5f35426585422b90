"""Push over plain HTTP: a change committed while an agent idles is evicted before it asks again.

Needs the ``server`` extra for the provider it serves and the ``httpx`` extra for the agent's
transport: ``pip install '.[server,httpx]'``.

Serves the Acme billing provider with uvicorn on a free port of 127.0.0.1 (in a thread of this
process), then an agent whose httpx client keeps a watch open on it:
    python docs/examples/agent_watch.py
"""

import socket
import threading
import time

import httpx
import uvicorn

from invalidation_contracts.client import FixMemory
from invalidation_contracts.domains import get_catalog
from invalidation_contracts.httpx import contract_client, watches
from invalidation_contracts.server.http.app import create_app

TOKEN = "operator-secret-for-the-example"


def serve_in_thread(app: object) -> tuple[str, uvicorn.Server]:
    """Uvicorn on a free loopback port; returns its URL once it accepts connections."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("the example's server did not start")
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}", server


def main() -> None:
    catalog = get_catalog("acme_billing")
    url, server = serve_in_thread(create_app(catalog.domain, level=6, admin_token=TOKEN))
    draft = catalog.family("governed-partner-growth").draft()
    try:
        memory = FixMemory("row")
        with contract_client(memory, base_url=url, watch=True) as http:
            http.post("/v1/subscriptions", json=draft)  # opens the watch on this origin
            print("learned:", [e.type for e in memory.entries(url)])

            # the agent idles; the operator rotates the promo codes
            rotation = catalog.read_snapshot("active_csm_codes.rotation-1")
            reload = httpx.post(
                f"{url}/admin/reload-table",
                json={"table": rotation.table, "rows": rotation.rows},
                headers={"Authorization": f"Bearer {TOKEN}"},
            )
            seq = reload.json()["contract_seq"]
            watches(http).caught_up(url, seq, timeout_s=5)  # optional: wait for it
            print("before any request, evicted:", [t.reason.value for t in memory.tombstones(url)])
        memory.close()
    finally:
        server.should_exit = True


if __name__ == "__main__":
    main()
