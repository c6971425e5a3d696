"""A trainer's RunConfig that ``parallel-rollout run`` refuses before its engine starts is
refused by ``RolloutScheduler(...)`` as it is made, with the same check, said in the
RunConfig's words (``tool_calls=True``, not ``--tool-calls``): no out/ folder, no worker, no
request to the model server. What run() checks of its agent (``model_checks.check_agent``):
the model client's settings when the agent calls the model, and the agent's own
``check_config``; each was found only as every episode failed (or, tool_calls=True with a
tokenizer, went unused)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from llm_server import LLMServer
from parallel_rollout.cli import main
from parallel_rollout.config import RunConfig
from parallel_rollout.errors import ConfigError, RolloutError
from parallel_rollout.rl import EnvManagerConfig, TaskSet
from rl_support import RIGHT, rl_config, tiny_lakes
from token_model import write_tokenizer

OPENAI = "https://api.openai.com/v1"
SHELL_TASKS = Path(__file__).resolve().parents[2] / "benchmarks" / "shell_tasks.jsonl"


@pytest.fixture
def server():
    """The local model server, which no check may ask anything."""
    server = LLMServer(policy=lambda body: RIGHT).start()
    yield server
    server.stop()


def _tags(tmp_path, mode: str = "gym", **manager) -> EnvManagerConfig:
    """Two tiny lakes (``tiny.jsonl``), a shell task (a VM each episode), or one sum
    (``sums.jsonl``, mode math: no tools); ``manager``: more EnvManagerConfig fields."""
    if mode == "gym":
        return EnvManagerConfig(group_size=2, tags=["tiny"], task_sets=tiny_lakes(tmp_path, "tiny", 2), **manager)
    if mode == "shell":
        return EnvManagerConfig(group_size=2, tags=["chores"], task_sets={"chores": TaskSet("shell", str(SHELL_TASKS),
                                                                                           limit=1)}, **manager)
    sums = tmp_path / "sums.jsonl"
    sums.write_text(json.dumps({"id": "sum0", "mode": "math", "problem": "Compute $2 + 2$.", "answer": "4"}) + "\n")
    return EnvManagerConfig(group_size=2, tags=["sums"], task_sets={"sums": TaskSet("math", str(sums))})


def _refused(tmp_path, server, schedulers, tags: str = "gym", manager: dict | None = None, **changes) -> str:
    """The ConfigError ``RolloutScheduler(...)`` raises for the config and ``_tags``, checked
    to have started nothing: no run folder, no request to the server."""
    with pytest.raises(ConfigError) as caught:
        schedulers(rl_config(tmp_path, server, **{"num_rollouts": 1, "envs_per_worker": 2, **changes}),
                   _tags(tmp_path, tags, **(manager or {})))
    assert not (tmp_path / "out").exists() and server.requests == []
    return str(caught.value)


def _cli_refusal(tmp_path, base_url: str, *flags: str, mode: str = "gym") -> str:
    """What ``parallel-rollout run`` says of the same settings, given as flags, of the same
    tasks (``_tags``' file): exit 2, nothing started."""
    data = {"gym": tmp_path / "tiny.jsonl", "math": tmp_path / "sums.jsonl", "shell": SHELL_TASKS}[mode]
    result = CliRunner().invoke(main, ["run", "--mode", mode, "--data", str(data), "--agent", "openai", "--model",
                                       "table", "--base-url", base_url, "--output-dir", str(tmp_path / "cli-out"),
                                       *flags])
    assert result.exit_code == 2 and not (tmp_path / "cli-out").exists(), result.output
    return result.output


def test_the_model_settings_run_checks_refuse_a_missing_key_as_the_scheduler_is_made(tmp_path, server, schedulers,
                                                                                     monkeypatch):
    """The openai agent pointed at OpenAI's endpoint with OPENAI_API_KEY unset: the run stops
    before it starts (exit 2, ``--agent openai needs OPENAI_API_KEY``); the scheduler started
    its workers, and every episode's first request would be refused."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    message = _refused(tmp_path, server, schedulers, base_url=OPENAI)
    assert message == (f"RunConfig: agent='openai' needs OPENAI_API_KEY in the environment to call {OPENAI}; set it, "
                       "or point base_url (or OPENAI_BASE_URL) at another OpenAI-compatible server"), message
    said = _cli_refusal(tmp_path, OPENAI)
    assert f"--agent openai needs OPENAI_API_KEY in the environment to call {OPENAI}" in said, said
    assert server.requests == []


def test_tool_calls_in_a_mode_without_tools_is_refused_as_the_scheduler_is_made(tmp_path, server, schedulers):
    """The openai agent's ``check_config`` (run()'s ``check_agent`` calls it), which the
    scheduler did not call: every episode's reset raised "mode 'math' has no tools", each
    group failed, then the batch."""
    message = _refused(tmp_path, server, schedulers, tags="math", mode="math", data=None, tool_calls=True)
    assert message.startswith("RunConfig: tool_calls=True: mode 'math' has no tools (modes with tools: "), message
    assert "--" not in message, message
    said = _cli_refusal(tmp_path, server.url, "--tool-calls", mode="math")
    assert "--tool-calls: mode 'math' has no tools (modes with tools: " in said, said
    assert server.requests == []


def test_tool_calls_with_a_tokenizer_is_refused_as_the_scheduler_is_made(tmp_path, server, schedulers):
    """Token in, token out sends no tools: tool_calls=True went unused, the episodes ran
    without tools. The openai agent's ``check_config`` refuses it, as run() does (the
    tokenizer is a config file's key, not a flag)."""
    tokenizer = str(write_tokenizer(tmp_path / "tokenizer"))
    message = _refused(tmp_path, server, schedulers, tool_calls=True, tokenizer=tokenizer)
    assert message == ("RunConfig: tool_calls=True needs chat requests; token in, token out (tokenizer=) sends no "
                       "tools: give one of them"), message
    (tmp_path / "run.toml").write_text(f"tokenizer = {json.dumps(tokenizer)}\n")
    said = _cli_refusal(tmp_path, server.url, "--tool-calls", "--config", str(tmp_path / "run.toml"))
    assert "tool_calls=True needs chat requests" in said, said
    assert server.requests == []


