"""Study — the confirmation read at session start (issue 22, item 1): what "confirmed before
served" costs a new agent process.

A real ``serve`` worker keeps its history in a registry file; a first session learns the Acme
growth plan's CSM code into a memory file. Each trial then plays a *new process*: a fresh
``FixMemory`` over a copy of that file, a ``contract_client`` entered with the server's
``base_url`` (the one conditional read, ``GET /contract/changes?since=&epoch=``, before the first
lookup), then one episode: lookup, the request with the fix, its 200. The baseline is the same
first episode in a new process whose memory claims no eager detection (``detection="lazy"``: no
gate, no read), so both pay the same cold start (file, connection) and differ by the read alone.
Ratio: first episode with the read / without it, medians, trials interleaved in the same run.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from invalidation_contracts.client import FixMemory
from invalidation_contracts.domains import get_catalog
from invalidation_contracts.httpx import contract_client

from .common import Check, StudyResult, markdown_table, median, ms
from .servers import serve_command

NAME = "confirmation"
TITLE = "Confirmation read at session start: first episode with and without it"
DOMAIN = "acme_billing"
ROUTE = "/v1/subscriptions"
OPERATION = f"POST {ROUTE}"


@dataclass(frozen=True, slots=True)
class Size:
    trials: int


FULL = Size(trials=40)
QUICK = Size(trials=3)


def run(quick: bool = False, out_dir: Path | None = None) -> StudyResult:
    size = QUICK if quick else FULL
    draft = get_catalog(DOMAIN).family("governed-partner-growth").draft()
    firsts: list[float] = []
    steadies: list[float] = []
    reads: list[float] = []
    baselines: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-confirm-") as tmp:
        root = Path(tmp)
        registry, learned = root / "registry.sqlite", root / "learned.sqlite"
        with serve_command("--domain", DOMAIN, "--db", str(registry)) as server:
            url = f"http://127.0.0.1:{server.port}"
            with (
                FixMemory("row", store=learned) as memory,
                contract_client(memory, base_url=url) as client,
            ):
                client.post(ROUTE, json=draft)  # a 422 teaches the growth plan's code
            for trial in range(size.trials):
                for detection in ("eager", "lazy"):
                    path = root / f"trial-{trial}-{detection}.sqlite"
                    shutil.copyfile(learned, path)
                    with FixMemory("row", detection, store=path) as memory:
                        start = time.perf_counter()
                        with contract_client(memory, base_url=url) as client:
                            opened = time.perf_counter()
                            _episode(memory, client, url, draft)
                            first = time.perf_counter()
                            _episode(memory, client, url, draft)
                            steady = time.perf_counter()
                    if detection == "eager":
                        reads.append(opened - start)
                        firsts.append(first - start)
                        steadies.append(steady - first)
                    else:
                        baselines.append(first - start)
    ratio = median(firsts) / median(baselines)
    rows = [
        ["first episode, no confirmation (lazy memory)", ms(median(baselines)), "1.00×"],
        ["first episode, confirmation read included", ms(median(firsts)), f"{ratio:.2f}×"],
        ["  of which: entering the client (the read, cold)", ms(median(reads)), "–"],
        ["steady episode (already confirmed)", ms(median(steadies)), "–"],
    ]
    markdown = (
        f"{size.trials} new processes (fresh `FixMemory` over a copy of the learned memory file) "
        "against one `serve --db` worker on 127.0.0.1; each opens `contract_client(memory, "
        "base_url=...)`, then runs one episode (lookup, the request with the fix, 200) and a "
        "second one; eager (gated, one read on entering) and lazy (no gate) trials interleaved. "
        "Medians, ms; ratio against the lazy first episode.\n\n"
        + markdown_table(["", "median ms", "ratio"], rows)
    )
    checks = [
        Check(
            "the confirmation costs one round trip per origin per process",
            f"first episode with / without the read {ratio:.2f}×",
            True,
        )
    ]
    data = {
        "first_s": firsts,
        "baseline_first_s": baselines,
        "steady_s": steadies,
        "read_s": reads,
        "ratio": ratio,
    }
    return StudyResult(NAME, TITLE, markdown, checks, [], data)


def _episode(memory: FixMemory, client: object, url: str, draft: dict) -> None:
    fixes = list(memory.lookup(url, draft, operation=OPERATION).entries)
    request = {**draft, **{k: v for f in fixes for k, v in f.suggestion.parameters.items()}}
    response = client.post(ROUTE, json=request)  # type: ignore[attr-defined]
    if response.status_code != 200:
        raise RuntimeError(f"the episode failed: {response.status_code} {response.text[:200]}")
