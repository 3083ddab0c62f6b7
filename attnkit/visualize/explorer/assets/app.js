"use strict";
// attnkit explorer: wiring. Exported mode renders the embedded payload at load;
// served mode (config.api_url set) posts the text box to the API and renders the
// `explore` payload of the answer.

AK.status = function (msg, error) {
  const el = $("status");
  el.textContent = msg || "";
  el.classList.toggle("error", !!error);
};

AK.update = function () {
  const S = AK.S, g = AK.group(), p = S.payload;
  const { map, h } = AK.current();
  const { q, k } = AK.tokens();
  $("view").value = S.view; $("layer").value = S.layer; $("head").value = S.head;
  $("head").disabled = S.view !== "head";
  const what = S.view === "head" ? `head ${S.head}` : S.view === "average" ? "head average" : "rollout";
  const caption = `${g.name} \u00b7 layer ${S.layer} \u00b7 ${what}` +
    (S.view === "rollout" && S.layer > 0 ? ` through layers 0\u2013${S.layer}` : "");
  const axes = `rows: ${AK.axisName(p, g.query)} (${q.length}) \u00b7 columns: ${AK.axisName(p, g.key)} (${k.length})` +
    (S.mode === "row" ? " \u00b7 colour: row-normalised" : "");
  S.spec = { map, h, mode: S.mode, qTok: q, kTok: k, caption, axes };
  const big = $("bigmap");
  S.geo = AK.drawBigMap(big, $("overlay"), S.spec);
  Object.assign(big.dataset, { group: g.name, view: S.view, layer: S.layer, head: h,
    checksum: map.checksum(h), ready: "1" });
  AK.markGrid(); AK.markSummary(); AK.renderStep();
};

AK.select = function (view, layer, head) {
  const S = AK.S;
  if (view === "rollout" && !AK.group().rollout) view = "average";
  S.view = view; S.layer = layer; if (head != null) S.head = head;
  AK.update();
};

AK.selectGroup = function (gi) {
  const S = AK.S, g = S.payload.groups[gi];
  S.g = gi; S.layer = Math.min(S.layer, g.layers - 1); S.head = Math.min(S.head, g.heads - 1);
  if (S.view === "rollout" && !g.rollout) S.view = "average";
  document.querySelectorAll("#group-tabs button").forEach((b) => b.classList.toggle("on", +b.dataset.index === gi));
  const opts = (n, p) => Array.from({ length: n }, (_, i) => `<option value="${i}">${p}${i}</option>`).join("");
  $("layer").innerHTML = opts(g.layers, "");
  $("head").innerHTML = opts(g.heads, "");
  $("view").querySelector('option[value="rollout"]').disabled = !g.rollout;
  $("step").max = g.shape[1] - 1;
  S.step = Math.min(S.step, g.shape[1] - 1);
  AK.renderGrid(); AK.renderTokens(); AK.renderSummary();
  AK.update();
};

AK.render = function (payload) {
  if (!payload || payload.format !== "attnkit.explorer" || payload.version !== 1)
    throw new Error("not an attnkit.explorer version 1 payload");
  AK.cache.clear();
  const S = AK.S;
  Object.assign(S, { payload, g: 0, view: "head", layer: 0, head: 0, step: 0, sort: { key: null, dir: 1 } });
  // Long rows spread their weight thin; colour by the row maximum so the map stays readable.
  S.mode = Math.max(...payload.groups.map((g) => g.shape[2])) > 64 ? "row" : "weight";
  $("colour").value = S.mode;
  $("app").hidden = false;
  $("title").textContent = payload.title || "";
  $("kind").textContent = payload.kind.replace("_", " ");
  $("source-text").innerHTML = payload.source.map((t) => `<span class="tok">${AK.esc(t)}</span>`).join(" ");
  $("output").textContent = payload.output;
  $("output").parentElement.hidden = !payload.output; // encoder-only: nothing generated
  $("nbest-list").innerHTML = payload.nbest.map((n) => `<li data-testid="nbest-item">${AK.esc(n.text)}` +
    `<span class="score">${n.score == null ? "" : n.score.toFixed(3)}</span></li>`).join("");
  $("group-tabs").innerHTML = payload.groups.map((g, i) =>
    `<button type="button" data-testid="group-tab" data-index="${i}" data-name="${AK.esc(g.name)}">` +
    `${AK.esc(g.name)} <span class="hint">${g.layers}\u00d7${g.heads}</span></button>`).join("");
  const cross = payload.groups.findIndex((g) => g.name === "cross-attention");
  AK.selectGroup(cross >= 0 ? cross : 0);
};

