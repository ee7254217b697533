// ncdc view: draws the scene (ncdc/view/scene.py's JSON in <script id="scene">) as a neural
// circuit diagram: blocks as boxes in their fill colour (stacked when repeated or lifted),
// operators as small labelled boxes, wires labelled with their axes, tape slots as named ports;
// left to right, long chains folded into rows so the drawing uses the screen both ways.
// The layout is this file's own compact layered layout (one level per open block). Everything
// runs offline; window.__ncdc is the handle the tests and the exporter use.
"use strict";
(function () {
  const scene = JSON.parse(document.getElementById("scene").textContent);
  const meta = JSON.parse(document.getElementById("meta").textContent);
  const nodes = scene.nodes;
  const SVGNS = "http://www.w3.org/2000/svg";
  const expanded = new Set();
  let selected = null;
  let current = null;  // the placed layout of the whole drawing
  const view = { s: 1, tx: 0, ty: 0 };
  const stats = { layouts: [], firstFrameMs: null, lastLayoutMs: null, lastRenderMs: null };
  const api = { stats, expanded, scene, view };
  window.__ncdc = api;

  // ---------------------------------------------------------------- text
  const ctx = document.createElement("canvas").getContext("2d");
  const widths = new Map();
  function textWidth(text, size, bold) {
    const key = `${size}${bold ? "b" : ""}|${text}`;
    let w = widths.get(key);
    if (w === undefined) {
      ctx.font = `${bold ? "600 " : ""}${size}px system-ui, sans-serif`;
      w = Math.ceil(ctx.measureText(text.replace(/[_^]/g, "")).width);
      widths.set(key, w);
    }
    return w;
  }
  // a label's ``_q`` / ``^T`` (scripts with no Unicode form) drawn lowered / raised
  const SCRIPT = /([_^])([A-Za-z0-9+\-\/.]+)/g;
  function setText(t, text) {
    t.textContent = "";
    let at = 0;
    for (const m of text.matchAll(SCRIPT)) {
      if (m.index > at) t.appendChild(document.createTextNode(text.slice(at, m.index)));
      const s = document.createElementNS(SVGNS, "tspan");
      s.setAttribute("class", m[1] === "_" ? "sub-script" : "sup-script");
      s.setAttribute("baseline-shift", m[1] === "_" ? "sub" : "super");
      s.textContent = m[2];
      t.appendChild(s);
      at = m.index + m[0].length;
    }
    if (at < text.length) t.appendChild(document.createTextNode(text.slice(at)));
  }
  function htmlText(el, text) {
    let at = 0;
    for (const m of text.matchAll(SCRIPT)) {
      if (m.index > at) el.appendChild(document.createTextNode(text.slice(at, m.index)));
      const s = document.createElement(m[1] === "_" ? "sub" : "sup");
      s.textContent = m[2];
      el.appendChild(s);
      at = m.index + m[0].length;
    }
    if (at < text.length) el.appendChild(document.createTextNode(text.slice(at)));
  }
  function wireText(e) { return e.bound ? e.boundAxes : e.axes; }
  function keyLabel(id) { return nodes[id].seg || nodes[id].label; }

  // ---------------------------------------------------------------- box sizes
  const STACK = 8;  // room for the copies behind a repeated or lifted block
  function stacked(n) { return n.kind === "block" && (n.rep || (n.lifted && n.lifted.length)); }
  function subtitle(n) {
    if (n.kind === "operator") return n.named ? n.meaning : "";
    if (n.kind === "block") {
      if (n.lifted && n.lifted.length) return `over ${n.lifted.join(", ")}`;
      if (!expanded.has(n.id) && n.children.length) {
        const inner = n.children.length;
        return inner === 1 ? "1 part" : `${inner} parts`;
      }
    }
    return "";
  }
  function leafSize(n) {
    const ports = Math.max(n.inputs, n.outputs, 1);
    if (n.kind === "tape" || n.kind === "input" || n.kind === "output") {
      return [textWidth(n.label, 11) + 26, Math.max(20, ports * 12 + 6)];
    }
    if (n.kind === "operator") {
      const sub = subtitle(n);
      const w = Math.max(textWidth(n.label, 12), sub ? textWidth(sub, 10) : 0) + 18 + (n.children.length ? 18 : 0);
      return [Math.max(w, 30), Math.max(sub ? 34 : 24, ports * 12 + 6)];
    }
    const toggle = n.children.length ? 18 : 0;
    const rep = n.rep ? textWidth(`\u00d7${n.rep}`, 12, true) + 8 : 0;
    const sub = subtitle(n);
    const w = Math.max(textWidth(keyLabel(n.id), 13, true) + rep, sub ? textWidth(sub, 10) : 0) + toggle + 20;
    const h = Math.max(sub ? 42 : 30, ports * 13 + 8);
    const extra = stacked(n) ? STACK : 0;
    return [Math.min(Math.max(w, 56), 360) + extra, h + extra];
  }
  function portY(h, k, n) { return Math.round(h * (k + 1) / (n + 1)); }

  // ---------------------------------------------------------------- layout of one level
  // Children are boxes of fixed size (an open child has its own level's size). Layers by
  // longest path, sources pulled next to their first consumer, order by barycentre sweeps;
  // layers are packed into rows of about the target width, rows stacked top to bottom.
  const GAP_Y = 14, ROW_GAP = 44;
  // an open block's level, kept until something inside it opens or closes (see invalidate)
  const levelCache = new Map();
  function invalidate(id) {
    for (let p = id; p; p = nodes[p].parent) levelCache.delete(p);
  }
  const ONE_ROW = 1250;  // a level at most this wide stays one row (it fits a screen as it is)
  function layoutLevel(id, aspect) {
    const n = nodes[id];
    const isRoot = id === scene.root;
    const kids = n.children;
    const index = new Map(kids.map((c, i) => [c, i]));
    const size = new Map();
    for (const c of kids) {
      if (expanded.has(c)) {
        let lv = levelCache.get(c);
        if (!lv) { lv = layoutLevel(c, 1.6); levelCache.set(c, lv); }
        size.set(c, [lv.width, lv.height, lv]);
      } else {
        const [w, h] = leafSize(nodes[c]);
        size.set(c, [w, h, null]);
      }
    }
    const edges = scene.edges[id] || [];
    const preds = new Map(kids.map((c) => [c, []]));
    const succs = new Map(kids.map((c) => [c, []]));
    for (const e of edges) {
      if (e.src !== id && e.dst !== id && index.has(e.src) && index.has(e.dst)) {
        preds.get(e.dst).push(e.src);
        succs.get(e.src).push(e.dst);
      }
    }
    // topological order (Kahn; scene order breaks ties)
    const indeg = new Map(kids.map((c) => [c, preds.get(c).length]));
    const order = [];
    const ready = kids.filter((c) => indeg.get(c) === 0);
    while (ready.length) {
      const c = ready.shift();
      order.push(c);
      for (const d of succs.get(c)) { indeg.set(d, indeg.get(d) - 1); if (indeg.get(d) === 0) ready.push(d); }
    }
    for (const c of kids) if (!order.includes(c)) order.push(c);  // a cycle cannot occur; be safe
    const layer = new Map();
    for (const c of order) layer.set(c, preds.get(c).reduce((l, p) => Math.max(l, layer.get(p) + 1), 0));
    for (let i = order.length - 1; i >= 0; i--) {
      const c = order[i];
      if (preds.get(c).length || !succs.get(c).length) continue;
      layer.set(c, Math.max(layer.get(c), succs.get(c).reduce((l, d) => Math.min(l, layer.get(d) - 1), 1e9)));
    }
    const nl = kids.length ? Math.max(...kids.map((c) => layer.get(c))) + 1 : 0;
    const layers = Array.from({ length: nl }, () => []);
    for (const c of kids) layers[layer.get(c)].push(c);
    // barycentre sweeps: a box sits near the boxes that feed it
    const pos = new Map();
    const rank = () => layers.forEach((L) => L.forEach((c, i) => pos.set(c, i / Math.max(1, L.length - 1))));
    rank();
    const inPos = (c) => { const ps = edges.filter((e) => e.dst === c).map((e) => (e.src === id ? e.srcPort / Math.max(1, n.inputs) : pos.get(e.src))); return ps.length ? ps.reduce((a, b) => a + b, 0) / ps.length : null; };
    const outPos = (c) => { const ps = succs.get(c).map((d) => pos.get(d)); return ps.length ? ps.reduce((a, b) => a + b, 0) / ps.length : null; };
    for (let sweep = 0; sweep < 3; sweep++) {
      const down = sweep !== 1;
      const seq = down ? layers : [...layers].reverse();
      for (const L of seq) {
        const key = new Map(L.map((c, i) => { const b = down ? inPos(c) : outPos(c); return [c, b === null ? pos.get(c) : b + i * 1e-6]; }));
        L.sort((a, b) => key.get(a) - key.get(b));
        L.forEach((c, i) => pos.set(c, i / Math.max(1, L.length - 1)));
      }
    }
    // layer sizes and the gaps that hold the wire labels leaving each layer
    const labelW = (list) => list.reduce((w, e) => Math.max(w, wireText(e) ? textWidth(wireText(e), 10) + 12 : 0), 0);
    const lw = layers.map((L) => Math.max(...L.map((c) => size.get(c)[0])));
    const lh = layers.map((L) => L.reduce((h, c) => h + size.get(c)[1], 0) + GAP_Y * (L.length - 1));
    const gap = layers.map((L) => Math.max(34, labelW(edges.filter((e) => L.includes(e.src) && e.dst !== id))));
    const padL = isRoot ? 16 : Math.max(20, labelW(edges.filter((e) => e.src === id)) + 6);
    const outLabels = labelW(edges.filter((e) => e.dst === id));
    const padR = isRoot ? 16 : Math.max(20, outLabels + 6);
    const padT = isRoot ? 16 : 30 + (stacked(n) ? STACK : 0), padB = isRoot ? 16 : 12;
    // fold: the layers packed greedily into k rows of about total / k width each; the k whose
    // drawing comes nearest the target aspect ratio wins
    const total = lw.reduce((a, b) => a + b, 0) + gap.slice(0, -1).reduce((a, b) => a + b, 0);
    const pack = (k) => {
      const target = total / k, rows = [];
      let row = [], width = 0, wmax = 0;
      for (let i = 0; i < nl; i++) {
        const add = lw[i] + (row.length ? gap[i - 1] : 0);
        if (row.length && width + add > target * 1.08 && rows.length < k - 1) { rows.push(row); wmax = Math.max(wmax, width); row = []; width = 0; }
        width += lw[i] + (row.length ? gap[i - 1] : 0);
        row.push(i);
      }
      if (row.length) { rows.push(row); wmax = Math.max(wmax, width); }
      const hsum = rows.reduce((h, r) => h + Math.max(...r.map((i) => lh[i])), 0) + ROW_GAP * (rows.length - 1);
      return { rows, score: Math.abs(Math.log((wmax + padL + padR) / (hsum + padT + padB) / aspect)) };
    };
    let best = pack(1);
    for (let k = 2; (isRoot || total + padL + padR > ONE_ROW) && k <= Math.min(nl, 12); k++) {
      const p = pack(k);
      if (p.score < best.score) best = p;
    }
    const rows = nl ? best.rows : [];
    const boxes = new Map();
    const rowOf = new Map();
    let y = padT, maxW = 0;
    const rowBottoms = [];
    rows.forEach((r, ri) => {
      const rh = Math.max(...r.map((i) => lh[i]));
      let x = padL;
      for (const i of r) {
        let yy = y + (rh - lh[i]) / 2;
        for (const c of layers[i]) {
          const [w, h, lv] = size.get(c);
          boxes.set(c, { x: x + (lw[i] - w) / 2, y: yy, w, h, lv });
          rowOf.set(c, ri);
          yy += h + GAP_Y;
        }
        x += lw[i] + gap[i];
      }
      maxW = Math.max(maxW, x - gap[r[r.length - 1]]);
      y += rh;
      rowBottoms.push(y);
      y += ROW_GAP;
    });
    if (rows.length) y -= ROW_GAP;
    const titleW = isRoot ? 0 : leafSize(n)[0] + 20;
    const W = Math.max(maxW + padR, titleW, 80);
    const H = Math.max(y + padB, isRoot ? 0 : 50);
    // the ports of each child, and of this level's own box
    const outPort = (c, k) => {
      const b = boxes.get(c);
      if (b.lv) return { x: b.x + b.lv.outPorts[k].x, y: b.y + b.lv.outPorts[k].y };
      const nn = nodes[c];
      const st = stacked(nn) ? STACK : 0;
      return { x: b.x + b.w - st, y: b.y + st + portY(b.h - st, k, nn.outputs) };
    };
    const inPort = (c, k) => {
      const b = boxes.get(c);
      if (b.lv) return { x: b.x + b.lv.inPorts[k].x, y: b.y + b.lv.inPorts[k].y };
      const nn = nodes[c];
      const st = stacked(nn) ? STACK : 0;
      return { x: b.x, y: b.y + st + portY(b.h - st, k, nn.inputs) };
    };
    const st = !isRoot && stacked(n) ? STACK : 0;
    const spread = (count, want) => {
      // port k at the height it feeds (or is fed from), kept in order and 14 px apart
      const ys = [];
      for (let k = 0; k < count; k++) {
        let v = want[k] !== undefined ? want[k] : st + portY(H - st, k, count);
        if (k && v < ys[k - 1] + 14) v = ys[k - 1] + 14;
        ys.push(Math.min(Math.max(v, padT - 6 + st * 0), H - 6));
      }
      return ys;
    };
    const wantIn = [], wantOut = [];
    for (const e of edges) {
      if (e.src === id && e.dst !== id && wantIn[e.srcPort] === undefined) wantIn[e.srcPort] = inPort(e.dst, e.dstPort).y;
      if (e.dst === id && e.src !== id && wantOut[e.dstPort] === undefined) wantOut[e.dstPort] = outPort(e.src, e.srcPort).y;
    }
    const inPorts = spread(n.inputs, isRoot ? [] : wantIn).map((v) => ({ x: 0, y: v }));
    const outPorts = spread(n.outputs, isRoot ? [] : wantOut).map((v) => ({ x: W - st, y: v }));
    // wires: a curve forward; to a later row, round the row's bottom and back
    const wires = [];
    let lane = 0;
    for (const e of edges) {
      const p = e.src === id ? inPorts[e.srcPort] : outPort(e.src, e.srcPort);
      const q = e.dst === id ? outPorts[e.dstPort] : inPort(e.dst, e.dstPort);
      if (!p || !q) continue;
      const r0 = e.src === id ? 0 : rowOf.get(e.src);
      const r1 = e.dst === id ? rows.length - 1 : rowOf.get(e.dst);
      let d;
      if (r1 > r0) {
        // down to the gap under the source's row, along it, down to the target's row
        const off = ((lane++ % 7) - 3) * 4;
        const gy = rowBottoms[r0] + ROW_GAP / 2 + off;
        const x1 = p.x + 12 + off, x2 = q.x - 12 - off;
        if (r1 === r0 + 1) {
          d = `M${p.x},${p.y} L${x1},${p.y} L${x1},${gy} L${x2},${gy} L${x2},${q.y} L${q.x},${q.y}`;
        } else {
          // past the rows between: down the left margin, in along the gap over the target's row
          const gx = Math.max(2, padL / 2 + off);
          const gy2 = rowBottoms[r1 - 1] + ROW_GAP / 2 + off;
          d = `M${p.x},${p.y} L${x1},${p.y} L${x1},${gy} L${gx},${gy} L${gx},${gy2} L${x2},${gy2} L${x2},${q.y} L${q.x},${q.y}`;
        }
      } else {
        // a wire past boxes between its ends goes round them (above or below, the nearer)
        const lo = Math.min(p.y, q.y) - 6, hi = Math.max(p.y, q.y) + 6;
        const between = [];
        for (const [c, b] of boxes) {
          if (c === e.src || c === e.dst) continue;
          if (b.x > p.x + 2 && b.x + b.w < q.x - 2 && b.y < hi && b.y + b.h > lo) between.push(b);
        }
        if (between.length) {
          const top = Math.min(...between.map((b) => b.y)) - 8 - (lane % 3) * 3;
          const bottom = Math.max(...between.map((b) => b.y + b.h)) + 8 + (lane % 3) * 3;
          lane++;
          const yy = Math.abs(top - p.y) <= Math.abs(bottom - p.y) ? top : bottom;
          const x1 = p.x + 10, x2 = q.x - 10;
          d = `M${p.x},${p.y} C${x1},${p.y} ${x1},${yy} ${x1 + 10},${yy} L${x2 - 10},${yy} C${x2},${yy} ${x2},${q.y} ${q.x},${q.y}`;
        } else {
          const dx = Math.max(10, (q.x - p.x) / 2);
          d = `M${p.x},${p.y} C${p.x + dx},${p.y} ${q.x - dx},${q.y} ${q.x},${q.y}`;
        }
      }
      wires.push({ e, d, p });
    }
    return { id, width: W, height: H, boxes, wires, inPorts, outPorts, stack: st };
  }

  // ---------------------------------------------------------------- drawing
  function el(tag, attrs, parent) {
    const x = document.createElementNS(SVGNS, tag);
    for (const k in attrs) x.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(x);
    return x;
  }
  const COLOR = /^#[0-9a-fA-F]{3,8}$/;
  function drawBox(n, x, y, w, h, open, depth, parent) {
    const g = el("g", { class: `node ${n.kind}${open ? " open" : ""}${n.expansion ? " expansion" : ""}`, "data-id": n.id,
      "data-kind": n.kind, "data-depth": depth }, parent);
    if (n.glyph) g.classList.add(`glyph-${n.glyph}`);
    if (n.path) g.setAttribute("data-path", n.path);
    const st = stacked(n) ? STACK : 0;
    const fill = n.kind === "block" && COLOR.test(n.color || "") ? n.color : null;
    const rx = n.kind === "block" ? 5 : n.kind === "operator" ? 4 : 10;
    for (let k = st ? 2 : 0; k > 0; k--) {
      // copies behind, up and to the right, as in the NCD papers
      const copy = el("rect", { x: x + k * STACK / 2, y: y + (2 - k) * STACK / 2, width: w - st, height: h - st, rx, class: "copy" }, g);
      if (fill) copy.style.fill = fill;
    }
    const rect = el("rect", { x, y: y + st, width: w - st, height: h - st, rx, class: "shape" }, g);
    if (fill) rect.style.fill = fill;
    const bx = x, by = y + st, bw = w - st;
    const hasToggle = n.children.length > 0;
    if (n.kind === "block" || open) {
      const tx = open ? bx + (hasToggle ? 22 : 8) : bx + (hasToggle ? 18 : 0) / 2 + bw / 2 - (n.rep ? (textWidth(`\u00d7${n.rep}`, 12, true) + 8) / 2 : 0);
      const t = el("text", { x: tx, y: by + (open ? 19 : (subtitle(n) ? 18 : (h - st) / 2 + 5)), class: "title", "text-anchor": open ? "start" : "middle" }, g);
      setText(t, keyLabel(n.id));
      if (n.rep) {
        const r = el("text", { x: bx + bw - 6, y: by + (open || subtitle(n) ? 18 : (h - st) / 2 + 5), class: "rep", "text-anchor": "end" }, g);
        r.textContent = `\u00d7${n.rep}`;
      }
      if (!open && subtitle(n)) {
        const s = el("text", { x: bx + (hasToggle ? 9 : 0) + bw / 2, y: by + 33, class: "sub", "text-anchor": "middle" }, g);
        s.textContent = subtitle(n);
      } else if (open && n.lifted && n.lifted.length) {
        const s = el("text", { x: tx + textWidth(keyLabel(n.id), 13, true) + 10, y: by + 19, class: "sub" }, g);
        s.textContent = subtitle(n);
      }
      if (hasToggle) {
        el("rect", { x: bx + 4, y: by + 6, width: 14, height: 14, rx: 3, class: "toggle-box toggle" }, g);
        const t2 = el("text", { x: bx + 11, y: by + 17.5, class: "toggle", "text-anchor": "middle" }, g);
        t2.textContent = open ? "\u2212" : "+";
      }
    } else {
      const sub = n.kind === "operator" ? subtitle(n) : "";
      const cx = x + w / 2 + (hasToggle ? 9 : 0);
      const t = el("text", { x: cx, y: y + (sub ? 15 : h / 2 + 4), class: "title", "text-anchor": "middle" }, g);
      setText(t, n.kind === "tape" ? (n.mode === "read" ? `\u25b8 ${n.label}` : `${n.label} \u25b8`) : n.label);
      if (sub) {
        const s = el("text", { x: cx, y: y + 28, class: "sub", "text-anchor": "middle" }, g);
        s.textContent = sub;
      }
      if (hasToggle) {  // an operator that opens to its expansion's diagram
        el("rect", { x: x + 4, y: y + h / 2 - 7, width: 14, height: 14, rx: 3, class: "toggle-box toggle" }, g);
        el("text", { x: x + 11, y: y + h / 2 + 4.5, class: "toggle", "text-anchor": "middle" }, g).textContent = "+";
      }
    }
    return g;
  }

  function drawLevel(lv, ox, oy, depth, layers, labelled) {
    for (const [c, b] of lv.boxes) {
      const n = nodes[c];
      const x = ox + b.x, y = oy + b.y;
      const g = drawBox(n, x, y, b.w, b.h, !!b.lv, depth, layers.boxes);
      if (b.lv) drawLevel(b.lv, x, y, depth + 1, layers, labelled);
      g.__box = { x, y, w: b.w, h: b.h };
    }
    for (const { e, d, p } of lv.wires) {
      const g = el("g", { class: `wire${e.dead ? " dead" : ""}`, "data-id": e.id, "data-src": e.src, "data-dst": e.dst }, layers.wires);
      el("path", { d, transform: `translate(${ox},${oy})` }, g);
      const key = `${e.src}|${e.srcPort}`;
      const text = wireText(e);
      if (text && !labelled.has(key)) {
        labelled.add(key);  // a wire that fans out is labelled once, at its source
        const t = el("text", { x: ox + p.x + 5, y: oy + p.y - 3, class: "wire-label" }, g);
        t.textContent = text;
        const tip = el("title", {}, g);  // the whole array (datatype, bound sizes) on hover
        tip.textContent = e.bound || e.label;
      }
    }
  }

  function relayout() {
    const t0 = performance.now();
    const stage = document.getElementById("stage").getBoundingClientRect();
    // the top level aims wider than the screen: rows of a diagram read better long than tall
    const top = layoutLevel(scene.root, 1.6 * Math.max(0.8, (stage.width || 1200) / Math.max(1, stage.height || 800)));
    const t1 = performance.now();
    const world = document.getElementById("world");
    world.textContent = "";
    const layers = { boxes: el("g", { class: "boxes" }, world), wires: el("g", { class: "wires" }, world) };
    drawLevel(top, 0, 0, 0, layers, new Set());
    current = top;
    const t2 = performance.now();
    stats.lastLayoutMs = t1 - t0;
    stats.lastRenderMs = t2 - t1;
    stats.layouts.push(t2 - t0);
    const status = document.getElementById("status");
    status.textContent = `${world.querySelectorAll("g.node").length} boxes`;
    status.title = `drawn in ${Math.round(t2 - t0)} ms`;  // not in the text: pictures stay the same
    if (selected) highlight(selected);
    updateMinimap();
    return t2 - t0;
  }

  // ---------------------------------------------------------------- view: zoom, pan, fit
  const svg = document.getElementById("canvas");
  function apply() {
    document.getElementById("world").setAttribute("transform", `translate(${view.tx},${view.ty}) scale(${view.s})`);
    updateMinimapView();
  }
  function stageSize() { const r = svg.getBoundingClientRect(); return [r.width, r.height]; }
  function zoomAt(cx, cy, factor) {
    const s = Math.min(8, Math.max(0.03, view.s * factor));
    view.tx = cx - (cx - view.tx) * s / view.s;
    view.ty = cy - (cy - view.ty) * s / view.s;
    view.s = s;
    apply();
  }
  function fitRect(x, y, w, h, most) {
    const [vw, vh] = stageSize();
    const s = Math.min(most, (vw - 24) / Math.max(1, w), (vh - 24) / Math.max(1, h));
    view.s = s;
    view.tx = (vw - w * s) / 2 - x * s;
    view.ty = (vh - h * s) / 2 - y * s;
    apply();
  }
  function fit() { if (current) fitRect(0, 0, current.width, current.height, 1.6); }
  function boxOf(id) {
    const g = svg.querySelector(`g.node[data-id="${CSS.escape(id)}"]`);
    return g ? g.__box : null;
  }
  function zoomTo(id) {
    const b = boxOf(id || selected);
    if (b) fitRect(b.x - 10, b.y - 10, b.w + 20, b.h + 20, 2.5);
  }
  function centerOn(id) {
    const b = boxOf(id);
    if (!b) return;
    const [vw, vh] = stageSize();
    if (view.s < 0.5) view.s = Math.min(1, (vw - 24) / b.w, (vh - 24) / b.h);
    view.tx = vw / 2 - (b.x + b.w / 2) * view.s;
    view.ty = vh / 2 - (b.y + b.h / 2) * view.s;
    apply();
  }
  function keepInView(id) {
    const b = boxOf(id);
    if (!b) return;
    const [vw, vh] = stageSize();
    const x = b.x * view.s + view.tx, y = b.y * view.s + view.ty;
    if (x < 0 || y < 0 || x + b.w * view.s > vw || y + b.h * view.s > vh) centerOn(id);
  }
  svg.addEventListener("wheel", (ev) => {
    ev.preventDefault();
    const r = svg.getBoundingClientRect();
    const unit = ev.deltaMode === 1 ? 16 : 1;
    zoomAt(ev.clientX - r.left, ev.clientY - r.top, Math.exp(-ev.deltaY * unit * (ev.ctrlKey ? 0.01 : 0.0015)));
  }, { passive: false });
  let drag = null, dragged = false;
  const touches = new Map();  // two fingers pinch: zoom about their midpoint
  let pinch = null;
  svg.addEventListener("pointerdown", (ev) => {
    if (ev.pointerType === "touch") touches.set(ev.pointerId, [ev.clientX, ev.clientY]);
    if (touches.size === 2) {
      const [a, b] = [...touches.values()];
      pinch = Math.hypot(a[0] - b[0], a[1] - b[1]);
      drag = null;
      return;
    }
    if (ev.button !== 0) return;
    drag = { x: ev.clientX, y: ev.clientY, tx: view.tx, ty: view.ty, id: ev.pointerId };
    dragged = false;
  });
  svg.addEventListener("pointermove", (ev) => {
    if (touches.has(ev.pointerId)) touches.set(ev.pointerId, [ev.clientX, ev.clientY]);
    if (pinch && touches.size === 2) {
      const [a, b] = [...touches.values()];
      const d = Math.hypot(a[0] - b[0], a[1] - b[1]);
      const r = svg.getBoundingClientRect();
      zoomAt((a[0] + b[0]) / 2 - r.left, (a[1] + b[1]) / 2 - r.top, d / pinch);
      pinch = d;
      dragged = true;
      return;
    }
    if (!drag) return;
    const dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
    if (!dragged && Math.abs(dx) + Math.abs(dy) < 4) return;
    if (!dragged) { dragged = true; svg.setPointerCapture(drag.id); svg.classList.add("panning"); }
    view.tx = drag.tx + dx; view.ty = drag.ty + dy;
    apply();
  });
  const endDrag = (ev) => {
    touches.delete(ev.pointerId);
    if (touches.size < 2) pinch = null;
    drag = null;
    svg.classList.remove("panning");
  };
  svg.addEventListener("pointerup", endDrag);
  svg.addEventListener("pointercancel", endDrag);
  window.addEventListener("resize", () => fit());

  // ---------------------------------------------------------------- minimap
  const mini = document.getElementById("minimap");
  function updateMinimap() {
    if (!current) return;
    mini.textContent = "";
    mini.setAttribute("viewBox", `0 0 ${current.width} ${current.height}`);
    for (const g of svg.querySelectorAll("g.node")) {
      const b = g.__box, n = nodes[g.getAttribute("data-id")];
      if (!b || (g.classList.contains("open"))) continue;
      const r = el("rect", { x: b.x, y: b.y, width: b.w, height: b.h, class: `mini-${n.kind}` }, mini);
      if (n.kind === "block" && COLOR.test(n.color || "")) r.style.fill = n.color;
    }
    el("rect", { id: "mini-view", x: 0, y: 0, width: 0, height: 0 }, mini);
    updateMinimapView();
  }
  function updateMinimapView() {
    const r = document.getElementById("mini-view");
    if (!r || !current) return;
    const [vw, vh] = stageSize();
    const x = -view.tx / view.s, y = -view.ty / view.s, w = vw / view.s, h = vh / view.s;
    r.setAttribute("x", x); r.setAttribute("y", y); r.setAttribute("width", w); r.setAttribute("height", h);
    const all = x <= 0 && y <= 0 && x + w >= current.width && y + h >= current.height;
    mini.classList.toggle("hidden", all);
  }
  function miniMove(ev) {
    const r = mini.getBoundingClientRect();
    const k = Math.max(current.width / r.width, current.height / r.height);
    const ox = (r.width - current.width / k) / 2, oy = (r.height - current.height / k) / 2;
    const wx = (ev.clientX - r.left - ox) * k, wy = (ev.clientY - r.top - oy) * k;
    const [vw, vh] = stageSize();
    view.tx = vw / 2 - wx * view.s; view.ty = vh / 2 - wy * view.s;
    apply();
  }
  let miniDrag = false;
  mini.addEventListener("pointerdown", (ev) => { miniDrag = true; mini.setPointerCapture(ev.pointerId); miniMove(ev); ev.stopPropagation(); });
  mini.addEventListener("pointermove", (ev) => { if (miniDrag) miniMove(ev); });
  mini.addEventListener("pointerup", () => { miniDrag = false; });

  // ---------------------------------------------------------------- open and close
  function descendants(id) {
    const out = [];
    const stack = [...nodes[id].children];
    while (stack.length) { const c = stack.pop(); out.push(c); stack.push(...nodes[c].children); }
    return out;
  }
  function ancestors(id) {
    const out = [];
    let p = nodes[id].parent;
    while (p && p !== scene.root) { out.push(p); p = nodes[p].parent; }
    return out;
  }
  // redraw keeping one box (the one clicked) where it was on the screen
  function redrawKeeping(id) {
    const before = id ? boxOf(id) : null;
    const ms = relayout();
    const after = id ? boxOf(id) : null;
    if (before && after) {
      view.tx += (before.x - after.x) * view.s;
      view.ty += (before.y - after.y) * view.s;
      apply();
    } else apply();
    return ms;
  }
  // blocks and operators with an expansion open; the levels (0-9, expand all) open blocks of
  // the diagram itself, an expansion only where it is asked for
  function opensAt(id) { return nodes[id] && (nodes[id].kind === "block" || nodes[id].expansion) && nodes[id].children.length; }
  function levelled(id) { return opensAt(id) && nodes[id].kind === "block" && !ancestors(id).some((a) => nodes[a].expansion); }
  function expand(id) {
    if (!opensAt(id) || expanded.has(id)) return Promise.resolve(0);
    for (const a of ancestors(id)) if (!expanded.has(a)) { expanded.add(a); invalidate(a); }
    expanded.add(id);
    invalidate(id);
    return Promise.resolve(redrawKeeping(id));
  }
  function collapse(id) {
    if (!expanded.has(id)) return Promise.resolve(0);
    expanded.delete(id);
    invalidate(id);
    for (const d of descendants(id)) if (expanded.has(d)) { expanded.delete(d); levelCache.delete(d); }
    return Promise.resolve(redrawKeeping(id));
  }
  function toggle(id) { return expanded.has(id) ? collapse(id) : expand(id); }
  function depthOf(id) { return ancestors(id).length + 1; }
  let openDepth = 0;
  function expandToDepth(d) {
    openDepth = Math.max(0, d);
    expanded.clear();
    levelCache.clear();
    for (const id in nodes) if (levelled(id) && depthOf(id) <= openDepth) expanded.add(id);
    relayout();
    fit();
    document.getElementById("depth").textContent = String(openDepth);
    return Promise.resolve(stats.lastLayoutMs);
  }
  const maxDepth = Object.keys(nodes).reduce((m, id) => (levelled(id) ? Math.max(m, depthOf(id)) : m), 0);
  function reveal(id) {
    for (const a of ancestors(id)) if (!expanded.has(a)) { expanded.add(a); invalidate(a); }
    selected = id;
    relayout();
    showDetails(id);
    centerOn(id);
    return Promise.resolve(0);
  }
  function select(id) { selected = id; highlight(id); showDetails(id); }
  function highlight(id) {
    for (const g of svg.querySelectorAll("g.node.selected")) g.classList.remove("selected");
    const g = id ? svg.querySelector(`g.node[data-id="${CSS.escape(id)}"]`) : null;
    if (g) g.classList.add("selected");
  }

  svg.addEventListener("click", (ev) => {
    if (dragged) { dragged = false; return; }
    const g = ev.target.closest("g.node");
    if (!g) return;
    const id = g.getAttribute("data-id");
    select(id);
    if (ev.target.classList.contains("toggle") || ev.detail === 2) { toggle(id); showDetails(id); }
  });
  svg.addEventListener("dblclick", (ev) => ev.preventDefault());

  document.addEventListener("keydown", (ev) => {
    const search = document.getElementById("search");
    if (ev.key === "/" && document.activeElement !== search) { ev.preventDefault(); search.focus(); return; }
    if (document.activeElement === search || ev.ctrlKey || ev.metaKey || ev.altKey) return;
    if (ev.key === "f") { fit(); return; }
    if (ev.key === "z" && selected) { zoomTo(selected); return; }
    if (ev.key === "e") { expandToDepth(maxDepth); return; }
    if (ev.key === "c") { expandToDepth(0); return; }
    if (/^[0-9]$/.test(ev.key)) { expandToDepth(+ev.key); return; }
    const order = Array.from(svg.querySelectorAll("g.node")).map((g) => g.getAttribute("data-id"));
    if (!order.length) return;
    const at = selected ? order.indexOf(selected) : -1;
    if (ev.key === "ArrowDown" || ev.key === "j") { ev.preventDefault(); select(order[Math.min(at + 1, order.length - 1)]); keepInView(selected); }
    else if (ev.key === "ArrowUp" || ev.key === "k") { ev.preventDefault(); select(order[Math.max(at - 1, 0)]); keepInView(selected); }
    else if ((ev.key === "ArrowRight" || ev.key === "Enter" || ev.key === "+") && selected) { ev.preventDefault(); expand(selected); }
    else if ((ev.key === "ArrowLeft" || ev.key === "-") && selected) {
      ev.preventDefault();
      if (expanded.has(selected)) collapse(selected);
      else if (nodes[selected].parent && nodes[selected].parent !== scene.root) { const p = nodes[selected].parent; select(p); collapse(p); }
    } else if (ev.key === "Escape") { selected = null; highlight(""); showDetails(null); }
  });

  // ---------------------------------------------------------------- toolbar
  const on = (id, fn) => document.getElementById(id).addEventListener("click", fn);
  on("fit", () => fit());
  on("zoom-sel", () => zoomTo(selected));
  on("less", () => expandToDepth(openDepth - 1));
  on("more", () => expandToDepth(Math.min(maxDepth, openDepth + 1)));
  on("expand-all", () => expandToDepth(maxDepth));
  on("collapse-all", () => expandToDepth(0));
  on("save", () => {
    const blob = new Blob([svgText()], { type: "image/svg+xml" });
    const a = document.createElement("a");
    a.href = URL.createObjectURL(blob);
    a.download = (meta.title || "diagram").replace(/[^\w.-]+/g, "_").replace(/\.json$/, "") + ".svg";
    document.body.appendChild(a); a.click(); a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 1000);
  });

  // The drawing alone as a standalone SVG document (its style inlined), at scale 1.
  function svgText() {
    const w = Math.ceil(current.width), h = Math.ceil(current.height);
    const out = document.createElementNS(SVGNS, "svg");
    out.setAttribute("xmlns", SVGNS);
    out.setAttribute("width", w); out.setAttribute("height", h);
    out.setAttribute("viewBox", `0 0 ${w} ${h}`);
    const style = el("style", {}, out);
    style.textContent = document.getElementById("drawing-style").textContent;
    el("rect", { x: 0, y: 0, width: w, height: h, fill: "#fff" }, out);
    const g = document.getElementById("world").cloneNode(true);
    g.removeAttribute("transform");
    g.removeAttribute("id");
    for (const s of g.querySelectorAll(".selected")) s.classList.remove("selected");
    out.appendChild(g);
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + new XMLSerializer().serializeToString(out);
  }

  // ---------------------------------------------------------------- search
  const searchBox = document.getElementById("search");
  const results = document.getElementById("results");
  function searchMatches(q) {
    q = q.trim().toLowerCase();
    if (!q) return [];
    return Object.values(nodes).filter((n) => (n.kind === "block" || n.kind === "operator")
      && (n.label.toLowerCase().includes(q) || (n.seg || "").toLowerCase().includes(q))).slice(0, 50);
  }
  function trail(id) { return ancestors(id).reverse().map(keyLabel).join(" / "); }
  function closeResults() { results.textContent = ""; }
  function choose(id) { closeResults(); searchBox.blur(); return reveal(id); }
  searchBox.addEventListener("input", () => {
    closeResults();
    for (const n of searchMatches(searchBox.value)) {
      const li = document.createElement("li");
      li.setAttribute("data-id", n.id);
      li.tabIndex = 0;
      const b = document.createElement("b"); htmlText(b, keyLabel(n.id)); li.appendChild(b);
      const s = document.createElement("span"); s.textContent = " " + trail(n.id); li.appendChild(s);
      li.addEventListener("click", () => choose(n.id));
      li.addEventListener("keydown", (ev) => { if (ev.key === "Enter") choose(n.id); });
      results.appendChild(li);
    }
  });
  searchBox.addEventListener("keydown", (ev) => {
    ev.stopPropagation();  // the page's own keys do not apply while typing
    if (ev.key === "Enter") { const first = results.querySelector("li"); if (first) choose(first.getAttribute("data-id")); else closeResults(); }
    if (ev.key === "Escape") { searchBox.value = ""; closeResults(); searchBox.blur(); }
  });
  document.addEventListener("pointerdown", (ev) => { if (!ev.target.closest("#search-wrap")) closeResults(); });

  // ---------------------------------------------------------------- details
  function math(latex, display) {
    const span = document.createElement("span");
    if (typeof temml === "undefined") { span.textContent = latex; return span; }
    try { temml.render(latex, span, { displayMode: !!display, throwOnError: false }); }
    catch (err) { span.textContent = latex; }
    return span;
  }
  function row(dl, name, value) {
    const dt = document.createElement("dt"); dt.textContent = name; dl.appendChild(dt);
    const dd = document.createElement("dd");
    if (value instanceof Node) dd.appendChild(value); else dd.textContent = value;
    dl.appendChild(dd);
    return dd;
  }
  function showDetails(id) {
    const box = document.getElementById("details");
    box.textContent = "";
    if (!id) {
      box.appendChild(document.createTextNode("Click a box to select it, click + (or double-click) to open it. "
        + "Wheel zooms, drag pans, f fits, z zooms to the selection, 0\u20139 open to a depth, / searches."));
      const legend = document.createElement("p");
      legend.className = "legend";
      legend.textContent = "Boxes stacked three deep repeat (\u00d7N) or are lifted over axes (\u201cover x\u201d); "
        + "wires carry their axes; dashed wires can hold dead positions; \u25b8 name are tape writes and reads.";
      box.appendChild(legend);
      return;
    }
    const n = nodes[id];
    const h = document.createElement("h2");
    if (n.latex) h.appendChild(math(n.latex)); else htmlText(h, keyLabel(id));
    if (n.rep) { const r = document.createElement("span"); r.className = "rep"; r.textContent = ` \u00d7${n.rep}`; h.appendChild(r); }
    box.appendChild(h);
    const dl = document.createElement("dl");
    row(dl, "kind", n.kind === "operator" ? `${n.meaning} (${n.op})` : n.kind);
    row(dl, "within", trail(id) || "(top level)");
    if (n.path) row(dl, "JSON path", n.path).className = "mono";
    if (n.lifted && n.lifted.length) row(dl, "lifted over", n.lifted.join(", "));
    if (n.dom) row(dl, "inputs", n.dom.join(", ") || "()").className = "mono";
    if (n.cod) row(dl, "outputs", n.cod.join(", ") || "()").className = "mono";
    if (n.format) row(dl, "format", n.format);
    if (n.function) row(dl, "function", n.function);
    if (n.formula) row(dl, "formula", math(n.formula, true));
    const x = n.expansion;
    if (x) {
      row(dl, "expansion", `${x.key}: ${x.error || (expanded.has(id) ? "open" : "click + to open")}`);
      if (x.formula) row(dl, "defined as", math(x.formula, true));
    }
    box.appendChild(dl);
    for (const text of [n.description, x && x.description]) {
      if (!text) continue;
      const p = document.createElement("p"); p.className = "description"; p.textContent = text; box.appendChild(p);
    }
    const keys = n.kind === "operator" ? (n.keys || []) : descendants(id).flatMap((d) => nodes[d].keys || []);
    if (keys.length) {
      const h3 = document.createElement("h3"); h3.textContent = `parameters (${keys.length})`; box.appendChild(h3);
      const table = document.createElement("table"); table.className = "params";
      for (const k of keys.slice(0, 200)) {
        const tr = document.createElement("tr");
        const a = document.createElement("td"); a.textContent = k.key; a.className = "mono";
        const b = document.createElement("td"); b.textContent = `[${k.shape.join(", ")}]${k.learned ? "" : " fixed"}`;
        tr.append(a, b); table.appendChild(tr);
      }
      box.appendChild(table);
    }
    if (n.cost) {
      const h3 = document.createElement("h3"); h3.textContent = "cost"; box.appendChild(h3);
      const cdl = document.createElement("dl");
      for (const k in n.cost) row(cdl, k, String(n.cost[k]));
      box.appendChild(cdl);
    }
    if (n.tag && scene.tags[n.tag] && scene.tags[n.tag].length > 1) {
      const h3 = document.createElement("h3"); h3.textContent = "same block elsewhere"; box.appendChild(h3);
      const ul = document.createElement("ul"); ul.className = "occurrences";
      for (const other of scene.tags[n.tag]) {
        if (other === id) continue;
        const li = document.createElement("li");
        const a = document.createElement("a"); a.href = "#"; a.setAttribute("data-id", other);
        a.textContent = (trail(other) || "(top level)") + " / " + keyLabel(other);
        a.addEventListener("click", (ev) => { ev.preventDefault(); reveal(other); });
        li.appendChild(a); ul.appendChild(li);
      }
      box.appendChild(ul);
    }
  }

  function showTapes() {
    const box = document.getElementById("tapes");
    for (const uid in scene.tapes) {
      const t = scene.tapes[uid];
      const li = document.createElement("li");
      li.textContent = `${t.label}: ${t.shape} \u00b7 ${t.writes.length} write, ${t.reads.length} read`;
      box.appendChild(li);
    }
  }

  Object.assign(api, { expand, collapse, select, reveal, fit, zoomTo, zoomAt, expandToDepth,
    svgText, maxDepth, boxOf, layout: () => current });
  document.getElementById("heading").textContent = meta.title;
  document.getElementById("binding").textContent = meta.binding;
  showTapes();
  showDetails(null);
  const t0 = performance.now();
  for (const id in nodes) if (levelled(id) && depthOf(id) <= (meta.depth || 0)) expanded.add(id);
  openDepth = meta.depth || 0;
  document.getElementById("depth").textContent = String(openDepth);
  relayout();
  fit();
  if (meta.export) document.body.setAttribute("data-svg", btoa(unescape(encodeURIComponent(svgText()))));
  api.done = Promise.resolve(0);
  api.ready = new Promise((res) => requestAnimationFrame(() => {
    stats.firstFrameMs = performance.now() - t0;
    stats.firstFrameAt = performance.now();  // since navigation start
    res(stats);
  }));
})();
