// fntrace HTML export: the page's script (inlined by html.rs). Reads the
// embedded data (#data: JSON, numeric arrays as base64 little-endian typed
// arrays), draws the per-thread timeline (one lane per thread, its calls by
// depth, off-CPU intervals one row below the call they happened in,
// markers on top; zoom, pan, hover) and the flame graph of the
// chosen thread (or all threads merged). When everything is drawn it sets
// body[data-drawn] and body[data-load-ms]; with #selftest in the URL it
// also lists every embedded call and off-CPU interval in <pre id="selftest">,
// with, per thread, the colour drawn and the tooltip shown at its longest
// blocked and longest preempted off-CPU interval, and (with off-CPU
// records) every flame-graph node under each weight (used by tests).
"use strict";
(function () {
  const dataEl = document.getElementById("data");
  const D = JSON.parse(dataEl.textContent);
  // The text is not needed any more (and would make the DOM huge).
  dataEl.remove();
  const b64 = (s, T) => {
    const bin = atob(s);
    const u = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) u[i] = bin.charCodeAt(i);
    return new T(u.buffer);
  };
  const names = D.names;
  const shortOf = (i) => (D.short[i] ? D.short[i] : names[i]);
  const fmt = (ns) => {
    const a = Math.abs(ns);
    if (a < 1e3) return ns.toFixed(0) + " ns";
    if (a < 1e6) return (ns / 1e3).toFixed(3) + " us";
    if (a < 1e9) return (ns / 1e6).toFixed(3) + " ms";
    return (ns / 1e9).toFixed(3) + " s";
  };
  const esc = (s) =>
    String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
  const notes = document.getElementById("notes");
  for (const n of D.notes) {
    const li = document.createElement("li");
    li.textContent = n;
    notes.appendChild(li);
  }
  const threads = D.threads.map((t) => ({
    tid: t.tid,
    name: t.name,
    calls: t.calls,
    rows: t.rows,
    start: b64(t.start, Float64Array),
    dur: b64(t.dur, Float64Array),
    fn: b64(t.fn, Uint32Array),
    markers: t.markers,
    off: {
      start: b64(t.off.start, Float64Array),
      dur: b64(t.off.dur, Float64Array),
      depth: b64(t.off.depth, Uint32Array),
      fn: b64(t.off.fn, Uint32Array),
      pre: b64(t.off.pre, Uint32Array),
    },
    flame: {
      parent: b64(t.flame.parent, Uint32Array),
      fn: b64(t.flame.fn, Uint32Array),
      total: b64(t.flame.total, Float64Array),
      calls: b64(t.flame.calls, Float64Array),
      wait: b64(t.flame.wait, Float64Array),
    },
  }));
  const label = (t) => (t.name ? t.name + " " : "") + "[" + t.tid + "]";
  const tip = document.getElementById("tip");
  const showTip = (e, html) => {
    tip.innerHTML = html;
    tip.style.display = "block";
    const x = Math.min(e.clientX + 14, window.innerWidth - tip.offsetWidth - 4);
    tip.style.left = Math.max(0, x) + "px";
    tip.style.top = e.clientY + 16 + "px";
  };
  const hideTip = () => (tip.style.display = "none");
  const colors = [];
  const colorOf = (i) => {
    if (!colors[i]) {
      let h = 2166136261;
      const s = names[i];
      for (let k = 0; k < s.length; k++) h = Math.imul(h ^ s.charCodeAt(k), 16777619);
      h >>>= 0;
      colors[i] = "hsl(" + (h % 360) + "," + (45 + (h >> 9) % 25) + "%," + (58 + (h >> 17) % 14) + "%)";
    }
    return colors[i];
  };
  const flameColors = [];
  const flameColorOf = (i) => {
    if (!flameColors[i]) {
      let h = 2166136261;
      const s = names[i];
      for (let k = 0; k < s.length; k++) h = Math.imul(h ^ s.charCodeAt(k), 16777619);
      h >>>= 0;
      flameColors[i] = "rgb(" + (205 + (h % 50)) + "," + (60 + ((h >> 8) % 170)) + "," + ((h >> 16) % 55) + ")";
    }
    return flameColors[i];
  };
  const dpr = window.devicePixelRatio || 1;
  const fitText = (ctx, s, w) => {
    const max = Math.floor((w - 4) / 6);
    if (max < 2) return "";
    return s.length <= max ? s : s.slice(0, max - 1) + "…";
  };

  // ---- Timeline ----
  const LABEL_W = 170, AXIS_H = 20, MARK_H = 8, ROW = 13, PAD = 4;
  const tl = document.getElementById("timeline");
  const inner = document.getElementById("tl-inner");
  const cv = document.getElementById("tl-canvas");
  const ctx = cv.getContext("2d");
  const labels = document.getElementById("tl-labels");
  const span = Math.max(D.span, 1);
  // The first view: from the first call or marker to the last (outermost
  // calls, at depth 0, cover the others), with a margin.
  let lo = Infinity, hi = -Infinity;
  for (const t of threads) {
    if (t.rows.length > 1 && t.rows[1] > 0) {
      lo = Math.min(lo, t.start[0]);
      for (let i = 0; i < t.rows[1]; i++) hi = Math.max(hi, t.start[i] + t.dur[i]);
    }
    for (const m of t.markers) {
      lo = Math.min(lo, m[0]);
      hi = Math.max(hi, m[0]);
    }
  }
  if (!(lo <= hi)) {
    lo = 0;
    hi = span;
  }
  const margin = Math.max((hi - lo) * 0.02, 5);
  const home = [Math.max(0, lo - margin), Math.min(span, hi + margin)];
  let v0 = home[0], v1 = home[1];
  const lanes = [];
  let y = 0;
  for (const t of threads) {
    let rows = t.rows.length - 1;
    for (let i = 0; i < t.off.depth.length; i++) rows = Math.max(rows, t.off.depth[i] + 1);
    const h = MARK_H + Math.max(rows, 1) * ROW + PAD;
    lanes.push({ t, y, h, rows });
    y += h;
  }
  const total = AXIS_H + y;
  const W = Math.max(tl.clientWidth, 400);
  const viewH = Math.min(total, Math.floor(window.innerHeight * 0.75));
  cv.width = W * dpr;
  cv.height = viewH * dpr;
  cv.style.width = W + "px";
  cv.style.height = viewH + "px";
  inner.style.height = total + "px";
  ctx.scale(dpr, dpr);
  const tlTop = tl.getBoundingClientRect().top + window.scrollY;
  const tlLeft = tl.getBoundingClientRect().left + window.scrollX;
  for (const l of lanes) {
    const d = document.createElement("div");
    d.className = "lane";
    d.style.top = AXIS_H + l.y + "px";
    d.style.height = l.h + "px";
    d.textContent = label(l.t) + " · " + l.t.calls + " calls";
    d.title = d.textContent;
    d.dataset.tid = l.t.tid;
    d.dataset.slices = l.t.fn.length;
    d.dataset.rows = l.rows;
    d.dataset.top = Math.round(tlTop + AXIS_H + l.y + MARK_H);
    d.dataset.x0 = Math.round(tlLeft + LABEL_W);
    d.dataset.x1 = Math.round(tlLeft + W);
    labels.appendChild(d);
  }
  // First index in [lo, hi) whose call ends after t (ends grow with starts
  // within a row: calls at one depth never overlap).
  const firstEnding = (t, lo, hi, x) => {
    while (lo < hi) {
      const m = (lo + hi) >> 1;
      if (t.start[m] + t.dur[m] < x) lo = m + 1;
      else hi = m;
    }
    return lo;
  };
  // First off-CPU interval ending after x.
  const firstOff = (o, x) => {
    let lo = 0, hi = o.start.length;
    while (lo < hi) {
      const m = (lo + hi) >> 1;
      if (o.start[m] + o.dur[m] < x) lo = m + 1;
      else hi = m;
    }
    return lo;
  };
  const OFF_BLOCKED = "#9aa3ad", OFF_PREEMPTED = "#e0a526";
  const range = document.getElementById("tl-range");
  const drawTimeline = () => {
    const st = tl.scrollTop;
    const PW = W - LABEL_W;
    const k = PW / (v1 - v0);
    ctx.clearRect(0, 0, W, viewH);
    ctx.save();
    ctx.beginPath();
    ctx.rect(LABEL_W, AXIS_H, PW, viewH - AXIS_H);
    ctx.clip();
    ctx.font = "10px sans-serif";
    ctx.textBaseline = "middle";
    for (let li = 0; li < lanes.length; li++) {
      const l = lanes[li], t = l.t;
      const ly = AXIS_H + l.y - st;
      if (ly > viewH || ly + l.h < AXIS_H) continue;
      ctx.fillStyle = li % 2 ? "#fafafa" : "#fff";
      ctx.fillRect(LABEL_W, ly, PW, l.h);
      ctx.fillStyle = "#ddd";
      ctx.fillRect(LABEL_W, ly + l.h - 1, PW, 1);
      for (let d = 0; d + 1 < t.rows.length; d++) {
        const ry = ly + MARK_H + d * ROW;
        if (ry > viewH || ry + ROW < AXIS_H) continue;
        const hi = t.rows[d + 1];
        let last = -1e9;
        for (let i = firstEnding(t, t.rows[d], hi, v0); i < hi; i++) {
          const s = t.start[i];
          if (s > v1) break;
          let x0 = (s - v0) * k, x1 = (s + t.dur[i] - v0) * k;
          if (x1 - x0 < 1) {
            // Below a pixel: one mark per pixel column.
            if (x0 < last) continue;
            x1 = x0 + 1;
          }
          x0 = Math.max(x0, -2);
          x1 = Math.min(x1, PW + 2);
          ctx.fillStyle = colorOf(t.fn[i]);
          ctx.fillRect(LABEL_W + x0, ry, x1 - x0, ROW - 1);
          last = x1;
          if (x1 - x0 > 24) {
            const txt = fitText(ctx, shortOf(t.fn[i]), x1 - Math.max(x0, 0));
            if (txt) {
              ctx.fillStyle = "#000";
              ctx.fillText(txt, LABEL_W + Math.max(x0, 0) + 2, ry + ROW / 2);
            }
          }
        }
      }
      // Off-CPU intervals (time order, never overlapping on one thread).
      const o = t.off;
      for (let i = firstOff(o, v0); i < o.start.length && o.start[i] <= v1; i++) {
        const ry = ly + MARK_H + o.depth[i] * ROW;
        if (ry > viewH || ry + ROW < AXIS_H) continue;
        const x0 = Math.max((o.start[i] - v0) * k, -2);
        const x1 = Math.min(Math.max((o.start[i] + o.dur[i] - v0) * k, x0 + 1), PW + 2);
        ctx.fillStyle = o.pre[i] ? OFF_PREEMPTED : OFF_BLOCKED;
        ctx.fillRect(LABEL_W + x0, ry, x1 - x0, ROW - 1);
        if (x1 - x0 > 40) {
          const txt = fitText(ctx, "off CPU", x1 - Math.max(x0, 0));
          if (txt) {
            ctx.fillStyle = "#222";
            ctx.fillText(txt, LABEL_W + Math.max(x0, 0) + 2, ry + ROW / 2);
          }
        }
      }
      ctx.fillStyle = "#5b3fc4";
      for (const m of t.markers) {
        if (m[0] < v0 || m[0] > v1) continue;
        const x = LABEL_W + (m[0] - v0) * k;
        ctx.beginPath();
        ctx.moveTo(x - 4, ly + 1);
        ctx.lineTo(x + 4, ly + 1);
        ctx.lineTo(x, ly + MARK_H);
        ctx.fill();
      }
    }
    ctx.restore();
    // Axis.
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, W, AXIS_H);
    ctx.fillStyle = "#eee";
    ctx.fillRect(0, AXIS_H - 1, W, 1);
    const raw = (v1 - v0) / (PW / 110);
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = raw / p < 2 ? 2 * p : raw / p < 5 ? 5 * p : 10 * p;
    ctx.fillStyle = "#444";
    ctx.font = "10px sans-serif";
    ctx.textBaseline = "middle";
    for (let tk = Math.ceil(v0 / step) * step; tk <= v1; tk += step) {
      const x = LABEL_W + (tk - v0) * k;
      ctx.fillRect(x, AXIS_H - 5, 1, 5);
      ctx.fillText(fmt(tk), x + 2, 8);
    }
    range.textContent = fmt(v0) + " – " + fmt(v1) + " (" + fmt(v1 - v0) + ")";
  };
  const clampView = () => {
    const minSpan = 10;
    let w = Math.max(v1 - v0, minSpan);
    if (w > span) w = span;
    if (v0 < 0) v0 = 0;
    if (v0 + w > span) v0 = span - w;
    v1 = v0 + w;
  };
  const zoom = (f, at) => {
    v0 = at - (at - v0) * f;
    v1 = at + (v1 - at) * f;
    clampView();
    drawTimeline();
  };
  const timeAt = (cx) => v0 + ((cx - LABEL_W) / (W - LABEL_W)) * (v1 - v0);
  const hit = (e) => {
    const r = cv.getBoundingClientRect();
    const cx = e.clientX - r.left, cy = e.clientY - r.top + tl.scrollTop;
    if (cx < LABEL_W || cy < AXIS_H) return null;
    const y = cy - AXIS_H;
    const l = lanes.find((l) => y >= l.y && y < l.y + l.h);
    if (!l) return null;
    const t = l.t, at = timeAt(cx), tol = (v1 - v0) / (W - LABEL_W);
    if (y - l.y < MARK_H) {
      for (const m of t.markers) if (Math.abs(m[0] - at) <= 4 * tol) return { l, marker: m };
      return null;
    }
    const d = Math.floor((y - l.y - MARK_H) / ROW);
    if (d >= l.rows) return null;
    const o = t.off, j = firstOff(o, at - tol);
    if (j < o.start.length && o.start[j] <= at + tol && o.depth[j] === d) return { l, off: j };
    if (d + 1 >= t.rows.length) return null;
    const i = firstEnding(t, t.rows[d], t.rows[d + 1], at - tol);
    if (i < t.rows[d + 1] && t.start[i] <= at + tol) return { l, i };
    return null;
  };
  let drag = null;
  cv.addEventListener("mousedown", (e) => {
    drag = { x: e.clientX, y: e.clientY, v0, v1, st: tl.scrollTop };
    cv.style.cursor = "grabbing";
  });
  window.addEventListener("mouseup", () => {
    drag = null;
    cv.style.cursor = "grab";
  });
  window.addEventListener("mousemove", (e) => {
    if (!drag) return;
    const dt = ((e.clientX - drag.x) / (W - LABEL_W)) * (drag.v1 - drag.v0);
    v0 = drag.v0 - dt;
    v1 = drag.v1 - dt;
    clampView();
    tl.scrollTop = drag.st - (e.clientY - drag.y);
    drawTimeline();
  });
  cv.addEventListener("mousemove", (e) => {
    if (drag) return hideTip();
    const h = hit(e);
    if (!h) return hideTip();
    const t = h.l.t;
    if (h.marker) {
      const m = h.marker;
      return showTip(e, "<b>marker " + esc(names[m[1]]) + "</b> " + esc(m[2]) + "<br>at " + fmt(m[0]) + " · " + esc(label(t)));
    }
    if (h.off !== undefined) {
      const o = t.off, j = h.off;
      return showTip(
        e,
        "<b>off CPU</b> (" + (o.pre[j] ? "preempted" : "blocked") + ") in " + esc(names[o.fn[j]]) +
          "<br><span class=n>" + fmt(o.dur[j]) + "</span> at <span class=n>" + fmt(o.start[j]) +
          "</span> · " + esc(label(t))
      );
    }
    const i = h.i;
    showTip(
      e,
      "<b>" + esc(names[t.fn[i]]) + "</b><br><span class=n>" + fmt(t.dur[i]) + "</span> at <span class=n>" +
        fmt(t.start[i]) + "</span> · " + esc(label(t))
    );
  });
  cv.addEventListener("mouseleave", hideTip);
  cv.addEventListener("dblclick", (e) => {
    const h = hit(e);
    if (!h || h.marker || h.off !== undefined) return;
    const t = h.l.t, pad = t.dur[h.i] * 0.05 + 5;
    v0 = t.start[h.i] - pad;
    v1 = t.start[h.i] + t.dur[h.i] + pad;
    clampView();
    drawTimeline();
  });
  cv.addEventListener(
    "wheel",
    (e) => {
      const r = cv.getBoundingClientRect();
      const cx = e.clientX - r.left;
      if (cx < LABEL_W) return;
      e.preventDefault();
      if (Math.abs(e.deltaX) > Math.abs(e.deltaY)) {
        const dt = (e.deltaX / (W - LABEL_W)) * (v1 - v0);
        v0 += dt;
        v1 += dt;
        clampView();
        return drawTimeline();
      }
      zoom(Math.exp(e.deltaY * 0.002), timeAt(cx));
    },
    { passive: false }
  );
  tl.addEventListener("scroll", drawTimeline);
  document.addEventListener("keydown", (e) => {
    if (e.target && /^(INPUT|SELECT|TEXTAREA)$/.test(e.target.tagName)) return;
    const c = (v0 + v1) / 2, w = v1 - v0;
    const key = e.key.toLowerCase();
    if (key === "w") zoom(0.8, c);
    else if (key === "s") zoom(1.25, c);
    else if (key === "a" || key === "d") {
      const dt = (key === "a" ? -0.2 : 0.2) * w;
      v0 += dt;
      v1 += dt;
      clampView();
      drawTimeline();
    }
  });
  document.getElementById("tl-reset").addEventListener("click", () => {
    [v0, v1] = home;
    drawTimeline();
  });

  // ---- Flame graph ----
  const FH = 16, MAX_FLAME_ROWS = 400;
  const fgc = document.getElementById("fg-canvas");
  const fctx = fgc.getContext("2d");
  const fsel = document.getElementById("fg-thread");
  // Weight (with off-CPU records): wall time, on CPU (wall minus the
  // off-CPU time inside), off CPU.
  const wsel = document.getElementById("fg-weight");
  const hasOff = threads.some((t) => t.off.start.length > 0);
  if (!hasOff) document.getElementById("fg-weight-box").style.display = "none";
  const weigh = (f, i) => {
    const w = wsel.value;
    return w === "on" ? Math.max(0, f.total[i] - f.wait[i]) : w === "off" ? f.wait[i] : f.total[i];
  };
  const flameOf = (which) => {
    if (which >= 0) {
      const f = threads[which].flame;
      return { parent: f.parent, fn: f.fn, total: Float64Array.from(f.fn, (_, i) => weigh(f, i)), calls: f.calls };
    }
    // All threads merged: the same call path on every thread is one node.
    const parent = [0], fn = [0xffffffff], totalA = [0], callsA = [0];
    const index = new Map();
    for (const t of threads) {
      const f = t.flame, map = new Uint32Array(f.fn.length);
      totalA[0] += weigh(f, 0);
      callsA[0] += f.calls[0];
      for (let i = 1; i < f.fn.length; i++) {
        const p = map[f.parent[i]], key = p * 4294967296 + f.fn[i];
        let m = index.get(key);
        if (m === undefined) {
          m = fn.length;
          index.set(key, m);
          parent.push(p);
          fn.push(f.fn[i]);
          totalA.push(0);
          callsA.push(0);
        }
        totalA[m] += weigh(f, i);
        callsA[m] += f.calls[i];
        map[i] = m;
      }
    }
    return { parent, fn, total: totalA, calls: callsA };
  };
  let F = null, focus = 0;
  const layoutFlame = (f) => {
    const n = f.fn.length;
    const kids = Array.from({ length: n }, () => []);
    for (let i = 1; i < n; i++) kids[f.parent[i]].push(i);
    const x = new Float64Array(n), depth = new Uint32Array(n), self = new Float64Array(n);
    let maxDepth = 0;
    const stack = [0];
    while (stack.length) {
      const i = stack.pop();
      const ks = kids[i].sort((a, b) => f.total[b] - f.total[a]);
      let cx = x[i], sum = 0;
      for (const c of ks) {
        x[c] = cx;
        cx += f.total[c];
        sum += f.total[c];
        depth[c] = depth[i] + 1;
        maxDepth = Math.max(maxDepth, depth[c]);
        stack.push(c);
      }
      self[i] = Math.max(0, f.total[i] - sum);
    }
    return { f, x, depth, self, maxDepth: Math.min(maxDepth, MAX_FLAME_ROWS) };
  };
  const FW = Math.max(document.getElementById("flame").clientWidth, 400);
  const drawFlame = () => {
    const { f, x, depth, maxDepth } = F;
    const H = (maxDepth + 1) * FH;
    fgc.width = FW * dpr;
    fgc.height = H * dpr;
    fgc.style.width = FW + "px";
    fgc.style.height = H + "px";
    fctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    fctx.clearRect(0, 0, FW, H);
    fctx.font = "11px sans-serif";
    fctx.textBaseline = "middle";
    const a = x[focus], w = Math.max(f.total[focus], 1e-9), k = FW / w;
    for (let i = 0; i < f.fn.length; i++) {
      if (depth[i] > maxDepth) continue;
      let x0 = (x[i] - a) * k, x1 = (x[i] + f.total[i] - a) * k;
      if (x1 <= 0 || x0 >= FW || x1 - x0 < 0.5) continue;
      x0 = Math.max(x0, 0);
      x1 = Math.min(x1, FW);
      const yy = H - (depth[i] + 1) * FH;
      fctx.fillStyle = i === 0 ? "rgb(230,120,40)" : flameColorOf(f.fn[i]);
      fctx.fillRect(x0, yy, Math.max(x1 - x0 - 0.5, 0.5), FH - 1);
      if (x1 - x0 > 24) {
        const s = i === 0 ? fsel.options[fsel.selectedIndex].text : shortOf(f.fn[i]);
        const txt = fitText(fctx, s, x1 - x0);
        if (txt) {
          fctx.fillStyle = "#000";
          fctx.fillText(txt, x0 + 2, yy + FH / 2);
        }
      }
    }
  };
  const flameHit = (e) => {
    const r = fgc.getBoundingClientRect();
    const cx = e.clientX - r.left, cy = e.clientY - r.top;
    const { f, x, depth, maxDepth } = F;
    const d = maxDepth - Math.floor(cy / FH);
    const a = x[focus], t = a + (cx / FW) * f.total[focus];
    for (let i = 0; i < f.fn.length; i++) if (depth[i] === d && x[i] <= t && t < x[i] + f.total[i]) return i;
    return -1;
  };
  fgc.addEventListener("click", (e) => {
    const i = flameHit(e);
    focus = i < 0 ? 0 : i;
    drawFlame();
  });
  fgc.addEventListener("mousemove", (e) => {
    const i = flameHit(e);
    if (i < 0) return hideTip();
    const f = F.f, all = f.total[0] || 1;
    const nm = i === 0 ? fsel.options[fsel.selectedIndex].text : names[f.fn[i]];
    showTip(
      e,
      "<b>" + esc(nm) + "</b><br>" + (hasOff ? wsel.options[wsel.selectedIndex].text + " " : "") +
        "total <span class=n>" + fmt(f.total[i]) + "</span> (" +
        ((100 * f.total[i]) / all).toFixed(2) + "%) · self <span class=n>" + fmt(F.self[i]) +
        "</span> · <span class=n>" + f.calls[i] + "</span> calls"
    );
  });
  fgc.addEventListener("mouseleave", hideTip);
  const opt = (v, text) => {
    const o = document.createElement("option");
    o.value = v;
    o.textContent = text;
    fsel.appendChild(o);
  };
  opt(-1, "all threads (" + threads.length + ")");
  threads.forEach((t, i) => opt(i, label(t) + " · " + t.calls + " calls"));
  const chooseFlame = () => {
    F = layoutFlame(flameOf(Number(fsel.value)));
    focus = 0;
    drawFlame();
  };
  fsel.addEventListener("change", chooseFlame);
  wsel.addEventListener("change", chooseFlame);
  document.getElementById("fg-reset").addEventListener("click", () => {
    focus = 0;
    drawFlame();
  });

  drawTimeline();
  chooseFlame();
  if (location.hash === "#selftest") {
    const out = [];
    for (const t of threads) {
      const idx = [];
      for (let d = 0; d + 1 < t.rows.length; d++) for (let i = t.rows[d]; i < t.rows[d + 1]; i++) idx.push([i, d]);
      idx.sort((p, q) => t.start[p[0]] - t.start[q[0]] || p[1] - q[1]);
      for (const [i, d] of idx) out.push(t.tid + " " + d + " " + t.start[i] + " " + t.dur[i] + " " + names[t.fn[i]]);
      for (const m of t.markers) out.push(t.tid + " marker " + m[0] + " " + names[m[1]] + " " + m[2]);
      const o = t.off;
      for (let i = 0; i < o.start.length; i++)
        out.push(
          t.tid + " offcpu " + o.depth[i] + " " + o.start[i] + " " + o.dur[i] + " " +
            (o.pre[i] ? "preempted " : "blocked ") + names[o.fn[i]]
        );
    }
    // Each thread's longest blocked and longest preempted off-CPU
    // interval, zoomed to and scrolled into view: the colour drawn at its
    // middle and the tooltip there ("tid offcpu-drawn r,g,b tooltip").
    for (const l of lanes) {
      const o = l.t.off;
      for (const pre of [0, 1]) {
        let j = -1;
        for (let i = 0; i < o.dur.length; i++) if (o.pre[i] === pre && (j < 0 || o.dur[i] > o.dur[j])) j = i;
        if (j < 0) continue;
        v0 = o.start[j] - o.dur[j] * 0.05;
        v1 = o.start[j] + o.dur[j] * 1.05;
        clampView();
        const rowY = l.y + MARK_H + o.depth[j] * ROW;
        tl.scrollTop = Math.max(0, AXIS_H + rowY - viewH / 2);
        drawTimeline();
        const x = LABEL_W + (o.start[j] + o.dur[j] / 2 - v0) * ((W - LABEL_W) / (v1 - v0));
        const y = AXIS_H + rowY - tl.scrollTop + ROW / 2;
        const r0 = cv.getBoundingClientRect();
        const px = ctx.getImageData(Math.round(x * dpr), Math.round(y * dpr), 1, 1).data;
        cv.dispatchEvent(new MouseEvent("mousemove", { clientX: r0.left + x, clientY: r0.top + y, bubbles: true }));
        const shown =
          tip.style.display === "block" ? tip.innerHTML.replace(/<br>/g, " | ").replace(/<[^>]*>/g, "") : "(no tooltip)";
        out.push(l.t.tid + " offcpu-drawn " + px[0] + "," + px[1] + "," + px[2] + " " + shown);
        hideTip();
      }
    }
    tl.scrollTop = 0;
    [v0, v1] = home;
    drawTimeline();
    // Zoom in with the wheel at the middle of the first lane, pan with D;
    // the flame graph of each choice (all threads first): its root's calls.
    const r = cv.getBoundingClientRect();
    const full = v1 - v0;
    cv.dispatchEvent(
      new WheelEvent("wheel", {
        deltaY: -400,
        clientX: r.left + LABEL_W + (W - LABEL_W) / 2,
        clientY: r.top + AXIS_H + MARK_H + 2,
        bubbles: true,
        cancelable: true,
      })
    );
    const zoomed = v1 - v0, z0 = v0;
    document.dispatchEvent(new KeyboardEvent("keydown", { key: "d" }));
    document.body.dataset.selftestView = [full, zoomed, v0 - z0].join(" ");
    const roots = [];
    for (let i = -1; i < threads.length; i++) {
      fsel.value = String(i);
      fsel.dispatchEvent(new Event("change"));
      roots.push(F.f.calls[0]);
    }
    document.body.dataset.selftestFlame = roots.join(" ");
    // With off-CPU records: every node of every thread's flame graph and
    // of the merged one, under each weight ("tid|all flame WEIGHT total
    // path", the path's names joined by ';').
    if (hasOff) {
      for (const w of ["wall", "on", "off"]) {
        wsel.value = w;
        wsel.dispatchEvent(new Event("change"));
        for (let c = -1; c < threads.length; c++) {
          fsel.value = String(c);
          fsel.dispatchEvent(new Event("change"));
          const f = F.f, path = [""];
          for (let i = 1; i < f.fn.length; i++) {
            path[i] = (f.parent[i] ? path[f.parent[i]] + ";" : "") + names[f.fn[i]];
            out.push((c < 0 ? "all" : threads[c].tid) + " flame " + w + " " + f.total[i] + " " + path[i]);
          }
        }
      }
      wsel.value = "wall";
    }
    fsel.value = "-1";
    chooseFlame();
    [v0, v1] = home;
    drawTimeline();
    const pre = document.createElement("pre");
    pre.id = "selftest";
    pre.textContent = out.join("\n");
    document.body.appendChild(pre);
  }
  document.body.dataset.loadMs = performance.now().toFixed(0);
  console.log("fntrace: drawn " + document.body.dataset.loadMs + " ms after navigation start");
  document.body.dataset.drawn = "1";
})();
