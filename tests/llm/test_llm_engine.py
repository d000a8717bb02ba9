"""The LLM engine on a tiny random Llama: streaming, stop strings, sampling with seeds,
cancellation, and no KV leak after 10,000 requests."""

from __future__ import annotations

import random
import threading

import numpy as np
import pytest
from tiny import make_tiny_llama

from engine.engine import Engine, Request
from llm.checkpoint import load_model
from llm.engine import EngineConfig, LLMEngine
from llm.requests import LLMRequest
from llm.sampling import SamplingParams
from llm.tokenizer import Tokenizer
from models.repository import ModelRepository
from vigil.settings import MODELS_DIR


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_llama(tmp_path_factory.mktemp("tiny"))


def engine(tiny, **kw) -> LLMEngine:
    return LLMEngine(load_model(tiny), Tokenizer(tiny, eos_ids=(96,)),
                     EngineConfig(**{"num_blocks": 64, "block_size": 4, **kw}))


def test_streamed_pieces_add_up_to_the_result(tiny):
    e = engine(tiny).start()
    h = e.add_request("t5 t6 t7", SamplingParams(max_tokens=12, ignore_eos=True))
    pieces = list(h.stream(timeout_s=30))
    assert pieces[-1].finish_reason == "length"
    text = "".join(p.text for p in pieces)
    assert text == e.tokenizer.decode(h.request.output_ids) and len(h.request.output_ids) == 12
    e.close()


def test_unstreamed_result_comes_in_one_piece_with_the_same_text(tiny):
    e = engine(tiny).start()
    streamed = e.add_request("t5 t6 t7", SamplingParams(max_tokens=12, ignore_eos=True)).result(30)
    h = e.add_request("t5 t6 t7", SamplingParams(max_tokens=12, ignore_eos=True), stream=False)
    pieces = list(h.stream(timeout_s=30))
    assert len(pieces) == 1 and pieces[0].finish_reason == "length"
    assert pieces[0].text == streamed.text and h.request.output_ids == e.tokenizer.encode(streamed.text)
    e.close()


@pytest.mark.parametrize("stream", [True, False])
def test_stop_string_cuts_the_text(tiny, stream):
    e = engine(tiny).start()
    full = e.add_request("t5 t6 t7", SamplingParams(max_tokens=12, ignore_eos=True)).result(30).text
    words = full.split()
    stop = words[3]
    cut = e.add_request("t5 t6 t7", SamplingParams(max_tokens=12, ignore_eos=True, stop=(stop,)),
                        stream=stream).result(30)
    assert cut.finish_reason == "stop" and cut.text == full[:full.index(stop)]
    two_words = " ".join(words[2:4])  # a stop string that spans tokens
    cut = e.add_request("t5 t6 t7", SamplingParams(max_tokens=12, ignore_eos=True, stop=(two_words,)),
                        stream=stream).result(30)
    assert cut.finish_reason == "stop" and cut.text == full[:full.index(two_words)]
    e.close()


def test_seeded_sampling_is_reproducible_and_differs_from_greedy(tiny):
    e = engine(tiny).start()
    p = SamplingParams(max_tokens=16, temperature=1.5, top_p=0.9, seed=11, ignore_eos=True)
    a = e.add_request("t1 t2", p).result(30).text
    b = e.add_request("t1 t2", p).result(30).text
    greedy = e.add_request("t1 t2", SamplingParams(max_tokens=16, ignore_eos=True)).result(30).text
    assert a == b and a != greedy
    e.close()


def test_cancel_frees_blocks_and_ends_the_stream(tiny):
    e = engine(tiny)
    h = e.add_request("t3 t4", SamplingParams(max_tokens=200, ignore_eos=True))
    for _ in range(5):
        e.step()
    assert e.scheduler.kv_cache.num_free < e.scheduler.kv_cache.num_blocks
    h.cancel()
    e.step()
    assert h.result(5).finish_reason == "abort"
    assert e.scheduler.kv_cache.num_free == e.scheduler.kv_cache.num_blocks


def test_bad_requests_are_refused_with_the_field(tiny):
    e = engine(tiny)
    with pytest.raises(ValueError, match="context"):
        e.add_request("t1", SamplingParams(max_tokens=10_000))
    with pytest.raises(ValueError, match="prompt"):
        e.add_request([])
    with pytest.raises(ValueError, match="max_tokens"):
        SamplingParams(max_tokens=0)


