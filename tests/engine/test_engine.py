"""The engine over real (tiny) torch models: sharing, hot swaps, drops, bad files."""

import json
import math
import threading
import time
from collections import Counter
from concurrent.futures import wait

import numpy as np
import pytest
import torch

from engine.engine import Engine
from engine.requests import Dropped, Request
from factories import make_profile
from models.repository import ModelRepository, RepositoryError
from repo import tiny_state, write_model

FRAME = np.zeros((32, 32, 3), np.uint8)


def request(model="m", app="app", key=None, version=None, slo_ms=10_000.0, labels=None, capture_ms=None, engine=None):
    return Request(app, model, FRAME, engine.clock() if capture_ms is None else capture_ms, slo_ms, version,
                   labels=labels, input_key=key)


def count_calls(engine: Engine) -> Counter:
    """Items run per fragment session (model/fragment label -> count), counted where the
    engine runs a fragment (a module's own hooks would also see the tracing)."""
    calls: Counter = Counter()
    for info in engine.manager.sessions.values():
        def counted(batch, run=info.fragment.run, label=info.label):
            calls.update({label: len(batch)})
            return run(batch)

        info.fragment.run = counted
    return calls


@pytest.fixture
def engine_factory(tmp_path):
    made = []

    def make(**kw):
        e = Engine(ModelRepository(tmp_path), "cpu", **kw)
        made.append(e)
        return e

    yield make
    for e in made:
        e.close()


def test_request_round_trip_and_metrics(tmp_path, engine_factory):
    write_model(tmp_path, "m", 1, {"split": []})
    engine = engine_factory()
    assert engine.load("m") == [1]
    result = engine.submit(request(engine=engine)).result(timeout=10)
    assert result.version == 1 and result.outputs["model"].shape == (2,)
    assert result.within_slo
    stats = engine.metrics.app_summary("app")
    assert stats["arrived"] == stats["completed"] == 1 and stats["slo_attainment"] == 1.0
    from prometheus_client import generate_latest
    text = generate_latest(engine.metrics.registry).decode()
    assert 'vigil_requests_arrived_total{app="app",model="m",version="1"} 1.0' in text
    assert "vigil_batch_size_bucket" in text


def test_shared_backbone_runs_once_per_input_across_models(tmp_path, engine_factory):
    # two models whose backbones have the same weights but whose heads differ
    write_model(tmp_path, "left", 1, {"split": ["backbone", {"name": "a", "after": "backbone"}]},
                state=tiny_state(backbone_seed=0, head_seed=1))
    write_model(tmp_path, "right", 1, {"split": ["backbone", {"name": "a", "after": "backbone"}]},
                state=tiny_state(backbone_seed=0, head_seed=2))
    engine = engine_factory()
    engine.load("left")
    engine.load("right")
    labels = {i.label for i in engine.manager.sessions.values()}
    assert len(engine.manager.sessions) == 3, labels  # one backbone, two heads
    calls = count_calls(engine)
    frames = 6
    reqs = [request(m, app=m, key=("cam", f), engine=engine) for f in range(frames) for m in ("left", "right")]
    results = [f.result(timeout=10) for f in engine.submit_many(reqs)]
    assert len(results) == 2 * frames
    backbone = [k for k in calls if k.endswith("/backbone")]
    assert len(backbone) == 1 and calls[backbone[0]] == frames  # once per frame, not per model
    assert sum(v for k, v in calls.items() if k.endswith("/a")) == 2 * frames
    # different heads gave different answers on the same features
    assert not np.allclose(results[0].outputs["a"], results[1].outputs["a"])


def test_without_an_input_key_nothing_is_shared(tmp_path, engine_factory):
    write_model(tmp_path, "m", 1)
    engine = engine_factory()
    engine.load("m")
    calls = count_calls(engine)
    futures = engine.submit_many([request(engine=engine) for _ in range(4)])
    [f.result(timeout=10) for f in futures]
    assert calls["m/backbone"] == 4


def test_labels_choose_heads(tmp_path, engine_factory):
    write_model(tmp_path, "m", 1, {"labels": ["x", "y"], "heads": {"a": ["x"], "b": ["y"]}})
    engine = engine_factory()
    engine.load("m")
    only_b = engine.submit(request(labels=("y",), engine=engine)).result(timeout=10)
    assert set(only_b.outputs) == {"b"}
    both = engine.submit(request(engine=engine)).result(timeout=10)
    assert set(both.outputs) == {"a", "b"}


