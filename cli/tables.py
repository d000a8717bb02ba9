"""What the remote commands print for a person: aligned tables for lists (the few fields
a user reads; `--json` gives the API's whole answer), and an app's metrics in words.

Each view takes the REST API's JSON and returns text; none calls the server."""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable

MAX_CELL_CHARS = 60  # a longer cell is cut, and the whole text follows the table
DAY_MS = 86_400_000.0  # stream times past a day are epoch ms (live cameras); shorter ones are time into a file


def table(headers: list[str], rows: Iterable[list[Any]], empty: str = "(none)") -> str:
    """Columns aligned under `headers`; None shows as "-". No rows: the header, then `empty`."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in [headers, *cells]) for i in range(len(headers))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells] or [empty]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None or value == "" or value == []:
        return "-"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = " ".join(str(value).split())
    return text if len(text) <= MAX_CELL_CHARS else text[:MAX_CELL_CHARS - 3] + "..."


def _notes(items: Iterable[tuple[str, str | None]]) -> str:
    """`name: text` lines for the texts a table had to cut."""
    cut = [f"{name}: {text}" for name, text in items if text and len(" ".join(text.split())) > MAX_CELL_CHARS]
    return "\n\n" + "\n".join(cut) if cut else ""


def stream_time(t_ms: float | None) -> str | None:
    """A stream time as a person reads it: the local date and clock time of a live
    camera's epoch ms, or m:ss.s into a file."""
    if t_ms is None:
        return None
    if t_ms >= DAY_MS:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t_ms / 1000.0))
    minutes, seconds = divmod(t_ms / 1000.0, 60.0)
    return f"{int(minutes)}:{seconds:04.1f}"


def _versions(versions: list[int] | None) -> str | None:
    return ", ".join(map(str, versions)) if versions else None


def models_table(body: dict) -> str:
    rows, errors = [], []
    for m in body.get("data", []):
        license_ = (m.get("license") or {}).get("spdx")
        if m.get("kind") == "llm":
            kind = ("llm" if not m.get("parent") else f"lora of {m['parent']}") + (", answers" if m.get("answers") else "")
            rows.append([m["id"], kind, None, "served", None, license_, None])
            continue
        labels = " ".join(f"{k}={v}" for k, v in sorted(m.get("labels", {}).items()))
        rows.append([m["id"], "vision", _versions(m.get("versions_on_disk")), _versions(m.get("loaded")), labels,
                     license_, m.get("error")])
        errors.append((m["id"], m.get("error")))
    return table(["name", "kind", "on disk", "loaded", "labels", "licence", "last error"], rows) + _notes(errors)


def streams_table(body: list[dict]) -> str:
    rows = [[s["name"], s["status"], s["url"], ", ".join(s.get("apps") or []), s.get("frames_decoded"),
             s.get("frames_dropped"), s.get("reconnects"), s.get("last_error")] for s in body]
    return table(["name", "status", "url", "apps", "decoded", "dropped", "reconnects", "last error"], rows) + \
        _notes((s["name"], s.get("last_error")) for s in body)


def _lines(counts: dict | None) -> str | None:
    lines = (counts or {}).get("lines") or {}
    return ", ".join(f"{name} {c['in']}/{c['out']}" for name, c in lines.items()) or None


def apps_table(body: list[dict]) -> str:
    rows, notes = [], []
    for a in body:
        spec, counts = a.get("spec") or {}, a.get("counts") or {}
        status = a["status"] + (" (overloaded)" if (a.get("load") or {}).get("overloaded") else "")
        problem = a.get("error") or a.get("warning")
        rows.append([a["name"], spec.get("source"), spec.get("detector"), status, spec.get("fps"), spec.get("slo_ms"),
                     counts.get("tracks"), _lines(counts), problem])
        notes.append((a["name"], problem))
    return table(["name", "stream", "detector", "status", "fps", "slo ms", "tracks", "lines in/out", "problem"],
                 rows) + _notes(notes)


def _event_detail(e: dict) -> str | None:
    parts = []
    if "line" in e:
        parts.append(f"{e['line']} {e.get('direction', '')}".strip())
    if "zone" in e:
        parts.append(f"zone {e['zone']}")
    for key, word in (("dwell_ms", "stayed"), ("duration_ms", "lasted")):
        if isinstance(e.get(key), (int, float)):
            parts.append(f"{word} {e[key] / 1000.0:.1f} s")
    if e["type"] == "class_change" and e.get("from"):
        parts.append(f"from {e['from']}")
    if e["type"] == "model_selected":
        parts.append(f"{e.get('model')} v{e.get('from_version')} -> v{e.get('to_version')}")
    return ", ".join(parts) or None


