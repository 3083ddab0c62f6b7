"use strict";
// attnkit explorer: the grid of thumbnails, token strips with hover, the step view and
// the summary table. State lives in AK.S; AK.update() (app.js) redraws the big map.

AK.S = { payload: null, g: 0, view: "head", layer: 0, head: 0, mode: "weight", step: 0,
  geo: null, spec: null, sort: { key: null, dir: 1 } };
const $ = (id) => document.getElementById(id);

AK.group = () => AK.S.payload.groups[AK.S.g];
AK.current = function () {
  const S = AK.S;
  return { map: AK.getMap(S.payload, S.g, S.view, S.layer), h: S.view === "head" ? S.head : 0 };
};
AK.tokens = function () {
  const g = AK.group(), p = AK.S.payload;
  return { q: AK.axisTokens(p, g.query), k: AK.axisTokens(p, g.key) };
};

// ---- grid of layers x heads (+ average, rollout); thumbnails drawn when scrolled into view
AK.observer = null;
AK.drawThumbCell = function (cv) {
  const view = cv.dataset.view;
  const map = AK.getMap(AK.S.payload, AK.S.g, view, +cv.dataset.layer);
  AK.drawThumb(cv, map, view === "head" ? +cv.dataset.head : 0, AK.S.mode, 48);
};
AK.observeThumbs = function () {
  const cells = document.querySelectorAll("#grid canvas");
  if (AK.observer) AK.observer.disconnect();
  if (!("IntersectionObserver" in window)) return cells.forEach(AK.drawThumbCell);
  AK.observer = new IntersectionObserver((entries, obs) => {
    for (const e of entries) if (e.isIntersecting) { AK.drawThumbCell(e.target); obs.unobserve(e.target); }
  }, { root: null, rootMargin: "64px" });
  cells.forEach((c) => { c.dataset.drawn = ""; AK.observer.observe(c); });
};
AK.renderGrid = function () {
  const g = AK.group();
  const cols = [];
  for (let h = 0; h < g.heads; h++) cols.push(["head", h, `h${h}`]);
  cols.push(["average", 0, "avg"]);
  if (g.rollout) cols.push(["rollout", 0, "roll"]);
  let html = "<table><thead><tr><th></th>" + cols.map((c) => `<th>${c[2]}</th>`).join("") + "</tr></thead><tbody>";
  for (let l = 0; l < g.layers; l++) {
    html += `<tr><th>L${l}</th>` + cols.map(([view, h, name]) =>
      `<td><canvas data-testid="thumb" data-view="${view}" data-layer="${l}" data-head="${h}" ` +
      `title="layer ${l} ${name}" width="48" height="48"></canvas></td>`).join("") + "</tr>";
  }
  $("grid").innerHTML = html + "</tbody></table>";
  AK.observeThumbs();
};
AK.markGrid = function () {
  const S = AK.S;
  document.querySelectorAll("#grid canvas").forEach((c) => c.classList.toggle("sel",
    c.dataset.view === S.view && +c.dataset.layer === S.layer && (S.view !== "head" || +c.dataset.head === S.head)));
};

