"""The hostile table of tests/hostile_tasks.py on the docker provider: every row graded 0, the
host untouched, the run finished, no container lost.

One row stays out: filling the home. A container's home is its writable layer, on the
host's disk, with no size of its own (overlay2 sizes it only on xfs with project quotas);
the process provider's home is a sized tmpfs instead. So do the rows whose check runs curl,
jq, sqlite3, file, wget, psql or node, which the guest image does not have (the table's honest_wrappers task
checks that their wrappers come first on a check's PATH).
"""

from __future__ import annotations

import pytest

from hostile_tasks import SHELL_ROWS, check_finished, check_row, rows_without_programs, run_pool, run_table
from parallel_rollout.pool.providers.docker_cli import daemon_limits
from test_vm_costs import check_own_per_user_limits, hold_inotify_tasks, hold_pty_tasks

#: rows left out on docker, and why: the guest image has python3 (its agent's), no other program a
#: row needs
NOT_ON_DOCKER = {"fill_tmp_and_home": "a container's home is its writable layer on the "
                                      "host's disk, with no size limit",
                 **rows_without_programs("the guest image (minbase and python3)",
                                         has=lambda program: program == "python3")}


def unbounded_on_docker() -> dict[str, str]:
    """Rows whose bound this daemon would discard (it only warns), with why: never run."""
    limits = daemon_limits()
    rows = {}
    if not limits["pids"]:
        rows["fork_bomb"] = "this Docker daemon does not enforce --pids-limit"
    if not limits["memory"]:
        rows["memory_hog"] = "this Docker daemon does not enforce --memory"
    return rows


@pytest.fixture(scope="module")
def docker_table(docker_harness, tmp_path_factory):
    unbounded = unbounded_on_docker()
    limits = {"vm_max_processes": 128} if "fork_bomb" not in unbounded else {}
    if "memory_hog" in unbounded:
        limits["vm_memory_mb"] = None
    return run_table(tmp_path_factory.mktemp("docker"), {**NOT_ON_DOCKER, **unbounded},
                     provider_name="docker", **limits)


@pytest.mark.parametrize("name", list(SHELL_ROWS))
def test_hostile_shell_answer_on_docker(docker_table, name):
    check_row(docker_table, name)


def test_docker_host_untouched_and_the_run_finished(docker_table):
    check_finished(docker_table)


@pytest.mark.slow
def test_one_container_cannot_take_another_containers_per_user_limits(docker_harness, tmp_path):
    """Two containers at once, each task takes every inotify instance its user may hold:
    containers share the host's user namespace, so with one uid for every container's
    commands (64000, once) the second got none; each VM has a uid of its own now."""
    check_own_per_user_limits(*run_pool(tmp_path, "shell", hold_inotify_tasks(), provider_name="docker"))


@pytest.mark.slow
def test_one_container_cannot_take_the_machines_ptys(docker_harness, tmp_path):
    """Two containers at once, each task takes every pseudo-terminal it can: the machine's
    are one pool (kernel.pty.max) for every container and sandbox, and the first container
    took them all (3071) until a container's devpts got a process sandbox's cap."""
    check_own_per_user_limits(*run_pool(tmp_path, "shell", hold_pty_tasks(), provider_name="docker"))
