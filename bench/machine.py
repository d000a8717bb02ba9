"""What the machine itself did during a bench window, beside what Vigil did.

On a virtual machine the hypervisor may run other guests on "our" cores: Linux counts
that time as `steal` in /proc/stat. A window with a third of the CPU stolen serves a
third less, and nothing in Vigil's own figures shows why; benches report the share so
that a slow window can be told from a slow change.
"""

from __future__ import annotations

from engine.machine_load import FIELDS, cpu_times

__all__ = ["cpu_times", "steal_share"]


def steal_share(before: dict[str, int] | None, after: dict[str, int] | None) -> float | None:
    """Of the CPU time that passed between two readings, the share the hypervisor took."""
    if before is None or after is None:
        return None
    spent = {k: after[k] - before[k] for k in FIELDS}
    total = sum(spent.values())
    return round(spent["steal"] / total, 3) if total > 0 else None
