"""A misspelt sampling key is refused, naming the field meant: an OpenAI-compatible server
ignores a request field it does not know (vLLM logs it, SGLang says nothing), so a trainer's
``sampling={"temprature": 0}`` for a greedy validation sampled at the run's temperature, with
no word of it. A field close to none the servers read (a server's own) still joins the
request body as given."""

from __future__ import annotations

import pytest

from parallel_rollout.config import RunConfig
from parallel_rollout.errors import ConfigError
from parallel_rollout.rl import EnvManagerConfig
from rl_support import rl_config, tiny_lakes

MISSPELT = [("temprature", "temperature"), ("max_token", "max_tokens"), ("top-p", "top_p"),
            ("Temperature", "temperature"), ("stop_token_id", "stop_token_ids")]


@pytest.mark.parametrize("key, meant", MISSPELT)
def test_a_misspelt_sampling_key_is_refused_naming_the_field_meant(tmp_path, table, schedulers, key, meant):
    _, server = table
    env = EnvManagerConfig(num_env_groups=1, group_size=2, tags=["lakes"], task_sets=tiny_lakes(tmp_path, "lakes", 2))
    with pytest.raises(ConfigError, match=rf"^sampling: '{key}' is no request field a server reads .* "
                                          rf"did you mean {meant}\?"):
        schedulers(rl_config(tmp_path, server), env, sampling={key: 0.5})


def test_a_siblings_and_a_run_configs_misspelt_key_are_refused_too(tmp_path, table, schedulers):
    _, server = table
    lakes = tiny_lakes(tmp_path, "lakes", 2)
    train = schedulers(rl_config(tmp_path, server), EnvManagerConfig(num_env_groups=1, group_size=2, tags=["lakes"],
                                                                     task_sets=lakes))
    with pytest.raises(ConfigError, match="^sampling: 'temprature' .* did you mean temperature"):
        train.sibling(EnvManagerConfig(group_size=1, tags=["lakes"], task_sets=lakes), sampling={"temprature": 0})
    with pytest.raises(ConfigError, match="did you mean top_p"):
        RunConfig(mode="gym", sampling={"topp": 0.9})


def test_a_servers_own_field_still_joins_the_request_body(tmp_path, table, schedulers):
    _, server = table
    env = EnvManagerConfig(num_env_groups=1, group_size=2, tags=["lakes"], task_sets=tiny_lakes(tmp_path, "lakes", 2))
    train = schedulers(rl_config(tmp_path, server), env, async_generation_ratio=0,
                       sampling={"temperature": 0.5, "typical_p": 0.9, "top_k": 5})
    assert len(train.get_batch(batch_size=2, step=0, timeout=60)) == 2
    bodies = [r["body"] for r in server.requests if r["body"].get("messages")]
    assert bodies and all(b["typical_p"] == 0.9 and b["top_k"] == 5 and b["temperature"] == 0.5 for b in bodies)
