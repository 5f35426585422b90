from hypothesis import given, settings
from hypothesis import strategies as st

from invalidation_contracts.protocol import canonical_json, fingerprint, row_etag, rules_version


def test_canonical_json_sorts_keys_and_drops_whitespace():
    assert canonical_json({"b": 1, "a": [1, "x"]}) == b'{"a":[1,"x"],"b":1}'


def test_canonical_json_treats_tuples_as_arrays():
    assert canonical_json({"t": (1, 2)}) == canonical_json({"t": [1, 2]})


def test_rules_version_is_twelve_hex_characters():
    version = rules_version([("a", "b", "r")])
    assert len(version) == 12 and int(version, 16) >= 0


def test_rules_version_matches_sha256_of_sorted_canonical_triples():
    triples = [("z", "y", "r2"), ("a", "b", "r1")]
    assert rules_version(triples) == fingerprint([["a", "b", "r1"], ["z", "y", "r2"]], 12)


def test_rules_version_ignores_declaration_order_and_duplicates():
    a = [("a", "b", "r"), ("c", "d", "s")]
    assert rules_version(a) == rules_version(list(reversed(a)) + [a[0]])


def test_rules_version_changes_when_a_relation_is_redeclared():
    assert rules_version([("a", "b", "r")]) != rules_version([("a", "b", "other")])


rows = st.dictionaries(
    st.text(min_size=1, max_size=5),
    st.one_of(st.integers(-(2**53) + 1, 2**53 - 1), st.text(max_size=5)),
    max_size=5,
)


@settings(max_examples=100, deadline=None)
@given(rows)
def test_row_etag_does_not_depend_on_key_order(row):
    assert row_etag(row) == row_etag(dict(reversed(list(row.items()))))


@settings(max_examples=100, deadline=None)
@given(rows, rows)
def test_row_etags_differ_exactly_when_rows_differ(a, b):
    assert (row_etag(a) == row_etag(b)) == (a == b)
