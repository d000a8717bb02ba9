"""The benchmarks page's tables, from the results committed under bench/results/: each
result names its kind and the machine and commit it ran on (vigil/provenance.py), and
bench_tables.yaml says which of its figures a table shows."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from tools.docs.markdown import ROOT, code, table

RESULTS = ROOT / "bench" / "results"
SPEC = Path(__file__).with_name("bench_tables.yaml")
MISSING = "—"
STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]|\[(\w+)=@(\w+)\]")


@dataclass(frozen=True)
class Result:
    name: str
    data: dict


def load_results(folder: Path = RESULTS) -> list[Result]:
    """Every result file in the folder, by name; a file without a kind is refused by name."""
    out = []
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or "kind" not in data or "run" not in data:
            raise ValueError(f"{path}: not a result of `vigil bench` or `vigil eval` (it has no kind and run)")
        out.append(Result(path.stem, data))
    return out


def lookup(data, path: str, row=None):
    """The value at `path` in `row` (or, for a path starting with /, in `data`); None
    where any step is missing."""
    here = data if path.startswith("/") or row is None else row
    for key, index, field, other in STEP.findall(path.lstrip("/")):
        if key:
            here = here.get(key) if isinstance(here, dict) else None
        elif index:
            here = here[int(index)] if isinstance(here, list) and int(index) < len(here) else None
        else:
            wanted = row.get(other) if isinstance(row, dict) else None
            here = next((x for x in here if isinstance(x, dict) and x.get(field) == wanted), None) \
                if isinstance(here, list) else None
    return here


def figure(value) -> str:
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.2e}"
    return str(value)


def rows_of(result: Result, spec: dict) -> list[list[str]]:
    """The table's cells for one result: a row per item of its `rows` (map or list), or one."""
    if "rows" not in spec:
        items = [(None, None)]
    else:
        found = lookup(result.data, spec["rows"])
        items = list(found.items()) if isinstance(found, dict) else [(None, r) for r in (found or [])]
    return [[key if path == "$key" else figure(lookup(result.data, path, row)) for _, path, *_ in spec["columns"]]
            for key, row in items]


def machine_line(result: Result) -> str:
    run = result.data["run"]
    machine = run.get("machine", {})
    device = machine.get("gpu") or f"{machine.get('cpu')}, {machine.get('cores')} cores"
    commit = (run.get("commit") or "unknown")[:10] + (" (changed)" if run.get("dirty") else "")
    steal = machine.get("steal")
    return (f"{code(result.name)}: {device}, allocator {machine.get('allocator')}, steal "
            f"{figure(steal)}; commit {code(commit)}, {run.get('started', '?')[:10]}; {code(run.get('command'))}")


def results_table(kind: str, results: list[Result], specs: dict | None = None) -> str:
    specs = specs if specs is not None else yaml.safe_load(SPEC.read_text())
    if kind not in specs:
        raise ValueError(f"no table is declared for results of kind {kind!r} in {SPEC.name}")
    mine = [r for r in results if r.data["kind"] == kind]
    if not mine:
        return f"*No {kind} result is committed yet.*\n"
    spec = specs[kind]
    header = [column[0] for column in spec["columns"]]
    many = len(mine) > 1
    rows = [([code(r.name)] if many else []) + cells for r in mine for cells in rows_of(r, spec)]
    out = [table((["result"] if many else []) + header, rows), "Run on:\n"]
    out += [f"- {machine_line(r)}" for r in mine]
    return "\n".join(out) + "\n"
