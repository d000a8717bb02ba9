"""A run on a busy machine says why its latency figures are low, in words, and what to do
(runtime/busy_machine.py), in summary.json and under `vigil run`'s table."""

from __future__ import annotations

import pytest

from runtime.busy_machine import BusyProfile, notes
from vigil.report import format_table

APPS = {"people-counter": {"detector": "coco", "slo_attainment": 0.266},
        "vehicle-counter": {"detector": "coco", "slo_attainment": 0.266},
        "motion": {"detector": "motion", "slo_attainment": 1.0}}


def test_a_model_profiled_beside_busy_processes_is_named_with_the_apps_it_slowed_and_what_to_do():
    [note] = notes(APPS, [BusyProfile("coco", 1.08)], others_cores=0.1, cores=2, realtime=False)
    assert note["apps"] == ["people-counter", "vehicle-counter"]
    text = note["text"]
    assert text.startswith("coco was profiled while other processes took 1.1 of this machine's 2 cores")
    assert "people-counter 26.6%, vehicle-counter 26.6%" in text
    assert "run again when the machine is idle" in text


def test_a_run_beside_busy_processes_says_so_and_that_counts_do_not_depend_on_it():
    [note] = notes(APPS, [BusyProfile("coco", 0.05)], others_cores=1.2, cores=2, realtime=False)
    assert note["apps"] == ["people-counter", "vehicle-counter"]  # motion met its SLO
    assert note["text"].startswith("Other processes took 1.2 of this machine's 2 cores during the run")
    assert "Counts, tracks and events do not depend on it" in note["text"]
    [live] = notes(APPS, [], others_cores=1.2, cores=2, realtime=True)  # dropped frames change counts
    assert "do not depend" not in live["text"]


@pytest.mark.parametrize("apps, profiles, others_cores", [
    ({**APPS, "people-counter": {"detector": "coco", "slo_attainment": 0.995},
      "vehicle-counter": {"detector": "coco", "slo_attainment": 1.0}}, [BusyProfile("coco", 1.5)], 1.5),  # SLO met
    (APPS, [BusyProfile("coco", 0.2)], 0.3),  # an idle machine's noise: the profile was kept
    (APPS, [BusyProfile("other", 1.5)], None),  # another model: not these apps'
    ({"people-counter": {"detector": "coco", "slo_attainment": None}}, [BusyProfile("coco", 1.5)], 1.5),  # no frames
])
def test_nothing_to_explain(apps, profiles, others_cores):
    assert notes(apps, profiles, others_cores, cores=2, realtime=False) == []


def test_the_table_marks_the_figures_a_note_explains_and_prints_it_below():
    def app(attained: float) -> dict:
        return {"frames": 10, "tracks": 1, "lines": {}, "latency_ms": {"p50": 900.0, "p99": 2500.0},
                "slo_ms": 1000.0, "slo_attainment": attained, "warnings": []}

    summary = {"source": "vtest.avi", "frames_decoded": 20, "wall_s": 2.0, "fps": 10.0, "device": "cpu",
               "apps": {"people-counter": app(0.266), "motion": app(1.0)},
               "notes": [{"apps": ["people-counter"], "text": "coco was profiled while other processes took "
                                                              "1.1 of this machine's 2 cores: " + "why " * 40}]}
    lines = format_table(summary).splitlines()
    assert lines[3].split()[-2:] == ["26.6%", "[1]"] and lines[4].endswith("100.0%")
    assert lines[5].startswith("[1] coco was profiled while other processes took 1.1")
    assert len(lines) > 6 and all(len(line) <= 100 for line in lines[5:])  # wrapped


def test_a_busy_run_and_a_busy_profile_are_two_notes_the_run_first():
    both = notes(APPS, [BusyProfile("coco", 1.4)], others_cores=1.3, cores=2, realtime=False)
    assert [n["text"].split()[0] for n in both] == ["Other", "coco"]
