"""The service's read-only status page, served at ``GET /`` (issue 13).

One self-contained HTML document: inline CSS and vanilla JS, no external assets, so it
works on a host without internet access. Its script polls ``api/v1/status`` (relative,
same origin: the ``autoscaler_token`` cookie set by ``/login`` goes along) once a second
and redraws the header (service), the jobs table, and for each running or recently ended
job two small SVG charts over its ``history`` (tasks done, spend against the budget; the
deadline as a vertical line) and its machines. Every string from the API is HTML-escaped
(job names are user input). A failed fetch shows ``#error`` and keeps the last data.

Elements a test can query: ``#updated`` (time of the last good refresh, ``data-count``
refreshes so far), ``#error``, ``[data-field]`` cells in ``#service``, rows
``tr[data-job-id]`` with ``td[data-field=done|spend|finish|...]`` (``data-late`` on
``finish``), ``section[data-job-detail]`` holding ``svg[data-chart=done|spend]`` and
``table[data-machines-for]`` with rows ``tr[data-machine-id]``.
"""

from __future__ import annotations

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>autoscaler</title>
<link rel="icon" href="data:,">
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1rem 1.5rem; color: #222; }
h1 { font-size: 1.3rem; margin: 0 0 .3rem; }
h2 { font-size: 1.1rem; margin: 1.2rem 0 .4rem; }
h3 { font-size: 1rem; margin: .2rem 0; }
dl#service { display: flex; flex-wrap: wrap; gap: .2rem 1.4rem; margin: 0; }
dl#service div { display: flex; gap: .4rem; }
dt { color: #666; } dd { margin: 0; font-weight: 600; }
#updated { color: #666; font-size: .85rem; margin-top: .3rem; }
#error { background: #fde2e1; border: 1px solid #c0392b; color: #8e1b10;
         padding: .4rem .7rem; margin: .6rem 0; }
table { border-collapse: collapse; }
th, td { text-align: left; padding: .25rem .6rem; border-bottom: 1px solid #e4e4e4;
         vertical-align: middle; }
