// The kernel-free attention explorer: the browser side of attn_core.viz.AttentionExplorer.
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
  view.style.display = "block";
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
  if (L > 1) slider("layer", "layer", 0, L - 1, 1, 0, function (v) { return d.layers[v]; });
  if (H > 1) slider("head", "head", 0, H - 1, 1, 0, function (v) { return v; });
  slider("query", "query", 0, TQ - 1, 1, st.query, function (v) { return d.q[v]; });
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
  // Room for the longest label: d.charPx pixels a character at 12 px, plus a margin.
  function labelWidth(labels) {
    return d.charPx * Math.max.apply(null, labels.map(function (t) { return String(t).length; })) + 10;
  }
  function color(v) {
    var t = st.log ? (Math.log10(Math.max(v, d.logFloor)) - LOG_MIN) / -LOG_MIN : v;
    t = Math.max(0, Math.min(1, t));
    return d.lut[Math.round(t * (d.lut.length - 1))];
  }
  function draw() {
    var r = weights(), c = 22, lw = labelWidth(d.q), klw = labelWidth(d.k), top = klw + 4;
    var W = lw + TK * c + 10, Hh = top + TQ * c + 10, s = [];
    s.push('<svg xmlns="http://www.w3.org/2000/svg" width="' + W + '" height="' + Hh + '" font-size="12" font-family="sans-serif">');
    for (var j = 0; j < TK; j++) {
      var x = lw + j * c + c / 2;
      s.push('<text transform="translate(' + (x + 4) + ',' + (top - 6) + ') rotate(-90)">' + esc(d.k[j]) + "</text>");
    }
    for (var i = 0; i < TQ; i++) {
      s.push('<text x="' + (lw - 6) + '" y="' + (top + i * c + c / 2 + 4) + '" text-anchor="end"' +
        (i === st.query ? ' font-weight="bold"' : "") + ">" + esc(d.q[i]) + "</text>");
      for (j = 0; j < TK; j++) {
        var k = i * TK + j, v = r.w[k];
        var fill = r.blocked[k] ? "#d9d9d9" : color(v);
        s.push('<rect data-cell="' + i + "," + j + '" x="' + (lw + j * c) + '" y="' + (top + i * c) + '" width="' + c +
          '" height="' + c + '" fill="' + fill + '"><title>' + esc(d.q[i]) + " \u2192 " + esc(d.k[j]) + ": " +
          (r.blocked[k] ? "masked" : v.toFixed(3)) + "</title></rect>");
      }
    }
    s.push('<rect x="' + lw + '" y="' + (top + st.query * c) + '" width="' + TK * c + '" height="' + c +
      '" fill="none" stroke="#e4572e" stroke-width="2.5"/></svg>');
    // The bar chart is labelled by keys (klw), which may be longer than the query labels.
    var bw = 180, b = ['<svg xmlns="http://www.w3.org/2000/svg" width="' + (klw + bw + 50) + '" height="' + (TK * 18 + 30) +
      '" font-size="12" font-family="sans-serif"><text x="0" y="12" font-weight="600">query \u201c' + esc(d.q[st.query]) + '\u201d attends to</text>'];
    for (j = 0; j < TK; j++) {
      var val = r.w[st.query * TK + j], y = 22 + j * 18;
      b.push('<text x="' + (klw - 6) + '" y="' + (y + 12) + '" text-anchor="end">' + esc(d.k[j]) + "</text>");
      b.push('<rect data-bar="' + j + '" x="' + klw + '" y="' + y + '" width="' + (val * bw).toFixed(1) + '" height="14" fill="#3b75af"/>');
      b.push('<text x="' + (klw + val * bw + 4) + '" y="' + (y + 12) + '">' + val.toFixed(2) + "</text>");
    }
    b.push("</svg>");
    view.innerHTML = '<div style="display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start">' + s.join("") + b.join("") + "</div>";
    var masks = Object.keys(st.masks).filter(function (m) { return st.masks[m]; }).join("+") || "none";
    root.setAttribute("data-state", "layer=" + st.layer + " head=" + st.head + " query=" + st.query +
      " tau=" + st.tau.toFixed(2) + " masks=" + masks + " log=" + st.log);
  }
  draw();
})();
