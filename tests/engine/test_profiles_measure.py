"""Profiles measured while another process takes the cores are measured again."""

from __future__ import annotations

from engine.profiles import measure


class Busy:
    """A fake device: batch b takes 10 + 5 b ms, plus `extra` ms while busy."""

    def __init__(self, busy_calls: set[int]) -> None:
        self.t = 0.0
        self.calls = 0
        self.busy_calls = busy_calls

    def run(self, b: int) -> None:
        self.calls += 1
        self.t += (10 + 5 * b) / 1000.0 + (0.5 if self.calls in self.busy_calls else 0.0)

    def timer(self) -> float:
        return self.t


def test_a_spike_at_one_size_is_measured_again_not_propagated():
    dev = Busy(busy_calls=set(range(30, 40)))  # busy through batch 4's first timing
    p = measure(dev.run, (1, 2, 4, 8), "h", "cpu", timer=dev.timer)
    assert [round(x) for x in p.mean_ms] == [15, 20, 30, 50]


def test_a_busy_start_is_measured_again():
    dev = Busy(busy_calls=set(range(1, 12)))  # busy while batch 1 was timed
    p = measure(dev.run, (1, 2, 4), "h", "cpu", timer=dev.timer)
    assert [round(x) for x in p.mean_ms] == [15, 20, 30]


def test_a_quiet_device_is_measured_once():
    dev = Busy(busy_calls=set())
    measure(dev.run, (1, 2, 4), "h", "cpu", timer=dev.timer)
    assert dev.calls == 3 * (2 + 7) + 7  # warm-up and repeats per size, and batch 1 again at the end
