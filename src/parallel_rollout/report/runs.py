"""The runs of an output folder, one line each: what ``parallel-rollout runs list`` prints.

A run is a sub-folder holding ``config.json`` or ``results.jsonl``, named by the folder (what
``--run-id``, ``report`` and ``compare`` take: a copied folder is a run of its own name, not
a second one of the id its config.json stores). Its line comes from
``config.json`` (mode, when it was written) and ``summary.json`` (samples, success rate of
the graded samples, as the console says it)
while its results.jsonl is the one the summary counted (the size and modification time it
stamped: ``run_data.summary_fits``, the rule ``report`` and ``compare`` follow too); a run
with no summary (killed before writing one), or whose results.jsonl changed since (a resume
going on or killed, an edit), has its results.jsonl read, and such a summary counts for
nothing. Its samples are those its last session started with (config.json's
``total_samples``). Status:

* ``complete``: every sample has a final record (every sample graded);
* ``ungraded``: every sample ended, some never graded (an infrastructure failure after
  ``--max-retries``: the run exited 1, ``--resume`` runs them again);
* ``interrupted``: stopped by SIGINT/SIGTERM (``--resume`` continues it);
* ``running``: short of complete, and its folder's lock is held: a run or a resume going on now;
* ``partial``: anything else short of complete: aborted, or killed (a resume too);
* ``rl``: an RL scheduler's folder, which has no total (samples are drawn as the trainer asks);
* ``unreadable``: its results.jsonl has a corrupted line; ``problem`` names it
  (``results.jsonl:6: corrupted record …``, as ``report`` says it), the rest comes from
  config.json; or it has no results.jsonl and a config.json that does not read (``problem``:
  ``config.json: unreadable …``).
"""

from __future__ import annotations

import datetime
import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from ..errors import ConfigError
from ..results import graded
from ..run_lock import run_folder_locked
from .run_data import NotARunFolder, RunData, results_stamp, run_status, run_total, summary_fits


@dataclass(frozen=True)
class RunLine:
    """One run of an output folder."""

    run_id: str
    started: float | None
    mode: str
    finished: int | None
    total: int | None
    success_rate: float | None
    status: str
    #: why the run's files cannot be read (``results.jsonl:6: corrupted record …``), or None
    problem: str | None = None

    def to_json(self) -> dict:
        """Plain JSON, the date as ISO 8601."""
        out = asdict(self)
        out["started"] = _iso(self.started)
        return out


def _iso(moment: float | None) -> str | None:
    if moment is None:
        return None
    return datetime.datetime.fromtimestamp(moment).replace(microsecond=0).isoformat(sep=" ")


def _light(run_dir: Path) -> RunLine | None:
    """The run's line from config.json and summary.json, or None when it needs its records."""
    try:
        config = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    # the summary counted the results.jsonl it stamped: a file changed since (a resume going
    # on or killed, an edit, a corrupted line) or a summary without a stamp (an older
    # version's, which cannot say) is read from the records
    if summary_fits(summary, results_stamp(run_dir)) is not True:
        return None
    total, finished = run_total(config.get("total_samples"), summary), summary.get("finished") or 0
    return RunLine(run_id=run_dir.name, started=config.get("started_at") or config.get("written_at"),
                   mode=(config.get("config") or {}).get("mode") or "?", finished=finished, total=total,
                   success_rate=summary.get("success_rate_graded", summary.get("success_rate")),
                   status=run_status(summary, total, finished, bool(summary.get("ungraded"))))


def _stored_config(run_dir: Path) -> dict:
    """The run's config.json, or {} when it has none that reads."""
    try:
        stored = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return stored if isinstance(stored, dict) else {}


def run_line(run_dir: Path) -> RunLine:
    """The line of one run folder (NotARunFolder when it is none; a run whose results do
    not read is listed ``unreadable`` with its problem); one going on now is ``running``."""
    line = _line(run_dir)
    return replace(line, status=live_status(run_dir, line.status))


def live_status(run_dir: Path, status: str) -> str:
    """``status`` (``RunData.status``), or ``running`` for a run short of complete whose
    folder's lock is held: one going on now (a killed run's lock is let go)."""
    return "running" if status in ("interrupted", "partial") and run_folder_locked(run_dir) else status


def _line(run_dir: Path) -> RunLine:
    light = _light(run_dir)
    if light is not None:
        return light
    stored = _stored_config(run_dir)
    written = stored.get("started_at") or stored.get("written_at")  # the first session's
    try:
        data = RunData.load(run_dir, with_events=False)
    except NotARunFolder:
        raise
    except ConfigError as exc:  # a corrupted line: a run all the same, which the user must fix
        problem = str(exc).removeprefix(f"{run_dir}/")
        return RunLine(run_id=run_dir.name, started=written,
                       mode=(stored.get("config") or {}).get("mode") or "?", finished=None,
                       total=run_total(stored.get("total_samples"), None),
                       success_rate=None, status="unreadable", problem=problem)
    finals = data.finals
    successes = sum(1 for r in finals.values() if r.get("success"))
    scored = len(graded(finals.values()))  # as the console's rate
    return RunLine(run_id=run_dir.name, started=written or data.started_at, mode=data.mode, finished=len(finals),
                   total=data.total, success_rate=round(successes / scored, 4) if scored else None,
                   status=data.status())


