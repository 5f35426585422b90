"""``verify`` with conditional reads (issue 37): a fix whose 422 cited resources is kept with
their validators and revalidated (``If-None-Match``) before it is injected in a later tick."""

from __future__ import annotations

from typing import Any

from invalidation_contracts.client import EvictionReason, FixMemory
from invalidation_contracts.client.contractless import VerifyMemory
from invalidation_contracts.client.events import Evicted, Probing, ReadResource, Revalidated
from invalidation_contracts.client.learner import readable_learner
from invalidation_contracts.client.values import Answer, Observed
from invalidation_contracts.protocol.links import citation, citations

from .test_contractless import DRAFT, ORIGIN, problem, served

ROW = "/resources/codes/growth"


def taught(memory: FixMemory, value: str, episode: int, cites: tuple[str, ...] = (ROW,)) -> Any:
    observed = Observed(status=422, body=problem(value), request=DRAFT, cites={0: cites})
    return memory.observe(ORIGIN, observed, episode=episode)


def learned(memory: FixMemory, etag: str = '"v1"', episode: int = 1) -> None:
    """Teach a fix citing ``ROW`` and answer the validator read it asks for."""
    [need] = taught(memory, "A", episode).needs
    assert need == ReadResource(ORIGIN, ROW)
    memory.answer(need, Answer(200, {"code": "A"}, etag=etag), episode=episode)


def test_a_fix_that_cites_a_resource_asks_for_its_validator_when_learned():
    memory = FixMemory("verify")
    assert taught(memory, "A", 1).needs == (ReadResource(ORIGIN, ROW),)


def test_a_later_tick_withholds_the_fix_until_a_conditional_read_answers():
    memory = FixMemory("verify")
    learned(memory)
    lookup = memory.lookup(ORIGIN, DRAFT, episode=2)
    assert lookup.entries == () and lookup.needs == (ReadResource(ORIGIN, ROW, '"v1"', True),)


def test_not_modified_serves_the_fix_for_the_rest_of_the_tick():
    memory = FixMemory("verify")
    learned(memory)
    [need] = memory.lookup(ORIGIN, DRAFT, episode=2).needs
    obs = memory.answer(need, Answer(304, etag='"v1"'), episode=2)
    assert [e.outcome for e in obs.events if isinstance(e, Revalidated)] == ["not-modified"]
    assert served(memory, 2) == ["e1"] and served(memory, 2) == ["e1"]


def test_a_changed_validator_evicts_the_fix_as_row_changed():
    memory = FixMemory("verify")
    learned(memory)
    [need] = memory.lookup(ORIGIN, DRAFT, episode=2).needs
    obs = memory.answer(need, Answer(200, {"code": "B"}, etag='"v2"'), episode=2)
    [evicted] = [e for e in obs.events if isinstance(e, Evicted)]
    assert evicted.reason is EvictionReason.ROW_CHANGED and served(memory, 2) == []


def test_a_resource_gone_evicts_the_fix():
    memory = FixMemory("verify")
    learned(memory)
    [need] = memory.lookup(ORIGIN, DRAFT, episode=2).needs
    memory.answer(need, Answer(404), episode=2)
    assert memory.entries(ORIGIN) == []


def test_a_conditional_read_is_counted_as_a_probe_call():
    memory = FixMemory("verify")
    learned(memory)
    [need] = memory.lookup(ORIGIN, DRAFT, episode=2).needs
    memory.answer(need, Answer(304), episode=2)
    assert memory.stats(ORIGIN).probes == 2  # the validator read, then the conditional read


def test_a_read_that_fails_leaves_the_fix_to_the_probe_never_withheld_for_good():
    memory = FixMemory(VerifyMemory(lifetime=1))
    learned(memory)
    [need] = memory.lookup(ORIGIN, DRAFT, episode=3).needs
    memory.fetch_failed(need, "ConnectError", episode=3)
    lookup = memory.lookup(ORIGIN, DRAFT, episode=3)
    assert lookup.needs == () and any(isinstance(e, Probing) for e in lookup.events)


def test_a_server_error_on_the_validator_read_gives_no_validator():
    memory = FixMemory("verify")
    [need] = taught(memory, "A", 1).needs
    obs = memory.answer(need, Answer(500), episode=1)
    assert [e.outcome for e in obs.events if isinstance(e, Revalidated)] == ["unavailable"]
    assert memory.lookup(ORIGIN, DRAFT, episode=2).needs == ()


def test_learned_does_not_read_resources():
    memory = FixMemory("learned")
    assert taught(memory, "A", 1).needs == ()


def test_citations_read_only_links_anchored_at_a_suggestion_on_the_same_origin():
    values = [
        citation(0, ROW) + ", " + citation(1, "/resources/t/k"),
        '<https://evil.example/x>; rel="related"; anchor="#/recovery_feedback/suggestions/0"',
        '<//evil.example/x>; rel="related"; anchor="#/recovery_feedback/suggestions/0"',
        '</contract>; rel="urn:invalidation-contracts:contract"',
        '</x>; rel="related"; anchor="#/recovery_feedback/suggestions/zero"',
        "<<garbage",
        "x" * 5000,
    ]
    assert citations(values) == {0: (ROW,), 1: ("/resources/t/k",)}


def test_citations_and_validators_persist_with_the_memory(tmp_path):
    path = tmp_path / "memory.db"
    with FixMemory("verify", store=path) as memory:
        learned(memory)
    with FixMemory("verify", store=path) as memory:
        needs = memory.lookup(ORIGIN, DRAFT, episode=2).needs
        assert needs == (ReadResource(ORIGIN, ROW, '"v1"', True),)


def test_citations_that_are_not_objects_make_the_learner_state_unreadable():
    state = {"v": 1, "types": {}, "checked": {}, "probed": {}, "cites": [], "validators": {}}
    assert readable_learner(state) == {"unreadable": "cites and validators must be objects"}
