"""EnvManagerConfig: every bad value is a clear error naming the field; the partition of
groups over tags; what a tag stands for (built-in set, mode + --data, TOML task sets). The
RunConfig a scheduler is given is checked as run() checks its settings, and a trainer script
without a main guard is refused as run() refuses one."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest

from parallel_rollout.config import RunConfig, load_toml
from parallel_rollout.errors import ConfigError
from parallel_rollout.rl.config import EnvManagerConfig, TaskSet, load_task_sets, load_tasks_of, resolve_task_set


@pytest.mark.parametrize("kwargs, message", [
    ({"group_size": 0}, "group_size must be a whole number of at least 1"),
    ({"group_size": 2.5}, "group_size must be"),
    ({"group_size_redundancy": -1}, "group_size_redundancy must be 0 or more"),
    ({"num_env_groups": 0}, "num_env_groups must be"),
    ({"max_env_num_per_worker": 0}, "max_env_num_per_worker must be"),
    ({"tags": "FrozenLake"}, "tags must be a non-empty list"),
    ({"tags": ["a", "a"]}, "tags names a twice"),
    ({"num_env_groups": 8, "tags": ["a", "b"], "num_groups_partition": [4, 3]},
     r"num_groups_partition \[4, 3\] sums to 7, not num_env_groups=8"),
    ({"num_env_groups": 8, "tags": ["a", "b"], "num_groups_partition": [8]},
     "has 1 entries for 2 tags"),
    ({"tags": ["a"], "num_groups_partition": [-1]}, "list of counts >= 1"),
    ({"tags": ["a", "b"], "num_groups_partition": [0, 0]}, "list of counts >= 1"),
    ({"tags": ["a", "b"], "num_groups_partition": [2, 0]}, "list of counts >= 1"),
    # a path where the TaskSet goes: an AttributeError ('str' object has no attribute 'mode')
    ({"tags": ["lakes"], "task_sets": {"lakes": "lakes.jsonl"}},
     r"^EnvManagerConfig.task_sets\['lakes'\] must be a parallel_rollout.rl.TaskSet\(mode, data\), "
     r"got str 'lakes.jsonl'"),
    ({"task_sets": [TaskSet("gym", "frozenlake")]}, "task_sets must be a dict of tag -> TaskSet"),
])
def test_bad_values_name_the_field(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        EnvManagerConfig(**kwargs).check()



def test_numpy_counts_in_the_env_config_are_taken_as_the_whole_numbers_they_are(tmp_path, table, schedulers):
    """A trainer that computes its counts with numpy (group_size=np.int64(2)) was told
    "group_size must be a whole number of at least 1, got np.int64(2)", where step, seed,
    policy_version and batch_size take numpy's integers; so were the scheduler's own bounds
    (max_concurrent_rollouts=np.int64(4): "must be a whole number >= 1 or None"). They are taken
    as ints, so what the scheduler reports of them (stats(), state_dict()) is JSON as before."""
    import json

    import numpy as np

    from rl_support import rl_config

    _, server = table
    config = EnvManagerConfig(num_env_groups=np.int64(2), group_size=np.int32(2), group_size_redundancy=np.int64(0),
                              tags=["FrozenLake", "FrozenLakeSlippery"], num_groups_partition=[np.int64(1), np.int64(1)],
                              max_env_num_per_worker=np.int16(2))
    train = schedulers(rl_config(tmp_path, server), config, max_concurrent_rollouts=np.int64(4),
                       max_failed_groups=np.int64(3), max_filtered_groups=np.int64(2), max_version_lag=np.int64(1))
    batch = train.get_batch(batch_size=np.int64(4), step=0)
    assert type(train.stats()["concurrency"]) is int and train.stats()["concurrency"] == 4
    assert len(batch) == 4 and len({t.group_id for t in batch}) == 2
    assert json.loads(json.dumps(train.stats()))["partition"] == {"FrozenLake": 1, "FrozenLakeSlippery": 1}
    json.dumps(train.state_dict())
    assert type(config.group_size) is int and all(type(n) is int for n in config.num_groups_partition)
    for bad in (np.float64(2.0), np.int64(0), np.bool_(True)):
        with pytest.raises(ConfigError, match="group_size must be a whole number of at least 1"):
            EnvManagerConfig(group_size=bad).check()

def test_partition_even_split_and_given():
    config = EnvManagerConfig(num_env_groups=8, tags=["a", "b", "c"])
    assert config.partition(["a", "b", "c"], 8) == {"a": 3, "b": 3, "c": 2}
    given = EnvManagerConfig(num_env_groups=8, tags=["a", "b"], num_groups_partition=[6, 2])
    given.check()
    assert given.partition(["a", "b"], 8) == {"a": 6, "b": 2}
    assert EnvManagerConfig(group_size=4, group_size_redundancy=2).members == 6


def test_tags_resolve_to_task_sets(tmp_path):
    config = EnvManagerConfig(task_sets={"mine": TaskSet("gym", "frozenlake", tags=("8x8",))})
    assert resolve_task_set("FrozenLake", config, "shell", None).mode == "gym"
    assert resolve_task_set("math", config, "math", "m.jsonl") == TaskSet("math", "m.jsonl")
    with pytest.raises(ConfigError, match="tag 'math' is a mode's name.*RunConfig.mode is 'gym'"):
        resolve_task_set("math", config, "gym", "frozenlake")
    with pytest.raises(ConfigError, match="unknown tag 'nope'.*task_sets"):
        resolve_task_set("nope", config, "gym", None)
    lakes = load_tasks_of("mine", config.task_sets["mine"])
    assert lakes and all("8x8" in t.tags for t in lakes)
    plain = load_tasks_of("FrozenLake", resolve_task_set("FrozenLake", config, "gym", None))
    assert len(plain) == 17 and all("4x4" in t.tags and not t.get("is_slippery") for t in plain)
    with pytest.raises(ConfigError, match="no task of frozenlake carries"):
        load_tasks_of("x", TaskSet("gym", "frozenlake", tags=("16x16",)))
    # a limit made in Python is checked as a TOML table's: -1 took every task but the last, 0 all
    assert len(load_tasks_of("x", TaskSet("gym", "frozenlake", tags=("4x4",), limit=2))) == 2
    for limit in (-1, 0, 1.5, "2", True):
        with pytest.raises(ConfigError, match=r"tag 'x': TaskSet.limit must be a whole number >= 1 or None"):
            load_tasks_of("x", TaskSet("gym", "frozenlake", tags=("4x4",), limit=limit))
    with pytest.raises(ConfigError, match=r"TaskSet.tags must be a tuple of tag names \(one tag: \('8x8',\)\)"):
        load_tasks_of("x", TaskSet("gym", "frozenlake", tags=("8x8")))  # a string: "no task carries ['8', 'x', '8']"


def test_task_sets_from_the_toml_config(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('num-rollouts = 2\n[task_sets.lakes]\nmode = "gym"\ndata = "frozenlake"\ntags = ["8x8"]\nlimit = 2\n')
    assert load_toml(path) == {"num_rollouts": 2}  # the batch config ignores the table
    assert load_task_sets(path) == {"lakes": TaskSet("gym", "frozenlake", ("8x8",), 2)}
    path.write_text('[task_sets.lakes]\ndata = "frozenlake"\n')
    with pytest.raises(ConfigError, match=r"\[task_sets.lakes\]: 'mode' \(a string\) is required"):
        load_task_sets(path)
    path.write_text('[task_sets.lakes]\nmode = "gym"\nsize = 3\n')
    with pytest.raises(ConfigError, match="unknown key.*size"):
        load_task_sets(path)



def test_a_scheduler_of_a_mode_without_data_says_what_to_give(tmp_path):
    """RolloutScheduler(RunConfig(mode="gym", …)), with no data and no tags (the mode is then
    the only tag): the error said "define it in EnvManagerConfig.task_sets={'gym':
    TaskSet('gym', 'tasks.jsonl')}", about a tag the trainer never wrote, in the CLI's --data;
    it now names RunConfig(data=…) with the mode's datasets and its built-in tags, and either
    fix it names starts."""
    from parallel_rollout.rl import RolloutScheduler

    config = dict(mode="gym", agent="openai", base_url="http://127.0.0.1:9/v1", model="m", num_rollouts=1,
                  output_dir=str(tmp_path / "out"), progress=False)
    with pytest.raises(ConfigError) as refused:
        RolloutScheduler(RunConfig(**config))
    message = str(refused.value)
    assert "EnvManagerConfig.tags is unset" in message and "RunConfig(data=...)" in message, message
    datasets = re.search(r"named datasets of gym: ([\w, -]+)\)", message).group(1).split(", ")
    tags = re.search(r"built-in tags of gym: ([\w, ]+)\)", message).group(1).split(", ")
    assert "frozenlake" in datasets and "FrozenLake" in tags, message
    assert not (tmp_path / "out").exists()
    for fixed in (RunConfig(**config, data=datasets[0]), RunConfig(**config)):  # each fix it names
        with RolloutScheduler(fixed, EnvManagerConfig(tags=None if fixed.data else tags[:1])) as scheduler:
            assert scheduler.tags == ([fixed.mode] if fixed.data else tags[:1])

@pytest.mark.parametrize("tag, builtin", [("math", ""), ("gym", ", or a built-in tag of gym: FrozenLake, ")])
def test_a_tag_of_another_mode_is_refused_in_the_schedulers_terms(tmp_path, schedulers, tag, builtin):
    """The error said "the run config is --mode math with --data None": CLI flags a trainer
    never typed, about a RunConfig it made in Python. It names the field and the tag now."""
    config = RunConfig(mode="math" if tag == "gym" else "gym", data=None, agent="openai", base_url="http://127.0.0.1:9/v1",
                       model="m", num_rollouts=1, output_dir=str(tmp_path / "out"), progress=False)
    with pytest.raises(ConfigError) as refused:
        schedulers(config, EnvManagerConfig(tags=["FrozenLake", tag]))
    message = str(refused.value)
    assert message.startswith(f"EnvManagerConfig.tags: tag {tag!r} is a mode's name, which stands for that mode with "
                              f"RunConfig.data, but RunConfig.mode is {config.mode!r} (data None); define the tag's "
                              f"tasks in EnvManagerConfig(task_sets={{{tag!r}: TaskSet({tag!r}, 'tasks.jsonl')}})"
                              f"{builtin}"), message
    assert message.endswith(f"or give RunConfig(mode={tag!r}, data=...)") and "--" not in message, message
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("changes, message", [
    ({"num_rollouts": 0}, "RunConfig: num_rollouts must be at least 1"),
    ({"task_timeout": -1}, "RunConfig: task_timeout must be positive"),
    ({"max_retries": -1}, "RunConfig: max_retries must be 0 or more"),
    ({"num_rollouts": "2"}, "RunConfig: num_rollouts must be an integer, got '2'"),
    ({"task_timeout": "60"}, "RunConfig: task_timeout must be a number, got '60'"),
    ({"agent": "nomod:X"}, "RunConfig: agent 'nomod:X': cannot import module 'nomod'"),
    ({"agent": "client_agents:HalfAgent"}, "RunConfig: agent 'client_agents:HalfAgent': HalfAgent in "
                                           "client_agents cannot be made: it does not define act"),
    ({"agent": "client_agents:TokenizerArgAgent"}, "RunConfig: agent 'client_agents:TokenizerArgAgent': "
                                                   "TokenizerArgAgent in client_agents cannot be made: the run makes "
                                                   "it as TokenizerArgAgent(config)"),
])
def test_a_scheduler_refuses_the_run_config_run_would_refuse_naming_the_field(tmp_path, schedulers, changes, message):
    """Each was accepted and then spun: num_rollouts=0 started no worker (get_batch waited for
    ever), task_timeout=-1 killed every attempt at once, an agent that does not import failed
    ten groups that asked whether the endpoint was up, and num_rollouts='2' raised a raw
    TypeError. Each names the RunConfig's field, not the CLI's flag (--num-rollouts)."""
    config = RunConfig(**{"mode": "gym", "data": "frozenlake", "agent": "openai", "base_url": "http://127.0.0.1:9/v1",
                          "model": "m", "num_rollouts": 1, "output_dir": str(tmp_path / "out"), "progress": False,
                          **changes})
    with pytest.raises(ConfigError, match=re.escape(message)):
        schedulers(config, EnvManagerConfig(group_size=2, tags=["FrozenLake"]))
    assert not (tmp_path / "out").exists()  # refused before anything started


TRAINER = textwrap.dedent("""\
    from parallel_rollout.config import RunConfig
    from parallel_rollout.rl import EnvManagerConfig, RolloutScheduler

    train = RolloutScheduler(RunConfig(mode="gym", data="frozenlake", agent="openai", model="m",
                                       base_url="http://127.0.0.1:9/v1", num_rollouts=2, output_dir={out!r}),
                             EnvManagerConfig(group_size=2, tags=["FrozenLake"]))
    print("BATCH", len(train.get_batch(batch_size=2, step=0, timeout=30)))
