"""`vigil models add` and POST /v1/models/{name}/versions against a server with keys: a
version folder goes in as an archive; hostile archives are refused and leave nothing."""

from __future__ import annotations

import io
import os
import sys
import tarfile
import zipfile

import httpx
import pytest
import yaml

from support.processes import ROOT, VigilServer, run_command

KEY = "upload-key"
HOG = {"name": "hog-up", "adapter": "opencv_hog", "output": "detections", "labels": ["person"],
       "batch_sizes": [1], "config": {"upscale": 1.0}}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("upload-repo")
    # its own: uploads add versions to the repository it serves
    s = VigilServer(tmp_path_factory.mktemp("upload-serve") / "data", api_keys=KEY,
                    config={"model_repository": str(repo), "llm_model": None,
                            "limits": {"max_model_upload_bytes": 1 << 20}})
    s.start(120)
    s.repo = repo
    yield s
    s.stop()


def tar_of(files: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return buf.getvalue()


def upload(server, name: str, body: bytes, key: str | None = KEY) -> httpx.Response:
    headers = {"Content-Type": "application/octet-stream", **({"Authorization": f"Bearer {key}"} if key else {})}
    return httpx.post(f"{server.url}/v1/models/{name}/versions", content=body, headers=headers, timeout=120)


def leftovers(server) -> list[str]:
    return sorted(p.name for p in server.repo.iterdir() if p.name.startswith(".upload"))


def test_the_cli_adds_a_folder_as_the_next_version(server, tmp_path):
    folder = tmp_path / "hog"
    folder.mkdir()
    (folder / "model.yaml").write_text(yaml.safe_dump(HOG))
    env = {**os.environ, "VIGIL_API_KEY": KEY}
    for expected in (1, 2):
        out = run_command([sys.executable, "-m", "cli", "models", "add", "hog-up", str(folder), "--url",
                           server.url], 120, cwd=ROOT, env=env)
        assert out.returncode == 0, out.stderr
        assert f'"added_version": {expected}' in out.stdout
    assert sorted(p.name for p in (server.repo / "hog-up").iterdir()) == ["1", "2"]
    listed = httpx.get(f"{server.url}/v1/models/hog-up", timeout=30)
    assert listed.status_code == 200, listed.text
    zipped = io.BytesIO()
    with zipfile.ZipFile(zipped, "w") as z:  # a zip with one top-level folder works too
        z.writestr("hog/model.yaml", yaml.safe_dump(HOG))
    r = upload(server, "hog-up", zipped.getvalue())
    assert r.status_code == 201 and r.json()["added_version"] == 3


def test_the_cli_adds_an_llms_gguf_file_and_refuses_one_that_cannot_load(server, tmp_path):
    import numpy as np
    from support.gguf_files import byte_vocabulary, write_qwen2_gguf, write_tiny

    env = {**os.environ, "VIGIL_API_KEY": KEY}
    good = tmp_path / "tiny-lm.Q8_0.gguf"
    write_qwen2_gguf(good, "Q8_0", byte_vocabulary())
    out = run_command([sys.executable, "-m", "cli", "models", "add", "tiny-lm", str(good), "--url", server.url], 120,
                      cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr
    assert '"kind": "llm"' in out.stdout and '"added_version": 1' in out.stdout
    assert [p.name for p in (server.repo / "tiny-lm" / "1").iterdir()] == [good.name]
    bad = tmp_path / "gpt2.gguf"
    write_tiny(bad, "gpt2", np.zeros((4, 32), dtype=np.float32))
    out = run_command([sys.executable, "-m", "cli", "models", "add", "other-lm", str(bad), "--url", server.url], 120,
                      cwd=ROOT, env=env)
    assert out.returncode == 1 and "general.architecture: supported are" in out.stderr, out.stderr
    assert not (server.repo / "other-lm").exists() and leftovers(server) == []


def test_without_a_key_nothing_is_read(server):
    r = httpx.post(f"{server.url}/v1/models/hog-up/versions", content=b"x" * (5 << 20), timeout=60,
                   headers={"Content-Type": "application/octet-stream"})
    assert r.status_code == 401
    assert upload(server, "hog-up", b"x" * ((1 << 20) + 1)).status_code == 413


@pytest.mark.parametrize("body, says", [
    (tar_of({"../evil/model.yaml": b"x"}), "points outside the version folder"),
    (tar_of({"/etc/model.yaml": b"x"}), "points outside the version folder"),
    (tar_of({"model.yaml": yaml.safe_dump(HOG).encode()}, {"weights.bin": "/etc/passwd"}), "a link or a special"),
    (tar_of({"readme.txt": b"hello"}), "no model.yaml"),
    (tar_of({"model.yaml": yaml.safe_dump({**HOG, "batch_sizes": [0]}).encode()}), "batch_sizes"),
    (tar_of({"model.yaml": yaml.safe_dump({**HOG, "name": "other"}).encode()}), "does not match"),
    (b"not an archive at all", "neither a .zip nor a .tar"),
])
def test_hostile_or_broken_archives_are_refused_and_leave_nothing(server, body, says):
    before = sorted(p.name for p in server.repo.rglob("*"))
    r = upload(server, "hog-up", body)
    assert r.status_code == 422 and says in r.json()["detail"], r.text
    assert sorted(p.name for p in server.repo.rglob("*")) == before and leftovers(server) == []
    assert not (ROOT.parent / "evil").exists()


def test_an_archive_that_unpacks_past_the_limit_is_refused(server):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:  # 4 MB of zeros in a few KB
        z.writestr("model.yaml", yaml.safe_dump(HOG))
        z.writestr("padding.bin", b"\0" * (4 << 20))
    assert len(buf.getvalue()) < (1 << 20)
    r = upload(server, "hog-up", buf.getvalue())
    assert r.status_code == 422 and "unpacks to" in r.json()["detail"]
    assert leftovers(server) == []


def test_a_model_whose_load_failed_says_why_in_get_and_in_models_list(server):
    """The load's reason stays with the model (GET /v1/models/NAME, `vigil models list`)
    until a load succeeds, not only in the answer to the POST that failed."""
    folder = server.repo / "broken" / "1"
    folder.mkdir(parents=True)
    (folder / "model.yaml").write_text(yaml.safe_dump({
        "name": "broken", "adapter": "torchvision", "arch": "resnet-9000", "weights": "random",
        "output": "detections", "labels": ["person"], "batch_sizes": [1]}))
    auth = {"Authorization": f"Bearer {KEY}"}
    r = httpx.post(f"{server.url}/v1/models/broken/load", headers=auth, timeout=120)
    assert r.status_code == 422 and "unknown torchvision architecture 'resnet-9000'" in r.json()["detail"]
    shown = httpx.get(f"{server.url}/v1/models/broken", timeout=30).json()
    assert shown["error"] == r.json()["detail"] and shown["loaded"] == []
    out = run_command([sys.executable, "-m", "cli", "--url", server.url, "models", "list"], 120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    row = next(line for line in out.stdout.splitlines() if line.startswith("broken "))
    assert "broken/1/model.yaml: arch: unknown torchvision" in row
    assert f"broken: {shown['error']}" in out.stdout  # whole, below the table
