// Stored events, newest first (GET /v1/events?order=desc), filtered by stream, app and
// type; an event's crop links to its whole snapshot (GET /v1/events/{id}/snapshot.jpg),
// and its "clip" button plays the recording around it (GET /v1/events/{id}/clip.mp4).
const TYPES = ["track_start", "track_end", "line_cross", "zone_enter", "zone_exit", "zone_dwell", "class_change",
  "model_selected"];
const fields = ["stream", "app", "type"];
const params = new URLSearchParams(location.search);

function options(id, values) {
  const select = document.getElementById(id), kept = select.value || params.get(id.slice(2)) || "";
  select.innerHTML = '<option value="">any</option>' +
    values.map((v) => `<option value="${esc(v)}">${esc(v)}</option>`).join("");
  select.value = values.includes(kept) ? kept : "";
}

function details(e) {
  const parts = [];
  if (e.line) parts.push(`${e.line} ${e.direction}`);
  if (e.zone) parts.push(`zone ${e.zone}`);
  if (typeof e.dwell_ms === "number") parts.push(`stayed ${(e.dwell_ms / 1000).toFixed(1)} s`);
  if (typeof e.duration_ms === "number") parts.push(`seen ${(e.duration_ms / 1000).toFixed(1)} s`);
  if (e.to_version !== undefined) parts.push(`${e.model} v${e.from_version} → v${e.to_version}`);
  return parts.join(" · ");
}

function row(e) {
  const shot = e.snapshot ? `<img class="thumb" loading="lazy" alt="crop" src="/v1/events/${e.id}/crop.jpg"
      data-snapshot="/v1/events/${e.id}/snapshot.jpg" data-caption="#${e.id} ${esc(e.type)} ${esc(e.class)}">` : "";
  return `<tr data-id="${e.id}"><td>${shot}</td><td>${e.id}</td><td class="time">${when(e.t_ms)}</td>
    <td>${esc(e.stream)}</td><td>${esc(e.app)}</td><td class="type">${esc(e.type)}</td><td>${esc(e.class)}</td>
    <td>${e.track_id >= 0 ? e.track_id : ""}</td><td class="muted">${esc(details(e))}</td>
    <td><button type="button" class="clip" data-id="${e.id}">clip</button></td></tr>`;
}

let shown = "";
async function load() {
  const q = new URLSearchParams({order: "desc", limit: "50"});
  for (const f of fields) {
    const v = document.getElementById(`f-${f}`).value;
    if (v) q.set(f, v);
  }
  try {
    const events = (await (await fetch(`/v1/events?${q}`)).json()).events;
    const key = q + ":" + events.map((e) => e.id).join(",");
    if (key === shown) return;  // unchanged: keep the rows (and any image loading in them)
    shown = key;
    document.querySelector("#events tbody").innerHTML = events.map(row).join("") ||
      '<tr><td colspan="10" class="muted">No events match.</td></tr>';
    document.getElementById("count").textContent = `${events.length} newest shown`;
  } catch (err) { /* the next round will try again */ }
}

async function choices() {
  try {
    const o = await (await fetch("/v1/overview")).json();
    options("f-stream", o.streams.map((s) => s.name));
    options("f-app", o.apps.map((a) => a.name));
  } catch (err) { /* keep what is there */ }
}

options("f-type", TYPES);
document.getElementById("filters").addEventListener("change", () => {
  const q = new URLSearchParams();
  for (const f of fields) { const v = document.getElementById(`f-${f}`).value; if (v) q.set(f, v); }
  history.replaceState(null, "", q.toString() ? `?${q}` : location.pathname);
  load();
});
function show(what, caption) {
  const viewer = document.getElementById("viewer"), player = document.getElementById("player");
  viewer.hidden = what !== viewer || !viewer.getAttribute("src");  // no picture yet: no broken image
  player.hidden = what !== player;
  if (what !== player) player.pause();
  document.getElementById("viewer-caption").textContent = caption;
}

let clipUrl = null;
async function playClip(id) {
  // fetched first, so that a missing clip shows the server's reason (recording off,
  // footage gone) rather than a blank player
  const r = await fetch(`/v1/events/${id}/clip.mp4`);
  if (!r.ok) {
    let detail = `HTTP ${r.status}`;
    try { detail = (await r.json()).detail; } catch (err) { /* not JSON */ }
    show(document.getElementById("viewer"), `No clip for #${id}: ${detail}`);
    return;
  }
  if (clipUrl) URL.revokeObjectURL(clipUrl);
  clipUrl = URL.createObjectURL(await r.blob());
  const player = document.getElementById("player");
  player.src = clipUrl;
  show(player, `#${id}: the recording around it`);
  player.play().catch(() => { /* the user presses play */ });
}

document.querySelector("#events tbody").addEventListener("click", (ev) => {
  const button = ev.target.closest("button.clip");
  if (button) {
    playClip(button.dataset.id);
    return;
  }
  const img = ev.target.closest("img.thumb");
  if (!img) return;
  const viewer = document.getElementById("viewer");
  viewer.src = img.dataset.snapshot;
  show(viewer, img.dataset.caption);
});
choices().then(load);
setInterval(load, 3000);
setInterval(choices, 15000);
