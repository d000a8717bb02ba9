"""Execution lanes: how many batches a device runs at once, and with how many threads.

A GPU runs one batch at a time (one lane). A CPU runs best as several lanes, each a
batch on a few cores, as Triton runs a CPU model as several instances: on two cores,
SceneDet's person path serves more frames a second as two lanes of one thread each
than as one lane of two, at every batch size (intra-op threads wait for each other at
every operator, and for the slowest when another thread takes a core).

A lane's threads are OpenMP's for the thread that runs it: `torch.set_num_threads`
sets them for the calling thread (and the count torch reports), so each lane sets
its own, and so does the thread that measures profiles, which are planned per lane.
"""

from __future__ import annotations

from core.host import usable_cores

MAX_LANES = 64
AUTO_MAX_LANES = 4  # past this, a lane of one core gains little and takes longer per batch


def resolve_lanes(device: str, lanes: int | None) -> int:
    """`lanes` for `device`; None: one on a GPU, and on a CPU one per core up to
    AUTO_MAX_LANES."""
    if lanes is not None and not 1 <= lanes <= MAX_LANES:
        raise ValueError(f"lanes must be in 1..{MAX_LANES}; was {lanes}")
    if device.startswith("cuda"):
        return 1 if lanes is None else lanes
    return min(usable_cores(), AUTO_MAX_LANES) if lanes is None else lanes


def lane_threads(device: str, lanes: int) -> int | None:
    """Intra-op threads per lane: the CPU's cores shared among the lanes; None on a GPU
    (torch's own count stays)."""
    if device.startswith("cuda"):
        return None
    return max(1, usable_cores() // lanes)


def use_threads(threads: int | None) -> None:
    """This thread's batches run on `threads` (None: leave torch's count). Set every
    time: the count torch reports is the last any thread set, not this thread's."""
    if threads is None:
        return
    import torch

    torch.set_num_threads(threads)
