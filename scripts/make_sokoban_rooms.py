"""Writes src/parallel_rollout/envs/data/sokoban.jsonl: the rooms of ``--data sokoban``.

For each tag of sokoban_endless.jsonl (SimpleSokoban, LargerSokoban,
SokobanDifferentGridVocab), 100 rooms generated from seeds 1,000,000,000 + n (far from the
seeds an RL scheduler draws, which start at its seed), each stored with its seed and its
rows. A seed whose room the planner cannot solve within its node budget and the task's
``max_steps`` is skipped, so every shipped room is one the oracle solves.

    python scripts/make_sokoban_rooms.py [--out PATH]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from parallel_rollout.envs.sokoban import task_room
from parallel_rollout.envs.sokoban_planner import plan

DATA = Path(__file__).resolve().parent.parent / "src" / "parallel_rollout" / "envs" / "data"
ROOMS_PER_TAG = 100
FIRST_SEED = 1_000_000_000


def rooms_of(template: dict) -> list[dict]:
    """``ROOMS_PER_TAG`` tasks of one tag's template, each with a seed and its room."""
    tasks, seed = [], FIRST_SEED
    while len(tasks) < ROOMS_PER_TAG:
        room = task_room(template, seed)
        moves = plan(tuple(room))
        if moves is not None and len(moves) <= template["max_steps"]:
            task = {**template, "id": f"{template['id']}-{len(tasks):03d}", "seed": seed, "room": room}
            task["tags"] = [*template["tags"], f"{len(room)}x{len(room[0])}"]
            tasks.append(task)
        seed += 1
    return tasks


def main() -> None:
    """Write the shipped rooms, one task a line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DATA / "sokoban.jsonl")
    out_path = parser.parse_args().out
    templates = [json.loads(line) for line in (DATA / "sokoban_endless.jsonl").read_text().splitlines()]
    written = 0
    with out_path.open("w", encoding="utf-8") as out:
        for template in templates:
            for task in rooms_of(template):
                out.write(json.dumps(task, ensure_ascii=False) + "\n")
                written += 1
    print(f"{written} rooms written to {out_path}")


if __name__ == "__main__":
    main()