def test_the_agents_check_is_of_the_mode_each_tag_runs(tmp_path, server, schedulers):
    """RunConfig(mode='gym') with tool_calls=True passes the gym mode's check (it has tools),
    but its tag runs math's sums, which have none: the check is of the tag's mode, as a run
    of that task set would make it."""
    message = _refused(tmp_path, server, schedulers, tags="math", tool_calls=True)
    assert message.startswith("RunConfig: tool_calls=True: mode 'math' has no tools"), message


def test_a_run_id_run_refuses_is_refused_as_the_scheduler_is_made(tmp_path, server, schedulers):
    """RunConfig(run_id='my run'): run() refuses it before anything starts (``--run-id``: it
    names the run folder, and the VMs, cgroups and containers of a mode that has any), the
    scheduler started its workers with it."""
    message = _refused(tmp_path, server, schedulers, run_id="my run")
    assert message == ("RunConfig: run_id 'my run' must be 1-64 characters of letters, digits, '.', '_' or '-' "
                       "(starting with a letter or digit)"), message
    said = _cli_refusal(tmp_path, server.url, "--run-id", "my run")
    assert "run id 'my run' must be 1-64 characters" in said, said


def test_an_output_dir_without_room_is_refused_as_the_scheduler_is_made(tmp_path, server, schedulers):
    """min_free_disk_mb more than the disk has: run() stops before it starts; the scheduler
    started its workers and wrote its records until the disk was full."""
    message = _refused(tmp_path, server, schedulers, min_free_disk_mb=2**40)
    assert re.fullmatch(rf"RunConfig: {re.escape(str(tmp_path))} has \d+ MB free; a run wants at least {2**40} MB "
                        r"\(min_free_disk_mb\) for its results, trajectories and logs", message), message
    (tmp_path / "run.toml").write_text(f"min_free_disk_mb = {2**40}\n")
    said = _cli_refusal(tmp_path, server.url, "--config", str(tmp_path / "run.toml"))
    # the CLI says the key where its user set it, as the file writes it
    assert f"a run wants at least {2**40} MB (min_free_disk_mb in {tmp_path / 'run.toml'})" in said, said


