"""The benchmark's own machinery: arrivals, goodput search, attainment accounting."""

import numpy as np
import pytest

from bench.workload import TrialResult, bursty_arrivals, poisson_arrivals, search_goodput


def test_poisson_rate_and_span():
    t = poisson_arrivals(200.0, 10.0, np.random.default_rng(1))
    assert t.min() >= 0 and t.max() < 10_000
    assert len(t) == pytest.approx(2000, rel=0.1)
    assert np.all(np.diff(t) > 0)


def test_bursty_has_the_same_mean_and_more_variance():
    rng = np.random.default_rng(2)
    smooth, bursty = poisson_arrivals(100.0, 20.0, rng), bursty_arrivals(100.0, 20.0, rng)
    assert len(bursty) == pytest.approx(len(smooth), rel=0.1)
    per_second = lambda t: np.histogram(t, bins=20, range=(0, 20_000))[0]
    assert per_second(bursty).std() > 2 * per_second(smooth).std()


def test_goodput_search_finds_the_knee():
    capacity = 137.0
    found = search_goodput(lambda rate: 1.0 if rate <= capacity else 0.9, hi=200.0, steps=8)
    assert capacity - 200.0 / 2**8 <= found <= capacity


def test_goodput_is_zero_when_nothing_meets_the_target():
    assert search_goodput(lambda rate: 0.5, hi=100.0, steps=4) == 0.0


def test_a_policy_far_below_the_top_rate_still_gets_a_figure():
    # the old search spent its four steps at 50, 25, 12.5 and 6.25 and reported 0 for a
    # policy that serves 4 a second; halving first finds a rate it meets, then bisects
    capacity = 4.0
    tried = []

    def attainment(rate: float) -> float:
        tried.append(rate)
        return 1.0 if rate <= capacity else 0.5

    found = search_goodput(attainment, hi=100.0, steps=4, retries=0)
    assert 3.125 <= found <= capacity
    assert len(tried) == 5 + 3  # five halvings to 3.125, then three bisection steps


def test_attainment_counts_drops_as_misses_and_admitted_excludes_them():
    r = TrialResult(arrived={"a": 10}, within={"a": 7}, outcomes={"a": {"ok": 7, "late": 1, "deadline": 2}})
    assert r.attainment("a") == 0.7
    assert r.admitted_attainment("a") == pytest.approx(7 / 8)
    assert r.dropped("a") == 2


def test_a_failed_rate_is_tried_again_before_the_search_gives_it_up():
    calls = []

    def flaky(rate: float) -> float:
        calls.append(rate)
        return 0.9 if calls.count(rate) == 1 else 1.0  # every rate fails its first trial only

    assert search_goodput(flaky, hi=100.0, steps=3, retries=1) == 87.5
    assert search_goodput(lambda r: 0.9, hi=100.0, steps=3, retries=0) == 0.0
