"""The runner's caches are out of a command agent's reach: OSWorld's download cache holds the
gold files its checks compare against (a ``cloud_file`` expected), and the image cache the
disks VMs boot from (a QEMU VM's disk is an overlay on the cached image, read live). Before,
both lay in ``~/.cache/parallel-rollout``, which the agent may write: a thief read a task's
gold file and answered with it (success on a task it could not see), a forger could rewrite
it, and one that planted a file where a later run looks for a download or an image had that
run use it. Each cache is now an empty, read-only folder to it, made first when missing.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from agent_runs import make_config, needs_bwrap, run_cli
from conftest import ROOT, read_results, write_tasks
from desktop_support import HEIGHT, WIDTH
from parallel_rollout.agents import command
from parallel_rollout.agents.command import CommandAgent
from parallel_rollout.cli import main
from parallel_rollout.envs.osworld import downloads
from parallel_rollout.pool.providers import host_dirs, images
from parallel_rollout.tasks import Task


def shipped() -> list[dict]:
    return [json.loads(line) for line in (ROOT / "benchmarks" / "osworld_tasks.jsonl").read_text().splitlines()
            if line.strip()]


def command_line(script: Path, *args: str) -> str:
    return " ".join(shlex.quote(part) for part in (sys.executable, str(script), *args))


#: on its first turn: lists every file under each cache it is told of, reads it, tries to
#: rewrite it and to plant one beside it; logs what it saw; then DONE
CACHE_PROBE = r"""
import json, os, sys
log, caches = sys.argv[1], sys.argv[2:]
for line in sys.stdin:
    if json.loads(line)["turn"] == 1:
        report = {}
        for cache in caches:
            seen = report[cache] = {"files": {}, "planted": None}
            for folder, _, names in os.walk(cache):
                for name in names:
                    path = os.path.join(folder, name)
                    try:
                        seen["files"][path] = open(path).read()
                        open(path, "w").write("forged\n")
                    except OSError as exc:
                        seen["files"][path] = exc.strerror
            try:
                os.makedirs(os.path.join(cache, "urls", "planted"), exist_ok=True)
                open(os.path.join(cache, "urls", "planted", "gold.txt"), "w").write("planted\n")
                seen["planted"] = "written"
            except OSError as exc:
                seen["planted"] = exc.strerror
        open(log, "a").write(json.dumps(report) + "\n")
    print(json.dumps("DONE"), flush=True)
