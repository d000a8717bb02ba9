import numpy as np
import pytest

from core.frames import FrameBlock
from factories import make_block, make_frame
from streams.blocks import BlockCutter, FrameSampler, cut_blocks


def test_cut_by_frame_count_keeps_order_and_remainder():
    frames = [make_frame(i) for i in range(10)]
    blocks = list(cut_blocks(frames, max_frames=4))
    assert [len(b) for b in blocks] == [4, 4, 2]
    assert [b.block_id for b in blocks] == [0, 1, 2]
    assert np.concatenate([b.frame_ids for b in blocks]).tolist() == list(range(10))


def test_cut_by_duration_closes_block_before_the_late_frame():
    # 40 ms apart: a 100 ms block holds frames at 0, 40, 80; the frame at 120 starts the next
    frames = [make_frame(i, pts_ms=i * 40.0) for i in range(7)]
    blocks = list(cut_blocks(frames, max_frames=100, max_duration_ms=100))
    assert [b.frame_ids.tolist() for b in blocks] == [[0, 1, 2], [3, 4, 5], [6]]


def test_cutter_with_one_frame_blocks_returns_each_frame_at_once():
    cutter = BlockCutter(max_frames=1, max_duration_ms=10)
    out = [cutter.add(make_frame(i, pts_ms=i * 40.0)) for i in range(3)]
    assert [len(b) for b in out] == [1, 1, 1]
    assert cutter.flush() is None


