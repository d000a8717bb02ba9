"""Render a synthetic street-camera clip with its ground truth.

    python -m sample_videos.render --seed 3 --out sample_videos/street_s3.mp4

writes `street_s3.mp4` (H.264) and `street_s3.gt.json` beside it. The same seed and
options always give the same scene and ground truth. `Renderer.frames()` yields the
frames with their objects without encoding, for training on the fly.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import av
import cv2
import numpy as np

from sample_videos import sprites
from sample_videos.groundtruth import Truth
from sample_videos.preset import get_preset
from sample_videos.range import truth_path
from sample_videos.world import Density, World

PREROLL_S = 12.0  # simulate before frame 0 so the street is already busy


@dataclass(frozen=True)
class RenderConfig:
    seed: int = 0
    preset: str = "street"
    duration_s: float = 20.0
    width: int = 640
    height: int = 360
    fps: float = 15.0
    density: float = 1.0
    noise: float = 3.0  # sensor noise, standard deviation in 8-bit levels
    # (start_s, end_s) stretches during which nothing new enters and nothing moves
    # after the street has emptied: lets tests exercise static-frame skipping
    quiet: tuple[tuple[float, float], ...] = ()

    def __post_init__(self) -> None:
        # every number finite and bounded: a synthetic:// URL is user input
        for name, low, high in (("duration_s", 0, 86_400), ("fps", 0, 120), ("density", 0, 10)):
            value = getattr(self, name)
            if not (math.isfinite(value) and low < value <= high):
                raise ValueError(f"{name} must be in ({low}, {high}]; was {value}")
        if not (math.isfinite(self.noise) and 0 <= self.noise <= 64):
            raise ValueError(f"noise must be in [0, 64]; was {self.noise}")
        if not (64 <= self.width <= 3840 and 64 <= self.height <= 2160) or self.width % 2 or self.height % 2:
            raise ValueError(f"size must be even, from 64x64 to 3840x2160; was {self.width}x{self.height}")
        get_preset(self.preset)

    @property
    def num_frames(self) -> int:
        return int(round(self.duration_s * self.fps))


@dataclass
class RenderedFrame:
    index: int
    t_ms: float
    image: np.ndarray  # [H, W, 3] uint8 RGB
    objects: list[dict]  # track_id, class, xyxy (clipped), full_xyxy, anchor, visible


class Lighting:
    """Slow global gain and colour drift, seeded."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.base = rng.uniform(0.82, 1.08)
        self.amp = rng.uniform(0.06, 0.16)
        self.period_s = rng.uniform(40, 120)
        self.phase = rng.uniform(0, 2 * math.pi)
        self.tint = rng.uniform(-0.06, 0.06, size=3)

    def gain(self, t_s: float) -> np.ndarray:
        g = self.base + self.amp * math.sin(2 * math.pi * t_s / self.period_s + self.phase)
        drift = 1 + self.tint * math.sin(2 * math.pi * t_s / (2 * self.period_s))
        return (g * drift).astype(np.float32)


class Renderer:
    def __init__(self, config: RenderConfig) -> None:
        self.config = config
        self.preset = get_preset(config.preset)
        rng = np.random.default_rng(config.seed)
        # Separate streams so that, e.g., the noise option never changes the traffic.
        self.world_rng, light_rng, self.noise_rng = (np.random.default_rng(s) for s in rng.integers(0, 2**63, 3))
        self.world = World(self.preset, self.world_rng, Density().scaled(config.density),
                           aspect=config.width / config.height)
        self.lighting = Lighting(light_rng)
        self.background = sprites.background(self.preset, config.width, config.height)

    def _quiet(self, t_s: float) -> bool:
        return any(start <= t_s < end for start, end in self.config.quiet)

    def frames(self, every: int = 1) -> Iterator[RenderedFrame]:
        """Frames in order; `every=k` draws only every k-th (the world still steps)."""
        cfg, world = self.config, self.world
        dt = 1.0 / cfg.fps
        for _ in range(int(PREROLL_S * cfg.fps)):
            world.step(dt)
        for index in range(cfg.num_frames):
            t_s = index * dt
            world.arrivals = not self._quiet(t_s)
            if index % every == 0:
                yield self._draw(index, t_s * 1000.0)
            world.step(dt)

    def _draw(self, index: int, t_ms: float) -> RenderedFrame:
        cfg, world = self.config, self.world
        W, H = cfg.width, cfg.height
        frame = self.background.copy()
        ids = np.zeros((H, W), np.uint16)
        agents = sorted(world.agents, key=lambda a: (a.foot_y, a.track_id))
        drawn = []
        for agent in agents:
            prims = sprites.agent_prims(agent, world, W, H)
            box = sprites.extent(prims)
            if box[2] < 0 or box[0] >= W or box[3] < 0 or box[1] >= H:
                continue
            drawn.append((agent, prims, box))
        shade = np.zeros((H, W), np.float32)
        for agent, _, box in drawn:
            centre, axes = sprites.shadow_ellipse(agent, box, H)
            cv2.ellipse(shade, centre, axes, 0, 0, 360, 1.0, -1)
        if drawn:
            shade = cv2.GaussianBlur(shade, (0, 0), 2.0)
            frame = (frame * (1 - 0.35 * shade[..., None])).astype(np.uint8)
        for k, (agent, prims, _) in enumerate(drawn, start=1):
            sprites.draw(frame, prims)
            sprites.draw(ids, prims, color=k, antialias=False)
        visible_px = np.bincount(ids.ravel(), minlength=len(drawn) + 1)
        objects = []
        for k, (agent, prims, box) in enumerate(drawn, start=1):
            own = _own_pixels(prims, box)
            clipped = [max(0.0, box[0]), max(0.0, box[1]), min(W - 1.0, box[2]), min(H - 1.0, box[3])]
            objects.append({"track_id": agent.track_id, "class": agent.cls, "xyxy": clipped,
                            "full_xyxy": [float(v) for v in box],
                            "anchor": [float(v) for v in sprites.anchor(agent, world, W, H)],
                            "visible": float(min(1.0, visible_px[k] / max(own, 1)))})
        lit = frame.astype(np.float32) * self.lighting.gain(t_ms / 1000.0)
        if cfg.noise > 0:
            lit += self.noise_rng.standard_normal(lit.shape, dtype=np.float32) * cfg.noise
        image = np.clip(lit, 0, 255).astype(np.uint8)
        return RenderedFrame(index, t_ms, image, objects)


