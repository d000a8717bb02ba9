// One camera live: each of its apps' latest annotated frame (boxes with track ids,
// lines with counts, zones with occupancy; GET /v1/apps/{name}/frame.jpg, at most one
// new frame a second), refreshed every second.
const stream = decodeURIComponent(location.pathname.split("/").pop());
document.getElementById("title").textContent = stream;
document.getElementById("events-link").href = `/dashboard/events?stream=${encodeURIComponent(stream)}`;

let apps = [];
async function layout() {
  try {
    const o = await (await fetch("/v1/overview")).json();
    const s = o.streams.find((x) => x.name === stream);
    document.getElementById("status").textContent = s ? `${s.status} · ${s.frames_decoded} frames decoded` :
      "no such stream";
    const names = o.apps.filter((a) => a.streams.some((x) => x.name === stream)).map((a) => a.name);
    if (names.join() === apps.join()) return;
    apps = names;
    document.getElementById("views").innerHTML = apps.map((a) =>
      `<figure data-app="${esc(a)}"><img class="frame live" alt="${esc(a)}, latest frame">
       <figcaption><a href="/dashboard/apps/${encodeURIComponent(a)}">${esc(a)}</a></figcaption></figure>`).join("") ||
      '<p class="muted">No app watches this stream.</p>';
  } catch (err) { /* the next round will try again */ }
}

function refresh() {
  for (const fig of document.querySelectorAll("#views figure")) {
    const img = fig.querySelector("img"), next = new Image();
    // swapped in once loaded, so a frame never blanks while the next one comes
    next.className = img.className;
    next.alt = img.alt;
    next.onload = () => { if (img.isConnected) img.replaceWith(next); };
    next.src = `/v1/apps/${encodeURIComponent(fig.dataset.app)}/frame.jpg?t=${Date.now()}`;
  }
}
layout().then(refresh);
setInterval(refresh, 1000);
setInterval(layout, 5000);