def test_version_and_label_addressing(tmp_path, engine_factory):
    for v in (1, 2):
        write_model(tmp_path, "m", v, state=tiny_state(head_seed=v))
    write_model(tmp_path, "m", 1, config={"version_policy": {"latest": 2}, "labels": {"stable": 1, "canary": 2}})
    engine = engine_factory()
    assert sorted(engine.load("m")) == [1, 2]
    assert engine.submit(request(engine=engine)).result(timeout=10).version == 2
    assert engine.submit(request(version="stable", engine=engine)).result(timeout=10).version == 1
    assert engine.submit(request(version=2, engine=engine)).result(timeout=10).version == 2
    with pytest.raises(Dropped, match="no label 'beta'"):
        engine.submit(request(version="beta", engine=engine)).result(timeout=10)
    engine.set_label("m", "stable", 2)
    assert engine.submit(request(version="stable", engine=engine)).result(timeout=10).version == 2


def test_hot_swap_under_load_fails_nothing(tmp_path, engine_factory):
    write_model(tmp_path, "m", 1, config={"version_policy": {"latest": 1}})
    engine = engine_factory()
    engine.load("m")
    futures, stop = [], threading.Event()

    def load_generator():
        # A closed loop (at most 16 in flight): the swaps are under load, not under an
        # overload whose queue could outgrow the deadline on a busy machine.
        while not stop.is_set():
            futures.extend(engine.submit_many([request(engine=engine) for _ in range(4)]))
            wait(futures[-16:-12], timeout=30)

    thread = threading.Thread(target=load_generator)
    thread.start()
    try:
        for v in (2, 3, 4):  # three swaps while requests stream in
            write_model(tmp_path, "m", v, state=tiny_state(head_seed=v))
            engine.reload("m")
            assert sorted(engine.manager.versions["m"]) == [v]
        mark = len(futures)
        while len(futures) < mark + 8:  # some traffic after the last swap
            stop.wait(0.01)
    finally:
        stop.set()
        thread.join()
    results = [f.result(timeout=30) for f in futures]  # raises if any failed
    served = Counter(r.version for r in results)
    assert len(results) > 20 and served[4] > 0 and len(served) >= 2
    # retired versions are freed once their requests finished
    engine.close()
    assert set(engine.manager.versions["m"]) == {4}
    assert all(not s.startswith("m/") or info.refs > 0 for s, info in
               ((i.label, i) for i in engine.manager.sessions.values()))


def test_requests_that_cannot_meet_their_deadline_are_dropped_and_counted(tmp_path, engine_factory):
    write_model(tmp_path, "m", 1)
    engine = engine_factory()
    engine.load("m")
    late = request(engine=engine, capture_ms=engine.clock() - 5000, slo_ms=100)
    with pytest.raises(Dropped) as info:
        engine.submit(late).result(timeout=10)
    assert info.value.reason == "deadline"
    assert engine.metrics.app_summary("app")["dropped"] == {"deadline": 1}


def test_unknown_model_is_dropped_not_raised(tmp_path, engine_factory):
    engine = engine_factory()
    with pytest.raises(Dropped, match="model 'ghost' is not loaded"):
        engine.submit(request("ghost", engine=engine)).result(timeout=10)


