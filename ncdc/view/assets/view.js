// ncdc view: draws the scene (nested blocks, operator glyphs, labelled wires) with ELK's layered
// layout, and shows the selected block's details beside it. The scene is the JSON that
// ncdc/view/scene.py writes into <script id="scene">. Everything runs offline.
"use strict";
(function () {
  const scene = JSON.parse(document.getElementById("scene").textContent);
  const meta = JSON.parse(document.getElementById("meta").textContent);
  const nodes = scene.nodes;
  const SVGNS = "http://www.w3.org/2000/svg";
  const elk = new ELK();
  const expanded = new Set();
  let selected = null;
  let rendering = Promise.resolve();
  const stats = { layouts: [], levels: [], firstFrameMs: null, lastLayoutMs: null, lastRenderMs: null };
  window.__ncdc = { stats, expand, collapse, select, reveal, expanded, scene, ready: null };

  const GLYPH_MARK = {
    contraction: "\u2211", elementwise: "f", cast: "\u21c4", fold: "+", norm: "\u2016\u00b7\u2016",
    topk: "top", source: "\u25c6", view: "\u2933", other: "\u25a1",
  };

  // ---------------------------------------------------------------- text measure
  const ctx = document.createElement("canvas").getContext("2d");
  function textWidth(text, size) {
    ctx.font = `${size}px system-ui, sans-serif`;
    return Math.ceil(ctx.measureText(text).width);
  }

  function wireText(e) { return e.bound ? e.bound : e.label; }

  // ---------------------------------------------------------------- ELK graph
  function portsOf(n) {
    const ports = [];
    for (let k = 0; k < n.inputs; k++) {
      ports.push({ id: `${n.id}|in|${k}`, width: 6, height: 6,
        layoutOptions: { "elk.port.side": "WEST", "elk.port.index": String(n.inputs - 1 - k) } });
    }
    for (let j = 0; j < n.outputs; j++) {
      ports.push({ id: `${n.id}|out|${j}`, width: 6, height: 6,
        layoutOptions: { "elk.port.side": "EAST", "elk.port.index": String(j) } });
    }
    return ports;
  }

  function leafSize(n) {
    const title = nodeTitle(n);
    let w = textWidth(title, 13) + 48;
    let h = 30;
    const sub = subtitle(n);
    if (sub) { w = Math.max(w, textWidth(sub, 11) + 40); h = 44; }
    const ports = Math.max(n.inputs, n.outputs);
    h = Math.max(h, ports * 14 + 8);
    return [Math.min(Math.max(w, 60), 420), h];
  }

  function nodeTitle(n) {
    if (n.kind === "block") return n.label + (n.rep ? `  \u00d7${n.rep}` : "");
    return n.label;
  }

  function subtitle(n) {
    if (n.kind === "operator") {
      if (n.format) return n.format;
      if (n.function) return n.function;
      if (n.formulaText) return n.formulaText.length > 48 ? n.formulaText.slice(0, 47) + "\u2026" : n.formulaText;
      if (n.params && n.params.length) {
        const p = n.params[0];
        return `${p.role} [${p.axes.join(", ")}]`;
      }
      return n.op;
    }
    if (n.kind === "block" && n.lifted && n.lifted.length) return `lifted over [${n.lifted.join(", ")}]`;
    if (n.kind === "block" && !expanded.has(n.id) && n.children.length) return n.children.length === 1 ? "1 part" : `${n.children.length} parts`;
    return "";
  }

  // Each open block (and the root) is laid out on its own, as one level: its children are
  // boxes of fixed size, its own ports are the level's external ports. A level's layout is
  // cached until something inside it opens or closes, so opening a block lays out that block
  // and its ancestors only. An open child keeps the port positions its own layout chose.
  const levelCache = new Map();
  const LEVEL_OPTIONS = {
    "elk.algorithm": "layered", "elk.direction": "RIGHT",
    "elk.spacing.nodeNode": "22", "elk.spacing.edgeEdge": "14",
    "elk.layered.spacing.edgeEdgeBetweenLayers": "14",
    "elk.spacing.edgeLabel": "2", "elk.edgeLabels.placement": "CENTER",
    "elk.layered.nodePlacement.strategy": "NETWORK_SIMPLEX",
    "elk.portConstraints": "FIXED_ORDER",
  };

  function childBox(n) {
    const open = n.kind === "block" && expanded.has(n.id);
    if (open) {
      const lv = levelCache.get(n.id);
      return { id: n.id, width: lv.width, height: lv.height,
        ports: (lv.ports || []).map((p) => ({ id: p.id, x: p.x, y: p.y, width: p.width, height: p.height })),
        layoutOptions: { "elk.portConstraints": "FIXED_POS" } };
    }
    const [w, h] = leafSize(n);
    return { id: n.id, width: w, height: h, ports: portsOf(n),
      layoutOptions: { "elk.portConstraints": "FIXED_ORDER" } };
  }

  async function layoutLevel(id) {
    const n = nodes[id];
    const isRoot = id === scene.root;
    const [minW] = isRoot ? [0] : leafSize(n);
    // every wire's label sits just right of its source port, so the gap between layers (and
    // the padding next to the level's own ports) is made as wide as the widest label in it
    const edges = scene.edges[id] || [];
    const widest = (list) => list.reduce((w, e) => Math.max(w, textWidth(wireText(e), 10) + 14), 0);
    const gap = Math.max(36, widest(edges.filter((e) => e.src !== id)));
    const left = Math.max(18, widest(edges.filter((e) => e.src === id)));
    const graph = {
      id, layoutOptions: { ...LEVEL_OPTIONS,
        "elk.layered.spacing.nodeNodeBetweenLayers": String(gap),
        "elk.padding": isRoot ? `[top=20,left=20,bottom=20,right=${Math.max(20, gap)}]`
          : `[top=34,left=${left},bottom=14,right=${Math.max(18, gap)}]`,
        "elk.nodeSize.constraints": "MINIMUM_SIZE", "elk.nodeSize.minimum": `(${minW + 20},60)` },
      ports: isRoot ? [] : portsOf(n),
      children: n.children.map((c) => childBox(nodes[c])),
      edges: elkEdges(id),
    };
    const started = performance.now();
    // ELK lays out a node's children against its ports only when the node is not the root
    const wrapped = await elk.layout({ id: "\u0000wrap", layoutOptions: { "elk.algorithm": "fixed" },
      children: [graph], edges: [] });
    const out = wrapped.children[0];
    if (!n.children.some((c) => expanded.has(c))) closedCache.set(id, out);
    stats.levels.push({ id, ms: performance.now() - started, boxes: graph.children.length,
      wires: graph.edges.length });
    return out;
  }

  function invalidate(id) {
    let p = id;
    while (p) { levelCache.delete(p); p = nodes[p].parent; }
  }

  async function layoutAll() {
    // post-order over open blocks: a level needs its open children's sizes first
    const order = [];
    const visit = (id) => {
      for (const c of nodes[id].children) if (expanded.has(c)) visit(c);
      order.push(id);
    };
    visit(scene.root);
    for (const id of order) {
      if (levelCache.has(id)) continue;
      const closed = !nodes[id].children.some((c) => expanded.has(c));
      levelCache.set(id, closed && closedCache.has(id) ? closedCache.get(id) : await layoutLevel(id));
    }
    return levelCache.get(scene.root);
  }

  // While the page is idle, blocks not yet opened are laid out in advance (their children
  // closed), nearest the top first, so opening one lays out only its ancestors.
  const closedCache = new Map();
  let busy = false;
  function prepareAhead() {
    const queue = [];
    const visit = (id, depth) => {
      for (const c of nodes[id].children) {
        if (nodes[c].kind !== "block" || !nodes[c].children.length) continue;
        queue.push([depth, c]);
        if (depth < 4) visit(c, depth + 1);
      }
    };
    visit(scene.root, 0);
    queue.sort((a, b) => a[0] - b[0]);
    const step = async () => {
      while (queue.length && (busy || closedCache.has(queue[0][1]))) {
        if (busy) return setTimeout(step, 60);
        queue.shift();
      }
      if (!queue.length) return;
      const [, id] = queue.shift();
      if (!nodes[id].children.some((c) => expanded.has(c))) await layoutLevel(id);
      setTimeout(step, 0);
    };
    setTimeout(step, 30);
  }

  // absolute placement: a level's coordinates are relative to its own box
  function place(level, dx, dy) {
    const out = { ...level, x: dx, y: dy, children: [], edges: [] };
    for (const c of level.children || []) {
      const ox = dx + c.x, oy = dy + c.y;
      if (expanded.has(c.id) && levelCache.has(c.id)) {
        const inner = place(levelCache.get(c.id), ox, oy);
        inner.id = c.id;
        out.children.push(inner);
      } else {
        out.children.push({ ...c, x: ox, y: oy,
          ports: (c.ports || []).map((p) => ({ ...p, x: ox + p.x, y: oy + p.y })) });
      }
    }
    out.ports = (level.ports || []).map((p) => ({ ...p, x: dx + p.x, y: dy + p.y }));
    for (const e of level.edges || []) {
      out.edges.push({ ...e,
        sections: (e.sections || []).map((s) => ({
          startPoint: { x: dx + s.startPoint.x, y: dy + s.startPoint.y },
          endPoint: { x: dx + s.endPoint.x, y: dy + s.endPoint.y },
          bendPoints: (s.bendPoints || []).map((b) => ({ x: dx + b.x, y: dy + b.y })) })),
        labels: (e.labels || []).map((l) => ({ ...l, x: dx + l.x, y: dy + l.y })) });
    }
    return out;
  }

  function endPort(id, port, container, outgoing) {
    if (id === container) return `${id}|${outgoing ? "in" : "out"}|${port}`;
    return `${id}|${outgoing ? "out" : "in"}|${port}`;
  }

  function elkEdges(container) {
    return (scene.edges[container] || []).map((e) => {
      const text = wireText(e);
      return {
        id: e.id,
        sources: [endPort(e.src, e.srcPort, container, true)],
        targets: [endPort(e.dst, e.dstPort, container, false)],
        // labels are drawn after layout, beside the source port (see layoutLevel): labels
        // given to ELK double its work for every level
        labels: [],
      };
    });
  }

  // ---------------------------------------------------------------- drawing
  function el(tag, attrs, parent) {
    const x = document.createElementNS(SVGNS, tag);
    for (const k in attrs) x.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(x);
    return x;
  }

  function draw(layout) {
    labelled = new Set();
    const svg = document.getElementById("canvas");
    svg.textContent = "";
    svg.setAttribute("width", Math.ceil(layout.width));
    svg.setAttribute("height", Math.ceil(layout.height));
    svg.setAttribute("viewBox", `0 0 ${Math.ceil(layout.width)} ${Math.ceil(layout.height)}`);
    const defs = el("defs", {}, svg);
    const marker = el("marker", { id: "arrow", viewBox: "0 0 8 8", refX: "7", refY: "4",
      markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse" }, defs);
    el("path", { d: "M0,0 L8,4 L0,8 z", class: "arrowhead" }, marker);
    const boxes = el("g", { class: "boxes" }, svg);
    const wires = el("g", { class: "wires" }, svg);
    const drawNode = (ln, depth) => {
      const n = nodes[ln.id];
      const open = n.kind === "block" && expanded.has(n.id);
      const g = el("g", { class: `node ${n.kind}${open ? " open" : ""}${n.id === selected ? " selected" : ""}`,
        "data-id": n.id, "data-kind": n.kind, "data-depth": depth, tabindex: "-1" }, boxes);
      if (n.glyph) g.classList.add(`glyph-${n.glyph}`);
      if (n.path) g.setAttribute("data-path", n.path);
      const rect = el("rect", { x: ln.x, y: ln.y, width: ln.width, height: ln.height,
        rx: n.kind === "block" ? 6 : 4, class: "shape" }, g);
      if (n.kind === "block" && n.color && /^#[0-9a-fA-F]{3,8}$/.test(n.color)) rect.style.stroke = n.color;
      const glyphed = n.kind === "operator" || n.kind === "tape" || n.kind === "cut";
      const hasToggle = n.kind === "block" && n.children.length > 0;
      const title = el("text", { x: ln.x + (glyphed || hasToggle ? 26 : 8), y: ln.y + 18, class: "title" }, g);
      title.textContent = n.label;
      if (n.kind === "block" && n.rep) {
        const rep = el("text", { x: ln.x + ln.width - 8, y: ln.y + 18, class: "rep", "text-anchor": "end" }, g);
        rep.textContent = `\u00d7${n.rep}`;
      }
      if (glyphed) {
        const mark = el("text", { x: ln.x + 13, y: ln.y + 19, class: "glyph", "text-anchor": "middle" }, g);
        mark.textContent = n.kind === "tape" ? (n.mode === "read" ? "\u21e2" : "\u21e0") : n.kind === "cut" ? "\u2702" : GLYPH_MARK[n.glyph] || "\u25a1";
      }
      if (!open) {
        const sub = subtitle(n);
        if (sub) {
          const s = el("text", { x: ln.x + (glyphed || hasToggle ? 26 : 8), y: ln.y + 34, class: "sub" }, g);
          s.textContent = sub;
        }
      }
      if (hasToggle) {
        const t = el("text", { x: ln.x + 13, y: ln.y + 18, class: "toggle", "text-anchor": "middle" }, g);
        t.textContent = open ? "\u2212" : "+";
      }
      for (const p of ln.ports || []) {
        el("rect", { x: p.x, y: p.y, width: p.width, height: p.height, class: "port" }, g);
      }
      for (const c of ln.children || []) drawNode(c, depth + 1);
      for (const e of ln.edges || []) drawEdge(e, wires);
    };
    for (const c of layout.children || []) drawNode(c, 0);
    for (const p of layout.ports || []) el("rect", { x: p.x, y: p.y, width: p.width, height: p.height, class: "port root-port" }, boxes);
    for (const e of layout.edges || []) drawEdge(e, wires);
  }

  const edgeIndex = {};
  for (const c in scene.edges) for (const e of scene.edges[c]) edgeIndex[e.id] = e;

  let labelled = new Set();

  function drawEdge(le, parent) {
    const e = edgeIndex[le.id];
    const g = el("g", { class: `wire${e.dead ? " dead" : ""}`, "data-id": e.id, "data-src": e.src, "data-dst": e.dst }, parent);
    for (const s of le.sections || []) {
      const pts = [s.startPoint, ...(s.bendPoints || []), s.endPoint];
      el("path", { d: "M" + pts.map((p) => `${p.x},${p.y}`).join(" L"), "marker-end": "url(#arrow)" }, g);
    }
    const text = wireText(e);
    const key = `${e.src}|${e.srcPort}`;
    if (text && le.sections && le.sections.length && !labelled.has(key)) {
      labelled.add(key);  // a fanned-out wire carries one label
      const s0 = le.sections[0];
      const t = el("text", { x: s0.startPoint.x + 4, y: s0.startPoint.y - 3, class: "wire-label" }, g);
      t.textContent = text;
      if (e.bound) {
        const tip = el("title", {}, t);
        tip.textContent = e.label;
      }
    }
  }

  async function relayout() {
    const t0 = performance.now();
    const top = await layoutAll();
    const layout = place(top, 0, 0);
    const t1 = performance.now();
    draw(layout);
    const t2 = performance.now();
    stats.lastLayoutMs = t1 - t0;
    stats.lastRenderMs = t2 - t1;
    stats.layouts.push(t2 - t0);
    document.getElementById("status").textContent =
      `${document.querySelectorAll("#canvas g.node").length} boxes drawn \u00b7 layout ${Math.round(t1 - t0)} ms`;
    if (selected) highlight(selected);
    return t2 - t0;
  }

  async function safeRelayout() {
    busy = true;
    try { return await relayout(); }
    catch (err) { console.error("ncdc view: layout failed:", err && err.stack || err); throw err; }
    finally { busy = false; }
  }

  function schedule() {
    rendering = rendering.catch(() => null).then(safeRelayout);
    window.__ncdc.done = rendering;
    return rendering;
  }

  // ---------------------------------------------------------------- interaction
  function expand(id) {
    if (!nodes[id] || nodes[id].kind !== "block" || expanded.has(id)) return rendering;
    for (const a of ancestors(id)) if (!expanded.has(a)) { expanded.add(a); invalidate(a); }
    expanded.add(id);
    invalidate(id);
    return schedule();
  }
  function collapse(id) {
    if (!expanded.has(id)) return rendering;
    expanded.delete(id);
    for (const d of descendants(id)) expanded.delete(d);
    invalidate(id);
    return schedule();
  }
  function toggle(id) { return expanded.has(id) ? collapse(id) : expand(id); }
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
  function reveal(id) {
    for (const a of ancestors(id)) if (!expanded.has(a)) { expanded.add(a); invalidate(a); }
    selected = id;
    return schedule().then(() => { showDetails(id); scrollTo(id); });
  }
  function select(id) {
    selected = id;
    highlight(id);
    showDetails(id);
  }
  function highlight(id) {
    for (const g of document.querySelectorAll("#canvas g.node.selected")) g.classList.remove("selected");
    const g = document.querySelector(`#canvas g.node[data-id="${CSS.escape(id)}"]`);
    if (g) g.classList.add("selected");
  }
  function scrollTo(id) {
    const g = document.querySelector(`#canvas g.node[data-id="${CSS.escape(id)}"]`);
    if (g) g.scrollIntoView({ block: "center", inline: "center" });
  }

  document.getElementById("canvas").addEventListener("click", (ev) => {
    const g = ev.target.closest("g.node");
    if (!g) return;
    const id = g.getAttribute("data-id");
    select(id);
    if (ev.target.classList.contains("toggle") || ev.detail === 2) toggle(id);
  });
  document.getElementById("canvas").addEventListener("dblclick", (ev) => ev.preventDefault());

  document.addEventListener("keydown", (ev) => {
    const search = document.getElementById("search");
    if (ev.key === "/" && document.activeElement !== search) { ev.preventDefault(); search.focus(); return; }
    if (document.activeElement === search) return;
    const order = visibleOrder();
    if (!order.length) return;
    const at = selected ? order.indexOf(selected) : -1;
    if (ev.key === "ArrowDown" || ev.key === "j") { ev.preventDefault(); select(order[Math.min(at + 1, order.length - 1)]); scrollTo(selected); }
    else if (ev.key === "ArrowUp" || ev.key === "k") { ev.preventDefault(); select(order[Math.max(at - 1, 0)]); scrollTo(selected); }
    else if ((ev.key === "ArrowRight" || ev.key === "Enter" || ev.key === "+") && selected) { ev.preventDefault(); expand(selected); }
    else if ((ev.key === "ArrowLeft" || ev.key === "-") && selected) {
      ev.preventDefault();
      if (expanded.has(selected)) collapse(selected);
      else if (nodes[selected].parent && nodes[selected].parent !== scene.root) { select(nodes[selected].parent); collapse(selected); }
    } else if (ev.key === "Escape") { selected = null; highlight(""); showDetails(null); }
  });

  function visibleOrder() {
    return Array.from(document.querySelectorAll("#canvas g.node")).map((g) => g.getAttribute("data-id"));
  }

  // ---------------------------------------------------------------- search
  const searchBox = document.getElementById("search");
  const results = document.getElementById("results");
  function searchMatches(q) {
    q = q.trim().toLowerCase();
    if (!q) return [];
    return Object.values(nodes).filter((n) => (n.kind === "block" || n.kind === "operator")
      && n.label.toLowerCase().includes(q)).slice(0, 50);
  }
  function trail(id) { return ancestors(id).reverse().map((a) => nodes[a].label).join(" / "); }
  searchBox.addEventListener("input", () => {
    results.textContent = "";
    for (const n of searchMatches(searchBox.value)) {
      const li = document.createElement("li");
      li.setAttribute("data-id", n.id);
      li.tabIndex = 0;
      const b = document.createElement("b"); b.textContent = n.label; li.appendChild(b);
      const s = document.createElement("span"); s.textContent = " " + trail(n.id); li.appendChild(s);
      li.addEventListener("click", () => reveal(n.id));
      li.addEventListener("keydown", (ev) => { if (ev.key === "Enter") reveal(n.id); });
      results.appendChild(li);
    }
  });
  searchBox.addEventListener("keydown", (ev) => {
    ev.stopPropagation();  // the page's own keys do not apply while typing
    if (ev.key === "Enter") { const first = results.querySelector("li"); if (first) reveal(first.getAttribute("data-id")); searchBox.blur(); }
    if (ev.key === "Escape") { searchBox.value = ""; results.textContent = ""; searchBox.blur(); }
  });

  // ---------------------------------------------------------------- details
  function math(latex, display) {
    const span = document.createElement("span");
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
    if (!id) { box.appendChild(document.createTextNode("Select a box; / searches; arrows move; \u2192 opens; \u2190 closes.")); return; }
    const n = nodes[id];
    const h = document.createElement("h2");
    h.appendChild(n.latex ? math(n.latex) : document.createTextNode(n.label));
    if (n.rep) { const r = document.createElement("span"); r.className = "rep"; r.textContent = ` \u00d7${n.rep}`; h.appendChild(r); }
    box.appendChild(h);
    const dl = document.createElement("dl");
    row(dl, "kind", n.kind === "operator" ? `${n.op} (${n.glyph})` : n.kind);
    row(dl, "within", trail(id) || "(top level)");
    if (n.path) row(dl, "JSON path", n.path).className = "mono";
    if (n.lifted && n.lifted.length) row(dl, "lifted over", `[${n.lifted.join(", ")}]`);
    if (n.dom) row(dl, "inputs", n.dom.join(", ") || "()").className = "mono";
    if (n.cod) row(dl, "outputs", n.cod.join(", ") || "()").className = "mono";
    if (n.format) row(dl, "format", n.format);
    if (n.function) row(dl, "function", n.function);
    if (n.formula) row(dl, "formula", math(n.formula, true));
    box.appendChild(dl);
    if (n.description) {
      const p = document.createElement("p"); p.className = "description"; p.textContent = n.description; box.appendChild(p);
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
        a.textContent = (trail(other) || "(top level)") + " / " + nodes[other].label;
        a.addEventListener("click", (ev) => { ev.preventDefault(); reveal(other); });
        li.appendChild(a); ul.appendChild(li);
      }
      box.appendChild(ul);
    }
  }

  // Frame one box (or the whole drawing) alone on the page, for a picture of it: hides the
  // header and panel and crops the drawing to the box. Returns the size to show it at.
  function frame(id) {
    const svg = document.getElementById("canvas");
    document.body.classList.add("frame");
    let x = 0, y = 0, w = +svg.getAttribute("width"), h = +svg.getAttribute("height");
    if (id) {
      const r = document.querySelector(`#canvas g.node[data-id="${CSS.escape(id)}"] > rect.shape`);
      x = +r.getAttribute("x") - 8; y = +r.getAttribute("y") - 8;
      w = +r.getAttribute("width") + 16; h = +r.getAttribute("height") + 16;
    }
    svg.setAttribute("viewBox", `${x} ${y} ${w} ${h}`);
    svg.setAttribute("width", Math.ceil(w)); svg.setAttribute("height", Math.ceil(h));
    return [Math.ceil(w), Math.ceil(h)];
  }
  window.__ncdc.frame = frame;

  // ---------------------------------------------------------------- tapes and start
  function showTapes() {
    const box = document.getElementById("tapes");
    for (const uid in scene.tapes) {
      const t = scene.tapes[uid];
      const li = document.createElement("li");
      li.textContent = `${t.label}: ${t.shape} \u00b7 ${t.writes.length} write, ${t.reads.length} read`;
      box.appendChild(li);
    }
  }

  document.getElementById("heading").textContent = meta.title;
  document.getElementById("binding").textContent = meta.binding;
  showTapes();
  showDetails(null);
  const t0 = performance.now();
  window.__ncdc.ready = schedule().then(() => {
    stats.firstFrameMs = performance.now() - t0;
    prepareAhead();
    return new Promise((res) => requestAnimationFrame(() => res(stats)));
  });
})();
