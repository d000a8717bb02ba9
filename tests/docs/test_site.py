"""The documentation site builds as a user builds it (`mkdocs build --strict`: a broken
link, a missing page or a page left out of the nav fails), and the README stays a short
front page rather than a lab notebook."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from support.processes import ROOT, run_command

# Phrases that tell the story of past runs rather than what the code does.
HISTORY = re.compile(r"\b(rose|fell|dropped|improved|went) from [\d.]+ to [\d.]+|\bin (earlier|previous|past) runs?\b"
                     r"|\bwas [\d.]+ before\b", re.I)


def documented_files() -> list[Path]:
    yamls = [p for p in (ROOT / "apps/builtin").glob("*.yaml")] + list((ROOT / "configs").rglob("*.yaml"))
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted(yamls)]


def test_the_readme_is_a_front_page():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    assert "make demo" in text and "make test" in text and "docs/getting-started.md" in text


@pytest.mark.parametrize("path", documented_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_or_config_tells_the_history_of_past_runs(path):
    found = [m.group(0) for m in HISTORY.finditer(path.read_text())]
    assert not found, f"{path.relative_to(ROOT)}: {found} (run history goes in commit messages)"


@pytest.mark.slow
def test_the_site_builds_strict(tmp_path):
    mkdocs = Path(sys.executable).with_name("mkdocs")
    proc = run_command([str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")], 300, cwd=ROOT,
                       env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    site = tmp_path / "site"
    for page in ("index.html", "getting-started.html", "reference/config.html", "reference/cli.html",
                 "reference/rest.html", "reference/metrics.html", "benchmarks.html"):  # file:// URLs, offline
        assert (site / page).is_file(), f"{page} was not built"
    config = (site / "reference/config.html").read_text()
    assert "max_body_bytes" in config and "caption_every_s" in config