def events_table(body: dict) -> str:
    events = body.get("events", [])
    rows = [[e["id"], stream_time(e["t_ms"]), e["stream"], e["app"], e["type"],
             None if e.get("track_id", -1) < 0 else e["track_id"], e.get("class"), _event_detail(e)] for e in events]
    out = table(["id", "time", "stream", "app", "type", "track", "class", "detail"], rows, empty="(no events)")
    if body.get("next_after_id") is not None and len(events):
        out += f"\n\n(more: --after-id {body['next_after_id']})"
    return out


def _ms(value: Any) -> str:
    if value is None:
        return "-"
    return "unbounded" if value == "inf" else f"{float(value):.0f} ms"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def unbounded_note(latency_all: dict) -> str | None:
    """Why a percentile over every request reads "inf": it falls on dropped requests."""
    qs = sorted(int(k[1:]) for k, v in latency_all.items() if v == "inf")
    if not qs:
        return None
    return (f"unbounded: more than {100 - qs[0]}% of the requests were dropped, and a drop counts as never "
            "answered")


def metrics_text(m: dict) -> str:
    """GET /v1/apps/{name}/metrics in words."""
    lat, lat_all, load = m.get("latency_ms") or {}, m.get("latency_all_ms") or {}, m.get("load") or {}
    dropped = m.get("dropped") or {}
    num_dropped = sum(dropped.values())
    reasons = ", ".join(f"{n} {reason}" for reason, n in sorted(dropped.items()))
    out = [f"app {m['app']}: SLO {m['slo_ms']:.0f} ms",
           f"  in SLO       {_share(m.get('slo_attainment'))} of requests since start (last minute "
           f"{_share(m.get('slo_attainment_1m'))}, last hour {_share(m.get('slo_attainment_1h'))})",
           f"  requests     {m.get('arrived', 0)} arrived, {m.get('completed', 0)} completed "
           f"({m.get('within_slo', 0)} within the SLO), {num_dropped} dropped" + (f" ({reasons})" if reasons else "")
           + (f", {m['skipped']} skipped (static frames)" if m.get("skipped") else ""),
           "  latency      completed requests: " + ", ".join(f"{k} {_ms(v)}" for k, v in lat.items()),
           "               all requests:       " + ", ".join(f"{k} {_ms(v)}" for k, v in lat_all.items())]
    note = unbounded_note(lat_all)
    if note:
        out.append(f"               ({note})")
    fps = m.get("throughput_fps")
    out.append(f"  throughput   {'-' if fps is None else f'{fps:.1f}'} frames/s over the last minute")
    if load:
        state = "overloaded" if load.get("overloaded") else "keeping up"
        rate = f"sampling {load['rate_fps']:g} of {load['full_fps']:g} frames/s, " \
            if load.get("rate_fps") is not None and load.get("full_fps") is not None else ""
        out.append(f"  load         {state}: {rate}{_share(load.get('shed_share'))} of frames shed")
    counts = m.get("counts")
    if counts is None:
        out.append("  counts       - (the app is not running)")
    else:
        out.append(f"  counts       {counts.get('tracks', 0)} tracks")
        for name, c in (counts.get("lines") or {}).items():
            by_class = ", ".join(f"{cls} {v['in']}/{v['out']}" for cls, v in (c.get("by_class") or {}).items())
            out.append(f"    line {name}: {c['in']} in, {c['out']} out" + (f" ({by_class})" if by_class else ""))
        for name, z in (counts.get("zones") or {}).items():
            inside = sum((z.get("occupancy") or {}).values())
            out.append(f"    zone {name}: {z.get('entered', 0)} entered, {inside} inside now")
    return "\n".join(out)


# (command, action) -> the view of its answer; the other actions print the API's JSON
VIEWS: dict[tuple[str, str], Callable[[Any], str]] = {
    ("models", "list"): models_table,
    ("streams", "list"): streams_table,
    ("apps", "list"): apps_table,
    ("events", "list"): events_table,
    ("apps", "metrics"): metrics_text,
}
