"""The README's trainer snippet runs as printed, as a user runs it (``python train.py``): only
the model server's address, the output folder and the number of steps change; the test's
local OpenAI-compatible server answers random moves."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import psutil

from llm_server import LLMServer
from parallel_rollout.results import read_records
from rl_support import random_moves

ROOT = Path(__file__).resolve().parents[2]


def trainer_snippet() -> str:
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("## For RL trainers", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def _start_trainer(tmp_path, server: LLMServer, call: str = "    main(steps=1, eval_every=1)\n") -> subprocess.Popen:
    """The README's snippet as ``train.py``, run as a user runs it (``python train.py``, in a
    session of its own, as a terminal's job), with only the server's address, the output
    folder and the call of ``main`` changed."""
    code = trainer_snippet()
    for printed in ('"http://127.0.0.1:8000/v1"', 'output_dir="results"', "    main()\n"):
        assert printed in code
    server.models.append("policy")  # the snippet's model: its first get_batch asks GET /models for it
    code = (code.replace("http://127.0.0.1:8000/v1", server.url)
            .replace('output_dir="results"', f"output_dir={str(tmp_path / 'results')!r}")
            .replace("    main()\n", call))
    (tmp_path / "train.py").write_text(code)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "train.py"], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _family(trainer: subprocess.Popen, until=lambda: False) -> dict[int, psutil.Process]:
    """Every process the trainer starts, watched till it exits (or ``until()``), to check they end."""
    family: dict[int, psutil.Process] = {}
    while trainer.poll() is None:
        try:
            family.update((p.pid, p) for p in psutil.Process(trainer.pid).children(recursive=True))
        except psutil.NoSuchProcess:
            pass
        if until():
            break
        time.sleep(0.2)
    return family


def test_the_readme_trainer_snippet_runs(tmp_path):
    server = LLMServer(policy=random_moves(seed=0)).start()
    trainer = _start_trainer(tmp_path, server)
    try:
        family = _family(trainer)
        out, err = trainer.communicate(timeout=60)
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait()
        server.stop()
    assert trainer.returncode == 0, err
    assert re.search(r"^step 0: val success \d\.\d\d$", out, re.M), out
    assert family, "the trainer started no worker"
    _, alive = psutil.wait_procs(list(family.values()), timeout=10)
    assert not alive, f"left running: {alive}"
    records = [r for r in read_records(tmp_path / "results" / "grpo" / "results.jsonl") if r["final"]]
    finals = Counter(r["meta"]["scheduler"] for r in records)
    assert finals["train-sibling1"] == 17  # every FrozenLake val task once
    assert finals["train"] >= 32  # a batch of 32 (async: more may have finished)
    train_tags = {r["meta"]["tag"] for r in records if r["meta"]["scheduler"] == "train"}
    assert train_tags == {"FrozenLake", "FrozenLakeSlippery"}



def test_a_ctrl_c_of_the_readme_trainer_in_get_batch_stops_everything_it_started(tmp_path):
    """Ctrl-C at the terminal (SIGINT to the trainer's whole process group) while its first
    get_batch waits on replies: the KeyboardInterrupt reaches the trainer's code, its
    ``finally: train.close()`` stops workers, their server and the pool's Manager, and the
    script exits, as the README says. A guard: this held already."""
    server = LLMServer(policy=lambda body: {**random_moves(seed=0)(body), "sleep": 0.5}).start()
    trainer = _start_trainer(tmp_path, server, call="    main()\n")
    try:
        family = _family(trainer, until=lambda: len(server.requests) >= 4)  # generation is under way
        assert trainer.poll() is None, trainer.communicate()
        os.killpg(trainer.pid, signal.SIGINT)
        out, err = trainer.communicate(timeout=60)
    finally:
        if trainer.poll() is None:
            os.killpg(trainer.pid, signal.SIGKILL)
            trainer.wait()
        server.stop()
    assert trainer.returncode != 0 and err.rstrip().endswith("KeyboardInterrupt"), err
    assert "get_batch" in err, err  # where the trainer was: waiting for its batch
    assert family, "the trainer started no worker"
    _, alive = psutil.wait_procs(list(family.values()), timeout=10)
    assert not alive, f"left running: {alive}"

def segments_snippet() -> dict:
    """The README's training-data helpers (tensors, grpo_advantages, train_loop), run as printed."""
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("### Training data: `segments()`", 1)[1]
    namespace: dict = {}
    exec(compile(re.search(r"```python\n(.*?)```", section, re.S).group(1), "README.md", "exec"), namespace)  # noqa: S102
    return namespace


def test_the_readme_advantages_leave_placeholders_out():
    """A group of 3 whose third member failed (failed_member="placeholder": reward 0, no
    turns): the README's grpo_advantages averaged the placeholder's 0 in (the mean 1/3, the
    real members +1.41 and -0.71), where the README says to mask it."""
    from types import SimpleNamespace

    from parallel_rollout.rl.segments import Segment

    snippet = segments_snippet()

    def member(reward, placeholder=False):
        rows = [] if placeholder else [Segment([1, 2, 3], [0, 1, 1], [0.0, -0.1, -0.2], [-1, 0, 0], [0])]
        return SimpleNamespace(reward=reward, placeholder=placeholder, segments=lambda: rows)

    batch = [member(1.0), member(0.0), member(0.0, placeholder=True),
             member(0.0, placeholder=True), member(0.0, placeholder=True), member(0.0, placeholder=True)]
    advantages = snippet["grpo_advantages"](batch, group_size=3)
    assert [round(a, 4) for a in advantages] == [1.0, -1.0, 0.0, 0.0, 0.0, 0.0]
    rows = snippet["tensors"](batch, advantages)
    assert rows["advantages"] == [[advantages[0]] * 3, [advantages[1]] * 3]  # no row for a placeholder
    assert snippet["tensors"](batch[3:], advantages[3:])["input_ids"] == []  # a batch of placeholders only
