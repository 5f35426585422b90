"""The reference rows as resources with validators (issue 37, ``verify``'s conditional reads):
an ``ETag`` on every row and table at every level, 304 for a held tag, and a 422 that cites
the rows each suggestion read in ``Link`` headers."""

from __future__ import annotations

import pytest

from invalidation_contracts.protocol.levels import Level
from invalidation_contracts.protocol.links import citations

ENTERPRISE = {"plan": "enterprise", "promo_code": "ENT10"}


@pytest.mark.parametrize("level", [Level.NONE, Level.RAW, Level(6)])
def test_a_row_is_served_with_an_etag_at_every_level(make_client, level):
    response = make_client(level=level).get("/resources/plans/enterprise")
    assert response.status_code == 200
    assert response.json() == {"funding": "invoice", "promo": "ENT10"}
    assert response.headers["etag"].startswith('"')


def test_a_held_etag_is_answered_not_modified_without_a_body(client):
    tag = client.get("/resources/plans/basic").headers["etag"]
    again = client.get("/resources/plans/basic", headers={"If-None-Match": tag})
    assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == tag


def test_a_change_of_the_row_moves_its_etag_and_not_its_neighbours(client):
    tags = {k: client.get(f"/resources/plans/{k}").headers["etag"] for k in ("basic", "starter")}
    table = client.get("/resources/plans").headers["etag"]
    client.app.state.registry.patch("plans", upsert={"basic": {"funding": "wire"}})
    moved = client.get("/resources/plans/basic", headers={"If-None-Match": tags["basic"]})
    kept = client.get("/resources/plans/starter", headers={"If-None-Match": tags["starter"]})
    assert moved.status_code == 200 and moved.headers["etag"] != tags["basic"]
    assert kept.status_code == 304
    assert client.get("/resources/plans", headers={"If-None-Match": table}).status_code == 200


def test_an_unknown_table_or_row_is_a_404_problem(client):
    assert client.get("/resources/nope").status_code == 404
    missing = client.get("/resources/plans/nope")
    assert missing.status_code == 404
    assert missing.headers["content-type"] == "application/problem+json"


@pytest.mark.parametrize("level", [Level.NONE, Level(6)])
def test_a_422_cites_the_rows_its_suggestion_read(make_client, level):
    response = make_client(level=level).post("/v1/orders", json=ENTERPRISE)
    assert response.status_code == 422
    assert citations(response.headers.get_list("link")) == {
        0: ("/resources/plans/enterprise", "/resources/funding_types/invoice")
    }


def test_a_prose_only_422_cites_nothing(make_client):
    response = make_client(level=Level.RAW).post("/v1/orders", json=ENTERPRISE)
    assert citations(response.headers.get_list("link")) == {}
