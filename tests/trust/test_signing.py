"""Signed freshness: the statement format, the server's signatures, and a client that requires them.

Attack stopped: an on-path party (a proxy, a cache, a compromised replica) rewriting the contract a
server sent — forged version bumps to force evictions, a forged 410 to wipe the memory, a replayed
stale stamp — is not acted on by a client that requires signatures.
"""

from __future__ import annotations

import asyncio
import base64
import json

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from trust_helpers import (
    GROWTH,
    OPERATION,
    ORIGIN,
    PLAIN,
    ROUTE,
    ForgingTransport,
    Session,
    TamperingTransport,
    acme_app,
    asgi,
    problem_json,
)

from invalidation_contracts.client.entries import EvictionReason
from invalidation_contracts.client.events import Evicted, Ignored, NotStored
from invalidation_contracts.client.memory import FixMemory
from invalidation_contracts.client.trust import TrustPolicy
from invalidation_contracts.protocol import ProblemType, canonical_json
from invalidation_contracts.protocol.signing import (
    CONTRACT_MEMBERS,
    CONTRACT_SIGN,
    CONTRACT_SIGNATURE,
    SignatureError,
    load_public_key,
    public_key_text,
    read_header,
    sign,
    statement,
    verify,
)
from invalidation_contracts.server.trust import TrustOptions

BODY = {
    "success": True,
    "result": {"subscription_id": "sub_1"},
    "table_versions": {"active_csm_codes": "1.0.0", "token_funding_map": "1.0.0"},
    "rules_version": "ec524f499ebe",
    "contract_seq": 4,
    "contract_epoch": "9f2c41d07a5be3c1",
}
NOW = 1_750_000_000


def signed(keys, body=BODY, *, kid="k1", since=None, iat=NOW, exp=NOW + 300):
    return sign(body, keys[kid], kid, since=since, iat=iat, exp=exp)


def public(keys):
    return {kid: key.public_key() for kid, key in keys.items()}


# -- the statement ---------------------------------------------------------------------------


def test_a_signature_verifies_against_the_body_it_was_made_for(keys):
    header = verify(signed(keys), BODY, public(keys), since=None, now=NOW + 10)

    assert (header.kid, header.iat, header.exp) == ("k1", NOW, NOW + 300)


def test_the_signature_is_a_compact_detached_ed25519_jws(keys):
    jws = signed(keys)
    encoded_header, payload, _ = jws.split(".")
    header = json.loads(base64.urlsafe_b64decode(encoded_header + "=" * (-len(encoded_header) % 4)))

    assert payload == ""
    assert header == {
        "alg": "Ed25519",
        "typ": "contract-freshness+jws",
        "kid": "k1",
        "iat": NOW,
        "exp": NOW + 300,
    }


def test_the_statement_names_the_contract_position_and_digests_the_rest():
    claims = statement(BODY, since=3, iat=NOW, exp=NOW + 300)

    assert {k: claims[k] for k in ("contract_seq", "contract_epoch", "rules_version", "since")} == {
        "contract_seq": 4,
        "contract_epoch": "9f2c41d07a5be3c1",
        "rules_version": "ec524f499ebe",
        "since": 3,
    }
    assert len(claims["table_versions"]) == 64 and len(claims["content"]) == 64


@pytest.mark.parametrize(
    "field, value",
    [
        ("table_versions", {"active_csm_codes": "1.1.0", "token_funding_map": "1.0.0"}),
        ("contract_seq", 5),
        ("contract_epoch", "0000000000000000"),
        ("rules_version", "000000000000"),
        ("result", {"subscription_id": "sub_2"}),
    ],
)
def test_changing_any_member_of_the_body_breaks_the_signature(keys, field, value):
    jws = signed(keys)

    with pytest.raises(SignatureError, match="does not match"):
        verify(jws, {**BODY, field: value}, public(keys), since=None, now=NOW)


SIGNER = Ed25519PrivateKey.generate()
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
BODIES = st.dictionaries(
    st.sampled_from(["table_versions", "contract_seq", "detail", "result"]), JSON
)


