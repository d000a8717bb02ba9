"""Scheduling policies: a pure function of the queues, the profiles and `now`.

The engine loop is schedule -> execute -> update. A policy's `plan` looks at every
session's queue (one session per fragment hash; items in arrival order) and returns a
`Plan`: which session runs next, which of its items form the batch, and which items
anywhere are dropped because they can no longer meet their deadline. It touches no
tensor and reads no clock; tests drive it with constructed queues and a number for now.

Policies:
- `nexus` (Nexus, SOSP 2019): sessions by priority, then earliest deadline. Within a
  session items are taken by priority, then deadline. The planned batch B is the largest whose
  latency fits twice into the tightest stage budget queued (a request may wait one
  batch, then run in the next). Early drop: slide a window of B along the queue and
  drop the items ahead of the first window whose earliest deadline leaves room for the
  whole window; then grow the batch to the largest size that still meets that
  deadline. A lower-priority batch is also capped so it never blocks the device longer
  than half the tightest budget of higher-priority work seen: higher-priority requests
  wait at most one such fragment (preemption happens between fragments).
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

from engine.profiles import Profile

POLICIES = ("nexus", "tfs", "clipper", "nobatch")


@dataclass(frozen=True)
class WorkItem:
    item_id: int
    arrival_ms: float  # when it entered this session's queue
    deadline_ms: float  # this stage's deadline
    budget_ms: float  # this stage's share of the SLO (deadline - capture, for this stage)
    priority: int = 0


@dataclass(frozen=True)
class Plan:
    session: str | None = None
    batch: tuple[int, ...] = ()  # item ids, in the order to stack them
    dropped: tuple[tuple[int, str], ...] = ()  # (item id, reason)
    wait_until_ms: float | None = None  # nothing to run before this time (batch timeouts)

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
    # priority -> tightest stage budget seen, kept across plans (updated by `observe`)
    budgets_by_priority: dict[int, float] = field(default_factory=dict)

    def observe(self, item: WorkItem) -> None:
        """Remember the tightest budget per priority, to bound lower-priority batches."""
        current = self.budgets_by_priority.get(item.priority)
        if current is None or item.budget_ms < current:
            self.budgets_by_priority[item.priority] = item.budget_ms

    def feedback(self, session: str, batch_size: int, latency_ms: float, budget_ms: float) -> None:
        pass

    def plan(self, queues: Queues, profiles: Mapping[str, Profile], now_ms: float) -> Plan:
        candidates = []  # (session, items by deadline, batch, items ahead of the batch)
        for session, queue in queues.items():
            if queue:
                for item in queue:
                    self.observe(item)
                items = sorted(queue, key=lambda w: (-w.priority, w.deadline_ms, w.arrival_ms))
                candidates.append((session, items, *self._window(items, profiles[session], now_ms)))
        runnable = [c for c in candidates if c[2]]
        best = min(runnable, key=lambda c: (-max(w.priority for w in c[2]), c[2][0].deadline_ms),
                   default=None)
        dropped: list[tuple[int, str]] = []
        for session, items, batch, ahead in candidates:
            if best is not None and session == best[0]:
                dropped += [(w.item_id, "deadline") for w in ahead]
            elif not batch:
                dropped += [(w.item_id, "deadline") for w in items]
            else:  # stays queued: drop only what misses even alone, even now
                dropped += self._certain_misses(items, profiles[session], now_ms)
        if best is None:
            return Plan(dropped=tuple(dropped))
        return Plan(best[0], tuple(w.item_id for w in best[2]), tuple(dropped))

    def _window(self, items: list[WorkItem], profile: Profile, now_ms: float) -> tuple[list[WorkItem], list[WorkItem]]:
        """(batch, items ahead of it to drop); an empty batch means nothing can make it."""
        tightest = min(w.budget_ms for w in items)
        planned = max(1, profile.largest_batch_within(tightest / 2, sigmas=self.sigmas))
        cap = self._priority_cap(items, profile)
        for i in range(len(items)):
            window = min(planned, len(items) - i, cap)
            earliest = min(w.deadline_ms for w in items[i:i + window])
            if profile.latency_ms(window, self.sigmas) <= earliest - now_ms:
                size = window  # grow while the batch still meets its earliest deadline
                while size < min(len(items) - i, cap, profile.max_batch):
                    earliest = min(earliest, items[i + size].deadline_ms)
                    if profile.latency_ms(size + 1, self.sigmas) > earliest - now_ms:
                        break
                    size += 1
                return items[i:i + size], items[:i]
        return [], items

    def _priority_cap(self, items: list[WorkItem], profile: Profile) -> int:
        """Largest batch that blocks the device for at most half the tightest budget of
        any higher-priority work seen (at least 1: some progress is always made)."""
        mine = max(w.priority for w in items)
        higher = [b for p, b in self.budgets_by_priority.items() if p > mine]
        if not higher:
            return profile.max_batch
        return max(1, profile.largest_batch_within(min(higher) / 2, sigmas=self.sigmas))

    def _certain_misses(self, items: Sequence[WorkItem], profile: Profile, now_ms: float) -> list[tuple[int, str]]:
        """Items that miss their deadline even alone, now (they can only do worse later)."""
        alone = profile.latency_ms(1, self.sigmas)
        return [(w.item_id, "deadline") for w in items if w.deadline_ms - now_ms < alone]


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
