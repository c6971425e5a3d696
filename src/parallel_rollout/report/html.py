"""``report.html``: one self-contained page per run, readable from disk with no server.

Everything is in the file: the stylesheet and script (``page_assets``), the charts as
inline SVG (``charts``), the sample rows and the embedded trajectories as JSON in a
``<script type="application/json">`` element. Only screenshots are linked, not embedded:
they are files of the run folder, next to report.html, so the page still needs no network.

``write_report(run_dir)`` is what the runner calls at the end of every run and what
``parallel-rollout report RUN_DIR`` calls on demand.
"""

from __future__ import annotations

import datetime
import json
import os
from collections import Counter
from html import escape
from pathlib import Path
from typing import Any

from . import charts, model
from .files import write_text_whole
from .page_assets import CSS, JS
from ..records import ran
from ..results import pass_at_k_scope, percentiles
from .run_data import RunData

_VM_STATES = ("booting", "idle", "leased", "resetting", "dead")
_OUTCOMES = ("success", "failure", "infra")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _num(value: Any) -> str:
    return "-" if value is None else (f"{value:g}" if isinstance(value, float) else str(value))


#: said beside an interval computed over tasks rather than samples (report/clustered.py)
CLUSTERED_NOTE = " (clustered by task: a task's samples are not independent)"


def _ci(ci: tuple[float, float] | None) -> str:
    return "" if ci is None else f"95% CI {ci[0]:.1%}–{ci[1]:.1%}"


def _card(metric: str, value: Any, shown: str, label: str, note: str = "") -> str:
    raw = "" if value is None else json.dumps(value)
    return (f'<div class="card"><div class="v" data-metric="{metric}" data-value="{escape(raw)}">{escape(shown)}</div>'
            f'<div class="l">{escape(label)}</div><div class="l">{escape(note)}</div></div>')


def _headline_html(head: dict[str, Any]) -> str:
    rate_card = _card("success_rate", head.get("success_rate"), _pct(head.get("success_rate")), "success rate",
                      _ci(head.get("success_ci")) + (CLUSTERED_NOTE if head.get("ci_by_task") else ""))
    if head.get("ungraded"):
        # samples lost to infrastructure are no score of the model's: the graded rate, and them
        graded = head.get("success_rate_graded")
        rate_card = _card("success_rate_graded", graded, _pct(graded), "success rate of the graded samples",
                          f"{head['ungraded']} never graded (infrastructure failures)")
    cards = [
        rate_card,
        _card("mean_reward", head.get("mean_reward"), _num(head.get("mean_reward")),
              "mean reward of the graded samples" if head.get("ungraded") else "mean reward"),
        _card("finished", head.get("finished"), f"{head.get('finished')}/{head.get('total_samples')}",
              "samples finished", f"{head.get('successes')} succeeded"),
        _card("attempts", head.get("attempts"), _num(head.get("attempts")), "attempts",
              f"{head.get('retried_attempts')} retried"
              + (f", {head['attempts_left_to_resume']} left to a resume" if head.get("attempts_left_to_resume") else "")),
    ]
    covered, tasks = head["pass_at_k_cover"]
    for name, value in head["pass_at_k"].items():
        cards.append(_card(name, value, _num(value), name,
                           f"unbiased estimator over {pass_at_k_scope(name, covered.get(name, tasks), tasks)}"))
    wall = (head.get("timing_s") or {}).get("wall")
    cards.append(_card("wall", wall, charts.fmt_s(wall) if wall is not None else "-", "wall time"))
    parts = [f'<div class="cards">{"".join(cards)}</div>']
    statuses = head.get("status_counts") or {}
    parts.append('<p>statuses: ' + (", ".join(f'<span data-status="{escape(k)}">{escape(k)} {v}</span>'
                                              for k, v in statuses.items()) or "none") + "</p>")
    ks = list(head["pass_at_k"])
    interval_note = " (clustered by task)" if head.get("ci_by_task") else ""
    for title, rows, key in (("per mode", head["per_mode"], "mode"), ("per tag", head["per_tag"], "tag")):
        if not rows:
            continue
        body = "".join(
            f'<tr data-{key}="{escape(name)}"><td>{escape(name)}</td><td class="num">{row.get("finished")}</td>'
            f'<td class="num">{_num(row.get("successes"))}</td>'
            f'<td class="num" data-value="{escape(json.dumps(row.get("success_rate")))}">{_pct(row.get("success_rate"))}</td>'
            f'<td>{_ci(row.get("ci"))}</td><td class="num">{_num(row.get("mean_reward"))}</td>'
            + "".join(f'<td class="num" data-k="{k}">{_num(row["pass_at_k"].get(k))}{_cover(k, row)}</td>' for k in ks)
            + "</tr>" for name, row in rows.items())
        parts.append(f'<h3>{title}</h3><table class="per-{key}"><tr><th>{key}</th><th class="num">finished</th>'
                     f'<th class="num">successes</th><th class="num">success rate</th><th>interval{interval_note}</th>'
                     f'<th class="num">mean reward</th>' + "".join(f'<th class="num">{k}</th>' for k in ks)
                     + f"</tr>{body}</table>")
    return "".join(parts)


