// One app: time series of its metric windows (plotly.js) and its latest annotated frame.
const name = decodeURIComponent(location.pathname.split("/").pop());
document.getElementById("title").textContent = name;
const layout = (title, ytitle, extra) => Object.assign({
  title: {text: title, font: {size: 14}}, paper_bgcolor: "#1b2027", plot_bgcolor: "#1b2027",
  font: {color: "#ddd"}, margin: {l: 50, r: 10, t: 30, b: 30}, yaxis: {title: ytitle}, showlegend: true,
  legend: {orientation: "h"}}, extra || {});

async function refresh() {
  const [series, metrics] = await Promise.all([
    fetch(`/v1/apps/${encodeURIComponent(name)}/series`).then((r) => r.json()),
    fetch(`/v1/apps/${encodeURIComponent(name)}/metrics`).then((r) => r.json())]);
  const t = series.map((r) => new Date(r.t_s * 1000));
  const slo = metrics.slo_ms;
  Plotly.react("attainment", [{x: t, y: series.map((r) => r.arrived ? r.within_slo / r.arrived : null),
    name: "attainment", mode: "lines+markers"}], layout("SLO attainment", "", {yaxis: {range: [0, 1.05]}}));
  Plotly.react("latency", [
    {x: t, y: series.map((r) => r.p50_ms), name: "p50", mode: "lines"},
    {x: t, y: series.map((r) => r.p99_ms), name: "p99", mode: "lines"},
    {x: t, y: t.map(() => slo), name: "SLO", mode: "lines", line: {dash: "dash"}}], layout("latency", "ms"));
  Plotly.react("throughput", [{x: t, y: series.map((r) => r.completed / r.window_s), name: "frames/s",
    type: "bar"}], layout("throughput", "frames/s"));
  document.getElementById("summary").textContent =
    `SLO ${slo} ms · attainment (last minute) ${pct(metrics.slo_attainment_1m)} · p99 ${ms(metrics.latency_ms.p99)}`;
  document.getElementById("frame").src = `/v1/apps/${encodeURIComponent(name)}/frame.jpg?t=${Date.now()}`;
}
refresh();
setInterval(refresh, 2000);
