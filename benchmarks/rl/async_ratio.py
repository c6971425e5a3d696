"""Batches per minute and the trainer's idle fraction for async_generation_ratio 0, 1 and 2.

    python benchmarks/rl/async_ratio.py            # ~2 min on 2 cores
    python benchmarks/rl/async_ratio.py --steps 4  # quicker, noisier

One run, three schedulers in turn (each its own engine: spawned workers, the openai agent,
the gym mode's FrozenLake), all against the table policy of the tests served by the local
OpenAI-compatible test server with a fixed delay per request (a model's latency). The
trainer's step is a sleep as long as generating one batch took in a calibration round at
ratio 0, so with ratio 0 the trainer waits about half the time, and with ratio ≥ 1 the next
batch is generated while it trains: batches per minute should approach 2× (published async
gains: 2.2-2.8× for ROLL Flash and AReaL, with longer tails than here).

Definitions: **batches/min** = steps / wall time from the first get_batch call to the last
return, × 60. **idle** = time the trainer spent blocked in get_batch / that wall time.
Printed as a table and as ratios against ratio 0.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent.parent / "tests"
sys.path[:0] = [str(TESTS), str(TESTS / "rl")]  # the test server and its table policy

from llm_server import LLMServer  # noqa: E402
from rl_support import lake_set, rl_config  # noqa: E402
from table_policy import TablePolicy  # noqa: E402

from parallel_rollout.rl import EnvManagerConfig, RolloutScheduler  # noqa: E402


def run(ratio: int, steps: int, train_s: float, folder: Path, server: LLMServer, args) -> dict[str, float]:
    """One scheduler at ``ratio``: (batches/min, idle fraction, wall)."""
    folder.mkdir(parents=True, exist_ok=True)
    config = rl_config(folder, server, run_id=f"ratio{ratio}", num_rollouts=args.workers,
                       envs_per_worker=args.loops)
    scheduler = RolloutScheduler(config, EnvManagerConfig(
        num_env_groups=args.groups, group_size=args.group_size, tags=["lakes"],
        task_sets=lake_set(folder, count=4)), async_generation_ratio=ratio)
    try:
        scheduler.get_batch(batch_size=args.batch, step=0)  # warm-up: workers up, first batch
        waited = 0.0
        started = time.monotonic()
        for step in range(1, steps + 1):
            before = time.monotonic()
            scheduler.get_batch(batch_size=args.batch, step=step)
            waited += time.monotonic() - before
            time.sleep(train_s)  # the training step
            scheduler.suspend()
            scheduler.resume(policy_version=step)
        wall = time.monotonic() - started
        dropped = scheduler.stats()["groups_dropped"]
    finally:
        scheduler.close()
    return {"batches_per_min": steps / wall * 60, "idle": waited / wall, "wall_s": wall, "dropped": dropped}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--groups", type=int, default=8, help="num_env_groups")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--loops", type=int, default=8, help="env loops per worker")
    parser.add_argument("--delay", type=float, default=0.02, help="seconds per model request")
    args = parser.parse_args()
    server = LLMServer(policy=TablePolicy(seed=0, delay_s=args.delay))
    # close() kills env loops mid-request: their reset connections are expected, not news
    server._httpd.handle_error = lambda request, address: None
    server.start()
    try:
        with tempfile.TemporaryDirectory(prefix="rl-bench-") as tmp:
            folder = Path(tmp)
            calibration = run(0, 3, 0.0, folder / "calibrate", server, args)
            train_s = 60 / calibration["batches_per_min"]
            print(f"one batch of {args.batch} takes {train_s:.2f} s to generate; the trainer's step "
                  f"sleeps as long")
            results = {ratio: run(ratio, args.steps, train_s, folder / f"r{ratio}", server, args)
                       for ratio in (0, 1, 2)}
    finally:
        server.stop()
    base = results[0]
    print(f"{'ratio':>5} {'batches/min':>12} {'idle':>6} {'wall s':>7} {'dropped':>8} "
          f"{'speed-up':>9} {'idle vs r0':>10}")
    for ratio, row in results.items():
        print(f"{ratio:>5} {row['batches_per_min']:>12.1f} {row['idle']:>6.0%} {row['wall_s']:>7.1f} "
              f"{row['dropped']:>8} {row['batches_per_min'] / base['batches_per_min']:>8.2f}x "
              f"{row['idle'] / base['idle'] if base['idle'] else 0:>9.2f}x")
    # At ratio 0 a step is generate (G) then train (T); overlapped it is max(G, T).
    generate_s = base["wall_s"] / args.steps - train_s
    print(f"at ratio 0 a batch took {generate_s:.2f} s to generate and the trainer {train_s:.2f} s: "
          f"full overlap would give {(generate_s + train_s) / max(generate_s, train_s):.2f}x")


if __name__ == "__main__":
    main()
