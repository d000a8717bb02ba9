"""`vigil run` checks what it was given before any model loads (cli/run.py): the source,
the apps' specs and detectors, and the output folder, each mistake named."""

from __future__ import annotations

import pytest

from cli.main import main
from support.processes import ROOT

CLIP = str(ROOT / "sample_videos" / "street_a.mp4")


@pytest.fixture
def never_runs(monkeypatch):
    """A run that gets as far as loading models fails the test."""
    def run_offline(*args, **kwargs):
        raise AssertionError("run_offline was called: models would load before the inputs were checked")

    monkeypatch.setattr("runtime.offline.run_offline", run_offline)


@pytest.mark.parametrize("argv, says, code", [
    (["missing.mp4"], "error: missing.mp4: no such file\n", 1),
    ([str(ROOT / "sample_videos")], "not a file", 1),
    (["foo://bar"], "unknown URL scheme 'foo'", 1),
    (["rtsp://127.0.0.1:8554/cam"], "runs under `vigil serve`", 1),
    (["synthetic://street?seed=1", "--clips"], "--clips cuts events' clips from a video file", 1),
    ([CLIP, "--app", "no-such-app"], "unknown app 'no-such-app'", 2),  # a usage mistake, as argparse's
    ([CLIP, "--app", "{spec}"], "detector 'yolo-typo' is neither a host detector", 1),
    ([CLIP, "--out", "{file}"], "exists and is not a folder", 1),
    ([CLIP, "--out", "{file}/under"], "cannot write there", 1),
])
def test_a_bad_input_is_named_before_any_model_loads(argv, says, code, never_runs, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = tmp_path / "app.yaml"
    spec.write_text("name: typo\ndetector: yolo-typo\n")
    (tmp_path / "a-file").write_text("x")
    argv = [a.format(spec=spec, file=tmp_path / "a-file") for a in argv]
    assert main(["run", *argv]) == code
    assert says in capsys.readouterr().err


def test_good_inputs_reach_the_run(monkeypatch, tmp_path):
    called = []

    def run_offline(source, specs, options):
        called.append(source)
        raise ValueError("stopped where the models would load")

    monkeypatch.setattr("runtime.offline.run_offline", run_offline)
    assert main(["run", CLIP, "--out", str(tmp_path / "new" / "out"), "-q"]) == 1
    assert called and (tmp_path / "new" / "out").is_dir()
