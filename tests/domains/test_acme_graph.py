"""The Acme knowledge graph: the paper's size, with a chain deep enough for propagation to
matter."""

from domain_helpers import load, longest_chain


def test_graph_has_the_papers_size(acme):
    listing = acme.domain.registry().state.graph_listing()
    assert (len(listing.nodes), len(listing.edges)) == (23, 20)


def test_graph_has_a_chain_of_depth_three(acme):
    assert longest_chain(acme.domain.registry().state.graph_listing()) == 3


def test_graph_carries_the_papers_recognition_edge(acme):
    edges = {
        (e.from_, e.to, e.relation) for e in acme.domain.registry().state.graph_listing().edges
    }
    assert (
        "active_csm_codes:plan_partner_growth",
        "promo_eligibility:SUMMERSALE25",
        "requires_recognition",
    ) in edges


def test_rotation_propagates_beyond_the_row_it_changed(acme):
    result = load(acme.domain.registry(), acme, "active_csm_codes.rotation-1")
    assert result.diff.changed == ["plan_partner_growth"]
    assert result.affected_downstream == [
        "funding_type_policy:plan_partner_growth",
        "promo_eligibility:SUMMERSALE25",
    ]


def test_propagation_from_the_top_of_the_chain_reaches_three_tables_down(acme):
    graph = acme.domain.registry().state.graph
    assert graph.downstream(["required_promo_policy:plan_partner_growth"]) == [
        "active_csm_codes:plan_partner_growth",
        "funding_type_policy:plan_partner_growth",
        "promo_eligibility:SUMMERSALE25",
    ]
