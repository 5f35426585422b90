"""Study 1 — what the contract costs on the wire (paper §3.7), and what the conditional contract
saves.

The harness runs in-process (``bench.runner.run_one``) on ``payments-drifted`` with
``simulated:exact`` and the row arm (A2D), at server levels L1, L4 and L6, each with the full
contract and with the conditional contract (``Contract-Since``). Bytes come from the artifacts'
``attempt`` records. A tap around the ASGI app records every exchange, so the same run also
measures (by post-processing the bodies) and replays (by rewriting them before the client reads
them) the wire trims this study recommends, and checks that the client's validity is unchanged and
that the full contract is reconstructible from what was sent.

Overhead is reported as the paper defines it — contract bytes / response bytes, pooled over every
response (its 15.1% is 123 B of a mean 817-B response) — and, beside it, contract / (response −
contract). "Contract" is this project's definition (``protocol.wirecost``): the envelope
(``table_versions``, ``rules_version``, ``contract_seq``, ``contract_epoch``) plus the
per-suggestion cache metadata (``cache_hint``, ``table``, ``tables``, ``rules``, ``scope``,
``max_age_s``); the paper's own field set (``table_versions``, ``cache_hint``, ``table``) is shown
too, for the comparison with its figure.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from invalidation_contracts.bench.arms import Arm
from invalidation_contracts.bench.artifacts import Run, read_runs
from invalidation_contracts.bench.grid import SIMULATED_PROFILES
from invalidation_contracts.bench.runner import RunSpec, run_one
from invalidation_contracts.bench.scenario import load_scenario
from invalidation_contracts.client.fold import ContractFold
from invalidation_contracts.client.state import OriginState
from invalidation_contracts.client.wire import contract_of
from invalidation_contracts.protocol.levels import Level
from invalidation_contracts.protocol.models import ChangesFeed, ContractFields
from invalidation_contracts.protocol.wirecost import (
    ENVELOPE_FIELDS,
    SUGGESTION_FIELDS,
    compact,
    wire_cost,
)
from invalidation_contracts.server.http.app import create_app

from .common import Check, StudyResult, figure, markdown_table, pct

NAME = "wire"
TITLE = "Wire cost of the contract (paper §3.7)"
SCENARIO = "payments-drifted"
PLANNER = "simulated:exact"
ARM = Arm("row")
CHANGES_PATH = "/contract/changes"
PAPER_OVERHEAD = 0.151
TARGET = 0.05
PAPER_FIELDS = ("table_versions",)
PAPER_SUGGESTION_FIELDS = ("cache_hint", "table")

#: The recommended trims, in the order they are applied (each includes the ones before it).
STEPS: tuple[tuple[str, str], ...] = (
    ("empty-table-versions", "omit `table_versions` when the delta is empty"),
    ("epoch", "omit `contract_epoch` when the request's `Contract-Epoch` names it"),
    ("rules-version", "omit `rules_version` unless a rule changed after `Contract-Since`"),
    ("seq", "omit `contract_seq` when it equals `Contract-Since`"),
    ("table", "omit a suggestion's `table` when it carries `tables`"),
    ("dependency-versions", "omit `version` from each `tables` item"),
)
#: The trims today's client already reads correctly, so the harness can replay them end to end.
REPLAYABLE = tuple(name for name, _ in STEPS[:5])


@dataclass(frozen=True, slots=True)
class Variant:
    """One server configuration of the study."""

    label: str
    level: int
    conditional: bool = False
    trims: tuple[str, ...] = ()

    @property
    def baseline(self) -> str:
        """The variant whose validity this one must reproduce: the full contract at its level."""
        return f"L{self.level}"


def variants() -> list[Variant]:
    out = []
    for level in (1, 4, 6):
        out += [
            Variant(f"L{level}", level),
            Variant(f"L{level} conditional", level, conditional=True),
            Variant(f"L{level} conditional + trims", level, conditional=True, trims=REPLAYABLE),
        ]
    return out


# -- the tap ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Truth:
    """The full response-level contract of the registry state a response was answered from."""

    table_versions: dict[str, str]
    rules_version: str | None
    contract_seq: int
    contract_epoch: str


@dataclass(slots=True)
class Exchange:
    """One response the client received: as the service produced it and as it was sent."""

    path: str
    since: int | None
    original: dict[str, Any]
    sent: dict[str, Any]
    truth: Truth | None = None
    rules_moved: bool = False
    """Whether a rule change happened after ``since`` (what the ``rules-version`` trim needs)."""


class Trimmer:
    """Applies the recommended trims to a sequence of bodies sent to one client."""

    def __init__(self, steps: Iterable[str]) -> None:
        self.steps = frozenset(steps)
        self._epoch_sent: str | None = None

    def __call__(
        self, body: Mapping[str, Any], since: int | None, rules_moved: bool
    ) -> dict[str, Any]:
        out = dict(body)
        if since is not None:
            if "empty-table-versions" in self.steps and out.get("table_versions") == {}:
                del out["table_versions"]
            if "epoch" in self.steps and out.get("contract_epoch") == self._epoch_sent:
                out.pop("contract_epoch", None)
            if "rules-version" in self.steps and not rules_moved:
                out.pop("rules_version", None)
            if "seq" in self.steps and out.get("contract_seq") == since:
                del out["contract_seq"]
        if out.get("contract_epoch") is not None:
            self._epoch_sent = out["contract_epoch"]
        feedback = out.get("recovery_feedback")
        if isinstance(feedback, Mapping) and self.steps & {"table", "dependency-versions"}:
            out["recovery_feedback"] = {
                **feedback,
                "suggestions": [self._suggestion(s) for s in feedback.get("suggestions", [])],
            }
        return out

    def _suggestion(self, suggestion: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(suggestion)
        if "table" in self.steps and out.get("tables"):
            out.pop("table", None)
        if "dependency-versions" in self.steps and out.get("tables"):
            out["tables"] = [
                {k: v for k, v in item.items() if k != "version"} for item in out["tables"]
            ]
        return out


class WireTap:
    """ASGI wrapper around the service: records each domain and changes-feed exchange, and
    rewrites domain bodies with a ``Trimmer`` when one is given (the replayed trims)."""

    def __init__(
        self, app: Any, domain_paths: set[str], registry: Any, level: Level, trimmer: Trimmer | None
    ):
        self.app = app
        self.domain_paths = domain_paths
        self.registry = registry
        self.level = level
        self.trimmer = trimmer
        self.exchanges: list[Exchange] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or (path not in self.domain_paths and path != CHANGES_PATH):
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        raw_since = headers.get(b"contract-since", b"").decode()
        since = int(raw_since) if raw_since.isdigit() else None
        start: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def hold(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await self.app(scope, receive, hold)
        raw = b"".join(chunks)
        body = json.loads(raw) if raw else {}
        if path == CHANGES_PATH:
            self.exchanges.append(Exchange(path, None, body, body))
            await _send(send, start, raw)
            return
        state = self.registry.state
        truth = Truth(
            table_versions=state.versions(),
            rules_version=state.rules.version if self.level.rules_fingerprint else None,
            contract_seq=state.seq,
            contract_epoch=state.epoch,
        )
        rules_moved = since is not None and any(
            r.rule_change is not None and r.seq > since for r in self.registry.log.records()
        )
        sent = body
        if self.trimmer is not None:
            sent = self.trimmer(body, since, rules_moved)
            raw = compact(sent)
        self.exchanges.append(Exchange(path, since, body, sent, truth, rules_moved))
        await _send(send, start, raw)


async def _send(send: Any, start: Mapping[str, Any], body: bytes) -> None:
    headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
    headers.append((b"content-length", str(len(body)).encode()))
    await send({**start, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


# -- running ------------------------------------------------------------------------------------


@dataclass(slots=True)
class VariantRun:
    """Every seed's artifact and exchanges of one variant."""

    variant: Variant
    runs: dict[int, Run] = field(default_factory=dict)
    exchanges: dict[int, list[Exchange]] = field(default_factory=dict)
    seconds: float = 0.0


