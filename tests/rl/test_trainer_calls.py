"""The trainer's calls refused or ended cleanly instead of hanging, leaking or miscounting:
bad options before anything starts, a closed scheduler, a get_batch(-1) after a timeout, a
step that is no step, a get_batch behind the caller's own suspend(), get_batch from two threads at once."""

from __future__ import annotations

import re
import threading
import time
from collections import Counter

import pytest

from llm_server import LLMServer
from process_tree import fork_servers
from parallel_rollout.config import RunConfig
from parallel_rollout.errors import ConfigError
from parallel_rollout.rl import suspension
from parallel_rollout.rl import (BatchTimeout, EnvManagerConfig, RolloutScheduler, SchedulerClosed,
                                 SchedulerSuspended, drop_equal_rewards)
from rl_support import TINY, Switch, lake_set, rl_config
from table_policy import TablePolicy


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """One test server (its policy switchable) and one engine for the module's tests."""
    folder = tmp_path_factory.mktemp("rl-calls")
    switch = Switch(TablePolicy(seed=0))
    server = LLMServer(policy=switch).start()
    base = RolloutScheduler(rl_config(folder, server, num_rollouts=1, envs_per_worker=4),
                            EnvManagerConfig(tags=["FrozenLake"]), max_concurrent_rollouts=4, name="base")
    yield base, switch, folder
    base.close()
    server.stop()


@pytest.mark.parametrize("options, message", [
    ({"max_version_lag": -1}, "max_version_lag must be a whole number >= 0"),
    ({"stale_versions": "ignore"}, "stale_versions must be 'drop' or 'keep'"),
    ({"max_concurrent_rollouts": -1}, "max_concurrent_rollouts must be a whole number >= 1"),
    ({"max_concurrent_rollouts": 0}, "max_concurrent_rollouts must be a whole number >= 1"),
    ({"max_concurrent_rollouts": 2.5}, "max_concurrent_rollouts must be a whole number >= 1"),
    # taken, and the first get_batch failed with "ValueError: cannot convert float NaN to integer"
    ({"batch_partition": [float("inf")]}, "batch_partition weights must be positive finite numbers"),
    # groups of one member (the default group_size): every group was generated, then dropped
    ({"group_filter": drop_equal_rewards}, "group_filter=drop_equal_rewards drops every group of group_size=1"),
])
def test_a_bad_option_is_refused_before_the_engine_starts(tmp_path, options, message):
    server = LLMServer(policy=TablePolicy(seed=0)).start()
    try:
        with pytest.raises(ConfigError, match=message):
            RolloutScheduler(rl_config(tmp_path, server, num_rollouts=1), EnvManagerConfig(tags=["FrozenLake"]),
                             **options)
        assert not fork_servers()  # no worker was started
        assert not (tmp_path / "out").exists()  # nor a run folder made
    finally:
        server.stop()


def test_a_refused_sibling_leaves_nothing_and_a_closed_scheduler_refuses_every_call(tmp_path, table):
    _, server = table
    train = RolloutScheduler(rl_config(tmp_path, server, num_rollouts=1), EnvManagerConfig(tags=["FrozenLake"]))
    val_config = EnvManagerConfig(group_size=1, tags=["FrozenLake"])
    for options in ({"max_version_lag": -1}, {"stale_versions": "ignore"}, {"max_concurrent_rollouts": 2}):
        with pytest.raises(ConfigError):
            train.sibling(val_config, **options)
    assert train._shared.schedulers == [train]  # no half-made sibling listed
    train.close()  # closes cleanly (it raised AttributeError '_cond' with one listed)
    assert not fork_servers()
    with pytest.raises(SchedulerClosed):
        train.sibling(val_config)
    calls = {"get_batch": lambda: train.get_batch(-1, step=0), "get_batch(n)": lambda: train.get_batch(2, step=0),
             "suspend": train.suspend, "resume": lambda: train.resume(8),
             "load_state_dict": lambda: train.load_state_dict({})}
    for name, call in calls.items():
        with pytest.raises(SchedulerClosed):
            call()
    assert train.stats()["policy_version"] == 0  # the readers still answer; resume(8) changed nothing
    train.close()  # idempotent


