"""`vigil eval detector --footage NAME`: person detectors and people-counting apps on
real footage labelled by hand (sample_videos/footage.py), side by side.

Per detector, on the labelled frames:
- person AP50: VOC all-point AP at IoU 0.5 over every box the model gives (its own
  floor, or score 0.05 where that is lower), ignore regions counting neither way;
- vehicle AP50, the same over its car, truck and bus boxes as one class (for a model
  that has any);
- boxes MAE: the mean absolute error of a frame's head count from the boxes at or over
  the app's min_confidence, against the labels (anywhere from the people labelled to
  those plus the ignored ones is right).
Per app, from a whole `vigil run` of the footage: tracks MAE, the same error for the
count of the app's tracks alive at each labelled frame's time (from a track's
track_start event to its track_end), which is what a people counter reports.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from apps.spec import load_spec
from models.detection_eval import DetectionEvaluator
from models.registry import load_model
from models.repository import ModelRepository
from runtime.offline import RunOptions, run_offline
from sample_videos.footage import ROOT, Footage, load_footage, read_frames

AP_FLOOR = 0.05
VEHICLES = ("car", "truck", "bus")  # what the labels' vehicles (cars and vans) may be called


@dataclass(frozen=True)
class Entry:
    model: str
    version: int | None  # None: the latest in the repository
    app: str  # the built-in app (or spec file) that runs this detector for people


ENTRIES = (Entry("coco", 1, "people-counter"), Entry("coco", 2, "people-counter"),
           Entry("hog-people", None, str(ROOT / "configs/apps/people-counter-hog.yaml")),
           Entry("scenedet", None, "people-counter-scenedet"))


def _detector(entry: Entry, repo: ModelRepository, device: str):
    versions = repo.versions(entry.model)
    if not versions:
        raise ValueError(f"{entry.model} is not in the model repository {repo.root}")
    version = entry.version or max(versions)
    if version not in versions:
        raise ValueError(f"{entry.model} has no version {version} in {repo.root} (have {versions})")
    spec = repo.spec(entry.model, version)
    floor = min(AP_FLOOR, spec.postprocess.min_score)
    spec = spec.model_copy(update={"postprocess": spec.postprocess.model_copy(update={"min_score": floor})})
    try:
        return version, load_model(spec, repo.folder(entry.model, version), version, device)
    except FileNotFoundError as exc:
        raise ValueError(f"{entry.model} version {version}: {exc} (for coco: vigil models fetch)") from None


def _found(model, image: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Boxes, scores and label names the model finds in one RGB frame, over all its fragments."""
    dets = list(model.infer(image[None])[0].values())
    xyxy = np.concatenate([d.xyxy for d in dets]).reshape(-1, 4)
    labels = np.array(model.spec.labels)[np.concatenate([d.class_id for d in dets]).astype(np.int64)]
    return xyxy, np.concatenate([d.confidence for d in dets]), labels


def detector_row(entry: Entry, footage: Footage, images: dict[int, np.ndarray], repo: ModelRepository,
                 device: str) -> dict:
    version, model = _detector(entry, repo, device)
    app = load_spec(entry.app)
    threshold = app.min_confidence
    vehicles = bool(set(VEHICLES) & set(model.spec.labels))
    people, cars, errors = DetectionEvaluator(("person",)), DetectionEvaluator(("vehicle",)), []
    for frame in footage.frames:
        xyxy, score, labels = _found(model, images[frame.index])
        for evaluator, wanted, truth, ignore in ((people, labels == "person", frame.person, frame.ignore),
                                                 (cars, np.isin(labels, VEHICLES), frame.vehicle, None)):
            evaluator.add(xyxy[wanted], score[wanted], np.zeros(int(wanted.sum()), np.int64), truth,
                          np.zeros(len(truth), np.int64), ignore)
        errors.append(frame.count_error(int((score[labels == "person"] >= threshold).sum())))
    return {"detector": f"{entry.model}:{version}", "app": app.name, "min_confidence": threshold,
            "person_ap50": people.result()["per_class"]["person"]["ap"],
            "vehicle_ap50": cars.result()["per_class"]["vehicle"]["ap"] if vehicles else None,
            "boxes_mae": round(float(np.mean(errors)), 3)}