def list_runs(output_dir: str | Path) -> list[RunLine]:
    """Every run under ``output_dir``, oldest first."""
    root = Path(output_dir)
    if not root.is_dir():  # a file: the run's results.jsonl, a task file given in its place
        raise NotARunFolder(f"{root}: a file, not an output folder (the folder that holds the runs)"
                            if root.exists() else f"{root}: no such output folder")
    lines = []
    for child in root.iterdir():
        if child.is_dir() and ((child / "config.json").exists() or (child / "results.jsonl").exists()):
            try:
                lines.append(run_line(child))
            except NotARunFolder:
                continue
    if not lines and ((root / "config.json").exists() or (root / "results.jsonl").exists()):
        # results/r1 given for results: its trajectories/ holds no run, and nothing was said
        raise NotARunFolder(f"{root}: a run's folder, not an output folder (the folder that holds the runs): "
                            f"--output-dir {root.resolve().parent if root.name in ('', '..') else root.parent}")
    return sorted(lines, key=lambda line: (line.started is None, line.started or 0, line.run_id))


def unfinished_twins(output_dir: str | Path, identity_hash: str, besides: str) -> list[RunLine]:
    """The runs of ``output_dir`` made with the settings of ``identity_hash`` (what a resume
    must keep: the task data, domain, agent, model …) that a signal or a kill stopped short
    (``interrupted``, ``partial``), but the run ``besides`` and those still going (their lock
    held: a resume of one would be refused, exit 75): what a new run of those settings
    does again, where ``--run-id RUN --resume`` would go on (OSWorld's run.py, started again,
    goes on by itself). Only their config.json is read but for those that match."""
    root = Path(output_dir)
    found = []
    for child in sorted(root.iterdir()) if root.is_dir() else ():
        if child.name == besides or _stored_config(child).get("identity_hash") != identity_hash:
            continue
        try:
            line = run_line(child)
        except NotARunFolder:
            continue
        if line.status in ("interrupted", "partial") and line.finished:  # not one still "running"
            found.append(line)
    return found


def twins_note(lines: list[RunLine], output_dir: str | Path, keys: set[str], limit: int | None,
               python: bool = False) -> str:
    """What a new run of the samples ``keys`` (``limit``: its --limit) says of
    :func:`unfinished_twins` (the newest named), "" for none. --limit is no part of the
    settings' hash: under another one, what the earlier run finished of this run's samples,
    and the --limit its resume needs when it finished samples this run leaves out."""
    if not lines:
        return ""
    last = max(lines, key=lambda line: (line.started or 0, line.run_id))
    resume = f"run_id={last.run_id!r}, resume=True" if python else f"--run-id {last.run_id} --resume"
    more = f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""
    said = (f"an earlier run of these settings, {last.run_id}{more}, was {last.status} with {last.finished} of "
            f"{'?' if last.total is None else last.total} samples final")
    theirs = (_stored_config(Path(output_dir) / last.run_id).get("config") or {}).get("limit")
    if theirs == limit:
        return f"{said}: this one runs every sample again; {resume} goes on with that one instead"
    try:
        finals = set(RunData.load(Path(output_dir) / last.run_id, with_events=False).finals)
    except (ConfigError, OSError):  # unfinished_twins read it a moment ago
        return ""
    if finals - keys:  # a resume under this run's --limit would leave them out: refused
        resume += f", limit={theirs!r}" if python else f" --limit {theirs}" if theirs else " without --limit"
    samples = f"{len(keys)} sample{'' if len(keys) == 1 else 's'}"
    return (f"{said} {_limit_said(theirs, python)}, {len(finals & keys)} of them among this run's {samples} "
            f"({_limit_said(limit, python)}): this one runs each of its samples; {resume} goes on with that one "
            "instead")


def _limit_said(limit: int | None, python: bool) -> str:
    """A run's --limit as the note says it: ``--limit 3``, ``without --limit`` (``limit=3``)."""
    if python:
        return f"limit={limit!r}" if limit else "without limit"
    return f"--limit {limit}" if limit else "without --limit"


def format_runs(lines: list[RunLine]) -> str:
    """An aligned table of runs; a PROBLEM column when a run has one."""
    problems = any(line.problem for line in lines)
    header = ("RUN ID", "STARTED", "MODE", "SAMPLES", "SUCCESS", "STATUS") + (("PROBLEM",) if problems else ())
    rows = [header] + [(
        line.run_id, _iso(line.started) or "-", line.mode,
        f"{'?' if line.finished is None else line.finished}/{line.total if line.total is not None else '?'}",
        "-" if line.success_rate is None else f"{line.success_rate:.1%}", line.status,
    ) + ((line.problem or "",) if problems else ()) for line in lines]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)
