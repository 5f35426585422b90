"""The changes feed as Triggers & Events pages (``contract://events``): the cursor is the contract
position, replay is bounded with a continuation, and a cursor the log cannot serve (too old, or
another epoch) answers ``truncated`` (resync). The mapping is checked against the feed itself; the
reads and the push through a real SDK client against a real SDK server, in process."""

from __future__ import annotations

import json
import warnings
from typing import Any

import anyio
import mcp_types as types
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp import Client
from tests.mcp.conftest import rotate, run

from invalidation_contracts.mcp import contract_server, events, names
from invalidation_contracts.protocol.problems import ProtocolError
from invalidation_contracts.server import Provider
from invalidation_contracts.server.tables import MAX_SAFE_INTEGER

pytestmark = pytest.mark.mcp

SNAPSHOTS = ("active_csm_codes.rotation-1", "active_csm_codes.rotation-2")


def _drift(acme: Any, provider: Provider, times: int) -> None:
    """``times`` reloads of the CSM codes (each moves the table: one seq each)."""
    for i in range(times):
        rotate(acme, provider, SNAPSHOTS[i % 2])


def _read(server: Any, uri: str) -> dict[str, Any]:
    async def body() -> types.ReadResourceResult:
        async with Client(server) as client:
            return await client.read_resource(uri)

    (content,) = run(body).contents
    assert isinstance(content, types.TextResourceContents)
    return dict(json.loads(content.text))


def _poll(server: Any, cursor: str | None = None, limit: int | None = None) -> dict[str, Any]:
    query = "&".join(f"{k}={v}" for k, v in (("cursor", cursor), ("limit", limit)) if v is not None)
    return _read(server, names.EVENTS + (f"?{query}" if query else ""))


@given(st.integers(0, MAX_SAFE_INTEGER), st.text(min_size=1, max_size=128))
def test_a_cursor_names_the_position_it_was_made_from(seq, epoch):
    cursor = events.cursor_for(seq, epoch)

    assert events.position_of_cursor(cursor) == (seq, epoch)
    assert events.parse_events(f"{names.EVENTS}?cursor={cursor}") == events.EventsRequest(
        (seq, epoch)
    )


@pytest.mark.parametrize(
    "cursor",
    ["", "17", "ic1.", "ic1.!!!!", "ic1." + "A" * 1100, events.cursor_for(1, "e")[:-3] + "xyz"],
)
def test_a_cursor_this_server_did_not_make_is_an_invalid_request(cursor):
    with pytest.raises(ProtocolError) as raised:
        events.position_of_cursor(cursor)

    assert raised.value.kind.value == "invalid-request"


def test_each_seq_of_the_feed_is_one_event_with_its_entries(acme, provider):
    _drift(acme, provider, 3)
    feed = provider.registry.changes(0)

    page = events.page(feed)

    assert [e.data.seq for e in page.events] == sorted({t.seq for t in feed.tables})
    assert [t for e in page.events for t in e.data.tables] == feed.tables
    assert [r for e in page.events for r in e.data.rows] == feed.rows
    assert page.cursor == events.cursor_for(feed.last_seq, feed.contract_epoch)
    assert not page.truncated and not page.has_more
    assert {e.event_id for e in page.events} == {
        events.cursor_for(e.data.seq, feed.contract_epoch) for e in page.events
    }


@pytest.mark.parametrize("limit", [1, 2, 3, 5])
def test_pages_of_a_bounded_size_continue_until_they_have_replayed_the_whole_feed(
    acme, provider, limit
):
    _drift(acme, provider, 5)
    whole = events.page(provider.registry.changes(0))
    seq, epoch = 0, provider.registry.state.epoch
    replayed: list[events.ContractEvent] = []

    for _ in range(10):
        page = events.page(provider.registry.changes(seq, None, epoch), limit)
        assert len(page.events) <= limit
        replayed += page.events
        seq, epoch = events.position_of_cursor(page.cursor)
        if not page.has_more:
            break

    assert replayed == whole.events
    assert page.cursor == whole.cursor


def test_a_poll_without_a_cursor_answers_the_current_position_and_no_events(server, acme, provider):
    _drift(acme, provider, 2)

    page = _poll(server)

    state = provider.registry.state
    assert page == {
        "events": [],
        "cursor": events.cursor_for(state.seq, state.epoch),
        "truncated": False,
        "hasMore": False,
    }


