"""Device turns between vision and a guest (the LLM), as pure bookkeeping: under full
vision load the guest gets its minimum share one step at a time; it saves nothing up
while idle; its steps fit in vision's slack for free."""

from __future__ import annotations

import pytest

from engine.share import DeviceShare


def saturated(share: DeviceShare, vision_batch_ms: float, guest_step_ms: float, turns: int = 5000) -> float:
    """Vision always has a batch to run and the guest always has work: the guest's share
    of device time, with the engine loop's decision at each turn."""
    share.join(share.min_share)
    share.step_costs(guest_step_ms)
    for _ in range(turns):
        if share.due():
            share.grant(by_share=True)
            share.guest_ran(guest_step_ms)
        else:
            share.vision_ran(vision_batch_ms)
    return share.guest_ms / (share.guest_ms + share.vision_ms)


@pytest.mark.parametrize("min_share", [0.05, 0.1, 0.3])
@pytest.mark.parametrize("step_ms,batch_ms", [(3.0, 40.0), (25.0, 10.0)])
def test_under_full_vision_load_the_guest_gets_its_minimum_share(min_share, step_ms, batch_ms):
    got = saturated(DeviceShare(min_share), batch_ms, step_ms)
    assert abs(got - min_share) <= 0.02 * max(1.0, step_ms / batch_ms), got


def test_an_idle_guest_saves_nothing_up():
    share = DeviceShare(0.1)
    for _ in range(1000):
        share.vision_ran(20.0)  # no guest has work: no credit
    share.join(0.1)
    share.step_costs(5.0)
    assert not share.due()
    for _ in range(2):
        share.vision_ran(20.0)
    assert not share.due()  # 4.4 ms earned of 5
    share.vision_ran(20.0)
    assert share.due()
    share.grant(by_share=True)
    share.guest_ran(5.0)
    assert not share.due()  # one step, then it earns again: vision waits at most one step


def test_a_step_longer_than_declared_is_paid_in_full():
    share = DeviceShare(0.5, credit_ms=5.0)
    share.join(0.5)
    share.step_costs(5.0)
    share.grant(by_share=True)
    share.guest_ran(50.0)
    assert share.credit_ms == -45.0
    for _ in range(4):
        share.vision_ran(10.0)
    assert not share.due()  # 40 ms of vision repays 40 of the 45 owed


def test_slack_steps_are_free_and_only_when_they_fit():
    share = DeviceShare(0.1)
    assert not share.fits_in(None)  # no guest has work
    share.join(0.1)
    share.step_costs(8.0)
    assert share.fits_in(None) and share.fits_in(8.0) and not share.fits_in(7.9)
    share.grant(by_share=False)
    assert not share.fits_in(None)  # granted: one step at a time
    share.guest_ran(8.0)
    assert share.credit_ms == 0.0 and share.report()["guest_steps_in_slack"] == 1
    share.leave()
    assert not share.fits_in(None)


@pytest.mark.parametrize("bad", [-0.1, 0.95, float("nan")])
def test_a_share_out_of_range_is_refused(bad):
    with pytest.raises(ValueError, match="min_share"):
        DeviceShare(bad)
    with pytest.raises(ValueError, match="min_share"):
        DeviceShare().join(bad)
