"""MkDocs hooks (mkdocs.yml `hooks:`): add the generated reference pages to the site and
fill the benchmarks page's result tables, at every build."""

from __future__ import annotations

from mkdocs.structure.files import File, Files

from tools.docs.pages import GENERATED, with_results


def on_files(files: Files, config) -> Files:
    for path, make in GENERATED.items():
        files.append(File.generated(config, path, content=make()))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    return with_results(markdown)
