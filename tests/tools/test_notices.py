"""The project's LICENSE and THIRD_PARTY_NOTICES.md (tools/notices.py): every model of the
repository states its weights' licence, and the committed notices name every model with
its licence and every package set-up asks for by name (the file itself lists the whole
closure, as `python -m tools.notices` found it)."""

from __future__ import annotations

import re
import tomllib

import pytest

from models.repository import ModelRepository
from support.processes import ROOT
from tools import notices

MODEL_FOLDERS = sorted(p.name for p in (ROOT / "configs" / "models").iterdir() if p.is_dir())


def test_the_project_is_apache_2_0_in_its_license_file_and_its_package_metadata():
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == {"text": "Apache-2.0"}


@pytest.mark.parametrize("name", MODEL_FOLDERS)
def test_every_model_of_the_repository_states_its_licence(name):
    license_ = ModelRepository(ROOT / "configs" / "models").config(name).license
    assert license_ is not None, f"configs/models/{name}/model_config.yaml states no license"


def test_the_committed_notices_name_every_model_and_package_asked_for_by_name():
    lacks = notices.missing_from((ROOT / "THIRD_PARTY_NOTICES.md").read_text())
    assert not lacks, f"THIRD_PARTY_NOTICES.md lacks {lacks}: run python -m tools.notices"


def test_a_package_without_its_licence_is_found_missing():
    text = (ROOT / "THIRD_PARTY_NOTICES.md").read_text()
    assert "| torch |" in text
    assert "package torch" in notices.missing_from(text.replace("| torch |", "| t0rch |"))
    assert "model coco" in notices.missing_from(text.replace("| `coco` | MIT", "| `coco` | ?"))


def test_the_packages_the_makefile_installs_without_dependencies_are_listed():
    makefile = (ROOT / "Makefile").read_text()
    assert set(re.findall(r"--no-deps '([A-Za-z0-9_.-]+)==", makefile)) == set(notices.NO_DEPS)


def test_the_licences_page_is_generated_from_the_same_notices():
    from tools.docs.pages import GENERATED

    page = GENERATED["reference/licenses.md"]()
    assert "| `coco` | MIT |" in page and "| `smollm2-135m-instruct` | Apache-2.0 |" in page
    assert "](LICENSE)" not in page  # the site does not hold the file