// ---- token strips and hover
AK.renderTokens = function () {
  const { q, k } = AK.tokens(), g = AK.group(), p = AK.S.payload;
  const strip = (toks, kind) => toks.map((t, i) =>
    `<span class="tok" data-testid="${kind}-token" data-index="${i}">${AK.esc(t)}</span>`).join("");
  $("query-tokens").innerHTML = strip(q, "query");
  $("key-tokens").innerHTML = strip(k, "key");
  $("query-label").textContent = `rows (query): ${AK.axisName(p, g.query)} tokens, hover one to see where it looks`;
  $("key-label").textContent = `columns (key): ${AK.axisName(p, g.key)} tokens, hover one to see who looks at it`;
};
// Strongest entries of a row/column: at least half its maximum, at most 8.
AK.strongest = function (vals) {
  let m = 0;
  for (const v of vals) m = Math.max(m, v);
  if (m <= 0) return { idx: [], max: 0 };
  const idx = [];
  vals.forEach((v, i) => { if (v >= 0.5 * m) idx.push(i); });
  idx.sort((a, b) => vals[b] - vals[a]);
  return { idx: idx.slice(0, 8), max: m };
};
AK.clearHover = function () {
  document.querySelectorAll(".tok.hl, .tok.active").forEach((e) => {
    e.classList.remove("hl", "active", "faint"); e.style.removeProperty("--w");
  });
  if (AK.S.geo) AK.drawOverlay($("overlay"), AK.S.geo, null);
  $("readout").innerHTML = "&nbsp;";
};
AK.highlight = function (own, ownIdx, other, vals) {
  AK.clearHover();
  const { idx, max } = AK.strongest(vals);
  const ownEl = document.querySelector(`#${own} [data-index="${ownIdx}"]`);
  if (ownEl) ownEl.classList.add("active");
  const els = document.querySelectorAll(`#${other} .tok`);
  for (const i of idx) {
    const w = vals[i] / max;
    els[i].classList.add("hl");
    if (w < 0.6) els[i].classList.add("faint");
    els[i].style.setProperty("--w", (0.25 + 0.75 * w).toFixed(2));
  }
  // Long strips scroll: bring the strongest token into view (the strip only, not the page).
  const box = $(other), top = idx.length ? els[idx[0]] : null;
  if (top && (top.offsetTop < box.scrollTop || top.offsetTop + top.offsetHeight > box.scrollTop + box.clientHeight))
    box.scrollTop = top.offsetTop - box.clientHeight / 2;
  return idx;
};
AK.hoverQuery = function (i) {
  const { map, h } = AK.current(), { q, k } = AK.tokens();
  const vals = map.row(h, i);
  const idx = AK.highlight("query-tokens", i, "key-tokens", vals);
  AK.drawOverlay($("overlay"), AK.S.geo, { row: i, cells: idx.map((j) => [i, j]) });
  $("readout").textContent = `${q[i]} \u2192 ` + idx.map((j) => `${k[j]} ${vals[j].toFixed(3)}`).join(", ");
  AK.setStep(i);
};
AK.hoverKey = function (j) {
  const { map, h } = AK.current(), { q, k } = AK.tokens();
  const vals = map.col(h, j);
  const idx = AK.highlight("key-tokens", j, "query-tokens", vals);
  AK.drawOverlay($("overlay"), AK.S.geo, { col: j, cells: idx.map((i) => [i, j]) });
  $("readout").textContent = `${k[j]} \u2190 ` + idx.map((i) => `${q[i]} ${vals[i].toFixed(3)}`).join(", ");
};
AK.hoverCell = function (i, j) {
  const { map, h } = AK.current(), { q, k } = AK.tokens();
  AK.clearHover();
  AK.drawOverlay($("overlay"), AK.S.geo, { row: i, col: j });
  document.querySelector(`#query-tokens [data-index="${i}"]`).classList.add("active");
  document.querySelector(`#key-tokens [data-index="${j}"]`).classList.add("active");
  $("readout").textContent = `query ${i} "${q[i]}" \u2192 key ${j} "${k[j]}": ${map.get(h, i, j).toFixed(4)}`;
};