def test_bad_files_fail_their_load_and_others_keep_serving(tmp_path, engine_factory):
    write_model(tmp_path, "good", 1)
    bad = write_model(tmp_path, "bad", 1, state={"backbone.0.weight": torch.zeros(1)})
    arch = write_model(tmp_path, "arch", 1, {"adapter": "torchvision", "arch": "resnet-9000", "weights": "random",
                                             "factory": None, "split": []})
    engine = engine_factory()
    engine.load("good")
    with pytest.raises(RepositoryError) as info:
        engine.load("bad")
    assert str(bad / "model.yaml") in str(info.value) and "does not match the architecture" in str(info.value)
    with pytest.raises(RepositoryError, match="arch: unknown torchvision architecture 'resnet-9000'") as info:
        engine.load("arch")
    assert str(arch / "model.yaml") in str(info.value)
    (bad / "model.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(RepositoryError, match="weights: cannot read model.pt"):
        engine.load("bad")
    assert engine.submit(request("good", engine=engine)).result(timeout=10).version == 1


def test_a_failed_load_keeps_its_reason_until_a_load_succeeds(tmp_path, engine_factory):
    bad = write_model(tmp_path, "m", 1, state={"backbone.0.weight": torch.zeros(1)})
    engine = engine_factory()
    with pytest.raises(RepositoryError) as info:
        engine.load("m")
    assert engine.models()["m"] == {"versions": {}, "labels": {}, "error": str(info.value)}
    with pytest.raises(RepositoryError):
        engine.reload("m")
    assert "does not match the architecture" in engine.models()["m"]["error"]
    torch.save(tiny_state(), bad / "model.pt")  # fixed on disk
    engine.load("m")
    assert engine.models()["m"]["error"] is None and list(engine.models()["m"]["versions"]) == [1]


@pytest.mark.exclusive  # a profile measured beside other workers' load is not stored (servables.py)
def test_profiles_are_stored_and_reused(tmp_path, engine_factory):
    folder = write_model(tmp_path, "m", 1)
    engine = engine_factory()
    engine.load("m")
    stored = list((folder / "profiles").glob("*.json"))
    assert len(stored) == 1
    profile = engine.profiles()["m/backbone"]
    assert profile["batch_sizes"] == [1, 2, 4, 8] and all(m > 0 for m in profile["mean_ms"])
    shown = {f["name"]: f["profile"] for f in engine.models()["m"]["versions"][1]["fragments"]}
    assert shown["backbone"]["mean_ms"] == profile["mean_ms"]  # the model's status shows what it plans with
    before = stored[0].stat().st_mtime_ns
    second = engine_factory()
    second.load("m")
    assert stored[0].stat().st_mtime_ns == before  # read, not measured again
    assert second.profiles()["m/backbone"] == profile


def test_an_image_the_model_cannot_take_fails_alone_and_releases_its_version(tmp_path, engine_factory, monkeypatch):
    """A preprocessing failure (an image far too small, say) drops that request as
    'invalid'; the requests beside it run, and the version's in-flight count goes back
    to 0, so an unloaded version is freed (the count once leaked and pinned it)."""
    write_model(tmp_path, "m", 1, {"split": []})
    engine = engine_factory()
    engine.load("m")
    model = engine.manager.versions["m"][1].model
    real = model.preprocess

    def preprocess(images):
        if images.shape[1] < 8:
            raise ValueError(f"cannot resize a {images.shape[2]}x{images.shape[1]} image")
        return real(images)

    monkeypatch.setattr(model, "preprocess", preprocess)
    tiny = Request("app", "m", np.zeros((1, 1, 3), np.uint8), engine.clock(), 10_000.0)
    futures = engine.submit_many([tiny, request(engine=engine), request(engine=engine, key=("s", 1))])
    with pytest.raises(Dropped, match="invalid: preprocess: ValueError: cannot resize a 1x1 image"):
        futures[0].result(timeout=10)
    assert all(f.result(timeout=10).version == 1 for f in futures[1:])
    assert engine.manager.versions["m"][1].in_flight == 0
    freed = []
    engine.manager.on_free = freed.append
    engine.unload("m")
    assert [s.version for s in freed] == [1]


def test_a_postprocessing_failure_fails_only_its_request(tmp_path, engine_factory, monkeypatch):
    """The requests a batch completed are postprocessed together; when that fails, each
    is postprocessed alone, so only the one whose output is bad fails (as an error),
    the others get their results, and the version's in-flight count goes back to 0."""
    write_model(tmp_path, "m", 1, {"split": []})
    engine = engine_factory()
    engine.load("m")
    model = engine.manager.versions["m"][1].model
    real = model.postprocess

    def postprocess(leaf, output, frame_size):
        if frame_size == (32, 31):
            raise ValueError("a bad output")
        return real(leaf, output, frame_size)

    def postprocess_many(leaf, outputs, frame_sizes):
        return [postprocess(leaf, o, size) for o, size in zip(outputs, frame_sizes)]

    monkeypatch.setattr(model, "postprocess", postprocess)
    monkeypatch.setattr(model, "postprocess_many", postprocess_many)
    bad = Request("app", "m", np.zeros((31, 32, 3), np.uint8), engine.clock(), 10_000.0)
    futures = engine.submit_many([request(engine=engine), bad, request(engine=engine, key=("s", 1))])
    with pytest.raises(Dropped, match="error: postprocess: a bad output"):
        futures[1].result(timeout=10)
    assert all(f.result(timeout=10).outputs["model"].shape == (2,) for f in (futures[0], futures[2]))
    assert engine.manager.versions["m"][1].in_flight == 0


def test_labels_set_while_serving_survive_load_and_reload(tmp_path, engine_factory):
    for v in (1, 2):
        write_model(tmp_path, "m", v)
    write_model(tmp_path, "m", 1, config={"version_policy": {"latest": 2}, "labels": {"stable": 1}})
    engine = engine_factory()
    engine.load("m")
    engine.set_label("m", "stable", 2)
    engine.load("m")
    assert engine.models()["m"]["labels"] == {"stable": 2}
    engine.reload("m")
    assert engine.models()["m"]["labels"] == {"stable": 2}
    assert engine.submit(request(version="stable", engine=engine)).result(timeout=10).version == 2


def test_a_slowdown_learnt_under_load_is_unlearnt_by_probe_batches(tmp_path, monkeypatch):
    """Batches that ran 10x slower than profiled taught the engine to plan with 10x.
    Once the slow spell is over, a request whose SLO fits 1x but not 10x would be
    dropped as hopeless, so nothing would ever run to unlearn the 10x. The idle
    device runs it as a probe instead, once per SLO; a few probes are the new level."""
    from engine.observed import SHIFT_RUN, Slowdown

    write_model(tmp_path, "m", 1, {"split": []})
    with Engine(ModelRepository(tmp_path), "cpu") as engine:
        engine.load("m")
        session, info = next(iter(engine.manager.sessions.items()))
        run = info.fragment.run
        monkeypatch.setattr(info.fragment, "run", lambda x: (time.sleep(0.02), run(x))[1])  # 20 ms a batch
        monkeypatch.setattr(info, "profile", make_profile(per_item_ms=0.0, fixed_ms=20.0, fragment_hash=session))
        engine.observed.slowdown[session] = slowdown = Slowdown(factor=10.0)  # what slow batches taught it
        slowdown.window.append(math.log(10.0))
        slo = 80.0  # too tight at 10x, easy at 1x
        for _ in range(SHIFT_RUN):
            assert engine.submit(request(engine=engine, slo_ms=slo)).result(timeout=10).version == 1
            time.sleep(slo / 1000.0)
        assert engine.metrics.snapshot()["probe_batches"] == {"m/model": SHIFT_RUN}
        assert engine.observed.factor(session) < 3.0, slowdown  # 20 ms and what the engine adds
        assert engine.submit(request(engine=engine, slo_ms=slo)).result(timeout=10).within_slo


def test_a_profile_measured_while_others_were_busy_is_used_but_not_stored(tmp_path, engine_factory, monkeypatch):
    class Busy:
        cores = 1.0  # what engine/machine_load.py reports beside a spinning process

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

    folder = write_model(tmp_path, "m", 1)
    monkeypatch.setattr("engine.profiles.OthersLoad", Busy)
    engine = engine_factory()
    engine.load("m")
    assert engine.profiles()["m/backbone"]["batch_sizes"] == [1, 2, 4, 8]
    assert not list((folder / "profiles").glob("*.json"))  # the next start measures again
    assert engine.submit(request(engine=engine)).result(timeout=10).version == 1


def test_a_stored_profile_is_timed_against_the_device_once_a_process(tmp_path, engine_factory, monkeypatch):
    import engine.servables as servables

    checks = Counter()
    real = servables._stale

    def stale(profile, *args, **kwargs):
        checks[profile.fragment_hash] += 1
        return real(profile, *args, **kwargs)

    monkeypatch.setattr(servables, "_stale", stale)
    monkeypatch.setattr("engine.profiles.OthersLoad", Quiet)
    folder = write_model(tmp_path, "m", 1)
    engine_factory().load("m")  # measured and stored: what the device does now
    engine_factory().load("m")
    assert not checks
    path = next((folder / "profiles").glob("*.json"))
    stored = json.loads(path.read_text())
    for entry in stored.values():
        entry["mean_ms"][0] *= 1.01  # another profile, as another process might have stored
    path.write_text(json.dumps(stored))
    for _ in range(2):
        engine_factory().load("m")
    assert checks == Counter(dict.fromkeys(stored, 1))


class Quiet:
    """engine/machine_load.py's reading of a machine with nothing else on it."""
    cores = 0.0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


@pytest.mark.exclusive  # a profile measured beside other workers' load is not stored (servables.py)
def test_a_stored_profile_slow_at_its_largest_batch_is_measured_again(tmp_path, engine_factory):
    """A busy machine slows long batches most: batch 1 as measured idle, batch 8 many
    times as long. Planning on it would shed what the device could serve."""
    folder = write_model(tmp_path, "m", 1)
    engine_factory().load("m")
    path = next((folder / "profiles").glob("*.json"))
    stored = json.loads(path.read_text())
    for entry in stored.values():
        entry["mean_ms"][-1] = 100.0 * entry["mean_ms"][-1] + 50.0  # far past any jitter of a busy machine
    path.write_text(json.dumps(stored))
    second = engine_factory()
    second.load("m")
    # what it plans with (stored again too, unless other processes were busy meanwhile)
    planned = {p["fragment_hash"]: p for p in second.profiles().values()}
    assert planned.keys() == stored.keys()
    assert all(planned[h]["mean_ms"][-1] < stored[h]["mean_ms"][-1] / 2 for h in stored)
