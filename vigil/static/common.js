// Helpers every dashboard page shares; loaded before the page's own script.
// A share as a percentage, a latency in ms ("inf": a percentile past the drops); "–" for none.
const pct = (x) => (x === null || x === undefined ? "–" : (100 * x).toFixed(1) + "%");
const ms = (x) => (x === null || x === undefined ? "–" : x === "inf" ? "∞ (drops)" : x.toFixed(0) + " ms");
// Text from the API (names, errors, labels) goes into HTML only through esc.
const esc = (s) => String(s ?? "").replace(/[&<>"]/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
// An event's or caption's time: live streams' are epoch ms, shown as the local clock;
// a file's are stream time, shown as m:ss.s into the clip.
const DAY_MS = 864e5;
function clock(ms) {
  if (ms > DAY_MS) return new Date(ms).toLocaleTimeString();
  const s = ms / 1000;
  return `${Math.floor(s / 60)}:${(s % 60).toFixed(1).padStart(4, "0")}`;
}
function when(ms) {
  if (ms > DAY_MS) return new Date(ms).toLocaleString([], {dateStyle: "short", timeStyle: "medium"});
  return `${clock(ms)} into the clip`;
}
