"""Fragments that run with the GIL released.

Eager PyTorch releases the GIL inside each operator and takes it back between them. In
`vigil serve` other Python threads (decoders, trackers, the HTTP server) hold the GIL
most of the time, and each operator then waits up to a switch interval to get it back:
beside a few busy Python threads a SceneDet backbone batch runs many times slower than
on its own. A TorchScript graph runs in C++ with the GIL released for the whole call,
and loses far less beside the same threads.

So each input shape (batch size and resolution) is traced once, the first time it is
seen, and the trace is checked against the eager result on that same input. A module
that cannot be traced, whose control flow depends on values (the tracer warns), or
whose trace disagrees runs eagerly from then on. The cache is bounded: shapes past
`MAX_SHAPES` run eagerly.

A trace usually holds for every batch size: the tracer records the batch dimension as
it is read, not as a constant. Tracing costs several batches' time, and `vigil serve`
meets new batch sizes for minutes: tracing each one on a serving lane stalls it and
sheds a burst of frames. So the first trace of a resolution is tried on the next batch
size seen, against eager: if it agrees, it serves every batch size of that resolution
from then on; if not (it baked its batch size in), each size is traced as above.
"""

from __future__ import annotations

import logging
import threading
import warnings
from typing import Any, Hashable

log = logging.getLogger("vigil.engine")

MAX_SHAPES = 64  # traced input shapes kept per fragment (batch sizes x resolutions)
RTOL, ATOL = 1e-4, 1e-4


def shape_key(x: Any, skip: int = 0) -> Hashable:
    """The input's shapes and dtypes, less their first `skip` dimensions (1: the batch,
    which gives the inputs one batch-generic trace serves)."""
    if isinstance(x, dict):
        return tuple((k, tuple(v.shape[skip:]), str(v.dtype)) for k, v in sorted(x.items()))
    return tuple(x.shape[skip:]), str(x.dtype)


def family_key(x: Any) -> Hashable:
    return shape_key(x, skip=1)


def _same(a: Any, b: Any) -> bool:
    import torch

    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return isinstance(b, (tuple, list)) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if torch.is_tensor(a):
        return torch.is_tensor(b) and a.shape == b.shape and torch.allclose(a.float(), b.float(), RTOL, ATOL)
    return a == b


class TracedModule:
    """Calls `module` under inference mode through a TorchScript trace per resolution
    (per input shape where a trace holds for one batch size only)."""

    def __init__(self, module, name: str = "") -> None:
        self.module = module
        self.name = name
        self._traces: dict[Hashable, Any] = {}  # shape -> trace, or None: run eagerly
        # shape less batch -> the first trace made for it, until tried at a second batch size
        self._untried: dict[Hashable, Any] = {}
        # shape less batch -> a trace that held at two batch sizes, or None: trace each size
        self._generic: dict[Hashable, Any] = {}
        self._lock = threading.Lock()
        self.enabled = True

    def __call__(self, x: Any) -> Any:
        import torch

        key = shape_key(x)
        trace = self._traces.get(key, False)
        if trace is False:
            generic = self._generic.get(family_key(x))
            trace = False if generic is None else generic
        with torch.inference_mode():
            if trace is False:
                return self._first(key, x)
            return self.module(x) if trace is None else trace(x)

    def _first(self, key: Hashable, x: Any) -> Any:
        """The eager result for a new shape, traced and checked beside it."""
        import torch

        eager = self.module(x)
        with self._lock:
            if not self.enabled or len(self._traces) >= MAX_SHAPES:
                self._traces.setdefault(key, None)
                return eager
            family = family_key(x)
            untried = self._untried.pop(family, None)
        if untried is not None:
            generic = self._holds(untried, x, eager)
            with self._lock:
                self._generic[family] = untried if generic else None
            if generic:
                return eager
        trace = None
        try:
            with warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always")
                candidate = torch.jit.trace(self.module, (x,), strict=False, check_trace=False)
            # the tracer warns when a value steers Python (a branch or a loop on a tensor):
            # the trace would replay this input's path for every other
            steered = [str(w.message) for w in said if issubclass(w.category, torch.jit.TracerWarning)]
            if steered:
                log.info("fragment %s runs eagerly: its control flow depends on values (%s)", self.name,
                         steered[0][:200])
            elif _same(eager, candidate(x)):
                trace = candidate
            else:
                log.info("fragment %s: its trace differs from eager PyTorch at %s; it runs eagerly", self.name, key)
        except Exception as exc:  # not traceable: eager is always correct
            log.info("fragment %s cannot be traced (%s: %s); it runs eagerly", self.name, type(exc).__name__, exc)
        with self._lock:
            self._traces[key] = trace
            if trace is None:
                self.enabled = False  # what failed for one shape fails for the others: do not retry
            elif family not in self._generic:
                self._untried.setdefault(family, trace)
        return eager

    def _holds(self, trace: Any, x: Any, eager: Any) -> bool:
        """Whether a trace made at another batch size gives eager's result on `x`."""
        try:
            if _same(eager, trace(x)):
                return True
        except Exception:  # e.g. a list unpacked to the traced batch's length
            pass
        log.info("fragment %s: its trace holds for one batch size only; each size is traced", self.name)
        return False
