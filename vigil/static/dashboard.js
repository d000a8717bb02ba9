// Live cards over server-sent events from /v1/overview/stream.

function card(a) {
  const att = a.attainment_1m;
  // an app that is not running (failed, or degraded: its frames are dropped) is red whatever its last numbers
  const down = a.status === "failed" || a.status === "degraded";
  const overloaded = a.load && a.load.overloaded;
  const base = down ? "bad" : att === null ? "" : att >= 0.99 ? "" : att >= 0.9 ? "miss" : "bad";
  // a warning (a model that does not fit the footage, no detections) is amber at least: never green
  const cls = base === "" && (overloaded || a.warning) ? "miss" : base;  // shedding load: amber at least
  const drops = Object.entries(a.dropped || {}).map(([k, v]) => `${esc(k)} ${v}`).join(", ") || "none";
  const batches = Object.values(a.batch_size || {}).map((h) =>
    Object.entries(h).map(([b, n]) => `${b}×${n}`).join(" ")).join(" | ") || "–";
  const streams = a.streams.map((s) => `<span class="pill ${s.status}">${esc(s.name)}: ${s.status}</span>`).join("");
  const p99 = a.latency_ms ? a.latency_ms.p99 : null, p50 = a.latency_ms ? a.latency_ms.p50 : null;
  const p99all = a.latency_all_ms ? a.latency_all_ms.p99 : null;
  const load = overloaded ? `<span class="pill overloaded">overloaded: ${pct(a.load.shed_share)} shed, ` +
    `${a.load.rate_fps.toFixed(1)} of ${a.load.full_fps.toFixed(1)} frames/s</span>` : "";
  return `<div class="card ${cls}" data-app="${esc(a.name)}">
    <h2><a href="/dashboard/apps/${encodeURIComponent(a.name)}">${esc(a.name)}</a>
      <span class="pill ${esc(a.status)}">${esc(a.status)}</span></h2>
    <div class="muted">${esc(a.detector)} · SLO ${a.slo_ms} ms ${a.error ? "· " + esc(a.error) : ""}</div>
    ${a.warning ? `<div class="warning">⚠ ${esc(a.warning)}</div>` : ""}
    <div class="row"><span>attainment, last minute</span><span class="big att-1m">${pct(att)}</span></div>
    <div class="row"><span>attainment, last hour</span><span class="att-1h">${pct(a.attainment_1h)}</span></div>
    <div class="row"><span>latency p50 / p99 (target)</span>
      <span class="latency">${ms(p50)} / ${ms(p99)} (${a.slo_ms} ms)</span></div>
    <div class="row"><span>p99 of every frame (drops as misses)</span><span class="latency-all">${ms(p99all)}</span></div>
    <div class="row"><span>load</span><span class="load">${load || "within capacity"}</span></div>
    <div class="row"><span>throughput</span><span class="fps">${a.throughput_fps.toFixed(1)} frames/s</span></div>
    <div class="row"><span>dropped</span><span class="drops">${drops}</span></div>
    <div class="row"><span>batch sizes</span><span>${batches}</span></div>
    <div class="row"><span>streams</span><span>${streams}</span></div>
  </div>`;
}

function render(o) {
  if (o.cluster) watchCluster();
  document.getElementById("cards").innerHTML = o.apps.map(card).join("") ||
    '<p class="muted">No apps yet: POST /v1/streams and /v1/apps (see /docs).</p>';
  document.querySelector("#streams tbody").innerHTML = o.streams.map((s) =>
    `<tr><td><a class="live-link" href="/dashboard/live/${encodeURIComponent(s.name)}">${esc(s.name)}</a></td>
     <td><span class="pill ${s.status}">${s.status}</span></td>
     <td class="decoded">${s.frames_decoded}</td><td>${s.frames_dropped}</td><td>${s.reconnects}</td>
     <td class="muted">${esc(s.last_error)}</td></tr>`).join("");
}

// The first paint comes from one fetch, so the page is never empty while the event
// stream connects (or when a proxy holds server-sent events back); the stream takes over.
let streaming = false;
fetch("/v1/overview").then((r) => r.json()).then((o) => {
  if (!streaming) { render(o); document.getElementById("conn").textContent = "loaded, connecting…"; }
}).catch(() => { /* the event stream will paint */ });

const source = new EventSource("/v1/overview/stream");
source.onmessage = (e) => {
  streaming = true;
  document.getElementById("conn").textContent = "live";
  render(JSON.parse(e.data));
};
source.onerror = () => { document.getElementById("conn").textContent = "reconnecting…"; };

// Scene captions written by the LLM (GET /v1/captions), newest first.
async function captions() {
  try {
    const r = await fetch("/v1/captions?limit=8");
    const rows = (await r.json()).captions.reverse();
    document.querySelector("#captions tbody").innerHTML = rows.map((c) =>
      `<tr><td>${esc(c.stream)}</td><td class="muted">${clock(c.t_start_ms)}–${clock(c.t_end_ms)}</td>
       <td class="caption">${esc(c.text)}</td></tr>`).join("");
  } catch (e) { /* the next round will try again */ }
}
captions();
setInterval(captions, 5000);

// Where the engine runs when the server was started with --cluster (the overview says
// so; GET /v1/cluster is 404 otherwise, and the section stays hidden): the global
// scheduler's plan.
async function cluster() {
  try {
    const r = await fetch("/v1/cluster");
    if (!r.ok) return;
    const c = await r.json();
    document.getElementById("cluster").hidden = false;
    const last = c.history.length ? c.history[c.history.length - 1] : null;
    document.getElementById("cluster-plan").textContent = `${c.address} · ${c.devices_used} of ` +
      `${c.backends.length} backends used (lower bound ${c.lower_bound})` + (last ? ` · last plan: ${last.reason}` : "");
    document.querySelector("#cluster-devices tbody").innerHTML = c.devices.map((d) =>
      `<tr><td>${esc(d.device)}</td><td>${d.duty_ms.toFixed(0)} ms</td><td>${pct(d.occupancy)}</td>
       <td>${d.sessions.map((s) => `<span class="session">${esc(s.session)}</span> ` +
         `(${s.rate_rps.toFixed(1)}/s, ${s.batch})`).join(", ")}</td></tr>`).join("");
    const lost = c.lost.map((l) => esc(l.device)).join(", ");
    document.getElementById("cluster-unplaced").textContent =
      (c.unplaced.length ? `unplaced: ${c.unplaced.map((u) => `${u.session} ${u.rate_rps}/s`).join(", ")}. ` : "") +
      (lost ? `lost backends: ${lost}` : "");
  } catch (e) { /* the next round will try again */ }
}
let clusterTimer = null;
function watchCluster() {
  if (clusterTimer !== null) return;
  cluster();
  clusterTimer = setInterval(cluster, 5000);
}