@settings(max_examples=60, deadline=None)
@given(
    body=BODIES,
    member=st.sampled_from(["table_versions", "contract_seq", "detail", "result"]),
    value=JSON,
)
def test_a_signature_holds_for_its_body_and_breaks_when_any_member_changes(body, member, value):
    jws = sign(body, SIGNER, "k", since=None, iat=NOW, exp=NOW + 1)
    keys = {"k": SIGNER.public_key()}
    verify(jws, json.loads(json.dumps(body)), keys, since=None, now=NOW)

    changed = {**body, member: value}
    assume(canonical_json(changed) != canonical_json(body))
    assume(not (member in CONTRACT_MEMBERS and value is None and body.get(member) is None))
    with pytest.raises(SignatureError):
        verify(jws, changed, keys, since=None, now=NOW)


def test_an_absent_contract_member_and_a_null_one_are_the_same_statement():
    assert statement({"detail": "x"}, since=None, iat=NOW, exp=NOW + 1) == statement(
        {"detail": "x", "contract_seq": None}, since=None, iat=NOW, exp=NOW + 1
    )


def test_a_delta_cannot_be_passed_off_as_the_full_dictionary(keys):
    jws = signed(keys, since=3)

    with pytest.raises(SignatureError, match="does not match"):
        verify(jws, BODY, public(keys), since=None, now=NOW)


def test_a_signature_by_an_unknown_kid_is_refused(keys):
    with pytest.raises(SignatureError, match="unknown key id 'k2'"):
        verify(signed(keys, kid="k2"), BODY, {"k1": keys["k1"].public_key()}, since=None, now=NOW)


def test_a_signature_made_with_another_key_under_a_known_kid_is_refused(keys):
    forged = sign(BODY, keys["k2"], "k1", since=None, iat=NOW, exp=NOW + 300)

    with pytest.raises(SignatureError, match="does not match"):
        verify(forged, BODY, public(keys), since=None, now=NOW)


def test_an_expired_statement_is_refused_past_the_leeway(keys):
    jws = signed(keys, exp=NOW + 300)

    verify(jws, BODY, public(keys), since=None, now=NOW + 330, leeway_s=60)
    with pytest.raises(SignatureError, match="expired"):
        verify(jws, BODY, public(keys), since=None, now=NOW + 361, leeway_s=60)


def test_a_statement_issued_in_the_future_is_refused(keys):
    with pytest.raises(SignatureError, match="future"):
        verify(signed(keys, iat=NOW + 600, exp=NOW + 900), BODY, public(keys), since=None, now=NOW)


@pytest.mark.parametrize(
    "jws",
    ["", "a.b.c", "only-one-part", "eyJhbGciOiJub25lIn0..c2ln", "not base64..c2ln"],
)
def test_anything_but_a_detached_ed25519_jws_is_refused(keys, jws):
    with pytest.raises(SignatureError):
        verify(jws, BODY, public(keys), since=None, now=NOW)


def test_an_attached_payload_is_refused(keys):
    header, _, signature = signed(keys).split(".")

    with pytest.raises(SignatureError, match="detached"):
        read_header(f"{header}.e30.{signature}")


def test_public_keys_load_from_objects_raw_bytes_base64url_and_pem(keys):
    key = keys["k1"].public_key()
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    pem = key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )

    for form in (key, raw, public_key_text(keys["k1"]), pem.decode("ascii")):
        assert (
            load_public_key(form).public_bytes(
                serialization.Encoding.Raw, serialization.PublicFormat.Raw
            )
            == raw
        )
    with pytest.raises(ValueError, match="32 bytes"):
        load_public_key(b"short")


# -- the server ------------------------------------------------------------------------------


def post(app, body, headers=None):
    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=ORIGIN) as c:
            return await c.post(ROUTE, json=body, headers=headers or {})

    return asyncio.run(go())


def get(app, path, headers=None):
    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=ORIGIN) as c:
            return await c.get(path, headers=headers or {})

    return asyncio.run(go())


def signing_app(keys, **options):
    return acme_app(trust=TrustOptions(signing_keys=keys, active_kid="k1", **options))


def test_the_server_signs_a_response_only_when_the_request_asks(keys):
    app = signing_app(keys)

    assert CONTRACT_SIGNATURE not in post(app, PLAIN).headers
    assert CONTRACT_SIGNATURE not in post(app, PLAIN, {CONTRACT_SIGN: "0"}).headers
    assert CONTRACT_SIGNATURE in post(app, PLAIN, {CONTRACT_SIGN: "1"}).headers


