"use strict";
// attnkit explorer: canvas drawing (thumbnails, the big map, hover overlay) and exports.
// Maps are painted as one pixel per cell into an offscreen canvas and scaled up
// without smoothing: a 512 x 512 map is one ImageData, never thousands of nodes.

AK.R = 2; // backing-store scale of the big map: sharp on HiDPI screens and in exported PNGs
AK.FONT = 'system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif';

AK.mapImage = function (map, h, mode) {
  const c = document.createElement("canvas");
  c.width = map.Tk; c.height = map.Tq;
  const ctx = c.getContext("2d");
  const img = ctx.createImageData(map.Tk, map.Tq);
  const d = img.data, L = AK.LUT;
  for (let i = 0; i < map.Tq; i++) {
    for (let j = 0; j < map.Tk; j++) {
      const l = map.level(h, i, j, mode), p = 4 * (i * map.Tk + j);
      d[p] = L[3 * l]; d[p + 1] = L[3 * l + 1]; d[p + 2] = L[3 * l + 2]; d[p + 3] = 255;
    }
  }
  ctx.putImageData(img, 0, 0);
  return c;
};

// Thumbnail: at most `size` px a side; larger maps are max-pooled so sharp lines survive.
AK.drawThumb = function (canvas, map, h, mode, size) {
  const tw = Math.min(map.Tk, size), th = Math.min(map.Tq, size);
  const pooled = new Uint8Array(tw * th);
  for (let i = 0; i < map.Tq; i++) {
    const y = Math.floor((i * th) / map.Tq);
    for (let j = 0; j < map.Tk; j++) {
      const x = Math.floor((j * tw) / map.Tk), l = map.level(h, i, j, mode);
      if (l > pooled[y * tw + x]) pooled[y * tw + x] = l;
    }
  }
  canvas.width = tw; canvas.height = th;
  const ctx = canvas.getContext("2d");
  const img = ctx.createImageData(tw, th);
  for (let k = 0; k < tw * th; k++) {
    const l = pooled[k];
    img.data.set([AK.LUT[3 * l], AK.LUT[3 * l + 1], AK.LUT[3 * l + 2], 255], 4 * k);
  }
  ctx.putImageData(img, 0, 0);
  canvas.dataset.drawn = "1";
};

AK.measure = (function () {
  const ctx = document.createElement("canvas").getContext("2d");
  return function (texts, font, cut) {
    ctx.font = font;
    let w = 0;
    for (const t of texts) w = Math.max(w, ctx.measureText(cut ? AK.short(t, cut) : t).width);
    return Math.ceil(w);
  };
})();

// Geometry of the big map in CSS pixels: cell size, margins, whether labels fit.
AK.layout = function (Tq, Tk, qTok, kTok, caption, axes) {
  // Whole pixels per cell where there is room; fractional ones (>= 1) for long inputs.
  const fit = 720 / Math.max(Tq, Tk);
  const c = Math.max(1, Math.min(28, fit >= 4 ? Math.floor(fit) : fit));
  const labels = c >= 9;
  const fs = Math.min(12, c - 1);
  const font = `${fs}px ${AK.FONT}`;
  const left = labels ? AK.measure(qTok, font, 16) + 12 : 28;
  const top = 26 + (labels ? AK.measure(kTok, font, 16) + 10 : 22);
  // wide enough for the caption lines too, however small the map
  const text = Math.max(AK.measure([caption], `600 13px ${AK.FONT}`), AK.measure([axes], `11px ${AK.FONT}`));
  return { c, labels, fs, caption: 26, left, top, Tq, Tk,
    width: Math.ceil(Math.max(left + Tk * c, text + 8) + 12), height: Math.ceil(top + Tq * c + 12) };
};

// Draw the big map; returns its geometry (used by hover, overlay and the SVG export).
AK.drawBigMap = function (canvas, overlay, spec) {
  const { map, h, mode, qTok, kTok } = spec;
  const geo = AK.layout(map.Tq, map.Tk, qTok, kTok, spec.caption, spec.axes);
  for (const cv of [canvas, overlay]) {
    cv.width = geo.width * AK.R; cv.height = geo.height * AK.R;
    cv.style.width = geo.width + "px"; cv.style.height = geo.height + "px";
  }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(AK.R, 0, 0, AK.R, 0, 0);
  ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, geo.width, geo.height);
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(AK.mapImage(map, h, mode), geo.left, geo.top, map.Tk * geo.c, map.Tq * geo.c);
  ctx.strokeStyle = "#c6d0db"; ctx.lineWidth = 1;
  ctx.strokeRect(geo.left - 0.5, geo.top - 0.5, map.Tk * geo.c + 1, map.Tq * geo.c + 1);
  ctx.fillStyle = "#1d2733"; ctx.font = `600 13px ${AK.FONT}`; ctx.textBaseline = "middle";
  ctx.fillText(spec.caption, 4, 12);
  ctx.fillStyle = "#66717d"; ctx.font = `11px ${AK.FONT}`;
  ctx.fillText(spec.axes, 4, geo.caption - 2 + (geo.labels ? 0 : 8));
  if (geo.labels) {
    ctx.fillStyle = "#1d2733"; ctx.font = `${geo.fs}px ${AK.FONT}`;
    ctx.textAlign = "right";
    qTok.forEach((t, i) => ctx.fillText(AK.short(t, 16), geo.left - 5, geo.top + (i + 0.5) * geo.c));
    ctx.textAlign = "left";
    kTok.forEach((t, j) => {
      ctx.save();
      ctx.translate(geo.left + (j + 0.5) * geo.c, geo.top - 5);
      ctx.rotate(-Math.PI / 2);
      ctx.fillText(AK.short(t, 16), 0, 0);
      ctx.restore();
    });
  }
  ctx.textAlign = "left";
  return geo;
};