def _cover(name: str, row: dict[str, Any]) -> str:
    """A table cell's note when its pass@k covers only some of the row's tasks."""
    covered, tasks = row["pass_at_k_cover"]
    count = covered.get(name, tasks)
    return "" if count == tasks else f' <span class="muted">({escape(pass_at_k_scope(name, count, tasks))})</span>'


def _failures_html(groups: list[dict[str, Any]]) -> str:
    if not groups:
        return '<p class="muted">no failed samples among the finished ones</p>'
    parts = []
    for group in groups:
        kind = "infrastructure" if group["infrastructure"] else "graded"
        items = "".join(
            f'<li><span class="num">{m["count"]}×</span> <span class="msg">{escape(m["message"])}</span> '
            + " ".join(f'<a href="#sample={escape(k)}" class="sample-link">{escape(k)}</a>' for k in m["keys"])
            + "</li>" for m in group["messages"])
        more = f'<li class="muted">{group["more_messages"]} more messages</li>' if group["more_messages"] else ""
        parts.append(f'<details class="fail" data-type="{escape(group["type"])}" open><summary>'
                     f'<b>{escape(group["type"])}</b> ({kind}): {group["count"]} samples</summary>'
                     f"<ul>{items}{more}</ul></details>")
    return "".join(parts)


def _runner_events_html(data: RunData) -> str:
    events = [e for e in data.events if e.get("event") not in (None, "vm")]
    if not events:
        return '<p class="muted">no retries, worker deaths or timeouts</p>'
    t0 = events[0].get("time") or 0
    rows = "".join(
        f'<tr><td class="num">{charts.fmt_s((e.get("time") or t0) - t0)}</td><td>{escape(str(e.get("event")))}</td>'
        f'<td>{escape(str(e.get("worker") or ""))}</td><td>{escape(str(e.get("task") or ""))}</td>'
        f'<td class="msg">{escape(str(e.get("reason") or "")[:300])}</td></tr>' for e in events[:500])
    more = f'<p class="muted">{len(events) - 500} more in events.jsonl</p>' if len(events) > 500 else ""
    return (f'<table class="runner-events"><tr><th class="num">at</th><th>event</th><th>worker</th><th>sample</th>'
            f"<th>reason</th></tr>{rows}</table>{more}")


def _timelines_html(data: RunData) -> str:
    span = model.time_span(data)
    if span is None:
        return '<p class="muted">nothing recorded yet</p>'
    t0, t1 = span
    vms = model.vm_segments(data, t1)
    workers = model.worker_segments(data)
    parts = ["<h3>VMs</h3>"]
    if vms:
        parts += [charts.legend(_VM_STATES), '<div class="timeline-wrap">',
                  charts.timeline_svg(vms, t0, t1, kind="vm"), "</div>"]
    else:
        parts.append('<p class="muted">this mode runs without VMs</p>')
    parts += ["<h3>Workers (env loops)</h3>", charts.legend(_OUTCOMES), '<div class="timeline-wrap">',
              charts.timeline_svg(workers, t0, t1, kind="worker"), "</div>"]
    return "".join(parts)


def _distributions_html(data: RunData) -> str:
    """The rollout times of the attempts that ran and the lease waits of those that got a VM,
    each figure under a histogram computed from what it plots; the attempts that never ran (a
    failed lease, an unsupported task: summary.json's times count them) are said left out."""
    timed = [r for r in data.records if isinstance(r.get("duration_s"), (int, float))]
    left_out = Counter(str(r.get("status")) for r in timed if not ran(r))
    rollouts = [r["duration_s"] for r in timed if ran(r)]
    waits = [r["lease_wait_s"] for r in data.records if isinstance(r.get("lease_wait_s"), (int, float))]
    parts = []
    for values, label, noun in ((rollouts, "rollout time", "attempts that ran"),
                                (waits, "lease wait", "attempts that got a VM")):
        stats = percentiles(values) or {}
        markers = {p: stats[p] for p in ("p50", "p90", "p99") if p in stats}
        figures = ", ".join(f"{p} {charts.fmt_s(v)}" for p, v in markers.items())
        said = f"{len(values)} {noun}" + (f"; {figures}" if figures else "")
        if noun == "attempts that ran" and left_out:
            said += (f"; {sum(left_out.values())} that never ran left out ("
                     + ", ".join(f"{status} {count}" for status, count in sorted(left_out.items())) + ")")
        parts.append(f'<div style="display:inline-block;margin-right:24px"><h3>{label}</h3>'
                     f'{charts.histogram_svg(values, label=label, markers=markers)}'
                     f'<div class="muted" data-counted="{len(values)}">{escape(said)}</div></div>')
    return "".join(parts)


