"""The operator page: server-rendered HTML plus one small script that keeps it current.

``GET {prefix}/contract/operator`` (admin token) shows every worker's position and the totals
over all of them with their time series (``observe.fleet``), table versions, recent change sets
with their row diffs, the graph around a chosen node (``?node=table:key``), the answering
worker's readiness and lag, and the per-client scores; ``…/operator/state`` is the same as
JSON, which the script (``…/operator/operator.js``, no build step) polls every ``POLL_MS`` and
re-renders from. The admin
token is accepted as ``Authorization: Bearer <token>`` or as the password of HTTP Basic auth, so
a browser asks for it by itself (any user name). Every value is escaped; the page sets a
``Content-Security-Policy`` that allows only its own script.
"""

from __future__ import annotations

import base64
import binascii
import html
import json
from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from ..protocol.problems import ProblemType, ProtocolError
from ..server.auth import REALM
from ..server.http.errors import problem_route_class
from .view import operator_view

if TYPE_CHECKING:
    from ..server.http.service import ContractService
    from ..server.worker.contract import ContractWorker
    from .observability import Observability

PAGE_PATH = "/contract/operator"
POLL_MS = 500
CSP = (
    "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'unsafe-inline'; "
    "img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
NodeQuery = Annotated[str | None, Query(max_length=512, description="A graph node, `table:key`.")]


def operator_dependency(service: ContractWorker) -> Callable[[Request], None]:
    """The admin token as a bearer token or a Basic password; 401 asks the browser for it."""

    def require(request: Request) -> None:
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        presented: str | None = None
        if scheme.lower() == "bearer":
            presented = value.strip() or None
        elif scheme.lower() == "basic":
            try:
                decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                decoded = ""
            presented = decoded.partition(":")[2] or None
        if presented is None and service.auth.configured:
            raise ProtocolError(
                ProblemType.UNAUTHORIZED,
                "the operator page needs the admin token (Bearer, or the Basic auth password)",
                headers={
                    "WWW-Authenticate": f'Basic realm="{REALM} operator", charset="UTF-8", '
                    f'Bearer realm="{REALM}"'
                },
            )
        service.auth.check_read(presented)  # the read-only metrics token reads it too

    return require


def operator_router(service: ContractService, observed: Observability, **options: Any) -> APIRouter:
    """The page, its state document and its script; ``options`` go to ``APIRouter``."""
    router = APIRouter(route_class=problem_route_class(service), **options)
    guard = [Depends(operator_dependency(service))]

    @router.get(PAGE_PATH, dependencies=guard, include_in_schema=False)
    async def page(request: Request, node: NodeQuery = None) -> Response:
        view = operator_view(observed, node=node)
        script = str(request.url_for("operator_script").path)
        state = str(request.url_for("operator_state").path)
        body = render_page(view, script=script, state=state, node=node)
        return HTMLResponse(body, headers=_headers())

    @router.get(PAGE_PATH + "/state", dependencies=guard, include_in_schema=False)
    async def operator_state(node: NodeQuery = None) -> Response:
        return JSONResponse(operator_view(observed, node=node), headers=_headers())

    @router.get(PAGE_PATH + "/operator.js", include_in_schema=False)
    async def operator_script() -> Response:
        return Response(
            SCRIPT,
            media_type="text/javascript; charset=utf-8",
            headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"},
        )

    return router


def _headers() -> dict[str, str]:
    return {
        "Content-Security-Policy": CSP,
        "Cache-Control": "no-store",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
    }


SCRIPT = resources.files(__package__).joinpath("operator.js").read_text(encoding="utf-8")


def _e(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _json(value: object) -> str:
    return _e(json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":")))


