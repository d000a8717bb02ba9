"""A model version uploaded over REST (`vigil models add`): a .tar (.tar.gz) or .zip of a
version folder (a vision model's, with model.yaml, or an LLM's, with one GGUF file),
unpacked into the repository as the model's next version.

An archive is untrusted input. Only regular files and folders are taken (no links,
devices or FIFOs); every name must stay inside the version folder (no absolute
paths, no `..`); the number of files and the bytes they unpack to are bounded (a
small archive that unpacks to gigabytes is refused as it is read, not after). A single
top-level folder is taken as the version folder. It unpacks into a staging folder
inside the repository and is renamed into place only once it loads, so a half-written
version is never seen by the repository."""

from __future__ import annotations

import shutil
import tarfile
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Iterator

CHUNK = 1 << 20


class UploadError(ValueError):
    """An archive that cannot become a model version; the message says why."""


@dataclass(frozen=True)
class Member:
    name: PurePosixPath
    size: int
    is_dir: bool


def _checked_name(raw: str) -> PurePosixPath:
    path = PurePosixPath(raw.replace("\\", "/"))
    if path.is_absolute() or ".." in path.parts or raw.startswith(("/", "\\")):
        raise UploadError(f"archive entry {raw!r} points outside the version folder")
    return path


def _members(archive: Path) -> tuple[str, list]:
    if zipfile.is_zipfile(archive):
        return "zip", zipfile.ZipFile(archive).infolist()
    try:
        return "tar", tarfile.open(archive, "r:*").getmembers()
    except tarfile.TarError:
        raise UploadError("the body is neither a .zip nor a .tar (.tar.gz) archive") from None


def _listing(kind: str, entries: list, max_files: int) -> list[Member]:
    if len(entries) > max_files:
        raise UploadError(f"the archive holds {len(entries)} entries; at most {max_files} (limits.max_model_files)")
    out = []
    for e in entries:
        if kind == "zip":
            is_dir = e.is_dir()
            mode = (e.external_attr >> 16) & 0o170000
            if mode and mode not in (0o100000, 0o040000):
                raise UploadError(f"archive entry {e.filename!r} is not a regular file or folder")
            out.append(Member(_checked_name(e.filename), e.file_size, is_dir))
        else:
            if not (e.isfile() or e.isdir()):
                raise UploadError(f"archive entry {e.name!r} is a link or a special file")
            out.append(Member(_checked_name(e.name), e.size, e.isdir()))
    return out


def _root_of(members: list[Member]) -> PurePosixPath:
    """The folder within the archive that is a version folder (its top, or one folder
    down): it holds model.yaml, or an LLM's one GGUF file."""
    files = [m.name for m in members if not m.is_dir and m.name.parts]

    def is_version(folder: PurePosixPath) -> bool:
        return folder / "model.yaml" in files or sum(f.parent == folder and f.suffix == ".gguf" for f in files) == 1

    if is_version(PurePosixPath()):
        return PurePosixPath()
    tops = {f.parts[0] for f in files}
    if len(tops) == 1 and is_version(PurePosixPath(next(iter(tops)))):
        return PurePosixPath(next(iter(tops)))
    raise UploadError("the archive has no model.yaml, nor one .gguf file, at its top (or in its one top-level "
                      "folder)")


def _read(kind: str, archive: Path, entry) -> Iterator[bytes]:
    if kind == "zip":
        with zipfile.ZipFile(archive) as z, z.open(entry) as f:
            yield from iter(lambda: f.read(CHUNK), b"")
    else:
        with tarfile.open(archive, "r:*") as t:
            f = t.extractfile(entry.name)
            if f is not None:
                yield from iter(lambda: f.read(CHUNK), b"")


def unpack(archive: Path, into: Path, max_bytes: int, max_files: int) -> None:
    """Unpack a version folder's archive into `into` (created), bounded as described."""
    kind, entries = _members(archive)
    members = _listing(kind, entries, max_files)
    root = _root_of(members)
    declared = sum(m.size for m in members)
    if declared > max_bytes:
        raise UploadError(f"the archive unpacks to {declared} bytes; at most {max_bytes} "
                          "(limits.max_model_upload_bytes)")
    into.mkdir(parents=True)
    written = 0
    for entry, m in zip(entries, members):
        if m.is_dir or root not in (m.name, *m.name.parents) or m.name == root:
            continue
        target = into / m.name.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as out:
            for chunk in _read(kind, archive, entry):
                written += len(chunk)
                if written > max_bytes:  # a size field that lied
                    raise UploadError(f"the archive unpacks to more than {max_bytes} bytes "
                                      "(limits.max_model_upload_bytes)")
                out.write(chunk)


def next_version(model_dir: Path) -> int:
    versions = [int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()] \
        if model_dir.is_dir() else []
    return max(versions, default=0) + 1


def add_version(repository_root: Path, name: str, archive: Path, max_bytes: int, max_files: int, check) -> int:
    """Unpack `archive` as `name`'s next version; `check(folder, version)` validates the
    unpacked folder before it is renamed into place (raising to refuse it). Returns the
    version."""
    staging = repository_root / f".upload-{uuid.uuid4().hex[:12]}"
    try:
        unpack(archive, staging, max_bytes, max_files)
        version = next_version(repository_root / name)
        check(staging, version)
        target = repository_root / name / str(version)
        target.parent.mkdir(parents=True, exist_ok=True)
        staging.rename(target)
        return version
    finally:
        shutil.rmtree(staging, ignore_errors=True)
