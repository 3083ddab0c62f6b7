"use strict";
// attnkit explorer: payload decoding. Blobs are decoded only when a layer is shown
// and kept in a small LRU cache, so a 512-token payload never decodes all at once.
const AK = {};

AK.base64Bytes = function (s) {
  const bin = atob(s);
  const n = bin.length;
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = bin.charCodeAt(i);
  return out;
};

// IEEE half -> float (the payload's optional float16 encoding, little-endian).
AK.half = function (h) {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const f = h & 0x3ff;
  if (e === 0) return s * f * Math.pow(2, -24);
  if (e === 31) return f ? NaN : s * Infinity;
  return s * (1 + f / 1024) * Math.pow(2, e - 15);
};

// One decoded blob: H maps of (Tq, Tk). Values are q / 255 * scale[row] (uint8)
// or float16 values; `scale` always holds the row maxima so "row-normalised"
// colouring is value / scale.
AK.AttnMap = class {
  constructor(H, Tq, Tk, q, scale, vals) {
    this.H = H; this.Tq = Tq; this.Tk = Tk;
    this.q = q; this.scale = scale; this.vals = vals;
  }
  get(h, i, j) {
    const r = h * this.Tq + i;
    if (this.vals) return this.vals[r * this.Tk + j];
    return (this.q[r * this.Tk + j] / 255) * this.scale[r];
  }
  row(h, i) {
    const out = new Float32Array(this.Tk);
    for (let j = 0; j < this.Tk; j++) out[j] = this.get(h, i, j);
    return out;
  }
  col(h, j) {
    const out = new Float32Array(this.Tq);
    for (let i = 0; i < this.Tq; i++) out[i] = this.get(h, i, j);
    return out;
  }
  // Colour index 0..255 of a cell: the weight itself, or the weight over its row's max.
  level(h, i, j, mode) {
    const r = h * this.Tq + i;
    const s = this.scale[r];
    if (mode === "row") {
      if (this.q) return this.q[r * this.Tk + j];
      return s > 0 ? Math.round((this.vals[r * this.Tk + j] / s) * 255) : 0;
    }
    return Math.round(this.get(h, i, j) * 255);
  }
  // Simple checksum of head h (tests use it to see that the big map changed).
  checksum(h) {
    let c = 0;
    for (let i = 0; i < this.Tq; i++)
      for (let j = 0; j < this.Tk; j++) c = (c * 31 + this.level(h, i, j, "row") + 1) % 1000000007;
    return c;
  }
};

AK.decodeBlob = function (blob, H, Tq, Tk, dtype) {
  const bytes = AK.base64Bytes(blob.data);
  if (dtype === "float16") {
    const dv = new DataView(bytes.buffer);
    const vals = new Float32Array(H * Tq * Tk);
    const scale = new Float32Array(H * Tq);
    for (let r = 0; r < H * Tq; r++) {
      let m = 0;
      for (let j = 0; j < Tk; j++) {
        const v = AK.half(dv.getUint16(2 * (r * Tk + j), true));
        vals[r * Tk + j] = v;
        if (v > m) m = v;
      }
      scale[r] = m;
    }
    return new AK.AttnMap(H, Tq, Tk, null, scale, vals);
  }
  const sb = AK.base64Bytes(blob.scale);
  const dv = new DataView(sb.buffer);
  const scale = new Float32Array(H * Tq);
  for (let r = 0; r < H * Tq; r++) scale[r] = dv.getFloat32(4 * r, true);
  return new AK.AttnMap(H, Tq, Tk, bytes, scale, null);
};

AK.cache = new Map();
AK.CACHE_SIZE = 24;
AK.decodeCount = 0;

// The map for (group, view, layer); view is "head" (H maps), "average" or "rollout" (1 map).
AK.getMap = function (payload, gi, view, layer) {
  const key = `${gi}|${view}|${layer}`;
  if (AK.cache.has(key)) {
    const m = AK.cache.get(key);
    AK.cache.delete(key);
    AK.cache.set(key, m); // most recently used goes last
    return m;
  }
  const g = payload.groups[gi];
  const [H, Tq, Tk] = g.shape;
  const blobs = view === "head" ? g.weights : view === "average" ? g.average : g.rollout;
  if (!blobs) return null;
  const m = AK.decodeBlob(blobs[layer], view === "head" ? H : 1, Tq, Tk, payload.encoding.dtype);
  AK.decodeCount++;
  AK.cache.set(key, m);
  while (AK.cache.size > AK.CACHE_SIZE) AK.cache.delete(AK.cache.keys().next().value);
  return m;
};

AK.axisTokens = function (payload, axis) {
  if (axis === "sequence") return payload.source.concat(payload.target);
  return axis === "source" ? payload.source : payload.target;
};

AK.axisName = function (payload, axis) {
  if (axis === "sequence") return "sequence";
  if (payload.kind === "seq2seq") return axis === "source" ? "source" : "output";
  return axis === "source" ? "input" : "output";
};

// Sequential blue ramp (ColorBrewer "Blues" anchors), 256 RGB entries.
AK.LUT = (function () {
  const a = ["f7fbff", "deebf7", "c6dbef", "9ecae1", "6baed6", "4292c6", "2171b5", "08519c",
    "08306b"].map((h) => [0, 2, 4].map((k) => parseInt(h.slice(k, k + 2), 16)));
  const lut = new Uint8Array(256 * 3);
  for (let i = 0; i < 256; i++) {
    const x = (i / 255) * (a.length - 1);
    const k = Math.min(a.length - 2, Math.floor(x));
    const t = x - k;
    for (let c = 0; c < 3; c++) lut[3 * i + c] = Math.round(a[k][c] * (1 - t) + a[k + 1][c] * t);
  }
  return lut;
})();

AK.rgb = function (level) {
  const l = Math.max(0, Math.min(255, level));
  return `rgb(${AK.LUT[3 * l]},${AK.LUT[3 * l + 1]},${AK.LUT[3 * l + 2]})`;
};

// Escapes for HTML and XML; drops control characters that XML 1.0 forbids.
AK.esc = function (s) {
  return String(s).replace(/[\x00-\x08\x0B\x0C\x0E-\x1F]/g, "").replace(/[&<>"']/g, (c) =>
    ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
};

AK.short = function (tok, n) {
  return tok.length > n ? tok.slice(0, n - 1) + "\u2026" : tok;
};
