/* tessera report: draws the graph (coordinates computed by tessera.report.layout) and the memory
   timeline from the page's JSON, and opens a kernel's panel when its box is clicked. No network. */
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("report-data").textContent);
  var state = { zoom: 1, selected: null };

  function esc(s) {
    return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
  }
  function heat(share, maxShare) {
    if (share === null || share === undefined || !maxShare) return "hsl(210,20%,96%)";
    var t = Math.sqrt(share / maxShare);
    return "hsl(" + (52 - 52 * t).toFixed(0) + ",90%," + (94 - 32 * t).toFixed(0) + "%)";
  }
  function fmtBytes(n) {
    var u = ["B", "KiB", "MiB", "GiB"], i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(2) : n) + " " + u[i];
  }

  function graphSvg(g) {
    var maxShare = 0, i, b, parts = [];
    for (i = 0; i < g.boxes.length; i++) if (g.boxes[i].share > maxShare) maxShare = g.boxes[i].share;
    var W = g.width + 40, H = g.height + 40;
    parts.push('<svg id="graph-svg" xmlns="http://www.w3.org/2000/svg" width="' + W + '" height="' + H +
      '" viewBox="-20 -20 ' + W + " " + H + '"><defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" ' +
      'markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0L8,4L0,8z" fill="#8c959f"/></marker></defs>');
    for (i = 0; i < g.edges.length; i++) {
      var e = g.edges[i], p = e.pts, d = "M" + p[0][0] + "," + p[0][1];
      for (var k = 1; k < p.length; k++) d += "L" + p[k][0] + "," + p[k][1];
      parts.push('<path class="edge" d="' + d + '" marker-end="url(#arrow)"/>');
      if (e.label) {
        var m = Math.floor((p.length - 1) / 2), a = p[m], c = p[m + 1];
        parts.push('<text class="elabel" x="' + ((a[0] + c[0]) / 2 + 4).toFixed(1) + '" y="' +
          ((a[1] + c[1]) / 2 + 3).toFixed(1) + '">' + esc(e.label) + "</text>");
      }
    }
    for (i = 0; i < g.io.length; i++) {
      b = g.io[i];
      parts.push('<g class="io ' + b.kind + '" transform="translate(' + (b.x - b.w / 2) + "," + (b.y - b.h / 2) + ')">' +
        '<rect width="' + b.w + '" height="' + b.h + '" rx="11"/><text x="8" y="16">' + esc(b.text) + "</text></g>");
    }
    for (i = 0; i < g.boxes.length; i++) {
      b = g.boxes[i];
      var cls = "box" + (b.tuned ? " tuned" : "");
      var s = '<g class="' + cls + '" id="box-' + b.id + '" data-index="' + i + '" transform="translate(' +
        (b.x - b.w / 2) + "," + (b.y - b.h / 2) + ')"><title>' + esc(b.node + "\n" + b.ops.join(" \u2192 ") +
        "\nout: " + b.outputs.join(", ")) + '</title><rect width="' + b.w + '" height="' + b.h + '" rx="4" fill="' +
        heat(b.share, maxShare) + '"/><text class="title" x="8" y="20">' + esc(b.title) + "</text>";
      for (var j = 0; j < b.shown.length; j++) s += '<text x="14" y="' + (34 + 14 * j) + '">' + esc(b.shown[j]) + "</text>";
      s += '<text class="foot" x="8" y="' + (34 + 14 * b.shown.length) + '">' + esc(b.foot) + "</text></g>";
      parts.push(s);
    }
    parts.push("</svg>");
    return parts.join("");
  }

  function kernelData(kid) {
    var el = document.getElementById("kernel-" + kid);
    return el ? JSON.parse(el.textContent) : null;
  }

  function openBox(index) {
    var b = data.graph.boxes[index], panel = document.getElementById("kernel-panel");
    if (state.selected !== null) {
      var old = document.getElementById("box-" + data.graph.boxes[state.selected].id);
      if (old) old.classList.remove("selected");
    }
    state.selected = index;
    var el = document.getElementById("box-" + b.id);
    if (el) el.classList.add("selected");
    var k = b.kernel !== null ? kernelData(data.kernel_ids[b.kernel]) : null;
    var h = "<h3>" + esc(b.node) + "</h3><div class='note'>" + esc(b.ops.join(" \u2192 ")) + "</div>";
    h += "<table class='facts'><tr><td>time</td><td>" + esc(b.foot) + "</td></tr>";
    h += "<tr><td>outputs</td><td>" + esc(b.outputs.join(", ")) + "</td></tr>";
    if (k) {
      h += "<tr><td>kernel</td><td>" + esc(k.name) + " (" + esc(k.op) + ")</td></tr>";
      h += "<tr><td>schedule</td><td id='kernel-origin'>" + esc(k.origin) + "</td></tr>";
      if (k.nodes.length > 1) h += "<tr><td>shared by</td><td>" + k.nodes.length + " nodes" +
        (k.total_ms !== null ? ", " + k.total_ms.toPrecision(4) + " ms in all" : "") + ": " + esc(k.nodes.slice(0, 4).join(", ")) + (k.nodes.length > 4 ? ", ..." : "") + "</td></tr>";
    } else {
      h += "<tr><td>kernel</td><td>none (runs no generated code)</td></tr>";
    }
    h += "</table>";
    if (k) {
      var tabs = [["te", "tensor expression"], ["script", "loop program (scheduled)"], ["trace", "schedule trace"], ["c", "generated C"]];
      h += "<div class='tabs'>";
      tabs.forEach(function (t, n) {
        if (k[t[0]]) h += "<button data-tab='" + t[0] + "'" + (n === 1 ? " class='on'" : "") + ">" + t[1] + "</button>";
      });
      h += "</div><pre class='code' id='kernel-code' data-tab='script'>" + k.script + "</pre>";
    }
    panel.innerHTML = h;
    panel.classList.add("open");
    panel.scrollTop = 0;
    if (k) {
      panel.querySelectorAll(".tabs button").forEach(function (btn) {
        btn.addEventListener("click", function () {
          panel.querySelectorAll(".tabs button").forEach(function (x) { x.classList.remove("on"); });
          btn.classList.add("on");
          var code = document.getElementById("kernel-code");
          var head = btn.dataset.tab === "c" && k.c_head ? JSON.parse(document.getElementById("head-" + k.c_head).textContent) : null;
          code.innerHTML = (head ? "<details class='head'><summary>" + head.lines +
            " lines before the kernel: headers, runtime helpers, intrinsics</summary>" + head.html + "</details>" : "") +
            k[btn.dataset.tab];
          code.dataset.tab = btn.dataset.tab;
        });
      });
    }
  }

  function setZoom(z) {
    var svg = document.getElementById("graph-svg");
    if (!svg) return;
    state.zoom = Math.max(0.1, Math.min(3, z));
    svg.setAttribute("width", ((data.graph.width + 40) * state.zoom).toFixed(0));
    svg.setAttribute("height", ((data.graph.height + 40) * state.zoom).toFixed(0));
  }

  function memorySvg(m, width) {
    var n = Math.max(1, m.nodes.length), W = Math.max(600, width - 100), H = 260, L = 70, B = 22;
    var top = Math.max(1, m.arena_bytes), sx = W / n, sy = H / top, parts = [];
    parts.push('<svg id="memory-svg" xmlns="http://www.w3.org/2000/svg" width="' + (W + L + 10) + '" height="' + (H + B + 10) + '">');
    parts.push('<text class="axis" x="2" y="12">' + esc(fmtBytes(m.arena_bytes)) + '</text><text class="axis" x="2" y="' + H + '">0</text>');
    parts.push('<text class="axis" x="' + L + '" y="' + (H + 16) + '">node 0</text><text class="axis" x="' + (L + W - 60) +
      '" y="' + (H + 16) + '">node ' + (n - 1) + "</text>");
    parts.push('<rect x="' + L + '" y="0" width="' + W + '" height="' + H + '" fill="#f6f8fa"/>');
    for (var i = 0; i < m.tensors.length; i++) {
      var t = m.tensors[i], x = L + t.first * sx, w = Math.max(1, (t.last - t.first + 1) * sx);
      var y = H - (t.offset + t.bytes) * sy, h = Math.max(1, t.bytes * sy);
      parts.push('<rect class="tensor" x="' + x.toFixed(1) + '" y="' + y.toFixed(1) + '" width="' + w.toFixed(1) + '" height="' +
        h.toFixed(1) + '" fill="hsl(' + ((t.storage * 47) % 360) + ',55%,62%)"><title>%' + esc(t.name) + "\nnodes " + t.first +
        ".." + t.last + " (" + esc(m.nodes[t.first]) + " .. " + esc(m.nodes[t.last]) + ")\noffset " + t.offset + ", " +
        esc(fmtBytes(t.bytes)) + ", storage " + t.storage + "</title></rect>");
    }
    // bytes alive at each node (the tensors' sizes, unaligned): the curve the arena must cover
    var live = new Array(n).fill(0), d = "";
    m.tensors.forEach(function (t) { for (var p = t.first; p <= t.last; p++) live[p] += t.bytes; });
    for (i = 0; i < n; i++) d += (i ? "L" : "M") + (L + i * sx).toFixed(1) + "," + (H - live[i] * sy).toFixed(1) +
      "L" + (L + (i + 1) * sx).toFixed(1) + "," + (H - live[i] * sy).toFixed(1);
    parts.push('<path id="live-bytes" d="' + d + '" fill="none" stroke="#1d232a" stroke-width="1.2"><title>bytes alive at each node</title></path>');
    parts.push("</svg>");
    return parts.join("");
  }

  function draw() {
    var t0 = performance.now();
    var view = document.getElementById("graph-view");
    view.innerHTML = graphSvg(data.graph);
    view.addEventListener("click", function (ev) {
      var g = ev.target.closest ? ev.target.closest(".box") : null;
      if (g) openBox(+g.dataset.index);
    });
    view.addEventListener("wheel", function (ev) {
      if (!ev.ctrlKey) return;
      ev.preventDefault();
      setZoom(state.zoom * (ev.deltaY < 0 ? 1.1 : 1 / 1.1));
    }, { passive: false });
    document.getElementById("zoom-in").onclick = function () { setZoom(state.zoom * 1.25); };
    document.getElementById("zoom-out").onclick = function () { setZoom(state.zoom / 1.25); };
    document.getElementById("zoom-fit").onclick = function () {
      setZoom(Math.min(1, (view.clientWidth - 10) / (data.graph.width + 40)));
    };
    var find = document.getElementById("find"), found = [], at = -1;
    find.addEventListener("keydown", function (ev) {
      if (ev.key !== "Enter") return;
      var q = find.value.trim().toLowerCase();
      if (!q) return;
      if (find.dataset.query !== q) {
        found = [];
        data.graph.boxes.forEach(function (b, i) {
          if ((b.node + " " + b.title + " " + b.ops.join(" ")).toLowerCase().indexOf(q) >= 0) found.push(i);
        });
        find.dataset.query = q;
        at = -1;
      }
      document.getElementById("find-count").textContent = found.length ? "" : "no match";
      if (!found.length) return;
      at = (at + 1) % found.length;
      document.getElementById("find-count").textContent = (at + 1) + " of " + found.length;
      openBox(found[at]);
      var el = document.getElementById("box-" + data.graph.boxes[found[at]].id);
      if (el && el.scrollIntoView) el.scrollIntoView({ block: "center", inline: "center" });
    });
    document.querySelectorAll("tr.hot").forEach(function (tr) {
      tr.addEventListener("click", function () {
        openBox(+tr.dataset.index);
        var el = document.getElementById("box-" + data.graph.boxes[+tr.dataset.index].id);
        if (el && el.scrollIntoView) el.scrollIntoView({ block: "center", inline: "center" });
      });
    });
    var inserted = performance.now();
    requestAnimationFrame(function () {
      requestAnimationFrame(function () {
        var nav = performance.getEntriesByType ? performance.getEntriesByType("navigation")[0] : null;
        window.tesseraReport = {
          boxes: document.querySelectorAll("#graph-svg .box").length,
          buildMs: inserted - t0,
          drawnAt: performance.now(),
          domContentLoadedAt: nav ? nav.domContentLoadedEventStart : t0
        };
        document.body.setAttribute("data-graph-drawn", "1");
      });
    });
    var mv = document.getElementById("memory-view");
    if (mv && data.memory) mv.innerHTML = memorySvg(data.memory, mv.clientWidth);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", draw);
  else draw();
})();
