// Small canvas charts for the dashboard: lines over time, horizontal bars, grouped bars per
// batch and a heatmap. No library: the page must work with no internet. Each chart sets the
// canvas's data-points attribute to how many values it drew (the browser test reads it).
"use strict";

const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

function prepare(canvas) {
  const ratio = window.devicePixelRatio || 1;
  const w = canvas.clientWidth, h = canvas.clientHeight;
  if (canvas.width !== Math.round(w * ratio) || canvas.height !== Math.round(h * ratio)) {
    canvas.width = Math.round(w * ratio);
    canvas.height = Math.round(h * ratio);
  }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, w, h);
  ctx.font = "11px system-ui, sans-serif";
  return { ctx, w, h };
}

function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function fmt(v) {
  const a = Math.abs(v);
  if (a >= 1e9) return (v / 1e9).toFixed(a >= 1e10 ? 0 : 1) + "G";
  if (a >= 1e6) return (v / 1e6).toFixed(a >= 1e7 ? 0 : 1) + "M";
  if (a >= 1e3) return (v / 1e3).toFixed(a >= 1e4 ? 0 : 1) + "k";
  if (a >= 10 || v === 0) return v.toFixed(0);
  return v.toFixed(a >= 1 ? 1 : 2);
}

function empty(ctx, w, h, text) {
  ctx.fillStyle = "#9aa5b1";
  ctx.textAlign = "center";
  ctx.fillText(text || "waiting for data", w / 2, h / 2);
}

function legend(ctx, items, x, y) {
  ctx.textAlign = "left";
  for (const it of items) {
    ctx.fillStyle = it.color;
    if (it.dash) { ctx.fillRect(x, y - 4, 4, 2); ctx.fillRect(x + 7, y - 4, 4, 2); }
    else ctx.fillRect(x, y - 6, 11, 6);
    ctx.fillStyle = "#44505c";
    ctx.fillText(it.name, x + 15, y);
    x += ctx.measureText(it.name).width + 30;
  }
}

