"""Scheduling policies: a pure function of the queues, the profiles and `now`.

The engine loop is schedule -> execute -> update. A policy's `plan` looks at every
session's queue (one session per fragment hash; items in arrival order) and returns a
`Plan`: which session runs next, which of its items form the batch, and which items
anywhere are dropped because they can no longer meet their deadline. It touches no
tensor and reads no clock; tests drive it with constructed queues and a number for now.

Policies:
- `nexus` (Nexus, SOSP 2019): sessions by priority, then later stages before first
  stages (device work already spent is not wasted), then earliest deadline. Within a
  session (one model shared by several apps) items keep their own priority and
  deadline: they are taken by priority, then deadline, and of items due at about the
  same time the app served least goes first. The planned batch B is the largest whose
  latency fits twice into the tightest stage budget queued (a request may wait one
  batch, then run in the next), and no batch passes the profile's efficient batch
  (engine/profiles.py: on a CPU, bigger batches can run fewer items a second). Early
  drop, within the highest priority that can run: slide a window of B along its items
  and drop those ahead of the first window whose earliest deadline leaves room for the
  whole window; grow the batch to the largest size that still meets the earliest
  deadline in it, and fill it up to B with lower-priority items it can still serve.
  Lower priorities are never dropped for a higher one's window; they wait, and go when
  they would miss even alone, so under overload the lowest priority is shed first.
  When no session has a batch to run and one would have its whole queue dropped, the
  device is idle and the profile may be wrong (measured beside a busy neighbour):
  that session runs a probe batch instead, of its latest-deadline items, at most once
  per SLO. What the probe takes corrects the profile (engine/observed.py); without
  it a profile too slow is never seen to be, and every request is dropped. A
  lower-priority batch is capped so it never keeps the device longer than
  `BLOCK_SHARE` of the tightest higher-priority SLO seen: a higher-priority request
  waits at most one such fragment (preemption happens between fragments). While
  another session has work to run, a batch smaller than planned waits (and fills)
  until the latest start its deadline allows.
- `tfs` (TF Serving): per session, run when `max_batch` items wait or the oldest has
  waited `batch_timeout_ms`; sessions by oldest item. No priorities, no drops.
- `clipper` (Clipper): per session AIMD: the batch grows by `step` while its measured
  latency stays within the SLO, and shrinks by 10% when it does not. FIFO, no drops.
- `nobatch`: one item at a time, oldest first across all sessions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Protocol, Sequence

from engine.observed import RATIO_MIN
from engine.profiles import Profile

POLICIES = ("nexus", "tfs", "clipper", "nobatch")
# The share of a higher-priority SLO that one lower-priority batch may keep the device
# busy (the preemption bound); the engine reserves as much for later stages of
# lower-priority requests.
BLOCK_SHARE = 0.2
FAIRNESS_ALPHA = 0.02  # weight of one outcome in a flow's served share
# how much faster than its profile a probe batch allows the device to be: as far as
# engine/observed.py corrects a profile
PROBE_RANGE = 1.0 / RATIO_MIN
MAX_FLOWS = 4096


@dataclass(frozen=True)
class WorkItem:
    item_id: int
    arrival_ms: float  # when it entered this session's queue
    deadline_ms: float  # this stage's deadline
    budget_ms: float  # this stage's share of the SLO (deadline - capture, for this stage)
    priority: int = 0
    slo_ms: float = float("inf")  # the whole request's SLO (the tightest, for a shared item)
    downstream: bool = False  # a later stage: device work was already spent on it
    flow: str = ""  # whose it is (the app): equal items of different flows share misses evenly


@dataclass(frozen=True)
class Plan:
    session: str | None = None
    batch: tuple[int, ...] = ()  # item ids, in the order to stack them
    dropped: tuple[tuple[int, str], ...] = ()  # (item id, reason)
    wait_until_ms: float | None = None  # nothing to run before this time (batch timeouts)
    probe: bool = False  # run although the profile says it misses: what it takes corrects the profile

    @property
    def idle(self) -> bool:
        return self.session is None and not self.dropped


Queues = Mapping[str, Sequence[WorkItem]]


class Policy(Protocol):
    name: str

    def plan(self, queues: Queues, profiles: Mapping[str, Profile], now_ms: float) -> Plan: ...

    def feedback(self, session: str, batch_size: int, latency_ms: float, budget_ms: float) -> None: ...


@dataclass
class NexusPolicy:
    name: str = "nexus"
    sigmas: float = 1.0  # safety margin: plan with mean + sigmas * std of the profile
    block_share: float = BLOCK_SHARE  # of a higher-priority SLO that one lower-priority batch may take
    defer_safety: float = 0.15  # of the SLO kept in hand when a batch waits to its latest start
    # priority -> tightest SLO seen, kept across plans (updated by `observe`)
    slo_by_priority: dict[int, float] = field(default_factory=dict)
    # flow -> share of its recent items that were run rather than dropped (EWMA): of
    # items due at about the same time, the flow served least goes first
    served: dict[str, float] = field(default_factory=dict)
    probed: dict[str, float] = field(default_factory=dict)  # session -> when it last ran a probe batch

    def observe(self, item: WorkItem) -> None:
        """Remember the tightest SLO per priority, to bound lower-priority batches."""
        current = self.slo_by_priority.get(item.priority)
        if current is None or item.slo_ms < current:
            self.slo_by_priority[item.priority] = item.slo_ms

    def feedback(self, session: str, batch_size: int, latency_ms: float, budget_ms: float) -> None:
        pass

    def plan(self, queues: Queues, profiles: Mapping[str, Profile], now_ms: float) -> Plan:
        candidates = []  # (session, items in order, batch, items ahead of the batch, wake time if deferred)
        for session, queue in queues.items():
            if queue:
                for item in queue:
                    self.observe(item)
                tie_ms = max(profiles[session].latency_ms(1), 1e-3)
                items = sorted(queue, key=lambda w: (-w.priority, _bucket(w.deadline_ms, tie_ms),
                                                     self.served.get(w.flow, 1.0), w.deadline_ms, w.arrival_ms))
                batch, ahead, planned = self._window(items, profiles[session], now_ms)
                wake = self._defer_until(batch, planned, profiles[session], now_ms)
                candidates.append([session, items, batch, ahead, wake, planned])
        if not any(c[2] and c[4] is None for c in candidates):
            for c in candidates:  # nothing else would use the device: waiting gains nothing
                c[4] = None
        runnable = [c for c in candidates if c[2] and c[4] is None]
        # priority first; within it later stages first (finish work already paid for),
        # then the earliest deadline
        best = min(runnable, key=lambda c: (-max(w.priority for w in c[2]), not any(w.downstream for w in c[2]),
                                            min(w.deadline_ms for w in c[2])), default=None)
        probe = best is None and self._probe(candidates, profiles, now_ms)
        if probe:
            best = next(c for c in candidates if c[2])
        dropped: list[tuple[int, str]] = []
        for session, items, batch, ahead, wake, _ in candidates:
            if (best is not None and session == best[0]) or wake is not None:
                dropped += [(w.item_id, "deadline") for w in ahead]
                chosen = {w.item_id for w in batch} | {w.item_id for w in ahead}
                dropped += self._certain_misses([w for w in items if w.item_id not in chosen], profiles[session],
                                                now_ms)
            elif not batch:
                dropped += [(w.item_id, "deadline") for w in items]
            else:  # stays queued: drop only what misses even alone, even now
                dropped += self._certain_misses(items, profiles[session], now_ms)
        flows = {w.item_id: w.flow for c in candidates for w in c[1]}
        self._account([flows[i] for i, _ in dropped], 0.0)
        if best is not None:
            self._account([w.flow for w in best[2]], 1.0)
        wakes = [c[4] for c in candidates if c[4] is not None]
        if best is None:
            return Plan(dropped=tuple(dropped), wait_until_ms=min(wakes, default=None))
        return Plan(best[0], tuple(w.item_id for w in best[2]), tuple(dropped), probe=probe)

    def _probe(self, candidates: list[list], profiles: Mapping[str, Profile], now_ms: float) -> bool:
        """With nothing to run, turn one session whose whole queue would be dropped into
        a probe (its candidate gets a batch: the latest-deadline items of its highest
        priority, as many as it plans, and the rest of its queue to drop). Only items
        that a device `PROBE_RANGE` times faster than the profile could still finish in
        time are probed: one already past its deadline shows nothing. The session
        probed longest ago goes first; each at most once per its tightest SLO."""
        due = []
        for c in candidates:
            session, items = c[0], c[1]
            slo = min(w.slo_ms for w in items)
            last = self.probed.get(session)
            if math.isfinite(slo) and (last is None or now_ms - last >= slo):
                due.append((-items[0].priority, last if last is not None else -math.inf, session, c))
        for *_, c in sorted(due, key=lambda d: d[:3]):
            session, items, planned = c[0], c[1], c[5]
            soonest = now_ms + profiles[session].latency_ms(1) / PROBE_RANGE
            top = [w for w in items if w.priority == items[0].priority and w.deadline_ms >= soonest]
            if not top:
                continue
            batch = sorted(top, key=lambda w: w.deadline_ms)[-planned:]
            chosen = {w.item_id for w in batch}
            c[2], c[3] = batch, [w for w in items if w.item_id not in chosen]
            if len(self.probed) > MAX_FLOWS:
                self.probed.clear()
            self.probed[session] = now_ms
            return True
        return False

    def shed(self, flow: str) -> None:
        """An item of `flow` was dropped before it reached a queue (at admission)."""
        self._account([flow], 0.0)

    def _account(self, flows: list[str], outcome: float) -> None:
        if len(self.served) > MAX_FLOWS:  # flows come and go (gRPC peers): forget them all now and then
            self.served.clear()
        for flow in flows:
            self.served[flow] = (1 - FAIRNESS_ALPHA) * self.served.get(flow, 1.0) + FAIRNESS_ALPHA * outcome

    def _defer_until(self, batch: list[WorkItem], planned: int, profile: Profile, now_ms: float) -> float | None:
        """A batch smaller than planned may wait until the latest start its deadline
        allows, so that other sessions use the device meanwhile and it fills up
        (`plan` lets a batch wait only when another session has work to run). Returns
        that latest start, or None to run now. The margin covers one lower-priority
        batch (bounded by `block_share` of the SLO), the smallest one, and
        `defer_safety` of the SLO for what profiles do not foresee."""
        if not batch or len(batch) >= planned:
            return None
        slo = min(w.slo_ms for w in batch)
        if slo == float("inf"):
            return None  # no SLO known: nothing to plan a wait against
        earliest = min(w.deadline_ms for w in batch)
        margin = (self.block_share + self.defer_safety) * slo + profile.latency_ms(1, self.sigmas)
        latest_start = earliest - profile.latency_ms(planned, self.sigmas) - margin
        return latest_start if latest_start > now_ms else None

    def _window(self, items: list[WorkItem], profile: Profile,
                now_ms: float) -> tuple[list[WorkItem], list[WorkItem], int]:
        """(batch, items to drop now, planned size); an empty batch means nothing can make
        it. `items` come priority first, then deadline. The batch comes from the highest
        priority class that can meet a deadline: Nexus's window slides along that class
        in deadline order, dropping its own items ahead of the first window that fits,
        and grows to the largest size that still meets the earliest deadline in it, never
        past the profile's efficient batch (a bigger one only runs fewer items a second).
        Lower classes then fill it, up to the planned size and lengthening it by at
        most `block_share` of its SLO, with items whose deadlines it meets. A lower
        class is never dropped for a higher one's window: its items wait, and go when
        they would miss even alone (`_certain_misses`), so under overload the lowest
        priority is shed first."""
        tightest = min(w.budget_ms for w in items)
        planned = max(1, profile.largest_batch_within(tightest / 2, sigmas=self.sigmas))
        limit = min(self._priority_cap(items, profile), profile.efficient_batch)
        hopeless: list[WorkItem] = []
        for start, end in _classes(items):
            batch, ahead = self._class_window(items[start:end], profile, now_ms, min(planned, limit), limit)
            hopeless += ahead
            if batch:
                fill_to = min(limit, max(len(batch), planned))
                earliest = min(w.deadline_ms for w in batch)
                # lower priorities may lengthen this batch by what one of their own
                # batches could keep the device anyway (`block_share` of its SLO)
                longest = profile.latency_ms(len(batch), self.sigmas) + \
                    self.block_share * min(w.slo_ms for w in batch)
                for w in items[end:]:
                    if len(batch) >= fill_to or profile.latency_ms(len(batch) + 1, self.sigmas) > longest:
                        break
                    if profile.latency_ms(len(batch) + 1, self.sigmas) <= min(earliest, w.deadline_ms) - now_ms:
                        batch.append(w)
                        earliest = min(earliest, w.deadline_ms)
                return batch, hopeless, min(planned, limit)
        return [], items, min(planned, limit)

    def _class_window(self, items: list[WorkItem], profile: Profile, now_ms: float, window: int,
                      limit: int) -> tuple[list[WorkItem], list[WorkItem]]:
        """Nexus's early drop over items of one priority, in deadline order: (batch, the
        items ahead of it). An item the full window would miss is kept when a smaller
        batch that starts with it meets its own deadlines and still leaves the next
        window time to meet theirs (`_smaller_batch`): after a stall, the head of the
        queue runs in a smaller batch rather than being dropped, while under overload,
        when the next window would miss too, the head is dropped as Nexus drops it."""
        for i in range(len(items)):
            size = min(window, len(items) - i)
            earliest = min(w.deadline_ms for w in items[i:i + size])
            if profile.latency_ms(size, self.sigmas) <= earliest - now_ms:
                while size < min(len(items) - i, limit):  # grow while it still meets its earliest deadline
                    earliest = min(earliest, items[i + size].deadline_ms)
                    if profile.latency_ms(size + 1, self.sigmas) > earliest - now_ms:
                        break
                    size += 1
                return list(items[i:i + size]), list(items[:i])
            smaller = self._smaller_batch(items[i:], profile, now_ms, size) if i < window else 0
            if smaller:
                return list(items[i:i + smaller]), list(items[:i])
        return [], list(items)

    def _smaller_batch(self, items: list[WorkItem], profile: Profile, now_ms: float, window: int) -> int:
        """The largest batch under `window` that starts with items[0], meets its own
        earliest deadline, and after which the next window of items still meets its
        own; 0 when there is none."""
        for size in range(window - 1, 0, -1):
            took = profile.latency_ms(size, self.sigmas)
            if took > min(w.deadline_ms for w in items[:size]) - now_ms:
                continue
            rest = items[size:size + window]
            if not rest or took + profile.latency_ms(len(rest), self.sigmas) <= \
                    min(w.deadline_ms for w in rest) - now_ms:
                return size
        return 0

    def _priority_cap(self, items: list[WorkItem], profile: Profile) -> int:
        """Largest batch that blocks the device for at most `block_share` of the tightest
        SLO of any higher-priority work seen (at least 1: some progress is always made)."""
        mine = max(w.priority for w in items)
        higher = [s for p, s in self.slo_by_priority.items() if p > mine]
        if not higher:
            return profile.max_batch
        return max(1, profile.largest_batch_within(min(higher) * self.block_share, sigmas=self.sigmas))

    def _certain_misses(self, items: Sequence[WorkItem], profile: Profile, now_ms: float) -> list[tuple[int, str]]:
        """Items that miss their deadline even alone, now (they can only do worse later)."""
        alone = profile.latency_ms(1, self.sigmas)
        return [(w.item_id, "deadline") for w in items if w.deadline_ms - now_ms < alone]


def _bucket(deadline_ms: float, width_ms: float) -> float:
    """Deadlines within one bucket count as due at the same time (no deadline: last)."""
    return deadline_ms // width_ms if math.isfinite(deadline_ms) else math.inf


def _classes(items: Sequence[WorkItem]) -> list[tuple[int, int]]:
    """(start, end) of each run of equal priority in `items` (sorted priority first)."""
    bounds, start = [], 0
    for i in range(1, len(items) + 1):
        if i == len(items) or items[i].priority != items[start].priority:
            bounds.append((start, i))
            start = i
    return bounds


@dataclass
class TfsPolicy:
    max_batch: int = 8
    batch_timeout_ms: float = 10.0
    name: str = "tfs"

    def feedback(self, session: str, batch_size: int, latency_ms: float, budget_ms: float) -> None:
        pass

    def plan(self, queues: Queues, profiles: Mapping[str, Profile], now_ms: float) -> Plan:
        ready, wake = [], math.inf
        for session, queue in queues.items():
            if not queue:
                continue
            oldest = queue[0].arrival_ms
            if len(queue) >= self.max_batch or now_ms - oldest >= self.batch_timeout_ms:
                ready.append((oldest, session))
            else:
                wake = min(wake, oldest + self.batch_timeout_ms)
        if not ready:
            return Plan(wait_until_ms=None if math.isinf(wake) else wake)
        _, session = min(ready)
        return Plan(session, tuple(w.item_id for w in queues[session][: self.max_batch]))


@dataclass
class ClipperPolicy:
    step: int = 2
    backoff: float = 0.9
    name: str = "clipper"
    batch_size: dict[str, int] = field(default_factory=dict)

    def feedback(self, session: str, batch_size: int, latency_ms: float, budget_ms: float) -> None:
        current = self.batch_size.get(session, 1)
        if latency_ms > budget_ms:
            self.batch_size[session] = max(1, int(current * self.backoff))
        elif batch_size >= current:  # only grow when the full batch was used
            self.batch_size[session] = current + self.step

    def plan(self, queues: Queues, profiles: Mapping[str, Profile], now_ms: float) -> Plan:
        heads = [(q[0].arrival_ms, s) for s, q in queues.items() if q]
        if not heads:
            return Plan()
        _, session = min(heads)
        size = min(self.batch_size.get(session, 1), profiles[session].max_batch)
        return Plan(session, tuple(w.item_id for w in queues[session][:size]))


@dataclass
class NoBatchPolicy:
    name: str = "nobatch"

    def feedback(self, session: str, batch_size: int, latency_ms: float, budget_ms: float) -> None:
        pass

    def plan(self, queues: Queues, profiles: Mapping[str, Profile], now_ms: float) -> Plan:
        heads = [(q[0].arrival_ms, s, q[0].item_id) for s, q in queues.items() if q]
        if not heads:
            return Plan()
        _, session, item_id = min(heads)
        return Plan(session, (item_id,))


def make_policy(name: str, **options) -> Policy:
    makers = {"nexus": NexusPolicy, "tfs": TfsPolicy, "clipper": ClipperPolicy, "nobatch": NoBatchPolicy}
    try:
        return makers[name](**options)
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; use one of {POLICIES}") from None
    except TypeError as exc:
        raise ValueError(f"policy {name!r}: {exc}") from None
