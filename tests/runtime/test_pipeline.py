"""Blocks in flight: completed in order, the oldest when the pipeline is full, and, with
`ready`, as soon as their results are in."""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np
import pytest

from core.frames import Frame, FrameBlock
from runtime.pipeline import BlockPipeline, InFlight


def test_without_ready_the_oldest_completes_only_when_the_pipeline_is_full():
    done: list[int] = []
    pipeline = BlockPipeline(done.append, depth=3)
    for k in range(5):
        pipeline.push(k)
    pipeline.poll()  # nothing is ever ready
    assert done == [0, 1, 2] and len(pipeline) == 2
    pipeline.drain()
    assert done == [0, 1, 2, 3, 4]


def test_ready_blocks_complete_in_order_without_waiting_for_the_pipeline_to_fill():
    done: list[int] = []
    answered: set[int] = set()
    pipeline = BlockPipeline(done.append, depth=5, ready=lambda k: k in answered)
    for k in range(3):
        pipeline.push(k)
    assert done == []
    answered |= {1, 2}  # answered out of order: 1 and 2 wait for 0
    pipeline.poll()
    assert done == []
    answered.add(0)
    pipeline.poll()
    assert done == [0, 1, 2] and len(pipeline) == 0


def test_a_full_pipeline_still_waits_for_its_oldest_block():
    done: list[int] = []
    pipeline = BlockPipeline(done.append, depth=2, ready=lambda k: False)
    pipeline.push(0)
    pipeline.push(1)
    assert done == [0]


def test_a_block_is_ready_when_every_frame_is_answered_or_skipped():
    block = FrameBlock.from_frames(0, [Frame("s", 0, 0.0, 0.0, np.zeros((4, 4, 3), np.uint8))])
    pending, answered = Future(), Future()
    answered.set_result("detections")
    flight = InFlight(block, {}, {"a": [answered, None], "b": [pending]})
    assert not flight.ready()
    pending.set_result("detections")
    assert flight.ready()
    assert InFlight(block, {}).ready()  # a block no engine app sampled


@pytest.mark.parametrize("depth", [0, -1])
def test_depth_is_at_least_one(depth):
    with pytest.raises(ValueError, match="depth must be >= 1"):
        BlockPipeline(lambda _: None, depth=depth)
