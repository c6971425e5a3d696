"""Weight updates with the model in the loop: sync, async with wait, abort-and-regenerate and
partial rollouts, side by side.

    python benchmarks/rl/weight_updates.py             # ~10 min on 2 cores
    python benchmarks/rl/weight_updates.py --steps 4   # quicker, noisier

One run, four schedulers in turn (each its own engine: spawned workers, the openai agent, the
gym mode's FrozenLake), against the local test server STREAMING tokens at a fixed rate per
request (``--token-rate``) with long-tailed reply lengths (log-normal, median ``--median``
tokens, capped at ``--max-tokens``). A reply is drawn from the conversation and the trajectory
(the agent's session header): the members of a group share a task and seed but sample replies
of their own lengths, as at temperature 1, and a continued reply ends as the whole one would.
Every mode runs the same trajectories, so the same work. Each mode first runs one whole
step (warm-up: the workers start, an async pipeline fills), then ``--steps`` measured ones.
A training step is a sleep as long as the mean generation of those same batches in a sync
calibration run (the trainer waiting in get_batch); then the weight update: ``suspend`` → a
sleep of ``--update`` seconds (the weights moving) → ``resume(step)``.

* **sync**: ratio 0, ``suspend()`` (nothing is in flight between batches).
* **wait**: ratio 1, ``suspend()`` waits for the requests in flight to finish (the long tail).
* **regenerate**: ratio 1, ``suspend(abort=True)``; the aborted turns start over.
* **partial**: ratio 1, ``suspend(abort=True)`` with ``partial_rollout=True``; the aborted
  turns continue from their tokens (continue-final-message).

Definitions: **batches/min** = steps / wall time from the first measured get_batch to the last
resume, × 60. **idle** = the trainer's time blocked in get_batch and suspend / wall time.
**wasted** = decode tokens thrown away by aborts (streamed to an aborted request and not
continued from) / all tokens the server streamed. **suspend p50/p99**: how long ``suspend``
took to return.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent.parent / "tests"
sys.path[:0] = [str(TESTS), str(TESTS / "rl")]  # the test server

from llm_server import LLMServer  # noqa: E402
from rl_support import lake_set, rl_config  # noqa: E402

from parallel_rollout.rl import EnvManagerConfig, RolloutScheduler  # noqa: E402

MOVES = ["Left", "Down", "Right", "Up"]
MODES = ("sync", "wait", "regenerate", "partial")


class TailModel:
    """Replies of long-tailed length, one character a token, the same for the same
    conversation of the same trajectory (so a continued reply ends as the whole one would, and
    the members of a group, which share a task and seed, still sample replies of their own
    lengths, as a model sampling at temperature 1 would); counts the tokens kept by
    continuations."""

    def __init__(self, median: int, cap: int) -> None:
        self.median, self.cap = median, cap
        self.continued_tokens = 0
        self._lock = threading.Lock()

    def reply(self, messages: list[dict], session: str = "") -> str:
        """The whole reply to a conversation (its messages up to the last user one) in one
        trajectory (``session``)."""
        key = hashlib.sha256(repr([session, *[(m["role"], m["content"]) for m in messages]]).encode()).digest()
        rng = random.Random(key)
        answer = f"<answer>{rng.choice(MOVES)}</answer>"
        length = min(self.cap, max(len(answer) + 1, int(self.median * math.exp(rng.gauss(0, 1.0)))))
        return "." * (length - len(answer)) + answer

    def __call__(self, body: dict) -> dict:
        messages = body["messages"]
        done = ""
        if body.get("continue_final_message"):
            messages, done = messages[:-1], messages[-1]["content"]
            with self._lock:
                self.continued_tokens += len(done)
        text = self.reply(messages, body.get("session", ""))[len(done):]
        return {"reply": text, "token_ids": [46] * len(text), "logprobs": [-0.1] * len(text),
                "prompt_token_ids": [1], "usage": {"prompt_tokens": 1, "completion_tokens": len(text)}}


class SessionServer(LLMServer):
    """The test server, its model told which trajectory each request belongs to (the agent's
    session header, one id per trajectory)."""

    def next_step(self, body: dict, authorization: str | None = None, headers: dict | None = None,
                  path: str | None = None) -> dict:
        """The model's step for ``body`` with its session id added."""
        session = (headers or {}).get("x-session-id", "")
        return super().next_step({**body, "session": session}, authorization, headers, path)


