"""What a trainer reads of its RolloutScheduler's engine is in its own words: the records its
run folder holds (results.jsonl's failures, events.jsonl's retries, a trajectory's ``record``),
the warnings the engine's thread logs, and the advice after the model server refused the
run's settings name the RunConfig's fields (``max_retries=1``, not ``--max-retries 1``) and
say what a trainer does (a new RolloutScheduler, get_batch again), not what a batch run does
(a new --run-id, a resume); a tag's task file that does not load names its TaskSet's fields
(``tag 'sums' runs mode 'gym' (its TaskSet's mode)``, not ``--mode gym``). The batch run's words are
tests/test_endpoint_refusals.py's and tests/test_tasks.py's."""

from __future__ import annotations

import json
import logging

import pytest

from llm_server import LLMServer
from parallel_rollout.errors import ConfigError, RolloutError
from parallel_rollout.rl import EnvManagerConfig
from rl_support import RIGHT, rl_config, tiny_lakes


@pytest.fixture
def server():
    """The local model server, whose every reply moves right."""
    server = LLMServer(policy=lambda body: RIGHT).start()
    yield server
    server.stop()


def _failed_batch(tmp_path, schedulers, answer: dict, raised: type[Exception], **config) -> tuple[str, list, list, str]:
    """The error the first get_batch raises against a server that answers every request
    ``answer``, the failure messages of the run folder's records and retry events, and the
    server's URL."""
    server = LLMServer(policy=lambda body: answer).start()
    try:
        train = schedulers(rl_config(tmp_path, server, num_rollouts=1, **config),
                           EnvManagerConfig(group_size=2, tags=["tiny"], task_sets=tiny_lakes(tmp_path, "tiny", 2)),
                           max_failed_groups=1, check_endpoint=False)
        with pytest.raises(raised) as caught:
            train.get_batch(batch_size=2, step=0, timeout=120)
    finally:
        server.stop()
    records = [json.loads(line) for line in (train.run_dir / "results.jsonl").read_text().splitlines()]
    events = [json.loads(line) for line in (train.run_dir / "events.jsonl").read_text().splitlines()]
    return (str(caught.value), [r["failure"]["message"] for r in records if r.get("failure")],
            [e["reason"] for e in events if e["event"] == "retry"], server.url)


def test_the_run_folders_failures_name_the_run_configs_fields(tmp_path, schedulers):
    """A server that answers 500 to everything, RunConfig(max_retries=1): get_batch's error
    said "(max_retries=1)", but each record of results.jsonl, and each retry in events.jsonl,
    that a trainer reads said the member gave up "(--max-retries 1)"."""
    error, failures, retries, _ = _failed_batch(tmp_path, schedulers, {"status": 500}, RolloutError, max_retries=1)
    assert "(max_retries=1)" in error
    assert failures and retries, (failures, retries)
    for said in failures + retries:
        assert "gave up after 2 requests for this turn (max_retries=1)" in said and "--" not in said, said


@pytest.mark.parametrize("status, message, advice", [
    (404, "The model `table` does not exist.",
     "give model a name its {url}/models lists or fix base_url and make a new RolloutScheduler with them (a "
     "scheduler's model and endpoint are fixed: close this one), or serve that model there and call get_batch again"),
    (401, "Invalid API key.",
     "set OPENAI_API_KEY to a key it accepts (one with access to this model), then close this RolloutScheduler and "
     "make a new one (its workers read the key as they start)"),
], ids=["model", "key"])
def test_a_refusal_tells_the_trainer_what_to_change(tmp_path, schedulers, status, message, advice):
    """A server that refuses the model (404) or the key (401): the ConfigError get_batch raises,
    and the records, told the trainer to go on "with a new run_id" and "resume", a batch run's
    ways; a scheduler's way is a new RolloutScheduler, or get_batch again once the model is served."""
    error, failures, _, url = _failed_batch(tmp_path, schedulers, {"status": status, "message": message}, ConfigError)
    assert failures
    for said in [error, *failures]:
        assert advice.format(url=url) in said, said
        assert "--" not in said and "resume" not in said and "run_id" not in said, said


