"""`vigil run` end to end: real decoding, the trained detector, outputs, and bad inputs."""

import json
import subprocess
import sys
from collections import defaultdict

import av
import numpy as np
import pytest

from apps.spec import load_spec
from runtime.offline import RunError, RunOptions, run_offline
from sample_videos.render import RenderConfig, write_clip
from support.clips import BUNDLED, load_truth
from support.processes import run_command
from vigil.tracking_eval import TRACKED_APPS, stays_followed, stays_within

# app -> (line, the ground-truth classes it counts)
COUNTED = [("people-counter-scenedet", "midblock", ["person"]), ("people-counter-scenedet", "crosswalk", ["person"]),
           ("vehicle-counter-scenedet", "midblock", ["car", "bike"])]


def read_events(out) -> list[dict]:
    return [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]


def count_errors(summary: dict, truth: dict, tolerance: float) -> list[str]:
    errors = []
    for app, line, classes in COUNTED:
        for direction in ("in", "out"):
            want = sum(truth["lines"][line]["by_class"][c][direction] for c in classes)
            got = summary["apps"][app]["lines"][line][direction]
            if abs(got - want) > max(1, tolerance * want):
                errors.append(f"{app}/{line}/{direction}: got {got}, truth {want}")
    return errors


def dwell_errors(out, truth: dict, tolerance: float) -> list[str]:
    """Each app's total time in each of its zones, per class (the track_end events'
    `dwell_ms`), against the truth's stays."""
    want: dict = defaultdict(float)
    for stay in truth["stays"]:
        want[(stay["zone"], stay["class"])] += stay["dwell_ms"]
    got: dict = defaultdict(float)
    for e in read_events(out):
        if e["type"] == "track_end":
            for zone, ms in (e.get("dwell_ms") or {}).items():
                got[(e["app"], zone, e["class"])] += ms
    errors = []
    for name in ("people-counter-scenedet", "vehicle-counter-scenedet"):
        spec = load_spec(name)
        for zone in spec.zones:
            for cls in spec.classes:
                w, g = want[(zone, cls)], got[(name, zone, cls)]
                if abs(g - w) > max(1000.0, tolerance * w):
                    errors.append(f"{name}/{zone}/{cls}: {g / 1000:.1f} s, truth {w / 1000:.1f} s")
    return errors


LOITER_S = 8.0  # the bundled clips have stays on both sides of it: people wait at the kerb


def loiter_errors(out, truth: dict, margin_ms: float = 500.0) -> tuple[float, list, list]:
    """people-counter-scenedet's zone_dwell events against the truth's stays: the share of the
    stays longer than LOITER_S (by more than `margin_ms`, the dwell tolerance) that got
    one, in their zone while they were in it; the stays that got none; and the events
    that match no stay as long (a stay within `margin_ms` of LOITER_S may go either way)."""
    loiter = LOITER_S * 1000.0
    spec = load_spec("people-counter-scenedet")
    dwell = [e for e in read_events(out) if e["type"] == "zone_dwell" and e["app"] == spec.name]
    stays = [s for s in truth["stays"] if s["zone"] in spec.zones and s["class"] in spec.classes]
    used: set[int] = set()
    missed, long_stays = [], 0
    for stay in sorted(stays, key=lambda s: -s["dwell_ms"]):
        if stay["dwell_ms"] < loiter - margin_ms:
            continue
        during = [i for i, e in enumerate(dwell)
                  if i not in used and (e["zone"], e["class"]) == (stay["zone"], stay["class"])
                  and stay["enter_ms"] + loiter - margin_ms <= e["t_ms"] <= stay["exit_ms"] + margin_ms]
        best = min(during, key=lambda i: abs(dwell[i]["t_ms"] - stay["enter_ms"] - loiter), default=None)
        if best is not None:
            used.add(best)
        if stay["dwell_ms"] >= loiter + margin_ms:
            long_stays += 1
            if best is None:
                missed.append(stay)
    extra = [e for i, e in enumerate(dwell) if i not in used]
    return 1.0 - len(missed) / max(long_stays, 1), missed, extra


def run_counts(clip, out):
    specs = [load_spec("people-counter-scenedet").model_copy(update={"loiter_s": LOITER_S}), load_spec("vehicle-counter-scenedet")]
    return run_offline(str(clip), specs, RunOptions(out, video=False))


