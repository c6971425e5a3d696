"""The RolloutScheduler in front of a VM pool (the process provider: bubblewrap sandboxes):
shell tasks in groups with a redundant member, solved by the test server's shell solver.
The spare that loses is cancelled and its VM released and reset; close() leaves no sandbox
and no process (the session's leak check looks after the test)."""

from __future__ import annotations

import shutil
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from llm_server import LLMServer, shell_solver
from parallel_rollout.results import read_records
from parallel_rollout.rl import EnvManagerConfig, RolloutScheduler, TaskSet
from rl_support import rl_config

SHELL_TASKS = Path(__file__).resolve().parents[2] / "benchmarks" / "shell_tasks.jsonl"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_groups_on_pooled_vms_cancel_the_spare_and_close_stops_every_vm(tmp_path):
    solver = shell_solver(SHELL_TASKS)
    seen = Counter()
    lock = threading.Lock()

    def one_member_slow(body):
        key = str(body["messages"][1]["content"])[:200]
        with lock:
            seen[key] += 1
            late = seen[key] == 1  # the first request of each task: that member is the slowest
        if late:
            time.sleep(3.0)
        return solver(body)

    server = LLMServer(policy=one_member_slow).start()
    try:
        config = rl_config(tmp_path, server, mode="shell", data=str(SHELL_TASKS), use_vm_pool=True, num_vms=2,
                           envs_per_worker=2, task_timeout=60.0)
        train = RolloutScheduler(config, EnvManagerConfig(
            num_env_groups=2, group_size=2, group_size_redundancy=1, tags=["files"],
            task_sets={"files": TaskSet("shell", str(SHELL_TASKS), tags=("files",), limit=2)}))
        try:
            batch = train.get_batch(batch_size=4, step=0)
            engine = train._shared.engine
            assert engine.pool_stats() is not None  # the pool runs: a shell tag needs VMs
            stats = train.stats()
        finally:
            train.close()
    finally:
        server.stop()
    assert len(batch) == 4 and all(t.reward == 1.0 and t.status == "success" for t in batch), \
        [(t.task_id, t.status) for t in batch]
    assert stats["members_cancelled"] >= 1
    records = read_records(train.run_dir / "results.jsonl")
    finals = Counter(r["key"] for r in records if r.get("final"))
    assert all(n == 1 for n in finals.values())
    assert {t.record["key"] for t in batch} <= set(finals)


def test_an_engine_that_cannot_start_leaves_no_gate_behind(tmp_path, monkeypatch):
    """The gate (a unix socket in its own temp folder) is made before the engine; when the
    engine cannot be made (an unknown provider for a shell tag) the error reaches the
    trainer and the gate is closed, its folder gone."""
    from parallel_rollout.errors import ConfigError
    from parallel_rollout import policy_gate as gate_module
    from parallel_rollout.rl import shared

    made = []

    class RecordedGate(gate_module.PolicyGate):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(shared, "PolicyGate", RecordedGate)
    config = rl_config(tmp_path, LLMServer(), mode="shell", data=str(SHELL_TASKS), provider_name="no-such-provider",
                       envs_per_worker=1)  # one loop per worker's VM: with more, a ConfigError of its own
    with pytest.raises(ConfigError, match="unknown provider 'no-such-provider'"):
        RolloutScheduler(config, EnvManagerConfig(tags=["shell"]))
    assert len(made) == 1
    assert not Path(made[0].path).parent.exists(), "the gate's socket folder was left behind"
