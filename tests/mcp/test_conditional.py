"""Conditional tool calls: a rejection carries a validator; a re-call presenting it is answered
"not modified" while every stamp it relied on holds, and in full once one moves. Real SDK client
and server, in process."""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp_types as types
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import Client
from tests.mcp.conftest import TOOL, rotate, run

from invalidation_contracts.mcp import conditional, names
from invalidation_contracts.mcp.origins import BY_SERVER_NAME

pytestmark = pytest.mark.mcp


async def _call(client: Client, draft: dict[str, Any], meta: dict[str, Any] | None = None) -> Any:
    return await client.call_tool(TOOL, draft, meta=meta)  # type: ignore[arg-type]


def _calls(server: Any, *steps: Any) -> list[types.CallToolResult]:
    """Run ``steps`` (each: ``(draft, meta_from_previous)`` or a callable) on one client."""

    async def body() -> list[types.CallToolResult]:
        results: list[types.CallToolResult] = []
        async with Client(server) as client:
            for step in steps:
                if callable(step):
                    await anyio.to_thread.run_sync(step)
                    continue
                draft, meta_of = step
                meta = meta_of(results[-1]) if meta_of is not None and results else None
                results.append(await _call(client, draft, meta))
        return results

    return run(body)


def _holding(result: types.CallToolResult) -> dict[str, Any]:
    return {names.IF_NONE_MATCH: (result.meta or {})[names.VALIDATOR]}


def test_a_rejection_carries_a_validator_and_a_success_none(server, acme):
    rejected, served = _calls(
        server,
        (acme.family("governed-partner-growth").draft(), None),
        (acme.family("plain-starter-monthly").draft(), None),
    )

    assert str((rejected.meta or {})[names.VALIDATOR]).startswith("ic1-")
    assert names.VALIDATOR not in (served.meta or {})


def test_a_re_call_presenting_the_validator_is_answered_not_modified(server, acme):
    growth = acme.family("governed-partner-growth").draft()

    full, short = _calls(server, (growth, None), (growth, _holding))

    assert short.is_error and (short.meta or {})[names.NOT_MODIFIED] is True
    assert (short.meta or {})[names.VALIDATOR] == (full.meta or {})[names.VALIDATOR]
    assert names.CONTRACT not in (short.meta or {})
    assert json.loads(short.content[0].text)["not_modified"] is True  # type: ignore[union-attr]


def test_a_moved_table_answers_the_re_call_in_full(server, provider, acme):
    growth = acme.family("governed-partner-growth").draft()

    before, after = _calls(
        server, (growth, None), lambda: rotate(acme, provider), (growth, _holding)
    )

    assert names.NOT_MODIFIED not in (after.meta or {})
    assert (after.meta or {})[names.VALIDATOR] != (before.meta or {})[names.VALIDATOR]
    (suggestion,) = (after.meta or {})[names.CONTRACT]["recovery_feedback"]["suggestions"]
    assert suggestion["parameters"] == {"promo_code": "WINTERLAUNCH26"}


def test_other_arguments_answer_in_full_whatever_validator_they_present(server, acme):
    growth = acme.family("governed-partner-growth").draft()
    other = {**growth, "customer": "cus_other"}

    _, answered = _calls(server, (growth, None), (other, _holding))

    assert names.NOT_MODIFIED not in (answered.meta or {})
    assert (answered.meta or {})[names.CONTRACT]["status"] == 422


def test_a_malformed_validator_is_ignored_and_the_call_answered(server, acme):
    growth = acme.family("governed-partner-growth").draft()

    (answered,) = _calls(server, (growth, lambda _: {names.IF_NONE_MATCH: 7}))

    assert (answered.meta or {})[names.CONTRACT]["status"] == 422


STAMPS = st.fixed_dictionaries(
    {
        "epoch": st.sampled_from(["e1", "e2"]),
        "rules_version": st.sampled_from(["r1", "r2"]),
        "table_versions": st.dictionaries(
            st.sampled_from(["a", "b"]), st.sampled_from(["1.0.0", "1.1.0"]), min_size=1
        ),
    }
)
ARGUMENTS = st.dictionaries(st.sampled_from(["x", "y"]), st.integers(0, 2), max_size=2)


@settings(max_examples=200)
@given(ARGUMENTS, STAMPS, ARGUMENTS, STAMPS)
def test_two_validators_are_equal_exactly_when_their_inputs_are(args_a, stamps_a, args_b, stamps_b):
    a = conditional.call_validator(TOOL, args_a, **stamps_a)
    b = conditional.call_validator(TOOL, args_b, **stamps_b)

    assert (a == b) == ((args_a, stamps_a) == (args_b, stamps_b))


def test_no_validator_without_every_stamp():
    assert (
        conditional.call_validator(
            TOOL, {}, epoch="e", rules_version=None, table_versions={"a": "1"}
        )
        is None
    )
    assert (
        conditional.call_validator(TOOL, {}, epoch="e", rules_version="r", table_versions={})
        is None
    )


def test_a_contract_session_learns_nothing_from_a_not_modified_answer(server, acme):
    from invalidation_contracts.client import FixMemory
    from invalidation_contracts.client.events import Ignored
    from invalidation_contracts.mcp import ContractSession

    memory = FixMemory("row")
    growth = acme.family("governed-partner-growth").draft()

    async def body() -> tuple[int, list[Any], int]:
        async with (
            Client(server) as client,
            ContractSession(client.session, memory, origin=BY_SERVER_NAME) as tools,
        ):
            full = await tools.call_tool(TOOL, growth)
            held = {names.IF_NONE_MATCH: (full.result.meta or {})[names.VALIDATOR]}
            short = await tools.call_tool(TOOL, growth, meta=held)
            return short.status, list(short.events), len(memory.entries(tools.origin))

    status, events, kept = run(body)

    assert status == 304 and [type(e) for e in events] == [Ignored]
    assert kept == 1  # the fix the full answer taught stays, and nothing else was learned
