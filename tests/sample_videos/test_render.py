"""The synthetic test range: determinism and ground-truth consistency."""

import json

import numpy as np
import pytest

from sample_videos.groundtruth import inside, segment_hit, side
from sample_videos.render import RenderConfig, Renderer, main


def frames(seed: int, n: int = 20, **kw):
    return [f for _, f in zip(range(n), Renderer(RenderConfig(seed=seed, **kw)).frames())]


def test_same_seed_same_pixels_and_objects():
    a, b = frames(3), frames(3)
    assert all(np.array_equal(x.image, y.image) for x, y in zip(a, b))
    assert [x.objects for x in a] == [y.objects for y in b]


def test_other_seed_other_scene():
    a, b = frames(3, 2), frames(4, 2)
    assert not np.array_equal(a[1].image, b[1].image)


def test_noise_option_does_not_change_the_traffic():
    a, b = frames(3, 10, noise=0.0), frames(3, 10, noise=6.0)
    assert [x.objects for x in a] == [y.objects for y in b]


def test_objects_have_boxes_inside_the_frame_and_valid_visibility():
    for f in frames(8, 30):
        for o in f.objects:
            x0, y0, x1, y1 = o["xyxy"]
            assert 0 <= x0 <= x1 <= 639 and 0 <= y0 <= y1 <= 359
            assert 0 <= o["visible"] <= 1
            assert o["class"] in ("person", "car", "bike")


def test_ground_truth_is_self_consistent(short_clip):
    _, gt = short_clip
    assert len(gt["frames"]) == gt["num_frames"] == 30
    for name, line in gt["lines"].items():
        crossings = [c for c in gt["crossings"] if c["line"] == name]
        assert line["in"] == sum(c["direction"] == "in" for c in crossings)
        assert line["out"] == sum(c["direction"] == "out" for c in crossings)
        assert line["in"] == sum(v["in"] for v in line["by_class"].values())
    assert len(gt["facts"]) == 2 and gt["facts"][0]["t_s"] == 0
    assert "direction" in gt["conventions"]


@pytest.mark.parametrize("p, q, hits", [((0.5, 0.5), (0.7, 0.5), True), ((0.5, 0.99), (0.7, 0.99), False)])
def test_crossing_geometry(p, q, hits):
    a, b = (0.62, 0.97), (0.62, 0.27)
    assert segment_hit(a, b, p, q) == hits
    assert side(a, b, (0.7, 0.5)) > 0  # right of a bottom-to-top line is "in"


def test_inside_polygon():
    square = ((0, 0), (1, 0), (1, 1), (0, 1))
    assert inside(square, (0.5, 0.5)) and not inside(square, (1.5, 0.5))


def test_cli_writes_clip_and_truth(tmp_path, capsys):
    out = tmp_path / "c.mp4"
    assert main(["--seed", "2", "--duration", "1", "--size", "320x180", "--fps", "10", "--out", str(out)]) == 0
    gt = json.loads((tmp_path / "c.gt.json").read_text())
    assert out.stat().st_size > 0 and gt["num_frames"] == 10 and gt["width"] == 320
    assert "wrote" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["--seed", "1", "--out", "x.avi"], "--out must end in .mp4"),
    (["--seed", "1", "--out", "x.mp4", "--size", "big"], "--size takes WIDTHxHEIGHT"),
    (["--seed", "1", "--out", "x.mp4", "--fps", "0"], "fps must be in (0, 120]; was 0.0"),
    (["--seed", "1", "--out", "x.mp4", "--fps", "nan"], "fps must be in (0, 120]; was nan"),
    (["--seed", "1", "--out", "x.mp4", "--size", "100000x100000"], "size must be even, from 64x64 to 3840x2160"),
    (["--seed", "1", "--out", "x.mp4", "--duration", "inf"], "duration_s must be in (0, 86400]"),
])
def test_cli_rejects_bad_options(args, message, capsys):
    with pytest.raises(SystemExit):
        main(args)
    assert message in capsys.readouterr().err