def _samples_html() -> str:
    headers = [("key", "sample", ""), ("status", "status", ""), ("reward", "reward", "num"),
               ("turns", "turns", "num"), ("duration_s", "time (s)", "num"), ("lease_wait_s", "lease wait (s)", "num"),
               ("vm", "VM", ""), ("worker", "worker", ""), ("attempts", "attempts (trajectories)", ""),
               ("message", "failure message", "")]
    ths = "".join(f'<th class="{cls} {"sortable" if col not in ("attempts",) else ""}" data-col="{col}">{label}</th>'
                  for col, label, cls in headers)
    outcomes = "".join(f'<option value="{o}">{o}</option>' for o in (*_OUTCOMES, "unfinished"))
    return (f'<div class="pager"><select id="f-outcome"><option value="">every outcome</option>{outcomes}</select>'
            '<input type="search" id="f-text" placeholder="filter: key, status, message, tag">'
            '<button id="prev">&larr; previous</button><button id="next">next &rarr;</button>'
            '<select id="f-size"><option>50</option><option>200</option><option>1000</option></select>'
            '<span id="page-info"></span></div>'
            f'<table id="samples"><thead><tr>{ths}</tr></thead><tbody id="samples-body"></tbody></table>')


def render(data: RunData, images_at: str = "") -> str:
    """The whole page of a run, as one string; ``images_at``: the run folder as the page's
    folder reaches it (its screenshots are linked, relative to it: "" beside them)."""
    head = model.headline(data)
    columns, rows = model.sample_rows(data)
    trajectories = model.trajectories(data)
    if images_at:
        for shown in trajectories.values():
            shown["images"] = [f"{images_at}/{image}" for image in shown["images"]]
    payload = {"columns": columns, "rows": rows, "trajectories": trajectories}
    # "</" would end the script element early; "<\/" means the same in JSON strings
    blob = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), default=str)
    blob = blob.replace("</", "<\\/").replace("<!--", "<\\u0021--")
    started = data.started_at
    when = datetime.datetime.fromtimestamp(started).strftime("%Y-%m-%d %H:%M:%S") if started else "-"
    cfg = data.config
    meta = " · ".join(escape(str(x)) for x in (
        f"mode {data.mode}", f"agent {cfg.get('agent', '-')}", f"provider {cfg.get('provider_name', '-')}",
        f"data {os.path.basename(str(cfg.get('data') or '-'))}", f"started {when}", f"status {data.status()}"))
    reason = ((data.fitting_summary or {}).get("stopped") or {}).get("reason")
    stopped = f'<p id="stopped" class="warn">stopped before its end: {escape(reason)}</p>' if reason else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>run {escape(data.run_id)} · parallel-rollout report</title>
<style>{CSS}</style></head>
<body>
<header><h1>run <span id="run-id">{escape(data.run_id)}</span></h1><div class="meta">{meta}</div>{stopped}</header>
<main>
<section id="headline"><h2>Headline</h2>{_headline_html(head)}</section>
<section id="failures"><h2>Failures by type</h2>{_failures_html(model.failure_groups(data))}</section>
<section id="timelines"><h2>Timelines</h2>{_timelines_html(data)}</section>
<section id="distributions"><h2>Distributions</h2>{_distributions_html(data)}</section>
<section id="samples-section"><h2>Samples</h2>{_samples_html()}</section>
<section id="events"><h2>Runner events</h2>{_runner_events_html(data)}</section>
</main>
<div id="traj"><button class="close" id="traj-close">close</button><div id="traj-content"></div></div>
<script type="application/json" id="report-data">{blob}</script>
<script>{JS}</script>
</body></html>
"""


def write_report(run: RunData | str | Path, output: str | Path | None = None) -> Path:
    """Write ``report.html`` of a run (folder) into its folder, or to ``output`` (its folders
    made as needed); whole or not at all: CannotWrite (a ConfigError) naming the path."""
    data = run if isinstance(run, RunData) else RunData.load(run)
    path = Path(output) if output is not None else data.run_dir / "report.html"
    # the screenshots stay in the run folder: a page written elsewhere links them from there
    images_at = os.path.relpath(data.run_dir.resolve(), path.parent.resolve())
    return write_text_whole(path, render(data, "" if images_at == "." else Path(images_at).as_posix()))