async def run_variant(
    variant: Variant, seeds: Sequence[int], root: Path, planner: str = PLANNER
) -> VariantRun:
    """Run ``variant`` once per seed under ``root`` and read its artifacts back."""
    scenario = load_scenario(SCENARIO).model_copy(update={"level": variant.level})
    out = VariantRun(variant)
    start = time.perf_counter()
    for seed in seeds:
        taps: list[WireTap] = []
        where = root / _slug(f"{variant.label} {planner}") / f"seed-{seed}"
        await run_one(
            RunSpec(scenario, planner, ARM, seed),
            where,
            conditional=variant.conditional,
            app_factory=_tapped(variant, taps),
        )
        (run,) = read_runs(where)
        out.runs[seed] = run
        out.exchanges[seed] = taps[0].exchanges
    out.seconds = time.perf_counter() - start
    return out


def _tapped(variant: Variant, taps: list[WireTap]) -> Any:
    """An app factory for ``run_one``: the service, wrapped in a tap appended to ``taps``."""

    def factory(domain: Any, **kw: Any) -> WireTap:
        app = create_app(domain, **kw)
        trimmer = Trimmer(variant.trims) if variant.trims else None
        tap = WireTap(
            app, {r.path for r in domain.routes}, kw["registry"], Level(kw["level"]), trimmer
        )
        taps.append(tap)
        return tap

    return factory