// Hover marks: the query row, the key column, and outlines on the strongest cells.
AK.drawOverlay = function (overlay, geo, marks) {
  const ctx = overlay.getContext("2d");
  ctx.setTransform(AK.R, 0, 0, AK.R, 0, 0);
  ctx.clearRect(0, 0, geo.width, geo.height);
  if (!marks) return;
  const { c, left, top, Tq, Tk } = geo;
  ctx.lineWidth = 1.5;
  ctx.strokeStyle = "rgba(214, 96, 77, 0.9)";
  if (marks.row != null) ctx.strokeRect(left, top + marks.row * c, Tk * c, c);
  if (marks.col != null) ctx.strokeRect(left + marks.col * c, top, c, Tq * c);
  ctx.strokeStyle = "#d6604d"; ctx.lineWidth = 2;
  for (const [i, j] of marks.cells || []) {
    const pad = Math.max(3, c * 0.15);
    ctx.strokeRect(left + j * c - pad / 2, top + i * c - pad / 2, c + pad, c + pad);
  }
};

AK.download = function (href, name) {
  const a = document.getElementById("download");
  a.href = href; a.download = name; a.click();
};

AK.exportPNG = function (canvas, name) {
  canvas.toBlob((blob) => {
    const url = URL.createObjectURL(blob);
    AK.download(url, name);
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  }, "image/png");
};

// An SVG document of the current map: one <rect> per cell for small maps, an embedded
// PNG of the cells for large ones (a 512 x 512 map would be 262k rects), text labels.
AK.buildSVG = function (spec, geo) {
  const { map, h, mode, qTok, kTok } = spec;
  const { c, left, top, Tq, Tk } = geo;
  const out = [
    '<?xml version="1.0" encoding="UTF-8"?>',
    `<svg xmlns="http://www.w3.org/2000/svg" width="${geo.width}" height="${geo.height}" ` +
      `viewBox="0 0 ${geo.width} ${geo.height}" font-family="${AK.esc(AK.FONT)}">`,
    `<title>${AK.esc(spec.caption)}</title>`,
    `<rect width="100%" height="100%" fill="#fff"/>`,
    `<text x="4" y="16" font-size="13" font-weight="600" fill="#1d2733">${AK.esc(spec.caption)}</text>`,
    `<text x="4" y="${geo.caption + (geo.labels ? 2 : 10)}" font-size="11" fill="#66717d">` +
      `${AK.esc(spec.axes)}</text>`,
  ];
  if (Tq * Tk <= 40000) {
    out.push(`<g shape-rendering="crispEdges">`);
    out.push(`<rect x="${left}" y="${top}" width="${Tk * c}" height="${Tq * c}" fill="${AK.rgb(0)}"/>`);
    for (let i = 0; i < Tq; i++)
      for (let j = 0; j < Tk; j++) {
        const l = map.level(h, i, j, mode);
        if (l > 0)
          out.push(`<rect x="${left + j * c}" y="${top + i * c}" width="${c}" height="${c}" ` +
            `fill="${AK.rgb(l)}"><title>${AK.esc(qTok[i])} \u2192 ${AK.esc(kTok[j])}: ` +
            `${map.get(h, i, j).toFixed(3)}</title></rect>`);
      }
    out.push("</g>");
  } else {
    const png = AK.mapImage(map, h, mode).toDataURL("image/png");
    out.push(`<image x="${left}" y="${top}" width="${Tk * c}" height="${Tq * c}" ` +
      `preserveAspectRatio="none" style="image-rendering:pixelated" href="${png}"/>`);
  }
  out.push(`<rect x="${left - 0.5}" y="${top - 0.5}" width="${Tk * c + 1}" height="${Tq * c + 1}" ` +
    `fill="none" stroke="#c6d0db"/>`);
  if (geo.labels) {
    const fs = geo.fs;
    qTok.forEach((t, i) => out.push(`<text x="${left - 5}" y="${top + (i + 0.5) * c}" ` +
      `font-size="${fs}" text-anchor="end" dominant-baseline="middle">${AK.esc(AK.short(t, 16))}</text>`));
    kTok.forEach((t, j) => {
      const x = left + (j + 0.5) * c, y = top - 5;
      out.push(`<text transform="translate(${x} ${y}) rotate(-90)" font-size="${fs}" ` +
        `dominant-baseline="middle">${AK.esc(AK.short(t, 16))}</text>`);
    });
  }
  out.push("</svg>");
  return out.join("\n");
};

AK.exportSVG = function (spec, geo, name) {
  const blob = new Blob([AK.buildSVG(spec, geo)], { type: "image/svg+xml" });
  const url = URL.createObjectURL(blob);
  AK.download(url, name);
  setTimeout(() => URL.revokeObjectURL(url), 10000);
};
