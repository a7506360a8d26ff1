// fatstudio's notebook views (anywidget). Every number comes from Python (fatstudio.notebook.state); this file
// only draws them, with SVG and canvas, and sends back what the person chooses (a step, a head, a way to knock
// out). No library, no network.
const SVG = "http://www.w3.org/2000/svg";

function node(tag, props = {}, ...children) {
  const e = document.createElement(tag);
  Object.assign(e, props);
  e.append(...children);
  return e;
}

function svgNode(tag, attrs = {}) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

// a weight in [0, 1] on the app's viridis scale (the palette's colours evenly spaced over 0-1)
function colour(palette, v) {
  const x = Math.min(1, Math.max(0, Number.isFinite(v) ? v : 0)) * (palette.length - 1);
  const i = Math.min(palette.length - 2, Math.floor(x)), f = x - i;
  const c = palette[i].map((a, k) => Math.round(a + f * (palette[i + 1][k] - a)));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

function drawCells(canvas, cells, palette, size) {
  const rows = cells.length, cols = rows ? cells[0].length : 0;
  canvas.width = cols * size;
  canvas.height = rows * size;
  const g = canvas.getContext("2d");
  cells.forEach((row, i) => row.forEach((v, j) => {
    g.fillStyle = colour(palette, v);
    g.fillRect(j * size, i * size, size, size);
  }));
}

function ticks(lo, hi, n) {
  const step = (hi - lo) / n;
  return Array.from({ length: n + 1 }, (_, i) => lo + i * step);
}

// ---------------------------------------------------------------------------------------------- the views
function lossCurves(model, body) {
  const train = model.get("train"), val = model.get("val");
  const all = train.concat(val);
  if (!all.length) { body.append(node("p", { textContent: "No steps recorded yet." })); return; }
  const W = 640, H = 280, m = { l: 50, r: 16, t: 12, b: 36 };
  const xs = all.map(p => p[0]), ys = all.map(p => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1), y0 = Math.min(...ys), y1 = Math.max(...ys, y0 + 1e-9);
  const X = s => m.l + (s - x0) / (x1 - x0) * (W - m.l - m.r);
  const Y = v => H - m.b - (v - y0) / (y1 - y0) * (H - m.t - m.b);
  const svg = svgNode("svg", { width: W, height: H, class: "fs-plot" });
  for (const v of ticks(y0, y1, 4)) {
    svg.append(svgNode("line", { x1: m.l, x2: W - m.r, y1: Y(v), y2: Y(v), class: "fs-grid" }));
    const t = svgNode("text", { x: m.l - 6, y: Y(v) + 4, "text-anchor": "end" });
    t.textContent = v.toFixed(2);
    svg.append(t);
  }
  for (const s of ticks(x0, x1, 5)) {
    const t = svgNode("text", { x: X(s), y: H - m.b + 16, "text-anchor": "middle" });
    t.textContent = Math.round(s).toLocaleString();
    svg.append(t);
  }
  const label = svgNode("text", { x: (W + m.l) / 2, y: H - 4, "text-anchor": "middle" });
  label.textContent = "step";
  svg.append(label);
  const line = (pts, cls) => svg.append(svgNode("polyline", { points: pts.map(p => `${X(p[0])},${Y(p[1])}`).join(" "), class: cls }));
  line(train, "fs-train");
  line(val, "fs-val");
  for (const p of val) svg.append(svgNode("circle", { cx: X(p[0]), cy: Y(p[1]), r: 3, class: "fs-val-dot" }));
  const last = pts => pts.length ? pts[pts.length - 1][1].toFixed(3) : "–";
  body.append(svg, node("div", { className: "fs-legend" },
    node("span", { className: "fs-key fs-train-key", textContent: `training loss (last ${last(train)})` }),
    node("span", { className: "fs-key fs-val-key", textContent: `validation loss (last ${last(val)})` })));
}

function attention(model, body) {
  const palette = model.get("palette"), grid = model.get("grid");
  if (!grid.length) return;
  const heads = grid.filter(c => c.layer === grid[0].layer).length;
  const cells = node("div", { className: "fs-grid-cells" });
  cells.style.gridTemplateColumns = `repeat(${heads}, auto)`;
  for (const c of grid) {
    const canvas = node("canvas", { className: "fs-thumb" });
    drawCells(canvas, c.cells, palette, Math.max(1, Math.floor(64 / c.cells.length)));
    const scores = Object.entries(c.scores).filter(([, v]) => v >= 0.5).map(([k, v]) => `${k} ${v.toFixed(2)}`);
    const chosen = c.layer === model.get("layer") && c.head === model.get("head");
    const cell = node("div", { className: "fs-cell" + (chosen ? " fs-chosen" : ""), title: "show this head large" },
      canvas, node("div", { className: "fs-caption", textContent: `${c.title}\nH ${c.entropy.toFixed(2)}${scores.length ? " · " + scores.join(" · ") : ""}` }));
    cell.onclick = () => { model.set("layer", c.layer); model.set("head", c.head); model.save_changes(); };
    cells.append(cell);
  }
  // the head shown large, its query tokens down the side and its key tokens along the top
  const A = model.get("matrix"), qt = model.get("query_tokens"), kt = model.get("key_tokens");
  const size = Math.max(6, Math.min(18, Math.floor(480 / Math.max(1, kt.length))));
  const pad = 64, big = node("canvas", { className: "fs-map" });
  big.width = pad + kt.length * size;
  big.height = pad + qt.length * size;
  const g = big.getContext("2d");
  g.font = `${Math.min(12, size)}px monospace`;
  g.fillStyle = "#333";
  g.textAlign = "right";
  g.textBaseline = "middle";
  qt.forEach((t, i) => g.fillText(t, pad - 4, pad + (i + 0.5) * size));
  kt.forEach((t, j) => {
    g.save();
    g.translate(pad + (j + 0.5) * size, pad - 4);
    g.rotate(-Math.PI / 2);
    g.textAlign = "left";
    g.fillText(t, 0, 0);
    g.restore();
  });
  A.forEach((row, i) => row.forEach((v, j) => {
    g.fillStyle = colour(palette, v);
    g.fillRect(pad + j * size, pad + i * size, size, size);
  }));
  const chosen = grid.find(c => c.layer === model.get("layer") && c.head === model.get("head"));
  const readout = node("div", { className: "fs-readout", textContent: "the weight under the cursor" });
  big.onmousemove = ev => {
    const r = big.getBoundingClientRect();
    const j = Math.floor((ev.clientX - r.left - pad) / size), i = Math.floor((ev.clientY - r.top - pad) / size);
    if (i >= 0 && j >= 0 && i < qt.length && j < kt.length)
      readout.textContent = `query ${i} '${qt[i]}' → key ${j} '${kt[j]}': ${A[i][j].toFixed(4)}`;
  };
  body.append(node("div", { className: "fs-attention" }, cells,
    node("div", {}, node("div", { className: "fs-caption", textContent: chosen ? chosen.title : "" }), big, readout)));
}

function lens(model, body) {
  const palette = model.get("palette"), rows = model.get("rows");
  if (!rows.length) return;
  const table = node("table", { className: "fs-lens" });
  table.append(node("tr", {}, node("th", { textContent: "reads" }), ...model.get("tokens").map(t => node("th", { textContent: t }))));
  for (const r of rows.slice().reverse()) {
    table.append(node("tr", {}, node("th", { textContent: r.label }), ...r.tokens.map((t, i) => {
      const td = node("td", { textContent: t, title: `p = ${r.probs[i].toFixed(4)}` });
      td.style.background = colour(palette, r.probs[i]);
      td.style.color = r.probs[i] > 0.6 ? "#000" : "#fff";
      return td;
    })));
  }
  body.append(table, node("div", { className: "fs-caption", textContent: "each cell: the most likely next token read after that layer, coloured by its probability (0-1)" }));
}

function tokenLoss(model, body) {
  const tokens = model.get("tokens"), loss = model.get("loss");
  const top = Math.max(...loss, 1e-9);
  body.append(node("div", { className: "fs-caption", textContent:
    `mean ${model.get("mean").toFixed(4)} nats over ${model.get("n_tokens").toLocaleString()} tokens; the first ${tokens.length.toLocaleString()} shown, redder = higher loss (top ${top.toFixed(2)} nats)` }));
  const text = node("div", { className: "fs-text" });
  tokens.forEach((t, i) => {
    const s = node("span", { textContent: t, title: `${JSON.stringify(t)}: ${loss[i].toFixed(3)} nats` });
    s.style.background = `rgba(220, 40, 40, ${(loss[i] / top).toFixed(3)})`;
    text.append(s);
  });
  body.append(text);
}

function knockout(model, body) {
  const rows = model.get("rows");
  if (!rows.length) return;
  const top = Math.max(...rows.map(r => Math.abs(r.delta_loss)), 1e-9);
  const table = node("table", { className: "fs-knockout" });
  table.append(node("tr", {}, ...["component", "loss", "Δ loss", ""].map(t => node("th", { textContent: t }))));
  for (const r of rows) {
    const bar = node("div", { className: r.delta_loss >= 0 ? "fs-bar" : "fs-bar fs-bar-down" });
    bar.style.width = `${(120 * Math.abs(r.delta_loss) / top).toFixed(1)}px`;
    table.append(node("tr", {}, node("td", { textContent: r.label, title: r.component }), node("td", { textContent: r.loss.toFixed(4) }),
      node("td", { textContent: (r.delta_loss >= 0 ? "+" : "") + r.delta_loss.toFixed(4) }), node("td", {}, bar)));
  }
  body.append(node("div", { className: "fs-caption", textContent: `baseline validation loss ${model.get("baseline").toFixed(4)} nats` }), table);
}

// ----------------------------------------------------------------------------------- controls and render
function stepSlider(model) {
  const steps = model.get("steps");
  const label = node("span", { className: "fs-step" });
  const slider = node("input", { type: "range", min: 0, max: Math.max(0, steps.length - 1) });
  const sync = () => {
    const i = steps.indexOf(model.get("step"));
    slider.value = Math.max(0, i);
    label.textContent = `step ${model.get("step").toLocaleString()} (${i + 1} of ${steps.length} evaluations)`;
  };
  slider.oninput = () => { model.set("step", steps[Number(slider.value)]); model.save_changes(); };
  model.on("change:step", sync);
  sync();
  return node("div", { className: "fs-controls" }, node("span", { textContent: "probe step " }), slider, label);
}

function kindChoice(model) {
  const select = node("select", {}, ...model.get("kinds").map(k => node("option", { value: k, textContent: k })));
  select.value = model.get("kind");
  select.onchange = () => { model.set("kind", select.value); model.save_changes(); };
  model.on("change:kind", () => { select.value = model.get("kind"); });
  return node("div", { className: "fs-controls" }, node("span", { textContent: "knock out by " }), select);
}

const VIEWS = {  // view: [draw, the traits it draws, its controls]
  loss: [lossCurves, ["train", "val"], null],
  attention: [attention, ["grid", "matrix", "layer", "head"], stepSlider],
  lens: [lens, ["rows"], stepSlider],
  token_loss: [tokenLoss, ["tokens", "loss"], null],
  knockout: [knockout, ["rows", "baseline"], kindChoice],
};

function render({ model, el }) {
  const [draw, traits, controls] = VIEWS[model.get("view")];
  const error = node("div", { className: "fs-error" }), body = node("div");
  const redraw = () => {
    error.textContent = model.get("error");
    body.replaceChildren();
    draw(model, body);
  };
  el.classList.add("fs-view");
  el.append(node("div", { className: "fs-title", textContent: model.get("title") }), ...(controls ? [controls(model)] : []), error, body);
  for (const t of [...traits, "error"]) model.on(`change:${t}`, redraw);
  redraw();
}

export default { render };
