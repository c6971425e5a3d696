"""What the help of each command says of a default that click cannot show ('Default: …' in
its text, a count the run works out) is the default the code uses: read as a new user reads
it, through the command line."""

from __future__ import annotations

import re

from click.testing import CliRunner

from parallel_rollout.cli import main
from parallel_rollout.config import RunConfig


def flat(text: str) -> str:
    return " ".join(text.split())


def run_help() -> str:
    return flat(CliRunner().invoke(main, ["run", "--help"], terminal_width=200).output)


def test_the_vm_memory_default_the_help_gives_is_the_one_a_pool_is_given():
    """It said 'min(2048, 80% … / the pool's VMs …), 4096 with a desktop': a desktop's cap is
    4096 in the same min, and the pool's VMs count its --spare-vms (a spare holds memory)."""
    from parallel_rollout.envs import get_env
    from parallel_rollout.pool.providers import get_provider, provider_options
    from parallel_rollout.pool.providers.base import (DEFAULT_MEMORY_CAP_MB, DEFAULT_MEMORY_FLOOR_MB,
                                                      DESKTOP_MEMORY_CAP_MB, default_memory_mb)
    from parallel_rollout.pool.providers.host_share import DEFAULT_MEMORY_SHARE

    said = run_help()
    assert (f"Default: min({DEFAULT_MEMORY_CAP_MB} ({DESKTOP_MEMORY_CAP_MB} with a desktop), "
            f"{DEFAULT_MEMORY_SHARE:.0%} of the host's memory / the pool's VMs: --num-vms with --use-vm-pool, "
            f"else --num-rollouts, plus --spare-vms), at least {DEFAULT_MEMORY_FLOOR_MB}") in said, said
    shell, process = get_env("shell"), get_provider("process")
    for flags, vms in (({"num_rollouts": 3}, 3), ({"num_vms": 2, "use_vm_pool": True, "spare_vms": 3}, 5)):
        opts = provider_options(RunConfig(**flags), process, [shell])
        assert opts.pool_size == vms and opts.default_memory_mb == default_memory_mb(vms, False, True)
    py_memory = get_env("py").default_limits["memory_mb"]
    assert py_memory == DEFAULT_MEMORY_CAP_MB  # "py mode: the same"
    assert f"Process limit per VM (py mode: {get_env('py').default_limits['max_processes']} unless set" in said


def test_the_spare_and_port_defaults_the_help_gives_are_the_providers():
    from parallel_rollout.pool.providers import get_provider, provider_names
    from parallel_rollout.vm_address import DEFAULT_PORT

    said = run_help()
    found = re.search(r"Default: (\d+) for (\w+), (\d+) elsewhere", said.split("--spare-vms", 1)[1])
    assert found, said
    each = {name: int(found.group(1)) if name == found.group(2) else int(found.group(3))
            for name in provider_names()}
    assert each == {name: get_provider(name).default_spares for name in provider_names()}
    assert f"HOST[:PORT] (port {DEFAULT_PORT} by default)" in said


def test_osworld_cache_missing_says_the_index_and_domain_it_reads_when_not_given():
    """Its --index and --domain said only "the run's --osworld-index": a new user could not
    tell which index it reads when none is given. It says the run's defaults."""
    defaults = RunConfig()
    said = flat(CliRunner().invoke(main, ["osworld-cache", "missing", "--help"]).output)
    assert f"the run's --osworld-index (default: {defaults.osworld_index})" in said, said
    assert f"the run's --domain (default: {defaults.domain})" in said, said
    where = flat(CliRunner().invoke(main, ["osworld-cache", "where", "--help"]).output)
    assert "url a URL a task downloads" in where, where
