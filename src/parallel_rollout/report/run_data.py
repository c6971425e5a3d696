"""One run folder read back: what the report, ``compare``, ``runs list`` and the gates see.

A run folder (``results/<run-id>/``) holds ``config.json``, ``results.jsonl`` (one line per
attempt), ``events.jsonl`` (VM transitions and runner events), ``summary.json`` and
``trajectories/``. ``RunData.load`` reads them without writing anything, so it works on a
folder another run is still writing to; a torn last line (a write in progress) is skipped,
as the results store does.
"""

from __future__ import annotations

import difflib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..records import sample_ends
from ..results import StorageError, read_records

log = logging.getLogger(__name__)

#: the files of a run folder a user may give in its place
RUN_FILES = frozenset({"results.jsonl", "config.json", "summary.json", "events.jsonl", "run.log",
                       "report.html", "compare.json"})


class NotARunFolder(ConfigError):
    """A path given as a run folder that holds no run."""


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except ValueError as exc:
        log.warning("%s: unreadable (%s); going on without it", path, exc)
        return None


def _check_config_reads(path: Path) -> None:
    """ConfigError for a config.json that does not read where it is all of a run (no results
    yet): a run is listed ``unreadable`` with it, where it was left out, and ``report`` said
    the folder had no config.json. A run writes it whole (aside, renamed): a copy cut short,
    an edit."""
    try:
        json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, IsADirectoryError):
        return
    except ValueError as exc:
        raise ConfigError(f"{path}: unreadable ({exc}), and no results.jsonl beside it: the run's "
                          "settings are lost; restore the file, or remove the folder and run again") from None


def read_events(path: Path) -> list[dict[str, Any]]:
    """Every complete line of an events.jsonl; a broken line is skipped and logged."""
    events: list[dict[str, Any]] = []
    if not path.exists():
        return events
    with open(path, "rb") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.endswith(b"\n") or not line.strip():
                continue
            try:
                events.append(json.loads(line))
            except ValueError:
                log.warning("%s:%d: not JSON; skipped", path, lineno)
    return events


def _read_results(path: Path) -> list[dict[str, Any]]:
    """Every complete record of a results.jsonl, as a resume reads it (``results.read_records``:
    a torn last line, a write in progress, is skipped; a whole last record without its
    newline counts); a corrupted line is a ConfigError naming ``file:line``, and so is a file
    that cannot be read (another account's, an I/O error, a folder in its place) naming it."""
    try:
        return read_records(path, say_torn=False)
    except StorageError as exc:  # a run all the same (not NotARunFolder): the line is what to fix
        raise ConfigError(str(exc)) from None
    except OSError as exc:  # one run's: runs list lists the others, a new run's note skips it
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None


def results_stamp(run_dir: Path) -> dict[str, int] | None:
    """Which results.jsonl a run folder holds now: its size and modification time (ns), or
    None without one. summary.json keeps the stamp of the file it counted."""
    try:
        st = (Path(run_dir) / "results.jsonl").stat()
    except FileNotFoundError:
        return None
    return {"bytes": st.st_size, "mtime_ns": st.st_mtime_ns}


def summary_fits(summary: dict[str, Any] | None, stamp: dict[str, int] | None) -> bool | None:
    """Whether ``summary`` (a summary.json) still describes the results.jsonl whose stamp is
    ``stamp`` (``results_stamp`` taken before its records are read): True while the file is
    the one it stamped, False once it changed (a resume going on, or killed before its own
    summary; an edit) or without a summary, None for a summary without a stamp (an older
    version's), which cannot say. The one rule of ``runs list``, ``report``, ``compare`` and
    the ``--compare-to`` gate: a summary that does not fit says nothing of the results."""
    if summary is None:
        return False
    if "results_file" not in summary:
        return None
    return summary["results_file"] == stamp


def run_total(started_samples: Any, summary: dict[str, Any] | None) -> int | None:
    """The run's samples as its last session started it: ``started_samples``, config.json's
    ``total_samples`` (each session writes there the count it starts with, so a resume with
    a higher --limit has more, and a run killed before its first summary has one), else the
    summary's (pass it only if it fits: a run an older version started), else None."""
    total = started_samples
    if total is None and summary is not None:
        total = summary.get("total_samples")
    return total if isinstance(total, int) and not isinstance(total, bool) else None


def run_status(summary: dict[str, Any] | None, total: int | None, finished: int, ungraded: bool) -> str:
    """complete (all ``total`` samples ended, ``finished`` of them, every one graded),
    ungraded (all ended, some never graded: infrastructure failures after --max-retries),
    interrupted (short of that, stopped by a signal, as ``summary`` says: a signal that came
    once every sample had ended, as the run stopped its VMs, cut nothing), or partial
    (aborted, killed, still running: anything else). ``summary`` is the run's summary.json
    only if it fits its results.jsonl (``summary_fits``): one written before a resume that
    was killed says nothing of the run, which the records and its total do."""
    if total is not None and finished >= total:
        return "ungraded" if ungraded else "complete"
    if summary is not None and summary.get("interrupted"):
        return "interrupted"
    return "partial"


