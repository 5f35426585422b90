"""Study — keep-alive latency of ``invalidation-contracts serve`` against bare uvicorn.

Sequential requests on one keep-alive connection (the failures mix's first draft, ``POST
/v1/subscriptions`` at L6, answered 422) to three servers of the same app, run side by side:
the shipped command (``serve``), ``uvicorn.run(app, host, port)`` (uvicorn binds its own socket),
and — for scale — a server on a socket made with protocol 0 as ``serve`` made it before the fix
(``socket.create_server``: asyncio then never sets ``TCP_NODELAY``, and Nagle's algorithm meets
the client's delayed ACK). Then the same with two workers (``serve --workers 2`` and
``uvicorn.run(..., workers=2)``, each on its own SQLite registry). Rounds alternate the servers;
each ratio is the median of per-round ratios.
"""

from __future__ import annotations

import json
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from invalidation_contracts.cli.launch import AppSpec
from invalidation_contracts.domains import get_catalog

from . import loadgen
from .common import Check, StudyResult, markdown_table, median
from .provider_load import DOMAIN, request_mixes
from .servers import bare_uvicorn, free_port, process, serve_command

NAME = "keepalive"
TITLE = "Keep-alive latency: `serve` against bare uvicorn"
TARGET = 1.10

_PROTO0 = """
import socket, sys, uvicorn
from invalidation_contracts.cli.launch import AppSpec
port = int(sys.argv[1])
listener = socket.create_server(("127.0.0.1", port))
uvicorn.Server(uvicorn.Config(AppSpec.from_env().build(), log_level="info")).run(sockets=[listener])
"""


@dataclass(frozen=True, slots=True)
class Size:
    requests: int
    rounds: int
    warmup: int
    old_requests: int
    time_limit_s: float = 60.0


FULL = Size(requests=300, rounds=3, warmup=30, old_requests=40)
QUICK = Size(requests=20, rounds=1, warmup=5, old_requests=5, time_limit_s=20.0)


def run(quick: bool = False, out_dir: Path | None = None) -> StudyResult:
    size = QUICK if quick else FULL
    path = get_catalog(DOMAIN).route.path
    body = request_mixes()["failures"][:1]
    spec = AppSpec(domain=DOMAIN, level=6)
    trials: dict[str, list[loadgen.Trial]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-keepalive-") as tmp, ExitStack() as stack:
        root = Path(tmp)
        ports = {
            "serve": stack.enter_context(serve_command("--domain", DOMAIN, "--ephemeral")).port,
            "uvicorn": stack.enter_context(bare_uvicorn(spec.to_env())).port,
            "serve ×2": stack.enter_context(
                serve_command("--domain", DOMAIN, "--db", str(root / "a.db"), "--workers", "2")
            ).port,
            "uvicorn ×2": stack.enter_context(
                bare_uvicorn(AppSpec(DOMAIN, 6, store=str(root / "b.db")).to_env(), workers=2)
            ).port,
        }
        old = stack.enter_context(_protocol_zero(spec)).port
        names = list(ports)
        for name in names:
            loadgen.run_trial(ports[name], path, body, size.warmup, 1, size.time_limit_s)
        for r in range(size.rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                trial = loadgen.run_trial(
                    ports[name], path, body, size.requests, 1, size.time_limit_s
                )
                trials.setdefault(name, []).append(trial)
        trials["protocol-0 socket (serve before the fix)"] = [
            loadgen.run_trial(old, path, body, size.old_requests, 1, size.time_limit_s)
        ]
    return _report(trials, size)


def _protocol_zero(spec: AppSpec) -> Any:
    import sys

    port = free_port()
    command = [sys.executable, "-c", _PROTO0, str(port)]
    return process(command, port, {"INVALIDATION_CONTRACTS_SERVE_SPEC": spec.to_env()})


def _ratio(trials: dict[str, list[loadgen.Trial]], high: str, low: str, q: float) -> float:
    pairs = zip(trials[low], trials[high], strict=True)
    return median(h.quantile(q) / lo.quantile(q) for lo, h in pairs)


def _report(trials: dict[str, list[loadgen.Trial]], size: Size) -> StudyResult:
    rows = []
    data: dict[str, Any] = {"servers": {}, "ratios": {}}
    for name, ts in trials.items():
        p50 = 1000 * median(t.quantile(0.5) for t in ts)
        p99 = 1000 * median(t.quantile(0.99) for t in ts)
        sent = sum(len(t.latencies_s) for t in ts)
        data["servers"][name] = {"p50_ms": p50, "p99_ms": p99, "requests": sent}
        rows.append([name, f"{p50:.2f}", f"{p99:.2f}", str(sent), ""])
    checks = []
    for serve, bare in (("serve", "uvicorn"), ("serve ×2", "uvicorn ×2")):
        p50 = _ratio(trials, serve, bare, 0.5)
        p99 = _ratio(trials, serve, bare, 0.99)
        data["ratios"][f"{serve} / {bare}"] = {"p50": p50, "p99": p99}
        rows.append([f"**{serve} / {bare}**", f"**{p50:.3f}**", f"{p99:.3f}", "", "ratio"])
        checks.append(
            Check(
                f"`{serve}` keep-alive p50 within {TARGET:.1f}× of bare uvicorn",
                f"{p50:.3f}×",
                p50 <= TARGET,
            )
        )
    md = "\n\n".join(
        [
            (
                f"One keep-alive connection, {size.requests} sequential `POST /v1/subscriptions` "
                f"(L6, answered 422) per server and round, {size.rounds} round(s) alternating the "
                f"servers after {size.warmup} warm-up requests each; latency at the client. "
                f"`serve` is the shipped command (`python -m invalidation_contracts.cli serve`); "
                f"`uvicorn` runs the same app with `uvicorn.run(app, host, port)`; the ×2 rows run "
                f"two workers each (`serve --workers 2` / `uvicorn.run(..., workers=2)`, each on "
                f"its own SQLite registry). The last row is the socket `serve` used before the fix "
                f"({size.old_requests} requests, for scale)."
            ),
            markdown_table(["Server", "p50 (ms)", "p99 (ms)", "Requests", ""], rows),
        ]
    )
    return StudyResult(NAME, TITLE, md, checks, [], json.loads(json.dumps(data)))
