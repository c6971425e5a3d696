"""The oracle's references for real OSWorld tasks, written by this project: OSWorld's task
files have none, so ``envs/data/osworld_references.jsonl`` holds, per task id, the actions
that do the task (``pyautogui`` code run in the guest, as an OSWorld agent's would be, then
DONE; FAIL for the infeasible tasks) and why they are right. The oracle agent replays them
(``--agent oracle``, ``--action-space pyautogui``); ``benchmarks/osworld_oracle.py`` runs them
all through a pool and ``reference_index()`` is the task list it gives ``--osworld-index``.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

FILE = "osworld_references.jsonl"


def references_file() -> str:
    """The references' file, by path: an answer key, hidden from every agent but the oracle
    (``OSWorldEnv.answer_files``)."""
    return str(resources.files("parallel_rollout.envs").joinpath("data", FILE))


@functools.lru_cache(maxsize=1)
def references() -> dict[str, dict[str, Any]]:
    """Task id -> ``{"id", "domain", "reference", "why"}``, in file order."""
    text = resources.files("parallel_rollout.envs").joinpath("data", FILE).read_text(encoding="utf-8")
    entries = [json.loads(line) for line in text.splitlines() if line.strip()]
    return {entry["id"]: entry for entry in entries}


def reference_of(task_id: str) -> list[Any] | None:
    """The project's reference actions for an OSWorld task id, or None."""
    entry = references().get(task_id)
    return list(entry["reference"]) if entry else None


def reference_index() -> dict[str, list[str]]:
    """OSWorld's index layout (domain -> task ids) of every task with a reference."""
    index: dict[str, list[str]] = {}
    for entry in references().values():
        index.setdefault(entry["domain"], []).append(entry["id"])
    return index