@pytest.mark.parametrize("changes, manager, says", [
    ({"envs_per_worker": 2}, None, "RunConfig: envs_per_worker > 1"),
    ({"envs_per_worker": 1}, {"max_env_num_per_worker": 2}, "RunConfig: EnvManagerConfig.max_env_num_per_worker > 1"),
], ids=["RunConfig", "EnvManagerConfig"])
def test_env_loops_that_would_share_a_workers_vm_are_refused_as_the_scheduler_is_made(tmp_path, server, schedulers,
                                                                                      changes, manager, says):
    """A shell task (a VM each episode) with two env loops per worker and no shared pool:
    each worker owns one VM, which its second loop waited on; the first get_batch timed out
    with no group ready. run() refuses it before it starts (``--envs-per-worker > 1 … add
    --use-vm-pool``)."""
    message = _refused(tmp_path, server, schedulers, tags="shell", manager=manager, mode="shell",
                       data=str(SHELL_TASKS), **changes)
    assert message == (f"{says} runs several env loops per worker that share VMs; add use_vm_pool=True (without it "
                       "each worker owns exactly one VM of its own)"), message
    said = _cli_refusal(tmp_path, server.url, "--envs-per-worker", "2", mode="shell")
    assert "--envs-per-worker > 1 runs several env loops per worker that share VMs; add --use-vm-pool" in said, said


@pytest.mark.parametrize("setting, flags, applies_to", [
    ({"screen_width": 1280}, ("--screen-width", "1280"), "desktop modes (osworld)"),
    ({"agent_cmd": "python my_agent.py"}, ("--agent-cmd", "python my_agent.py"), "the command agent"),
    ({"vm_memory_mb": 2048}, ("--vm-memory-mb", "2048"), "modes that run in a VM"),
], ids=["screen_width", "agent_cmd", "vm_memory_mb"])
def test_a_setting_no_tag_uses_is_refused_as_the_scheduler_is_made(tmp_path, server, schedulers, setting, flags,
                                                                   applies_to):
    """A setting of a mode, agent or provider that none of the scheduler's tags runs (a
    FrozenLake tag, no desktop, no VM; the openai agent): run() refuses it before it starts
    (``--screen-width is not used by this run``), the scheduler ignored it and started."""
    (name, _), = setting.items()
    message = _refused(tmp_path, server, schedulers, **setting)
    assert message == (f"RunConfig: {name} is not used by this scheduler's tags (mode gym): it only applies to "
                       f"{applies_to}"), message
    said = _cli_refusal(tmp_path, server.url, *flags)
    assert f"{flags[0]} is not used by this run: it only applies to {applies_to}" in said, said


def test_a_web_tag_on_a_provider_without_chromium_is_refused_as_the_scheduler_is_made(tmp_path, server, schedulers,
                                                                                       monkeypatch):
    """The process provider's sandboxes use this host's Chromium: without one, run() stops
    before it starts (the web mode needs Chromium; tests/test_web.py), the scheduler started
    its workers and every web episode failed."""
    from parallel_rollout.envs.web import browser
    from parallel_rollout.errors import ProviderUnavailable

    monkeypatch.setattr(browser, "CHROMIUM", ("no-such-chromium",))
    pages = tmp_path / "pages.jsonl"
    pages.write_text(json.dumps({"id": "click", "mode": "web", "env": "click-button", "seed": 0}) + "\n")
    config = rl_config(tmp_path, server, mode="web", data=str(pages), provider_name="process", envs_per_worker=1,
                       num_rollouts=1)
    with pytest.raises(ProviderUnavailable, match="the web mode needs Chromium.*no-such-chromium"):
        schedulers(config, EnvManagerConfig(tags=["web"]))
    assert not (tmp_path / "out").exists() and server.requests == []


