"""Routing a session's requests over the devices a plan gave it: deficit round robin.

A placement (cluster/placement.py) may split one session over several devices, each
serving a planned rate. A router sends each request to one of them so that, over
time, each gets its share of the requests in proportion to its planned rate, smoothly
(no device gets a long run of requests while another waits), as Nexus's frontends do
with the route tables its scheduler pushes. Each round, every device's deficit grows
by its weight (its share of the session's rate); a request goes to the device with
the largest deficit, which pays one request for it.

Pure and single-threaded: the caller holds whatever lock guards it.
"""

from __future__ import annotations

import math
from typing import Mapping


class NoRoute(LookupError):
    """The session has no device to send to (none planned, or every one lost)."""


class DeficitRoundRobin:
    def __init__(self, weights: Mapping[str, float] | None = None) -> None:
        self._weights: dict[str, float] = {}
        self._deficit: dict[str, float] = {}
        self.update(weights or {})

    def update(self, weights: Mapping[str, float]) -> None:
        """A new route table (device -> planned rate). Devices that stay keep their
        deficit, so a table pushed every epoch does not reset the smoothing."""
        for device, w in weights.items():
            if not (math.isfinite(w) and w >= 0):
                raise ValueError(f"weight of {device!r} must be finite and >= 0; was {w}")
        total = sum(weights.values())
        self._weights = {d: w / total for d, w in weights.items() if w > 0} if total > 0 else {}
        self._deficit = {d: self._deficit.get(d, 0.0) for d in self._weights}

    def remove(self, device: str) -> None:
        """A device was lost: no request goes there from now on (the rest share its load
        until the next table)."""
        self.update({d: w for d, w in self._weights.items() if d != device})

    def next(self) -> str:
        """The device for the next request."""
        if not self._weights:
            raise NoRoute("no device serves this session")
        for device, w in self._weights.items():
            self._deficit[device] += w
        device = max(self._deficit, key=lambda d: (self._deficit[d], d))
        self._deficit[device] -= 1.0
        return device

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(sorted(self._weights))
