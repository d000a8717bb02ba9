"""Profiles as serving sees them (engine/observed.py): scaled by the observed slowdown."""

import math

import pytest

from engine.observed import FACTOR_STEP, SHIFT_RUN, WINDOW, ObservedProfiles
from engine.profiles import Profile

SIZES = (1, 2, 4, 8)


def _profile() -> Profile:
    return Profile("h", "cpu", SIZES, tuple(10.0 * b for b in SIZES), tuple(0.0 for _ in SIZES))


def test_a_slowed_session_plans_with_its_profile_scaled_and_reuses_it_while_the_factor_holds():
    observed = ObservedProfiles()
    stored = _profile()
    assert observed.current("s", stored) is stored  # nothing observed yet
    for _ in range(WINDOW):
        observed.batch_ran("s", stored, 4, 60.0)  # batches take 1.5x their profile
    first = observed.current("s", stored)
    assert first.latency_ms(4) == pytest.approx(60.0, rel=FACTOR_STEP)
    observed.batch_ran("s", stored, 4, 60.0 * (1 + FACTOR_STEP / 10))  # a move smaller than the step
    assert observed.current("s", stored) is first
    for _ in range(WINDOW):
        observed.batch_ran("s", stored, 4, 80.0)
    slower = observed.current("s", stored)
    assert slower is not first and slower.latency_ms(4) == pytest.approx(80.0, rel=FACTOR_STEP)
    replaced = _profile()  # a new profile of the session (re-measured) is scaled anew
    assert observed.current("s", replaced).latency_ms(4) == pytest.approx(80.0, rel=FACTOR_STEP)
    assert observed.current("s", replaced) is not slower


def test_the_first_batch_sets_the_level_either_way():
    """A profile measured beside a busy neighbour (2.5x too slow) and one measured
    before a neighbour came (2.5x too fast) are both corrected by the first batch."""
    for took, factor in ((32.0, 0.4), (200.0, 2.5)):
        observed = ObservedProfiles()
        observed.batch_ran("s", _profile(), 8, took)  # the profile says 80
        assert observed.factor("s") == pytest.approx(factor)


@pytest.mark.parametrize("moved_to", [4.0, 0.25])
def test_a_level_that_moves_either_way_is_taken_after_the_same_few_batches(moved_to):
    """A neighbour arriving (4x) or leaving (0.25x) moves the level: `SHIFT_RUN`
    batches in a row outside the range seen are the new level, whichever way."""
    observed = ObservedProfiles()
    stored = _profile()
    for k in range(WINDOW):
        observed.batch_ran("s", stored, 4, 40.0 * (1 + 0.05 * (k % 3 - 1)))  # 5% jitter
    assert observed.factor("s") == pytest.approx(1.05, abs=0.01)
    factors = []
    for _ in range(SHIFT_RUN):
        observed.batch_ran("s", stored, 4, 40.0 * moved_to)
        factors.append(observed.factor("s"))
    assert factors[-1] == pytest.approx(moved_to)
    assert all(abs(math.log(f)) < 0.1 for f in factors[:-1])  # one odd batch is not a move


def test_stalls_now_and_then_are_planned_for_and_one_alone_is_not():
    observed = ObservedProfiles()
    stored = _profile()
    for _ in range(WINDOW):
        observed.batch_ran("s", stored, 4, 40.0)
    observed.batch_ran("s", stored, 4, 400.0)  # one stall: 10x
    observed.batch_ran("s", stored, 4, 40.0)
    assert observed.factor("s") == pytest.approx(1.0)
    for k in range(WINDOW):  # a stall in every five batches: a fifth of them would miss
        observed.batch_ran("s", stored, 4, 80.0 if k % 5 == 0 else 40.0)
    assert observed.factor("s") == pytest.approx(2.0)