def test_a_run_config_mode_that_does_not_import_is_refused_as_the_scheduler_is_made(tmp_path, server, schedulers):
    """RunConfig(mode='gymm') beside tags of their own mode: no tag ran it, but every worker
    imports the run config's mode before its first task, so each exited at its start, the
    engine stopped, and the scheduler was handed back as if whole. run() refuses the mode."""
    message = _refused(tmp_path, server, schedulers, mode="gymm")
    assert message.startswith("RunConfig: unknown mode 'gymm' (did you mean 'gym'?); known modes: gym,"), message


def test_the_concurrency_cut_is_said_in_the_schedulers_words(tmp_path, server, schedulers, caplog):
    """max_concurrent_rollouts=5 on 2 env loops: the warning that it was cut said it in the
    CLI's flags (``--max-concurrent-rollouts``, ``--num-rollouts 1 × --envs-per-worker 2``),
    where the trainer gave the scheduler's argument and EnvManagerConfig's
    max_env_num_per_worker, and set no flag."""
    caplog.set_level("WARNING", logger="parallel_rollout")
    schedulers(rl_config(tmp_path, server, num_rollouts=1), _tags(tmp_path, max_env_num_per_worker=2),
               max_concurrent_rollouts=5)
    said = [r.getMessage() for r in caplog.records if "[Concurrency]" in r.getMessage()]
    assert said == ["[Concurrency] Set max concurrent rollouts to 2, not the 5 asked for by max_concurrent_rollouts: "
                    "the run has 2 env loops (num_rollouts=1 × EnvManagerConfig.max_env_num_per_worker=2); "
                    "raise them for more"], said


def _first_batch_error(tmp_path, schedulers, answer: dict, raised: type[Exception], config: dict | None = None,
                       **scheduler) -> str:
    """What the first get_batch raises (``raised``) against a server that gives every request
    ``answer``; ``config``: more RunConfig fields."""
    server = LLMServer(policy=lambda body: answer).start()
    try:
        train = schedulers(rl_config(tmp_path, server, num_rollouts=1, **(config or {})), _tags(tmp_path), **scheduler)
        with pytest.raises(raised) as caught:
            train.get_batch(batch_size=2, step=0, timeout=120)
    finally:
        server.stop()
    return str(caught.value)


def test_a_members_failure_in_the_schedulers_error_names_the_run_configs_fields(tmp_path, schedulers):
    """A server that answers 500 to everything, RunConfig(max_retries=1): the RolloutError's
    last failure said the member gave up "(--max-retries 1)", a flag the trainer never gave."""
    message = _first_batch_error(tmp_path, schedulers, {"status": 500}, RolloutError, {"max_retries": 1},
                                 max_failed_groups=1)
    assert "gave up after 2 requests for this turn (max_retries=1)" in message and "--" not in message, message


def test_a_model_the_server_does_not_know_is_said_in_the_run_configs_fields(tmp_path, schedulers):
    """A server whose chat route answers 404 (the endpoint check skipped, check_endpoint=False):
    get_batch's ConfigError told the trainer to "give --model a name its /models lists or fix
    --base-url", flags a RunConfig does not have."""
    message = _first_batch_error(tmp_path, schedulers, {"status": 404, "message": "The model `table` does not exist."},
                                 ConfigError, check_endpoint=False)
    assert "give model a name its " in message and "--" not in message, message