def _slug(label: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in label.lower())


# -- measuring ----------------------------------------------------------------------------------


@dataclass(slots=True)
class Bytes:
    """Byte sums over a pool of responses."""

    responses: int = 0
    with_suggestions: int = 0
    response: int = 0
    contract: int = 0
    envelope: int = 0
    suggestions: int = 0
    paper_fields: int = 0
    by_field: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    @property
    def overhead(self) -> float:
        """Contract / response bytes: the paper's "of payload" (its 15.1%)."""
        return self.contract / self.response

    @property
    def over_rest(self) -> float:
        """Contract / (response − contract)."""
        return self.contract / (self.response - self.contract)

    @property
    def envelope_share(self) -> float:
        return self.envelope / self.response

    @property
    def suggestion_share(self) -> float:
        return self.suggestions / self.response

    @property
    def paper_share(self) -> float:
        return self.paper_fields / self.response

    def mean(self, total: int) -> float:
        return total / self.responses


def member_bytes(name: str, value: Any) -> int:
    """Bytes one member adds to a compact JSON object (``"name":value`` and its comma)."""
    return len(compact({name: value})) - 2 + 1


def body_fields(body: Mapping[str, Any]) -> dict[str, int]:
    """Bytes of each contract member of one body; suggestion members prefixed ``suggestion.``."""
    out: dict[str, int] = defaultdict(int)
    for name in ENVELOPE_FIELDS:
        if body.get(name) is not None:
            out[name] += member_bytes(name, body[name])
    feedback = body.get("recovery_feedback") or {}
    for suggestion in feedback.get("suggestions", []) if isinstance(feedback, Mapping) else []:
        for name in (*SUGGESTION_FIELDS, "patch"):
            if suggestion.get(name) is not None:
                out[f"suggestion.{name}"] += member_bytes(name, suggestion[name])
    return out


def attempt_bytes(runs: Iterable[Run], exchanges: Iterable[list[Exchange]]) -> Bytes:
    """Pool the artifacts' attempt records (totals) and the sent bodies (per-field split)."""
    total = Bytes()
    for run in runs:
        for a in run.of("attempt"):
            total.responses += 1
            total.with_suggestions += int(bool(a.get("suggestion_types")))
            total.response += int(a["response_bytes"])
            total.contract += int(a["contract_bytes"])
            total.envelope += int(a["envelope_bytes"])
            total.suggestions += int(a["suggestion_bytes"])
    for stream in exchanges:
        for ex in stream:
            if ex.path == CHANGES_PATH:
                continue
            fields = body_fields(ex.sent)
            for name, size in fields.items():
                total.by_field[name] += size
            total.paper_fields += sum(fields.get(n, 0) for n in PAPER_FIELDS) + sum(
                fields.get(f"suggestion.{n}", 0) for n in PAPER_SUGGESTION_FIELDS
            )
    return total


def stream_bytes(stream: Iterable[Exchange], trimmer: Trimmer | None) -> Bytes:
    """Bytes of the domain bodies of one stream after ``trimmer`` (post-processing, not
    replayed)."""
    total = Bytes()
    for ex in stream:
        if ex.path == CHANGES_PATH:
            continue
        body = ex.original if trimmer is None else trimmer(ex.original, ex.since, ex.rules_moved)
        cost = wire_cost(body)
        total.responses += 1
        total.with_suggestions += int(
            bool((body.get("recovery_feedback") or {}).get("suggestions"))
        )
        total.response += cost.total
        total.envelope += cost.envelope
        total.suggestions += cost.suggestions
        total.contract += cost.contract
    return total


