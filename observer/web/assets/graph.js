// Draws a causal graph (ancestry and descendants of one record) as SVG.
// Layout is computed by dagre (assets/dagre.min.js, MIT licence, see
// dagre.LICENSE); this file only turns dagre's positions into SVG
// elements. Each node is a <g class="node" data-id="COORD"> linking to its
// record page; each edge a <path class="edge" data-cause data-effect>.
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  function el(name, attrs) {
    var e = document.createElementNS(SVG, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    return e;
  }
  function draw(host, data) {
    var g = new dagre.graphlib.Graph();
    g.setGraph({ rankdir: "LR", nodesep: 18, ranksep: 60, marginx: 10, marginy: 10 });
    g.setDefaultEdgeLabel(function () { return {}; });
    data.nodes.forEach(function (n) {
      // "orders/0@12" when the topic name is known, else the ID's head.
      var m = /^([0-9a-f-]{36})(\/.*)$/.exec(n.id);
      var label = m ? (n.topic || m[1].slice(0, 8) + "…") + m[2] : n.id;
      if (n.state !== "record") label += " (" + n.state + ")";
      g.setNode(n.id, { width: Math.max(120, label.length * 7 + 16), height: 36, label: label, data: n });
    });
    data.edges.forEach(function (e) { g.setEdge(e.cause, e.effect, { kind: e.kind }); });
    dagre.layout(g);
    var gg = g.graph();
    var svg = el("svg", { width: gg.width, height: gg.height, viewBox: "0 0 " + gg.width + " " + gg.height, "class": "causal-graph" });
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
    g.nodes().forEach(function (id) {
      var n = g.node(id);
      var grp = el("g", { "class": "node state-" + n.data.state + (id === data.root ? " root" : ""), "data-id": id, transform: "translate(" + (n.x - n.width / 2) + "," + (n.y - n.height / 2) + ")" });
      var title = el("title", {});
      title.textContent = id + " (" + n.data.state + ")";
      grp.appendChild(title);
      var target = grp;
      if (n.data.state === "record" || n.data.state === "marker") {
        target = el("a", { href: "/record/" + id });
        grp.appendChild(target);
      }
      target.appendChild(el("rect", { width: n.width, height: n.height, rx: 4 }));
      var t = el("text", { x: 8, y: 22 });
      t.textContent = n.label;
      target.appendChild(t);
      svg.appendChild(grp);
    });
    host.appendChild(svg);
    host.setAttribute("data-drawn", "true");
  }
  document.addEventListener("DOMContentLoaded", function () {
    var host = document.getElementById("graph");
    var src = document.getElementById("graph-data");
    if (host && src) draw(host, JSON.parse(src.textContent));
  });
})();