""")


def test_a_trainer_script_without_a_main_guard_gets_one_clear_error_and_no_folder(tmp_path):
    """As run() refuses one (tests/test_api_life.py): the workers' server and the pool's Manager
    import the script again, where the scheduler would start a second engine of its own."""
    script = tmp_path / "train.py"
    script.write_text(TRAINER.format(out=str(tmp_path / "out")))
    done = subprocess.run([sys.executable, str(script)], cwd=str(tmp_path), capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 1, done.stderr[-3000:]
    assert f"RolloutScheduler() is called at the top level of {script}:4" in done.stderr, done.stderr[-3000:]
    assert 'put the call under `if __name__ == "__main__":`' in done.stderr
    assert "bootstrapping phase" not in done.stderr and "EOFError" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_numpy_numbers_in_the_run_config_are_taken_as_run_takes_them(tmp_path, table, schedulers):
    """RunConfig(num_rollouts=np.int64(2)) passes RunConfig's own checks, but the scheduler's
    check of the settings its tags use compared each given value with ``()``: numpy's
    comparison gave an empty array, and RolloutScheduler(...) raised numpy's "The truth value
    of an empty array is ambiguous" instead of starting."""
    import json

    import numpy as np

    from rl_support import rl_config

    _, server = table
    train = schedulers(rl_config(tmp_path, server, num_rollouts=np.int64(2), envs_per_worker=np.int64(1),
                                 max_retries=np.int64(1), task_timeout=np.float64(120.0)),
                       EnvManagerConfig(group_size=2, tags=["FrozenLake"]))
    batch = train.get_batch(batch_size=4, step=0)
    assert len(batch) == 4 and all(t.status in ("success", "failure") for t in batch), [t.status for t in batch]
    assert type(train.stats()["concurrency"]) is int and json.loads(json.dumps(train.stats()))["concurrency"] == 2
    with pytest.raises(ConfigError, match="num_rollouts must be at least 1"):
        schedulers(rl_config(tmp_path, server, num_rollouts=np.int64(0)), EnvManagerConfig(tags=["FrozenLake"]))


