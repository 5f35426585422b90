"""``BearerAuth`` with a read-only metrics token: what each token may do (the HTTP routes over a
real server: test_deployed_serve.py)."""

from __future__ import annotations

import pytest

from invalidation_contracts.protocol.problems import ProblemType, ProtocolError
from invalidation_contracts.server.auth import BearerAuth


def _refusal(check, presented):  # type: ignore[no-untyped-def]
    with pytest.raises(ProtocolError) as refused:
        check(presented)
    return refused.value.kind


def test_the_metrics_token_reads() -> None:
    BearerAuth("admin-token", "metrics-token").check_read("metrics-token")


def test_the_admin_token_reads() -> None:
    BearerAuth("admin-token", "metrics-token").check_read("admin-token")


def test_the_metrics_token_is_forbidden_an_admin_route() -> None:
    auth = BearerAuth("admin-token", "metrics-token")

    assert _refusal(auth.check, "metrics-token") is ProblemType.FORBIDDEN


def test_admin_routes_stay_disabled_on_a_server_with_only_a_metrics_token() -> None:
    auth = BearerAuth(None, "metrics-token")

    assert _refusal(auth.check, "metrics-token") is ProblemType.UNAUTHORIZED


def test_a_server_with_only_a_metrics_token_refuses_other_readers() -> None:
    auth = BearerAuth(None, "metrics-token")

    assert _refusal(auth.check_read, None) is ProblemType.UNAUTHORIZED
    assert _refusal(auth.check_read, "guess") is ProblemType.FORBIDDEN


def test_a_metrics_token_equal_to_the_admin_token_is_refused() -> None:
    with pytest.raises(ValueError, match="must differ"):
        BearerAuth("same-token", "same-token")