th { color: #555; font-weight: 600; }
td[data-field=done], td[data-field=spend], td[data-field=finish] { white-space: nowrap; }
body.stale #jobs, body.stale #details { opacity: .55; }
.bar { display: inline-block; width: 90px; height: 9px; background: #eee;
       border-radius: 3px; margin-right: .4rem; vertical-align: middle; }
.bar div { height: 100%; border-radius: 3px; }
.bar.done div { background: #2e86de; } .bar.spend div { background: #27ae60; }
.bar.over div { background: #c0392b; }
.late { background: #c0392b; color: #fff; font-weight: 700; padding: 0 .35rem;
        border-radius: 3px; font-size: .8rem; }
.muted, small { color: #777; }
.state { padding: 0 .35rem; border-radius: 3px; background: #eee; }
.state-running .state { background: #d6eaf8; } .state-done .state { background: #d5f5e3; }
.state-failed .state, .state-interrupted .state { background: #fadbd8; }
#details { display: flex; flex-wrap: wrap; gap: 1rem; }
section.job { border: 1px solid #e4e4e4; border-radius: 4px; padding: .5rem .7rem; }
.charts { display: flex; gap: .5rem; flex-wrap: wrap; align-items: flex-start; }
.machines { max-height: 130px; overflow-y: auto; }
.machines td, .machines th { padding: .1rem .5rem; font-size: .85rem; }
svg text { font-size: 10px; fill: #555; }
svg .axis { stroke: #999; } svg .budget { stroke: #27ae60; stroke-dasharray: 4 3; }
svg .deadline { stroke: #c0392b; stroke-dasharray: 4 3; }
svg polyline { fill: none; stroke-width: 2; }
tr.released { color: #999; }
</style>
</head>
<body>
<header>
<h1>autoscaler service</h1>
<dl id="service">
<div><dt>pid</dt><dd data-field="pid">…</dd></div>
<div><dt>provider</dt><dd data-field="provider">…</dd></div>
<div><dt>state dir</dt><dd data-field="state_dir">…</dd></div>
<div><dt>jobs</dt><dd data-field="jobs_by_state">…</dd></div>
<div><dt>machines alive</dt><dd data-field="machines_alive">…</dd></div>
<div><dt>spend</dt><dd data-field="spend">…</dd></div>
</dl>
<div id="updated" data-count="0">not updated yet</div>
</header>
<div id="error" role="alert" hidden></div>
<h2>Jobs</h2>
<table id="jobs">
<thead><tr><th>id</th><th>name</th><th>state</th><th>mode</th><th>tasks done</th>
<th>spend / budget</th><th>predicted finish / deadline</th><th>stop reason</th></tr></thead>
<tbody></tbody>
</table>
<h2>Running and recent jobs</h2>
<div id="details"></div>
<script>
"use strict";
const RECENT = 3;  // ended jobs that keep their charts, besides the running ones
const ESC = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"};
const esc = (v) => String(v ?? "").replace(/[&<>"']/g, (c) => ESC[c]);
const num = (v) => Number(v) || 0;

function money(v) {
  if (v === null || v === undefined) return "no budget";
  const x = num(v), a = Math.abs(x);
  return "$" + (a >= 1 || a === 0 ? x.toFixed(2) : x.toFixed(4).replace(/0{1,2}$/, ""));
}
function clock(t) {
  return new Date(num(t) * 1000).toLocaleTimeString([], {hour12: false});
}
function span(s) {
  s = Math.max(0, Math.round(s));
  const h = Math.floor(s / 3600), m = Math.floor(s % 3600 / 60), sec = s % 60;
  const p = (n) => String(n).padStart(2, "0");
  return h ? `${h}h${p(m)}m` : m ? `${m}m${p(sec)}s` : `${sec}s`;
}
function rel(t, now) {
  const d = num(t) - now;
  return d >= 0 ? `in ${span(d)}` : `${span(-d)} ago`;
}
function bar(frac, cls) {
  const p = Math.max(0, Math.min(1, num(frac))) * 100;
  return `<div class="bar ${cls}"><div style="width:${p.toFixed(1)}%"></div></div>`;
}

function jobRow(j, now) {
  // An ended job shows when it ended; a running one the plan's predicted finish.
  const ended = j.ended_at != null, at = ended ? j.ended_at : j.predicted_finish_at;
  const late = j.deadline_at != null && at != null && num(at) > num(j.deadline_at);
  let finish = at == null ? "—"
    : `${ended ? "ended " : ""}${clock(at)} <small>${rel(at, now)}</small>`;
  if (j.deadline_at != null) finish += ` / ${clock(j.deadline_at)}`;
  if (late) finish += ' <span class="late">LATE</span>';
  const tasks = num(j.tasks), done = num(j.done);
  const failed = num(j.failed) ? ` <small>${num(j.failed)} failed</small>` : "";
  const running = num(j.running) ? ` <small>${num(j.running)} running</small>` : "";
  const spend = j.budget == null ? ""
    : bar(num(j.spend) / num(j.budget), num(j.spend) > num(j.budget) ? "over" : "spend");
  return `<tr data-job-id="${esc(j.id)}" class="state-${esc(j.state)}">
<td data-field="id">${esc(j.id)}</td><td data-field="name">${esc(j.name)}</td>
<td data-field="state"><span class="state">${esc(j.state)}</span></td>
<td data-field="mode">${esc(j.mode)}</td>
<td data-field="done" data-done="${done}" data-tasks="${tasks}">${bar(tasks ? done / tasks : 0,
  "done")}<span class="text">${done}/${tasks}</span>${running}${failed}</td>
<td data-field="spend">${spend}<span class="text">${money(j.spend)} / ${money(j.budget)}</span></td>
<td data-field="finish" data-late="${late}">${finish}</td>
<td data-field="stop_reason">${esc(j.stop_reason)}</td></tr>`;
}

// One small chart: a line over [x0, x1] x [0, yMax]; hLine and vLine optional.
function chart(kind, pts, x0, x1, yMax, yText, hLine, vLine) {
  const W = 280, H = 130, L = 46, R = 10, T = 12, B = 20;
  const X = (t) => L + (t - x0) / (x1 - x0) * (W - L - R);
  const Y = (v) => T + (1 - v / yMax) * (H - T - B);
  const f = (v) => v.toFixed(1);
  let s = `<svg data-chart="${kind}" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}">`
    + `<line class="axis" x1="${L}" y1="${T}" x2="${L}" y2="${H - B}"/>`
    + `<line class="axis" x1="${L}" y1="${H - B}" x2="${W - R}" y2="${H - B}"/>`
    + `<text x="${L - 4}" y="${T + 4}" text-anchor="end">${esc(yText)}</text>`
    + `<text x="${L - 4}" y="${H - B}" text-anchor="end">0</text>`
    + `<text x="${L}" y="${H - 6}">0s</text>`
    + `<text x="${W - R}" y="${H - 6}" text-anchor="end">${span(x1 - x0)}</text>`
    + `<text x="${(L + W - R) / 2}" y="${H - 6}" text-anchor="middle">${kind}</text>`;
  if (hLine != null) {
    s += `<line class="budget" x1="${L}" x2="${W - R}" y1="${f(Y(hLine))}" y2="${f(Y(hLine))}"/>`
      + `<text x="${L + 4}" y="${f(Y(hLine) - 3)}">budget ${money(hLine)}</text>`;
  }
  if (vLine != null) {  // its label to the right of it, or to the left near the end
    const right = X(vLine) < (L + W - R) / 2, dx = right ? 3 : -3;
    s += `<line class="deadline" x1="${f(X(vLine))}" x2="${f(X(vLine))}" y1="${T}" y2="${H - B}"/>`
      + `<text x="${f(X(vLine) + dx)}" y="${H - B - 4}"`
      + ` text-anchor="${right ? "start" : "end"}">deadline</text>`;
  }
  const line = pts.map(([t, v]) => `${f(X(t))},${f(Y(v))}`).join(" ");
  const colour = kind === "done" ? "#2e86de" : "#27ae60";
  return s + `<polyline data-series="${kind}" stroke="${colour}" points="${line}"/></svg>`;
}

function detail(j, now) {
  const h = (j.history || []).map((p) => [num(p[0]), num(p[1]), num(p[2])]);
  const x0 = j.started_at != null ? num(j.started_at) : (h.length ? h[0][0] : now);
  const last = h.length ? h[h.length - 1][0] : x0;
  const end = j.ended_at != null ? num(j.ended_at) : now;
  const x1 = Math.max(end, last, j.deadline_at != null ? num(j.deadline_at) : 0, x0 + 1);
  const budget = j.budget == null ? null : num(j.budget);
  const spendMax = Math.max(budget ?? 0, ...h.map((p) => p[2]), 1e-9) * 1.1;
  const deadline = j.deadline_at == null ? null : num(j.deadline_at);
  const tasks = Math.max(num(j.tasks), 1);
  const machines = (j.machines || []).map((m) => `<tr data-machine-id="${esc(m.id)}"
class="${esc(m.state)}"><td data-field="id">${esc(m.id)}</td>
<td data-field="type">${esc(m.type)}</td><td data-field="state">${esc(m.state)}</td></tr>`
  ).join("");
  const byState = {};
  for (const m of j.machines || []) byState[m.state] = (byState[m.state] || 0) + 1;
  const caption = Object.entries(byState).map(([k, n]) => `${n} ${esc(k)}`).join(" · ");
  return `<section class="job" data-job-detail="${esc(j.id)}">
<h3>${esc(j.id)} · ${esc(j.name)} <small>${esc(j.state)}</small></h3><div class="charts">
${chart("done", h.map((p) => [p[0], p[1]]), x0, x1, tasks, String(tasks), null, deadline)}
${chart("spend", h.map((p) => [p[0], p[2]]), x0, x1, spendMax, money(spendMax), budget, deadline)}
<div class="machines"><table data-machines-for="${esc(j.id)}"${machines ? "" : " hidden"}>
<caption class="muted">machines: ${caption}</caption><thead><tr><th>machine</th>
<th>type</th><th>state</th></tr></thead><tbody>${machines}</tbody></table>
${machines ? "" : '<div class="muted">no machines</div>'}</div></div></section>`;
}

function shown(jobs) {
  const ended = jobs.filter((j) => j.ended_at != null && (j.history || []).length)
    .sort((a, b) => num(b.ended_at) - num(a.ended_at)).slice(0, RECENT);
  return jobs.filter((j) => j.state === "running" || ended.includes(j));
}

let lastHtml = "", count = 0, lastOk = null;
function render(data) {
  const sv = data.service || {}, jobs = data.jobs || [], now = num(sv.now) || Date.now() / 1000;
  const by = Object.entries(sv.jobs_by_state || {}).filter(([, n]) => n)
    .map(([k, n]) => `${num(n)} ${esc(k)}`).join(" · ") || "none";
  const fields = {pid: esc(sv.pid), provider: esc(sv.provider), state_dir: esc(sv.state_dir),
    jobs_by_state: by, machines_alive: esc(sv.machines_alive), spend: money(sv.spend)};
  for (const [k, v] of Object.entries(fields)) {
    document.querySelector(`#service [data-field="${k}"]`).innerHTML = v;
  }
  const html = jobs.map((j) => jobRow(j, now)).join("")
    || '<tr><td colspan="8" class="muted">no jobs yet</td></tr>';
  const details = shown(jobs).map((j) => detail(j, now)).join("");
  if (html + details !== lastHtml) {
    document.querySelector("#jobs tbody").innerHTML = html;
    document.querySelector("#details").innerHTML = details;
    lastHtml = html + details;
  }
}

async function refresh() {
  const banner = document.getElementById("error"), updated = document.getElementById("updated");
  try {
    const r = await fetch("api/v1/status", {credentials: "same-origin", cache: "no-store"});
    if (!r.ok) {
      let why = r.statusText;
      try { why = (await r.json()).error || why; } catch (e) { /* not JSON */ }
      throw new Error(`HTTP ${r.status}: ${why}`);
    }
    render(await r.json());
    count += 1;
    lastOk = new Date();
    updated.textContent = `updated ${lastOk.toLocaleTimeString([], {hour12: false})}`;
    updated.dataset.count = String(count);
    banner.hidden = true;
    document.body.classList.remove("stale");
  } catch (e) {
    const since = lastOk ? `; showing data from ${lastOk.toLocaleTimeString([], {hour12: false})}`
      : "";
    banner.textContent = `status fetch failed: ${e.message}${since}`;
    banner.hidden = false;
    document.body.classList.add("stale");
  }
  setTimeout(refresh, 1000);
}
refresh();
</script>
</body>
</html>
"""


def render_page() -> str:
    """The status page (static: all data comes from the API, fetched by its script)."""
    return PAGE
