"""`POST /admin/change-set`: one operator configuration change over several tables, one seq
(SPEC §8, §8.1); refused whole when any part is wrong, nothing changed."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from invalidation_contracts.server import Domain, Route, TableSpec
from invalidation_contracts.server.http.app import create_app

TOKEN = "s3cret-admin-token"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
BASE = "http://ops.test"


class Noop(BaseModel):
    x: str = ""


DOMAIN = Domain(
    "ops",
    {
        "tokens": TableSpec({"visa_credit": {"funding": "credit"}}),
        "recommended": TableSpec({"visa": {"token": "visa_credit"}}),
    },
    [],
    [Route("/v1/noop", Noop, [])],
)


def calls(*steps: tuple[str, str, Any, dict[str, str]]) -> list[httpx.Response]:
    async def go() -> list[httpx.Response]:
        app = create_app(DOMAIN, admin_token=TOKEN)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url=BASE) as c:
            return [
                await (c.post(path, json=body, headers=h) if m == "POST" else c.get(path))
                for m, path, body, h in steps
            ]

    return asyncio.run(go())


RESHUFFLE = {
    "tables": [
        {
            "table": "tokens",
            "upsert": {"visa_credit": {"funding": "debit"}, "visa_plat": {"funding": "credit"}},
        },
        {"table": "recommended", "rows": {"visa": {"token": "visa_plat"}}},
    ]
}


def test_a_change_set_moves_every_table_under_one_seq():
    before, answer, feed = calls(
        ("GET", "/contract/versions", None, {}),
        ("POST", "/admin/change-set", RESHUFFLE, ADMIN),
        ("GET", "/contract/changes?since=0", None, {}),
    )
    assert answer.status_code == 200, answer.text
    result = answer.json()
    assert result["contract_seq"] == before.json()["contract_seq"] + 1
    assert [r["table"] for r in result["results"]] == ["tokens", "recommended"]
    assert {r["contract_seq"] for r in result["results"]} == {result["contract_seq"]}
    assert result["results"][0]["diff"] == {
        "added": ["visa_plat"],
        "removed": [],
        "changed": ["visa_credit"],
    }
    assert {(t["table"], t["seq"]) for t in feed.json()["tables"]} == {
        ("tokens", result["contract_seq"]),
        ("recommended", result["contract_seq"]),
    }


@pytest.mark.parametrize(
    "body, status, slug",
    [
        ({"tables": [*RESHUFFLE["tables"], {"table": "nope", "rows": {}}]}, 404, "unknown-table"),
        ({"tables": [RESHUFFLE["tables"][1], RESHUFFLE["tables"][1]]}, 422, "invalid-request"),
        (
            {"tables": [{"table": "tokens", "rows": {}, "delete": ["visa_credit"]}]},
            422,
            "invalid-request",
        ),
        ({"tables": []}, 422, "invalid-request"),
    ],
    ids=["unknown-table", "table-twice", "reload-and-patch", "empty"],
)
def test_a_wrong_part_refuses_the_whole_change_set_and_changes_nothing(body, status, slug):
    before, answer, after = calls(
        ("GET", "/contract/versions", None, {}),
        ("POST", "/admin/change-set", body, ADMIN),
        ("GET", "/contract/versions", None, {}),
    )
    assert answer.status_code == status
    assert answer.json()["type"].endswith(slug)
    assert after.json() == before.json()


def test_a_change_set_needs_the_admin_token():
    [answer] = calls(("POST", "/admin/change-set", RESHUFFLE, {}))
    assert answer.status_code == 401
