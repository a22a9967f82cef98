// The kernel-free attention explorer: the browser side of attn_core.teach.viz.AttentionExplorer.
// Python embeds the data (scores, tokens, masks, constants) as JSON next to this script and
// replaces __UID__ with the explorer's id; this code builds the controls and redraws the map
// on every input, with no kernel.
(function () {
  var root = document.getElementById("__UID__");
  if (!root || root.getAttribute("data-ready")) return;
  root.setAttribute("data-ready", "1");
  var d = JSON.parse(root.querySelector(".attnx-data").textContent);
  var L = d.shape[0], H = d.shape[1], TQ = d.shape[2], TK = d.shape[3];
  var st = {layer: 0, head: 0, query: Math.min(d.query, TQ - 1), tau: 1.0, log: d.log, masks: {}};
  Object.keys(d.masks).forEach(function (m) { st.masks[m] = true; });
  var controls = root.querySelector(".attnx-controls"), view = root.querySelector(".attnx-view");
  var fb = root.querySelector(".attnx-fallback");
  if (fb) fb.style.display = "none";
  controls.style.display = "flex"; controls.style.flexWrap = "wrap"; controls.style.gap = "4px 16px";
  view.style.display = "block"; view.style.overflowX = "auto"; view.style.maxWidth = "100%";
  var LOG_MIN = Math.log10(d.logFloor);  // the log scale spans [logFloor, 1]
  function esc(s) { return String(s).replace(/[&<>"]/g, function (c) { return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]; }); }
  function slider(name, label, min, max, step, value, fmt) {
    var wrap = document.createElement("label");
    wrap.innerHTML = esc(label) + ' <input type="range" data-control="' + name + '" min="' + min + '" max="' + max +
      '" step="' + step + '" value="' + value + '" aria-label="' + esc(label) + '"> <output></output>';
    var input = wrap.querySelector("input"), out = wrap.querySelector("output");
    function sync() { out.textContent = fmt(parseFloat(input.value)); }
    input.addEventListener("input", function () { sync(); update(name, parseFloat(input.value)); });
    sync(); controls.appendChild(wrap);
  }
  function checkbox(name, label, checked) {
    var wrap = document.createElement("label");
    wrap.innerHTML = '<input type="checkbox" data-control="' + esc(name) + '"' + (checked ? " checked" : "") + "> " + esc(label);
    var input = wrap.querySelector("input");
    input.addEventListener("change", function () { update(name, input.checked); });
    controls.appendChild(wrap);
  }
  if (L > 1) slider("layer", d.layerLabel, 0, L - 1, 1, 0, function (v) { return d.layers[v]; });
  if (H > 1) slider("head", "head", 0, H - 1, 1, 0, function (v) { return v; });
  slider("query", d.rowLabel, 0, TQ - 1, 1, st.query, function (v) { return d.q[v]; });
  if (d.temperature) slider("tau", "temperature", -1, 1, 0.05, 0, function (v) { return Math.pow(10, v).toFixed(2); });
  Object.keys(d.masks).forEach(function (m) { checkbox("mask:" + m, m + " mask", true); });
  checkbox("log", "log scale", d.log);
  function update(name, value) {
    if (name === "tau") st.tau = Math.pow(10, value);
    else if (name === "log") st.log = value;
    else if (name.indexOf("mask:") === 0) st.masks[name.slice(5)] = value;
    else st[name] = value;
    draw();
  }
  function weights() {
    var base = (st.layer * H + st.head) * TQ * TK, w = new Array(TQ * TK), blocked = new Array(TQ * TK);
    for (var i = 0; i < TQ; i++) {
      var mx = -Infinity, row = i * TK;
      for (var j = 0; j < TK; j++) {
        var s = d.scores[base + row + j], off = s === null;
        Object.keys(st.masks).forEach(function (m) { if (st.masks[m] && !d.masks[m][row + j]) off = true; });
        blocked[row + j] = off;
        w[row + j] = off ? -Infinity : s / st.tau;
        if (w[row + j] > mx) mx = w[row + j];
      }
      var sum = 0;
      for (j = 0; j < TK; j++) { w[row + j] = mx === -Infinity ? 0 : Math.exp(w[row + j] - mx); sum += w[row + j]; }
      for (j = 0; j < TK; j++) w[row + j] = sum > 0 ? w[row + j] / sum : 0;
    }
    return {w: w, blocked: blocked};
  }
  // Room for the longest label at font size fs, measured in the font the pictures use (where a
  // canvas cannot measure it: d.charPx pixels a character at 12 px). A label wider than its room
  // would be cut off at the picture's left edge.
  var ruler = document.createElement("canvas").getContext && document.createElement("canvas").getContext("2d");
  function labelWidth(labels, fs) {
    var px = labels.map(function (t) {
      if (!ruler) return d.charPx * String(t).length * fs / 12;
      ruler.font = "bold " + fs + "px sans-serif";  // bold: the highlighted query's label
      return ruler.measureText(String(t)).width;
    });
    return Math.ceil(Math.max.apply(null, px)) + 10;
  }
  function color(v) {
    var t = st.log ? (Math.log10(Math.max(v, d.logFloor)) - LOG_MIN) / -LOG_MIN : v;
    t = Math.max(0, Math.min(1, t));
    return d.lut[Math.round(t * (d.lut.length - 1))];
  }
  // The map fits the width of the page's column. A short map grows (cells up to CELL_MAX) into
  // the room beside the bar chart; when cells of CELL_FIT would not fit there, the bar chart
  // wraps below and the map takes the column's width; a long map gets smaller cells (down to
  // CELL_MIN), and only below CELL_MIN does the view scroll sideways. Labels shrink with the
  // cells (never under 9 px) and, where a cell is narrower than a label, only every n-th is
  // written (the highlighted query's always; every cell's title names its pair).
  var CELL_MAX = 40, CELL_FIT = 22, CELL_MIN = 8, AXIS = 18, GAP = 16, BAR_W = 180;
  function cellsIn(width, fs) { return Math.floor((width - AXIS - labelWidth(d.q, fs) - 12) / TK); }
  function layout() {
    var avail = root.clientWidth;  // 0 while the page has not laid the explorer out yet
    var c = CELL_FIT;
    if (avail > 0) {
      c = cellsIn(avail - (labelWidth(d.k, 12) + BAR_W + 50) - GAP, 12);  // beside the bar chart
      if (c < CELL_FIT) c = cellsIn(avail, 12);  // above it
      if (c < CELL_FIT) c = cellsIn(avail, Math.max(9, Math.min(12, c - 1)));  // smaller labels, more room
      c = Math.max(CELL_MIN, Math.min(CELL_MAX, c));
    }
    var fs = Math.max(9, Math.min(12, c - 1));
    return {c: c, fs: fs, every: Math.ceil((fs + 1) / c), width: avail};
  }
  // Blocked cells are hatched grey, as in the static picture: masked, not a weight of zero.
  function hatch(id) {
    return '<defs><pattern id="' + id + '" patternUnits="userSpaceOnUse" width="6" height="6" ' +
      'patternTransform="rotate(45)"><rect width="6" height="6" fill="#d9d9d9"/>' +
      '<line x1="0" y1="0" x2="0" y2="6" stroke="#9a9a9a" stroke-width="1.5"/></pattern></defs>';
  }
  // The colour scale under the map: the colour map's range ([0, 1], or [logFloor, 1] on the log
  // scale, below which every weight takes the first colour) and, when a cell is blocked, the hatch.
  function legend(anyBlocked) {
    var n = d.lut.length, gx = 20, gw = 192, ticks = [], s = [];  // gx: room for the first tick's label
    if (st.log) for (var e = LOG_MIN; e <= 0; e++) ticks.push([(e - LOG_MIN) / -LOG_MIN, String(Math.pow(10, e))]);
    else ticks = [[0, "0"], [0.5, "0.5"], [1, "1"]];
    s.push('<svg xmlns="http://www.w3.org/2000/svg" class="attnx-legend" width="' + (gx + gw + (anyBlocked ? 170 : 30)) +
      '" height="50" font-size="11" font-family="sans-serif" style="display:block;margin-top:4px">' + hatch(root.id + "-hatch-legend"));
    s.push('<text class="attnx-scale-title" x="0" y="12" font-size="12">' + esc(d.scaleTitle + (st.log ? " (log scale)" : "")) + "</text>");
    for (var i = 0; i < n; i++) {
      s.push('<rect x="' + (gx + i * gw / n).toFixed(2) + '" y="18" width="' + (gw / n + 0.5).toFixed(2) + '" height="10" fill="' + d.lut[i] + '"/>');
    }
    ticks.forEach(function (t) {
      var x = gx + t[0] * gw;
      s.push('<line x1="' + x + '" y1="28" x2="' + x + '" y2="32" stroke="#333"/><text data-scale-tick="' + t[1] + '" x="' + x +
        '" y="44" text-anchor="middle">' + (st.log && t[0] === 0 ? "\u2264" : "") + t[1] + "</text>");
    });
    if (anyBlocked) {
      s.push('<rect class="attnx-blocked-key" x="' + (gx + gw + 26) + '" y="16" width="14" height="14" fill="url(#' + root.id +
        '-hatch-legend)" stroke="#9a9a9a"/><text x="' + (gx + gw + 46) + '" y="27">blocked (masked)</text>');
    }
    return s.join("") + "</svg>";
  }
  function shown(i, every, keep) {
    if (i === keep) return true;
    return i % every === 0 && Math.abs(i - keep) >= every;
  }
  var drawnWidth = -1;
  function draw() {
    var g = layout(), c = g.c, fs = g.fs, every = g.every;
    drawnWidth = g.width;
    var r = weights(), lw = AXIS + labelWidth(d.q, fs), klw = labelWidth(d.k, fs), top = AXIS + klw + 4;
    // A title wider than the columns starts at their left edge instead of centring on them.
    var titleW = d.charPx * d.colTitle.length, narrow = titleW > TK * c;
    var W = Math.max(lw + TK * c, narrow ? lw + titleW : 0) + 10, Hh = top + TQ * c + 10, s = [];
    // flex:none: a flex row must not squeeze the picture (that clips it); the view scrolls instead.
    s.push('<svg xmlns="http://www.w3.org/2000/svg" width="' + W + '" height="' + Hh + '" font-size="' + fs +
      '" font-family="sans-serif" style="flex:none" data-cell-size="' + c + '">' + hatch(root.id + "-hatch"));
    // Axis titles: what the columns and the rows are.
    s.push('<text class="attnx-col-title" x="' + (narrow ? lw : lw + TK * c / 2) + '" y="13" font-size="12" text-anchor="' +
      (narrow ? "start" : "middle") + '">' + esc(d.colTitle) + "</text>");
    s.push('<text class="attnx-row-title" font-size="12" text-anchor="middle" transform="translate(13,' +
      (top + TQ * c / 2) + ') rotate(-90)">' + esc(d.rowTitle) + "</text>");
    for (var j = 0; j < TK; j++) {
      if (!shown(j, every, -every)) continue;
      var x = lw + j * c + c / 2;
      s.push('<text data-col-label="' + j + '" transform="translate(' + (x + fs / 3) + ',' + (top - 6) +
        ') rotate(-90)">' + esc(d.k[j]) + "</text>");
    }
    for (var i = 0; i < TQ; i++) {
      if (shown(i, every, st.query)) {
        s.push('<text data-row-label="' + i + '" x="' + (lw - 6) + '" y="' + (top + i * c + c / 2 + fs / 3) +
          '" text-anchor="end"' + (i === st.query ? ' font-weight="bold"' : "") + ">" + esc(d.q[i]) + "</text>");
      }
      for (j = 0; j < TK; j++) {
        var k = i * TK + j, v = r.w[k];
        var fill = r.blocked[k] ? "url(#" + root.id + "-hatch)" : color(v);
        s.push('<rect data-cell="' + i + "," + j + '" x="' + (lw + j * c) + '" y="' + (top + i * c) + '" width="' + c +
          '" height="' + c + '" fill="' + fill + '"><title>' + esc(d.q[i]) + " \u2192 " + esc(d.k[j]) + ": " +
          (r.blocked[k] ? "blocked (masked)" : v.toFixed(3)) + "</title></rect>");
      }
    }
    s.push('<rect x="' + lw + '" y="' + (top + st.query * c) + '" width="' + TK * c + '" height="' + c +
      '" fill="none" stroke="#e4572e" stroke-width="2.5"/></svg>');
    // The bar chart is labelled by keys (klw), which may be longer than the query labels; its
    // rows shrink with the map's cells (12 to 18 px).
    var bh = Math.max(12, Math.min(18, c)), bfs = Math.min(12, bh - 2), bklw = labelWidth(d.k, bfs), bw = BAR_W;
    var b = ['<svg xmlns="http://www.w3.org/2000/svg" class="attnx-bars" width="' + (bklw + bw + 50) + '" height="' + (TK * bh + 30) +
      '" font-size="' + bfs + '" font-family="sans-serif" style="flex:none"><text x="0" y="12" font-size="12" font-weight="600">' +
      esc(d.barTitle[0] + d.q[st.query] + d.barTitle[1]) + "</text>"];
    for (j = 0; j < TK; j++) {
      var val = r.w[st.query * TK + j], y = 22 + j * bh;
      b.push('<text x="' + (bklw - 6) + '" y="' + (y + bh - 5) + '" text-anchor="end">' + esc(d.k[j]) + "</text>");
      b.push('<rect data-bar="' + j + '" x="' + bklw + '" y="' + y + '" width="' + (val * bw).toFixed(1) +
        '" height="' + (bh - 4) + '" fill="#3b75af"/>');
      b.push('<text x="' + (bklw + val * bw + 4) + '" y="' + (y + bh - 5) + '">' + val.toFixed(2) + "</text>");
    }
    b.push("</svg>");
    // The colour scale sits under the map, in its flex item, so that it stays beside the map
    // when the bar chart wraps below.
    view.innerHTML = '<div style="display:flex;flex-wrap:wrap;gap:' + GAP + 'px;align-items:flex-start">' +
      '<div style="flex:none">' + s.join("") + legend(r.blocked.indexOf(true) >= 0) + "</div>" + b.join("") + "</div>";
    var masks = Object.keys(st.masks).filter(function (m) { return st.masks[m]; }).join("+") || "none";
    root.setAttribute("data-state", "layer=" + st.layer + " head=" + st.head + " query=" + st.query +
      " tau=" + st.tau.toFixed(2) + " masks=" + masks + " log=" + st.log);
  }
  // Redraw when the column's width changes (a resized window; a notebook that lays the output
  // out after this script ran, when clientWidth was still 0).
  function refit() { if (root.clientWidth !== drawnWidth) draw(); }
  if (typeof ResizeObserver !== "undefined") new ResizeObserver(refit).observe(root);
  else window.addEventListener("resize", refit);
  draw();
})();