def _own_pixels(prims: list[sprites.Prim], box: np.ndarray) -> int:
    """Pixels an object covers when drawn alone (to measure how much is hidden)."""
    x0, y0 = math.floor(box[0]) - 1, math.floor(box[1]) - 1
    w, h = math.ceil(box[2]) - x0 + 2, math.ceil(box[3]) - y0 + 2
    patch = np.zeros((h, w), np.uint8)
    shifted = [sprites.Prim(p.kind, p.points - (x0, y0), p.color, p.size) for p in prims]
    sprites.draw(patch, shifted, color=1, antialias=False)
    return int(patch.sum())


def write_clip(config: RenderConfig, out: Path, crf: int = 26, progress: bool = False) -> dict:
    """Render to `out` (.mp4, H.264) and write its truth beside it (`truth_path`)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    renderer = Renderer(config)
    truth = Truth(renderer.preset, config.width, config.height, config.fps)
    rate = _fraction(config.fps)
    with av.open(str(out), "w", options={"movflags": "+faststart"}) as container:
        stream = container.add_stream("libx264", rate=rate)
        stream.width, stream.height, stream.pix_fmt = config.width, config.height, "yuv420p"
        stream.options = {"crf": str(crf), "preset": "medium", "g": str(int(2 * config.fps))}
        for rendered in renderer.frames():
            truth.add_frame(rendered.index, rendered.t_ms, rendered.objects)
            frame = av.VideoFrame.from_ndarray(rendered.image, format="rgb24")
            frame.pts = rendered.index
            for packet in stream.encode(frame):
                container.mux(packet)
            if progress and rendered.index % int(config.fps) == 0:
                print(f"\r{out.name}: {rendered.index + 1}/{config.num_frames} frames", end="", file=sys.stderr)
        for packet in stream.encode():
            container.mux(packet)
    if progress:
        print(file=sys.stderr)
    doc = truth.document(preset=config.preset, seed=config.seed, fps=config.fps, width=config.width,
                         height=config.height, num_frames=config.num_frames,
                         duration_s=config.num_frames / config.fps, density=config.density,
                         quiet=[list(q) for q in config.quiet])
    gt_path = truth_path(out)
    gt_path.write_text(json.dumps(doc, separators=(",", ":")))
    return doc


def _fraction(fps: float):
    from fractions import Fraction
    return Fraction(fps).limit_denominator(1001)


def parse_quiet(text: str) -> tuple[float, float]:
    try:
        start, end = (float(v) for v in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--quiet takes START:END in seconds; was {text!r}") from None
    if end <= start:
        raise argparse.ArgumentTypeError(f"--quiet END must be after START; was {text!r}")
    return start, end


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sample_videos.render", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, required=True, help="fixes traffic, colours, timing and lighting")
    parser.add_argument("--out", type=Path, required=True, help="output .mp4; ground truth goes beside it")
    parser.add_argument("--preset", default="street", help="scene preset (default: street)")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds (default: 20)")
    parser.add_argument("--size", default="640x360", help="WIDTHxHEIGHT (default: 640x360)")
    parser.add_argument("--fps", type=float, default=15.0, help="frames per second (default: 15)")
    parser.add_argument("--density", type=float, default=1.0, help="traffic multiplier (default: 1.0)")
    parser.add_argument("--noise", type=float, default=3.0, help="sensor noise std in 8-bit levels")
    parser.add_argument("--quiet", type=parse_quiet, action="append", default=[], metavar="START:END",
                        help="a stretch with no new arrivals (repeatable), for static-scene tests")
    parser.add_argument("--crf", type=int, default=26, help="x264 quality, lower is better (default: 26)")
    args = parser.parse_args(argv)
    try:
        width, height = (int(v) for v in args.size.lower().split("x"))
    except ValueError:
        parser.error(f"--size takes WIDTHxHEIGHT, e.g. 640x360; was {args.size!r}")
    if args.out.suffix.lower() != ".mp4":
        parser.error(f"--out must end in .mp4; was {args.out}")
    try:
        config = RenderConfig(seed=args.seed, preset=args.preset, duration_s=args.duration, width=width,
                              height=height, fps=args.fps, density=args.density, noise=args.noise,
                              quiet=tuple(args.quiet))
    except ValueError as exc:
        parser.error(str(exc))
    doc = write_clip(config, args.out, crf=args.crf, progress=sys.stderr.isatty())
    lines = ", ".join(f"{name} in={v['in']} out={v['out']}" for name, v in doc["lines"].items())
    print(f"wrote {args.out} ({config.num_frames} frames, {len(doc['tracks'])} objects; {lines})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
