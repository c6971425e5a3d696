"""The report page's stylesheet and script, inlined into every report.html (no CDN, no fonts).

The script reads the JSON embedded in the page (``#report-data``): the sample rows and the
embedded trajectories. It draws one page of the sample table at a time (filter by outcome
and text, sort by a column), and shows an attempt's turns when its link is followed
(``#traj=<path>``), so a 10,000-sample report opens as fast as a small one.
"""

CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#243447;color:#fff;padding:12px 24px}
header h1{margin:0;font-size:20px} header .meta{opacity:.8;font-size:13px}
main{padding:8px 24px 48px} section{background:#fff;border:1px solid #e3e3e3;border-radius:6px;
margin:16px 0;padding:12px 16px} h2{font-size:16px;margin:4px 0 10px}
.cards{display:flex;flex-wrap:wrap;gap:12px} .card{border:1px solid #e3e3e3;border-radius:6px;
padding:8px 14px;min-width:140px} .card .v{font-size:22px;font-weight:600} .card .l{color:#666;font-size:12px}
table{border-collapse:collapse;width:100%} th,td{text-align:left;padding:3px 8px;border-bottom:1px solid #eee;
vertical-align:top} th{background:#f3f3f3;cursor:default} th.sortable{cursor:pointer}
td.num,th.num{text-align:right} .muted{color:#888} .warn{color:#b30000;font-weight:600}
.o-success{color:#1b7e3a} .o-failure{color:#c8440a} .o-infra{color:#5b4fa0} .o-unfinished{color:#888}
svg text{font-size:11px;fill:#444} svg .grid{stroke:#eee} svg .marker{stroke:#c00;stroke-dasharray:3,2}
svg .marker-label{fill:#c00} .timeline-wrap{overflow-x:auto}
.legend span{margin-right:12px;font-size:12px} .legend i{display:inline-block;width:10px;height:10px;
margin-right:4px;vertical-align:middle}
.pager{margin:8px 0;display:flex;gap:8px;align-items:center;flex-wrap:wrap}
.pager input[type=search]{min-width:220px}
details.fail{margin:4px 0} details.fail summary{cursor:pointer} .msg{font-family:ui-monospace,monospace;
font-size:12px;white-space:pre-wrap;word-break:break-word}
#traj{position:fixed;inset:4% 6%;background:#fff;border:1px solid #999;border-radius:6px;
box-shadow:0 8px 40px rgba(0,0,0,.3);overflow:auto;padding:12px 18px;display:none}
#traj.open{display:block} #traj .close{float:right} .turn{border-top:1px solid #ddd;padding:6px 0}
.turn pre{margin:2px 0 6px;white-space:pre-wrap;word-break:break-word;background:#f6f6f6;padding:6px;
font-size:12px;max-height:300px;overflow:auto} .turn img,.shots img{max-width:100%;border:1px solid #ccc}
"""

JS = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("report-data").textContent);
  var cols = data.columns, rows = data.rows, trajs = data.trajectories;
  var C = {};
  cols.forEach(function (c, i) { C[c] = i; });
  var state = {page: 0, size: 50, outcome: "", text: "", sort: null, desc: false};
  var view = rows;

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    if (attrs) Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function fmt(v, digits) {
    if (v === null || v === undefined) return "-";
    if (typeof v === "number") return String(Math.round(v * Math.pow(10, digits)) / Math.pow(10, digits));
    return String(v);
  }
  function refilter() {
    var t = state.text.toLowerCase();
    view = rows.filter(function (r) {
      if (state.outcome && r[C.outcome] !== state.outcome) return false;
      if (!t) return true;
      return (r[C.key] + " " + r[C.status] + " " + r[C.message] + " " + r[C.tags].join(" "))
        .toLowerCase().indexOf(t) >= 0;
    });
    if (state.sort !== null) {
      var i = state.sort, sign = state.desc ? -1 : 1;
      view = view.slice().sort(function (a, b) {
        var x = a[i], y = b[i];
        if (x === y) return 0;
        if (x === null || x === undefined) return 1;
        if (y === null || y === undefined) return -1;
        return (x < y ? -1 : 1) * sign;
      });
    }
    state.page = 0;
    draw();
  }
  function draw() {
    var body = document.getElementById("samples-body");
    var pages = Math.max(1, Math.ceil(view.length / state.size));
    if (state.page >= pages) state.page = pages - 1;
    var start = state.page * state.size;
    var frag = document.createDocumentFragment();
    view.slice(start, start + state.size).forEach(function (r) {
      var tr = el("tr", {"data-key": r[C.key]});
      tr.appendChild(el("td", null, r[C.key]));
      tr.appendChild(el("td", {"class": "o-" + r[C.outcome]}, r[C.status]));
      tr.appendChild(el("td", {"class": "num"}, fmt(r[C.reward], 3)));
      tr.appendChild(el("td", {"class": "num"}, fmt(r[C.turns], 0)));
      tr.appendChild(el("td", {"class": "num"}, fmt(r[C.duration_s], 2)));
      tr.appendChild(el("td", {"class": "num"}, fmt(r[C.lease_wait_s], 3)));
      tr.appendChild(el("td", null, fmt(r[C.vm])));
      tr.appendChild(el("td", null, fmt(r[C.worker])));
      var att = el("td");
      r[C.attempts].forEach(function (a) {
        var path = a[2];
        var link = el("a", {"class": "traj-link", "href": path ? "#traj=" + encodeURIComponent(path) : "#",
                            "data-traj": path || ""}, "#" + a[0] + " " + a[1]);
        att.appendChild(link);
        att.appendChild(document.createTextNode(" "));
      });
      tr.appendChild(att);
      tr.appendChild(el("td", {"class": "msg"}, r[C.message]));
      frag.appendChild(tr);
    });
    body.textContent = "";
    body.appendChild(frag);
    document.getElementById("page-info").textContent =
      "page " + (state.page + 1) + " of " + pages + " (" + view.length + " of " + rows.length + " samples)";
  }
  function showTrajectory(path) {
    var box = document.getElementById("traj"), content = document.getElementById("traj-content");
    content.textContent = "";
    content.appendChild(el("h2", null, path));
    var t = trajs[path];
    var raw = el("a", {"href": path}, "raw file");
    if (!t) {
      content.appendChild(el("p", null, "This attempt's turns are not embedded in the report (size budget, " +
                                         "or no turn was recorded); open the "));
      content.appendChild(raw);
    } else {
      content.appendChild(el("p", {"class": "muted"}, t.turns.length + " turns"));
      t.turns.forEach(function (turn) {
        var div = el("div", {"class": "turn"});
        div.appendChild(el("b", null, "turn " + (turn.turn !== undefined ? turn.turn : "?")));
        Object.keys(turn).forEach(function (k) {
          if (k === "turn") return;
          div.appendChild(el("div", {"class": "muted"}, k));
          var v = turn[k];
          div.appendChild(el("pre", {"class": "f-" + k}, typeof v === "string" ? v : JSON.stringify(v, null, 1)));
        });
        var shot = t.images.filter(function (p) { return /step_(\d+)\./.test(p) &&
          Number(/step_(\d+)\./.exec(p)[1]) === turn.turn; });
        shot.forEach(function (p) { div.appendChild(el("img", {"src": p, "alt": p, "loading": "lazy"})); });
        content.appendChild(div);
      });
      var rest = t.images.filter(function (p) { return !/step_(\d+)\./.test(p) || /step_0\./.test(p); });
      if (rest.length) {
        var shots = el("div", {"class": "shots"});
        rest.forEach(function (p) { shots.appendChild(el("div", null, p));
                                    shots.appendChild(el("img", {"src": p, "alt": p, "loading": "lazy"})); });
        content.appendChild(shots);
      }
      content.appendChild(raw);
    }
    box.classList.add("open");
  }
  function route() {
    var h = location.hash;
    if (h.indexOf("#traj=") === 0) { showTrajectory(decodeURIComponent(h.slice(6))); return; }
    document.getElementById("traj").classList.remove("open");
    if (h.indexOf("#sample=") === 0) {
      var key = decodeURIComponent(h.slice(8));
      document.getElementById("f-text").value = key;
      state.text = key; state.outcome = ""; document.getElementById("f-outcome").value = "";
      refilter();
      document.getElementById("samples-section").scrollIntoView();
    }
  }
  document.getElementById("f-outcome").addEventListener("change", function (e) {
    state.outcome = e.target.value; refilter(); });
  document.getElementById("f-text").addEventListener("input", function (e) {
    state.text = e.target.value; refilter(); });
  document.getElementById("prev").addEventListener("click", function () {
    if (state.page > 0) { state.page--; draw(); } });
  document.getElementById("next").addEventListener("click", function () {
    if ((state.page + 1) * state.size < view.length) { state.page++; draw(); } });
  document.getElementById("f-size").addEventListener("change", function (e) {
    state.size = Number(e.target.value); state.page = 0; draw(); });
  Array.prototype.forEach.call(document.querySelectorAll("th.sortable"), function (th) {
    th.addEventListener("click", function () {
      var i = C[th.getAttribute("data-col")];
      state.desc = state.sort === i ? !state.desc : false;
      state.sort = i; refilter(); });
  });
  document.getElementById("traj-close").addEventListener("click", function () {
    location.hash = ""; route(); });
  window.addEventListener("hashchange", route);
  refilter();
  route();
  document.body.setAttribute("data-ready", "1");
})();
"""
