import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from invalidation_contracts.protocol.problems import ProtocolError
from invalidation_contracts.server import Snapshot, diff, thaw

values = st.one_of(st.integers(-1000, 1000), st.text(max_size=4), st.booleans())
row = st.dictionaries(st.sampled_from(["a", "b", "c"]), values, max_size=3)
table = st.dictionaries(st.sampled_from([f"k{i}" for i in range(8)]), row, max_size=8)


def as_json(value):
    """JSON equality: unlike Python's, 0 and False differ."""
    return json.dumps(value, sort_keys=True)


def test_false_and_zero_are_different_row_content():
    old, new = (
        Snapshot.build("t", "1", {"k": {"a": 0}}),
        Snapshot.build("t", "2", {"k": {"a": False}}),
    )
    assert diff(old, new).changed == ["k"]


def test_snapshot_rows_cannot_be_mutated():
    snap = Snapshot.build("t", "1.0.0", {"k": {"v": [1, 2]}})
    with pytest.raises(TypeError):
        snap.rows["k"]["v"] = 3  # type: ignore[index]
    assert thaw(snap.rows["k"]) == {"v": [1, 2]}


def test_snapshot_is_independent_of_the_input_dict():
    rows = {"k": {"v": 1}}
    snap = Snapshot.build("t", "1.0.0", rows)
    rows["k"]["v"] = 2
    assert snap.rows["k"]["v"] == 1


@pytest.mark.parametrize(
    "rows, message",
    [
        ({"k": 5}, "must be an object"),
        ({"": {}}, "non-empty strings"),
        ({"k": {"v": float("nan")}}, "not a JSON number"),
        ({"k": {"v": 2**60}}, "interoperable range"),
        ({"k": {"v": object()}}, "not a JSON value"),
    ],
)
def test_bad_rows_are_refused_with_a_clear_message(rows, message):
    with pytest.raises(ProtocolError, match=message):
        Snapshot.build("t", "1.0.0", rows)


def test_with_changes_refuses_to_delete_a_missing_row():
    snap = Snapshot.build("t", "1.0.0", {"k": {}})
    with pytest.raises(ProtocolError, match="no row 'nope'"):
        snap.with_changes("1.1.0", delete=["nope"])


@settings(max_examples=200, deadline=None)
@given(table, table)
def test_diff_is_exact(old_rows, new_rows):
    d = diff(Snapshot.build("t", "1", old_rows), Snapshot.build("t", "2", new_rows))
    assert d.added == sorted(set(new_rows) - set(old_rows))
    assert d.removed == sorted(set(old_rows) - set(new_rows))
    assert d.changed == sorted(
        k for k in set(old_rows) & set(new_rows) if as_json(old_rows[k]) != as_json(new_rows[k])
    )


@settings(max_examples=200, deadline=None)
@given(table, table)
def test_diff_restricted_to_the_patched_keys_equals_the_full_diff(old_rows, new_rows):
    old = Snapshot.build("t", "1", old_rows)
    upsert = {
        k: v for k, v in new_rows.items() if k not in old_rows or as_json(old_rows[k]) != as_json(v)
    }
    delete = [k for k in old_rows if k not in new_rows]
    new = old.with_changes("2", upsert, delete)
    assert diff(old, new, [*upsert, *delete]) == diff(old, new)
    assert thaw(new.rows) == new_rows


nested = st.recursive(
    st.one_of(
        st.integers(-3, 3),
        st.sampled_from([0.0, 1.0, -0.0, 2.5]),
        st.booleans(),
        st.none(),
        st.text(max_size=2),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from("xy"), inner, max_size=2)
    ),
    max_leaves=6,
)
nested_table = st.dictionaries(
    st.sampled_from(["k0", "k1", "k2"]),
    st.dictionaries(st.sampled_from(["a", "b"]), nested, max_size=2),
    max_size=3,
)


@settings(max_examples=300)
@given(nested_table, nested_table)
def test_a_reload_keeps_an_etag_only_where_a_fresh_fingerprint_gives_the_same(before, after):
    """Brute-force oracle: the etags of a snapshot built over the one it replaces are exactly
    those of building it alone (1, 1.0 and true differ in JSON though Python calls them equal)."""
    previous = Snapshot.build("t", "1", before)
    assert Snapshot.build("t", "2", after, previous=previous).etags == (
        Snapshot.build("t", "2", after).etags
    )


@pytest.mark.parametrize("old, new", [(1, True), (0, False), (1, 1.0), ([1], (True,))])
def test_a_value_python_calls_equal_but_json_does_not_gets_a_new_etag(old, new):
    previous = Snapshot.build("t", "1", {"k": {"v": old}})
    rebuilt = Snapshot.build("t", "2", {"k": {"v": new}}, previous=previous)
    assert rebuilt.etags["k"] == Snapshot.build("t", "2", {"k": {"v": new}}).etags["k"]
    if not isinstance(new, float):
        assert rebuilt.etags["k"] != previous.etags["k"]
