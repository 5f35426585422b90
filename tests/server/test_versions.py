"""Table versions: dotted ASCII-digit numbers order numerically, whatever their length."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from invalidation_contracts.protocol.problems import ProtocolError
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
    assert next_version(f"1.{huge}.3") == f"1.1{'0' * 5000}.0"


@pytest.mark.parametrize("version", ["1.\u00b2", "\u00b2", "\u0663", "1.\u0663"])
def test_only_ascii_digits_make_a_dotted_number(version):
    assert is_newer(version, "1.0") is None
    with pytest.raises(ProtocolError, match="not dotted-numeric"):
        next_version(version)


def test_an_operator_version_longer_than_128_characters_is_refused():
    with pytest.raises(ProtocolError, match="not a valid version"):
        check_forward("9" * 129, "1.0.0", "plans")
    check_forward("9" * 128, "1.0.0", "plans")