@dataclass
class RunData:
    """Everything a run folder says about its run."""

    run_dir: Path
    run_id: str
    config: dict[str, Any]
    summary: dict[str, Any] | None
    records: list[dict[str, Any]]
    events: list[dict[str, Any]] = field(default_factory=list)
    #: results.jsonl's stamp as it was read (``results_stamp``), for ``summary_fits``
    results_file: dict[str, int] | None = None
    #: config.json's ``total_samples``: the samples its last session started with (``run_total``)
    started_samples: Any = None

    @classmethod
    def load(cls, run_dir: str | Path, *, with_events: bool = True) -> "RunData":
        """Read a run folder; NotARunFolder when it holds neither results nor a config, a
        ConfigError naming ``file:line`` when a line of its results.jsonl is corrupted, or its
        config.json when that does not read and there are no results."""
        run_dir = Path(run_dir)
        results = run_dir / "results.jsonl"
        if not run_dir.exists():
            raise NotARunFolder(f"{run_dir}: no such folder")
        if not run_dir.is_dir():  # a file (its results.jsonl, say) is no folder to read config.json from
            raise NotARunFolder(_a_file(run_dir))
        if not results.exists():
            _check_config_reads(run_dir / "config.json")
        config_doc = _read_json(run_dir / "config.json")
        if config_doc is None and not results.exists():
            raise NotARunFolder(f"{run_dir}: not a run folder (no config.json or results.jsonl)"
                                f"{_runs_inside(run_dir)}")
        summary = _read_json(run_dir / "summary.json")
        stamp = results_stamp(run_dir)  # before reading: a change made meanwhile is a change
        records = _read_results(results) if results.exists() else []
        config_doc = config_doc or {}
        return cls(
            run_dir=run_dir,
            # the folder's name, which runs list, report and compare take: a copied run folder
            # is a run of its own name (compare labelled a copy and its original alike)
            run_id=run_dir.resolve().name or config_doc.get("run_id") or str(run_dir),
            config=config_doc.get("config") or {},
            summary=summary,
            records=records,
            events=read_events(run_dir / "events.jsonl") if with_events else [],
            results_file=stamp,
            started_samples=config_doc.get("total_samples"),
        )

    @property
    def fitting_summary(self) -> dict[str, Any] | None:
        """summary.json unless it no longer describes results.jsonl (``summary_fits``)."""
        return self.summary if summary_fits(self.summary, self.results_file) is not False else None

    @property
    def total(self) -> int | None:
        """The run's samples as its last session started it (``run_total``), None when
        nothing says."""
        return run_total(self.started_samples, self.fitting_summary)

    @property
    def finals(self) -> dict[str, dict[str, Any]]:
        """Sample key -> the record that ended it: the final one, the one that counts, or for
        a sample never graded its last attempt (``records.sample_ends``)."""
        return sample_ends(self.records)

    @property
    def mode(self) -> str:
        """The run's mode, from its config or its records."""
        if self.config.get("mode"):
            return str(self.config["mode"])
        modes = sorted({str(r.get("mode")) for r in self.records if r.get("mode")})
        return ",".join(modes) or "?"

    @property
    def started_at(self) -> float | None:
        """When the first attempt (or the config) was written, seconds since the epoch."""
        times = [r["started_at"] for r in self.records if isinstance(r.get("started_at"), (int, float))]
        return min(times) if times else None

    def status(self) -> str:
        """complete, ungraded, interrupted or partial (``run_status``): a summary.json written
        before results.jsonl last changed (a resume killed or still going) says nothing. An RL
        scheduler's folder (its sessions listed in sessions.jsonl) is ``rl``: it draws samples
        as the trainer asks, so it has no total to fall short of."""
        if self.total is None and (self.run_dir / "sessions.jsonl").is_file():
            return "rl"
        finals = self.finals
        return run_status(self.fitting_summary, self.total, len(finals),
                          any(r.get("infrastructure") for r in finals.values()))


def resolve_run(ref: str | Path, output_dir: str | Path | None = None) -> Path:
    """A run folder from a path, or from a run id under ``output_dir``."""
    path = Path(ref)
    if path.is_dir():
        return path
    if output_dir is not None and "/" not in str(ref):
        candidate = Path(output_dir) / str(ref)
        if candidate.is_dir():
            return candidate
    if path.exists():
        raise NotARunFolder(_a_file(path))
    by_id = output_dir is not None and "/" not in str(ref)
    notes = [f"nor {Path(output_dir) / str(ref)}"] if by_id else []
    near = runs_near(Path(output_dir) if by_id else path.parent, path.name)
    notes += [f"the nearest by name: {', '.join(near)}"] if near else []
    raise NotARunFolder(f"{ref}: no such run folder" + (f" ({'; '.join(notes)})" if notes else ""))


def runs_near(folder: str | Path, name: str, leave_out: str | None = None) -> list[str]:
    """The runs of ``folder`` (each a folder with its config.json) whose names are near
    ``name``, the closest first: those a misspelt run id may have meant (``leave_out``: the
    run that asks, which is none of them)."""
    try:
        runs = [item.name for item in Path(folder).iterdir()
                if (item / "config.json").is_file() and item.name != leave_out]
    except OSError:
        runs = []
    return difflib.get_close_matches(name, runs, n=3, cutoff=0.6)


def _runs_inside(folder: Path, shown: int = 5) -> str:
    """What an output folder given for a run folder (`report results`) holds: its runs."""
    try:
        runs = sorted(p.name for p in folder.iterdir()
                      if (p / "config.json").is_file() or (p / "results.jsonl").is_file())
    except OSError:
        return ""
    if not runs:
        return ""
    more = f" and {len(runs) - shown} more" if len(runs) > shown else ""
    return (f"; it is an output folder of runs ({', '.join(runs[:shown])}{more}): give one, "
            f"{folder / runs[0]}, or list them with `runs list --output-dir {folder}`")


def _a_file(path: Path) -> str:
    """The error for a file given where a run folder is wanted (its results.jsonl, say)."""
    return (f"{path}: a file, not a run folder: give the folder that holds it ({path.parent})"
            if path.name in RUN_FILES else f"{path}: a file, not a run folder")
