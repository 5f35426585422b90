"""Signed freshness interoperates with a well-kept JOSE library (joserfc), in both directions.

The freshness JWS is hand-rolled (protocol.signing); joserfc is the oracle that it is a standard
detached compact JWS (RFC 7515 Appendix F) with ``alg: Ed25519`` (RFC 9864). ``iat`` and ``exp``
ride in the protected header, so joserfc's strict header registry is told about them.
"""

from __future__ import annotations

import warnings

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from joserfc import jws
from joserfc.jwk import OKPKey
from joserfc.registry import HeaderParameter

from invalidation_contracts.protocol import canonical_json
from invalidation_contracts.protocol.signing import (
    SignatureError,
    read_header,
    sign,
    statement,
    verify,
)

BODY = {
    "success": True,
    "result": {"subscription_id": "sub_1"},
    "table_versions": {"active_csm_codes": "1.0.0"},
    "rules_version": "ec524f499ebe",
    "contract_seq": 4,
    "contract_epoch": "9f2c41d07a5be3c1",
}
NOW = 1_750_000_000
TYPE = "contract-freshness+jws"


def registry(algorithm: str) -> jws.JWSRegistry:
    """joserfc's registry with the replicated claims ``iat`` and ``exp`` as header parameters."""
    claims = {
        "iat": HeaderParameter("Issued at (replicated claim)", "int", required=True),
        "exp": HeaderParameter("Expires (replicated claim)", "int", required=True),
    }
    return jws.JWSRegistry(header_registry=claims, algorithms=[algorithm])


def jwk(key: Ed25519PrivateKey) -> OKPKey:
    return OKPKey.import_key(key)


def payload(since: int | None = None) -> bytes:
    return canonical_json(statement(BODY, since=since, iat=NOW, exp=NOW + 300))


def joserfc_detached(key: Ed25519PrivateKey, algorithm: str, since: int | None = None) -> str:
    """A JWS joserfc makes over the statement, with its payload then detached."""
    protected = {"alg": algorithm, "typ": TYPE, "kid": "k1", "iat": NOW, "exp": NOW + 300}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # joserfc warns that EdDSA is deprecated (RFC 9864)
        compact = jws.serialize_compact(
            protected,
            payload(since),
            jwk(key),
            algorithms=[algorithm],
            registry=registry(algorithm),
        )
    header, _, signature = compact.split(".")
    return f"{header}..{signature}"


def test_joserfc_verifies_the_detached_jws_a_server_signs(keys):
    token = sign(BODY, keys["k1"], "k1", since=7, iat=NOW, exp=NOW + 300)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Ed25519 is not deprecated: no SecurityWarning
        verified = jws.deserialize_compact(
            token,
            OKPKey.import_key(keys["k1"].public_key()),
            algorithms=["Ed25519"],
            registry=registry("Ed25519"),
            payload=payload(since=7),
        )

    assert verified.headers()["alg"] == "Ed25519"
    assert verified.payload == payload(since=7)


def test_joserfc_refuses_the_jws_against_another_body(keys):
    token = sign(BODY, keys["k1"], "k1", since=None, iat=NOW, exp=NOW + 300)

    with pytest.raises(Exception, match="signature"):
        jws.deserialize_compact(
            token,
            jwk(keys["k1"]),
            algorithms=["Ed25519"],
            registry=registry("Ed25519"),
            payload=payload(since=8),
        )


@pytest.mark.parametrize("algorithm", ["Ed25519", "EdDSA"])
def test_a_client_verifies_a_detached_jws_joserfc_made(keys, algorithm):
    token = joserfc_detached(keys["k1"], algorithm, since=3)

    header = verify(token, BODY, {"k1": keys["k1"].public_key()}, since=3, now=NOW + 1)

    assert (header.alg, header.kid, header.iat, header.exp) == (algorithm, "k1", NOW, NOW + 300)


def test_a_joserfc_jws_over_another_statement_is_refused(keys):
    token = joserfc_detached(keys["k1"], "Ed25519", since=3)

    with pytest.raises(SignatureError, match="does not match"):
        verify(token, BODY, {"k1": keys["k1"].public_key()}, since=4, now=NOW + 1)


@pytest.mark.parametrize("algorithm", ["HS256", "ES256", "none"])
def test_an_algorithm_other_than_ed25519_is_refused(keys, algorithm):
    token = joserfc_detached(keys["k1"], "Ed25519")
    forged = token.replace(token.split(".")[0], _header_with(algorithm), 1)

    with pytest.raises(SignatureError, match="algorithm"):
        read_header(forged)


def _header_with(algorithm: str) -> str:
    import base64

    raw = canonical_json({"alg": algorithm, "typ": TYPE, "kid": "k1", "iat": NOW, "exp": NOW + 1})
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")
