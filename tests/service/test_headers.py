"""A ``Contract-Since`` header no integer parser accepts never turns an error answer into a 500."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from invalidation_contracts.protocol.problems import PROBLEM_BASE


@pytest.mark.parametrize(
    "since", [b"\xb2", b"9" * 5000, "\uff11\uff12".encode()], ids=["superscript", "huge", "wide"]
)
def test_an_unusable_contract_since_on_an_error_still_gets_a_problem_document(
    client: TestClient, since: bytes
) -> None:
    response = client.get("/nowhere", headers={b"Contract-Since": since})
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["type"] == PROBLEM_BASE + "not-found"
    assert "Contract-Since" not in response.headers


def test_a_plain_contract_since_on_an_error_is_echoed(client: TestClient) -> None:
    response = client.get("/nowhere", headers={"Contract-Since": "0"})
    assert response.headers["Contract-Since"] == "0"
