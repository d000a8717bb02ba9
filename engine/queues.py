"""One queue per session (a fragment hash), with shared inputs.

An entry is one input to a fragment. Every admitted request that needs the same
fragment on the same input (equal `input_key`: stream and frame) subscribes to the
entry already queued instead of adding its own, so a shared backbone runs once per
frame for every app and model that contains it. The entry takes the most urgent
terms of its subscribers: the earliest deadline, the smallest budget, the highest
priority. Pure bookkeeping, called under the engine's lock.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Hashable

from engine.requests import Request
from engine.scheduler import WorkItem
from engine.servables import Servable


@dataclass(eq=False)  # identity: two requests are never "equal"
class Admitted:
    """A request on its way through its model's fragments."""

    request: Request
    servable: Servable
    future: Future
    leaves: list[str]  # the heads it asked for
    needed: set[str]  # every fragment on the path to them
    stage: dict[str, tuple[float, float]]  # fragment -> (deadline_ms, budget_ms), engine/deadlines.py
    outputs: dict[str, Any] = field(default_factory=dict)
    finished: bool = False
    selected: dict | None = None  # the selection switch it saw (Result.selected)

    @property
    def root(self) -> str:
        return self.servable.model.path_to(self.leaves)[0]


@dataclass(eq=False)
class QueueEntry:
    item_id: int
    session: str
    key: Hashable | None
    input: Any
    arrival_ms: float
    downstream: bool  # a later stage: device work was already spent on it
    subscribers: list[tuple[Admitted, str]] = field(default_factory=list)  # (request, fragment in its model)
    deadline_ms: float = float("inf")
    budget_ms: float = float("inf")
    priority: int = 0
    slo_ms: float = float("inf")
    flow: str = ""  # the first subscriber's app (fair shares between apps)

    def subscribe(self, admitted: Admitted, fragment: str) -> None:
        self.subscribers.append((admitted, fragment))
        self.flow = self.flow or admitted.request.app
        deadline, budget = admitted.stage[fragment]
        self.deadline_ms = min(self.deadline_ms, deadline)
        self.budget_ms = min(self.budget_ms, budget)
        self.priority = max(self.priority, admitted.request.priority)
        self.slo_ms = min(self.slo_ms, admitted.request.slo_ms)

    def work_item(self) -> WorkItem:
        return WorkItem(self.item_id, self.arrival_ms, self.deadline_ms, self.budget_ms, self.priority, self.slo_ms,
                        self.downstream, self.flow)

    def shape(self) -> Any:
        return input_shape(self.input)


def input_shape(x: Any) -> Any:
    """An input's shape: a tensor's, or a dict's keys with their values' (nested); other
    values have none. Only inputs of one shape stack into a batch."""
    if isinstance(x, dict):
        return tuple(sorted((k, input_shape(v)) for k, v in x.items()))
    return tuple(getattr(x, "shape", ()))


class QueueFull(Exception):
    pass


class SessionQueues:
    def __init__(self, max_queue: int) -> None:
        self.max_queue = max_queue
        self._queues: dict[str, list[QueueEntry]] = {}
        self._by_input: dict[tuple[str, Hashable], QueueEntry] = {}
        self._next_id = 0

    def queued(self, session: str, key: Hashable | None) -> QueueEntry | None:
        """The entry of this input already waiting for this session, if any."""
        return None if key is None else self._by_input.get((session, key))

    def add(self, session: str, key: Hashable | None, value: Any, now_ms: float, downstream: bool) -> QueueEntry:
        queue = self._queues.setdefault(session, [])
        if len(queue) >= self.max_queue:
            raise QueueFull(f"{len(queue)} entries")
        self._next_id += 1
        entry = QueueEntry(self._next_id, session, key, value, now_ms, downstream)
        queue.append(entry)
        if key is not None:
            self._by_input[(session, key)] = entry
        return entry

    def take(self, ids: dict[int, str]) -> list[tuple[QueueEntry, str]]:
        """Remove the entries with these ids; each comes back with its id's value (a reason)."""
        taken: list[tuple[QueueEntry, str]] = []
        if not ids:
            return taken
        for session, queue in self._queues.items():
            keep = []
            for e in queue:
                if e.item_id in ids:
                    taken.append((e, ids[e.item_id]))
                    if e.key is not None:
                        self._by_input.pop((session, e.key), None)
                else:
                    keep.append(e)
            self._queues[session] = keep
        return taken

    def take_all(self, reason: str) -> list[tuple[QueueEntry, str]]:
        return self.take({e.item_id: reason for q in self._queues.values() for e in q})

    def take_batch(self, session: str, item_ids: list[int]) -> list[QueueEntry]:
        """The planned entries, in the plan's order, that stack with the first one."""
        order = {item_id: i for i, item_id in enumerate(item_ids)}
        planned = sorted((e for e in self._queues[session] if e.item_id in order), key=lambda e: order[e.item_id])
        shape = planned[0].shape()
        batch = [e for e in planned if e.shape() == shape]
        self.take({e.item_id: "" for e in batch})
        return batch

    def work(self) -> dict[str, list[WorkItem]]:
        """What the policy plans over: the non-empty queues."""
        return {s: [e.work_item() for e in q] for s, q in self._queues.items() if q}

    def entries(self, session: str) -> list[QueueEntry]:
        return self._queues.get(session, [])

    def depths(self) -> dict[str, int]:
        return {s: len(q) for s, q in self._queues.items()}

    def empty(self) -> bool:
        return not any(self._queues.values())
