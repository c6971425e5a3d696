"""The engine's gap between a finished record and the next dispatch, on an OSWorld-shaped batch.

    python benchmarks/rl/data_plane.py                      # 64 trajectories × 100 turns × 300 KB
    python benchmarks/rl/data_plane.py --trajectories 24    # quicker

One run, two schedulers in turn (each its own engine and workers), both collecting one batch
of the test mode ``screens:ScreenEnv`` (tests/rl/screens.py: a new screenshot every turn, the
openai agent's conversation with its last three screenshots inline, its model stood in
without HTTP):

- **old path**: the scheduler parses each member's trajectory file when its record arrives,
  in the engine's callback under the scheduler's lock (what ``from_record`` did before).
- **new path**: the callback only notes the record; ``get_batch`` reads the turns in the
  trainer's thread.

The engine calls the scheduler back on its dispatch thread, so the time a callback takes is
time in which no other finished slot gets its next assignment (the slot of the record itself
gets its next one first, before the results file and the callback). Two figures per record,
both on the engine's thread:

- **callback**: the time in the scheduler's callback alone;
- **dispatch gap**: from the record reaching the engine (``Engine.record``) to the engine's
  next dispatch (``backend.send``), for every record that came while work was waiting (the
  records of a batch's last members free slots nothing is queued for).

Printed: p50 / p99 / max of each, for both paths, and the ratio of the gaps; the trajectory
files' size (each screenshot stored once, linear in turns). Goal: dispatch gap p99 under 50 ms
on the new path (it includes the time the engine's thread waits for a CPU: a loaded machine
shows in it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent.parent / "tests"
sys.path[:0] = [str(TESTS), str(TESTS / "rl")]  # the OSWorld-shaped test mode

from screens import AGENT, MODE, write_screens  # noqa: E402

from parallel_rollout.backends.local import LocalBackend  # noqa: E402
from parallel_rollout.config import RunConfig  # noqa: E402
from parallel_rollout.engine import Engine  # noqa: E402
from parallel_rollout.rl import EnvManagerConfig, RolloutScheduler, TaskSet  # noqa: E402
from parallel_rollout.trajectories import read_turns  # noqa: E402


class TimedScheduler(RolloutScheduler):
    """Times every engine callback (the engine thread's gap between a record and a dispatch)."""

    eager = False

    def __init__(self, *args, **kwargs) -> None:
        self.gaps: list[float] = []
        super().__init__(*args, **kwargs)

    def _on_final(self, record):
        started = time.perf_counter()
        try:
            if self.eager and record.get("trajectory"):
                with self._cond:  # the old from_record: a parse under the lock, on the engine thread
                    read_turns(self.run_dir / record["trajectory"])
            super()._on_final(record)
        finally:
            self.gaps.append(time.perf_counter() - started)


class DispatchClock:
    """The engine thread's gap from a record's arrival to the next dispatch (see the docstring)."""

    def __init__(self) -> None:
        self.waiting: list[float] = []
        self.gaps: list[float] = []

    def install(self) -> None:
        """Wrap Engine.record and LocalBackend.send (both run on the engine's thread)."""
        record, send, clock = Engine.record, LocalBackend.send, self

        def timed_record(engine, rec, **how):
            if engine._pending:  # work waits for the slot this record frees
                clock.waiting.append(time.perf_counter())
            return record(engine, rec, **how)  # dispatches first when its loop is free

        def timed_send(backend, item):
            sent = send(backend, item)
            if sent and clock.waiting:
                now = time.perf_counter()
                clock.gaps += [now - t for t in clock.waiting]
                clock.waiting.clear()
            return sent

        Engine.record, LocalBackend.send = timed_record, timed_send


CLOCK = DispatchClock()


def _percentiles(values: list[float]) -> tuple[float, float, float]:
    """p50, p99, max in ms."""
    values = sorted(values)
    if not values:
        return float("nan"), float("nan"), float("nan")
    p99 = values[min(len(values) - 1, int(0.99 * len(values)))]
    return 1000 * statistics.median(values), 1000 * p99, 1000 * values[-1]


def run(path: str, folder: Path, tasks: Path, args) -> dict[str, float]:
    """One batch on a fresh engine; the callback times, the dispatch gaps and the files' size."""
    TimedScheduler.eager = path == "old"
    CLOCK.waiting, CLOCK.gaps = [], []
    config = RunConfig(mode=MODE, agent=AGENT, num_rollouts=args.workers, envs_per_worker=args.loops,
                       output_dir=str(folder), run_id=path, progress=False, task_timeout=3600.0,
                       max_turns=args.turns)
    # every group of the batch starts at once: the members past the engine's slots wait in its
    # queue, so each record that frees a slot is followed by a dispatch (a gap to measure)
    scheduler = TimedScheduler(config, EnvManagerConfig(group_size=8, num_env_groups=args.trajectories // 8,
                                                        tags=["desk"], task_sets={"desk": TaskSet(MODE, str(tasks))}))
    try:
        started = time.monotonic()
        batch = scheduler.get_batch(batch_size=args.trajectories, step=0)
        wall = time.monotonic() - started
        callbacks, gaps = list(scheduler.gaps), list(CLOCK.gaps)
    finally:
        scheduler.close()
    assert all(len(t.turns) == args.turns for t in batch), "a trajectory came back short"
    files = list((folder / path / "trajectories").rglob("attempt-*.jsonl"))
    turn_bytes = sum(f.stat().st_size for f in files if not f.name.endswith(".images.jsonl"))
    image_bytes = sum(f.stat().st_size for f in files if f.name.endswith(".images.jsonl"))
    cb50, cb99, cbmax = _percentiles(callbacks)
    p50, p99, pmax = _percentiles(gaps)
    return {"cb_p50_ms": cb50, "cb_p99_ms": cb99, "cb_max_ms": cbmax, "p50_ms": p50, "p99_ms": p99,
            "max_ms": pmax, "records": len(callbacks), "gaps": len(gaps), "wall_s": wall,
            "turn_mb": turn_bytes / len(batch) / 1e6, "image_mb": image_bytes / len(batch) / 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=64, help="one batch of this many (a multiple of 8)")
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--image-kb", type=int, default=300)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--loops", type=int, default=8)
    parser.add_argument("--paths", default="old,new", help="which paths to measure, in order")
    args = parser.parse_args()
    slots = args.workers * args.loops
    if args.trajectories <= slots:  # every group starts at once: no record comes while work waits
        parser.error(f"--trajectories {args.trajectories} measures no dispatch gap: {args.workers} workers x "
                     f"{args.loops} env loops start all of them at once, so no record is followed by a "
                     f"dispatch; give more than {slots} (e.g. {slots + 8})")
    CLOCK.install()
    with tempfile.TemporaryDirectory(prefix="pr-data-plane-") as tmp:
        folder = Path(tmp)
        screens = write_screens(folder / "screens", args.turns, args.image_kb * 1024)
        tasks = folder / "desk.jsonl"
        tasks.write_text("".join(json.dumps({"id": f"desk{i}", "mode": MODE, "turns": args.turns,
                                             "images": str(screens)}) + "\n" for i in range(4)))
        results = {path: run(path, folder / "runs", tasks, args) for path in args.paths.split(",")}
    print(f"{args.trajectories} trajectories × {args.turns} turns × {args.image_kb} KB screenshots, "
          f"{args.workers} workers × {args.loops} env loops, load {os.getloadavg()[0]:.1f} at the end")
    print("| path | records | callback p50 / p99 / max (ms) | gaps | dispatch gap p50 / p99 / max (ms) "
          "| batch wall (s) | turns MB/traj | images MB/traj |")
    print("|---|---|---|---|---|---|---|---|")
    for path, r in results.items():
        print(f"| {path} | {r['records']} | {r['cb_p50_ms']:.2f} / {r['cb_p99_ms']:.2f} / {r['cb_max_ms']:.2f} | "
              f"{r['gaps']} | {r['p50_ms']:.2f} / {r['p99_ms']:.2f} / {r['max_ms']:.2f} | "
              f"{r['wall_s']:.1f} | {r['turn_mb']:.2f} | {r['image_mb']:.1f} |")
    if {"old", "new"} <= set(results):
        old, new = results["old"], results["new"]
        print(f"dispatch gap p99 new/old: {new['p99_ms'] / old['p99_ms']:.3f} "
              f"({old['p99_ms'] / new['p99_ms']:.0f}× shorter)")
    if "new" in results:
        print(f"goal: dispatch gap p99 < 50 ms on the new path: {'met' if results['new']['p99_ms'] < 50 else 'NOT met'}")


if __name__ == "__main__":
    main()