def test_a_sibling_of_a_closed_engine_never_waits(tmp_path):
    """A sibling made before its engine closed (it was not told, say, as it joined meanwhile)
    still ends at once. A sibling generating ahead as the engine closed counts none of its
    groups running from then on, before its own close() (it counted them running for ever),
    and its checkpoint lists the stopped one to start again."""
    table, release = TablePolicy(seed=0), threading.Event()

    def held_on_the_long_lake(body):  # the "held" tag's lake (SFFFG) is never answered
        if "FFF" in str([m.get("content") for m in body.get("messages", [])]):
            release.wait(30)
        return table(body)

    server = LLMServer(policy=held_on_the_long_lake).start()
    train = RolloutScheduler(rl_config(tmp_path, server, num_rollouts=1), EnvManagerConfig(tags=["FrozenLake"]))
    try:
        ahead = train.sibling(EnvManagerConfig(num_env_groups=2, tags=["tiny", "held"], task_sets={
            **lake_set(tmp_path, name="tiny", desc=TINY, max_steps=2),
            **lake_set(tmp_path, name="held", desc=["SFFFG"], max_steps=2)}), async_generation_ratio=1, name="ahead")
        (done,) = ahead.get_batch(batch_size=1, step=0, timeout=60)
        assert done.tag == "tiny" and ahead.stats()["groups_running"] == 1  # the held one, ahead
        val = train.sibling(EnvManagerConfig(group_size=1, tags=["FrozenLake"]))
        train.close()
        assert ahead.stats()["groups_running"] == 0 and ahead.stats()["dropped_closed"] == 1
        assert [e["tag"] for e in ahead.state_dict()["unreturned"]] == ["held"]
    finally:
        release.set()
        train.close()
        server.stop()
    val._closed = False  # as if it had joined after close() told the others
    started = time.monotonic()
    with pytest.raises(SchedulerClosed, match="engine is closed"):
        val.get_batch(-1, step=0)
    assert time.monotonic() - started < 5


def test_validation_after_a_timeout_runs_each_task_once(engine):
    base, switch, folder = engine
    val = base.sibling(EnvManagerConfig(group_size=1, tags=["tiny"], task_sets=lake_set(
        folder, count=3, name="tiny", desc=TINY, max_steps=2)), name="val")
    try:
        second_moves, lock = [], threading.Lock()

        def one_episode_ends(body):  # every first move at once, one second move: one group done
            with lock:
                second = sum(m.get("role") == "user" for m in body["messages"]) > 1
                late = second and bool(second_moves)
                if second:
                    second_moves.append(body)
            return {"sleep": 3, "reply": "<answer>Right</answer>"} if late else {"reply": "<answer>Right</answer>"}

        switch.policy = lambda body: {"sleep": 1.5, "reply": "<answer>Right</answer>"}
        with pytest.raises(BatchTimeout, match="0 group"):
            val.get_batch(-1, step=0, timeout=0.5)
        switch.policy = one_episode_ends
        with pytest.raises(BatchTimeout, match="1 group"):
            val.get_batch(-1, step=0, timeout=2)
        switch.policy = lambda body: {"reply": "<answer>Right</answer>"}
        report = val.get_batch(-1, step=1, timeout=120)
        assert Counter(t.task_id for t in report) == Counter({"tiny0": 1, "tiny1": 1, "tiny2": 1}), \
            [t.trajectory_id for t in report]
        # every group a call that raised started is counted, those it finished and dropped too
        stats = val.stats()
        assert stats["dropped_abandoned"] == 6 and stats["groups_started"] == 9 == 3 + stats["groups_dropped"]
        assert [t.reward for t in report] == [1.0] * 3  # this call's episodes, not the timed-out ones
    finally:
        switch.policy = switch.default
        val.close()