AK.translate = async function (api, form, ev) {
  ev.preventDefault();
  const text = $("input-text").value.trim();
  if (!text) return AK.status("type some text first", true);
  const body = { text: [text], beam: +$("beam").value || 4, nbest: +$("nbest").value || 1, explore: true };
  $("translate").disabled = true;
  AK.status(form.busy);
  try {
    const r = await fetch(api, { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body) });
    const j = await r.json().catch(() => null);
    if (j && j.error) throw new Error(j.error);
    if (!r.ok || !j) throw new Error(`HTTP ${r.status}`);
    const p = Array.isArray(j.explore) ? j.explore[0] : j.explore;
    if (!p) throw new Error("the answer has no 'explore' payload");
    AK.render(p);
    AK.status(form.note || "");
  } catch (e) {
    AK.status(`failed: ${e.message || e}`, true);
  } finally {
    $("translate").disabled = false;
  }
};

AK.fileName = function (ext) {
  const S = AK.S, g = AK.group();
  const what = S.view === "head" ? `h${S.head}` : S.view;
  return `attention-${g.name.replace(/[^a-z]+/gi, "-")}-L${S.layer}-${what}.${ext}`;
};

AK.wire = function () {
  $("group-tabs").addEventListener("click", (e) => {
    const b = e.target.closest("button");
    if (b) AK.selectGroup(+b.dataset.index);
  });
  $("view").addEventListener("change", (e) => AK.select(e.target.value, AK.S.layer));
  $("layer").addEventListener("change", (e) => AK.select(AK.S.view, +e.target.value));
  $("head").addEventListener("change", (e) => AK.select("head", AK.S.layer, +e.target.value));
  $("colour").addEventListener("change", (e) => { AK.S.mode = e.target.value; AK.observeThumbs(); AK.update(); });
  $("grid").addEventListener("click", (e) => {
    const c = e.target.closest("canvas");
    if (c) AK.select(c.dataset.view, +c.dataset.layer, c.dataset.view === "head" ? +c.dataset.head : null);
  });
  const tokenHover = (strip, fn) => {
    $(strip).addEventListener("mouseover", (e) => {
      const t = e.target.closest(".tok");
      if (t) fn(+t.dataset.index);
    });
    $(strip).addEventListener("mouseleave", AK.clearHover);
  };
  tokenHover("query-tokens", AK.hoverQuery);
  tokenHover("key-tokens", AK.hoverKey);
  const big = $("bigmap");
  big.addEventListener("mousemove", (e) => {
    const geo = AK.S.geo;
    const j = Math.floor((e.offsetX - geo.left) / geo.c), i = Math.floor((e.offsetY - geo.top) / geo.c);
    if (i >= 0 && j >= 0 && i < geo.Tq && j < geo.Tk) AK.hoverCell(i, j);
    else AK.clearHover();
  });
  big.addEventListener("mouseleave", AK.clearHover);
  big.addEventListener("click", (e) => {
    const geo = AK.S.geo, i = Math.floor((e.offsetY - geo.top) / geo.c);
    if (i >= 0 && i < geo.Tq) AK.setStep(i);
  });
  $("step").addEventListener("input", (e) => AK.setStep(+e.target.value));
  $("step-prev").addEventListener("click", () => AK.setStep(AK.S.step - 1));
  $("step-next").addEventListener("click", () => AK.setStep(AK.S.step + 1));
  $("summary").addEventListener("click", (e) => {
    const th = e.target.closest("th"), tr = e.target.closest("tbody tr");
    if (th) AK.sortBy(th.dataset.key);
    else if (tr) AK.select("head", +tr.dataset.layer, +tr.dataset.head);
  });
  $("export-png").addEventListener("click", () => AK.exportPNG($("bigmap"), AK.fileName("png")));
  $("export-svg").addEventListener("click", () => AK.exportSVG(AK.S.spec, AK.S.geo, AK.fileName("svg")));
};

AK.main = function () {
  const config = JSON.parse($("attnkit-config").textContent);
  const payload = JSON.parse($("attnkit-payload").textContent);
  AK.wire();
  if (config.api_url) {
    const form = $("served"), labels = config.form;
    form.hidden = false;
    $("translate").textContent = labels.action;
    $("input-text").placeholder = labels.placeholder;
    for (const id of ["beam", "nbest"]) $(id).parentElement.hidden = !labels.search;
    if (labels.note) AK.status(labels.note);
    form.addEventListener("submit", (e) => AK.translate(config.api_url, labels, e));
    $("input-text").addEventListener("keydown", (e) => {
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) form.requestSubmit();
    });
  }
  try {
    if (payload) AK.render(payload);
    else if (!config.api_url) AK.status("this page has no attention payload", true);
  } catch (e) {
    AK.status(`cannot show this payload: ${e.message || e}`, true);
  }
  document.body.dataset.ready = "1";
};

AK.main();
