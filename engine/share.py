"""Device turns between the vision sessions and a guest that runs in steps (the LLM).

The guest is one more session of the vision schedule: while it has work it is
`active` and takes turns, one step each, declaring each step's cost. A step runs in two
cases. In the slack vision leaves: when the plan has nothing to run for at
least one guest step (no work, or a batch that waits for its latest start), the
guest's step costs vision nothing. And by share: while the guest is active, every
millisecond of vision work earns it `min_share / (1 - min_share)` of a millisecond of
credit; when its credit covers a step, the step runs before the next vision batch and
spends it. Under full vision load the guest therefore gets `min_share` of the device,
a step at a time, and no more: after a vision batch the guest runs at most the steps
that batch earned it, plus one. Credit is earned only while the guest is active, and what
is left over is less than one step: an idle guest saves nothing up, so it never takes
a burst of steps when work comes back.

Pure bookkeeping: the engine calls it under its lock with times it measured.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_SHARE = 0.9  # the guest may be given at most this much; vision always keeps some


@dataclass
class DeviceShare:
    min_share: float = 0.1
    credit_ms: float = 0.0
    active: bool = False  # a guest has work: it takes turn after turn until it leaves
    cost_ms: float = 0.0  # what the guest says its next step costs
    granted: bool = False  # the device is the guest's for one step
    by_share: bool = False  # ... on its credit (which the step's measured time then spends)
    guest_ms: float = 0.0  # device time of guest steps, in total
    vision_ms: float = 0.0  # device time of vision batches, in total
    guest_steps_by_share: int = 0
    guest_steps_in_slack: int = 0

    def __post_init__(self) -> None:
        _check(self.min_share)

    def join(self, min_share: float) -> None:
        """A guest has work and will take turns, each step declaring its cost."""
        self.min_share = _check(min_share)
        self.active = True

    def leave(self) -> None:
        self.active = self.granted = False

    def step_costs(self, cost_ms: float) -> None:
        self.cost_ms = max(0.0, cost_ms)

    def vision_ran(self, elapsed_ms: float) -> None:
        self.vision_ms += elapsed_ms
        if self.active and self.min_share > 0:
            earned = elapsed_ms * self.min_share / (1.0 - self.min_share)
            self.credit_ms = min(self.credit_ms + earned, self.cost_ms + earned)

    def due(self) -> bool:
        """The guest's credit covers its next step: it goes before the next vision batch."""
        return self.active and not self.granted and self.min_share > 0 and self.credit_ms >= self.cost_ms

    def fits_in(self, slack_ms: float | None) -> bool:
        """The guest's next step fits in `slack_ms` of idle device (None: idle until work
        arrives)."""
        return self.active and not self.granted and (slack_ms is None or slack_ms >= self.cost_ms)

    def grant(self, by_share: bool) -> None:
        self.granted, self.by_share = True, by_share
        if by_share:
            self.guest_steps_by_share += 1
        else:
            self.guest_steps_in_slack += 1

    def guest_ran(self, elapsed_ms: float) -> None:
        if self.by_share:  # a step longer than it said is paid in full (credit may go below 0)
            self.credit_ms -= elapsed_ms
        self.granted = self.by_share = False
        self.guest_ms += elapsed_ms

    def report(self) -> dict:
        total = self.guest_ms + self.vision_ms
        return {"guest_share": round(self.guest_ms / total, 4) if total else 0.0, "min_share": self.min_share,
                "guest_steps_by_share": self.guest_steps_by_share, "guest_steps_in_slack": self.guest_steps_in_slack}


def _check(min_share: float) -> float:
    if not 0.0 <= min_share <= MAX_SHARE:
        raise ValueError(f"min_share: {min_share} is outside 0 to {MAX_SHARE}")
    return min_share
