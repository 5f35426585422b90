"""A contract session's options are one frozen, typed configuration every entry point takes."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from invalidation_contracts.client import ApplyMode
from invalidation_contracts.mcp import SessionOptions
from invalidation_contracts.mcp.options import SessionKwargs, session_and_sdk, split_options


def test_the_keyword_form_names_exactly_the_options():
    fields = {f.name for f in dataclasses.fields(SessionOptions)}
    assert set(typing.get_type_hints(SessionKwargs)) == fields


def test_the_options_are_frozen():
    options = SessionOptions(origin="mcp://a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.watch = False  # type: ignore[misc]


def test_model_is_the_planner_apply_mode():
    assert SessionOptions(apply="model").apply is ApplyMode.PLANNER
    assert SessionOptions().apply is ApplyMode.CLIENT


def test_an_unknown_apply_mode_is_refused_on_construction():
    with pytest.raises(ValueError, match="apply must be one of"):
        SessionOptions(apply="server")  # type: ignore[arg-type]


def test_the_sessions_keywords_and_the_sdks_arrive_apart():
    base = SessionOptions(origin="mcp://a", watch=False)
    options, sdk = session_and_sdk("connect", base, {"apply": "model"}, {"mode": "legacy"})
    assert options == SessionOptions(origin="mcp://a", watch=False, apply=ApplyMode.PLANNER)
    assert sdk == {"mode": "legacy"}


def test_an_sdk_keyword_beside_the_options_still_reaches_the_sdk_with_a_deprecation_warning():
    mixed = typing.cast(SessionKwargs, {"apply": "model", "mode": "legacy"})
    with pytest.warns(DeprecationWarning, match=r"connect\(\.\.\., mode=\.\.\.\).*sdk="):
        options, sdk = session_and_sdk("connect", None, mixed, {"read_timeout_seconds": 5})
    assert options == SessionOptions(apply=ApplyMode.PLANNER)
    assert sdk == {"mode": "legacy", "read_timeout_seconds": 5}


def test_split_options_is_deprecated_and_still_splits():
    base = SessionOptions(origin="mcp://a", watch=False)
    with pytest.warns(DeprecationWarning, match="session_and_sdk"):
        options, rest = split_options(base, {"apply": "model", "mode": "legacy"})
    assert options == SessionOptions(origin="mcp://a", watch=False, apply=ApplyMode.PLANNER)
    assert rest == {"mode": "legacy"}