def validity(run: Run) -> dict[str, Any]:
    """What the client did with the contract: every eviction and restamp, every stale injection."""
    memory = [r for r in run.of("memory")]
    return {
        "evictions": [
            (r["episode"], r["reason"], r["stale"])
            for r in memory
            if r["event"] in ("evict", "resync")
        ],
        "restamps": sum(1 for r in memory if r["event"] == "restamp"),
        "stale_injections": sum(len(e["stale_injected"]) for e in run.of("episode")),
        "first_try": [e["first_try"] for e in run.of("episode")],
    }


class ClientView:
    """A client folding what it was sent with the memory's own fold (``client.fold``): can it
    rebuild the full contract of every response?"""

    def __init__(self, level: Level) -> None:
        self.level = level
        self.state = OriginState()
        self.fold = ContractFold(self.state)
        self.failures: list[str] = []

    def see(self, ex: Exchange) -> None:
        body = ex.sent
        if ex.path == CHANGES_PATH:
            self.fold.merge_feed(ChangesFeed.model_validate(body))
            return
        contract = contract_of(body) or ContractFields()
        if self.fold.epoch_moved(contract.contract_epoch) is not None:
            self.state.reset_contract()
        reading = self.fold.read(contract, ex.since)
        if reading is not None:
            if contract.rules_version is not None:
                self.fold.rules(contract.rules_version)
            self.fold.advance(reading, settled=True)
        truth = ex.truth
        assert truth is not None
        st = self.state
        if st.known != truth.table_versions:
            self.failures.append(f"table_versions {st.known} != {truth.table_versions}")
        if self.level.rules_fingerprint and st.rules_version != truth.rules_version:
            self.failures.append(f"rules_version {st.rules_version} != {truth.rules_version}")
        if st.known_seq != truth.contract_seq or st.epoch != truth.contract_epoch:
            self.failures.append(
                f"position {st.epoch}/{st.known_seq} != {truth.contract_epoch}/{truth.contract_seq}"
            )
        for suggestion in (body.get("recovery_feedback") or {}).get("suggestions", []):
            for item in suggestion.get("tables") or []:
                version = item.get("version", st.known.get(item["table"]))
                if version != truth.table_versions.get(item["table"]):
                    self.failures.append(f"dependency {item['table']} {version}")


def reconstructible(
    stream: Iterable[Exchange], level: Level, trimmer: Trimmer | None = None
) -> list[str]:
    """Failures of a client rebuilding each full contract from the (trimmed) stream; [] when
    none."""
    view = ClientView(level)
    for ex in stream:
        if trimmer is not None and ex.path != CHANGES_PATH:
            ex = Exchange(
                ex.path,
                ex.since,
                ex.original,
                trimmer(ex.original, ex.since, ex.rules_moved),
                ex.truth,
                ex.rules_moved,
            )
        view.see(ex)
    return view.failures


# -- the study ----------------------------------------------------------------------------------


def run(quick: bool = False, out_dir: Path | None = None) -> StudyResult:
    """Measure every variant; in ``quick`` mode one seed, otherwise seeds 0, 1, 2."""
    seeds = (0,) if quick else (0, 1, 2)
    figures_dir = (out_dir or Path(__file__).parent) / "figures"
    with tempfile.TemporaryDirectory(prefix="bench-wire-") as tmp:
        results = asyncio.run(_run_all(variants(), seeds, Path(tmp), PLANNER))
        profiles = {}
        for planner in SIMULATED_PROFILES:
            chosen = [v for v in variants() if v.level == 6]
            profiles[planner] = asyncio.run(_run_all(chosen, seeds, Path(tmp), planner))
    return _report(results, profiles, seeds, figures_dir)


async def _run_all(
    vs: Sequence[Variant], seeds: Sequence[int], root: Path, planner: str
) -> dict[str, VariantRun]:
    return {v.label: await run_variant(v, seeds, root, planner) for v in vs}


def _same_validity(vr: VariantRun, results: Mapping[str, VariantRun], seeds: Sequence[int]) -> bool:
    return all(
        validity(vr.runs[s]) == validity(results[vr.variant.baseline].runs[s]) for s in seeds
    )


