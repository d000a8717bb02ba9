"""Profiles measured while the machine is busy or changing speed still compare sizes
fairly: sizes are timed in interleaved rounds, and the median over rounds is kept."""

from __future__ import annotations

import platform

import pytest

from engine.profiles import Profile, cpu_model, device_key, measure


class Device:
    """A fake device: batch b takes `cost(b)` ms, plus 500 ms on the calls in `busy`,
    all of it times `slowdown ** calls` (a machine getting slower as it is timed)."""

    def __init__(self, cost=lambda b: 10 + 5 * b, busy: set[int] = frozenset(), slowdown: float = 1.0) -> None:
        self.t = 0.0
        self.calls = 0
        self.cost, self.busy, self.slowdown = cost, busy, slowdown

    def run(self, b: int) -> None:
        self.calls += 1
        ms = self.cost(b) + (500.0 if self.calls in self.busy else 0.0)
        self.t += ms * self.slowdown ** self.calls / 1000.0

    def timer(self) -> float:
        return self.t


def test_a_spell_at_one_size_is_dropped_not_kept():
    dev = Device(busy=set(range(30, 37)))  # busy through a run of sizes in two rounds
    p = measure(dev.run, (1, 2, 4, 8), "h", "cpu", timer=dev.timer)
    assert [round(x) for x in p.mean_ms] == [15, 20, 30, 50]


def test_a_busy_start_is_dropped():
    dev = Device(busy=set(range(1, 12)))  # busy while warming up and through the first round
    p = measure(dev.run, (1, 2, 4), "h", "cpu", timer=dev.timer)
    assert [round(x) for x in p.mean_ms] == [15, 20, 30]


def test_each_size_runs_warmup_and_repeats_once_a_round():
    dev = Device()
    measure(dev.run, (1, 2, 4), "h", "cpu", timer=dev.timer)
    assert dev.calls == 3 * (2 + 7)


def test_a_machine_slowing_down_keeps_the_sizes_in_proportion():
    # items cost least in batches of 4 (a CPU's caches); the machine slows by 40% while
    # it is timed. Timed one size after the other, batch 16 would be charged most of
    # the slowdown and batch 1 none of it.
    def cost(b: int) -> float:
        return {1: 10.0, 2: 18.0, 4: 32.0, 8: 72.0, 16: 160.0}[b]

    dev = Device(cost=cost, slowdown=1.4 ** (1 / 45))
    p = measure(dev.run, (1, 2, 4, 8, 16), "h", "cpu", timer=dev.timer)
    per_item = [m / b for b, m in zip(p.batch_sizes, p.mean_ms)]
    truth = [cost(b) / b for b in p.batch_sizes]
    ratios = [x / t for x, t in zip(per_item, truth)]
    assert max(ratios) / min(ratios) < 1.05
    assert p.efficient_batch == 4


def test_the_efficient_batch_is_the_largest_near_the_best_rate():
    def profile(per_item: list[float]) -> Profile:
        sizes = (1, 2, 4, 8, 16)
        return Profile("h", "k", sizes, tuple(c * b for c, b in zip(per_item, sizes)), (0.0,) * 5)

    assert profile([9.0, 7.0, 6.0, 6.6, 9.5]).efficient_batch == 4  # a CPU: past its caches items cost more
    assert profile([9.0, 7.0, 6.0, 6.1, 9.5]).efficient_batch == 8  # within 3% of the best: the larger
    assert profile([4.0, 2.0, 1.0, 0.6, 0.5]).efficient_batch == 16  # a GPU: more items/s all the way
    assert Profile.linear(2.0, 10.0, 8).efficient_batch == 8



@pytest.mark.slow
def test_a_cpu_profile_is_keyed_by_the_cpu_model_not_only_the_architecture():
    """A profile stored on one CPU must not plan for another of the same architecture."""
    xeon = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\nflags\t: fpu\n"
    epyc = "processor\t: 0\nmodel name\t: AMD EPYC\n"
    assert "Xeon" in cpu_model(xeon) and "EPYC" in cpu_model(epyc) and cpu_model(xeon) != cpu_model(epyc)
    assert cpu_model("") == (platform.processor() or platform.machine())  # no /proc/cpuinfo
    assert cpu_model().replace(" ", "_").replace("/", "_") in device_key("cpu", 1)


def test_a_profile_keeps_what_others_took_of_the_machine_while_it_was_measured(monkeypatch):
    """Whoever plans with it can say it was measured on a busy machine; the store keeps it."""

    class Busy:
        cores = None

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.cores = 1.234

    monkeypatch.setattr("engine.profiles.OthersLoad", Busy)
    dev = Device()
    p = measure(dev.run, (1, 2), "h", "cpu", timer=dev.timer)
    assert p.others_cores == 1.234 and p.scaled(2.0).others_cores == 1.234
    assert Profile.from_dict(p.to_dict()).others_cores == 1.23  # stored to a hundredth of a core
    older = {k: v for k, v in p.to_dict().items() if k != "others_cores"}  # stored before it was kept
    assert Profile.from_dict(older).others_cores is None
