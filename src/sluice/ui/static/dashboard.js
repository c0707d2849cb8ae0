// The dashboard: polls /api/state once a second for the batches it has not seen yet and
// redraws. The page keeps the last MAX_BATCHES batches; the server keeps the whole job.
"use strict";

const MAX_BATCHES = 600;
const HEATMAP_BATCHES = 60;
const POLL_MS = 1000;
const state = { batches: [], decisions: [], seenDecisions: 0, since: -1, data: null, failures: 0 };

const $ = id => document.getElementById(id);
const sum = xs => xs.reduce((a, b) => a + b, 0);
const esc = s => String(s).replace(/[&<>"]/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);

async function poll() {
  try {
    const res = await fetch(`/api/state?since=${state.since}`, { cache: "no-store" });
    if (!res.ok) throw new Error(res.statusText);
    const data = await res.json();
    state.failures = 0;
    state.data = data;
    for (const b of data.batches) state.batches.push(b);
    if (state.batches.length > MAX_BATCHES) state.batches.splice(0, state.batches.length - MAX_BATCHES);
    if (state.batches.length) state.since = state.batches[state.batches.length - 1].batch_id;
    state.decisions = data.decisions;
    render();
  } catch (e) {
    state.failures += 1;
    setStatus("down", "server unreachable");
  }
  setTimeout(poll, POLL_MS);
}

function setStatus(cls, text) {
  const el = $("status");
  el.className = "status " + cls;
  el.textContent = text;
}

function render() {
  const d = state.data, bs = state.batches.filter(b => !b.skipped);
  $("job").textContent = d.job || "";
  $("checkpoint").textContent = d.checkpoint;
  const last = bs[bs.length - 1];
  const age = last ? Date.now() / 1000 - (last.t + last.duration_s) : null;
  if (!last) setStatus("idle", "no batch yet");
  // live while the next batch is about due: a few times the last batch's duration, at least 15 s
  else if (age < Math.max(15, 3 * last.duration_s + 5)) setStatus("live", `live · batch ${last.batch_id}`);
  else setStatus("idle", `last batch ${last.batch_id}, ${fmtAge(age)} ago`);
  renderTiles(d, bs);
  const t0 = bs.length ? bs[0].t : 0;
  const axis = { t0, gap: gapOf(bs.map(b => b.t - t0)), xLabel: "time" };
  renderThroughput(bs, axis);
  renderLatency(bs, axis, d.constraints || {});
  renderOperators(bs);
  renderSide(bs);
  renderEventTime(bs, axis, d.event_time || {});
  renderState(bs, axis);
  renderHeatmaps(bs);
  renderPlan(d.plan, d.executors);
  renderDecisions(state.decisions);
}

function fmtAge(s) {
  if (s < 120) return Math.round(s) + " s";
  if (s < 7200) return Math.round(s / 60) + " min";
  return Math.round(s / 3600) + " h";
}

function renderTiles(d, bs) {
  const t = d.totals;
  $("t-batches").textContent = t.batches.toLocaleString();
  $("t-rows").textContent = fmt(t.rows);
  const recent = bs.slice(-10);
  if (recent.length) {
    const span = recent.length > 1 ? recent[recent.length - 1].t + recent[recent.length - 1].duration_s - recent[0].t
      : recent[0].duration_s;
    $("t-rate").textContent = fmt(sum(recent.map(b => b.rows_in)) / Math.max(span, 1e-3));
    const last = bs[bs.length - 1];
    const p99 = Math.max(0, ...Object.values(last.latency).map(l => l.p99 || 0));
    $("t-p99").textContent = !Object.keys(last.latency).length ? "–" : p99 >= 10000 ? fmt(p99 / 1000) + " s" : fmt(p99) + " ms";
    $("t-backlog").textContent = fmt(sum(Object.values(last.backlog)));
  }
  $("t-dead").textContent = t.dead_letters.toLocaleString();
  $("t-late").textContent = t.late.toLocaleString();
}

function renderThroughput(bs, axis) {
  const t0 = axis.t0;
  lineChart($("c-throughput"), [
    { name: "rows/s", color: PALETTE[0], points: bs.map(b => [b.t - t0, b.rows_per_s]), fill: true },
    { name: "backlog (rows)", color: PALETTE[1], axis: "right",
      points: bs.filter(b => Object.keys(b.backlog).length).map(b => [b.t - t0, sum(Object.values(b.backlog))]) },
  ], { ...axis, left: "rows/s", right: "backlog" });
}

function renderLatency(bs, axis, constraints) {
  const t0 = axis.t0;
  // each constrained path's mean latency per batch, the figure its bound is about (Eq. 1):
  // dashed and drawn first, so the percentiles stay visible over it
  const names = [...new Set(bs.flatMap(b => Object.keys(b.paths || {})))].sort();
  const series = names.map((name, i) => ({
    name: `${name} mean`, color: ["#17becf", "#9467bd", "#8c564b"][i % 3], dash: true,
    points: bs.filter(b => b.paths && b.paths[name] !== undefined).map(b => [b.t - t0, b.paths[name]]),
  }));
  // worst sink's percentiles per batch (the figure a latency bound is about)
  ["p50", "p95", "p99"].forEach((p, i) => series.push({
    name: p, color: [PALETTE[2], PALETTE[1], PALETTE[3]][i],
    points: bs.filter(b => Object.keys(b.latency).length)
      .map(b => [b.t - t0, Math.max(...Object.values(b.latency).map(l => l[p] || 0))]),
  }));
  const hlines = Object.entries(constraints).filter(([, c]) => c.bound_ms !== null && c.bound_ms !== undefined)
    .map(([name, c], i) => ({ y: c.bound_ms, name: `bound ${name}: ${fmt(c.bound_ms)} ms`, color: i ? "#7f3fbf" : "#b2182b" }));
  const held = Object.entries(constraints).map(([name, c]) => {
    const st = c.state || (c.holds === true ? "met" : c.holds === false ? "violated" : "");
    return st ? `${name} ${st === "violated" ? "VIOLATED" : st}` : "";
  }).filter(Boolean);
  $("constraint-note").textContent = hlines.length ? "dashed: constraint bound" + (held.length ? " · " + held.join(", ") : "")
    : "no latency constraint declared";
  lineChart($("c-latency"), series, { ...axis, left: "ms", hlines });
}

function renderEventTime(bs, axis, event) {
  // the job's one watermark (every stateful operator's) behind processing time, per batch
  lineChart($("c-event"), [
    { name: "watermark lag (s)", color: PALETTE[4],
      points: bs.filter(b => b.event_lag_s !== null && b.event_lag_s !== undefined).map(b => [b.t - axis.t0, b.event_lag_s]) },
  ], { ...axis, left: "seconds" });
  const sources = Object.entries(event.sources || {});
  $("event-note").textContent = event.ended ? "the input ended: every window closed" : !event.watermark_us ? "no event time"
    : `watermark ${new Date(event.watermark_us / 1000).toLocaleString()}` + (sources.length ? " · " + sources.map(
      ([s, v]) => `${s} latest event ${fmt(v.lag_s)} s behind`).join(", ") : "");
}

function renderState(bs, axis) {
  const ops = [...new Set(bs.flatMap(b => Object.keys(b.state_bytes || {})))].sort();
  lineChart($("c-state"), ops.map((op, i) => ({
    name: op, color: PALETTE[i % PALETTE.length],
    points: bs.filter(b => b.state_bytes && b.state_bytes[op] !== undefined).map(b => [b.t - axis.t0, b.state_bytes[op]]),
  })), { ...axis, left: "bytes" });
}

function renderOperators(bs) {
  const recent = bs.slice(-20), totals = {};
  for (const b of recent) for (const [op, s] of Object.entries(b.operators)) totals[op] = (totals[op] || 0) + s;
  barChart($("c-operators"), Object.entries(totals).map(([name, s]) => ({ name, value: s / recent.length })), " s");
}

function renderSide(bs) {
  const recent = bs.slice(-60);
  batchBars($("c-side"), [
    { name: "dead letters", color: PALETTE[3], points: recent.map(b => [b.batch_id, b.dead_letters]),
      total: state.data.totals.dead_letters },
    { name: "late records", color: PALETTE[4], points: recent.map(b => [b.batch_id, b.late]), total: state.data.totals.late },
  ], { xLabel: "batch" });
  const byOp = {};
  for (const b of bs) for (const [op, n] of Object.entries(b.dead_letters_by_operator || {})) byOp[op] = (byOp[op] || 0) + n;
  const split = Object.entries(byOp).sort((a, b) => b[1] - a[1]).map(([op, n]) => `${op} ${n.toLocaleString()}`);
  $("dead-note").textContent = split.length ? "dead letters by operator: " + split.join(", ") : "per batch";
}

function renderHeatmaps(bs) {
  const recent = bs.slice(-HEATMAP_BATCHES);
  const ops = [...new Set(recent.flatMap(b => Object.keys(b.key_groups)))].sort();
  const box = $("heatmaps");
  if (!ops.length) return;
  if (box.dataset.ops !== ops.join(",")) {
    box.innerHTML = ops.map(op => `<div class="heatmap"><h3>${esc(op)}</h3><canvas data-op="${esc(op)}" data-points="0"></canvas></div>`).join("");
    box.dataset.ops = ops.join(",");
  }
  for (const canvas of box.querySelectorAll("canvas")) {
    const op = canvas.dataset.op;
    heatmap(canvas, recent.filter(b => b.key_groups[op]).map(b => ({ batch: b.batch_id, values: b.key_groups[op] })));
  }
}

function renderPlan(plan, executors) {
  if (!plan) return;
  let html = `<p class="kv">plan version ${plan.version} (from batch ${plan.version}) · max parallelism ${plan.max_parallelism}`
    + ` · ${plan.chains.length} fused Python chain${plan.chains.length === 1 ? "" : "s"}</p>`;
  if (executors !== null && executors !== undefined) {
    const list = Array.isArray(executors) ? executors : typeof executors === "object" ? Object.entries(executors).map(([k, v]) => ({ id: k, ...(typeof v === "object" ? v : { value: v }) })) : [{ count: executors }];
    html += `<p><b>executors</b>: ${list.length}</p><table><tbody>` + list.map(e =>
      `<tr>${Object.entries(e).map(([k, v]) => `<td><span class="kv">${esc(k)}</span> ${esc(k === "since" && typeof v === "number" ? new Date(v * 1000).toLocaleTimeString() : v)}</td>`).join("")}</tr>`).join("") + "</tbody></table>";
  } else {
    html += `<p class="kv">executors: not reported by this job</p>`;
  }
  for (const [op, s] of Object.entries(plan.keyed)) {
    const max = Math.max(1, ...s.key_groups_per_partition);
    html += `<div class="stage"><b>${esc(op)}</b> <span class="kv">${s.partitions} partition${s.partitions === 1 ? "" : "s"}; key groups per partition</span>`
      + `<div class="bars">${s.key_groups_per_partition.map((n, p) =>
        `<div class="bar" title="partition ${p}: ${n} key groups" style="height:${Math.max(4, n / max * 100)}%"></div>`).join("")}</div></div>`;
  }
  $("plan").innerHTML = html;
}

function describe(v) {
  if (v === null || v === undefined) return "";
  if (typeof v !== "object") return String(v);
  const show = x => typeof x === "number" ? x.toLocaleString(undefined, { maximumFractionDigits: 1 })
    : typeof x === "object" ? JSON.stringify(x) : x;
  return Object.entries(v).map(([k, x]) => `${k}: ${show(x)}`).join(", ");
}

function renderDecisions(decisions) {
  if (!decisions.length) return;
  const body = $("decisions").tBodies[0];
  const fresh = decisions.length - state.seenDecisions;
  state.seenDecisions = decisions.length;
  body.innerHTML = decisions.slice().reverse().map((d, i) =>
    `<tr class="decision ${esc(d.type)}${i < fresh ? " new" : ""}"><td>${esc(d.batch_id ?? "")}</td><td>${esc(d.policy)}</td>`
    + `<td>${esc(d.action)}</td><td>${esc(d.reason)}</td>`
    + `<td>${esc(describe(d.expected))}</td><td>${esc(describe(d.measured))}</td></tr>`).join("");
}

window.addEventListener("resize", () => state.data && render());
poll();
