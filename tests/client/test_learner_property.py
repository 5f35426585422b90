"""The drift learner against brute-force oracles: its online lifetime equals the mean of every
lifetime observed, a periodic drift seen late within an eighth of its period is recognised with
its true period, and its co-drift share equals the pairwise count."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from invalidation_contracts.client.learner import Learner, co_drift, overlaps
from invalidation_contracts.client.state import OriginState


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50)), min_size=1, max_size=30))
def test_the_learned_lifetime_is_the_mean_of_the_observed_lifetimes(steps):
    mind, now, observed = Learner(OriginState()), 0.0, []
    for born_gap, seen_gap in steps:
        born = now
        now += born_gap + seen_gap
        mind.refuted("T", born, now, born)
        observed.append(now - born)
    assert mind.forecast("T").lifetime == sum(observed) / len(observed)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(8, 60),
    st.integers(0, 30),
    st.lists(st.floats(0, 1), min_size=3, max_size=8),
)
def test_a_periodic_drift_seen_late_is_recognised_with_its_true_period(period, start, lags):
    mind, good = Learner(OriginState()), float(start)
    for k, lag in enumerate(lags, start=1):
        change = start + k * period
        seen = change + lag * period / 8
        mind.refuted("T", good, seen, good)
        good = seen
    found = mind.forecast("T").period
    assert found is not None and found[0] <= period <= found[1]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 40), st.integers(1, 5)), min_size=1, max_size=6),
    st.lists(st.tuples(st.integers(0, 40), st.integers(1, 5)), min_size=1, max_size=6),
)
def test_the_co_drift_share_is_the_pairwise_overlap_count(a, b):
    xs = [(float(lo), float(lo + w)) for lo, w in a]
    ys = [(float(lo), float(lo + w)) for lo, w in b]
    rare, common = (xs, ys) if len(xs) <= len(ys) else (ys, xs)
    brute = 0
    for x in rare:
        for y in common:
            if x[0] < y[1] and y[0] < x[1]:
                brute += 1
                break
    assert co_drift(xs, ys) == brute / len(rare)
    assert all(overlaps(x, x) for x in xs)