"""


@needs_bwrap
def test_a_command_agent_neither_reads_nor_rewrites_nor_plants_in_the_runners_caches(tmp_path, monkeypatch):
    """A shell run through the CLI with a gold file in OSWorld's download cache and a built
    image in the image cache: the agent finds both caches empty and read-only, and both
    files are as they were after the run; what it tried to plant is nowhere."""
    image_cache, osworld_cache = tmp_path / "image-cache", tmp_path / "osworld-cache"
    monkeypatch.setenv(images.CACHE_ENV, str(image_cache))
    monkeypatch.setenv(downloads.CACHE_ENV, str(osworld_cache))
    gold = downloads.cache_path("https://files.example/answer.txt", osworld_cache)
    gold.parent.mkdir(parents=True)
    gold.write_text("the answer\n")
    image = image_cache / "qemu" / "disk.qcow2"
    image.parent.mkdir(parents=True)
    image.write_text("a disk\n")
    script, log = tmp_path / "probe.py", tmp_path / "probe.log"
    script.write_text(CACHE_PROBE)
    data = write_tasks(tmp_path / "tasks.jsonl", [{"id": "t0", "mode": "shell", "instruction": "x", "check": "true"}])
    run_cli(tmp_path, "caches", "--mode", "shell", "--data", str(data), "--num-vms", "1", "--use-vm-pool",
            "--agent-cmd", command_line(script, str(log), str(image_cache), str(osworld_cache)))
    report = json.loads(log.read_text())
    assert report == {str(image_cache): {"files": {}, "planted": "Read-only file system"},
                      str(osworld_cache): {"files": {}, "planted": "Read-only file system"}}, report
    assert gold.read_text() == "the answer\n" and image.read_text() == "a disk\n"
    assert not (osworld_cache / "urls" / "planted").exists()


@needs_bwrap
def test_caches_that_do_not_exist_yet_are_made_first_and_hidden(tmp_path, monkeypatch):
    """The default caches under a $HOME that has none: they are made before the
    agent starts, so that it cannot make one first and fill it with a file a later run takes
    for a download or an image; the agent sees them empty and cannot write into them."""
    home = tmp_path / "home"
    home.mkdir()
    for name in (images.CACHE_ENV, downloads.CACHE_ENV, "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    cache = home / ".cache" / "parallel-rollout"
    script, log = tmp_path / "probe.py", tmp_path / "probe.log"
    script.write_text(CACHE_PROBE)
    agent = CommandAgent(make_config(agent="command", agent_cmd=command_line(
        script, str(log), str(cache), str(cache / "osworld"))))
    agent.reset(Task(id="c1", mode="math", payload={"problem": "1+1"}))
    try:
        assert agent.act({"problem": "1+1"}) == "DONE"
    finally:
        agent.close()
    report = json.loads(log.read_text())
    assert report == {str(cache): {"files": {}, "planted": "Read-only file system"},
                      str(cache / "osworld"): {"files": {}, "planted": "Read-only file system"}}, report
    assert sorted(os.listdir(cache)) == ["osworld", "rag"]
    assert not any(files for _, _, files in os.walk(cache))


def test_a_cache_that_holds_what_the_agent_needs_is_left_with_a_warning(tmp_path, monkeypatch, caplog):
    """$PARALLEL_ROLLOUT_CACHE set to the agent's own folder: hiding it would hide the agent's
    program; it is left, and the run's log says why and what to set; the caches that do not
    hold its needs (OSWorld's, the rag indexes' inside the first) are still hidden."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no default cache there
    monkeypatch.setenv(images.CACHE_ENV, str(tmp_path))
    monkeypatch.setenv(downloads.CACHE_ENV, str(tmp_path / "osworld-cache"))
    monkeypatch.setattr(command, "_WARNED", set())
    config = make_config(agent="command", agent_cmd=command_line(tmp_path / "agent.py"))
    with caplog.at_level("WARNING"):
        hidden = command.runner_caches(command.what_it_needs(config))
    assert hidden == (str(tmp_path / "osworld-cache"), str(tmp_path / "rag"))  # the others still hidden
    assert f"the cache folder {tmp_path} holds what --agent-cmd's program needs" in caplog.text
    assert "PARALLEL_ROLLOUT_OSWORLD_CACHE" in caplog.text


