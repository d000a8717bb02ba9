"""What the machine itself did during a bench window, beside what Vigil did.

On a virtual machine the hypervisor may run other guests on "our" cores: Linux counts
that time as `steal` in /proc/stat. A window with a third of the CPU stolen serves a
third less, and nothing in Vigil's own figures shows why; benches report the share so
that a slow window can be told from a slow change.
"""

from __future__ import annotations

from pathlib import Path

STAT = Path("/proc/stat")
FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def cpu_times(text: str | None = None) -> dict[str, int] | None:
    """The machine's CPU time counters (clock ticks, all cores) from /proc/stat's
    `cpu` line; None where there is no such file (not Linux)."""
    if text is None:
        try:
            text = STAT.read_text()
        except OSError:
            return None
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            values = [int(v) for v in parts[1:1 + len(FIELDS)]]
            return dict(zip(FIELDS, values + [0] * (len(FIELDS) - len(values))))
    return None


def steal_share(before: dict[str, int] | None, after: dict[str, int] | None) -> float | None:
    """Of the CPU time that passed between two readings, the share the hypervisor took."""
    if before is None or after is None:
        return None
    spent = {k: after[k] - before[k] for k in FIELDS}
    total = sum(spent.values())
    return round(spent["steal"] / total, 3) if total > 0 else None
