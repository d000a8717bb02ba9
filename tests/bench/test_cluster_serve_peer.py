"""The Ray Serve peer's request path, with stand-in deployment handles (its deployments
run on a real cluster only in `vigil bench cluster`)."""

from __future__ import annotations

import asyncio

import pytest

from bench.cluster_ray import ClusterBenchOptions
from bench.cluster_serve_peer import ServeRouter


class Handle:
    """Answers as a deployment handle's response does: awaitable, or raising."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.calls = 0
        self.in_flight = self.most_in_flight = 0

    def remote(self, _payload):
        self.calls += 1

        async def answer() -> str:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            await asyncio.sleep(0.05)
            self.in_flight -= 1
            if self.fail:
                raise RuntimeError("replica died")
            return "ok"

        return answer()


def test_each_request_is_sent_on_its_own_and_resolves_with_its_outcome():
    good, bad = Handle(), Handle(fail=True)
    router = ServeRouter({"a": good, "b": bad})
    try:
        futures = router.submit("a", [(i, 500.0) for i in range(5)]) + router.submit("b", [(9, 500.0)])
        outcomes = [f.result(timeout=10) for f in futures]
    finally:
        router.close()
    assert outcomes == [("ok",)] * 5 + [("error",)]
    assert good.calls == 5 and bad.calls == 1
    assert good.most_in_flight == 5  # awaited side by side, not one after another


def test_the_peer_stretch_is_bounded():
    with pytest.raises(ValueError, match="serve_time_scale"):
        ClusterBenchOptions(serve_time_scale=0.5)
