"""The LLM bench's rate search and its turn-taking, against made-up p99 curves."""

from bench.llm import rate_search, take_turns


def _knee(capacity: float):
    """p99 of a system that keeps within 1 s below `capacity` req/s and breaks above."""
    return lambda rate: 0.5 if rate <= capacity else 9.0


def _run(search, p99_at):
    tried = []
    best = take_turns({"s": search}, lambda name, rate: tried.append(rate) or {"rate_per_s": rate,
                                                                             "p99_s": p99_at(rate)})["s"]
    return best, tried


def test_the_search_doubles_then_bisects_to_the_knee():
    best, tried = _run(rate_search(1.0, 1.0, 512.0, bisections=3, retries=0), _knee(11.0))
    assert tried == [1.0, 2.0, 4.0, 8.0, 16.0, 12.0, 10.0, 11.0]
    assert best["rate_per_s"] == 11.0


def test_a_start_beyond_the_bound_is_halved():
    best, tried = _run(rate_search(8.0, 1.0, 512.0, bisections=0, retries=0), _knee(3.0))
    assert tried[:3] == [8.0, 4.0, 2.0] and best["rate_per_s"] == 2.0


def test_nothing_within_the_bound_gives_none():
    best, tried = _run(rate_search(8.0, 1.0, 512.0, bisections=3, retries=0), lambda rate: 9.0)
    assert best is None and tried == [8.0, 4.0, 2.0, 1.0]


def test_the_search_stops_at_the_rate_cap():
    best, tried = _run(rate_search(1.0, 1.0, 4.0, bisections=3, retries=0), _knee(100.0))
    assert tried == [1.0, 2.0, 4.0] and best["rate_per_s"] == 4.0


def _flaky():
    seen: dict[float, int] = {}

    def p99_at(rate: float) -> float:  # every rate up to 11 breaks the bound on its first trial only
        seen[rate] = seen.get(rate, 0) + 1
        return 9.0 if rate > 11.0 else 1.2 if seen[rate] == 1 else 0.5

    return p99_at


def test_a_rate_that_breaks_the_bound_once_is_tried_again():
    best, tried = _run(rate_search(1.0, 1.0, 512.0, bisections=3, retries=1), _flaky())
    assert best["rate_per_s"] == 11.0
    assert tried[:2] == [1.0, 1.0]
    assert tried.count(16.0) == 1  # 9x the bound: the queue grew, no fluke to try again
    assert _run(rate_search(1.0, 1.0, 512.0, bisections=3, retries=0), _flaky())[0] is None


def test_searches_take_turns_a_trial_each():
    order = []
    searches = {"a": rate_search(1.0, 1.0, 512.0, 1, 0), "b": rate_search(1.0, 1.0, 512.0, 1, 0)}
    knees = {"a": _knee(2.0), "b": _knee(8.0)}
    best = take_turns(searches, lambda name, rate: order.append(name) or {"rate_per_s": rate,
                                                                        "p99_s": knees[name](rate)})
    assert order == ["a", "b"] * 4 + ["b", "b"]  # a is done after its bisection; b goes on alone
    assert best["a"]["rate_per_s"] == 2.0 and best["b"]["rate_per_s"] == 8.0