@pytest.mark.slow
def test_no_kv_leak_after_ten_thousand_requests(tiny):
    e = engine(tiny, num_blocks=48, max_num_seqs=64, max_step_tokens=512)  # small pool: preemptions too
    rng = random.Random(0)
    handles = []
    for i in range(10_000):
        prompt = [rng.randint(0, 95) for _ in range(rng.randint(1, 6))]
        handles.append(e.add_request(prompt, SamplingParams(max_tokens=rng.randint(1, 4), ignore_eos=rng.random() < .5,
                                                            stop=("t7",) if i % 7 == 0 else ())))
        if i % 13 == 0:
            handles[-1].cancel()
        if i % 50 == 49:
            while e.has_work():
                e.step()
    while e.has_work():
        e.step()
    reasons = {h.result(5).finish_reason for h in handles}
    assert reasons <= {"length", "stop", "abort"} and "abort" in reasons
    assert e.scheduler.kv_cache.num_free == e.scheduler.kv_cache.num_blocks
    assert not e.scheduler.running and not e.scheduler.waiting


@pytest.mark.exclusive  # device shares in lane time: another test's load on the cores moves them
@pytest.mark.parametrize("lanes", [1, 2])
def test_llm_steps_keep_their_share_beside_a_saturated_vision_engine(tiny, lanes):
    """SceneDet's queue never empties (two clients keep 12 frames each outstanding): the
    LLM still finishes, taking about its `min_share` of device time: an LLM that waited
    for an empty vision queue would never run. With two lanes, its steps still get the
    device to themselves (device time counted in lane time)."""
    frame = np.zeros((360, 640, 3), np.uint8)
    stop = threading.Event()
    with Engine(ModelRepository(MODELS_DIR), "cpu", lanes=lanes) as vision:
        vision.load("scenedet")

        def keep_busy(client: int) -> None:
            outstanding: list = []
            while not stop.is_set():
                while len(outstanding) < 12:
                    outstanding.append(vision.submit(Request(f"cam{client}", "scenedet", frame, vision.clock(),
                                                             60_000.0)))
                outstanding.pop(0).result(60)

        clients = [threading.Thread(target=keep_busy, args=(c,), daemon=True) for c in range(2)]
        for c in clients:
            c.start()
        e = LLMEngine(load_model(tiny), Tokenizer(tiny),
                      EngineConfig(num_blocks=64, block_size=4, min_share=0.2), arbiter=vision.arbiter).start()
        try:
            threading.Event().wait(1.0)  # vision is saturated
            before = dict(vision.arbiter.share.report(), guest=vision.arbiter.share.guest_ms, vision=vision.arbiter.share.vision_ms)
            h = e.add_request("t1 t2", SamplingParams(max_tokens=240, ignore_eos=True))  # long enough to average
            assert h.result(120).finish_reason == "length"
            guest, seen = vision.arbiter.share.guest_ms - before["guest"], vision.arbiter.share.vision_ms - before["vision"]
            by_share = vision.arbiter.share.guest_steps_by_share - before["guest_steps_by_share"]
        finally:
            stop.set()
            e.close()
            for c in clients:
                c.join(60)
    assert by_share >= 120, by_share  # the steps ran on the share, not in slack: vision was saturated
    assert 0.12 <= guest / (guest + seen) <= 0.35, (guest, seen)


def test_a_requests_tokens_span_its_prompt_and_output():
    req = LLMRequest("r", [1, 2, 3, 4], SamplingParams(), 0, 0.0)
    req.output_ids = [5, 6, 7]
    whole = [1, 2, 3, 4, 5, 6, 7]
    assert all(req.token_ids(s, n) == whole[s:s + n] for s in range(7) for n in range(1, 8 - s))


