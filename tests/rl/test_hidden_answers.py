"""The gold files of tasks given straight to an RL scheduler (a task set, a ``Task`` made in
Python) are hidden from every VM, as a run's ``--data`` tasks' are: the policy's answer, run in
the VM's sandbox, cannot read the file its check compares against and write it out as its own."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from desktop_support import HEIGHT, WIDTH
from llm_server import llm_server  # noqa: F401 - fixture
from parallel_rollout.errors import ConfigError
from parallel_rollout.rl import EnvManagerConfig, TaskSet
from parallel_rollout.tasks import Task
from rl_support import Switch, rl_config

ROOT = Path(__file__).resolve().parents[2]
needs_desktop = pytest.mark.skipif(not all(shutil.which(p) for p in ("bwrap", "Xvfb", "openbox", "xterm")),
                                   reason="bubblewrap or the desktop packages are missing (./dev installs them)")
SECRET = "the secret only the gold file knows"


def gold_task(task_id: str, gold: str) -> dict:
    """An OSWorld task on an xterm (the shipped terminal-echo-file's desktop) whose check
    compares ~/answer.txt with the gold file at ``gold`` (a ``cloud_file``)."""
    shipped = [json.loads(line) for line in (ROOT / "benchmarks" / "osworld_tasks.jsonl").read_text().splitlines()
               if line.strip()]
    terminal = next(t for t in shipped if t["id"] == "terminal-echo-file")
    return {**terminal, "id": task_id, "instruction": "Write the secret into ~/answer.txt.",
            "evaluator": {"postconfig": [{"type": "sleep", "parameters": {"seconds": 0.5}}],
                          "func": "compare_text_file",
                          "result": {"type": "vm_file", "path": "~/answer.txt", "dest": "answer.txt"},
                          "expected": {"type": "cloud_file", "path": gold, "dest": "gold.txt"}}}


def copying(path: Path):
    """A policy whose answer copies ``path`` into ~/answer.txt (in the VM), then says DONE."""
    code = (f"import os\ntry:\n    text = open({str(path)!r}).read()\nexcept OSError as exc:\n    text = exc.strerror\n"
            "open(os.path.expanduser('~/answer.txt'), 'w').write(text)")

    def policy(body):
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
        return {"reply": f"```python\n{code}\n```" if turn == 0 else "DONE"}

    return policy


def writing(text: str):
    """A policy whose answer writes ``text`` into ~/answer.txt (in the VM), then says DONE."""
    code = f"import os\nopen(os.path.expanduser('~/answer.txt'), 'w').write({text + chr(10)!r})"

    def policy(body):
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
        return {"reply": f"```python\n{code}\n```" if turn == 0 else "DONE"}

    return policy


@pytest.fixture
def servers(request):
    """``llm_server`` (tests/llm_server.py): ``servers(policy=…)`` starts one."""
    return request.getfixturevalue("llm_server")


@pytest.fixture
def system_folder():
    """A folder of its own under /usr/local/share, which a process VM sees as the host has it (an
    OSWorld install's gold files live there): removed after the test."""
    import tempfile

    if not os.access("/usr/local/share", os.W_OK):
        pytest.skip("/usr/local/share is not writable here (the test writes a gold file where a VM sees it)")
    folder = Path(tempfile.mkdtemp(prefix="pr-hidden-answers-", dir="/usr/local/share"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _file(path: Path, text: str) -> Path:
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    path.chmod(0o644)
    path.parent.chmod(0o755)
    return path


@needs_desktop
def test_a_schedulers_gold_files_are_hidden_from_the_answer_in_the_vm(tmp_path, servers, schedulers,
                                                                       system_folder):
    """The answer that reads its task's gold file (where a process VM sees it, under
    /usr/local/share) fails: it read it, and the task passed, for a scheduler's task set, which
    --data never names; the same answer reading a copy no task names passes (what fails it is
    the hiding). A Task made in Python whose gold file the engine did not hide at its start
    is refused before it runs."""
    gold = _file(system_folder / "gold" / "gold.txt", SECRET + "\n")
    copy = _file(system_folder / "elsewhere" / "copy.txt", SECRET + "\n")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(gold_task("gold-task", str(gold))) + "\n")
    switch = Switch(copying(gold))
    server = servers(policy=switch)
    train = schedulers(rl_config(tmp_path, server, mode="osworld", data=None, num_rollouts=1, envs_per_worker=1,
                                 num_vms=1, use_vm_pool=True, action_space="pyautogui", screen_width=WIDTH,
                                 screen_height=HEIGHT, max_turns=3),
                       EnvManagerConfig(group_size=1, tags=["gold"], task_sets={"gold": TaskSet("osworld", str(tasks))}))
    (stolen,) = train.get_batch(batch_size=1, step=0, tasks=["gold-task"])
    assert (stolen.status, stolen.reward) == ("failure", 0.0), stolen.record
    switch.policy = copying(copy)  # the control: the same action on a file no task names
    (control,) = train.get_batch(batch_size=1, step=1, tasks=["gold-task"])
    assert (control.status, control.reward) == ("success", 1.0), control.record
    assert gold.read_text() == SECRET + "\n"
    # a Task made in Python with a gold file the engine does not hide: refused, never run
    other = _file(system_folder / "other" / "gold.txt", SECRET + "\n")
    made = Task("made", "osworld", gold_task("made", str(other)))
    with pytest.raises(ConfigError, match=r"get_batch\(tasks=...\): the answer files .*other/gold.txt"):
        train.get_batch(batch_size=1, step=2, tasks=[made])
    assert len(server.requests) == 4  # two turns of each run task: none of the refused one
    # one whose gold file no VM sees (under the test's own folder, not a system folder): it runs
    # and is graded against it, as a trainer's Python-made tasks are
    unseen = _file(tmp_path / "gold" / "gold.txt", SECRET + "\n")
    switch.policy = writing(SECRET)
    (ran,) = train.get_batch(batch_size=1, step=2, tasks=[Task("unseen", "osworld", gold_task("unseen", str(unseen)))])
    assert (ran.status, ran.reward) == ("success", 1.0), ran.record


#: a command agent (its program on the host, in bubblewrap) that reads the file named in the file
#: ``sys.argv[1]`` on turn 1 and answers with pyautogui code writing it into ~/answer.txt; then DONE
THIEF = r"""
import json, os, sys
for line in sys.stdin:
    if json.loads(line)["turn"] == 1:
        try:
            answer = open(open(sys.argv[1]).read()).read()
        except OSError as exc:
            answer = exc.strerror
        print(json.dumps(f"import os; open(os.path.expanduser('~/answer.txt'), 'w').write({answer!r})"), flush=True)
    else:
        print(json.dumps("DONE"), flush=True)
"""


@needs_desktop
def test_a_command_agent_under_a_scheduler_cannot_read_its_tasks_gold_file(tmp_path, servers, schedulers):
    """The command agent's program withholds the gold file of the task it plays (beside the
    task set's file): it read it, for a scheduler's task, which --data never names, and scored
    1; the same program told of a copy no task names scores (what fails it is the hiding)."""
    import sys

    gold = tmp_path / "set" / "gold.txt"
    gold.parent.mkdir()
    gold.write_text(SECRET + "\n")
    tasks = gold.parent / "tasks.jsonl"
    tasks.write_text(json.dumps(gold_task("gold-beside", "gold.txt")) + "\n")
    copy = tmp_path / "elsewhere" / "copy.txt"
    copy.parent.mkdir()
    copy.write_text(SECRET + "\n")
    where, script = tmp_path / "where.txt", tmp_path / "thief.py"
    where.write_text(str(gold))
    script.write_text(THIEF)
    train = schedulers(rl_config(tmp_path, servers(), mode="osworld", data=None, agent="command",
                                 agent_cmd=f"{sys.executable} {script} {where}", base_url=None, model=None,
                                 num_rollouts=1, envs_per_worker=1, num_vms=1, use_vm_pool=True,
                                 action_space="pyautogui", screen_width=WIDTH, screen_height=HEIGHT, max_turns=3),
                       EnvManagerConfig(group_size=1, tags=["gold"], task_sets={"gold": TaskSet("osworld", str(tasks))}))
    (stolen,) = train.get_batch(batch_size=1, step=0, tasks=["gold-beside"])
    assert (stolen.status, stolen.reward) == ("failure", 0.0), stolen.record
    where.write_text(str(copy))  # the control: the same program on a file no task names
    (control,) = train.get_batch(batch_size=1, step=1, tasks=["gold-beside"])
    assert (control.status, control.reward) == ("success", 1.0), control.record
    assert gold.read_text() == SECRET + "\n"


def test_a_task_sets_file_is_hidden_from_the_answer_in_the_vm(tmp_path, servers, schedulers, system_folder):
    """A py task set's file where a process VM sees it (a dataset pip-installed under
    /usr/local, as HumanEval's is in Python's Docker images): the answer that reads it (its
    tests and canonical solution are there) fails; it passed for a scheduler's task set, which
    --data never names. The same answer reading a copy no task set names passes."""
    if not shutil.which("bwrap"):
        pytest.skip("bubblewrap is missing")
    task = {"id": "peek", "mode": "py", "prompt": "def answer():\n", "entry_point": "answer",
            "test": "def check(candidate):\n    assert candidate() == 42\n", "canonical_solution": "    return 42\n"}
    tasks = _file(system_folder / "set" / "tasks.jsonl", json.dumps(task) + "\n")
    copy = _file(system_folder / "elsewhere" / "copy.jsonl", json.dumps(task) + "\n")

    def reading(path: Path):
        code = (f"def answer():\n    try:\n        return 42 if 'canonical_solution' in open({str(path)!r}).read() "
                "else 0\n    except OSError:\n        return 0\n")
        return lambda body: {"reply": f"```python\n{code}```"}

    switch = Switch(reading(tasks))
    train = schedulers(rl_config(tmp_path, servers(policy=switch), mode="py", data=None, num_rollouts=1,
                                 envs_per_worker=1, num_vms=1, max_turns=1),
                       EnvManagerConfig(group_size=1, tags=["peek"], task_sets={"peek": TaskSet("py", str(tasks))}))
    (stolen,) = train.get_batch(batch_size=1, step=0)
    assert (stolen.status, stolen.reward) == ("failure", 0.0), stolen.record
    switch.policy = reading(copy)  # the control: the same answer on a file no task set names
    (control,) = train.get_batch(batch_size=1, step=1)
    assert (control.status, control.reward) == ("success", 1.0), control.record
    # a sibling's task set where the VMs see it, which the pool (made at the first scheduler's
    # start) does not hide: refused, as a sibling's gold files are (its answers read it and passed)
    val_set = _file(system_folder / "val" / "tasks.jsonl", json.dumps({**task, "id": "peek-val"}) + "\n")
    with pytest.raises(ConfigError, match=r"sibling 'val': the task set files .*val/tasks.jsonl"):
        train.sibling(EnvManagerConfig(group_size=1, tags=["val"], task_sets={"val": TaskSet("py", str(val_set))}),
                      name="val")
    unseen = _file(tmp_path / "val" / "tasks.jsonl", json.dumps({**task, "id": "peek-val"}) + "\n")
    val = train.sibling(EnvManagerConfig(group_size=1, tags=["val"], task_sets={"val": TaskSet("py", str(unseen))}),
                        name="val")  # one no VM sees joins and runs
    (ran,) = val.get_batch(batch_size=-1, step=1)
    assert ran.task_id == "peek-val" and ran.status in ("success", "failure"), ran.record


#: a command agent whose program reads the py task set named in the file ``sys.argv[1]`` and
#: answers with the canonical solution it finds there (``return 0`` when it cannot read it)
SOLUTION_THIEF = r"""
import json, sys
for line in sys.stdin:
    try:
        task = json.loads(open(open(sys.argv[1]).read()).readline())
        body = task["canonical_solution"]
    except OSError:
        body = "    return 0\n"
    print(json.dumps("def answer():\n" + body), flush=True)
"""


def test_a_command_agent_under_a_scheduler_cannot_read_its_task_sets(tmp_path, servers, schedulers):
    """The command agent's program withholds the files of the scheduler's task sets, and of a
    sibling's, as it withholds a run's --data: it read a py task set's canonical solution, for
    a scheduler's task set, which --data never names, and scored 1; the same program reading
    a copy no task set names scores (what fails it is the withholding)."""
    import sys

    if not shutil.which("bwrap"):
        pytest.skip("bubblewrap is missing")
    task = {"id": "peek", "mode": "py", "prompt": "def answer():\n", "entry_point": "answer",
            "test": "def check(candidate):\n    assert candidate() == 42\n", "canonical_solution": "    return 42\n"}
    train_set = _file(tmp_path / "train" / "tasks.jsonl", json.dumps(task) + "\n")
    val_set = _file(tmp_path / "val" / "tasks.jsonl", json.dumps({**task, "id": "peek-val"}) + "\n")
    copy = _file(tmp_path / "elsewhere" / "copy.jsonl", json.dumps(task) + "\n")
    where, script = tmp_path / "where.txt", tmp_path / "thief.py"
    where.write_text(str(train_set))
    script.write_text(SOLUTION_THIEF)
    train = schedulers(rl_config(tmp_path, servers(), mode="py", data=None, agent="command",
                                 agent_cmd=f"{sys.executable} {script} {where}", base_url=None, model=None,
                                 num_rollouts=1, envs_per_worker=1, num_vms=1, max_turns=1),
                       EnvManagerConfig(group_size=1, tags=["peek"], task_sets={"peek": TaskSet("py", str(train_set))}))
    val = train.sibling(EnvManagerConfig(group_size=1, tags=["val"], task_sets={"val": TaskSet("py", str(val_set))}),
                        name="val")
    (stolen,) = train.get_batch(batch_size=1, step=0)
    assert (stolen.status, stolen.reward) == ("failure", 0.0), stolen.record
    where.write_text(str(val_set))  # the sibling's task set, read while the sibling plays
    (stolen,) = val.get_batch(batch_size=-1, step=0)
    assert (stolen.status, stolen.reward) == ("failure", 0.0), stolen.record
    where.write_text(str(copy))  # the control: the same program on a file no task set names
    (control,) = train.get_batch(batch_size=1, step=1)
    assert (control.status, control.reward) == ("success", 1.0), control.record