def test_a_server_without_signing_keys_never_signs():
    response = post(acme_app(), GROWTH, {CONTRACT_SIGN: "1"})

    assert CONTRACT_SIGNATURE not in response.headers


def test_asking_for_a_signature_does_not_change_the_body(keys):
    app = signing_app(keys)

    assert post(app, GROWTH).content == post(app, GROWTH, {CONTRACT_SIGN: "1"}).content


@pytest.mark.parametrize(
    "path, status",
    [
        ("/contract/versions", 200),
        ("/contract/changes?since=0", 200),
        ("/contract/rules", 200),
        ("/contract/changes?since=99", 410),
        ("/no/such/route", 404),
    ],
)
def test_every_json_answer_is_signed_over_what_was_sent(keys, path, status):
    response = get(signing_app(keys), path, {CONTRACT_SIGN: "1"})

    assert response.status_code == status
    verify(
        response.headers[CONTRACT_SIGNATURE],
        response.json(),
        public(keys),
        since=None,
        now=read_header(response.headers[CONTRACT_SIGNATURE]).iat,
    )


def test_the_signature_covers_the_conditional_contract(keys):
    response = post(signing_app(keys), PLAIN, {CONTRACT_SIGN: "1", "Contract-Since": "0"})
    jws = response.headers[CONTRACT_SIGNATURE]
    now = read_header(jws).iat

    verify(jws, response.json(), public(keys), since=0, now=now)
    with pytest.raises(SignatureError):
        verify(jws, response.json(), public(keys), since=None, now=now)


def test_a_malformed_contract_sign_header_is_an_invalid_request_problem(keys):
    response = post(signing_app(keys), PLAIN, {CONTRACT_SIGN: "please"})

    assert response.status_code == 422
    assert response.json()["type"] == ProblemType.INVALID_REQUEST.uri
    assert "Contract-Sign" in response.json()["detail"]


def test_a_statement_lives_for_the_configured_ttl(keys):
    app = signing_app(keys, stamp_ttl_s=30, clock=lambda: NOW)
    header = read_header(post(app, PLAIN, {CONTRACT_SIGN: "1"}).headers[CONTRACT_SIGNATURE])

    assert (header.iat, header.exp) == (NOW, NOW + 30)


def test_several_signing_keys_need_an_active_kid(keys):
    with pytest.raises(ValueError, match="active kid"):
        acme_app(trust=TrustOptions(signing_keys=keys))


# -- a client that requires signatures -------------------------------------------------------


def requiring(keys, clock=None, kids=("k1", "k2"), strategy="row"):
    policy = TrustPolicy(
        require_signatures=True, public_keys={k: keys[k].public_key() for k in kids}
    )
    return FixMemory(strategy, trust=policy, **({"clock": clock} if clock else {}))


def test_a_client_asks_for_signatures_when_it_holds_keys(keys):
    seen = []

    def forge(request):
        seen.append(request.headers.get(CONTRACT_SIGN))

    Session(requiring(keys), ForgingTransport(asgi(acme_app()), forge)).post(PLAIN)

    assert seen == ["1"]


def test_an_unsigned_contract_is_ignored_and_its_fixes_are_not_learned(keys):
    session = Session(requiring(keys), asgi(acme_app()))
    session.post(GROWTH)

    assert session.memory.entries(ORIGIN) == []
    (ignored,) = session.of(Ignored)
    assert ignored.detail == "unverified contract: the response is unsigned"
    assert [n.reason for n in session.of(NotStored)] == [
        "unverified contract: the response is unsigned"
    ]
    assert session.memory.stats(ORIGIN).ignored == 1


def test_a_signed_contract_is_acted_on(keys):
    session = Session(requiring(keys), asgi(signing_app(keys)))
    session.post(GROWTH)

    assert [e.key.type for e in session.memory.entries(ORIGIN)] == ["ADD_REQUIRED_PROMO_CODE"]
    assert session.of(Ignored) == []