def test_a_step_that_is_no_step_is_refused_and_changes_nothing(engine):
    base, _, folder = engine
    train = base.sibling(EnvManagerConfig(num_env_groups=1, group_size=1, tags=["FrozenLake"]), name="steps")
    try:
        train.get_batch(1, step=2, timeout=120)
        for bad, message in (("3", r"step must be a whole number >= 0, got '3' \(str\)"),
                             (-1, "step must be a whole number >= 0, got -1"), (True, "got True"),
                             (1, "step 1 is below the current step 2")):
            with pytest.raises(ConfigError, match=message):
                train.get_batch(1, step=bad)
            with pytest.raises(ConfigError, match=message):
                train.get_batch(-1, step=bad)
            assert train.stats()["step"] == 2
        train.get_batch(1, step=2, timeout=120)  # the same step again is a step
    finally:
        train.close()


def test_get_batch_behind_its_own_suspend_raises_and_a_timeout_says_the_gate_is_shut(engine, caplog, monkeypatch):
    base, _, _ = engine
    monkeypatch.setattr(suspension, "ORPHANED_WARN_S", 0.0)  # at once, not a minute after the suspend
    train = base.sibling(EnvManagerConfig(num_env_groups=1, group_size=1, tags=["FrozenLake"]), name="shut")
    try:
        train.suspend()
        started = time.monotonic()
        with pytest.raises(SchedulerSuspended, match="call resume"):
            train.get_batch(1, step=0)  # without the check: blocked for ever
        assert time.monotonic() - started < 1
        assert train.stats().get("groups_started", 0) == 0
        # another thread's get_batch waits (the suspending thread may resume); its timeout says why
        errors = []
        getter = threading.Thread(target=lambda: _catch(errors, lambda: train.get_batch(1, step=0, timeout=1)))
        getter.start()
        getter.join(30)
        assert errors and isinstance(errors[0], BatchTimeout), errors
        assert "the policy gate is suspended" in str(errors[0])
        train.resume(train.policy_version)
        assert len(train.get_batch(1, step=0, timeout=120)) == 1
        # a thread that suspended and ended, the resume to come from another (a controller's
        # thread per call): a new thread given its id again is not it, and its get_batch waits
        # for the resume (it raised SchedulerSuspended, "this thread suspended the policy gate")
        suspender = threading.Thread(target=train.suspend)
        suspender.start()
        suspender.join(30)
        got: list = []

        def get_in_a_thread_with_its_id(any_id: bool):
            if any_id or threading.get_ident() == suspender.ident:  # else another try
                got.append("started")
                _catch(errors, lambda: got.append(train.get_batch(1, step=0, timeout=120)))

        errors.clear()
        # its id comes back to the next thread made, unless another thread of the process (the
        # engine's, under load) took that stack first: then a new thread of another id, the same case
        for attempt in range(51):
            getter = threading.Thread(target=get_in_a_thread_with_its_id, args=(attempt == 50,))
            getter.start()
            getter.join(0.5)
            if got:
                break
        assert got
        # the suspending thread died without resume(): the waiting get_batch says so (it was
        # silent for ever), once, and stats() says since when and by which thread
        stats = train.stats()
        assert stats["suspended"] and stats["suspended_by"] == suspender.name, stats
        assert stats["suspended_by_alive"] is False and time.time() - 60 < stats["suspended_since"] <= time.time()
        warned = lambda: [r for r in caplog.records if "has ended without resume()" in r.getMessage()]  # noqa: E731
        for _ in range(100):
            if warned():
                break
            time.sleep(0.1)
        time.sleep(0.5)  # a few more polls of the waiting get_batch: no second warning before ORPHANED_REPEAT_S
        assert len(warned()) == 1 and suspender.name in warned()[0].getMessage(), caplog.text
        train.resume(train.policy_version)
        assert not train.stats()["suspended"] and train.stats()["suspended_since"] is None
        getter.join(120)
        assert not errors and len(got) == 2 and len(got[1]) == 1, errors
    finally:
        base.resume(base.policy_version)
        train.close()