def echo_header_bytes(stream: Iterable[Exchange]) -> int:
    """Bytes of the ``Contract-Since`` response headers echoed on a stream's domain responses."""
    return sum(
        len(f"contract-since: {ex.since}\r\n")
        for ex in stream
        if ex.path != CHANGES_PATH and ex.since is not None
    )


def _report(
    results: Mapping[str, VariantRun],
    profiles: Mapping[str, Mapping[str, VariantRun]],
    seeds: Sequence[int],
    figures_dir: Path,
) -> StudyResult:
    pooled = {
        label: attempt_bytes(r.runs.values(), r.exchanges.values()) for label, r in results.items()
    }
    base_bytes = pooled["L6"].response
    rows, data = [], {}
    for label, vr in results.items():
        b = pooled[label]
        same = _same_validity(vr, results, seeds)
        rebuild = [
            f for s in seeds for f in reconstructible(vr.exchanges[s], Level(vr.variant.level))
        ]
        echo = sum(echo_header_bytes(vr.exchanges[s]) for s in seeds)
        rows.append(
            [
                label,
                f"{b.responses}",
                f"{b.with_suggestions}",
                f"{b.mean(b.response):.0f}",
                f"{b.mean(b.contract):.0f}",
                f"{b.mean(b.envelope):.0f}",
                f"{b.mean(b.suggestions):.0f}",
                pct(b.overhead),
                pct(b.over_rest),
                pct(b.envelope_share),
                pct(b.paper_share),
                f"{b.response / base_bytes:.3f}",
                "yes" if same else "**no**",
                "yes" if not rebuild else "**no**",
            ]
        )
        data[label] = {
            "responses": b.responses,
            "with_suggestions": b.with_suggestions,
            "response_bytes": b.response,
            "contract_bytes": b.contract,
            "envelope_bytes": b.envelope,
            "suggestion_bytes": b.suggestions,
            "paper_field_bytes": b.paper_fields,
            "echo_header_bytes": echo,
            "overhead": b.overhead,
            "over_rest": b.over_rest,
            "envelope_share": b.envelope_share,
            "paper_share": b.paper_share,
            "bytes_vs_L6": b.response / base_bytes,
            "same_validity": same,
            "reconstructible": not rebuild,
            "by_field": dict(b.by_field),
            "validity": {s: validity(vr.runs[s]) for s in seeds},
        }
    table = markdown_table(
        [
            "Variant",
            "Resp.",
            "w/ sugg.",
            "Mean resp. (B)",
            "Mean contract (B)",
            "Envelope (B)",
            "Sugg. fields (B)",
            "Contract / resp.",
            "Contract / (resp. − contract)",
            "Envelope / resp.",
            "Paper's L1 fields / resp.",
            "Bytes vs L6",
            "Validity = full contract",
            "Full contract rebuildable",
        ],
        rows,
    )
    steps_md, steps_data = _steps_table(results["L6 conditional"], seeds)
    replayed = pooled["L6 conditional + trims"]
    step5 = steps_data[len(REPLAYABLE)]
    replay_matches = (step5["response_bytes"], step5["contract_bytes"]) == (
        replayed.response,
        replayed.contract,
    )
    fields_md = _fields_table(pooled, ("L1", "L6", "L6 conditional", "L6 conditional + trims"))
    profiles_md, profiles_data = _profiles_table(profiles, seeds)
    best = data["L6 conditional + trims"]
    l1 = data["L1 conditional + trims"]
    final = steps_data[-1]
    echo = data["L6 conditional"]["echo_header_bytes"]
    checks = [
        Check(
            "conditional contract ≤ 5% of payload at the same validity (L6, as sent today)",
            pct(data["L6 conditional"]["overhead"]),
            data["L6 conditional"]["overhead"] <= TARGET,
        ),
        Check(
            "… L6 with the replayed trims (validity "
            + ("unchanged" if best["same_validity"] else "CHANGED")
            + ")",
            pct(best["overhead"]),
            best["overhead"] <= TARGET and best["same_validity"],
        ),
        Check(
            "… L6 with every recommended trim (post-processed)",
            pct(final["overhead"]),
            final["overhead"] <= TARGET,
        ),
        Check(
            "… L1 (the paper's level) with the replayed trims",
            pct(l1["overhead"]),
            l1["overhead"] <= TARGET and l1["same_validity"],
        ),
        Check(
            "… the conditional envelope alone, L6 with the replayed trims",
            pct(best["envelope_share"]),
            best["envelope_share"] <= TARGET,
        ),
        Check(
            "… the paper's field set (`table_versions`, `cache_hint`, `table`), "
            "L6 with the replayed trims",
            pct(best["paper_share"]),
            best["paper_share"] <= TARGET,
        ),
    ]
    fig = figure(figures_dir / "wire_cost.png", lambda f: _draw(f, data))
    md = "\n\n".join(
        [
            (
                f"Scenario `{SCENARIO}`, planner `{PLANNER}`, arm `{ARM}` (A2D), "
                f"seeds {', '.join(map(str, seeds))} "
                "pooled; in-process harness (`bench.runner.run_one`). "
                "Bytes are the JSON bodies the client received "
                "(headers excluded, as in the paper); "
                "totals come from the artifacts' `attempt` records. *Contract / "
                "resp.* is the paper's definition of its 15.1% "
                "(123 B of a mean 817-B response, Σ contract / Σ "
                "response); *Paper's L1 fields* counts only "
                "`table_versions`, `cache_hint` and `table`. *Bytes vs "
                "L6*: total response bytes against the full L6 contract, same run. "
                "*Validity = full contract*: the "
                "same evictions (episode, reason, oracle label), restamps, "
                "stale injections and first-try outcomes "
                "as the full contract at the same level, seed by seed. "
                "*Full contract rebuildable*: a client folding "
                "what it received (domain responses and the changes feed) "
                "recovers every response's full "
                "`table_versions`, `rules_version`, `contract_seq`, `contract_epoch` "
                "and each dependency's version. "
                "*+ trims*: the recommended trims 1–5 below, "
                "applied by a tap in front of the service and read by "
                "today's client (a simulation of the server change: "
                "the tap omits `contract_epoch` once it has sent "
                "it, standing for a client that echoes it in `Contract-Epoch`)."
            ),
            table,
            (
                "The conditional form also echoes a `Contract-Since` response header: "
                f"{echo / max(1, pooled['L6 conditional'].responses):.1f} B "
                "per response on the L6 stream, "
                f"{pct(echo / pooled['L6 conditional'].response)} of its body bytes "
                "if it were counted."
            ),
            (
                "**Recommended trims, cumulative, on the L6 conditional stream** "
                "(post-processed from the bodies the "
                "service produced; steps 1–5 are also replayed end to end "
                "as *L6 conditional + trims* above — the "
                "post-processed step 5 "
                f"{'matches' if replay_matches else '**does not match**'} the replayed run "
                "byte for byte):"
            ),
            steps_md,
            "**Where the bytes are** (mean bytes per response of each contract member):",
            fields_md,
            (
                "**Every simulated profile** "
                f"(L6, `row`, seeds {', '.join(map(str, seeds))}; the response mix moves "
                "with the planner: more failures, more suggestion bytes):"
            ),
            profiles_md,
            f"![wire cost]({fig.relative_to(figures_dir.parent).as_posix()})",
        ]
    )
    return StudyResult(
        NAME,
        TITLE,
        md,
        checks,
        [fig],
        {
            "variants": data,
            "steps": steps_data,
            "profiles": profiles_data,
            "replay_matches": replay_matches,
        },
    )


