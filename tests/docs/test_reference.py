"""The generated reference pages cover what they describe: every field of the server
config, the app spec and model.yaml (each with a description), every CLI command and
option, every REST route, parameter and schema field, every metric; and the benchmark
tables read the committed results."""

from __future__ import annotations

import argparse
import re

import pytest

from apps.spec import AppSpec
from cli.main import build_parser
from models.fetch import FetchSpec
from models.repository import ModelConfig, ModelSpec
from support.processes import ROOT
from tools.docs import bench_tables
from tools.docs.cli_page import commands, options
from tools.docs.metrics_page import scraped_name, series
from tools.docs.pages import GENERATED, RESULTS_MARKER, config_page, with_results
from tools.docs.schema import sections
from vigil.api import build_routes
from vigil.settings import Settings

MODELS = {"reference/config.md": [Settings], "reference/app-spec.md": [AppSpec],
          "reference/model-yaml.md": [ModelSpec, ModelConfig, FetchSpec]}


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    return {path: make() for path, make in GENERATED.items()}


def section_texts(page: str) -> dict[str, str]:
    """Each section of a page by its heading's id (the text before the first: "")."""
    parts = re.split(r"^#+ .*?\{#([a-z0-9-]+)\}\n", page, flags=re.M)
    return {"": parts[0], **dict(zip(parts[1::2], parts[2::2]))}


@pytest.mark.parametrize("path", sorted(MODELS))
def test_every_field_is_on_its_page_in_its_section_with_a_description(pages, path):
    texts = section_texts(pages[path])
    for root in MODELS[path]:
        for section in sections(root):
            key = re.sub(r"[^a-z0-9]+", "-", section.path.lower()).strip("-")
            text = "\n".join(texts.values()) if not section.path else texts.get(key, "")
            for name, field in section.model.model_fields.items():
                assert f"| `{name}` |" in text, f"{path}: {section.path or root.__name__}.{name} is not on the page"
                assert field.description, f"{root.__name__} {section.path}.{name} has no description to show"


def test_a_field_added_to_the_config_shows_on_its_page(monkeypatch):
    """The page is made from the model, not kept beside it."""
    from pydantic import Field, create_model

    extended = create_model("Settings", __base__=Settings, brand_new_knob=(int, Field(3, description="new")))
    monkeypatch.setattr("vigil.settings.Settings", extended)
    assert "| `brand_new_knob` |" in config_page()


def test_every_command_and_option_is_on_the_cli_page(pages):
    page = pages["reference/cli.md"]
    found = commands(build_parser())
    assert len(found) > 20 and {"vigil run", "vigil serve", "vigil bench", "vigil models fetch"} <= dict(found).keys()
    for prog, parser in found:
        assert f"{{#{prog.replace(' ', '-')}}}" in page, f"{prog} has no section"
        for action in options(parser):
            for flag in action.option_strings or [action.metavar or action.dest]:
                assert f"`{flag}" in page, f"{prog} {flag} is not on the CLI page"


def test_every_route_parameter_and_schema_field_is_on_the_rest_page(pages):
    page = pages["reference/rest.md"]
    schema = build_routes(Settings()).openapi()
    assert len(schema["paths"]) > 25
    for path, item in schema["paths"].items():
        for method, op in item.items():
            assert f"`{method.upper()} {path}`" in page, f"{method.upper()} {path} is not on the REST page"
            for param in op.get("parameters", []):
                assert f"| `{param['name']}` | {param['in']} |" in page
    for name, spec in schema["components"]["schemas"].items():
        assert f"### {name} {{#" in page, f"schema {name} is not on the REST page"
        for prop in spec.get("properties", {}):
            assert f"| `{prop}` |" in page, f"{name}.{prop} is not on the REST page"


def test_every_registered_series_is_on_the_metrics_page(pages):
    page = pages["reference/metrics.md"]
    found = series()
    assert len(found) > 30
    for name, kind, _, labels, _ in found:
        assert f"`{scraped_name(name, kind)}`" in page
        for label in labels:
            assert f"`{label}`" in page


def test_the_benchmark_tables_read_every_committed_result():
    results = bench_tables.load_results()
    specs = bench_tables.yaml.safe_load(bench_tables.SPEC.read_text())
    page = (ROOT / "docs/benchmarks.md").read_text()
    marked = set(RESULTS_MARKER.findall(page))
    assert marked <= set(specs), f"markers without a table: {marked - set(specs)}"
    for result in results:
        assert result.data["kind"] in marked, f"{result.name}: no table on the benchmarks page shows its kind"
        run = result.data["run"]
        assert re.fullmatch(r"[0-9a-f]{40}", run["commit"] or ""), f"{result.name}: no commit"
        assert run["machine"]["cpu"] and run["machine"]["cores"] >= 1, f"{result.name}: no machine"
    for kind, spec in specs.items():
        mine = [r for r in results if r.data["kind"] == kind]
        for index, (header, path, *optional) in enumerate(spec["columns"]):
            if path == "$key" or not mine or optional:
                continue
            values = [cells[index] for r in mine for cells in bench_tables.rows_of(r, spec)]
            assert any(v != bench_tables.MISSING for v in values), \
                f"{kind}: column {header!r} ({path}) is empty in every committed result: a renamed key?"
    filled = with_results(page)
    assert not RESULTS_MARKER.search(filled) and ("Run on:" in filled) == bool(results)


def test_a_result_without_provenance_is_refused_by_name(tmp_path):
    (tmp_path / "old.json").write_text('{"ratio": 1.0}')
    with pytest.raises(ValueError, match="old.json"):
        bench_tables.load_results(tmp_path)


def test_parsers_are_walked_whole():
    parser = argparse.ArgumentParser(prog="x")
    sub = parser.add_subparsers()
    deep = sub.add_parser("a").add_subparsers().add_parser("b")
    deep.add_argument("--flag")
    assert [p for p, _ in commands(parser, "x")] == ["x", "x a", "x a b"]
