"""``compare`` written out: the comparison of two runs as text and as one self-contained page.

``write_compared`` is what ``parallel-rollout compare RUN_A RUN_B`` and ``run
--compare-to`` both call: it writes ``compare-<A>.txt`` and ``compare-<A>.html`` into run
B's folder (or where asked). The page links each flipped sample to its row in either run's
report.html, by a path relative to the page.
"""

from __future__ import annotations

import os
from html import escape
from pathlib import Path

from .compare import Comparison
from .page_assets import CSS
from .files import write_text_whole
from .run_data import RunData


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _sample_links(keys: list[str], report_a: str, report_b: str) -> str:
    if not keys:
        return '<p class="muted">none</p>'
    items = "".join(
        f'<li data-key="{escape(k)}">{escape(k)}: <a href="{escape(report_a)}#sample={escape(k)}">A</a> · '
        f'<a href="{escape(report_b)}#sample={escape(k)}">B</a></li>' for k in keys)
    return f"<ul>{items}</ul>"


def render_comparison(c: Comparison, report_a: str, report_b: str) -> str:
    """The comparison page; ``report_a``/``report_b`` are the runs' report.html, relative to it."""
    scope = (f"{c.shared} samples in both runs" if c.same_samples else
             f"<b>{escape('; '.join(c.differences()))}</b>: compared on the intersection of {c.shared} samples "
             f"({c.only_a} only in A, {c.only_b} only in B)")
    if c.ungraded:
        scope += f"; {c.ungraded} shared samples left out: never graded in A or B (no score, so no 0 either)"

    if c.clustered:
        scope += f"; the tests pair its {c.tasks} tasks (a task's samples are not independent)"
    pass_fail_note, reward_note = c.test_notes()
    sa, sb = c.speed_a, c.speed_b
    rows = [
        ("success rate", _pct(c.success_rate_a), _pct(c.success_rate_b), pass_fail_note, "success_rate"),
        ("mean reward", _num(c.mean_reward_a), _num(c.mean_reward_b), reward_note, "mean_reward"),
        ("rollout time p50", _num(sa.get("rollout_p50_s")), _num(sb.get("rollout_p50_s")), "seconds", "rollout_p50"),
        ("rollout time mean", _num(sa.get("rollout_mean_s")), _num(sb.get("rollout_mean_s")), "seconds",
         "rollout_mean"),
        ("wall time", _num(sa.get("wall_s")), _num(sb.get("wall_s")), "seconds", "wall"),
    ]
    table = "".join(f'<tr data-metric="{m}"><td>{label}</td><td class="num">{a}</td><td class="num">{b}</td>'
                    f"<td>{escape(note)}</td></tr>" for label, a, b, note, m in rows)
    new_types = ("".join(f"<li>{escape(t)}: {n}</li>" for t, n in c.new_failure_types.items())
                 if c.new_failure_types else '<li class="muted">none</li>')
    banner = ('<p class="o-failure"><b>B regressed significantly.</b></p>' if c.regressed else "")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>compare {escape(c.run_a)} → {escape(c.run_b)}</title>
<style>{CSS}</style></head><body>
<header><h1>compare {escape(c.run_a)} (A) → {escape(c.run_b)} (B)</h1><div class="meta">{scope}</div></header>
<main>
<section id="numbers"><h2>Numbers</h2>{banner}<table><tr><th>metric</th><th class="num">A</th><th class="num">B</th>
<th>test</th></tr>{table}</table></section>
<section id="pass-to-fail"><h2>pass → fail ({len(c.pass_to_fail)})</h2>
{_sample_links(c.pass_to_fail, report_a, report_b)}</section>
<section id="fail-to-pass"><h2>fail → pass ({len(c.fail_to_pass)})</h2>
{_sample_links(c.fail_to_pass, report_a, report_b)}</section>
<section id="new-failures"><h2>Failure types new in B</h2><ul>{new_types}</ul></section>
</main></body></html>
"""


def write_compared(comparison: Comparison, text: str, a: RunData, b: RunData,
                   html_path: str | Path | None = None) -> Path:
    """Write the text and the page of ``comparison`` (A's run to B's; default: into B's
    folder); CannotWrite where they cannot be written. Returns the page's path."""
    html_path = Path(html_path) if html_path is not None else b.run_dir / f"compare-{a.run_id}.html"
    where = html_path.parent.resolve()
    report_a = os.path.relpath(a.run_dir.resolve() / "report.html", where)
    report_b = os.path.relpath(b.run_dir.resolve() / "report.html", where)
    write_text_whole(html_path.with_suffix(".txt"), text + "\n")
    write_text_whole(html_path, render_comparison(comparison, report_a, report_b))
    return html_path