def test_each_cache_is_read_where_its_module_keeps_it(tmp_path, monkeypatch):
    """One statement of the caches (``host_dirs``): the folders hidden are those the image
    builder, OSWorld's downloads and the rag mode's indexes use, and the default ones that
    exist when the variables name others."""
    from parallel_rollout.envs.rag import corpus

    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv(images.CACHE_ENV, str(tmp_path / "c"))
    monkeypatch.setenv(downloads.CACHE_ENV, str(tmp_path / "o"))
    assert images.cache_dir() == tmp_path / "c" and downloads.cache_root() == tmp_path / "o"
    assert corpus.cache_root() == tmp_path / "c" / "rag"
    assert host_dirs.data_caches() == [str(tmp_path / "c"), str(tmp_path / "o"), str(tmp_path / "c" / "rag")]
    # the defaults, which an earlier run filled, are hidden too when they exist: the
    # variables name other folders now, and nothing else would hide them
    (home / ".cache" / "parallel-rollout" / "osworld").mkdir(parents=True)
    assert host_dirs.data_caches(make=False) == [
        str(tmp_path / "c"), str(tmp_path / "o"), str(tmp_path / "c" / "rag"),
        str(home / ".cache" / "parallel-rollout"), str(home / ".cache" / "parallel-rollout" / "osworld")]
    monkeypatch.delenv(images.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert corpus.cache_root() == tmp_path / "xdg" / "parallel-rollout" / "rag"


# ------------------------------------------------------------------ an OSWorld task, end to end


def osworld_run(tmp_path, data, run_id: str, *agent: str) -> list[dict]:
    """A run of ``data``'s OSWorld tasks through the CLI on one desktop VM; its records."""
    done = CliRunner().invoke(main, [
        "run", "--mode", "osworld", "--data", str(data), "--num-rollouts", "1", "--num-vms", "1", "--use-vm-pool",
        "--output-dir", str(tmp_path / "out"), "--action-space", "pyautogui", "--screen-width", str(WIDTH),
        "--screen-height", str(HEIGHT), "--max-turns", "3", "--no-progress", "--run-id", run_id, *agent])
    assert done.exit_code == 0, done.output[-3000:]
    return read_results(tmp_path / "out" / run_id)

#: pyautogui action space: on turn 1 it reads the place it is told of (a folder: every file
#: under it, OSWorld's download cache; a file: where an agent would look beside the task file)
#: and writes the first thing it found into the answer file the task's check reads; then DONE
GOLD_THIEF = r"""
import json, os, sys
where = sys.argv[1]
for line in sys.stdin:
    if json.loads(line)["turn"] == 1:
        files = [os.path.join(d, n) for d, _, names in os.walk(where) for n in names] or [where]
        try:
            answer = open(files[0]).read()
        except OSError as exc:
            answer = exc.strerror
        print(json.dumps(f"import os; open(os.path.expanduser('~/answer.txt'), 'w').write({answer!r})"), flush=True)
    else:
        print(json.dumps("DONE"), flush=True)
"""

def thief(tmp_path, where: Path) -> str:
    """The ``--agent-cmd`` of ``GOLD_THIEF`` told to look at ``where``."""
    script = tmp_path / "thief.py"
    script.write_text(GOLD_THIEF)
    return command_line(script, str(where))


def gold_task(tmp_path, task_id: str, secret: str, gold: str) -> Path:
    """The task file of one OSWorld task on an xterm (the shipped terminal-echo-file's desktop
    and clicks) whose check compares ~/answer.txt with the gold file ``gold`` (a URL or a path
    beside the task file, a ``cloud_file``); its reference types ``secret`` there."""
    terminal = next(t for t in shipped() if t["id"] == "terminal-echo-file")
    task = {**terminal, "id": task_id, "instruction": "Write the secret into ~/answer.txt.",
            "reference": [terminal["reference"][0], {"action_type": "TYPING", "parameters": {
                "text": f"echo '{secret}' > ~/answer.txt\n"}}],
            "evaluator": {"postconfig": [{"type": "sleep", "parameters": {"seconds": 0.5}}],
                          "func": "compare_text_file",
                          "result": {"type": "vm_file", "path": "~/answer.txt", "dest": "answer.txt"},
                          "expected": {"type": "cloud_file", "path": gold, "dest": "gold.txt"}}}
    return write_tasks(tmp_path / "tasks.jsonl", [task])


#: the desktop a process VM runs an OSWorld task on
needs_desktop = pytest.mark.skipif(not all(shutil.which(p) for p in ("Xvfb", "openbox", "xterm")),
                                   reason="the desktop packages are missing (./dev installs them)")


@needs_bwrap
@needs_desktop
def test_an_osworld_agent_cannot_answer_with_the_gold_file_from_the_download_cache(tmp_path, monkeypatch):
    """An OSWorld task whose check compares a file the agent writes with a gold file behind
    a URL (``cloud_file``, fetched into the download cache once per machine): the agent,
    which is never handed the evaluator, found the gold file in the cache and wrote it out.
    It finds nothing now: the task fails, as it should for an agent that cannot know the
    answer; the oracle's answer still passes."""
    osworld_cache = tmp_path / "osworld-cache"
    monkeypatch.setenv(downloads.CACHE_ENV, str(osworld_cache))
    url = "https://files.example/gold-7f3a.txt"
    gold = downloads.cache_path(url, osworld_cache)
    gold.parent.mkdir(parents=True)
    gold.write_text("the secret only the gold file knows\n")
    data = gold_task(tmp_path, "gold-in-cache", "the secret only the gold file knows", url)
    records = osworld_run(tmp_path, data, "thief", "--agent", "command", "--agent-cmd", thief(tmp_path, osworld_cache))
    assert [(r["status"], r["reward"]) for r in records] == [("failure", 0.0)], records
    assert gold.read_text() == "the secret only the gold file knows\n"
    records = osworld_run(tmp_path, data, "oracle", "--agent", "oracle")
    assert [(r["status"], r["reward"]) for r in records] == [("success", 1.0)], records


@needs_bwrap
@needs_desktop
def test_an_osworld_agent_cannot_read_a_gold_file_beside_the_task_file(tmp_path):
    """The gold file of a ``cloud_file`` check given as a path beside the task file
    (``Env.answer_files``): hidden from the command agent as the task file is; the thief that
    read it and wrote it out fails, and the file is as it was. The same thief told of a copy
    elsewhere scores: what fails it is the hiding, not its action (both thief tests share it)."""
    gold = tmp_path / "gold.txt"
    gold.write_text("the secret beside the task file\n")
    data = gold_task(tmp_path, "gold-beside", "the secret beside the task file", "gold.txt")
    records = osworld_run(tmp_path, data, "thief", "--agent", "command", "--agent-cmd", thief(tmp_path, gold))
    assert [(r["status"], r["reward"]) for r in records] == [("failure", 0.0)], records
    # the control: the same thief, told of a copy no task names, scores (its action works)
    copy = tmp_path / "elsewhere" / "copy.txt"
    copy.parent.mkdir()
    copy.write_text(gold.read_text())
    records = osworld_run(tmp_path, data, "control", "--agent", "command", "--agent-cmd", thief(tmp_path, copy.parent))
    assert [(r["status"], r["reward"]) for r in records] == [("success", 1.0)], records
    assert gold.read_text() == "the secret beside the task file\n"


def test_a_worker_s_agents_load_the_task_set_for_its_answer_files_once(tmp_path, monkeypatch):
    """Each env loop of a worker makes its own command agent, and each hides the run's answer
    files: the task set they come from is loaded once a worker process, not once an agent
    (369 OSWorld tasks take 40-70 ms); the start's check (the runner's process) loads afresh."""
    gold = tmp_path / "gold.txt"
    gold.write_text("the answer\n")
    data = gold_task(tmp_path, "gold-once", "the answer", "gold.txt")
    loads = []
    real = command.task_answer_files  # the one that loads the tasks (envs.registry's)
    monkeypatch.setattr(command, "task_answer_files", lambda *a, **k: loads.append(a) or real(*a, **k))
    command._answer_files_once.cache_clear()
    config = make_config(mode="osworld", data=str(data), agent="command", agent_cmd=f"{sys.executable} -c pass")
    agents = [CommandAgent(config) for _ in range(3)]
    assert all(str(gold) in agent.withheld for agent in agents)
    assert len(loads) == 1
    assert str(gold) in command.answer_files(config)
    assert len(loads) == 2


#: on turn 1 it looks its task up in the project's OSWorld references (the runner's code, which
#: it may read) and says FAIL where the reference does (an infeasible task), else DONE
REFERENCE_THIEF = r"""
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    try:
        entries = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
    except OSError:
        entries = []
    reference = next((e["reference"] for e in entries if e["id"] == message["task_id"]), ["DONE"])
    print(json.dumps("FAIL" if reference[-1] == "FAIL" else "DONE"), flush=True)
"""
#: an infeasible OSWorld task (os: switch the Bluetooth on) with a project reference: FAIL
INFEASIBLE = ("os", "b3d4a89c-53f2-4d6b-8b6a-541fb5d205fa")
EXAMPLES = Path("/work/shared/osworld/evaluation_examples")


@needs_bwrap
@needs_desktop
@pytest.mark.skipif(not (EXAMPLES / "test_all.json").is_file(), reason="OSWorld's task set is not at /work/shared/osworld")
def test_an_osworld_agent_cannot_read_the_projects_reference_for_its_task(tmp_path):
    """The project's references for real OSWorld tasks (``envs/data/osworld_references.jsonl``,
    in the runner's code, which a command agent's program may read) are the oracle's answer
    key: a program that looked its task id up there said FAIL on an infeasible task, passed,
    and would have replayed the actions of a feasible one. The file is empty to it now."""
    from parallel_rollout.envs.osworld.references import references_file

    script = tmp_path / "thief.py"
    script.write_text(REFERENCE_THIEF)
    index = tmp_path / "one.json"
    index.write_text(json.dumps({INFEASIBLE[0]: [INFEASIBLE[1]]}))
    records = osworld_run(tmp_path, EXAMPLES, "references", "--osworld-index", str(index), "--agent", "command",
                          "--agent-cmd", command_line(script, references_file()))
    assert [(r["status"], r["reward"]) for r in records] == [("failure", 0.0)], records