def _profiles_table(
    profiles: Mapping[str, Mapping[str, VariantRun]], seeds: Sequence[int]
) -> tuple[str, dict]:
    rows, data = [], {}
    for planner, results in profiles.items():
        for label, vr in results.items():
            b = attempt_bytes(vr.runs.values(), vr.exchanges.values())
            same = _same_validity(vr, results, seeds)
            rows.append(
                [
                    f"`{planner}`",
                    label,
                    f"{b.responses}",
                    f"{b.with_suggestions}",
                    f"{b.mean(b.response):.0f}",
                    pct(b.overhead),
                    pct(b.envelope_share),
                    pct(b.suggestion_share),
                    pct(b.paper_share),
                    "yes" if same else "**no**",
                ]
            )
            data[f"{planner} {label}"] = {
                "overhead": b.overhead,
                "envelope_share": b.envelope_share,
                "suggestion_share": b.suggestion_share,
                "paper_share": b.paper_share,
                "same_validity": same,
                "responses": b.responses,
            }
    return markdown_table(
        [
            "Planner",
            "Variant",
            "Resp.",
            "w/ sugg.",
            "Mean resp. (B)",
            "Contract / resp.",
            "Envelope / resp.",
            "Sugg. fields / resp.",
            "Paper's L1 fields / resp.",
            "Validity = full contract",
        ],
        rows,
    ), data


