"""The architecture holds: pyproject.toml's import-linter contracts (each top-level package
imports only those below it, and no two modules of a package import each other), every
package has its layer, no private name is imported from another module, and the code
that runs in Vigil keeps to the size limits that keep it readable."""

import ast
import sys
import tomllib
from pathlib import Path

import pytest

from support.processes import run_command

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
# what runs in Vigil; bench (benchmarks), tools (training) and sample_videos (the test
# range's renderer) stand beside it
RUNTIME = ("cli", "vigil", "cluster", "llm", "runtime", "apps", "engine", "models", "streams", "core")
MAX_MODULE_LINES, MAX_CLASS_LINES, MAX_FUNCTION_LINES = 500, 250, 80


def python_files(packages) -> list[Path]:
    return [f for p in packages for f in sorted((ROOT / p).rglob("*.py")) if not f.name.endswith(("_pb2.py",
                                                                                                   "_pb2_grpc.py"))]


@pytest.mark.slow
def test_the_import_contracts_are_kept():
    lint = Path(sys.executable).parent / "lint-imports"
    out = run_command([str(lint)], 300, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "2 kept, 0 broken" in out.stdout


def test_every_package_has_a_layer():
    packages = {d.name for d in ROOT.iterdir() if (d / "__init__.py").is_file()}
    layered = {name.strip() for layer in CONTRACT["contracts"][0]["layers"] for name in layer.split("|")}
    assert packages - {"tests"} == layered == set(CONTRACT["root_packages"])
    assert set(CONTRACT["contracts"][1]["ancestors"]) == layered


def test_no_private_name_is_imported_from_another_module_of_ours():
    found = []
    for path in python_files(CONTRACT["root_packages"]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                    and node.module.split(".")[0] in CONTRACT["root_packages"]:
                found += [f"{path.relative_to(ROOT)}:{node.lineno} {node.module}.{a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    assert not found, found


def test_modules_classes_and_functions_keep_to_their_sizes():
    over = []
    for path in python_files(RUNTIME):
        text = path.read_text()
        name = path.relative_to(ROOT)
        if len(text.splitlines()) > MAX_MODULE_LINES:
            over.append(f"{name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            limit = MAX_CLASS_LINES if isinstance(node, ast.ClassDef) else MAX_FUNCTION_LINES \
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
            if limit is not None and node.end_lineno - node.lineno + 1 > limit:
                over.append(f"{name}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert not over, f"over {MAX_MODULE_LINES} lines a module, {MAX_CLASS_LINES} a class or " \
                     f"{MAX_FUNCTION_LINES} a function: {over}"
