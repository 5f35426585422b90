"""Table versions: dotted ASCII-digit numbers order numerically, whatever their length."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from invalidation_contracts.protocol.problems import ProtocolError
from invalidation_contracts.server import Registry
from invalidation_contracts.server.versions import check_forward, is_newer, next_version

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