def test_a_timeout_behind_a_gate_shut_by_an_ended_thread_names_that_thread(engine):
    """A weight-sync thread that suspended and died without resume() leaves the gate shut; the
    BatchTimeout said only "suspended", and the warning naming the thread comes a minute after
    the suspend, so a short timeout never told the trainer which thread to look at."""
    base, _, _ = engine
    train = base.sibling(EnvManagerConfig(num_env_groups=1, group_size=1, tags=["FrozenLake"]), name="orphaned")
    try:
        syncer = threading.Thread(target=train.suspend, name="weight-sync")
        syncer.start()
        syncer.join(30)
        with pytest.raises(BatchTimeout, match=r"suspended by thread 'weight-sync', which has ended without "
                                               r"resume\(policy_version\)"):
            train.get_batch(1, step=0, timeout=0.5)
        train.resume(train.policy_version)
        assert len(train.get_batch(1, step=0, timeout=120)) == 1  # the group the timeout left is handed out
    finally:
        base.resume(base.policy_version)
        train.close()


def test_a_suspend_timeout_that_is_no_timeout_is_refused_and_changes_nothing(engine):
    """suspend(timeout="5") was taken: it shut the gate (and, with requests in flight, failed
    with a TypeError), so no model request went out until a resume; nan waited for ever,
    True one second. Now each is a ConfigError before anything changes."""
    base, _, _ = engine
    train = base.sibling(EnvManagerConfig(num_env_groups=1, group_size=1, tags=["FrozenLake"]), name="suspend-args")
    try:
        for bad in ("5", -1, 0, float("nan"), True):
            with pytest.raises(ConfigError, match=r"suspend timeout must be a positive number of seconds or None"):
                train.suspend(timeout=bad)
            assert base._shared.gate.is_open
        assert len(train.get_batch(1, step=0, timeout=120)) == 1  # not behind a suspend of its own
    finally:
        train.close()


def test_a_suspend_abort_that_is_no_bool_is_refused_and_changes_nothing(engine):
    """suspend(abort="no") (a flag read from a config file as text) was taken as True: it shut
    the gate and ended every model request in flight at the server. Now a ConfigError naming
    abort as the trainer wrote it, before anything changes."""
    base, _, _ = engine
    train = base.sibling(EnvManagerConfig(num_env_groups=1, group_size=1, tags=["FrozenLake"]), name="abort-args")
    try:
        for bad in ("no", "False", None, 2):
            with pytest.raises(ConfigError, match=rf"suspend abort must be True or False, got {re.escape(repr(bad))}"):
                train.suspend(abort=bad)
            assert base._shared.gate.is_open
        assert len(train.get_batch(1, step=0, timeout=120)) == 1  # not behind a suspend of its own
    finally:
        if not base._shared.gate.is_open:
            train.resume(train.policy_version)
        train.close()


def test_a_metrics_prefix_that_is_no_str_is_refused_naming_prefix(engine):
    """metrics(prefix=None) raised Python's "unsupported operand type(s) for +: 'NoneType' and
    'str'" after a batch (and returned {} before one), naming no argument."""
    base, _, _ = engine
    train = base.sibling(EnvManagerConfig(num_env_groups=1, group_size=1, tags=["FrozenLake"]), name="metrics-args")
    try:
        for when in ("before a batch", "after one"):
            for bad in (None, 1, b"val/"):
                with pytest.raises(ConfigError, match=rf"metrics prefix must be a str, got {re.escape(repr(bad))}"):
                    train.metrics(prefix=bad)
            if when == "before a batch":
                assert len(train.get_batch(1, step=0, timeout=120)) == 1
        assert train.metrics(prefix="val/") and all(key.startswith("val/") for key in train.metrics(prefix="val/"))
    finally:
        train.close()


