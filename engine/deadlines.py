"""Deadlines: the SLO split over a request's stages, and the early drop at admission.

Beside the policies (engine/scheduler.py), which order and drop by these deadlines.
"""

from __future__ import annotations

import math
from typing import Callable

from engine.profiles import Profile
from engine.requests import Request

# What a lower-priority request reserves for its later stages, as a share of its SLO:
# enough to wait behind one higher-priority batch (at most half that one's budget).
YIELD_SHARE = 0.35
# Time between one stage ending and the next starting, or a result being handed over:
# thread hand-offs and the scheduler's own work, which profiles do not see.
HANDOFF_MS = 3.0


def stage_deadlines(model, leaves: list[str], req: Request, latency_1: Callable[[str], float], host_ms: float,
                    top_priority: int) -> dict[str, tuple[float, float]]:
    """Each fragment's (deadline, budget). The budget, which sizes batches, is the SLO
    split over the path in proportion to l(1) (`latency_1(fragment hash)`). The deadline,
    which orders and drops, is the request's final one less what the stages after it
    need: twice their l(1) (a batch to wait behind and their own run) and, for a request
    below the top priority in use, `YIELD_SHARE` of its SLO for higher-priority work to
    go first. A request that may not be dropped has no deadline."""
    own = {n: latency_1(f.hash) for n, f in model.fragments.items()}
    cumulative: dict[str, float] = {}
    for name, frag in model.fragments.items():  # root first
        cumulative[name] = own[name] + (cumulative[frag.parent] if frag.parent else 0.0)
    total = max(cumulative[leaf] for leaf in leaves) or 1.0
    # the last stage must also leave time to hand over and postprocess the result
    final = req.capture_ms + req.slo_ms - HANDOFF_MS - host_ms
    yielding = YIELD_SHARE * req.slo_ms if req.priority < top_priority else 0.0
    stages = {}
    for name in model.fragments:
        after = max((cumulative[leaf] - cumulative[name] for leaf in leaves if name in model.path_to([leaf])),
                    default=0.0)
        reserve = (2 * after + HANDOFF_MS + yielding) if after > 0 else 0.0
        deadline = final - reserve if req.may_drop else float("inf")
        stages[name] = (deadline, req.slo_ms * own[name] / total)
    return stages


def ahead_of(queued: list[tuple[int, str]], app: str, priority: int, served: dict[str, float]) -> int:
    """How many of the queued (priority, app) entries go before a new one of this app:
    higher priorities, its own app's, and those of equal-priority apps served no better
    than its own lately (as fair-share policies order them). Counting every
    equal-priority entry would always drop the app whose frames come a little later."""
    mine = served.get(app, 1.0)
    return sum(1 for p, flow in queued if p > priority or (p == priority and (flow == app or
                                                                             served.get(flow, 1.0) <= mine)))


def hopeless(ahead: int, profile: Profile, now_ms: float, deadline_ms: float, lanes: int = 1) -> bool:
    """Early drop at admission: even if the `ahead` entries ran in the largest batches
    the scheduler forms (the profile's efficient batch), `lanes` of them at a time, a
    new one could not finish this stage by its deadline."""
    if ahead == 0:
        return False
    b = profile.efficient_batch
    full, rest = divmod(ahead + 1, b)  # the queue ahead and this request, in the largest batches
    rounds = math.ceil(full / lanes)  # its own batch is in the last round
    if rest and full % lanes == 0:  # ... or runs alone after them
        clear_ms = rounds * profile.latency_ms(b) + profile.latency_ms(rest)
    else:
        clear_ms = max(rounds, 1) * profile.latency_ms(b)
    return now_ms + clear_ms > deadline_ms