def test_the_engine_threads_warnings_name_the_run_configs_fields(tmp_path, schedulers, caplog):
    """A fleet whose first server is gone: the warning that a trajectory left it, logged on the
    engine's thread, said "asked again after --server-cooldown 30s", a flag no trainer gives."""
    caplog.set_level(logging.WARNING, logger="parallel_rollout")
    gone = LLMServer().start()
    gone.stop()
    good = LLMServer(policy=lambda body: RIGHT).start()
    try:
        train = schedulers(rl_config(tmp_path, good, base_url=[gone.url, good.url], num_rollouts=1),
                           EnvManagerConfig(group_size=2, tags=["tiny"], task_sets=tiny_lakes(tmp_path, "tiny", 2)),
                           check_endpoint=False)
        train.get_batch(batch_size=2, step=0, timeout=120)
    finally:
        good.stop()
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"model server {gone.url} failed")]
    assert said and all("(asked again after server_cooldown " in s and "--" not in s for s in said), said


@pytest.mark.parametrize("asked, level", [(None, logging.INFO), (5, logging.WARNING)], ids=["plain", "cut"])
def test_the_concurrency_line_is_info_and_a_cut_a_warning(tmp_path, server, schedulers, caplog, asked, level):
    """A trainer at Python's default logging sees warnings only (``logging.lastResort``), as a
    caller of ``run()`` does (the CLI's console shows INFO too): the ``[Concurrency]`` line is
    INFO, unseen, as a batch run logs it, unless max_concurrent_rollouts was cut to the env loops,
    a warning it sees. A guard: this held already."""
    caplog.set_level(logging.INFO, logger="parallel_rollout")
    schedulers(rl_config(tmp_path, server, num_rollouts=1),
               EnvManagerConfig(group_size=2, tags=["tiny"], task_sets=tiny_lakes(tmp_path, "tiny", 2),
                                max_env_num_per_worker=2),
               **({} if asked is None else {"max_concurrent_rollouts": asked}))
    said = [(r.levelno, r.getMessage()) for r in caplog.records if "[Concurrency]" in r.getMessage()]
    assert [lvl for lvl, _ in said] == [level], said
    assert said[0][1].startswith("[Concurrency] Set max concurrent rollouts to 2"), said


def test_a_task_file_the_scheduler_cannot_load_names_the_task_sets_fields(tmp_path, server, schedulers):
    """A tag whose file holds math tasks under TaskSet("gym", …), and one whose data is a typo
    of a named dataset: the TaskFileError RolloutScheduler(...) raised said "the run is --mode
    gym" and "did you mean --data humaneval?", flags of a batch run where the trainer wrote a
    TaskSet (then "the run is TaskSet.mode='gym'", which names no tag). Nothing starts: no run
    folder."""
    from parallel_rollout.errors import TaskFileError
    from parallel_rollout.rl import TaskSet

    sums = tmp_path / "sums.jsonl"
    sums.write_text(json.dumps({"id": "s0", "mode": "math", "problem": "Compute $2 + 2$.", "answer": "4"}) + "\n")
    for task_set, said in [(TaskSet("gym", str(sums)), f"{sums}:1: task 's0' has mode 'math' but tag 'sums' "
                                                       "runs mode 'gym' (its TaskSet's mode)"),
                           (TaskSet("gym", "humanevl"), "did you mean TaskSet.data='humaneval'?")]:
        with pytest.raises(TaskFileError) as caught:
            schedulers(rl_config(tmp_path, server, num_rollouts=1),
                       EnvManagerConfig(group_size=2, tags=["sums"], task_sets={"sums": task_set}))
        assert said in str(caught.value) and "--" not in str(caught.value), str(caught.value)
    assert not (tmp_path / "out").exists()