@pytest.mark.parametrize("kwargs, message", [
    ({"max_frames": 0}, "max_frames must be >= 1; was 0"),
    ({"max_duration_ms": -5}, "max_duration_ms must be > 0; was -5"),
])
def test_cutter_rejects_bad_limits(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BlockCutter(**kwargs)


@pytest.mark.parametrize("stream_fps, app_fps, expected_kept", [
    (30, 5, 5),    # every 6th frame of one second
    (30, 10, 10),
    (30, 30, 30),
    (15, 30, 15),  # cannot sample faster than the stream
    (25, 10, 10),  # not a divisor: 10 frames, evenly spread
])
def test_sampler_keeps_target_rate(stream_fps, app_fps, expected_kept):
    sampler = FrameSampler(app_fps)
    kept = [sampler.wants(i * 1000.0 / stream_fps) for i in range(stream_fps)]
    assert sum(kept) == expected_kept
    assert kept[0]


def test_sampler_every_frame_without_fps():
    sampler = FrameSampler(None)
    assert all(sampler.wants(t) for t in range(0, 1000, 33))


def test_sampler_state_carries_across_blocks():
    sampler = FrameSampler(5.0)
    first = make_block(num_frames=15, fps=30, start=0)
    second = make_block(num_frames=15, fps=30, start=15, block_id=1)
    kept = np.concatenate([first.frame_ids[sampler.mask(first)], second.frame_ids[sampler.mask(second)]])
    assert kept.tolist() == [0, 6, 12, 18, 24]


@pytest.mark.parametrize("fps", [0, -1, float("inf"), float("nan"), 1e9])
def test_sampler_refuses_rates_no_camera_has(fps):
    with pytest.raises(ValueError, match=r"fps must be in \(0, 1000"):
        FrameSampler(fps)


def test_sampler_after_a_long_jump_in_time_is_one_step_and_on_the_grid():
    """A camera back after a day: the next due frame follows from the period at once
    (it once stepped through every missed period, 86 million for this one)."""
    sampler = FrameSampler(1000.0)
    assert sampler.wants(0.0)
    assert sampler.wants(86_400_000.0)
    assert sampler.next_due_ms == pytest.approx(86_400_001.0)
    assert not sampler.wants(86_400_000.4) and sampler.wants(86_400_001.0)


def test_block_select_and_validation():
    block = make_block(num_frames=4)
    sub = block.select([True, False, True, False])
    assert sub.frame_ids.tolist() == [0, 2]
    assert len(sub.pixels) == 2 and sub.block_id == block.block_id
    with pytest.raises(ValueError, match="selection mask must have shape"):
        block.select([True])
    with pytest.raises(ValueError, match="disagree on N"):
        FrameBlock("s", 0, np.arange(2), np.zeros(3), np.zeros(2), np.zeros((2, 4, 4, 3), np.uint8))
    with pytest.raises(ValueError, match="uint8"):
        FrameBlock("s", 0, np.arange(2), np.zeros(2), np.zeros(2), np.zeros((2, 4, 4, 3), np.float32))


@pytest.mark.parametrize("keep", [
    [True] * 6, [True, False] * 3, [False, True, False, False, True, False],
    [False, False, False, False, True, False],
    [False] * 6, [True, True, False, True, False, False]])
def test_a_block_and_its_selections_hold_the_decoder_s_frames_not_copies(keep):
    """Cutting a block and sampling its frames copy no pixel: each frame is the array
    the decoder made (a stacked copy of every frame was most of a worker's memory traffic)."""
    frames = [make_frame(i, value=i) for i in range(6)]
    block = FrameBlock.from_frames(0, frames)
    assert all(block.pixels[i] is frames[i].image for i in range(6))
    sub = block.select(keep)
    want = [i for i, k in enumerate(keep) if k]
    assert sub.frame_ids.tolist() == want and sub.capture_ms.tolist() == block.capture_ms[want].tolist()
    assert [int(image[0, 0, 0]) for image in sub.pixels] == want
    assert all(image is frames[i].image for image, i in zip(sub.pixels, want))


def test_a_stacked_array_is_taken_as_its_frames():
    stacked = np.arange(2 * 4 * 4 * 3, dtype=np.uint8).reshape(2, 4, 4, 3)
    block = FrameBlock("s", 0, np.arange(2), np.zeros(2), np.zeros(2), stacked)
    assert len(block.pixels) == 2 and np.shares_memory(block.pixels[1], stacked) and block.size == (4, 4)
    with pytest.raises(ValueError, match="one size"):
        FrameBlock("s", 0, np.arange(2), np.zeros(2), np.zeros(2),
                   (np.zeros((4, 4, 3), np.uint8), np.zeros((4, 5, 3), np.uint8)))
    with pytest.raises(ValueError, match="no size"):
        _ = block.select([False, False]).size


def test_frames_before_a_failure_come_out_as_a_last_block():
    def failing():
        for i in range(5):
            yield make_frame(i)
        raise RuntimeError("stream broke")

    blocks = cut_blocks(failing(), max_frames=4)
    assert len(next(blocks)) == 4
    assert next(blocks).frame_ids.tolist() == [4]
    with pytest.raises(RuntimeError, match="stream broke"):
        next(blocks)


def test_a_block_closes_on_its_last_frame_not_on_the_next_one():
    # a 5 fps stream (200 ms apart) in 300 ms blocks: the frame at 200 is the last that
    # fits, since the one at 400 would not; waiting for it held the first frame 400 ms
    cutter = BlockCutter(max_frames=8, max_duration_ms=300)
    out = [cutter.add(make_frame(i, pts_ms=i * 200.0)) for i in range(5)]
    assert [None if b is None else b.frame_ids.tolist() for b in out] == [None, [0, 1], None, [2, 3], None]
    assert cutter.flush().frame_ids.tolist() == [4]


def test_after_a_gap_a_frame_closes_the_old_block_and_waits_in_the_new_one():
    cutter = BlockCutter(max_frames=8, max_duration_ms=300)
    assert cutter.add(make_frame(0, pts_ms=0.0)) is None
    assert cutter.add(make_frame(1, pts_ms=100.0)) is None
    assert cutter.add(make_frame(2, pts_ms=900.0)).frame_ids.tolist() == [0, 1]  # the gap closes [0, 1]
    assert cutter.add(make_frame(3, pts_ms=1100.0)).frame_ids.tolist() == [2, 3]  # one at 1300 would not fit


@pytest.mark.parametrize("fps", [None, 1.0, 5.0, 7.5, 14.9])
def test_due_says_what_wants_would_do_without_taking_the_frame(fps):
    """The decoder skips a frame on `due` alone (streams/decode.py, NonRefSkip): it must
    agree with `wants` on every frame, and asking it must change nothing."""
    import random

    rng = random.Random(7)
    sampler, t = FrameSampler(fps), 0.0
    for _ in range(500):
        t += rng.choice([1000 / 15, 1000 / 30, 0.3, 250.0])
        asked = sampler.due(t)
        assert sampler.due(t) == asked
        assert sampler.wants(t) == asked
