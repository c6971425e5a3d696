"""The run folder of a scheduler's engine: one writer at a time, and sessions that never
share a file.

A scheduler's engine writes ``results.jsonl``, ``events.jsonl`` and ``trajectories/`` in
``output_dir/run_id`` as a batch run does, and holds the folder's lock (``.lock``, the one
``run()`` takes) until it closes: a second scheduler, or a batch run, on a live folder raises
``RunLocked`` before it starts or writes anything.

A sample's key is its scheduler's name and the member's name (``train:FrozenLake/g0/e0/m0``,
``groups.sample_name``; the trajectory id is the run id and that key) and names its trajectory
folder; group ids start at 0 in every scheduler. So a second session in
the same folder (a trainer restarted with a fixed ``run_id``) would write the same keys: its
records would sit beside the first session's as duplicate finals, and its trajectory files
would overwrite theirs. A folder that holds an earlier session (``sessions.jsonl``, or a
``results.jsonl`` with results) is therefore refused with a ``ConfigError``, unless the run
config says ``resume=True``: then this session is number k (the earlier ones are counted in
``sessions.jsonl``, one line each) and its samples are named ``<scheduler>@s<k>:…``, so
nothing of an earlier session is overwritten, or read back as this session's.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..output_checks import repair_tail
from ..run_lock import lock_run_folder

#: one line per scheduler session that opened the folder
SESSIONS = "sessions.jsonl"


class RunFolder:
    """The locked run folder of one engine, and the session number its samples carry."""

    def __init__(self, run_dir: Path, lock: Any, session: int, sessions_size: int = 0) -> None:
        self.run_dir = run_dir
        self.session = session
        self._lock = lock
        #: the size of ``sessions.jsonl`` before this session's line (``close(retract=True)``)
        self._sessions_size = sessions_size

    @classmethod
    def open(cls, run_dir: Path, resume: bool) -> "RunFolder":
        """Lock ``run_dir`` (RunLocked when another process holds it) and start a session in
        it: ConfigError when an earlier one is there and ``resume`` is false."""
        run_dir.mkdir(parents=True, exist_ok=True)
        lock = lock_run_folder(run_dir, hint="give the scheduler another run_id")
        try:
            earlier = earlier_sessions(run_dir)
            if earlier and not resume:
                raise ConfigError(f"{run_dir} already holds the results of an earlier run; a scheduler would "
                                  "write its samples under the same names: give it another run_id (or none: "
                                  "a new one each time), or RunConfig(resume=True) to add a session to it")
            if earlier:  # a session killed mid-write (the OOM killer) left half a line: set aside, not glued onto
                repair_tail(run_dir / "results.jsonl")
            with open(run_dir / SESSIONS, "a", encoding="utf-8") as fh:
                size = fh.tell()
                fh.write(json.dumps({"session": earlier, "started_at": time.time(), "pid": os.getpid()}) + "\n")
        except BaseException:
            lock.release()
            raise
        return cls(run_dir, lock, earlier, size)

    def sample_prefix(self, scheduler: str) -> str:
        """What a scheduler's sample names start with: its name, and ``@s<k>`` in a later session."""
        return scheduler if self.session == 0 else f"{scheduler}@s{self.session}"

    def close(self, retract: bool = False) -> None:
        """Release the folder's lock; ``retract``: the session ran no sample (its engine's start
        failed, a Ctrl-C cut it short, no get_batch came), so its line in ``sessions.jsonl`` is
        taken back: the same run_id starts again without ``resume=True`` (it was refused as a
        folder holding the results of an earlier run, which held none)."""
        if retract:
            try:
                os.truncate(self.run_dir / SESSIONS, self._sessions_size)
            except OSError:
                pass  # the folder is gone or read-only: the line stays, as before
        self._lock.release()


def check_scheduler_name(name: object) -> str:
    """``name`` if a scheduler may take it: a sample's key is ``<name>:<tag>/…``, and
    ``<name>@s<k>:…`` in a later session, so a name holding ``:`` or ending in ``@s<k>`` could
    write another scheduler's keys, and its trajectory files, in a folder's later session."""
    if not isinstance(name, str) or not name or ":" in name or re.search(r"@s\d+$", name):
        raise ConfigError(f"a scheduler's name must be a non-empty string without ':' that does not end in "
                          f"'@s<number>' (its samples are named <name>:<tag>/…, a later session's "
                          f"<name>@s<k>:…), got {name!r}")
    return name


def earlier_sessions(run_dir: Path) -> int:
    """How many sessions wrote to ``run_dir`` before: the lines of ``sessions.jsonl``, or
    one for results made without it (a batch run's, or a scheduler's from before it)."""
    sessions = run_dir / SESSIONS
    if sessions.exists():
        count = sum(1 for line in sessions.read_text(encoding="utf-8").splitlines() if line.strip())
        if count:
            return count
    results = run_dir / "results.jsonl"
    return int(results.exists() and results.stat().st_size > 0)
