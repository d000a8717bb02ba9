"""Profiles as serving sees them (engine/observed.py): scaled by the observed slowdown."""

import pytest

from engine.observed import FACTOR_STEP, ObservedProfiles
from engine.profiles import Profile

SIZES = (1, 2, 4, 8)


def _profile() -> Profile:
    return Profile("h", "cpu", SIZES, tuple(10.0 * b for b in SIZES), tuple(0.0 for _ in SIZES))


def test_a_slowed_session_plans_with_its_profile_scaled_and_reuses_it_while_the_factor_holds():
    now = [0.0]
    observed = ObservedProfiles(lambda: now[0])
    stored = _profile()
    assert observed.current("s", stored) is stored  # nothing observed yet
    for _ in range(200):  # long enough for the variance of the change to fade
        observed.batch_ran("s", stored, 4, 60.0)  # batches take 1.5x their profile
    first = observed.current("s", stored)
    assert first.latency_ms(4) == pytest.approx(60.0, rel=FACTOR_STEP)
    observed.batch_ran("s", stored, 4, 60.0 * (1 + FACTOR_STEP / 10))  # a move smaller than the step
    assert observed.current("s", stored) is first
    for _ in range(200):  # long enough for the variance of the change to fade
        observed.batch_ran("s", stored, 4, 80.0)
    slower = observed.current("s", stored)
    assert slower is not first and slower.latency_ms(4) == pytest.approx(80.0, rel=FACTOR_STEP)
    replaced = _profile()  # a new profile of the session (re-measured) is scaled anew
    assert observed.current("s", replaced).latency_ms(4) == pytest.approx(80.0, rel=FACTOR_STEP)
    assert observed.current("s", replaced) is not slower


def test_a_profile_measured_on_a_busy_machine_is_corrected_by_what_batches_take():
    """A stored profile 2.5x too slow (measured beside a package install) must not keep
    the planner at 2.5x forever: the factor follows batches down to 0.4."""
    observed = ObservedProfiles(lambda: 0.0)
    stored = _profile()
    for _ in range(200):
        observed.batch_ran("s", stored, 8, 32.0)  # the profile says 80
    assert observed.current("s", stored).latency_ms(8) == pytest.approx(32.0, rel=FACTOR_STEP)
