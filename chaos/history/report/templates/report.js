/* The run report's page logic. All data comes from the JSON block #report-data; every text taken from
   the history is set with textContent (never innerHTML), so values such as "<script>" stay text. */
(function () {
  "use strict";
  const t0 = performance.now();
  const D = JSON.parse(document.getElementById("report-data").textContent);
  const OPS = D.ops;
  const NOPS = OPS.p.length;
  const END_US = Math.max(D.end_us, 1);
  const TYPE_COLOURS = [D.type_colours.ok, D.type_colours.fail, D.type_colours.info];
  const SVGNS = "http://www.w3.org/2000/svg";
  const tip = document.getElementById("tooltip");

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function svg(tag, attrs) {
    const e = document.createElementNS(SVGNS, tag);
    for (const k in attrs) e.setAttribute(k, String(attrs[k]));
    return e;
  }
  function showTip(text, x, y) {
    tip.textContent = text;
    tip.hidden = false;
    const w = tip.offsetWidth, h = tip.offsetHeight;
    let left = x + 14, top = y + 14;
    if (left + w > window.innerWidth - 4) left = Math.max(4, x - w - 14);
    if (top + h > window.innerHeight - 4) top = Math.max(4, y - h - 14);
    tip.style.left = left + "px";
    tip.style.top = top + "px";
  }
  function hideTip() { tip.hidden = true; }
  function fmtS(s) { return (Math.round(s * 1000) / 1000).toFixed(3); }
  function jsonText(v) {
    if (v === undefined) return "";
    if (typeof v === "string") return v;
    try { return JSON.stringify(v); } catch (e) { return String(v); }
  }
  function guard(name, fn) {
    try { return fn(); } catch (e) {
      console.error("report section " + name + " failed:", e);
      const sec = document.getElementById(name);
      if (sec) sec.appendChild(el("p", "warn", "This section could not be drawn: " + e));
      return null;
    }
  }

  // ---------------------------------------------------------------- shared time view (seconds)
  const listeners = [];
  let syncing = false;
  function setView(a, b, from) {
    if (syncing) return;
    syncing = true;
    try { for (const l of listeners) if (l.id !== from) l.fn(a, b); } finally { syncing = false; }
  }

  // ---------------------------------------------------------------- plots
  function webglOK() {
    try {
      const c = document.createElement("canvas");
      return !!(c.getContext("webgl") || c.getContext("experimental-webgl"));
    } catch (e) { return false; }
  }

  // one label row per fault kind above the plot, so overlapping windows stay readable
  const KINDS = Array.from(new Set(D.nemesis.map(function (w) { return w.kind; })));
  function faultShapes(yref) {
    const shapes = [], notes = [];
    for (const w of D.nemesis) {
      const row = KINDS.indexOf(w.kind);
      shapes.push({ type: "rect", xref: "x", yref: yref, x0: w.start_s, x1: w.end_s, y0: 0, y1: 1,
        fillcolor: w.colour, opacity: 0.16, line: { width: 0 }, layer: "below" });
      shapes.push({ type: "line", xref: "x", yref: "paper", x0: w.start_s, x1: w.end_s, y0: 1.015 + row * 0.05,
        y1: 1.015 + row * 0.05, line: { width: 3, color: w.colour } });
      notes.push({ x: w.start_s, y: 1.02 + row * 0.05, xref: "x", yref: "paper", xanchor: "left", yanchor: "bottom",
        text: w.plot_label, showarrow: false, font: { size: 10, color: w.colour }, textangle: 0 });
    }
    return { shapes: shapes, annotations: notes };
  }

  const plots = [];
  function drawPlots() {
    if (typeof Plotly === "undefined") throw new Error("plotly.js did not load");
    // SVG for small plots (WebGL set-up costs more than it saves there), WebGL for many points
    const nPoints = D.latency.reduce(function (a, t) { return a + t.x.length; }, 0);
    const gl = nPoints > 8000 && webglOK();
    const lat = D.latency.map(function (t) { return Object.assign({}, t, { type: gl ? "scattergl" : "scatter" }); });
    const fs = faultShapes("paper");
    const xr = [0, END_US / 1e6];
    const base = {
      margin: { l: 64, r: 16, t: 34 + 17 * KINDS.length, b: 40 }, hovermode: "closest", showlegend: true,
      legend: { orientation: "v", x: 1.01, y: 1, font: { size: 11 } },
      plot_bgcolor: "#fff", paper_bgcolor: "#fff", font: { family: "system-ui, sans-serif", size: 12 },
    };
    const layLat = Object.assign({}, base, {
      title: { text: "Latency per op (raw)", font: { size: 14 }, x: 0.01, y: 0.99, yanchor: "top" },
      xaxis: { title: { text: "time (s)" }, range: xr.slice(), zeroline: false },
      yaxis: Object.assign({ title: { text: "latency (ms)" }, type: "log" }, D.lat_dtick ? { dtick: D.lat_dtick } : {}),
      shapes: fs.shapes, annotations: fs.annotations,
    });
    const layRate = Object.assign({}, base, {
      title: { text: "Throughput (completions/s, " + D.rate_bucket_s + " s buckets, stacked by outcome; per-f lines in the legend)",
        font: { size: 14 }, x: 0.01, y: 0.99, yanchor: "top" },
      xaxis: { title: { text: "time (s)" }, range: xr.slice(), zeroline: false },
      yaxis: { title: { text: "ops/s" }, rangemode: "tozero" },
      shapes: fs.shapes.slice(), annotations: fs.annotations.slice(),
    });
    const layQuant = Object.assign({}, base, {
      title: { text: "Latency quantiles (" + D.quantile_bucket_s + " s buckets by invocation time)", font: { size: 14 },
        x: 0.01, y: 0.99, yanchor: "top" },
      xaxis: { title: { text: "time (s)" }, range: xr.slice(), zeroline: false },
      yaxis: { title: { text: "latency (ms)" }, type: "log" },
      shapes: fs.shapes.slice(), annotations: fs.annotations.slice(),
    });
    const cfg = { responsive: true, displaylogo: false, scrollZoom: false };
    const ids = ["latency-plot", "quantile-plot", "rate-plot"];
    ids.forEach(function (id) {
      document.getElementById(id).style.height = (340 + 17 * KINDS.length) + "px";
    });
    const proms = [
      Plotly.newPlot(ids[0], lat.length ? lat : [], layLat, cfg),
      Plotly.newPlot(ids[1], D.quantiles.length ? D.quantiles : [], layQuant, cfg),
      Plotly.newPlot(ids[2], D.rate.length ? D.rate : [], layRate, cfg),
    ];
    ids.forEach(function (id) {
      const div = document.getElementById(id);
      plots.push(div);
      let lastSet = null;
      function same(a, b) {
        return lastSet && Math.abs(lastSet[0] - a) < 1e-9 && Math.abs(lastSet[1] - b) < 1e-9;
      }
      div.on("plotly_relayout", function (ev) {
        if (syncing) return;
        let a, b;
        if (ev["xaxis.autorange"]) { a = 0; b = END_US / 1e6; }
        else if (ev["xaxis.range[0]"] !== undefined) { a = +ev["xaxis.range[0]"]; b = +ev["xaxis.range[1]"]; }
        else if (ev["xaxis.range"]) { a = +ev["xaxis.range"][0]; b = +ev["xaxis.range"][1]; }
        else return;
        if (same(a, b)) return; // our own relayout echoing back
        lastSet = [a, b];
        setView(a, b, id);
      });
      // coalesce bursts (timeline drags) into one relayout per frame-ish
      let timer = null, want = null;
      listeners.push({ id: id, fn: function (a, b) {
        want = [a, b];
        if (timer) return;
        timer = setTimeout(function () {
          timer = null;
          if (same(want[0], want[1])) return;
          lastSet = want;
          Plotly.relayout(div, { "xaxis.range": want.slice() });
        }, 60);
      } });
    });
    const legend = document.getElementById("nemesis-legend");
    const kinds = {};
    for (const w of D.nemesis) kinds[w.kind] = w.colour;
    const names = Object.keys(kinds);
    if (!names.length) legend.appendChild(el("span", "dim", "No nemesis faults in this run."));
    for (const k of names) {
      const s = el("span");
      const sw = el("span", "sw");
      sw.style.background = kinds[k];
      sw.style.opacity = "0.5";
      s.appendChild(sw);
      s.appendChild(document.createTextNode(k + " (" + D.nemesis.filter(function (w) { return w.kind === k; }).length + " windows)"));
      legend.appendChild(s);
    }
    return Promise.all(proms);
  }

  // ---------------------------------------------------------------- availability
  function drawAvailability() {
    document.getElementById("availability-source").textContent =
      "Windows without an ok completion (" + D.availability_source + "). Click a row to zoom the plots and timeline to it.";
    const body = document.querySelector("#availability-table tbody");
    if (!D.availability.length) {
      const tr = el("tr");
      const td = el("td", "empty", "No unavailability windows.");
      td.colSpan = 7;
      tr.appendChild(td);
      body.appendChild(tr);
      return;
    }
    D.availability.forEach(function (w, n) {
      const tr = el("tr", "clickable");
      tr.dataset.window = String(n);
      [String(n + 1), fmtS(w.start_s), fmtS(w.end_s), fmtS(w.end_s - w.start_s),
        w.counts.ok + " / " + w.counts.fail + " / " + w.counts.info,
        (w.faults.length ? w.faults.join(", ") : "none"), w.note || (w.f ? "first ok " + w.f : "")].forEach(function (t) {
        tr.appendChild(el("td", null, t));
      });
      tr.addEventListener("click", function () {
        document.querySelectorAll("#availability-table tr.selected").forEach(function (r) { r.classList.remove("selected"); });
        tr.classList.add("selected");
        const pad = Math.max((w.end_s - w.start_s) * 0.3, 0.2);
        for (const div of plots) {
          const shapes = (div.layout.shapes || []).filter(function (s) { return s.name !== "avail"; });
          shapes.push({ name: "avail", type: "rect", xref: "x", yref: "paper", x0: w.start_s, x1: w.end_s, y0: 0, y1: 1,
            fillcolor: "rgba(0,0,0,0)", line: { width: 2, color: "#111827", dash: "dot" } });
          Plotly.relayout(div, { shapes: shapes });
        }
        setView(Math.max(0, w.start_s - pad), w.end_s + pad, null);
        document.getElementById("perf").scrollIntoView({ behavior: "auto", block: "start" });
      });
      body.appendChild(tr);
    });
  }

  // ---------------------------------------------------------------- timeline (canvas, windowed)
  const TL = {};
  function setupTimeline() {
    const canvas = document.getElementById("timeline-canvas");
    const status = document.getElementById("timeline-status");
    const AXIS = 24, LABEL = 78;
    const byProc = [];
    for (let r = 0; r < D.procs.length; r++) byProc.push([]);
    for (let m = 0; m < NOPS; m++) byProc[OPS.p[m]].push(m);
    const nemProc = D.procs.indexOf("nemesis");
    // Lanes: one per process, or packed: a retired process (after an info op Jepsen-style runners
    // continue as p + concurrency) shares a lane with processes that ended before it started.
    let nrows = 0, rowH = 16, rowArr = [], nemRow = -1, laneOf = new Int32Array(D.procs.length), laneLabel = [];
    function buildLanes(pack) {
      const lanes = [];  // {procs: [], end}
      const order = [];
      for (let r = 0; r < D.procs.length; r++) if (r !== nemProc && byProc[r].length) order.push(r);
      const first = function (r) { return OPS.s[byProc[r][0]]; };
      const last = function (r) { const a = byProc[r]; let e = 0; for (const m of a) e = Math.max(e, OPS.e[m] >= 0 ? OPS.e[m] : END_US); return e; };
      if (pack) order.sort(function (a, b) { return first(a) - first(b); });
      if (nemProc >= 0) lanes.push({ procs: [nemProc], end: Infinity });
      for (const r of order) {
        let lane = null;
        if (pack) for (const l of lanes) if (l.end < first(r)) { lane = l; break; }
        if (!lane) { lane = { procs: [], end: 0 }; lanes.push(lane); }
        lane.procs.push(r);
        lane.end = last(r);
      }
      nrows = lanes.length;
      rowH = nrows > 80 ? 10 : 16;
      nemRow = nemProc >= 0 ? 0 : -1;
      rowArr = lanes.map(function (l, n) {
        for (const r of l.procs) laneOf[r] = n;
        const a = [];
        for (const r of l.procs) for (const m of byProc[r]) a.push(m);
        return Int32Array.from(a);
      });
      laneLabel = lanes.map(function (l) {
        const p0 = D.procs[l.procs[0]];
        if (p0 === "nemesis") return "nemesis";
        return "p" + p0 + (l.procs.length > 1 ? " +" + (l.procs.length - 1) : "");
      });
    }
    const packBox = document.getElementById("timeline-pack");
    const nClientProcs = D.procs.length - (nemProc >= 0 ? 1 : 0);
    buildLanes(true);
    const packedLanes = nrows;
    const pack = packedLanes < 0.75 * (nClientProcs + (nemProc >= 0 ? 1 : 0));
    if (packBox) {
      packBox.checked = pack;
      packBox.addEventListener("change", function () { buildLanes(packBox.checked); resize(); });
    }
    if (!pack) buildLanes(false);
    const ctx = canvas.getContext("2d");
    let view = [0, END_US * 1.01];
    let width = 0, height = 0, dpr = 1, selected = -1;

    function effEnd(m) { const e = OPS.e[m]; return e >= 0 ? e : END_US; }
    function X(us) { return LABEL + (us - view[0]) / (view[1] - view[0]) * (width - LABEL - 6); }
    function U(x) { return view[0] + (x - LABEL) / (width - LABEL - 6) * (view[1] - view[0]); }
    // first op of the row whose end is >= us (ops of one process do not overlap, so ends are sorted)
    function firstEndingAfter(arr, us) {
      let lo = 0, hi = arr.length;
      while (lo < hi) { const mid = (lo + hi) >> 1; if (effEnd(arr[mid]) < us) lo = mid + 1; else hi = mid; }
      return lo;
    }
    function resize() {
      dpr = window.devicePixelRatio || 1;
      width = canvas.parentElement.clientWidth || 1000;
      height = AXIS + nrows * rowH + 4;
      canvas.style.height = height + "px";
      canvas.width = Math.round(width * dpr);
      canvas.height = Math.round(height * dpr);
      draw();
    }
    let pending = false;
    function schedule() { if (!pending) { pending = true; requestAnimationFrame(function () { pending = false; draw(); }); } }
    function draw() {
      const tStart = performance.now();
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.clearRect(0, 0, width, height);
      ctx.fillStyle = "#fff";
      ctx.fillRect(0, 0, width, height);
      // fault windows
      for (const w of D.nemesis) {
        const a = X(w.start_s * 1e6), b = X(w.end_s * 1e6);
        if (b < LABEL || a > width) continue;
        ctx.globalAlpha = 0.13;
        ctx.fillStyle = w.colour;
        ctx.fillRect(Math.max(a, LABEL), AXIS, Math.min(b, width) - Math.max(a, LABEL), height - AXIS);
        ctx.globalAlpha = 1;
      }
      // lanes
      ctx.font = "11px system-ui, sans-serif";
      ctx.textBaseline = "middle";
      for (let r = 0; r < nrows; r++) {
        const y = AXIS + r * rowH;
        if (r % 2 === 1) { ctx.fillStyle = "rgba(0,0,0,0.025)"; ctx.fillRect(LABEL, y, width - LABEL, rowH); }
        ctx.fillStyle = "#374151";
        if (rowH >= 10) ctx.fillText(laneLabel[r], 6, y + rowH / 2);
      }
      // ops; within a row skip ops that fall on pixels already painted with the same type
      let drawn = 0;
      for (let r = 0; r < nrows; r++) {
        const arr = rowArr[r];
        const y = AXIS + r * rowH + 2, h = rowH - 4;
        let lastPx = -1, lastType = -1;
        for (let k = firstEndingAfter(arr, view[0]); k < arr.length; k++) {
          const m = arr[k];
          const s = OPS.s[m];
          if (s > view[1]) break;
          const x0 = Math.max(X(s), LABEL), x1 = Math.min(X(effEnd(m)), width);
          const t = OPS.t[m];
          if (Math.floor(x1) <= lastPx && t === lastType) continue;
          ctx.fillStyle = TYPE_COLOURS[t];
          ctx.globalAlpha = OPS.e[m] < 0 ? 0.5 : 1;
          ctx.fillRect(x0, y, Math.max(x1 - x0, 1), h);
          drawn++;
          lastPx = Math.floor(x1); lastType = t;
        }
        ctx.globalAlpha = 1;
      }
      if (nemRow >= 0) {
        const y = AXIS + nemRow * rowH + 2, h = rowH - 4;
        for (const o of D.nemesis_ops) {
          const x0 = X(o.start_s * 1e6), x1 = X(o.end_s * 1e6);
          if (x1 < LABEL || x0 > width) continue;
          ctx.fillStyle = "#4b5563";
          ctx.fillRect(Math.max(x0, LABEL), y, Math.max(x1 - x0, 2), h);
        }
      }
      if (selected >= 0) {
        const r = laneOf[OPS.p[selected]];
        const x0 = X(OPS.s[selected]), x1 = X(effEnd(selected));
        ctx.strokeStyle = "#111827";
        ctx.lineWidth = 2;
        ctx.strokeRect(x0 - 2, AXIS + r * rowH, Math.max(x1 - x0, 1) + 4, rowH);
      }
      // axis
      ctx.fillStyle = "#fff";
      ctx.fillRect(0, 0, width, AXIS);
      ctx.strokeStyle = "#d1d5db";
      ctx.lineWidth = 1;
      ctx.beginPath(); ctx.moveTo(LABEL, AXIS - 0.5); ctx.lineTo(width, AXIS - 0.5); ctx.stroke();
      const spanS = (view[1] - view[0]) / 1e6;
      const step = niceStep(spanS / 10);
      ctx.fillStyle = "#4b5563";
      ctx.textAlign = "center";
      for (let v = Math.ceil(view[0] / 1e6 / step) * step; v <= view[1] / 1e6; v += step) {
        const x = X(v * 1e6);
        ctx.beginPath(); ctx.moveTo(x, AXIS - 5); ctx.lineTo(x, AXIS); ctx.stroke();
        ctx.fillText(v.toFixed(step < 1 ? Math.min(6, Math.ceil(-Math.log10(step))) : 0) + " s", x, AXIS / 2);
      }
      ctx.textAlign = "left";
      status.textContent = "Showing " + fmtS(view[0] / 1e6) + "–" + fmtS(view[1] / 1e6) + " s; " + NOPS +
        " client ops, " + nClientProcs + " processes in " + (nrows - (nemRow >= 0 ? 1 : 0)) + " lanes; " + drawn +
        " boxes drawn in " +
        (performance.now() - tStart).toFixed(1) + " ms.";
    }
    function niceStep(raw) {
      const mag = Math.pow(10, Math.floor(Math.log10(Math.max(raw, 1e-9))));
      for (const m of [1, 2, 5, 10]) if (raw <= m * mag) return m * mag;
      return 10 * mag;
    }
    function setRange(a, b, notify) {
      const span = Math.max(b - a, 1);
      view = [a, a + span];
      schedule();
      if (notify) setView(view[0] / 1e6, view[1] / 1e6, "timeline");
    }
    listeners.push({ id: "timeline", fn: function (a, b) { setRange(a * 1e6, b * 1e6, false); } });
    function opAt(x, y) {
      const r = Math.floor((y - AXIS) / rowH);
      if (r < 0 || r >= nrows || x < LABEL) return null;
      const us = U(x), tol = (view[1] - view[0]) / (width - LABEL) * 3;
      if (r === nemRow) {
        for (const o of D.nemesis_ops) if (o.start_s * 1e6 - tol <= us && us <= o.end_s * 1e6 + tol) return { nem: o };
        return null;
      }
      const arr = rowArr[r];
      const k = firstEndingAfter(arr, us - tol);
      if (k < arr.length && OPS.s[arr[k]] <= us + tol) return { m: arr[k] };
      return null;
    }
    function opText(m) {
      const e = OPS.e[m];
      const lines = [
        "process " + D.procs[OPS.p[m]] + "  " + D.fs[OPS.f[m]] + "  " + (e >= 0 ? D.types[OPS.t[m]] : "never completed"),
        OPS.v[m],
        "invoke #" + OPS.i[m] + " at " + fmtS(OPS.s[m] / 1e6) + " s" +
          (e >= 0 ? ", completion #" + OPS.j[m] + " at " + fmtS(e / 1e6) + " s, latency " + ((e - OPS.s[m]) / 1e3).toFixed(2) + " ms" : ""),
      ];
      if (OPS.k[m]) lines.push("key " + OPS.k[m]);
      if (OPS.n[m]) lines.push("node " + OPS.n[m]);
      if (OPS.err[m]) lines.push("error " + OPS.err[m]);
      return lines.join("\n");
    }
    let drag = null;
    canvas.addEventListener("mousedown", function (ev) { drag = { x: ev.clientX, v: view.slice() }; canvas.style.cursor = "grabbing"; });
    window.addEventListener("mouseup", function () { if (drag) { drag = null; canvas.style.cursor = "grab"; } });
    canvas.addEventListener("mousemove", function (ev) {
      const rect = canvas.getBoundingClientRect();
      if (drag) {
        const du = (ev.clientX - drag.x) / (width - LABEL) * (drag.v[1] - drag.v[0]);
        setRange(drag.v[0] - du, drag.v[1] - du, true);
        hideTip();
        return;
      }
      const hit = opAt(ev.clientX - rect.left, ev.clientY - rect.top);
      if (!hit) { hideTip(); return; }
      if (hit.nem) {
        showTip("nemesis " + hit.nem.f + " (#" + hit.nem.i + ")\n" + fmtS(hit.nem.start_s) + "–" + fmtS(hit.nem.end_s) +
          " s\nvalue " + hit.nem.value + "\nresult " + hit.nem.result, ev.clientX, ev.clientY);
      } else showTip(opText(hit.m), ev.clientX, ev.clientY);
    });
    canvas.addEventListener("mouseleave", hideTip);
    canvas.addEventListener("wheel", function (ev) {
      ev.preventDefault();
      const rect = canvas.getBoundingClientRect();
      const at = U(ev.clientX - rect.left);
      const k = Math.exp(ev.deltaY * 0.002);
      setRange(at - (at - view[0]) * k, at + (view[1] - at) * k, true);
    }, { passive: false });
    canvas.addEventListener("dblclick", function () { setRange(0, END_US * 1.01, true); });
    window.addEventListener("resize", resize);
    TL.select = function (m) {
      selected = m;
      const span = Math.max((effEnd(m) - OPS.s[m]) * 20, 200000);
      setRange(OPS.s[m] - span / 2, OPS.s[m] + span / 2, true);
      document.getElementById("timeline").scrollIntoView({ block: "start" });
    };
    // page coordinates of the middle of op m's box (used by tests and deep links)
    TL.pointOf = function (m) {
      const rect = canvas.getBoundingClientRect();
      const x0 = Math.max(X(OPS.s[m]), LABEL), x1 = Math.min(X(effEnd(m)), width);
      return { x: rect.left + (x0 + x1) / 2, y: rect.top + AXIS + laneOf[OPS.p[m]] * rowH + rowH / 2 };
    };
    TL.byIndex = function (idx) {
      for (let m = 0; m < NOPS; m++) if (OPS.i[m] === idx || OPS.j[m] === idx) return m;
      return -1;
    };
    resize();
  }

  // ---------------------------------------------------------------- counterexamples (porcupine style)
  function describeOp(o) {
    if (typeof o.description === "string" && o.description) return o.description;
    let s = o.f + (o.value !== null && o.value !== undefined ? " " + jsonText(o.value) : "");
    if (o.type === "info" || o.return === null || o.return === undefined) s += " → ?";
    else if (o.output !== null && o.output !== undefined) s += " → " + jsonText(o.output);
    else if (o.f === "read") s += " → nil";
    return s;
  }

  // the fault windows an interval [a, b] (seconds) overlaps, as "kind nodes" labels
  function faultsDuring(a, b) {
    const out = [];
    for (const w of D.nemesis || []) if (w.start_s <= b && w.end_s >= a && out.indexOf(w.label) < 0) out.push(w.label);
    return out;
  }

  function drawCounterexample(host, item) {
    const ce = item.ce;
    const box = el("div", "ce");
    box.id = "counterexample-key-" + item.key;
    box.dataset.key = item.key;
    const h = el("h3", null, "Key " + item.key + " is not linearizable" + (item.model ? " (model " + item.model + ")" : ""));
    box.appendChild(h);
    host.appendChild(box);
    if (!ce || !Array.isArray(ce.ops)) {
      box.appendChild(el("p", "hint", "The checker gave no counterexample for this key."));
      return;
    }
    const byId = {};
    for (const o of ce.ops) byId[o.id] = o;
    const prefix = Array.isArray(ce.prefix) ? ce.prefix : [];
    const order = {};
    prefix.forEach(function (id, n) { order[id] = n; });
    const windowSet = new Set(Array.isArray(ce.window) ? ce.window : []);
    const failing = ce.failing;
    const states = Array.isArray(ce.states) ? ce.states : [];

    const p = el("p", "hint");
    p.textContent = ce.ops.length + " ops; the longest linearizable prefix has " + prefix.length + " ops; " +
      (failing !== null && failing !== undefined && byId[failing] ? "the op that cannot be placed next is " +
        describeOp(byId[failing]) + " (process " + byId[failing].process + ")." : "no failing op given.");
    box.appendChild(p);
    if (typeof ce.why === "string" && ce.why) box.appendChild(el("p", "ce-why", ce.why));
    const legend = el("div", "ce-legend");
    [["#c7e9c0", "#31a354", "in the linearizable prefix (number = linearization order, bar = point)"],
      ["#fcbba1", "#d7191c", "cannot be placed next"], ["#fff", "#f08c00", "in the smallest failing window"],
      ["#eceff3", "#9ca3af", "other op"]].forEach(function (c) {
      const s = el("span");
      const i = el("i");
      i.style.background = c[0];
      i.style.border = "2px solid " + c[1];
      s.appendChild(i);
      s.appendChild(document.createTextNode(c[2]));
      legend.appendChild(s);
    });
    box.appendChild(legend);

    // Long prefixes: draw the failing window, the failing op, ops concurrent with it and the last
    // prefix ops; the table below still lists the whole prefix.
    let ops = ce.ops;
    const MAX_DRAWN = 160;
    if (ops.length > MAX_DRAWN) {
      const keep = new Set(windowSet);
      const f = byId[failing];
      if (f) {
        keep.add(f.id);
        const fr = f.return === null || f.return === undefined ? Infinity : f.return;
        for (const o of ops) if (o.call <= fr && (o.return === null || o.return === undefined || o.return >= f.call)) keep.add(o.id);
      }
      for (const id of prefix.slice(-40)) keep.add(id);
      let kept = ops.filter(function (o) { return keep.has(o.id); });
      if (kept.length > MAX_DRAWN) kept = kept.slice(kept.length - MAX_DRAWN);
      box.appendChild(el("p", "hint", "Drawing " + kept.length + " of " + ops.length +
        " ops: the failing window, the failing op, ops concurrent with it and the last prefix ops."));
      ops = kept;
    }
    const drawnIds = new Set(ops.map(function (o) { return o.id; }));
    // the failing op and the ops concurrent with it keep their whole label (the rest are cut to their box)
    const fullLabel = new Set();
    if (byId[failing]) {
      const f = byId[failing];
      const fr = f.return === null || f.return === undefined ? Infinity : f.return;
      for (const o of ops) if (o.call <= fr && (o.return === null || o.return === undefined || o.return >= f.call)) fullLabel.add(o.id);
    }
    // ordinal time axis, as porcupine draws it: sorted distinct call/return times
    const times = [];
    for (const o of ops) { times.push(o.call); if (o.return !== null && o.return !== undefined) times.push(o.return); }
    const uniq = Array.from(new Set(times)).sort(function (a, b) { return a - b; });
    const pos = new Map();
    uniq.forEach(function (t, n) { pos.set(t, n); });
    const npos = uniq.length + 1;
    const procs = Array.from(new Set(ops.map(function (o) { return String(o.process); })));
    procs.sort(function (a, b) { const x = +a, y = +b; return isNaN(x) || isNaN(y) ? (a < b ? -1 : 1) : x - y; });
    const LEFT = 80, STEP = Math.max(26, Math.min(70, 1250 / npos)), ROW = 44, TOP = 24;
    const W = LEFT + npos * STEP + 30, H = TOP + procs.length * ROW + 10;
    const s = svg("svg", { width: W, height: H, viewBox: "0 0 " + W + " " + H, class: "ce-svg" });
    function xOf(t) { return LEFT + pos.get(t) * STEP + STEP / 2; }
    // process labels in a sticky column of their own, so they stay in view when the lanes scroll
    const lanes = svg("svg", { width: LEFT, height: H, viewBox: "0 0 " + LEFT + " " + H, class: "ce-lanes" });
    procs.forEach(function (pr, r) {
      const y = TOP + r * ROW;
      if (r % 2 === 0) s.appendChild(svg("rect", { x: 0, y: y - 4, width: W, height: ROW, fill: "#f5f6f8" }));
      lanes.appendChild(svg("rect", { x: 0, y: y - 4, width: LEFT, height: ROW, fill: r % 2 === 0 ? "#f5f6f8" : "#fcfcfd" }));
      const t = svg("text", { x: 8, y: y + 15, "font-size": 12, fill: "#374151" });
      t.textContent = "process " + pr;
      lanes.appendChild(t);
    });
    // linearization points: increasing along the prefix, each inside its op's interval
    const points = {};
    let lastPt = -Infinity;
    for (const id of prefix) {
      const o = byId[id];
      if (!o || !drawnIds.has(id)) continue;
      const a = xOf(o.call) + 3;
      const b = o.return === null || o.return === undefined ? W - 10 : xOf(o.return) - 3;
      const pt = Math.min(Math.max(a, lastPt + 3), b);
      points[id] = pt;
      lastPt = pt;
    }
    const boxes = {};
    for (const o of ops) {
      const r = procs.indexOf(String(o.process));
      const y = TOP + r * ROW;
      const crashed = o.return === null || o.return === undefined;
      const x0 = xOf(o.call) - STEP / 2 + 3;
      const x1 = crashed ? W - 6 : xOf(o.return) + STEP / 2 - 3;
      let fill = "#eceff3", stroke = "#9ca3af", sw = 1.2;
      if (o.id in order) { fill = "#c7e9c0"; stroke = "#31a354"; }
      if (o.id === failing) { fill = "#fcbba1"; stroke = "#d7191c"; sw = 2.5; }
      else if (windowSet.has(o.id) && !(o.id in order)) { fill = "#fff"; stroke = "#f08c00"; sw = 2; }
      const g = svg("g", { class: o.id === failing ? "ce-op failing-op" : "ce-op", "data-op": o.id });
      const rect = svg("rect", { x: x0, y: y, width: Math.max(x1 - x0, 8), height: 26, rx: 4, fill: fill, stroke: stroke,
        "stroke-width": sw });
      if (crashed) rect.setAttribute("stroke-dasharray", "5 3");
      g.appendChild(rect);
      if (o.id in points) {
        const px = points[o.id];
        g.appendChild(svg("line", { x1: px, x2: px, y1: y - 3, y2: y + 30, stroke: "#111827", "stroke-width": 2 }));
        const n = svg("text", { x: px, y: y - 5, "font-size": 10, fill: "#111827", "font-weight": 700,
          "text-anchor": "middle" });
        n.textContent = String(order[o.id] + 1);
        g.appendChild(n);
      }
      const label = describeOp(o);
      const maxChars = Math.max(1, Math.floor((x1 - x0 - 8) / 6.6));
      const t = svg("text", { x: x0 + 5, y: y + 17, "font-size": 11.5, fill: "#111827", stroke: fill,
        "stroke-width": 3, "paint-order": "stroke" });
      t.textContent = fullLabel.has(o.id) || label.length <= maxChars ? label : label.slice(0, Math.max(maxChars - 1, 1)) + "…";
      g.appendChild(t);
      if (o.id === failing) {
        const m = svg("text", { x: x1 - 14, y: y + 18, "font-size": 15, fill: "#d7191c", "font-weight": 800 });
        m.textContent = "✗";
        g.appendChild(m);
      }
      const info = [
        "process " + o.process + ": " + describeOp(o) + (o.type ? " (" + o.type + ")" : ""),
        "history #" + o.index + ", call " + fmtS(o.call / 1e9) + " s, return " + (crashed ? "never (crashed)" : fmtS(o.return / 1e9) + " s"),
      ];
      const during = faultsDuring(o.call / 1e9, crashed ? Infinity : o.return / 1e9);
      info.push(during.length ? "during fault " + during.join(", ") : "in no fault window");
      if (o.id in order) {
        const k = order[o.id];
        info.push("linearized " + (k + 1) + " of " + prefix.length);
        info.push("state before: " + (k === 0 ? (ce.initial_state !== undefined ? jsonText(ce.initial_state) + " (initial)" : "(initial)") : jsonText(states[k - 1])));
        info.push("state after:  " + (k < states.length ? jsonText(states[k]) : "?"));
      } else if (o.id === failing) {
        info.push("cannot be placed after the prefix");
        info.push("state before: " + jsonText(ce.failing_state));
        info.push("state after:  no legal transition");
      } else {
        info.push("not in the longest linearizable prefix" + (windowSet.has(o.id) ? "; in the failing window" : ""));
      }
      const text = info.join("\n");
      g.addEventListener("mousemove", function (ev) { showTip(text, ev.clientX, ev.clientY); });
      g.addEventListener("mouseleave", hideTip);
      boxes[o.id] = rect;
      s.appendChild(g);
    }
    const wrap = el("div", "ce-svg-wrap");
    wrap.appendChild(lanes);
    wrap.appendChild(s);
    box.appendChild(wrap);
    // open on the smallest failing window (and the failing op), not on the key's first op
    const focus = ops.filter(function (o) { return windowSet.has(o.id) || o.id === failing; });
    if (focus.length) {
      const x0 = Math.min.apply(null, focus.map(function (o) { return xOf(o.call) - STEP / 2; }));
      // scrolling needs a laid-out box: now if it has one, else once it gets one
      const f = byId[failing] && drawnIds.has(failing) ? byId[failing] : null;
      const open = function () {
        if (wrap.dataset.opened || wrap.clientWidth === 0) return;
        // the window's start at the left edge, unless that leaves the failing op out of view
        let target = x0 - LEFT - 10;
        if (f) {
          const fx = f.return === null || f.return === undefined ? W : xOf(f.return) + STEP / 2;
          target = Math.max(target, fx + 40 - wrap.clientWidth);
        }
        wrap.scrollLeft = Math.max(0, target);
        wrap.dataset.opened = "1";
      };
      open();
      if (!wrap.dataset.opened && window.ResizeObserver) {
        const ro = new ResizeObserver(function () { open(); if (wrap.dataset.opened) ro.disconnect(); });
        ro.observe(wrap);
      }
    }
    if (failing !== null && failing !== undefined && boxes[failing]) {
      const j = el("span", "jump", "Jump to the failing op");
      j.addEventListener("click", function () {
        const x = +boxes[failing].getAttribute("x");
        wrap.scrollLeft = Math.max(0, x - wrap.clientWidth / 2);
        boxes[failing].setAttribute("stroke-width", "4");
      });
      box.appendChild(j);
    }
    // the prefix in order, with the model state after each op
    const tbl = el("table", "grid ce-order");
    const head = el("tr");
    ["#", "process", "op", "state after"].forEach(function (c) { head.appendChild(el("th", null, c)); });
    const thead = el("thead");
    thead.appendChild(head);
    tbl.appendChild(thead);
    const tb = el("tbody");
    prefix.forEach(function (id, n) {
      const o = byId[id];
      if (!o) return;
      const tr = el("tr");
      tr.appendChild(el("td", null, n + 1));
      tr.appendChild(el("td", null, o.process));
      tr.appendChild(el("td", null, describeOp(o)));
      tr.appendChild(el("td", "state", n < states.length ? jsonText(states[n]) : "?"));
      tb.appendChild(tr);
    });
    if (failing !== null && failing !== undefined && byId[failing]) {
      const o = byId[failing];
      const tr = el("tr", "failing");
      tr.appendChild(el("td", null, "✗"));
      tr.appendChild(el("td", null, o.process));
      tr.appendChild(el("td", null, describeOp(o)));
      tr.appendChild(el("td", "state", "no legal step from " + jsonText(ce.failing_state)));
      tb.appendChild(tr);
    }
    tbl.appendChild(tb);
    const det = el("details");
    det.open = prefix.length <= 40;
    det.appendChild(el("summary", null, "Linearization order of the prefix"));
    det.appendChild(tbl);
    box.appendChild(det);
  }

  function drawCounterexamples() {
    const host = document.getElementById("counterexample-list");
    if (!D.counterexamples.length) {
      host.appendChild(el("p", "hint", D.counterexample_note));
      return;
    }
    for (const item of D.counterexamples) drawCounterexample(host, item);
  }

  // ---------------------------------------------------------------- log anomalies
  function opLinks(td, list) {
    if (!list.length) { td.textContent = "none"; td.className = "empty"; return; }
    list.forEach(function (s, n) {
      if (n) td.appendChild(document.createTextNode("; "));
      const m = /^#(\d+)/.exec(s);
      if (m && TL.byIndex) {
        const a = el("span", "jump", s);
        a.addEventListener("click", function () { const k = TL.byIndex(+m[1]); if (k >= 0) TL.select(k); });
        td.appendChild(a);
      } else td.appendChild(document.createTextNode(s));
    });
  }
  function drawLog() {
    const body = document.querySelector("#log-table tbody");
    if (!D.log_rows.length) {
      const tr = el("tr");
      const td = el("td", "empty", D.checkers.some(function (c) { return c.name === "log"; })
        ? "No lost, duplicated or unexpected entries." : "No log checker in this run.");
      td.colSpan = 5;
      tr.appendChild(td);
      body.appendChild(tr);
      return;
    }
    for (const r of D.log_rows) {
      const tr = el("tr");
      tr.appendChild(el("td", "kind-" + r.kind, r.kind));
      tr.appendChild(el("td", "mono", r.value));
      const w = el("td");
      opLinks(w, r.wrote);
      tr.appendChild(w);
      const rd = el("td");
      opLinks(rd, r.read);
      tr.appendChild(rd);
      tr.appendChild(el("td", "mono", r.detail));
      body.appendChild(tr);
    }
  }

  // ---------------------------------------------------------------- go
  window.__report = { timeline: TL };
  function ready() {
    const ms = performance.now();
    window.__reportReadyMs = ms;
    document.body.setAttribute("data-report-ready", String(Math.round(ms)));
    window.__report.timings.ready = ms;
    console.log("report ready in " + (ms - t0).toFixed(0) + " ms after script start, " + ms.toFixed(0) +
      " ms after navigation; " + JSON.stringify(window.__report.timings, function (k, v) { return typeof v === "number" ? Math.round(v) : v; }));
  }
  const timings = { script_start: t0, parsed: performance.now() };
  window.__report.timings = timings;
  function timed(name, fn) { const r = guard(name, fn); timings[name] = performance.now(); return r; }
  timed("availability", drawAvailability);
  timed("timeline", setupTimeline);
  timed("counterexamples", drawCounterexamples);
  timed("log-anomalies", drawLog);
  const p = timed("perf", drawPlots);
  if (p && p.then) p.then(ready, function (e) { console.error("plots failed:", e); ready(); });
  else ready();
})();