@pytest.mark.parametrize("tag, meant", [("FrozenLak", "FrozenLake"), ("frozenlake", "FrozenLake"),
                                        ("SimpleSokoban8", "SimpleSokoban"), ("lake", "lakes")])
def test_a_misspelt_tag_names_the_tag_meant(tmp_path, table, tag, meant):
    """RolloutScheduler(..., EnvManagerConfig(tags=["FrozenLak"])) listed every known tag and
    named none: a misspelt tag says the one meant, as a misspelt field does."""
    from rl_support import lake_set, rl_config
    from parallel_rollout.rl import RolloutScheduler

    _, server = table
    config = EnvManagerConfig(tags=[tag], task_sets=lake_set(tmp_path, name="lakes"))
    with pytest.raises(ConfigError, match=rf"unknown tag '{tag}' \(did you mean '{meant}'\?\)"):
        RolloutScheduler(rl_config(tmp_path, server), config)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("sampling, said", [({"stream": True}, "sampling cannot set stream: the agent sends it itself"),
                                            (["top_p"], "sampling 'top_p' must be KEY=VALUE, e.g. top_p=0.9")],
                         ids=["reserved", "no-equals"])
def test_a_run_configs_sampling_made_in_python_is_said_as_its_keyword(sampling, said):
    """A trainer's RunConfig(sampling={"stream": True}) said "--sampling cannot set stream", a
    flag it never typed; made from the command line or a config file (build_config) it is
    still the flag."""
    from parallel_rollout.config import build_config

    with pytest.raises(ConfigError) as caught:
        RunConfig(sampling=sampling)
    assert str(caught.value) == said
    with pytest.raises(ConfigError, match="^--sampling cannot set stream"):
        build_config({"sampling": ["stream=true"]})