def test_a_task_file_of_another_modes_tasks_names_the_tag(tmp_path, server, schedulers):
    """Every task of a tag's file names another mode than its TaskSet's: the load says so in
    one line, which was the batch run's ("which --mode gym cannot run: leave --mode out, or give
    --mode math") with its flags made fields ("leave TaskSet.mode='out'"): it named no tag."""
    from parallel_rollout.errors import TaskFileError
    from parallel_rollout.rl import TaskSet

    sums = tmp_path / "sums.jsonl"
    sums.write_text("".join(json.dumps({"id": f"s{n}", "mode": "math", "problem": "Compute $2 + 2$.", "answer": "4"})
                            + "\n" for n in range(2)))
    with pytest.raises(TaskFileError) as caught:
        schedulers(rl_config(tmp_path, server, num_rollouts=1),
                   EnvManagerConfig(group_size=2, tags=["sums"], task_sets={"sums": TaskSet("gym", str(sums))}))
    said = str(caught.value)
    assert said == (f"{sums}: its tasks are math tasks (each names its mode), but tag 'sums' runs mode 'gym' "
                    "(its TaskSet's mode)"), said
    assert not (tmp_path / "out").exists()


def test_a_task_folder_the_scheduler_cannot_load_says_taskset_data_in_its_words(tmp_path, server, schedulers):
    """A tag whose data is an empty folder, or a folder of task files: the loader's "--data takes
    …" and "give one of them: --data F" were rewritten into fields after the fact, and the words
    after the flag taken for its value: "TaskSet.data='takes' a task file …"."""
    from parallel_rollout.errors import TaskFileError
    from parallel_rollout.rl import TaskSet

    empty, files = tmp_path / "empty", tmp_path / "files"
    empty.mkdir()
    files.mkdir()
    (files / "tasks.jsonl").write_text(json.dumps({"id": "t0"}) + "\n")
    for folder, said in [(empty, "; TaskSet.data takes "), (files, f"give one of them: TaskSet.data={str(files / 'tasks.jsonl')!r}")]:
        with pytest.raises(TaskFileError) as caught:
            schedulers(rl_config(tmp_path, server, num_rollouts=1),
                       EnvManagerConfig(group_size=2, tags=["lakes"], task_sets={"lakes": TaskSet("gym", str(folder))}))
        assert said in str(caught.value) and "--" not in str(caught.value), str(caught.value)
    assert not (tmp_path / "out").exists()


def test_the_engines_stop_on_a_full_disk_names_the_run_configs_fields(tmp_path, server, schedulers):
    """results.jsonl on a full disk (/dev/full): get_batch's RolloutError said "the rollout
    engine stopped: cannot write …: No space left on device; … rerun with --resume", a flag
    where the trainer's way back is RunConfig(resume=True)."""
    train = schedulers(rl_config(tmp_path, server, num_rollouts=1),
                       EnvManagerConfig(group_size=2, tags=["tiny"], task_sets=tiny_lakes(tmp_path, "tiny", 2)))
    (train.run_dir / "results.jsonl").symlink_to("/dev/full")  # opened at the first record
    with pytest.raises(RolloutError) as caught:
        train.get_batch(batch_size=2, step=0, timeout=120)
    message = str(caught.value)
    assert message.startswith("the rollout engine stopped: cannot write ") and "No space left on device" in message
    assert "rerun with resume=True" in message and "--" not in message, message


def test_a_setting_the_engines_provider_refuses_names_the_run_configs_field(tmp_path, server, schedulers):
    """RunConfig(vm_memory_mb=8), too little for a process sandbox, checked as the engine makes
    its provider: the ConfigError RolloutScheduler(...) raised said "--vm-memory-mb 8 is too
    little for a sandbox", a flag the trainer never gave."""
    from parallel_rollout.errors import ConfigError
    from parallel_rollout.rl import TaskSet

    shell = tmp_path / "chores.jsonl"
    shell.write_text(json.dumps({"id": "c0", "mode": "shell", "instruction": "touch x", "check": "test -f x"}) + "\n")
    with pytest.raises(ConfigError) as caught:
        schedulers(rl_config(tmp_path, server, num_rollouts=1, envs_per_worker=1, vm_memory_mb=8),
                   EnvManagerConfig(group_size=2, tags=["chores"], task_sets={"chores": TaskSet("shell", str(shell))}))
    assert "vm_memory_mb=8 is too little for a sandbox" in str(caught.value), str(caught.value)
    assert "--" not in str(caught.value), str(caught.value)