def test_get_batch_from_two_threads_at_once_takes_turns(engine):
    """Two threads of a trainer ask one synchronous scheduler for batches of different sizes at
    once: each gets its own whole batch. The calls shared the scheduler's state, and the one
    that returned first stopped generation for the other, left waiting with no group running."""
    base, switch, folder = engine
    train = base.sibling(EnvManagerConfig(num_env_groups=2, group_size=2, tags=["tiny"], task_sets=lake_set(
        folder, count=4, name="tiny", desc=TINY, max_steps=2)), name="two-threads", async_generation_ratio=0)
    release = threading.Event()

    def held(body):  # every reply waits until both calls are under way
        release.wait(30)
        return {"reply": "<answer>Right</answer>"}

    switch.policy = held
    results, errors = {}, []
    try:
        big = threading.Thread(target=lambda: _catch(errors, lambda: results.update(
            big=train.get_batch(4, step=0, timeout=20))))
        big.start()
        deadline = time.monotonic() + 30
        while train.stats().get("groups_started", 0) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        late = []  # a call that waits its turn longer than its timeout says so
        _catch(late, lambda: train.get_batch(2, step=0, timeout=0.3))
        assert len(late) == 1 and isinstance(late[0], BatchTimeout), late
        assert "waiting for the get_batch another thread is making" in str(late[0])
        small = threading.Thread(target=lambda: _catch(errors, lambda: results.update(
            small=train.get_batch(2, step=0, timeout=20))))
        small.start()
        time.sleep(0.3)  # the small call is in before any group of the big one completes
        release.set()
        big.join(60)
        small.join(60)
        assert not errors, errors
        assert len(results["big"]) == 4 and len(results["small"]) == 2
        ids = [t.trajectory_id for batch in results.values() for t in batch]
        assert len(set(ids)) == 6, ids  # no trajectory handed out twice
        assert train.stats()["groups_returned"] == 3
    finally:
        release.set()
        switch.policy = switch.default
        train.close()


ROGUE_AGENT = """#!/usr/bin/env python3
import glob, json, socket, sys
held = []
for line in sys.stdin:
    for path in glob.glob("/tmp/pr-gate-*/gate.sock") if not held else []:
        try:  # a request "in flight" that never ends
            sock = socket.socket(socket.AF_UNIX)
            sock.connect(path)
            sock.sendall(b"begin\\n")
            held.append(sock)
        except OSError as exc:
            print(f"{path}: {exc}", file=sys.stderr, flush=True)
    print(json.dumps("<answer>Right</answer>"), flush=True)
"""


def test_a_command_agent_cannot_hold_the_policy_gate(tmp_path):
    """A command agent's program (sandboxed, the runner's user) found the scheduler's policy
    gate socket in the temp folder and said "begin" there without an "end": a request the
    gate counted in flight for ever, so the trainer's suspend() never returned. The gate's
    folder is hidden from it, as the runner's other sockets are."""
    agent = tmp_path / "rogue.py"
    agent.write_text(ROGUE_AGENT)
    agent.chmod(0o755)
    config = RunConfig(mode="gym", data="frozenlake", agent="command", agent_cmd=str(agent), num_rollouts=1,
                       envs_per_worker=1, output_dir=str(tmp_path / "out"), progress=False, task_timeout=60.0)
    train = RolloutScheduler(config, EnvManagerConfig(group_size=1, tags=["tiny"], task_sets=lake_set(
        tmp_path, name="tiny", desc=TINY, max_steps=3)))
    try:
        (trajectory,) = train.get_batch(1, step=0, timeout=120)
        assert trajectory.status == "success", trajectory.record
        gate = train._shared.gate
        assert gate.requests == 0 and gate.in_flight == 0  # the agent's program made no request there
        train.suspend(timeout=10)  # TimeoutError: 1 model request(s) still in flight
        train.resume(1)
    finally:
        train.close()