// ---- step view: for one query token, a row of bars per head of the selected layer
AK.setStep = function (i) {
  const g = AK.group();
  AK.S.step = Math.max(0, Math.min(g.shape[1] - 1, i));
  $("step").value = AK.S.step;
  AK.renderStep();
};
AK.renderStep = function () {
  const S = AK.S, g = AK.group(), { q, k } = AK.tokens(), i = S.step;
  const heads = AK.getMap(S.payload, S.g, "head", S.layer);
  const avg = AK.getMap(S.payload, S.g, "average", S.layer);
  const rows = [];
  for (let h = 0; h < g.heads; h++) rows.push([`head ${h}`, heads.row(h, i), h]);
  rows.push(["average", avg.row(0, i), "avg"]);
  let top = 0;
  for (const r of rows) for (const v of r[1]) top = Math.max(top, v);
  const bw = Math.max(1, Math.min(28, Math.floor(600 / k.length)));
  $("step-label").textContent = `query ${i} of ${q.length}: "${q[i]}" (layer ${S.layer}; bars share one scale, max ${top.toFixed(3)})`;
  const box = $("step-view");
  box.innerHTML = "";
  for (const [name, vals, h] of rows) {
    const { idx } = AK.strongest(vals);
    const div = document.createElement("div");
    div.className = "head"; div.dataset.testid = "step-head"; div.dataset.head = h;
    div.dataset.argmax = idx.length ? idx[0] : -1;
    const cv = document.createElement("canvas");
    cv.width = k.length * bw; cv.height = 30;
    const ctx = cv.getContext("2d");
    vals.forEach((v, j) => {
      const hgt = top > 0 ? Math.max(v > 0 ? 1 : 0, Math.round((v / top) * 30)) : 0;
      ctx.fillStyle = AK.rgb(Math.round(80 + 175 * (top > 0 ? v / top : 0)));
      ctx.fillRect(j * bw, 30 - hgt, Math.max(1, bw - (bw > 3 ? 1 : 0)), hgt);
    });
    const label = idx.slice(0, 3).map((j) => `${AK.esc(k[j])} <span class="hint">${vals[j].toFixed(2)}</span>`).join(" \u00b7 ");
    div.innerHTML = `<span class="hname">${name}</span>`;
    div.appendChild(cv);
    div.insertAdjacentHTML("beforeend", `<span class="top">${label}</span>`);
    box.appendChild(div);
  }
};

// ---- per-head summary table, sortable by every column
AK.COLUMNS = [["layer", "layer"], ["head", "head"], ["entropy", "entropy"],
  ["distance", "distance"], ["diagonal", "diagonal"], ["first", "first token"]];
AK.renderSummary = function () {
  const g = AK.group(), S = AK.S;
  const rows = [];
  for (let l = 0; l < g.layers; l++)
    for (let h = 0; h < g.heads; h++) {
      const r = { layer: l, head: h };
      for (const key of ["entropy", "distance", "diagonal", "first"]) r[key] = g.summary[key][l][h];
      rows.push(r);
    }
  if (S.sort.key) rows.sort((a, b) => S.sort.dir * (a[S.sort.key] - b[S.sort.key]) || a.layer - b.layer || a.head - b.head);
  const th = AK.COLUMNS.map(([key, name]) => `<th data-key="${key}" data-testid="sort-${key}"` +
    (S.sort.key === key ? ` class="${S.sort.dir > 0 ? "asc" : "desc"}"` : "") + `>${name}</th>`).join("");
  const fmt = (v) => (v == null ? "" : v.toFixed(3));
  const body = rows.map((r) => `<tr data-testid="summary-row" data-layer="${r.layer}" data-head="${r.head}">` +
    `<td>${r.layer}</td><td>${r.head}</td><td>${fmt(r.entropy)}</td><td>${fmt(r.distance)}</td>` +
    `<td>${fmt(r.diagonal)}</td><td>${fmt(r.first)}</td></tr>`).join("");
  $("summary").innerHTML = `<thead><tr>${th}</tr></thead><tbody>${body}</tbody>`;
  AK.markSummary();
};
AK.markSummary = function () {
  const S = AK.S;
  document.querySelectorAll("#summary tbody tr").forEach((tr) => tr.classList.toggle("sel",
    S.view === "head" && +tr.dataset.layer === S.layer && +tr.dataset.head === S.head));
};
AK.sortBy = function (key) {
  const s = AK.S.sort;
  s.dir = s.key === key ? -s.dir : 1;
  s.key = key;
  AK.renderSummary();
};
