from hypothesis import given, settings
from hypothesis import strategies as st

from invalidation_contracts.server import KnowledgeGraph, Registry, Rule, RuleSet, Snapshot

TABLES = ["a", "b", "c"]
KEYS = [f"k{i}" for i in range(5)]

rows = st.dictionaries(
    st.sampled_from(KEYS),
    st.fixed_dictionaries({"ref": st.lists(st.sampled_from(KEYS), max_size=3)}),
    max_size=5,
)
tables = st.fixed_dictionaries({t: rows for t in TABLES})
rule_sets = st.lists(
    st.tuples(st.sampled_from(TABLES), st.sampled_from(TABLES), st.sampled_from(["r1", "r2"])),
    max_size=5,
    unique=True,
).map(lambda triples: [Rule(a, b, r, via="ref") for a, b, r in triples])


def brute_force_edges(table_rows, rules):
    edges = set()
    for rule in rules:
        for key, row in table_rows[rule.from_table].items():
            for target in row["ref"]:
                edges.add((f"{rule.from_table}:{key}", f"{rule.to_table}:{target}", rule.relation))
    return edges


def brute_force_reachable(edges, start):
    reached, frontier = set(), set(start)
    while frontier:
        step = {b for a, b, _ in edges if a in frontier} - reached
        reached |= step
        frontier = step
    return reached - set(start)


def test_downstream_follows_chains_of_any_depth():
    snaps = {
        "a": Snapshot.build("a", "1", {"x": {"ref": ["y"]}}),
        "b": Snapshot.build("b", "1", {"y": {"ref": ["z"]}}),
        "c": Snapshot.build("c", "1", {"z": {"ref": ["x"]}}),
    }
    rules = RuleSet(
        [
            Rule("a", "b", "r", via="ref"),
            Rule("b", "c", "r", via="ref"),
            Rule("c", "a", "r", via="ref"),
        ]
    )
    graph = KnowledgeGraph.build(snaps, rules)
    assert graph.downstream(["a:x"]) == ["b:y", "c:z"]


def test_a_rule_without_via_links_equal_keys():
    snaps = {"a": Snapshot.build("a", "1", {"k": {}}), "b": Snapshot.build("b", "1", {"k": {}})}
    graph = KnowledgeGraph.build(snaps, RuleSet([Rule("a", "b", "same")]))
    assert list(graph.edges()) == [("a:k", "b:k", "same")]


@settings(max_examples=150, deadline=None)
@given(tables, rule_sets)
def test_graph_edges_equal_every_rule_instance(table_rows, rules):
    registry = Registry(table_rows, rules)
    assert set(registry.state.graph.edges()) == brute_force_edges(table_rows, rules)


@settings(max_examples=150, deadline=None)
@given(tables, rule_sets, st.sampled_from(TABLES), rows)
def test_affected_downstream_equals_reachability_in_the_pre_reload_graph(
    table_rows, rules, table, new_rows
):
    registry = Registry(table_rows, rules)
    before = brute_force_edges(table_rows, rules)
    result = registry.reload(table, new_rows, version="9.0.0")
    start = {f"{table}:{k}" for k in (*result.diff.changed, *result.diff.removed)}
    assert set(result.affected_downstream) == brute_force_reachable(before, start)


@settings(max_examples=150, deadline=None)
@given(tables, rule_sets, st.sampled_from(TABLES), rows)
def test_incremental_graph_update_equals_a_rebuild(table_rows, rules, table, new_rows):
    registry = Registry(table_rows, rules)
    registry.reload(table, new_rows, version="9.0.0")
    after = dict(table_rows, **{table: new_rows})
    assert set(registry.state.graph.edges()) == brute_force_edges(after, rules)


def brute_force_nodes(table_rows, rules):
    """Every row of a table a rule names, and every edge end; ``True`` marks a key with no row."""
    named = {t for rule in rules for t in (rule.from_table, rule.to_table)}
    nodes = {f"{t}:{k}": False for t in named for k in table_rows[t]}
    for _, target, _ in brute_force_edges(table_rows, rules):
        table, _, key = target.partition(":")
        nodes.setdefault(target, key not in table_rows[table])
    return nodes


def test_an_edge_to_a_key_with_no_row_lists_that_key_as_an_absent_node():
    registry = Registry(
        {"a": {"x": {"ref": ["gone"]}}, "b": {"y": {}}}, [Rule("a", "b", "r", via="ref")]
    )
    listing = registry.state.graph_listing()
    assert listing.nodes["b:gone"].absent is True
    assert listing.nodes["b:gone"].version == registry.state.tables["b"].version
    assert listing.nodes["b:y"].absent is None
    assert "absent" not in listing.nodes["b:y"].to_wire()


@settings(max_examples=150, deadline=None)
@given(tables, rule_sets)
def test_graph_nodes_are_the_rows_of_ruled_tables_and_every_edge_end(table_rows, rules):
    listing = Registry(table_rows, rules).state.graph_listing()
    assert {nid: bool(node.absent) for nid, node in listing.nodes.items()} == brute_force_nodes(
        table_rows, rules
    )
    assert {e.from_ for e in listing.edges} | {e.to for e in listing.edges} <= set(listing.nodes)


@settings(max_examples=150, deadline=None)
@given(tables, rule_sets, st.sampled_from(TABLES), rows)
def test_affected_downstream_is_a_walk_over_the_published_graph_as_it_was_before(
    table_rows, rules, table, new_rows
):
    registry = Registry(table_rows, rules)
    listing = registry.state.graph_listing()
    result = registry.reload(table, new_rows, version="9.0.0")
    edges = {(e.from_, e.to, e.relation) for e in listing.edges}
    start = {f"{table}:{k}" for k in (*result.diff.changed, *result.diff.removed)}
    assert set(result.affected_downstream) <= set(listing.nodes)
    assert set(result.affected_downstream) == brute_force_reachable(edges, start)
