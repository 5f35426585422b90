"""Table versions: dotted ASCII-digit numbers order numerically, whatever their length."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from invalidation_contracts.protocol.problems import ProtocolError
from invalidation_contracts.server import Registry
from invalidation_contracts.server.versions import (
    check_forward,
    fresh_version,
    is_newer,
    next_version,
)

parts = st.lists(st.integers(min_value=0, max_value=10**30), min_size=1, max_size=4)


def dotted(numbers: list[int], zeros: int = 0) -> str:
    return ".".join("0" * zeros + str(n) for n in numbers)


def padded(numbers: list[int], width: int) -> tuple[int, ...]:
    return tuple(numbers) + (0,) * (width - len(numbers))


@settings(max_examples=300, deadline=None)
@given(parts, parts, st.integers(0, 2))
def test_dotted_numbers_order_like_the_integers_they_spell(a, b, zeros):
    width = max(len(a), len(b))
    assert is_newer(dotted(a, zeros), dotted(b)) == (padded(a, width) > padded(b, width))


@settings(max_examples=300, deadline=None)
@given(parts)
def test_the_bump_adds_one_to_the_minor_part_and_zeroes_the_rest(numbers):
    bumped = [int(p) for p in next_version(dotted(numbers)).split(".")]
    if len(numbers) == 1:
        assert bumped == [numbers[0] + 1]
    else:
        assert bumped == [numbers[0], numbers[1] + 1, *[0] * (len(numbers) - 2)]


def test_parts_longer_than_int_parsing_allows_still_compare_and_bump():
    huge = "9" * 5000
    assert is_newer(f"1.{huge}", "1.2") is True
    assert is_newer("1.2", f"1.{huge}") is False
    assert next_version(f"1.{'9' * 120}.3") == f"1.1{'0' * 120}.0"
    with pytest.raises(ProtocolError, match="pass a version"):  # over 128 characters (N15)
        next_version(f"1.{huge}.3")


@pytest.mark.parametrize("version", ["1.\u00b2", "\u00b2", "\u0663", "1.\u0663"])
def test_only_ascii_digits_make_a_dotted_number(version):
    assert is_newer(version, "1.0") is None
    with pytest.raises(ProtocolError, match="not dotted-numeric"):
        next_version(version)


def test_an_operator_version_longer_than_128_characters_is_refused():
    with pytest.raises(ProtocolError, match="not a valid version"):
        check_forward("9" * 129, "1.0.0", "active_csm_codes")
    check_forward("9" * 128, "1.0.0", "active_csm_codes")


# -- reliability audit 2: N10 (a version served twice in one epoch), N15 (NUL, bump length) ----


def registry_of(domain) -> Registry:
    return Registry({"active_csm_codes": {"growth": {"code": "S25"}}}, [])


def test_a_version_served_before_in_the_epoch_is_refused(domain):
    registry = registry_of(domain)
    rows = registry.state.tables["active_csm_codes"].plain_rows()
    first = registry.state.versions()["active_csm_codes"]
    registry.reload("active_csm_codes", {**rows, "x": {"code": "Z"}}, version="opaque-x")

    with pytest.raises(ProtocolError, match="already served in this epoch"):
        registry.reload("active_csm_codes", {**rows, "y": {"code": "Z"}}, version=first)
    assert registry.state.versions()["active_csm_codes"] == "opaque-x"


def test_the_automatic_bump_skips_versions_served_before_in_the_epoch(domain):
    registry = registry_of(domain)
    rows = registry.state.tables["active_csm_codes"].plain_rows()
    served = [registry.state.versions()["active_csm_codes"]]
    registry.reload("active_csm_codes", {**rows, "a": {"code": "Z"}})  # 1.1.0
    registry.reload("active_csm_codes", {**rows, "b": {"code": "Z"}}, version="9.0.0")
    registry.reload("active_csm_codes", {**rows, "c": {"code": "Z"}}, version="opaque")
    registry.reload("active_csm_codes", {**rows, "d": {"code": "Z"}}, version="1.0.5")
    registry.reload("active_csm_codes", {**rows, "e": {"code": "Z"}})  # 1.1.0 is taken
    served += [registry.state.versions()["active_csm_codes"]]

    assert served[-1] not in {"1.1.0", "9.0.0", "opaque", "1.0.5", served[0]}
    assert served[-1] == "1.2.0"


@pytest.mark.parametrize("version", ["3\x00", "1.\x07", "a\u2028b"])
def test_a_version_with_control_characters_is_refused(version):
    with pytest.raises(ProtocolError, match="not a valid version"):
        check_forward(version, "1.0.0", "plans")


def test_an_automatic_bump_never_passes_128_characters():
    with pytest.raises(ProtocolError, match="pass a version"):
        next_version("9" * 128)
    assert len(next_version("9" * 127)) == 128


# -- issue 26: the automatic bump is total (a captured write over an opaque version) ----------

versions = st.one_of(
    st.text(
        st.characters(codec="utf-8", categories=["L", "N", "P", "S"]), min_size=1, max_size=128
    ),
    st.builds(dotted, parts),
    st.builds(
        lambda b, k: f"{b}+{k}", st.text("ab9-", min_size=0, max_size=126), st.integers(1, 99)
    ),
    st.just("9" * 128),
    st.just("x" * 126 + "+9"),
)


def is_version(text: str) -> bool:
    """What ``check_forward`` accepts as a version (the oracle: its own rules)."""
    return 0 < len(text) <= 128 and text == text.strip() and text.isprintable()


@settings(max_examples=400, deadline=None)
@given(versions.filter(is_version), st.data())
def test_the_automatic_bump_of_any_version_is_a_valid_version_never_served(current, data):
    near = [current[:120] + f"+{k}" for k in range(1, 4)]
    if is_newer(current, current) is not None and len(current) < 100:
        near.append(next_version(current))
    served = set(data.draw(st.lists(st.sampled_from(near) | versions, max_size=6))) | {current}

    bumped = fresh_version(current, served)

    assert is_version(bumped) and bumped not in served
    assert bumped == fresh_version(current, set(served))  # deterministic


@settings(max_examples=200, deadline=None)
@given(versions.filter(is_version))
def test_repeated_bumps_never_give_a_version_twice(current):
    served = {current}
    for _ in range(30):
        current = fresh_version(current, served)
        assert current not in served
        served.add(current)


def test_a_dotted_number_keeps_its_numeric_bump():
    assert fresh_version("1.0.0", {"1.0.0"}) == "1.1.0"
    assert fresh_version("1.0.0", {"1.0.0", "1.1.0"}) == "1.2.0"


@pytest.mark.parametrize(
    ("current", "bumped"),
    [
        ("x", "x+1"),
        ("2024-rates", "2024-rates+1"),
        ("2024-rates+1", "2024-rates+2"),
        ("build+09", "build+09+1"),
        ("9" * 128, "9" * 126 + "+1"),  # the numeric bump would pass 128 characters
        ("x" * 126 + "+9", "x" * 125 + "+10"),
    ],
)
def test_any_other_version_gets_a_counter(current, bumped):
    assert fresh_version(current, {current}) == bumped


def test_the_counter_skips_versions_served_before_in_the_epoch():
    assert fresh_version("x", {"x", "x+1", "x+2"}) == "x+3"


def test_a_reload_naming_no_version_over_an_opaque_one_gets_the_counter(domain):
    registry = registry_of(domain)
    rows = registry.state.tables["active_csm_codes"].plain_rows()
    registry.reload("active_csm_codes", {**rows, "x": {"code": "Z"}}, version="2024-rates")

    result = registry.reload("active_csm_codes", {**rows, "y": {"code": "Z"}})

    assert result.new_version == "2024-rates+1"
