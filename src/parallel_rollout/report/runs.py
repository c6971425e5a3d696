"""The runs of an output folder, one line each: what ``parallel-rollout runs list`` prints.

A run is a sub-folder holding ``config.json`` or ``results.jsonl``. Its line comes from
``config.json`` (mode, when it was written) and ``summary.json`` (samples, success rate);
only a run with no summary (killed before writing one) has its results.jsonl read. Status:

* ``complete``: every sample has a final record;
* ``interrupted``: stopped by SIGINT/SIGTERM (``--resume`` continues it);
* ``partial``: anything else short of complete: aborted, killed, or still running.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from .run_data import NotARunFolder, RunData


@dataclass(frozen=True)
class RunLine:
    """One run of an output folder."""

    run_id: str
    started: float | None
    mode: str
    finished: int
    total: int | None
    success_rate: float | None
    status: str

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
    total, finished = summary.get("total_samples"), summary.get("finished") or 0
    if summary.get("interrupted"):
        status = "interrupted"
    elif total is not None and finished >= total:
        status = "complete"
    else:
        status = "partial"
    # a run that is going on now (a resume) rewrites summary.json only at its end
    results = run_dir / "results.jsonl"
    if results.exists() and results.stat().st_mtime > (run_dir / "summary.json").stat().st_mtime + 1:
        return None
    return RunLine(run_id=config.get("run_id") or run_dir.name, started=config.get("started_at") or config.get("written_at"),
                   mode=(config.get("config") or {}).get("mode") or "?", finished=finished, total=total,
                   success_rate=summary.get("success_rate"), status=status)


def run_line(run_dir: Path) -> RunLine:
    """The line of one run folder (NotARunFolder when it is none)."""
    light = _light(run_dir)
    if light is not None:
        return light
    data = RunData.load(run_dir, with_events=False)
    finals = data.finals
    total = (data.summary or {}).get("total_samples")
    status = data.status()
    successes = sum(1 for r in finals.values() if r.get("success"))
    written = None
    try:
        stored = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
        written = stored.get("started_at") or stored.get("written_at")  # the first session's
    except (OSError, ValueError):
        pass
    return RunLine(run_id=data.run_id, started=written or data.started_at, mode=data.mode, finished=len(finals),
                   total=total, success_rate=round(successes / len(finals), 4) if finals else None, status=status)


def list_runs(output_dir: str | Path) -> list[RunLine]:
    """Every run under ``output_dir``, oldest first."""
    root = Path(output_dir)
    if not root.is_dir():
        raise NotARunFolder(f"{root}: no such output folder")
    lines = []
    for child in root.iterdir():
        if child.is_dir() and ((child / "config.json").exists() or (child / "results.jsonl").exists()):
            try:
                lines.append(run_line(child))
            except NotARunFolder:
                continue
    return sorted(lines, key=lambda line: (line.started is None, line.started or 0, line.run_id))


def format_runs(lines: list[RunLine]) -> str:
    """An aligned table of runs."""
    header = ("RUN ID", "STARTED", "MODE", "SAMPLES", "SUCCESS", "STATUS")
    rows = [header] + [(
        line.run_id, _iso(line.started) or "-", line.mode,
        f"{line.finished}/{line.total if line.total is not None else '?'}",
        "-" if line.success_rate is None else f"{line.success_rate:.1%}", line.status,
    ) for line in lines]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)