def forged_bump(body):
    versions = dict(body.get("table_versions") or {})
    versions["active_csm_codes"] = "9.0.0"
    return {**body, "table_versions": versions}


def test_forged_version_bumps_evict_a_fix_when_signatures_are_not_required(keys):
    tamper = TamperingTransport(asgi(signing_app(keys)), forged_bump)
    tamper.enabled = False
    session = Session(FixMemory("row"), tamper)
    session.post(GROWTH)
    tamper.enabled = True
    session.post(PLAIN)

    assert session.memory.entries(ORIGIN) == []
    assert [e.reason for e in session.of(Evicted)] == [EvictionReason.TABLE_CHANGED]


def test_forged_version_bumps_on_a_signed_response_are_ignored(keys):
    tamper = TamperingTransport(asgi(signing_app(keys)), forged_bump)
    tamper.enabled = False
    session = Session(requiring(keys), tamper)
    session.post(GROWTH)
    tamper.enabled = True
    session.post(PLAIN)

    assert [e.key.type for e in session.memory.entries(ORIGIN)] == ["ADD_REQUIRED_PROMO_CODE"]
    assert session.of(Evicted) == []
    assert "does not match" in session.of(Ignored)[0].detail


def test_an_expired_statement_is_ignored(keys, clock):
    app = signing_app(keys, stamp_ttl_s=60, clock=lambda: clock.now - 3600)
    session = Session(requiring(keys, clock), asgi(app))
    session.post(GROWTH)

    assert session.memory.entries(ORIGIN) == []
    assert "expired" in session.of(Ignored)[0].detail


def test_an_unsigned_resync_does_not_wipe_the_memory(keys):
    app = signing_app(keys)
    gone = {"type": ProblemType.RESYNC_REQUIRED.uri, "title": "forged", "status": 410}

    def forge(request):
        if request.url.path == "/contract/changes":
            return problem_json(410, gone)
        return None

    session = Session(requiring(keys), ForgingTransport(asgi(app), forge))
    session.post(GROWTH)
    app.state.registry.reload(
        "active_csm_codes",
        app.state.registry.state.tables["active_csm_codes"].plain_rows(),
        "1.0.1",
    )
    session.post(PLAIN)

    assert [e.key.type for e in session.memory.entries(ORIGIN)] == ["ADD_REQUIRED_PROMO_CODE"]
    assert {i.detail for i in session.of(Ignored)} == {
        "unverified contract: the response is unsigned"
    }


def test_an_unsigned_changes_feed_is_not_applied(keys):
    app = signing_app(keys)
    feed_forgery = {
        "contract_epoch": "x",
        "since": 0,
        "last_seq": 1,
        "rows": [],
        "tables": [],
        "rules": [],
    }

    def forge(request):
        if request.url.path == "/contract/changes":
            return httpx.Response(200, json={**feed_forgery, "contract_epoch": epoch[0]})
        return None

    epoch = [app.state.registry.state.epoch]
    session = Session(requiring(keys), ForgingTransport(asgi(app), forge))
    session.post(GROWTH)
    rows = app.state.registry.state.tables["active_csm_codes"].plain_rows()
    app.state.registry.reload("active_csm_codes", rows, "1.0.1")
    session.post(PLAIN)

    (entry,) = session.memory.entries(ORIGIN)
    assert entry.restamps == 0
    # withheld until a verified feed arrives
    assert list(session.memory.lookup(ORIGIN, GROWTH, operation=OPERATION).entries) == []
    assert session.of(Ignored)[-1].detail == "unverified contract: the response is unsigned"


def test_keys_rotate_by_kid(keys):
    successor = acme_app(trust=TrustOptions(signing_keys=keys, active_kid="k2"))

    both = Session(requiring(keys, kids=("k1", "k2")), asgi(successor))
    both.post(GROWTH)
    retired = Session(requiring(keys, kids=("k1",)), asgi(successor))
    retired.post(GROWTH)

    assert len(both.memory.entries(ORIGIN)) == 1
    assert retired.memory.entries(ORIGIN) == []
    assert retired.of(Ignored)[0].detail == "unverified contract: unknown key id 'k2'"


def test_requiring_signatures_needs_a_key():
    with pytest.raises(ValueError, match="public key"):
        TrustPolicy(require_signatures=True)