def test_a_request_whose_sampling_fails_fails_alone(tiny, monkeypatch):
    """One request's sampling raising (NaN probabilities, say) ends that request with an
    error and not its batch: its neighbour runs to its end with exactly the tokens it
    gets alone."""
    import llm.engine as engine_module

    real = engine_module.sample

    def sample(logits, params, generator=None):
        if params.seed == 13:
            raise ValueError("sampling: the logits give no probability distribution (not finite)")
        return real(logits, params, generator)

    e = engine(tiny)
    alone = e.add_request("t5 t6 t7", SamplingParams(max_tokens=40, temperature=0.8, seed=1, ignore_eos=True))
    while e.has_work():
        e.step()
    monkeypatch.setattr(engine_module, "sample", sample)
    bad = e.add_request("t9 t8", SamplingParams(max_tokens=40, temperature=0.8, seed=13, ignore_eos=True))
    good = e.add_request("t5 t6 t7", SamplingParams(max_tokens=40, temperature=0.8, seed=1, ignore_eos=True))
    while e.has_work():
        e.step()
    failed, done = bad.result(1), good.result(1)
    assert failed.finish_reason == "error" and "not finite" in failed.error
    assert done.finish_reason == "length" and good.request.output_ids == alone.request.output_ids
    assert e.scheduler.kv_cache.num_free == e.scheduler.kv_cache.num_blocks


def test_waiting_requests_are_bounded(tiny):
    from llm.engine import EngineFull

    e = engine(tiny, max_waiting=3)
    handles = [e.add_request("t5", SamplingParams(max_tokens=2)) for _ in range(3)]
    with pytest.raises(EngineFull, match="3 LLM requests are waiting"):
        e.add_request("t5", SamplingParams(max_tokens=2))
    e.step()  # admits the waiting ones: there is room again
    e.add_request("t5", SamplingParams(max_tokens=2))
    while e.has_work():
        e.step()
    assert all(h.result(1).finish_reason == "length" for h in handles)


@pytest.mark.parametrize("temperature", [1e-300, 1e-6])
def test_a_vanishing_temperature_is_greedy(tiny, temperature):
    e = engine(tiny)
    greedy = e.add_request("t5 t6", SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True))
    tiny_t = e.add_request("t5 t6", SamplingParams(max_tokens=10, temperature=temperature, ignore_eos=True))
    while e.has_work():
        e.step()
    assert tiny_t.result(1).finish_reason == "length"
    assert tiny_t.request.output_ids == greedy.request.output_ids


@pytest.mark.parametrize("field,value", [("temperature", float("nan")), ("temperature", float("inf")),
                                         ("temperature", -1.0), ("top_p", float("nan")), ("top_p", 0.0)])
def test_sampling_params_must_be_finite_and_in_range(field, value):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**{field: value})


def test_the_smallest_top_p_keeps_the_likeliest_token(tiny):
    e = engine(tiny)
    greedy = e.add_request("t5 t6", SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True))
    nucleus = e.add_request("t5 t6", SamplingParams(max_tokens=8, temperature=1.0, top_p=5e-324, seed=3,
                                                    ignore_eos=True))
    while e.has_work():
        e.step()
    assert nucleus.result(1).finish_reason == "length"
    assert nucleus.request.output_ids == greedy.request.output_ids


def test_async_stream_gives_the_same_pieces_as_the_blocking_one(tiny):
    import asyncio

    e = engine(tiny).start()
    try:
        expected = e.add_request("t5 t6 t7", SamplingParams(max_tokens=12, ignore_eos=True)).result(30)

        async def consume():
            h = e.add_request("t5 t6 t7", SamplingParams(max_tokens=12, ignore_eos=True))
            return [out async for out in h.astream(30)]

        pieces = asyncio.run(consume())
        assert "".join(p.text for p in pieces) == expected.text and pieces[-1].finish_reason == "length"
    finally:
        e.close()


def test_two_llms_on_one_device_take_turns_and_neither_is_left_waiting(tiny):
    """A server's LLM engines share the device as one guest: while both have work their
    steps alternate, and the one still busy after the other leaves keeps stepping."""
    with Engine(ModelRepository(MODELS_DIR), "cpu") as vision:
        order: list[str] = []
        engines = []
        for name in ("short", "long"):
            e = LLMEngine(load_model(tiny), Tokenizer(tiny), EngineConfig(num_blocks=64, block_size=4, min_share=0.2),
                          name=name, arbiter=vision.arbiter)
            step = e.step
            e.step = lambda step=step, name=name: order.append(name) or step()
            engines.append(e.start())
        try:
            handles = [e.add_request("t1 t2", SamplingParams(max_tokens=n, ignore_eos=True))
                       for e, n in zip(engines, (40, 160))]
            assert [h.result(60).finish_reason for h in handles] == ["length", "length"]
        finally:
            for e in engines:
                e.close()
    both = order[:max(i for i, name in enumerate(order) if name == "short") + 1]
    assert both.count("long") >= 0.8 * both.count("short"), order[:60]
    assert order.count("long") == 160