def test_a_poll_from_a_cursor_answers_the_events_after_it(server, acme, provider):
    start = _poll(server)["cursor"]
    _drift(acme, provider, 2)

    page = _poll(server, start)

    assert [e["data"]["seq"] for e in page["events"]] == [1, 2]
    assert {e["type"] for e in page["events"]} == {"contract.changed"}
    assert page["truncated"] is False and page["hasMore"] is False
    assert _poll(server, page["cursor"])["events"] == []  # caught up


def test_a_poll_answers_at_most_the_limit_and_says_more_are_waiting(server, acme, provider):
    start = _poll(server)["cursor"]
    _drift(acme, provider, 3)

    first = _poll(server, start, limit=2)
    rest = _poll(server, first["cursor"], limit=2)

    assert [e["data"]["seq"] for e in first["events"]] == [1, 2] and first["hasMore"] is True
    assert [e["data"]["seq"] for e in rest["events"]] == [3] and rest["hasMore"] is False


def test_a_cursor_from_another_epoch_is_truncated_resync_from_the_current_position(
    server, acme, provider
):
    _drift(acme, provider, 1)

    page = _poll(server, events.cursor_for(0, "another-history"))

    state = provider.registry.state
    assert page["truncated"] is True and page["events"] == []
    assert page["cursor"] == events.cursor_for(state.seq, state.epoch)


def test_a_cursor_older_than_the_retained_log_is_truncated(acme):
    provider = Provider(acme.domain, registry=acme.domain.registry(log_capacity=1))
    server = contract_server(provider)
    start = _poll(server)["cursor"]
    _drift(acme, provider, 3)

    page = _poll(server, start)

    assert page["truncated"] is True and page["events"] == []
    assert _poll(server, page["cursor"]) == {
        "events": [],
        "cursor": page["cursor"],
        "truncated": False,
        "hasMore": False,
    }


@pytest.mark.parametrize("query", ["?cursor=nope", "?limit=0", "?limit=x", "?since=1"])
def test_a_malformed_poll_is_an_invalid_request_problem(server, query):
    problem = _read(server, names.EVENTS + query)

    assert problem["type"].endswith("invalid-request")  # as a malformed HTTP query


def test_a_limit_above_the_most_a_page_answers_is_lowered_to_it():
    request = events.parse_events(f"{names.EVENTS}?limit=100000")

    assert request is not None and request.limit == events.MAX_EVENTS_PER_PAGE


def test_the_events_template_is_listed_beside_the_changes_feed(server):
    async def body() -> list[str]:
        async with Client(server) as client:
            listed = (await client.list_resource_templates()).resource_templates
            return [t.uri_template for t in listed]

    templates = run(body)

    assert names.EVENTS_TEMPLATE in templates and names.CHANGES_TEMPLATE in templates


def test_a_subscriber_before_2026_07_28_is_pushed_the_new_cursor(server, acme, provider):
    async def body() -> list[tuple[str, Any]]:
        heard: list[tuple[str, Any]] = []
        arrived = anyio.Event()

        async def handler(message: Any) -> None:
            if isinstance(message, types.ResourceUpdatedNotification):
                heard.append((str(message.params.uri), message.params.meta))
                arrived.set()

        async with Client(server, mode="legacy", message_handler=handler) as client:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                await client.session.subscribe_resource(names.EVENTS)
            await anyio.to_thread.run_sync(rotate, acme, provider)
            with anyio.fail_after(10):
                await arrived.wait()
        return heard

    ((uri, meta),) = run(body)

    state = provider.registry.state
    assert uri == names.EVENTS
    assert meta == {names.CURSOR: events.cursor_for(state.seq, state.epoch)}


def test_a_listening_client_hears_that_there_are_new_events(server, acme, provider):
    async def body() -> str:
        async with Client(server) as client:
            async with client.listen(resource_subscriptions=[names.EVENTS]) as stream:
                await anyio.to_thread.run_sync(rotate, acme, provider)
                with anyio.fail_after(10):
                    async for event in stream:
                        return str(event.uri)  # type: ignore[union-attr]
        raise AssertionError("the stream ended")

    assert run(body) == names.EVENTS


def test_a_cursor_ahead_of_the_history_is_truncated(server, provider):
    state = provider.registry.state

    page = _poll(server, events.cursor_for(state.seq + 5, state.epoch))

    assert page["truncated"] is True and page["cursor"] == events.cursor_for(state.seq, state.epoch)


def test_a_poll_below_the_feed_s_level_is_the_level_problem_not_a_resync(acme):
    server = contract_server(Provider(acme.domain, level=0))

    problem = _read(server, names.EVENTS)

    assert problem["type"].endswith("level-too-low") and "truncated" not in problem
