"""A contract resource read that brings nothing readable is no answer (issue 28): its status is
None, not a synthetic 502, and the memory falls back exactly as for any unusable answer."""

from __future__ import annotations

import base64

import mcp_types as types
from tests.client.contention_model import ORIGIN, REQUEST, contract, failure, fix

from invalidation_contracts.client import Answer, FixMemory, Observed
from invalidation_contracts.client.limits import Limits, Refusal
from invalidation_contracts.mcp import names
from invalidation_contracts.mcp.results import read_resource_result

URI = "contract://changes"


def _read(*contents: types.TextResourceContents | types.BlobResourceContents):
    return read_resource_result(types.ReadResourceResult(contents=list(contents)))


def test_a_read_without_contents_has_no_status():
    assert _read().status is None


def test_a_binary_read_has_no_status():
    blob = base64.b64encode(b"{}").decode()
    assert _read(types.BlobResourceContents(uri=URI, blob=blob)).status is None


def test_a_problem_document_without_a_status_has_no_status():
    problem = types.TextResourceContents(
        uri=URI, mime_type=names.PROBLEM_MEDIA_TYPE, text='{"title": "no status"}'
    )
    answer = _read(problem)
    assert answer.status is None and answer.body == {"title": "no status"}


def test_a_problem_document_keeps_its_status():
    gone = types.TextResourceContents(
        uri=URI, mime_type=names.PROBLEM_MEDIA_TYPE, text='{"status": 410, "title": "gone"}'
    )
    assert _read(gone).status == 410


def test_an_unreadable_read_falls_back_as_an_unusable_answer():
    def kinds(answer: Answer) -> list[str]:
        memory = FixMemory("row")
        memory.observe(ORIGIN, Observed(REQUEST, 422, failure([fix("F0", "t0", "1.0.0")])))
        moved = memory.observe(ORIGIN, Observed(None, 200, {"success": True, **contract("2.0.0")}))
        (need,) = moved.needs  # the row diff of the moved table
        return [e.kind for e in memory.answer(need, answer).events]

    read = _read()
    unreadable = Answer(read.status, read.body, body_bytes=read.body_bytes)
    # No feed: the entry on the moved table is evicted at table granularity.
    assert kinds(unreadable) == kinds(Answer.unusable()) == ["evicted"]


def _feed(text: str) -> types.TextResourceContents:
    return types.TextResourceContents(uri=URI, mime_type="application/json", text=text)


def test_a_read_nested_past_the_depth_bound_is_refused_unparsed():
    deep = "[" * 100_000 + "]" * 100_000  # json.loads would raise RecursionError
    answer = read_resource_result(
        types.ReadResourceResult(contents=[_feed(deep)]), Limits(max_json_depth=128)
    )
    assert answer.body is None
    assert answer.refused == Refusal("max_json_depth", 100_000)


def test_a_read_over_its_byte_bound_is_refused_unparsed():
    text = '{"table_versions": {}, "pad": "' + "x" * 2_000 + '"}'
    answer = read_resource_result(
        types.ReadResourceResult(contents=[_feed(text)]), Limits(max_feed_bytes=1_000)
    )
    assert answer.body is None
    assert answer.refused == Refusal("max_feed_bytes", len(text))


def test_a_read_within_its_bounds_is_parsed():
    answer = _read(_feed('{"changes": []}'))
    assert answer.body == {"changes": []} and answer.refused is None


def test_a_refused_changes_feed_is_lost_history_for_the_memory():
    memory = FixMemory("row")
    memory.observe(ORIGIN, Observed(REQUEST, 422, failure([fix("F0", "t0", "1.0.0")])))
    moved = memory.observe(ORIGIN, Observed(None, 200, {"success": True, **contract("2.0.0")}))
    (need,) = moved.needs
    read = read_resource_result(
        types.ReadResourceResult(contents=[_feed("[" * 500 + "]" * 500)]), memory.limits
    )
    answer = Answer(read.status, read.body, body_bytes=read.body_bytes, refused=read.refused)
    kinds = [e.kind for e in memory.answer(need, answer).events]
    assert "refused" in kinds and "evicted" in kinds
