"""What a command prints: terminal tables for run summaries, and results as JSON."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

NOTE_WIDTH = 100  # a footnote's lines, in characters


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def format_table(summary: dict) -> str:
    """The run's table, one row per app; the summary's notes (why latency was long, and
    what to do) as numbered footnotes, marked on the `in SLO` figures they explain."""
    rows = [("app", "frames", "tracks", "line: in/out", "p50 ms", "p99 ms", "SLO ms", "in SLO")]
    notes = summary.get("notes", [])
    for name, app in summary["apps"].items():
        lines = ", ".join(f"{line}: {c['in']}/{c['out']}" for line, c in app["lines"].items()) or "-"
        lat = app["latency_ms"]
        attained = "-" if app["slo_attainment"] is None else f"{app['slo_attainment']:.1%}"
        attained += "".join(f" [{k}]" for k, note in enumerate(notes, 1) if name in note["apps"])
        rows.append((name, str(app["frames"]), str(app["tracks"]), lines, _ms(lat["p50"]), _ms(lat["p99"]),
                     _ms(app["slo_ms"]), attained))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = [f"{summary['source']}: {summary['frames_decoded']} frames in {summary['wall_s']:.1f} s "
           f"({summary['fps']:.1f} fps) on {summary['device']}"]
    for k, row in enumerate(rows):
        out.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    for name, app in summary["apps"].items():
        for warning in app.get("warnings", []):
            out.append(f"WARNING {name}: {warning}")
    for k, note in enumerate(notes, 1):
        out += textwrap.wrap(note["text"], NOTE_WIDTH, initial_indent=f"[{k}] ", subsequent_indent=" " * 4,
                             break_on_hyphens=False)
    return "\n".join(out)


def print_json(result: dict, path: Path | None = None) -> None:
    """A command's result as JSON on stdout, and in `path` when given."""
    text = json.dumps(result, indent=2)
    if path:
        path.write_text(text + "\n")
    print(text)