// series: [{name, color, points: [[x, y]], axis: "left"|"right", fill: bool, dash: bool}]
// opts: {xLabel, left: label, right: label, hlines: [{y, name, color}], t0: epoch seconds of x = 0
// (then the x axis shows wall-clock times), gap: the x distance beyond which two neighbouring
// points are not joined (the job was down: no line across traffic that never happened)}
function lineChart(canvas, series, opts) {
  const { ctx, w, h } = prepare(canvas);
  const pad = { l: 52, r: opts.right ? 56 : 14, t: 22, b: 26 };
  const all = series.flatMap(s => s.points);
  canvas.dataset.points = String(all.length);
  canvas.dataset.series = series.filter(s => s.points.length).map(s => s.name).join("|");
  canvas.dataset.lines = (opts.hlines || []).map(l => l.name).join("|");
  if (!all.length) return empty(ctx, w, h);
  let x0 = Math.min(...all.map(p => p[0])), x1 = Math.max(...all.map(p => p[0]));
  if (x1 === x0) x1 = x0 + 1;
  const maxOf = axis => niceMax(Math.max(0, ...series.filter(s => (s.axis || "left") === axis)
    .flatMap(s => s.points.map(p => p[1])), ...(axis === "left" ? (opts.hlines || []).map(l => l.y * 1.1) : [])));
  const yMax = { left: maxOf("left"), right: maxOf("right") };
  const X = x => pad.l + (x - x0) / (x1 - x0) * (w - pad.l - pad.r);
  const Y = (y, axis) => h - pad.b - y / yMax[axis || "left"] * (h - pad.t - pad.b);
  // grid and axes
  ctx.strokeStyle = "#eef1f5"; ctx.fillStyle = "#6b7785"; ctx.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const y = pad.t + i * (h - pad.t - pad.b) / 4;
    ctx.beginPath(); ctx.moveTo(pad.l, y); ctx.lineTo(w - pad.r, y); ctx.stroke();
    ctx.textAlign = "right"; ctx.fillText(fmt(yMax.left * (1 - i / 4)), pad.l - 6, y + 4);
    if (opts.right) { ctx.textAlign = "left"; ctx.fillText(fmt(yMax.right * (1 - i / 4)), w - pad.r + 6, y + 4); }
  }
  ctx.textAlign = "center";
  for (let i = 0; i <= 5; i++) {
    const x = x0 + i * (x1 - x0) / 5;
    ctx.fillText(opts.t0 !== undefined ? clock(opts.t0 + x, x1 - x0) : fmt(x), X(x), h - pad.b + 14);
  }
  ctx.textAlign = "right"; ctx.fillText(opts.xLabel || "", w - pad.r, h - 2);
  ctx.save(); ctx.translate(11, pad.t + (h - pad.t - pad.b) / 2); ctx.rotate(-Math.PI / 2);
  ctx.textAlign = "center"; ctx.fillText(opts.left || "", 0, 0); ctx.restore();
  if (opts.right) {
    ctx.save(); ctx.translate(w - 6, pad.t + (h - pad.t - pad.b) / 2); ctx.rotate(Math.PI / 2);
    ctx.textAlign = "center"; ctx.fillText(opts.right, 0, 0); ctx.restore();
  }
  // series, each drawn as segments broken where the job was down
  let breaks = 0;
  for (const s of series) {
    if (!s.points.length) continue;
    const parts = segments(s.points, opts.gap);
    breaks += parts.length - 1;
    ctx.strokeStyle = s.color; ctx.lineWidth = s.dash ? 1.2 : 1.8;
    ctx.setLineDash(s.dash ? [4, 3] : []);
    for (const seg of parts) {
      ctx.beginPath();
      seg.forEach((p, i) => i ? ctx.lineTo(X(p[0]), Y(p[1], s.axis)) : ctx.moveTo(X(p[0]), Y(p[1], s.axis)));
      ctx.stroke();
      if (s.fill) {
        ctx.lineTo(X(seg[seg.length - 1][0]), Y(0, s.axis));
        ctx.lineTo(X(seg[0][0]), Y(0, s.axis));
        ctx.closePath(); ctx.globalAlpha = 0.12; ctx.fillStyle = s.color; ctx.fill(); ctx.globalAlpha = 1;
      }
      if (seg.length === 1) {
        ctx.fillStyle = s.color; ctx.beginPath();
        ctx.arc(X(seg[0][0]), Y(seg[0][1], s.axis), 3, 0, 2 * Math.PI); ctx.fill();
      }
    }
    ctx.setLineDash([]);
  }
  canvas.dataset.breaks = String(breaks);
  for (const l of opts.hlines || []) {
    ctx.strokeStyle = l.color; ctx.setLineDash([6, 4]); ctx.lineWidth = 1.5;
    ctx.beginPath(); ctx.moveTo(pad.l, Y(l.y)); ctx.lineTo(w - pad.r, Y(l.y)); ctx.stroke();
    ctx.setLineDash([]); ctx.fillStyle = l.color; ctx.textAlign = "left";
    ctx.fillText(l.name, pad.l + 4, Y(l.y) - 4);
  }
  legend(ctx, series.map(s => ({ name: s.name, color: s.color }))
    .concat((opts.hlines || []).map(l => ({ name: l.name, color: l.color, dash: true }))), pad.l, 12);
}

// Points split where neighbours are more than `gap` apart on x (no gap given: never).
function segments(points, gap) {
  const out = [[points[0]]];
  for (let i = 1; i < points.length; i++) {
    if (gap !== undefined && points[i][0] - points[i - 1][0] > gap) out.push([]);
    out[out.length - 1].push(points[i]);
  }
  return out;
}

// A wall-clock time (the browser's time zone): seconds shown when the chart spans minutes.
function clock(epochS, spanS) {
  const d = new Date(epochS * 1000);
  const two = n => String(n).padStart(2, "0");
  return `${two(d.getHours())}:${two(d.getMinutes())}` + (spanS < 1800 ? `:${two(d.getSeconds())}` : "");
}

// The x distance beyond which points are not joined: five times the median spacing, at
// least 10 s (a pause that long means the job was not running).
function gapOf(xs) {
  if (xs.length < 3) return undefined;
  const d = xs.slice(1).map((x, i) => x - xs[i]).sort((a, b) => a - b);
  return Math.max(10, 5 * d[Math.floor(d.length / 2)]);
}

// bars: [{name, value}] drawn horizontally, largest first
function barChart(canvas, bars, unit) {
  const { ctx, w, h } = prepare(canvas);
  canvas.dataset.points = String(bars.length);
  if (!bars.length) return empty(ctx, w, h);
  bars = bars.slice().sort((a, b) => b.value - a.value).slice(0, 10);
  const label = Math.min(170, Math.max(...bars.map(b => ctx.measureText(b.name).width)) + 10);
  const max = niceMax(Math.max(...bars.map(b => b.value)));
  const rowH = Math.min(26, (h - 8) / bars.length);
  bars.forEach((b, i) => {
    const y = 4 + i * rowH;
    const bw = b.value / max * (w - label - 70);
    ctx.fillStyle = "#44505c"; ctx.textAlign = "right";
    ctx.fillText(b.name, label - 6, y + rowH / 2 + 4);
    ctx.fillStyle = PALETTE[i % PALETTE.length];
    ctx.fillRect(label, y + 3, Math.max(bw, 1), rowH - 6);
    ctx.fillStyle = "#44505c"; ctx.textAlign = "left";
    ctx.fillText(fmt(b.value) + (unit || ""), label + bw + 6, y + rowH / 2 + 4);
  });
}

