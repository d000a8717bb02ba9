"""Why a run's latency figures are low, when the machine was busy: in words, with what to do.

Latency, and the share of frames within their SLO, depend on what else the machine ran:
the same file gives the same counts on an idle machine and a busy one, but not the
same latency. Two things slow it. Other processes that take cores while the run goes
make every batch slower. Other processes that took cores while a model was profiled
make its profile slow, and the engine plans its batches from that profile: such a
profile is used for that run only, not stored (engine/servables.py), so the next run on
an idle machine measures it again.

`notes` turns both into sentences for the summary and the table's footnotes, for the
apps whose share within SLO fell short of `SLO_GOAL`; a run whose apps all met it
needs no explanation.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from engine.servables import OTHERS_MAX_CORES

SLO_GOAL = 0.99  # Nexus's bar: a rate is served when 99% of its requests finish within the SLO
BUSY_SHARE = 0.25  # of the machine's cores, taken by others during a run, that slows it visibly


@dataclass(frozen=True)
class BusyProfile:
    model: str
    others_cores: float  # what other processes took while it was profiled


def machine_cores() -> int:
    """All the machine's cores: what others' load (engine/machine_load.py) is measured against."""
    return os.cpu_count() or 1


def notes(apps: dict[str, dict], profiles: list[BusyProfile], others_cores: float | None, cores: int,
          realtime: bool) -> list[dict]:
    """Footnotes for the summary: each {"apps": [...], "text": ...}. `apps`: the summary's
    apps (app -> {"detector", "slo_attainment", ...}); `profiles`: each model the apps
    ran, once, with what others took while it was profiled; `others_cores`: what others
    took during the run (None: not known). The run's load comes first: it slows every
    batch, a slow profile only the plans."""
    short = {name: a for name, a in apps.items()
             if a.get("slo_attainment") is not None and a["slo_attainment"] < SLO_GOAL}
    out = []
    if others_cores is not None and others_cores >= BUSY_SHARE * cores and short:
        hit = list(short)
        same = "" if realtime else (" Counts, tracks and events do not depend on it: every sampled frame was "
                                    "analysed.")
        out.append({"apps": hit, "text": (
            f"Other processes took {others_cores:.1f} of this machine's {cores} cores during the run, so batches "
            f"ran slower than this machine runs them alone: latency was longer, and fewer frames finished within "
            f"their SLO ({_shares(hit, short)}).{same} For latency figures, run again on an idle machine (`top` "
            "shows what else runs).")})
    for p in profiles:
        hit = [name for name, a in short.items() if a["detector"] == p.model]
        if hit and p.others_cores > OTHERS_MAX_CORES:
            out.append({"apps": hit, "text": (
                f"{p.model} was profiled while other processes took {p.others_cores:.1f} of this machine's {cores} "
                f"cores, so its profile is slower than this machine runs it alone, and the engine planned the "
                f"batches of {_names(hit)} from it ({_shares(hit, short)} within SLO). The profile was used for "
                f"this run only: run again when the machine is idle, and {p.model} is profiled again and kept.")})
    return out


def _names(apps: list[str]) -> str:
    return apps[0] if len(apps) == 1 else ", ".join(apps[:-1]) + " and " + apps[-1]


def _shares(apps: list[str], summary: dict[str, dict]) -> str:
    return ", ".join(f"{name} {summary[name]['slo_attainment']:.1%}" for name in apps)
