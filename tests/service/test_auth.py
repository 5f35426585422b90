"""The bearer check on its own (no HTTP): 401 when absent or unconfigured, 403 when wrong."""

from __future__ import annotations

import pytest

from invalidation_contracts.protocol.problems import ProblemType, ProtocolError
from invalidation_contracts.server.auth import BearerAuth


def refusal(auth: BearerAuth, presented: str | None) -> ProblemType:
    with pytest.raises(ProtocolError) as caught:
        auth.check(presented)
    assert caught.value.extra["headers"]["WWW-Authenticate"].startswith("Bearer")
    return caught.value.kind


def test_the_configured_token_is_accepted():
    BearerAuth("tok").check("tok")


@pytest.mark.parametrize("presented", [None, ""])
def test_a_missing_token_is_unauthorized(presented):
    assert refusal(BearerAuth("tok"), presented) is ProblemType.UNAUTHORIZED


@pytest.mark.parametrize("presented", ["tok2", "to", "TOK", "tok "])
def test_any_other_token_is_forbidden(presented):
    assert refusal(BearerAuth("tok"), presented) is ProblemType.FORBIDDEN


@pytest.mark.parametrize("configured", [None, ""])
def test_with_no_token_configured_everyone_is_unauthorized(configured):
    auth = BearerAuth(configured)
    assert not auth.configured
    assert refusal(auth, "anything") is ProblemType.UNAUTHORIZED


def test_a_non_ascii_token_matches_its_utf8_bytes_as_sent_in_a_header():
    auth = BearerAuth("clé-secrète")
    auth.check("clé-secrète".encode().decode("latin-1"))
    assert refusal(auth, "clé-secrète") is ProblemType.FORBIDDEN


def test_the_token_can_come_from_an_environment_variable(monkeypatch):
    monkeypatch.setenv("SHOP_TOKEN", "env-token")
    BearerAuth.from_env("SHOP_TOKEN").check("env-token")
