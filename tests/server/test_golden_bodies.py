"""Every response body the provider core renders is byte-identical to the one recorded before the
hot-path work (``golden_bodies.json``): each shipped domain, at the wire levels, opaque or not,
before and after drift, with and without ``Contract-Since``/``Contract-Epoch``, each request
answered twice (a cold and a warm render cache).

The recording holds one SHA-256 prefix per group of responses (domain, variant, phase, condition)
over their statuses and bodies in call order; regenerate it only when a change to the wire is
intended: ``python tests/server/test_golden_bodies.py --write``.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from invalidation_contracts.domains import get_catalog
from invalidation_contracts.protocol import Level
from invalidation_contracts.server import Asked, Provider
from invalidation_contracts.server.opaque import OpaqueNames

GOLDEN = Path(__file__).with_name("golden_bodies.json")
#: The domains recorded: the in-repository ones (tau2_airline's data is another package's, and
#: its bodies come from the same renderer).
RECORDED_DOMAINS = ("acme_billing", "acme_rules", "recipes")
EPOCH = "golden-epoch"
OPAQUE_KEY = b"golden-opaque-key-0123456789"
#: (level, opaque): the levels whose wire differs (2 and 3 send level 1's), L4/L6 also opaque.
VARIANTS = ((0, False), (1, False), (4, False), (5, False), (6, False), (4, True), (6, True))
#: (since, epoch) as a client sends them; None: the header is absent.
CONDITIONS = ((None, None), (0, None), (0, EPOCH), (0, "another-epoch"), ("seq", EPOCH))
INVALID = ({}, {"plan": 3})
#: The payments ledger's charge ids are random; every other byte is compared.
RANDOM_CHARGE_ID = re.compile(rb'"ch_[0-9a-f]{24}"')


def requests(domain: str) -> list[Any]:
    """Each task family's draft, every step of its repair at L6, and two invalid bodies."""
    catalog = get_catalog(domain)
    provider = Provider(catalog.domain, catalog.domain.registry(epoch=EPOCH), Level(6))
    out: list[Any] = []
    for family in catalog.task_families.values():
        request = family.draft()
        for _ in range(4):
            out.append(dict(request))
            body = provider.handle(catalog.route, request).body.to_wire()
            fixes = body.get("recovery_feedback", {}).get("suggestions", [])
            if not fixes:
                break
            for fix in fixes:
                request.update(fix["parameters"])
    return [*out, *INVALID]


def drift(domain: str, provider: Provider) -> None:
    """Apply the domain's first drift snapshot and, where it has two, its second rule set."""
    catalog = get_catalog(domain)
    name = sorted(catalog.snapshots)[0]
    snapshot = catalog.read_snapshot(name)
    provider.registry.reload(snapshot.table, snapshot.rows, snapshot.version)
    rule_sets = sorted(catalog.rule_sets)
    if len(rule_sets) > 1:
        provider.registry.set_rules(catalog.read_rule_set(rule_sets[-1]))


def responses() -> Iterator[tuple[str, str]]:
    """(group, sha256[:16] of its statuses and bodies) for every group, in call order."""
    for domain in RECORDED_DOMAINS:
        bodies = requests(domain)
        for level, opaque in VARIANTS:
            catalog = get_catalog(domain)
            provider = Provider(
                catalog.domain,
                catalog.domain.registry(epoch=EPOCH),
                Level(level),
                opaque=OpaqueNames(OPAQUE_KEY) if opaque else None,
            )
            for phase in ("initial", "drifted"):
                if phase == "drifted":
                    drift(domain, provider)
                for since, epoch in CONDITIONS:
                    seq = provider.registry.state.seq if since == "seq" else since
                    assert seq is None or isinstance(seq, int)
                    digest = hashlib.sha256()
                    for body in bodies:
                        for _attempt in ("cold", "warm"):
                            outcome = provider.handle(
                                catalog.route, body, Asked(seq, epoch, "/golden")
                            )
                            assert outcome.content == outcome.body.to_json()
                            content = RANDOM_CHARGE_ID.sub(b'"ch_*"', outcome.content)
                            digest.update(b"%d %d " % (outcome.status, len(content)))
                            digest.update(content)
                    group = f"{domain} L{level}{' opaque' if opaque else ''} {phase} "
                    yield group + f"since={since} epoch={epoch}", digest.hexdigest()[:16]


def app_responses() -> Iterator[tuple[str, str]]:
    """The same through the ASGI app: status, media type, echoed header, length and body."""
    from fastapi.testclient import TestClient

    from invalidation_contracts.server.http.app import create_app
    from invalidation_contracts.server.trust import TrustOptions

    for domain in ("acme_billing", "recipes"):
        bodies = requests(domain)
        for level, opaque in ((0, False), (1, False), (6, False), (6, True)):
            catalog = get_catalog(domain)
            app = create_app(
                catalog.domain,
                level=level,
                registry=catalog.domain.registry(epoch=EPOCH),
                trust=TrustOptions(opaque_key=OPAQUE_KEY if opaque else None),
            )
            with TestClient(app) as client:
                for since, epoch in CONDITIONS[:4]:
                    headers = {"Contract-Since": str(since)} if since is not None else {}
                    if epoch is not None:
                        headers["Contract-Epoch"] = epoch
                    digest = hashlib.sha256()
                    for body in bodies:
                        for _attempt in ("cold", "warm"):
                            response = client.post(catalog.route.path, json=body, headers=headers)
                            head = [
                                str(response.status_code),
                                response.headers["content-type"],
                                response.headers["content-length"],
                                response.headers.get("contract-since", "-"),
                            ]
                            digest.update(" ".join(head).encode() + b" ")
                            digest.update(RANDOM_CHARGE_ID.sub(b'"ch_*"', response.content))
                    group = f"app {domain} L{level}{' opaque' if opaque else ''} "
                    yield group + f"since={since} epoch={epoch}", digest.hexdigest()[:16]


def recording() -> dict[str, str]:
    return {**dict(responses()), **dict(app_responses())}


def test_every_body_is_byte_identical_to_the_recording() -> None:
    recorded = json.loads(GOLDEN.read_text(encoding="utf-8"))
    produced = recording()
    assert list(produced) == list(recorded)
    changed = [group for group, digest in produced.items() if recorded[group] != digest]
    assert not changed, f"{len(changed)} groups changed, first: {changed[:5]}"


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: python tests/server/test_golden_bodies.py --write")
    GOLDEN.write_text(json.dumps(recording(), indent=0) + "\n", encoding="utf-8")