def _catch(errors, call):
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the test looks at it
        errors.append(exc)


def test_a_ctrl_c_as_get_batch_hands_its_groups_to_the_engine_loses_no_member(engine, monkeypatch):
    """A Ctrl-C that lands while get_batch hands the members of the groups it started to the
    engine: those not handed yet were never run, their groups stayed running for ever, and
    every later get_batch waited on them (BatchTimeout, or for ever). Now every call is made
    before the Ctrl-C is raised, a member the engine had taken just before it once only."""
    from parallel_rollout.results import read_records

    base, switch, folder = engine
    switch.policy = lambda body: {"reply": "<answer>Right</answer>"}
    train = base.sibling(EnvManagerConfig(group_size=2, num_env_groups=2, tags=["ctrl-c-lake"],
                                          task_sets=lake_set(folder, 2, name="ctrl-c-lake", desc=TINY)), name="ctrl-c")
    shared_engine = base._shared.engine
    real, calls = shared_engine.submit, []

    def submit(item, on_final):
        calls.append(item.key)
        if len(calls) == 2:  # the engine took it, then the Ctrl-C
            real(item, on_final)
            raise KeyboardInterrupt
        if len(calls) == 4:  # the Ctrl-C before the engine took it
            raise KeyboardInterrupt
        return real(item, on_final)

    monkeypatch.setattr(shared_engine, "submit", submit)
    try:
        with pytest.raises(KeyboardInterrupt):
            train.get_batch(batch_size=4, step=0)
        monkeypatch.undo()
        batch = train.get_batch(batch_size=4, step=0, timeout=60)
        assert len(batch) == 4 and len({t.group_id for t in batch}) == 2
        finals = [r["key"] for r in read_records(train.run_dir / "results.jsonl")
                  if r["key"].startswith("ctrl-c:") and r.get("final")]
        assert sorted(finals) == sorted(t.record["key"] for t in batch)  # each member ran once
    finally:
        train.close()
        switch.policy = switch.default


@pytest.mark.parametrize("field", ["stream", "n", "messages"])
def test_a_sampling_field_the_agent_sends_is_refused_in_the_schedulers_words(engine, field):
    """RolloutScheduler(sampling={"stream": False}) and a sibling's sampling= said "--sampling
    cannot set stream", the flag of a batch run, to a trainer that gave a keyword."""
    base, _, _ = engine
    config = EnvManagerConfig(num_env_groups=1, group_size=1, tags=["FrozenLake"])
    with pytest.raises(ConfigError) as caught:
        base.sibling(config, name=f"sampling-{field}", sampling={field: 1})
    assert str(caught.value) == f"sampling cannot set {field}: the agent sends it itself"
    with pytest.raises(ConfigError) as caught:
        RolloutScheduler(base.run_config, config, sampling={"temperature": 0, field: 1})
    assert str(caught.value) == f"sampling cannot set {field}: the agent sends it itself"


def test_a_sampling_max_new_tokens_is_refused_naming_max_tokens(engine):
    """ROLL's generating_args (and Hugging Face's generate) bound a reply by max_new_tokens; an
    OpenAI-compatible server reads max_tokens and ignores a field it does not know (vLLM logs
    it, SGLang says nothing): a trainer's sampling={"max_new_tokens": 64} went into every
    request body and every reply ran to the server's own limit."""
    base, _, _ = engine
    config = EnvManagerConfig(num_env_groups=1, group_size=1, tags=["FrozenLake"])
    with pytest.raises(ConfigError) as caught:
        base.sibling(config, name="sampling-max-new-tokens", sampling={"temperature": 0, "max_new_tokens": 64})
    assert str(caught.value) == ("sampling: max_new_tokens is not read by an OpenAI-compatible server (vLLM and "
                                 "SGLang ignore it, and the reply runs to their own limit): give max_tokens")