def _steps_table(plain: VariantRun, seeds: Sequence[int]) -> tuple[str, list[dict[str, Any]]]:
    level = Level(plain.variant.level)
    rows, data = [], []
    names: list[str] = []
    for i, (name, text) in enumerate([("", "as sent today"), *STEPS]):
        if name:
            names.append(name)
        total = Bytes()
        failures = []
        for s in seeds:
            b = stream_bytes(plain.exchanges[s], Trimmer(names))
            for attr in (
                "responses",
                "with_suggestions",
                "response",
                "contract",
                "envelope",
                "suggestions",
            ):
                setattr(total, attr, getattr(total, attr) + getattr(b, attr))
            failures += reconstructible(plain.exchanges[s], level, Trimmer(names))
        replay = "replayed" if name in REPLAYABLE or not name else "post-processed only"
        rows.append(
            [
                f"{i}. {text}",
                f"{total.mean(total.response):.0f}",
                f"{total.mean(total.envelope):.1f}",
                f"{total.mean(total.suggestions):.1f}",
                pct(total.overhead),
                pct(total.over_rest),
                "yes" if not failures else "**no**",
                replay,
            ]
        )
        data.append(
            {
                "step": name or "none",
                "overhead": total.overhead,
                "over_rest": total.over_rest,
                "response_bytes": total.response,
                "contract_bytes": total.contract,
                "mean_response": total.mean(total.response),
                "mean_envelope": total.mean(total.envelope),
                "mean_suggestions": total.mean(total.suggestions),
                "reconstructible": not failures,
            }
        )
    return markdown_table(
        [
            "Step",
            "Mean resp. (B)",
            "Envelope (B)",
            "Sugg. fields (B)",
            "Contract / resp.",
            "Contract / (resp. − contract)",
            "Full contract rebuildable",
            "Validity check",
        ],
        rows,
    ), data


def _fields_table(pooled: Mapping[str, Bytes], labels: Sequence[str]) -> str:
    names = sorted({n for label in labels for n in pooled[label].by_field}, key=_field_order)
    rows = [
        [
            f"`{n}`",
            *(
                f"{pooled[label].by_field.get(n, 0) / pooled[label].responses:.1f}"
                for label in labels
            ),
        ]
        for n in names
    ]
    return markdown_table(["Member", *labels], rows) + (
        "\n\n`suggestion.patch` is listed for completeness; "
        "like the paper, this project counts it as "
        "payload (it restates `parameters` as RFC 6902 operations), not contract."
    )


def _field_order(name: str) -> tuple[int, str]:
    order = [*ENVELOPE_FIELDS, *(f"suggestion.{n}" for n in (*SUGGESTION_FIELDS, "patch"))]
    return (order.index(name) if name in order else len(order), name)


def _draw(fig: Any, data: Mapping[str, Mapping[str, Any]]) -> None:
    ax = fig.add_subplot(1, 1, 1)
    labels = list(data)
    env = [100 * data[k]["envelope_share"] for k in labels]
    sug = [100 * (data[k]["overhead"] - data[k]["envelope_share"]) for k in labels]
    xs = range(len(labels))
    ax.bar(xs, env, label="envelope", color="#1f77b4")
    ax.bar(xs, sug, bottom=env, label="per-suggestion fields", color="#ff7f0e")
    ax.axhline(100 * PAPER_OVERHEAD, color="#7f7f7f", linestyle="--", label="paper §3.7 (15.1%)")
    ax.axhline(100 * TARGET, color="#d62728", linestyle=":", label="target (5%)")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(
        [k.replace(" conditional", "\ncond.").replace(" + trims", "\n+ trims") for k in labels],
        fontsize=7,
    )
    ax.set_ylabel("contract bytes / response bytes (%)")
    ax.set_title(f"Contract overhead by server level — {SCENARIO}, {PLANNER}, A2D", fontsize=10)
    ax.legend(fontsize=7)
