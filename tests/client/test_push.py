"""The watch stream's sans-IO core (client/push.py), without a socket: what a response and an
event mean, the steps an announced position costs, and the backoff. The streams themselves run
over real servers in test_watch_stream.py and tests/service/test_watch.py."""

from __future__ import annotations

from typing import Any

import pytest

from invalidation_contracts.client.events import MemoryEvent, WatchLost, WatchOpened
from invalidation_contracts.client.push import (
    REFRESH_ATTEMPTS,
    Known,
    Pause,
    Refresh,
    Saw,
    WatchCore,
    WatchFailure,
    WatchOptions,
    Withhold,
    watch_options,
)
from invalidation_contracts.client.sse import SSEEvent
from invalidation_contracts.client.values import Position

ORIGIN = "http://api.test"


def core(events: list[MemoryEvent] | None = None) -> WatchCore:
    sink = events if events is not None else []
    headers = {"Authorization": "Bearer t", "Cookie": "c"}
    return WatchCore(ORIGIN, WatchOptions(), headers, sink.append)


def versions(seq: int, epoch: str = "e1") -> SSEEvent:
    return SSEEvent(
        event="versions", data=f'{{"contract_seq": {seq}, "contract_epoch": "{epoch}"}}'
    )


def run(steps: Any, positions: list[Position]) -> list[object]:
    """Drive the steps, answering each ``Known`` with the next position; the steps taken."""
    taken: list[object] = []
    answers = iter(positions)
    try:
        step = next(steps)
        while True:
            taken.append(step)
            step = steps.send(next(answers) if isinstance(step, Known) else None)
    except StopIteration:
        return taken


def test_only_the_authorization_header_is_forwarded_to_the_stream():
    assert core().forwarded == {"Authorization": "Bearer t"}


def test_an_event_stream_answer_opens_the_watch_from_the_position_asked():
    watch = core()
    watch.check(200, "text/event-stream; charset=utf-8", 7)
    assert watch.since == 7


@pytest.mark.parametrize("status", [400, 401, 403, 404, 405, 406, 422, 501])
def test_a_server_without_the_route_is_not_asked_again(status):
    with pytest.raises(WatchFailure) as failed:
        core().check(status, "application/problem+json", None)
    assert failed.value.permanent


def test_a_200_that_is_not_an_event_stream_is_permanent():
    with pytest.raises(WatchFailure) as failed:
        core().check(200, "application/json", None)
    assert failed.value.permanent and "application/json" in failed.value.detail


def test_a_410_asks_for_a_refresh_and_a_retry():
    with pytest.raises(WatchFailure) as failed:
        core().check(410, "application/problem+json", 3)
    assert failed.value.refresh and not failed.value.permanent


def test_a_503_is_retried():
    with pytest.raises(WatchFailure) as failed:
        core().check(503, "text/plain", None)
    assert not failed.value.permanent


def test_a_position_the_memory_has_reached_costs_no_read():
    taken = run(core().announced([versions(5)]), [Position(5, "e1")])
    assert taken == [Known(), Saw(5)]


def test_a_position_past_the_memory_refreshes_until_it_is_reached():
    behind, reached = Position(3, "e1"), Position(5, "e1")
    taken = run(core().announced([versions(5)]), [behind, behind, reached])
    assert taken == [
        Known(),
        Withhold(5, "e1"),
        Refresh(),
        Known(),
        Pause(0.025),
        Refresh(),
        Known(),
        Saw(5),
    ]


def test_another_epoch_is_behind_whatever_its_seq():
    taken = run(core().announced([versions(1, "e2")]), [Position(9, "e1"), Position(1, "e2")])
    assert taken == [Known(), Withhold(1, "e2"), Refresh(), Known(), Saw(1)]


def test_a_position_never_reached_fails_after_the_bounded_reads():
    steps = core().announced([versions(5)])
    with pytest.raises(WatchFailure, match="did not reach the announced seq 5"):
        run(steps, [Position(3, "e1")] * (REFRESH_ATTEMPTS + 1))


def test_a_position_behind_is_withheld_before_any_read():
    taken = run(core().announced([versions(5)]), [Position(3, "e1"), Position(5, "e1")])
    assert taken[:3] == [Known(), Withhold(5, "e1"), Refresh()]


def test_a_position_never_reached_is_withheld_only_until_the_next_confirming_read():
    taken: list[object] = []
    steps = core().announced([versions(5)])
    with pytest.raises(WatchFailure):
        step = next(steps)
        while True:
            taken.append(step)
            step = steps.send(Position(3, "e1") if isinstance(step, Known) else None)
    assert taken[1] == Withhold(5, "e1") and taken[-1] == Withhold(None, None)


def test_a_stopping_watch_reads_no_more():
    # ``Known`` answered with None: the watch is stopping, so no refresh follows.
    steps = core().announced([versions(5)])
    assert next(steps) == Known()
    assert not isinstance(steps.send(None), Refresh | Pause)


def test_other_event_names_are_ignored():
    assert run(core().announced([SSEEvent(event="later", data="{}")]), []) == []


@pytest.mark.parametrize(
    "data",
    [
        "not json",
        '{"contract_epoch": "e1"}',
        '{"contract_seq": true, "contract_epoch": "e1"}',
        '{"contract_seq": -1, "contract_epoch": "e1"}',
        '{"contract_seq": 9007199254740992, "contract_epoch": "e1"}',
        '{"contract_seq": 1, "contract_epoch": ""}',
        '{"contract_seq": 1, "contract_epoch": "' + "e" * 129 + '"}',
    ],
)
def test_a_malformed_versions_event_fails_the_stream(data):
    with pytest.raises(WatchFailure):
        core().meaning(SSEEvent(event="versions", data=data))


def test_an_error_event_fails_the_stream_with_its_detail_and_a_refresh():
    event = SSEEvent(event="error", data='{"detail": "history truncated"}')
    with pytest.raises(WatchFailure, match="history truncated") as failed:
        core().meaning(event)
    assert failed.value.refresh


def test_lost_and_opened_are_said_once_each():
    events: list[MemoryEvent] = []
    watch = core(events)
    watch.failed(WatchFailure("down"))
    watch.failed(WatchFailure("still down"))
    watch.healthy()
    watch.healthy()
    assert [type(e) for e in events] == [WatchLost, WatchOpened]
    assert watch.open and watch.failures == 0


def test_a_permanent_failure_gives_up():
    assert core().failed(WatchFailure("no route", permanent=True)) is None


def test_backoff_grows_exponentially_within_its_jitter_up_to_its_cap():
    options = WatchOptions(backoff_initial_s=1.0, backoff_max_s=8.0)
    for failures, base in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (10, 8.0)]:
        wait = options.backoff(failures)
        assert 0.8 * base <= wait <= 1.2 * base


def test_the_watch_argument_means_no_watch_defaults_or_the_options_given():
    given = WatchOptions(stall_timeout_s=5.0)
    assert watch_options(False) is None and watch_options(None) is None
    assert watch_options(True) == WatchOptions()
    assert watch_options(given) is given