def track_spans(events_path: Path) -> list[tuple[float, float]]:
    """Each track's (track_start, track_end) stream times; a track never ended runs on."""
    events = [json.loads(line) for line in events_path.read_text().splitlines()]
    end = {e["track_id"]: e["t_ms"] for e in events if e["type"] == "track_end"}
    return [(e["t_ms"], end.get(e["track_id"], float("inf"))) for e in events if e["type"] == "track_start"]


def tracks_alive(spans: list[tuple[float, float]], t_ms: float) -> int:
    return sum(1 for start, end in spans if start <= t_ms <= end)


def app_row(app: str, footage: Footage, fps: float, repo: ModelRepository, device: str, log) -> dict:
    spec = load_spec(app)
    version = spec.model_version if isinstance(spec.model_version, int) else None
    last = max(f.index for f in footage.frames)
    with tempfile.TemporaryDirectory(prefix="vigil-footage-") as folder:
        log(f"  vigil run {footage.video.name} --app {spec.name} (to frame {last})")
        summary = run_offline(str(footage.video), [spec], RunOptions(Path(folder), video=False, max_frames=last + 1,
                                                                     repository=repo.root, device=device))
        if summary["error"]:
            raise ValueError(f"{spec.name} on {footage.video}: {summary['error']}")
        spans = track_spans(Path(folder) / "events.jsonl")
        counts = [tracks_alive(spans, f.index * 1000.0 / fps) for f in footage.frames]
    errors = [f.count_error(c) for f, c in zip(footage.frames, counts)]
    latest = max(repo.versions(spec.detector), default=None)
    return {"app": spec.name, "detector": f"{spec.detector}:{version or latest}",
            "tracks_mae": round(float(np.mean(errors)), 3), "tracks": counts}


def eval_footage(name: str, repository: Path, device: str, models: list[str] | None = None,
                 frames: int | None = None, log: Callable[[str], None] = print) -> dict:
    footage = load_footage(name)
    if frames is not None:
        if not 1 <= frames <= len(footage.frames):
            raise ValueError(f"--frames must be in 1..{len(footage.frames)}; was {frames}")
        footage = Footage(footage.name, footage.video, footage.size, footage.frames[:frames])
    known = sorted({e.model for e in ENTRIES})
    unknown = sorted(set(models or []) - set(known))
    if unknown:
        raise ValueError(f"no footage evaluation for {unknown}; choose from {known}")
    entries = [e for e in ENTRIES if not models or e.model in models]
    images, fps = read_frames(footage.video, [f.index for f in footage.frames])
    repo = ModelRepository(repository)
    people, vehicles = (sum(len(getattr(f, kind)) for f in footage.frames) for kind in ("person", "vehicle"))
    log(f"{footage.video}: {len(footage.frames)} labelled frames, {people} people, {vehicles} vehicles")
    out = {"footage": name, "video": footage.video.name, "frames": [f.index for f in footage.frames],
           "people": people, "vehicles": vehicles, "truth": [[len(f.person), len(f.person) + len(f.ignore)] for f in footage.frames],
           "device": device, "detectors": [], "apps": []}
    for entry in entries:
        row = detector_row(entry, footage, images, repo, device)
        log(f"  {row['detector']}: person AP50 {row['person_ap50']}, vehicle AP50 {row['vehicle_ap50']}, "
            f"boxes MAE {row['boxes_mae']}")
        out["detectors"].append(row)
    for app in dict.fromkeys(e.app for e in entries):
        row = app_row(app, footage, fps, repo, device, log)
        log(f"  {row['app']}: tracks MAE {row['tracks_mae']}")
        out["apps"].append(row)
    return out


def format_footage_table(result: dict) -> str:
    tracks = {row["detector"]: row["tracks_mae"] for row in result["apps"]}
    lines = ["| detector | person AP50 | vehicle AP50 | boxes MAE | app (min_confidence) | tracks MAE |",
             "|---|---|---|---|---|---|"]
    for row in result["detectors"]:
        vehicle = "" if row["vehicle_ap50"] is None else row["vehicle_ap50"]
        lines.append(f"| {row['detector']} | {row['person_ap50']} | {vehicle} | {row['boxes_mae']} | {row['app']} "
                     f"({row['min_confidence']}) | {tracks.get(row['detector'], '')} |")
    return "\n".join(lines)
