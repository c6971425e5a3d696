"""A batch run's folder: its lock, ``config.json``, and the checks a resume passes first.

::

    <output_dir>/<run_id>/   lock (one writer at a time), config.json (the resolved settings,
                             their identity hash, the provenance: versions and task-data
                             hashes), results.jsonl, trajectories/, run.log, summary.json

``RunFolder.open`` locks the folder and checks it before anything in it changes: results there
need ``--resume`` and the settings and task data they were made with (``check_resume``), and
a resume may not leave out samples already final (``check_scope``, a lower ``--limit``); only
then is a torn last line repaired and ``config.json`` written whole. ``describe`` makes the
same checks reading only, for ``--dry-run``. The Runner (runner.py) owns the run itself.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Callable

from .config import RunConfig
from .errors import ConfigError
from .output_checks import check_run_folder_writable
from .provenance import SCHEMA_VERSION, check_resume, check_settings, provenance, recorded_config
from .report.files import write_text_whole
from .report.run_data import RUN_FILES
from .results import ResultStore, ResumeIndex, StorageError
from .run_lock import FolderLock, lock_run_folder, run_folder_locked
from .run_end import read_summary
from .setting_names import PYTHON_CALL

log = logging.getLogger("parallel_rollout")

#: what a run writes in its folder: one that holds other things and none of these is no run's
RUN_WRITES = RUN_FILES | {"trajectories", "sessions.jsonl"}


class RunFolder:
    """The folder ``<output_dir>/<run_id>`` of one batch run, as ``config`` sees it."""

    def __init__(self, config: RunConfig, run_dir: Path, run_id: str,
                 endpoints: Callable[[], list[str] | None]) -> None:
        self.config = config
        self.run_dir = run_dir
        self.run_id = run_id
        #: says where the agent's model requests go (provenance records them; None: an agent
        #: that takes no --base-url)
        self.endpoints = endpoints
        #: versions and task-data hashes behind this run (provenance.py), set by check_resume
        self.provenance: dict[str, Any] | None = None
        #: sample key -> the record that ended it, as ``describe`` read them
        self.finals: dict[str, dict[str, Any]] = {}

    def open(self, keys: set[str], model_recorded: bool) -> tuple[FolderLock, ResultStore, ResumeIndex]:
        """Lock the run folder, check a resume against it and read its results (``keys``:
        this run's samples; ``model_recorded``: the agent takes the model settings, which
        config.json then records); config.json is written only once all of that passed."""
        cfg = self.config
        self.check_ours()
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"--output-dir {cfg.output_dir}: cannot make the run folder "
                              f"{self.run_dir}: {exc.strerror or exc}") from None
        lock = lock_run_folder(self.run_dir)
        try:
            config_path = self.run_dir / "config.json"
            stored = self.check_resume()
            if stored is None and not cfg.resume:
                note = self.twins_note(keys)
                if note:
                    log.warning("%s", note)
            store = ResultStore(self.run_dir)
            try:
                index = store.load()
            except StorageError as exc:
                raise ConfigError(f"cannot resume {self.run_id}: {exc}") from None
            self.check_scope(index.final, keys)
            store.repair(index)  # every check passed: only now is anything changed
            (self.run_dir / "trajectories").mkdir(exist_ok=True)
            # Written whole (aside, renamed): a kill mid-write must not leave a config.json a resume
            # cannot read. ``started_at``: the first session's, for `runs list`; ``total_samples``:
            # this session's, for a run killed before its summary.
            now = time.time()
            write_text_whole(config_path, json.dumps({
                "schema_version": SCHEMA_VERSION, "run_id": self.run_id, "identity_hash": cfg.identity_hash(),
                "config": recorded_config(cfg, model_recorded), "provenance": self.provenance,
                "written_at": now,
                "started_at": (stored or {}).get("started_at") or (stored or {}).get("written_at") or now,
                "total_samples": len(keys),
            }, indent=2))
        except BaseException as exc:
            lock.release()
            if isinstance(exc, OSError):  # a full disk before anything ran: nothing is lost
                raise ConfigError(f"cannot write in the run folder {self.run_dir}: {exc.strerror or exc}") from None
            raise
        return lock, store, index

    def check_ours(self) -> None:
        """ConfigError when the run folder is there and holds things of which none is a run's:
        another program's folder, which the run would write among (OSWorld's results under
        ``--result_dir``, whose ``pyautogui/`` a ``--run-id pyautogui`` names). Reads only."""
        try:
            names = sorted(entry.name for entry in self.run_dir.iterdir() if entry.name != ".lock")
        except OSError:  # not there (a new run), or not a folder: the open says it
            return
        if names and not RUN_WRITES.intersection(names):
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            raise ConfigError(f"{self.run_dir} holds {shown} and no run's files (config.json, results.jsonl, "
                              "run.log): it is no run folder, and the run would write among them; pick "
                              "another --run-id or --output-dir")

    def check_resume(self) -> dict[str, Any] | None:
        """ConfigError unless the run folder may be (re)opened with this config: results there
        need --resume and the settings and task data they were made with. Returns the
        stored config.json (None without one). Reads only."""
        config_path = self.run_dir / "config.json"
        has_results = self._has_results()
        if has_results and not self.config.resume:  # said again as a run() call spells it (api.as_called)
            raise ConfigError(f"{self.run_dir} already holds results; add --resume to continue that run or pick "
                              "a new --run-id")
        self.provenance = provenance(self.config, endpoints=self.endpoints())
        try:
            stored = json.loads(config_path.read_text()) if config_path.exists() else None
        except ValueError as exc:
            if not (has_results and self.config.resume):
                raise ConfigError(f"cannot resume {self.run_id}: {config_path} is not JSON ({exc})") from None
            # resumed with its flags given (config.build_config): the task data is checked
            # against the hashes summary.json keeps; its config.json is written anew
            made = (read_summary(self.run_dir) or {}).get("provenance")
            log.warning("%s is not JSON (%s): resuming with the settings given%s", config_path, exc,
                        "" if made else "; nor is there a summary.json: the task data cannot be checked")
            stored = {"provenance": made} if made else None
        if has_results and stored is not None:
            check_resume(self.run_id, stored, self.config, self.provenance)
        return stored

    def check_settings(self) -> None:
        """A resume's settings against those its run recorded, before the run's own checks (a
        resume with another --agent is told so, not first what that agent lacks: a key), but
        --data. Read without the lock; ``open`` checks everything again under it."""
        if not (self.config.resume and self._has_results()):
            return
        try:
            stored = json.loads((self.run_dir / "config.json").read_text())
        except (OSError, ValueError):
            return  # said by ``check_resume``, with what a resume does without it
        if isinstance(stored, dict):
            endpoints = self.endpoints()
            # --data is compared once its tasks are read: another mode's data is told what its tasks are
            check_settings(self.run_id, stored, self.config, {} if endpoints is None else {"endpoints": endpoints},
                           leave_out=("data",))

    def _has_results(self) -> bool:
        """Whether the folder holds a results.jsonl with anything in it (a run to resume)."""
        results_path = self.run_dir / "results.jsonl"
        return results_path.exists() and results_path.stat().st_size > 0

    def twins_note(self, keys: set[str]) -> str:
        """What a new run of the samples ``keys`` says of the runs of its output folder made
        with its settings that were stopped short: a run started again (as OSWorld's run.py
        is) goes on by ``--resume`` only (``report.runs.unfinished_twins``)."""
        from .report.runs import twins_note, unfinished_twins

        twins = unfinished_twins(self.config.output_dir, self.config.identity_hash(), besides=self.run_id)
        twins = [twin for twin in twins if self._resumable(twin.run_id)]
        return twins_note(twins, self.config.output_dir, keys, self.config.limit,
                          python=PYTHON_CALL in self.config.sources.values())

    def _resumable(self, run_id: str) -> bool:
        """Whether a resume of the output folder's run ``run_id`` with this run's settings and
        task data would pass ``check_resume`` (a task file edited since refuses it)."""
        try:
            stored = json.loads((Path(self.config.output_dir) / run_id / "config.json").read_text())
            check_resume(run_id, stored, self.config, self.provenance or {})
        except (OSError, ValueError, ConfigError):
            return False
        return True

    def check_scope(self, finals: dict[str, Any], keys: set[str]) -> None:
        """ConfigError for final results of samples this run no longer holds (a lower
        --limit): they would count against a total that leaves them out."""
        outside = sorted(set(finals) - keys)
        if outside:
            raise ConfigError(
                f"cannot resume {self.run_id}: {len(outside)} finished sample(s) are not among "
                f"this run's {len(keys)} (e.g. {outside[0]}), as with a --limit lower than the "
                "run's before; resume with a --limit at least as high, or start a new "
                "--run-id")

    def describe(self, keys: set[str]) -> str:
        """What ``--dry-run`` says of the run folder of the samples ``keys``, reading only: the
        checks the run would make on opening it; ConfigError for what it would refuse."""
        if self.run_dir.exists() and not self.run_dir.is_dir():
            raise ConfigError(f"--output-dir {self.config.output_dir}: {self.run_dir} is a file, not a folder")
        check_run_folder_writable(self.config.output_dir, self.run_dir)  # as opening it would
        self.check_ours()
        self.check_resume()
        # not a problem of the settings: the same command goes on once that run has ended
        busy = ("; another run is writing to it now (its lock is held): the run would exit 75 until "
                "that one ends" if run_folder_locked(self.run_dir) else "")
        results_path = self.run_dir / "results.jsonl"
        if not results_path.exists():
            note = self.twins_note(keys)
            return f"a new run folder {self.run_dir}" + (f" ({note})" if note else "") + busy
        try:  # read as the resume reads it (its attempts too), changing nothing
            index = ResultStore(self.run_dir).load()
        except StorageError as exc:
            raise ConfigError(f"cannot resume {self.run_id}: {exc}") from None
        finals = index.final
        self.check_scope(finals, keys)
        self.finals = finals
        faults = sum(1 for r in finals.values() if r.get("task_fault") == "task_file")
        ungraded = sum(1 for r in finals.values() if r.get("infrastructure")) - faults
        return (f"resumes {self.run_id}: {len(finals) - ungraded - faults} of {len(keys)} samples already final"
                + (f", {ungraded} never graded (infrastructure) to run again" if ungraded else "")
                + (f", {faults} never graded for their task file's error (not run again)" if faults else "")
                + (f"; its torn last line ({index.torn_bytes} bytes) is set aside to results.jsonl.torn"
                   if index.torn else "") + busy)
