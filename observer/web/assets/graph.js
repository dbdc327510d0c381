// Draws a causal graph (ancestry and descendants of one record) as SVG.
// Layout is computed by dagre (assets/dagre.min.js, MIT licence, see
// dagre.LICENSE); this file turns dagre's positions into SVG elements and
// lets the reader pan (drag), zoom (wheel, buttons) and fit the drawing.
//
// Hooks the browser tests rely on: #graph gets data-drawn="true" once
// drawn; each node is a <g class="node" data-id="COORD"> (COORD by topic
// ID) linking to its record page; each edge a <path class="edge"
// data-cause data-effect>. The view box is fitted to the bounds of every
// node and every edge point, so nothing is cut off, and the root record is
// marked and kept in view.
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var MARGIN = 20;

  function el(name, attrs) {
    var e = document.createElementNS(SVG, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    return e;
  }

  function labelOf(n) {
    var label = n.label || n.id;
    if (n.state !== "record") label += " (" + n.state + ")";
    return label;
  }

  // bounds returns the box around every node and edge point.
  function bounds(g) {
    var b = { x0: Infinity, y0: Infinity, x1: -Infinity, y1: -Infinity };
    function add(x, y) {
      b.x0 = Math.min(b.x0, x); b.y0 = Math.min(b.y0, y);
      b.x1 = Math.max(b.x1, x); b.y1 = Math.max(b.y1, y);
    }
    g.nodes().forEach(function (id) {
      var n = g.node(id);
      add(n.x - n.width / 2, n.y - n.height / 2);
      add(n.x + n.width / 2, n.y + n.height / 2);
    });
    g.edges().forEach(function (e) {
      g.edge(e).points.forEach(function (p) { add(p.x, p.y); });
    });
    return { x: b.x0 - MARGIN, y: b.y0 - MARGIN, w: b.x1 - b.x0 + 2 * MARGIN, h: b.y1 - b.y0 + 2 * MARGIN };
  }

  function draw(host, data) {
    var nodes = data.nodes || [], edges = data.edges || [];
    if (nodes.length === 0) {
      var p = document.createElement("p");
      p.className = "graph-empty";
      p.textContent = "No records to draw.";
      host.appendChild(p);
      host.setAttribute("data-drawn", "true");
      return;
    }
    var g = new dagre.graphlib.Graph();
    g.setGraph({ rankdir: "LR", nodesep: 18, ranksep: 60, marginx: 0, marginy: 0 });
    g.setDefaultEdgeLabel(function () { return {}; });
    nodes.forEach(function (n) {
      var label = labelOf(n);
      g.setNode(n.id, { width: Math.max(120, label.length * 7 + 16), height: 36, label: label, data: n });
    });
    edges.forEach(function (e) { g.setEdge(e.cause, e.effect, { kind: e.kind }); });
    dagre.layout(g);
    var full = bounds(g);

    var svg = el("svg", { "class": "causal-graph", width: "100%", height: "100%", preserveAspectRatio: "xMidYMid meet" });
    var defs = el("defs", {});
    var marker = el("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 8, markerHeight: 8, orient: "auto" });
    marker.appendChild(el("path", { d: "M0,0 L10,5 L0,10 z" }));
    defs.appendChild(marker);
    svg.appendChild(defs);
    g.edges().forEach(function (e) {
      var pts = g.edge(e).points;
      var d = "M" + pts.map(function (p) { return p.x + "," + p.y; }).join(" L");
      svg.appendChild(el("path", { d: d, "class": "edge edge-" + g.edge(e).kind, "data-cause": e.v, "data-effect": e.w, "marker-end": "url(#arrow)" }));
    });
    var root = null;
    g.nodes().forEach(function (id) {
      var n = g.node(id);
      var grp = el("g", { "class": "node state-" + n.data.state + (id === data.root ? " root" : ""), "data-id": id, transform: "translate(" + (n.x - n.width / 2) + "," + (n.y - n.height / 2) + ")" });
      if (id === data.root) root = n;
      var title = el("title", {});
      title.textContent = id + " (" + n.data.state + ")"; // the exact ID on hover
      grp.appendChild(title);
      var target = grp;
      // A missing position links too: its page lists the claims on it, and
      // in a group of observers sends the reader to the shard reading it.
      if (n.data.state === "record" || n.data.state === "marker" || n.data.state === "missing") {
        target = el("a", { href: "/record/" + (n.data.link || id) });
        grp.appendChild(target);
      }
      target.appendChild(el("rect", { width: n.width, height: n.height, rx: 4 }));
      var t = el("text", { x: 8, y: 22 });
      t.textContent = n.label;
      target.appendChild(t);
      svg.appendChild(grp);
    });
    host.appendChild(svg);

    // The view is a box in drawing coordinates; the SVG scales it to fit.
    var view = { x: full.x, y: full.y, w: full.w, h: full.h };
    function show() { svg.setAttribute("viewBox", view.x + " " + view.y + " " + view.w + " " + view.h); }
    function fit() { view = { x: full.x, y: full.y, w: full.w, h: full.h }; show(); }
    function zoom(factor, cx, cy) {
      var w = Math.min(Math.max(view.w * factor, 60), full.w * 4);
      var f = w / view.w;
      view = { x: cx - (cx - view.x) * f, y: cy - (cy - view.y) * f, w: view.w * f, h: view.h * f };
      show();
    }
    // centre shows the root record at full size in the middle of the box:
    // the fitted view of a large graph is whole but small.
    function centre() {
      if (!root) return;
      var r = svg.getBoundingClientRect();
      var w = Math.max(r.width, 1), h = Math.max(r.height, 1);
      view = { x: root.x - w / 2, y: root.y - h / 2, w: w, h: h };
      show();
    }
    // toDrawing maps a mouse position to drawing coordinates.
    function toDrawing(ev) {
      var r = svg.getBoundingClientRect();
      var s = Math.max(view.w / r.width, view.h / r.height);
      var ox = (r.width * s - view.w) / 2, oy = (r.height * s - view.h) / 2;
      return { x: view.x - ox + (ev.clientX - r.left) * s, y: view.y - oy + (ev.clientY - r.top) * s, s: s };
    }
    svg.addEventListener("wheel", function (ev) {
      ev.preventDefault();
      var p = toDrawing(ev);
      zoom(ev.deltaY > 0 ? 1.2 : 1 / 1.2, p.x, p.y);
    }, { passive: false });
    var drag = null;
    svg.addEventListener("pointerdown", function (ev) {
      if (ev.target.closest && ev.target.closest("a")) return; // let links work
      drag = { x: ev.clientX, y: ev.clientY, vx: view.x, vy: view.y, s: toDrawing(ev).s };
      svg.setPointerCapture(ev.pointerId);
      svg.classList.add("dragging");
    });
    svg.addEventListener("pointermove", function (ev) {
      if (!drag) return;
      view.x = drag.vx - (ev.clientX - drag.x) * drag.s;
      view.y = drag.vy - (ev.clientY - drag.y) * drag.s;
      show();
    });
    function endDrag() { drag = null; svg.classList.remove("dragging"); }
    svg.addEventListener("pointerup", endDrag);
    svg.addEventListener("pointercancel", endDrag);

    var bar = document.getElementById("graph-controls");
    if (bar) {
      bar.querySelector("[data-act=fit]").addEventListener("click", fit);
      bar.querySelector("[data-act=centre]").addEventListener("click", centre);
      bar.querySelector("[data-act=in]").addEventListener("click", function () { zoom(1 / 1.4, view.x + view.w / 2, view.y + view.h / 2); });
      bar.querySelector("[data-act=out]").addEventListener("click", function () { zoom(1.4, view.x + view.w / 2, view.y + view.h / 2); });
    }
    fit();
    host.setAttribute("data-drawn", "true");
  }

  document.addEventListener("DOMContentLoaded", function () {
    var host = document.getElementById("graph");
    var src = document.getElementById("graph-data");
    if (host && src) draw(host, JSON.parse(src.textContent));
  });
})();