def run(mode: str, steps: int, train_s: float, folder: Path, server: LLMServer, model: TailModel,
        args) -> dict[str, float]:
    """One scheduler in ``mode``; the figures of the module docstring."""
    folder.mkdir(parents=True, exist_ok=True)
    config = rl_config(folder, server, run_id=mode, num_rollouts=args.workers, envs_per_worker=args.loops,
                       partial_rollout=mode == "partial", task_timeout=600.0)
    scheduler = RolloutScheduler(config, EnvManagerConfig(
        num_env_groups=args.groups, group_size=args.group_size, tags=["lakes"],
        task_sets=lake_set(folder, count=4, max_steps=3)), async_generation_ratio=0 if mode == "sync" else 1)
    abort = mode in ("regenerate", "partial")

    def train_step(step: int) -> tuple[float, float]:
        """One step as a trainer runs it: (seconds blocked in get_batch, in suspend)."""
        before = time.monotonic()
        scheduler.get_batch(batch_size=args.batch, step=step)
        waited = time.monotonic() - before
        time.sleep(train_s)  # the training step
        before = time.monotonic()
        scheduler.suspend(abort=abort)
        suspended = time.monotonic() - before
        time.sleep(args.update)  # the weights move to the inference server
        scheduler.resume(policy_version=step)
        return waited, suspended

    try:
        # Warm-up: the workers start, and one whole step, so what is measured is the steady
        # state of a long run. (An async run's first batch waits for a whole generation, as a
        # sync one's does: the pipeline fills once per run, not once per step.)
        train_step(0)
        streamed, aborts, continued = server.tokens_streamed, len(server.aborts), model.continued_tokens
        waits, suspends = [], []
        started = time.monotonic()
        for step in range(1, steps + 1):
            waited, suspended = train_step(step)
            waits.append(waited)
            suspends.append(suspended)
        wall = time.monotonic() - started
        dropped = scheduler.stats()["groups_dropped"]
    finally:
        scheduler.close()
    total = server.tokens_streamed - streamed
    aborted = sum(a["tokens"] for a in server.aborts[aborts:])
    wasted = max(0, aborted - (model.continued_tokens - continued))
    suspends.sort()
    return {"batches_per_min": steps / wall * 60, "idle": (sum(waits) + sum(suspends)) / wall, "wall_s": wall,
            "waited_mean": sum(waits) / len(waits), "dropped": dropped, "wasted": wasted / total if total else 0.0,
            "suspend_p50": suspends[len(suspends) // 2], "suspend_p99": suspends[min(len(suspends) - 1,
                                                                                    int(len(suspends) * 0.99))]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--groups", type=int, default=4, help="num_env_groups")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--loops", type=int, default=8, help="env loops per worker")
    parser.add_argument("--token-rate", type=float, default=50.0, help="tokens a second per request")
    parser.add_argument("--median", type=int, default=25, help="median reply length (tokens)")
    parser.add_argument("--max-tokens", type=int, default=250, help="the longest reply (tokens)")
    parser.add_argument("--update", type=float, default=0.2, help="seconds a weight update takes")
    args = parser.parse_args()
    model = TailModel(args.median, args.max_tokens)
    server = SessionServer(policy=model, token_rate=args.token_rate)
    # close() ends env loops mid-request: their reset connections are expected, not news
    server._httpd.handle_error = lambda request, address: None
    server.start()
    try:
        with tempfile.TemporaryDirectory(prefix="rl-bench-") as tmp:
            folder = Path(tmp)
            # the same batches as the runs (the same trajectories get the same replies): their
            # mean generation time, which a sync trainer's get_batch waits
            calibration = run("sync", args.steps, 0.0, folder / "calibrate", server, model, args)
            train_s = calibration["waited_mean"]
            print(f"one batch of {args.batch} takes {train_s:.2f} s to generate; the trainer's step sleeps as "
                  f"long, a weight update {args.update:.2f} s; load {os.getloadavg()[0]:.1f}")
            results = {mode: run(mode, args.steps, train_s, folder / mode, server, model, args) for mode in MODES}
    finally:
        server.stop()
    base = results["sync"]
    print(f"{'mode':>10} {'batches/min':>12} {'idle':>6} {'wasted':>7} {'suspend p50':>12} {'p99':>8} "
          f"{'dropped':>8} {'speed-up':>9}")
    for mode, row in results.items():
        print(f"{mode:>10} {row['batches_per_min']:>12.1f} {row['idle']:>6.0%} {row['wasted']:>7.1%} "
              f"{row['suspend_p50'] * 1000:>9.0f} ms {row['suspend_p99'] * 1000:>5.0f} ms {row['dropped']:>8} "
              f"{row['batches_per_min'] / base['batches_per_min']:>8.3f}x")
    print(f"load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