// groups: [{name, color, points: [[batch, value]]}] as side-by-side bars per batch
function batchBars(canvas, groups, opts) {
  const { ctx, w, h } = prepare(canvas);
  const pad = { l: 44, r: 12, t: 22, b: 26 };
  const batches = [...new Set(groups.flatMap(g => g.points.map(p => p[0])))].sort((a, b) => a - b);
  canvas.dataset.points = String(batches.length);
  if (!batches.length) return empty(ctx, w, h);
  const max = niceMax(Math.max(1, ...groups.flatMap(g => g.points.map(p => p[1]))));
  const slot = (w - pad.l - pad.r) / batches.length;
  const index = new Map(batches.map((b, i) => [b, i]));
  ctx.strokeStyle = "#eef1f5"; ctx.fillStyle = "#6b7785";
  for (let i = 0; i <= 4; i++) {
    const y = pad.t + i * (h - pad.t - pad.b) / 4;
    ctx.beginPath(); ctx.moveTo(pad.l, y); ctx.lineTo(w - pad.r, y); ctx.stroke();
    ctx.textAlign = "right"; ctx.fillText(fmt(max * (1 - i / 4)), pad.l - 6, y + 4);
  }
  groups.forEach((g, gi) => {
    ctx.fillStyle = g.color;
    for (const [b, v] of g.points) {
      if (!v) continue;
      const bh = v / max * (h - pad.t - pad.b);
      const x = pad.l + index.get(b) * slot + gi * slot / groups.length;
      ctx.fillRect(x, h - pad.b - bh, Math.max(slot / groups.length - 1, 1), bh);
    }
  });
  ctx.fillStyle = "#6b7785"; ctx.textAlign = "center";
  const step = Math.max(1, Math.ceil(batches.length / 8));
  batches.forEach((b, i) => { if (i % step === 0) ctx.fillText(String(b), pad.l + (i + 0.5) * slot, h - pad.b + 14); });
  ctx.textAlign = "right"; ctx.fillText(opts.xLabel || "batch", w - pad.r, h - 2);
  legend(ctx, groups.map(g => ({ name: g.name + (g.total !== undefined ? " (" + fmt(g.total) + " total)" : ""),
    color: g.color })), pad.l, 12);
}

// columns: [{batch, values: [rows per key group]}]; one cell per (key group, batch)
function heatmap(canvas, columns) {
  const { ctx, w, h } = prepare(canvas);
  canvas.dataset.points = String(columns.length);
  if (!columns.length) return empty(ctx, w, h);
  const pad = { l: 44, r: 10, t: 6, b: 22 };
  const groups = Math.max(...columns.map(c => c.values.length));
  const max = Math.max(1, ...columns.flatMap(c => c.values));
  const cw = (w - pad.l - pad.r) / columns.length, ch = (h - pad.t - pad.b) / groups;
  columns.forEach((c, i) => {
    c.values.forEach((v, kg) => {
      const t = Math.sqrt(v / max);  // square root: a hot key group stands out, cold ones still show
      ctx.fillStyle = `hsl(${210 - 200 * t}, ${60 + 30 * t}%, ${96 - 48 * t}%)`;
      ctx.fillRect(pad.l + i * cw, pad.t + kg * ch, Math.ceil(cw), Math.ceil(ch));
    });
  });
  ctx.fillStyle = "#6b7785"; ctx.textAlign = "right";
  for (const kg of [0, Math.floor(groups / 2), groups - 1]) ctx.fillText("kg " + kg, pad.l - 4, pad.t + (kg + 0.5) * ch + 4);
  ctx.textAlign = "center";
  const step = Math.max(1, Math.ceil(columns.length / 8));
  columns.forEach((c, i) => { if (i % step === 0) ctx.fillText(String(c.batch), pad.l + (i + 0.5) * cw, h - pad.b + 14); });
  ctx.textAlign = "right"; ctx.fillText("batch  (max " + fmt(max) + " rows)", w - pad.r, h - 2);
}