@pytest.mark.slow
@pytest.mark.parametrize("clip", BUNDLED, ids=[c.stem for c in BUNDLED])
def test_line_counts_match_truth_on_bundled_clips(clip, tmp_path):
    summary = run_counts(clip, tmp_path)
    assert summary["error"] is None
    assert count_errors(summary, load_truth(clip), 0.05) == []
    # 0.955..1.046 of the truth where it is over a second, when measured (0.987..1.033
    # with a colour gate of 60 and weight 1; 0.958..1.027 keeping a hidden track 1.5 s)
    assert dwell_errors(tmp_path, load_truth(clip), 0.12) == []
    # 1.0 (street_b), 0.947 (street_c) and 1.0 (street_a) when measured; by person,
    # 1.0, 0.907 and 1.0 (0.979 for street_b with a colour gate of 60 and weight 1; 0.893
    # for street_c ending a track hidden at the stream's end when last seen; 0.957 for
    # street_b keeping a hidden track 1.5 s; 0.964 for
    # street_a before boxes at the border stopped teaching colour; 0.936, 0.84 and 0.964
    # with zone_inertia 1): the misses are two people side by side seen as one, a crowd
    # at the kerb whose tracks break, and stays a track switch cut in two
    truth, events, specs = load_truth(clip), read_events(tmp_path), [load_spec(n) for n in TRACKED_APPS]
    assert stays_within(events, truth, specs) >= 0.9
    assert stays_followed(events, truth, specs) >= 0.85
    # every long stay got its zone_dwell on each clip, with one event matching none on
    # street_c, when measured (0.94 on street_b keeping a hidden track 1.5 s, where a
    # track took over another person's)
    found, missed, extra = loiter_errors(tmp_path, load_truth(clip))
    assert found >= 0.85 and len(extra) <= 1, (missed, extra)


@pytest.mark.slow
def test_colour_keeps_people_in_a_crowd_on_their_own_tracks(tmp_path):
    """people-counter-scenedet's tracker matches by colour too (tracker.appearance): on the
    crowded clip, more stays are followed by the right person's track than by place
    alone (0.907 against 0.72 when measured, both modulating IoU by height; 0.80 against
    0.72 before the rules for covered middles, the border and hidden tracks)."""
    clip = next(c for c in BUNDLED if c.stem == "street_c")
    spec = load_spec("people-counter-scenedet")
    assert spec.tracker.appearance is not None
    followed = {}
    for name, tracker in (("colour", spec.tracker), ("place", spec.tracker.model_copy(update={"appearance": None}))):
        specs = [spec.model_copy(update={"tracker": tracker}), load_spec("vehicle-counter-scenedet")]
        run_offline(str(clip), specs, RunOptions(tmp_path / name, video=False))
        followed[name] = stays_followed(read_events(tmp_path / name), load_truth(clip), specs)
    assert followed["colour"] >= followed["place"] + 0.05, followed


@pytest.mark.slow
@pytest.mark.parametrize("seed", [4242, 5151])
def test_line_counts_match_truth_on_other_seeds(seed, tmp_path):
    clip = tmp_path / f"s{seed}.mp4"
    truth = write_clip(RenderConfig(seed=seed, duration_s=20.0), clip)
    summary = run_counts(clip, tmp_path / "out")
    assert count_errors(summary, truth, 0.05) == []
    # 0.99..1.033 of the truth where it is over a second, when measured
    assert dwell_errors(tmp_path / "out", truth, 0.12) == []