def render_page(view: dict[str, Any], *, script: str, state: str, node: str | None) -> str:
    """The whole page for ``view`` (the script re-renders the same sections from JSON)."""
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Contract operator — seq {_e(view["seq"])}</title>
<style>
body {{ font: 15px/1.45 system-ui, sans-serif; margin: 1.5rem; color: #1b1b1b; }}
table {{ border-collapse: collapse; margin: .5rem 0 1.25rem; }}
th, td {{ border: 1px solid #999; padding: .25rem .5rem; text-align: left; vertical-align: top; }}
caption {{ text-align: left; font-weight: 600; padding: .25rem 0; }}
code {{ font: 13px ui-monospace, monospace; }}
.added {{ background: #e6f4ea; }} .removed {{ background: #fde7e9; }}
.changed {{ background: #fff4ce; }}
.bad {{ color: #a4000f; font-weight: 600; }} .ok {{ color: #0b6a0b; font-weight: 600; }}
figure {{ display: inline-block; margin: 0 1rem 1rem 0; }}
svg.series {{ border: 1px solid #999; background: #fafafa; }}
svg.series polyline {{ fill: none; stroke: #0b57d0; stroke-width: 2; }}
:focus {{ outline: 3px solid #0b57d0; }}
</style>
</head>
<body data-state-url="{_e(state)}" data-poll-ms="{POLL_MS}" data-node="{_e(node or "")}">
<header>
<h1>Contract operator</h1>
<p>Epoch <code id="epoch">{_e(view["epoch"])}</code>, seq
<strong id="seq">{_e(view["seq"])}</strong>, level {_e(view["level"])}.
<span id="updated" role="status" aria-live="polite"></span></p>
</header>
<main>
<section aria-labelledby="h-worker"><h2 id="h-worker">Worker</h2>
<div id="worker">{_worker(view["worker"])}</div></section>
<section aria-labelledby="h-fleet"><h2 id="h-fleet">Every worker</h2>
<div id="fleet">{_fleet(view["fleet"])}</div></section>
<section aria-labelledby="h-series"><h2 id="h-series">Over time, every worker</h2>
<p>The paper's figures summed over every worker, one point per update since this page opened:
stale values sent, the first-try rate, and the change sets that evict agents' cached fixes (with
the clients whose scores were forgotten to make room).</p>
<div id="series"></div></section>
<section aria-labelledby="h-tables"><h2 id="h-tables">Table versions</h2>
<div id="tables">{_tables(view["tables"])}</div></section>
<section aria-labelledby="h-changes"><h2 id="h-changes">Recent change sets</h2>
<div id="changes" aria-live="polite">{_changes(view["changes"])}</div></section>
<section aria-labelledby="h-graph"><h2 id="h-graph">Graph around a node</h2>
<form method="get"><label for="node">Node (<code>table:key</code>)</label>
<input id="node" name="node" value="{_e(node or "")}" maxlength="512">
<button type="submit">Show</button></form>
<div id="graph">{_graph(view["graph"])}</div></section>
<section aria-labelledby="h-clients"><h2 id="h-clients">Clients</h2>
<div id="clients">{_clients(view["clients"])}</div></section>
</main>
<script src="{_e(script)}"></script>
</body>
</html>
"""


def _worker(worker: dict[str, Any]) -> str:
    status = (
        '<span class="ok">ready</span>'
        if worker["ready"]
        else f'<span class="bad">not ready</span>: {_e(worker["reason"])}'
    )
    leads = ", ".join(f"{_e(k)}: {'leads' if v else 'follows'}" for k, v in worker["leads"].items())
    return (
        f"<p>Worker <code>{_e(worker['worker'])}</code>: {status}; follower "
        f"{_e(worker['state'])}{'' if worker['live'] else ' (not live)'}; lag "
        f"{_e(worker['lag_s'])} s (ready within {_e(worker['max_lag_s'])} s)"
        f"{f'; capture: {leads}' if leads else ''}.</p>"
    )


FLEET_HEADS = ("Worker", "Seq", "Ready", "Live", "Available", "Confirmed (s ago)", "Adopted")
TOTAL_HEADS = (
    ("answers", "Answers"),
    ("episodes", "Episodes"),
    ("first_try", "First tries"),
    ("first_try_rate", "First-try rate"),
    ("retries", "Retries"),
    ("stale_values_sent", "Stale values sent"),
    ("change_sets", "Change sets"),
    ("rows_changed", "Rows changed"),
    ("clients_forgotten", "Clients forgotten"),
)


def _fleet(fleet: dict[str, Any] | None) -> str:
    if fleet is None:
        return "<p>No metrics exposition: instrument with Prometheus to see every worker.</p>"
    yes = {1.0: "yes", 0.0: "no"}
    rows = "".join(
        f'<tr data-worker="{_e(w["worker"])}"><th scope="row"><code>{_e(w["worker"])}</code></th>'
        f'<td class="seq">{_e(int(w.get("seq", 0)))}</td>'
        + "".join(
            f"<td>{_e(yes.get(w.get(k, -1), '–'))}</td>" for k in ("ready", "live", "available")
        )
        + f"<td>{_e(round(w.get('confirmation_age_s', 0.0), 3))}</td>"
        f"<td>{_e(int(w.get('adopted', 0)))}</td></tr>"
        for w in fleet["workers"]
    )
    heads = "".join(f'<th scope="col">{h}</th>' for h in FLEET_HEADS)
    totals = fleet["totals"]
    shown = {k: _rate(v) if k == "first_try_rate" else v for k, v in totals.items()}
    cells = "".join(f'<td data-total="{key}">{_e(shown[key])}</td>' for key, _ in TOTAL_HEADS)
    total_heads = "".join(f'<th scope="col">{h}</th>' for _, h in TOTAL_HEADS)
    return (
        f"<table><caption>{len(fleet['workers'])} worker(s)</caption><thead><tr>{heads}</tr>"
        f"</thead><tbody>{rows}</tbody></table>"
        "<table><caption>Totals over every worker</caption><thead>"
        f"<tr>{total_heads}</tr></thead><tbody><tr>{cells}</tr></tbody></table>"
    )


def _tables(tables: list[dict[str, Any]]) -> str:
    rows = "".join(
        f'<tr data-table="{_e(t["table"])}"><th scope="row">{_e(t["table"])}</th>'
        f'<td class="version">{_e(t["version"])}</td><td>{_e(t["rows"])}</td>'
        f"<td>{_e(t['changed_at'])}</td></tr>"
        for t in tables
    )
    return (
        "<table><caption>Every table at the served seq</caption><thead><tr>"
        '<th scope="col">Table</th><th scope="col">Version</th><th scope="col">Rows</th>'
        f'<th scope="col">Changed at seq</th></tr></thead><tbody>{rows}</tbody></table>'
    )


def _changes(changes: list[dict[str, Any]]) -> str:
    if not changes:
        return "<p>No change since this worker started.</p>"
    parts = []
    for change in changes:
        for move in change["tables"]:
            diff = "".join(
                f'<tr class="{_e(r["op"])}"><td>{_e(r["op"])}</td><td><code>{_e(r["key"])}'
                f"</code></td><td><code>{_json(r['old'])}</code></td>"
                f"<td><code>{_json(r['new'])}</code></td></tr>"
                for r in move["rows"]
            )
            more = move["changed_rows"] - len(move["rows"])
            parts.append(
                f'<table class="change" data-seq="{_e(change["seq"])}"><caption>seq '
                f"{_e(change['seq'])} ({_e(change['origin'])}): {_e(move['table'])} "
                f"{_e(move['old_version'])} → {_e(move['new_version'])}, "
                f"{_e(move['changed_rows'])} row(s){f', {more} not shown' if more > 0 else ''}"
                '</caption><thead><tr><th scope="col">Change</th><th scope="col">Key</th>'
                '<th scope="col">Before</th><th scope="col">After</th></tr></thead>'
                f"<tbody>{diff}</tbody></table>"
            )
    return "".join(parts)


def _graph(graph: dict[str, Any] | None) -> str:
    if graph is None:
        return "<p>Name a node to see its edges.</p>"
    if not graph["exists"]:
        return f"<p>No row <code>{_e(graph['node'])}</code>.</p>"
    out = "".join(
        f"<li>→ <code>{_e(e['to'])}</code> ({_e(e['relation'])})</li>" for e in graph["out"]
    )
    incoming = "".join(
        f"<li>← <code>{_e(e['from'])}</code> ({_e(e['relation'])})</li>" for e in graph["in"]
    )
    return (
        f"<p><code>{_e(graph['node'])}</code> = <code>{_json(graph['row'])}</code></p>"
        f'<ul aria-label="edges of {_e(graph["node"])}">{out}{incoming}</ul>'
    )


def _clients(clients: list[dict[str, Any]]) -> str:
    if not clients:
        return "<p>No scored request yet.</p>"
    rows = "".join(
        f'<tr><th scope="row"><code>{_e(c["client"])}</code></th><td>{_e(c["requests"])}</td>'
        f"<td>{_e(c['episodes'])}</td><td>{_e(c['first_try'])}</td>"
        f"<td>{_e(_rate(c['first_try_rate']))}</td><td>{_e(c['retries'])}</td>"
        f"<td>{_e(c['stale_values_sent'])}</td></tr>"
        for c in clients
    )
    return (
        "<table><caption>Per client, from requests alone</caption><thead><tr>"
        '<th scope="col">Client key</th><th scope="col">Requests</th>'
        '<th scope="col">Episodes</th><th scope="col">First tries</th>'
        '<th scope="col">First-try rate</th><th scope="col">Retries</th>'
        f'<th scope="col">Stale values sent</th></tr></thead><tbody>{rows}</tbody></table>'
    )


def _rate(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"
