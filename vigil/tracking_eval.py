"""`vigil eval tracking`: how well apps' tracks follow the people and vehicles of
rendered clips, with their detector and with the truth's own boxes, side by side.

A stay is one object's time in one zone, from the renderer's truth. It is *followed*
when some `zone_exit` of that zone has its track on that object where it entered (the
`zone_enter`'s box, on the frame that settled it) and where it left (the `zone_exit`'s),
at IoU >= 0.5 with the truth's box on those frames (the `track_end`'s, for an event said
when its track ended), and a dwell within 0.5 s of the truth's. A track that slid onto
a neighbour, or a stay that two tracks cut in two, is not; `stay_outcomes` says why
each stay was not followed. *Within* is looser: some `zone_exit` of that zone and class
overlaps the stay in time by half and has its dwell within 0.5 s.

The second run hands the apps the truth's boxes of every object it counts as seen
(visible >= 0.3) instead of the detector's, on the same frames. What is missed there
is the tracker's doing; the difference from the first run is what the detector's
misses cost.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

import sample_videos
from apps.app import App
from apps.spec import AppSpec
from apps.stationary import iou
from core.detections import Detections
from runtime.offline import RunError, RunOptions, run_offline
from sample_videos.range import truth_path
from sample_videos.render import RenderConfig, write_clip
from streams import FrameSampler, SourceError, cut_blocks, open_source
from streams.options import OFFLINE

WITHIN_MS = 500.0  # how far a stay's measured dwell may be from the truth's
ON_PERSON_IOU = 0.5  # a track's box this close to an object's is on that object
SEEN = 0.3  # the truth's "seen": its stays count frames at least this visible
HELD_OUT_SEED0 = 9000  # renders no detector trained on (training uses 1000 on, the bundled clips 11, 22, 33)
HELD_OUT_S = 20.0
TRACKED_APPS = ("people-counter-scenedet", "vehicle-counter-scenedet")  # the range's built-in apps, with zones


@dataclass(frozen=True)
class Clip:
    name: str
    video: Path
    truth: dict


def bundled_clips() -> list[Clip]:
    folder = Path(sample_videos.__file__).parent
    return [Clip(p.stem, p, json.loads(truth_path(p).read_text()))
            for p in sorted(folder.glob("*.mp4"))]


def render_clips(count: int, folder: Path, log: Callable[[str], None] = print) -> list[Clip]:
    clips = []
    for seed in range(HELD_OUT_SEED0, HELD_OUT_SEED0 + count):
        log(f"rendering seed {seed} ({HELD_OUT_S:.0f} s) ...")
        video = folder / f"seed{seed}.mp4"
        clips.append(Clip(video.stem, video, write_clip(RenderConfig(seed=seed, duration_s=HELD_OUT_S), video)))
    return clips


def counted_stays(truth: dict, specs: list[AppSpec]) -> list[tuple[str, dict]]:
    """The truth's stays in the apps' zones, of their classes, with the app that counts
    each (the first that does)."""
    owned = []
    for stay in truth["stays"]:
        owner = next((s.name for s in specs if stay["zone"] in s.zones and s.classes and stay["class"] in s.classes),
                     None)
        if owner is not None:
            owned.append((owner, stay))
    return owned


def stays_within(events: list[dict], truth: dict, specs: list[AppSpec], within_ms: float = WITHIN_MS) -> float:
    """The share of the counted stays that a zone_exit matches by time (same zone and
    class, overlapping by half their union) with a dwell within `within_ms`."""
    exits = [e for e in events if e["type"] == "zone_exit"]
    stays = counted_stays(truth, specs)
    hits = 0
    for owner, stay in stays:
        best, best_overlap = None, 0.5
        for e in exits:
            if (e["app"], e["zone"], e["class"]) != (owner, stay["zone"], stay["class"]):
                continue
            start, end = e["left_ms"] - e["dwell_ms"], e["left_ms"]
            union = max(end, stay["exit_ms"]) - min(start, stay["enter_ms"])
            overlap = max(0.0, min(end, stay["exit_ms"]) - max(start, stay["enter_ms"])) / max(union, 1e-9)
            if overlap >= best_overlap:
                best, best_overlap = e, overlap
        hits += best is not None and abs(best["dwell_ms"] - stay["dwell_ms"]) <= within_ms
    return hits / max(len(stays), 1)


OUTCOMES = ("followed", "split", "dwell_off", "slid", "missed")  # in the order `stay_outcomes` tries them


def stay_outcomes(events: list[dict], truth: dict, specs: list[AppSpec], within_ms: float = WITHIN_MS) -> list[dict]:
    """What became of each counted stay, in the truth's order. A `zone_exit` of the
    stay's zone whose time there overlaps the stay is *on* it at an end when its box
    there (see the module's docstring) fits the object's at IoU >= 0.5; the overlap
    keeps an object's other stay in the same zone out. The outcome is the first that
    holds:

    - `followed`: some zone_exit is on it at both ends with a dwell within `within_ms`;
    - `split`: two or more zone_exits are on it (at either end): a track switch, or a
      step out of the zone, cut it in two;
    - `dwell_off`: one zone_exit is on it at both ends, its dwell further out;
    - `slid`: one zone_exit is on it at one end only: its track slid onto or off a
      neighbour, or its box there fits the object loosely;
    - `missed`: no zone_exit is on it.

    Each is the stay (`app`, `zone`, `object`: the truth's track id, `enter_ms`,
    `exit_ms`, `dwell_ms`) with its `outcome`, and the `track_id` and `dwell_error_ms`
    (measured minus true) of the zone_exit nearest to following it (on it at both
    ends, else at one; of those the one with the least error), or None."""
    boxes = {round(f["t_ms"]): {o["track_id"]: o["xyxy"] for o in f["objects"]} for f in truth["frames"]}
    ends = {(e["app"], e["track_id"]): e.get("box") for e in events if e["type"] == "track_end"}
    enters = {(e["app"], e["track_id"], e["zone"], round(e["entered_ms"])):
              (e["t_ms"], e.get("box") or ends.get((e["app"], e["track_id"])))
              for e in events if e["type"] == "zone_enter"}
    exits = []
    for e in events:
        if e["type"] == "zone_exit":
            # boxes where the stay was counted: on the frames its enter and exit were said
            seen_ms, entered = enters.get((e["app"], e["track_id"], e["zone"], round(e["left_ms"] - e["dwell_ms"])),
                                          (None, None))
            exits.append((e, seen_ms, entered, e.get("box") or ends.get((e["app"], e["track_id"]))))
    verdicts = []
    for owner, stay in counted_stays(truth, specs):

        def on_object(t_ms: float | None, box: list[float] | None) -> bool:
            if box is None or t_ms is None:
                return False
            truth_box = boxes.get(round(t_ms), {}).get(stay["track_id"])
            return truth_box is not None and iou(box, truth_box) >= ON_PERSON_IOU

        def error(e: dict) -> float:
            return abs(e["dwell_ms"] - stay["dwell_ms"])

        ends_on = [(e, on_object(seen_ms, entered), on_object(e["t_ms"], left))
                   for e, seen_ms, entered, left in exits
                   if (e["app"], e["zone"]) == (owner, stay["zone"])
                   and e["left_ms"] - e["dwell_ms"] <= stay["exit_ms"] and e["left_ms"] >= stay["enter_ms"]]
        both = sorted((e for e, a, b in ends_on if a and b), key=error)
        touching = both or sorted((e for e, a, b in ends_on if a or b), key=error)
        if both and error(both[0]) <= within_ms:
            outcome = "followed"
        elif sum(a or b for _, a, b in ends_on) >= 2:
            outcome = "split"
        else:
            outcome = "dwell_off" if both else "slid" if touching else "missed"
        nearest = touching[0] if touching else None
        verdicts.append({"app": owner, "zone": stay["zone"], "object": stay["track_id"],
                         "enter_ms": stay["enter_ms"], "exit_ms": stay["exit_ms"], "dwell_ms": stay["dwell_ms"],
                         "outcome": outcome, "track_id": None if nearest is None else nearest["track_id"],
                         "dwell_error_ms": None if nearest is None else
                         round(nearest["dwell_ms"] - stay["dwell_ms"], 3)})
    return verdicts


def stays_followed(events: list[dict], truth: dict, specs: list[AppSpec], within_ms: float = WITHIN_MS) -> float:
    """The share of the counted stays that a zone_exit follows (`stay_outcomes`)."""
    verdicts = stay_outcomes(events, truth, specs, within_ms)
    return sum(v["outcome"] == "followed" for v in verdicts) / max(len(verdicts), 1)


def truth_boxes(truth: dict) -> dict[int, Detections]:
    """Per frame (rounded ms): the seen objects' boxes, classed by index in the truth's
    `classes`, at confidence 1."""
    classes = truth["classes"]
    out = {}
    for f in truth["frames"]:
        seen = [o for o in f["objects"] if o["visible"] >= SEEN]
        out[round(f["t_ms"])] = Detections(np.array([o["xyxy"] for o in seen], np.float32).reshape(-1, 4),
                                           np.ones(len(seen), np.float32),
                                           np.array([classes.index(o["class"]) for o in seen], np.int64))
    return out


def run_on_truth(clip: Clip, specs: list[AppSpec]) -> list[dict]:
    """The apps over the clip's frames, each given the truth's boxes instead of a
    detector's: the events they emit."""
    labels = tuple(clip.truth["classes"])
    for spec in specs:
        unknown = sorted(set(spec.classes or ()) - set(labels))
        if unknown or not spec.classes:
            raise ValueError(f"app {spec.name!r}: the truth has boxes of {list(labels)} only; the app counts "
                             f"{spec.classes or 'every class'}")
    per_frame = truth_boxes(clip.truth)
    try:
        src = open_source(str(clip.video), options=OFFLINE)
    except (ValueError, SourceError) as exc:
        raise RunError(str(exc)) from None
    info = src.info
    apps = [(App(s, src.stream_id, (info.width, info.height), info.fps, labels), FrameSampler(s.fps)) for s in specs]
    events = []
    try:
        for block in cut_blocks(src.frames(), 8):
            for app, sampler in apps:
                sub = block.select(sampler.mask(block))
                given = [per_frame.get(round(float(t)), Detections.empty()) for t in sub.pts_ms]
                events += app.observe(sub, given)[0] if len(sub) else []
    finally:
        src.close()
    for app, _ in apps:
        events += app.finish()
    return [e.to_dict() for e in events]


def _run_with_detector(clip: Clip, specs: list[AppSpec], out: Path, repository: Path, device: str) -> list[dict]:
    run_offline(str(clip.video), specs, RunOptions(out, video=False, device=device, repository=repository))
    return [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]


def eval_tracking(specs: list[AppSpec], clips: list[Clip], repository: Path, device: str,
                  log: Callable[[str], None] = print) -> dict:
    """Per clip and over all: the stays followed and within, and how many of each
    outcome (`stay_outcomes`), with the apps' detectors and with the truth's boxes;
    per clip also each stay not followed, with its outcome."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="vigil-eval-") as tmp:
        for clip in clips:
            row = {"clip": clip.name, "stays": len(counted_stays(clip.truth, specs)), "not_followed": {}}
            for boxes in ("detector", "truth"):
                events = _run_with_detector(clip, specs, Path(tmp) / clip.name, repository, device) \
                    if boxes == "detector" else run_on_truth(clip, specs)
                verdicts = stay_outcomes(events, clip.truth, specs)
                outcomes = {k: sum(v["outcome"] == k for v in verdicts) for k in OUTCOMES}
                row[boxes] = {"followed": round(outcomes["followed"] / max(len(verdicts), 1), 4),
                              "within": round(stays_within(events, clip.truth, specs), 4), "outcomes": outcomes}
                row["not_followed"][boxes] = [v for v in verdicts if v["outcome"] != "followed"]
            log(f"{clip.name}: {row['stays']} stays; followed {row['detector']['followed']:.3f} with the detector"
                f"{_unfollowed(row['detector'])}, {row['truth']['followed']:.3f} with the truth's boxes"
                f"{_unfollowed(row['truth'])}")
            rows.append(row)
    stays = sum(r["stays"] for r in rows)
    overall = {}
    for boxes in ("detector", "truth"):
        outcomes = {k: sum(r[boxes]["outcomes"][k] for r in rows) for k in OUTCOMES}
        # within is a share per clip only, so over all it is weighted by the clips' stays
        overall[boxes] = {"followed": round(outcomes["followed"] / max(stays, 1), 4),
                          "within": round(sum(r[boxes]["within"] * r["stays"] for r in rows) / max(stays, 1), 4),
                          "outcomes": outcomes}
    return {"apps": [s.name for s in specs], "within_ms": WITHIN_MS, "clips": rows,
            "overall": {"stays": stays, **overall}}


def _unfollowed(result: dict) -> str:
    """The outcomes of the stays not followed, if any, as " (split 2, missed 1)"."""
    counts = [f"{k} {n}" for k, n in result["outcomes"].items() if k != "followed" and n]
    return f" ({', '.join(counts)})" if counts else ""