@pytest.mark.slow
def test_outputs_are_written_and_consistent(short_clip, tmp_path):
    clip, truth = short_clip
    specs = [load_spec(n) for n in ("people-counter-scenedet", "vehicle-counter-scenedet", "motion")]
    summary = run_offline(str(clip), specs, RunOptions(tmp_path, video=True))
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk == summary
    assert summary["frames_decoded"] == truth["num_frames"] and summary["wall_s"] > 0
    for name in ("people-counter-scenedet", "vehicle-counter-scenedet", "motion"):
        app = summary["apps"][name]
        assert {"tracks", "lines", "latency_ms", "slo_attainment"} <= set(app)
        assert 0 <= app["slo_attainment"] <= 1 and app["latency_ms"]["p50"] <= app["latency_ms"]["p99"]
    assert summary["apps"]["motion"]["frames"] == 10  # 5 fps of a 15 fps, 2 s clip
    events = read_events(tmp_path)
    assert events, "a busy street produces events"
    for e in events:
        assert {"type", "app", "t_ms", "track_id", "class"} <= set(e)
        assert e["type"] in ("track_start", "track_end", "line_cross", "zone_enter", "zone_exit")
    starts = [e for e in events if e["type"] == "track_start"]
    ends = [e for e in events if e["type"] == "track_end"]
    assert len(starts) == len(ends) == sum(a["tracks"] for a in summary["apps"].values())
    with av.open(str(tmp_path / "annotated.mp4")) as video:
        assert sum(1 for _ in video.decode(video=0)) == truth["num_frames"]


@pytest.mark.slow
def test_clips_hold_each_events_frame(tmp_path):
    """`--clips`: each event names a clip of the file around it, and the event's own
    frame is in it (remuxed: the very pixels the file decodes to)."""
    clip = BUNDLED[0]
    run_offline(str(clip), [load_spec("people-counter-scenedet")], RunOptions(tmp_path, video=False, clips=True))
    with av.open(str(clip)) as c:
        source = {round(f.time * 1000.0, 1): f.to_ndarray(format="rgb24") for f in c.decode(video=0)}
    events = read_events(tmp_path)
    assert events and all("clip" in e for e in events)
    assert len({e["clip"] for e in events}) < len(events)  # shared where the windows are
    for e in [e for e in events if e["type"] == "line_cross"][:4]:
        with av.open(str(tmp_path / e["clip"])) as c:
            images = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
        assert len(images) >= 5 * 15  # at least the 5 s before or after the event, whichever the file has
        assert any(np.array_equal(source[round(e["t_ms"], 1)], img) for img in images)


def test_clips_need_a_file(tmp_path):
    with pytest.raises(RunError, match="--clips cuts"):
        run_offline("synthetic://street", [load_spec("people-counter-scenedet")], RunOptions(tmp_path, clips=True))


def vigil(*args: str) -> subprocess.CompletedProcess:
    return run_command([sys.executable, "-m", "cli", *args], 300)


@pytest.mark.slow
def test_cli_missing_file_is_one_line(tmp_path):
    r = vigil("run", str(tmp_path / "nope.mp4"), "--out", str(tmp_path / "o"))
    assert r.returncode == 1
    assert r.stderr.strip() == f"error: {tmp_path / 'nope.mp4'}: no such file"


@pytest.mark.slow
def test_cli_not_a_video_is_one_line(tmp_path):
    bogus = tmp_path / "bogus.mp4"
    bogus.write_text("hello")
    r = vigil("run", str(bogus), "--out", str(tmp_path / "o"))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "not a video" in r.stderr and str(bogus) in r.stderr


@pytest.mark.slow
def test_cli_truncated_file_keeps_what_was_decoded(short_clip, tmp_path):
    clip, truth = short_clip
    cut = tmp_path / "cut.mp4"
    data = clip.read_bytes()
    cut.write_bytes(data[: len(data) * 3 // 4])
    out = tmp_path / "o"
    r = vigil("run", str(cut), "--out", str(out), "--no-video", "--app", "motion")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert str(cut) in r.stderr and "truncated" in r.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert 0 < summary["frames_decoded"] < truth["num_frames"] and "truncated" in summary["error"]
    assert summary["apps"]["motion"]["frames"] > 0  # the frames before the damage were analysed


@pytest.mark.slow
def test_cli_bad_app_spec_names_the_field(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text("name: bad\ndetector: motion\nslo_ms: -1\n")
    r = vigil("run", "synthetic://street?duration=1", "--app", str(spec), "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "slo_ms" in r.stderr and "-1" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_cli_help_lists_commands():
    r = vigil("--help")
    assert r.returncode == 0 and "run" in r.stdout and "bench" in r.stdout
    r = vigil("run", "--help")
    assert "--max-frames" in r.stdout and "--no-video" in r.stdout and "--device" in r.stdout