def test_a_misspelt_field_set_as_an_attribute_is_refused_as_the_scheduler_is_made(tmp_path, server, schedulers):
    """``run_config.max_retry = 0`` (``max_retries`` misspelt) and ``manager.num_env_group = 1``:
    the dataclasses took the attributes and nothing read them, so the scheduler ran with the
    defaults the trainer meant to change. Each is a ConfigError naming it and the field meant,
    before anything starts."""
    run_config = rl_config(tmp_path, server, num_rollouts=1)
    run_config.max_retry = 0
    with pytest.raises(ConfigError, match=r"^RunConfig: 'max_retry' is no field of RunConfig \(did you mean "
                                          r"max_retries\?\); set as an attribute, nothing reads it$"):
        schedulers(run_config, _tags(tmp_path))
    manager = _tags(tmp_path)
    manager.num_env_group = 1
    with pytest.raises(ConfigError, match=r"^EnvManagerConfig: 'num_env_group' is no field of EnvManagerConfig "
                                          r"\(did you mean num_env_groups\?\)"):
        schedulers(rl_config(tmp_path, server, num_rollouts=1), manager)
    assert not (tmp_path / "out").exists() and server.requests == []


def test_a_member_that_gave_up_after_one_request_says_request(tmp_path, schedulers):
    """RunConfig(max_retries=0), a server that answers 500: the last failure said "gave up after
    1 requests"."""
    message = _first_batch_error(tmp_path, schedulers, {"status": 500}, RolloutError, {"max_retries": 0},
                                 max_failed_groups=1)
    assert "gave up after 1 request for this turn (max_retries=0)" in message, message


@pytest.mark.parametrize("agent, said", [
    ({}, "this run's agent is oracle, the default: agent='openai' calls the model"),
    ({"agent": "oracle"}, "this run's agent is oracle: agent='openai' calls the model"),
], ids=["agent-left-out", "agent-given"])
def test_a_model_setting_with_the_oracle_agent_says_the_default_only_when_it_is(tmp_path, schedulers, agent, said):
    """RunConfig(model=…) with the oracle agent, which calls no model: refused as the scheduler
    is made, saying the agent is oracle and which agent calls the model; "the default" only when
    the trainer left agent out. A trainer that wrote agent="oracle" was told it was the
    default's (only a value other than its default counted as given), as --agent oracle was not."""
    config = RunConfig(mode="gym", data="frozenlake", model="table", num_rollouts=1, output_dir=str(tmp_path / "out"),
                       progress=False, **agent)
    with pytest.raises(ConfigError) as caught:
        schedulers(config, _tags(tmp_path))
    message = str(caught.value)
    assert message == ("RunConfig: model is not used by this scheduler's tags (mode gym): it only applies to agents "
                       f"that call a model (openai, or a module:Class agent through self.model); {said}"), message
    assert not (tmp_path / "out").exists()


def test_a_runconfig_naming_every_field_is_no_copy(tmp_path, schedulers):
    """RunConfig(**every field) (a trainer that writes out its whole config) was taken for a
    dataclasses.replace copy, which names every field too: its fields named at their defaults
    went unseen (action_space, a desktop field, is refused under mode gym when named, as one
    call naming it alone is), and its agent="oracle" was told 'oracle, the default'. A copy
    still knows nothing of the call that made its original."""
    given = {"mode": "gym", "data": "frozenlake", "model": "table", "num_rollouts": 1,
             "output_dir": str(tmp_path / "out"), "progress": False, "agent": "oracle"}
    defaults = RunConfig()
    every = {field.name: getattr(defaults, field.name) for field in dataclasses.fields(RunConfig)
             if field.name not in ("explicit", "sources")}

    def refusal(config: RunConfig) -> str:
        with pytest.raises(ConfigError) as caught:
            schedulers(config, _tags(tmp_path))
        return str(caught.value)

    named = refusal(RunConfig(**given, action_space=defaults.action_space))
    assert named.startswith("RunConfig: action_space is not used by this scheduler's tags (mode gym)"), named
    assert refusal(RunConfig(**{**every, **given})) == named
    copy = refusal(dataclasses.replace(RunConfig(**{**given, "agent": "openai"}), agent="oracle"))
    assert "this run's agent is oracle, the default: agent='openai' calls the model" in copy, copy
