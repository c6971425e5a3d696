"""The guest agent on a machine of one's own (the ``remote`` provider's README section): a
home and a ``/tmp`` that hold what other programs made before the run, and processes of the
user's that are not the run's. Real guest agents on 127.0.0.1 (``test_remote.Machines``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from parallel_rollout.cli import main
from parallel_rollout.guest import agent_grading
from parallel_rollout.guest.client import GuestClient
from providers import test_remote
from providers.test_remote import Machines

machines = test_remote.machines  # the fixture: real guest agents on 127.0.0.1


@pytest.fixture(autouse=True)
def _no_link_left(tmp_path):
    """The links into /proc these tests make are gone after them: pytest keeps a test's
    folder, under /tmp, where a check of another run would meet them."""
    yield
    for link in tmp_path.rglob("*"):
        if link.is_symlink() and os.readlink(link).startswith("/proc/"):
            link.unlink()


def _stray_link(machine: Machines) -> str:
    """A link into /proc that a program of the machine left in the home long before the run
    (older than the slack a link's date is given)."""
    home = machine.home(machine.ports[0])
    (home / ".cache").mkdir()
    stray = home / ".cache" / "stale-fd"
    os.symlink("/proc/self/fd/0", stray)
    time.sleep(agent_grading.SINCE_SLACK_S + 0.2)
    return str(stray)


def test_a_link_into_proc_made_before_the_run_fails_no_check(machines, tmp_path):
    """An old link of another program's was taken for the answer's: every check of the run
    was refused (126), every sample graded 0."""
    _stray_link(machines)
    tasks = [{"id": f"count-{n}", "mode": "shell", "instruction": "count",
              "setup": [f"seq 1 {n} > ~/data-{n}.txt"], "check": f"test \"$(cat ~/count-{n}.txt)\" = {n}",
              "reference": [f"wc -l < ~/data-{n}.txt > ~/count-{n}.txt"]} for n in (3, 5, 7)]
    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    result = CliRunner().invoke(main, [
        "--mode", "shell", "--data", str(data), "--provider-name", "remote",
        "--vm-address", machines.addresses[0], "--num-rollouts", "1", "--reset-command", "none",
        "--output-dir", str(tmp_path / "out"), "--run-id", "own", "--no-progress"])
    records = [json.loads(line) for line in (tmp_path / "out" / "own" / "results.jsonl").read_text().splitlines()]
    assert [(r["task_id"], r["reward"]) for r in records] == [(t["id"], 1.0) for t in tasks], \
        [r["eval"] for r in records]
    assert result.exit_code == 0, result.output


def _links_of(result: dict, home: str) -> list[str]:
    """The links of ``home`` that a check's result says it was refused for ([] when it ran),
    checking that the count it gives is of the links it names (the first 3, the home's first)."""
    if result["returncode"] != 126:
        return []
    count = int(re.search(r"left (\d+) link\(s\)", result["error"]).group(1))
    named = result["error"].rsplit("): ", 1)[1].split(", ")
    assert count == len(named) if count <= 3 else len(named) == 3, result
    return [link for link in named if link.startswith(home + "/")]


def test_the_answers_own_links_are_still_refused_and_named_once(machines):
    """The attempt's links into /proc are caught beside an older one, a chain through the
    older one included; each named once (the home lies inside /tmp here) and never the old
    one, which is not the answer's. The machine is this host: its /tmp is everyone's, and a
    link into /proc that another program (a test run beside this one) made there during the
    attempt counts too (it failed this test once): only the home's are told apart, which the
    agent looks at and names first."""
    stray = _stray_link(machines)
    home = str(machines.home(machines.ports[0]))
    client = GuestClient(f"http://{machines.addresses[0]}")  # as a lease makes it
    check = "grep -q 1 ~/count.txt"
    for answer, target in (("ln -s /proc/self/cmdline ~/count.txt", "/proc/self/cmdline"),
                           (f"ln -s {stray} ~/count.txt", stray)):
        assert client.execute(f"rm -f ~/count.txt; {answer}", shell=True)["returncode"] == 0
        result = client.execute(check, shell=True, isolated=True, refuse_proc_links=True)
        assert result["returncode"] == 126, result
        assert "made during the attempt" in result["error"] and stray + " ->" not in result["error"], result
        assert _links_of(result, home) == [f"{home}/count.txt -> {target}"], result
    # an old link alone, which nothing of the attempt made, stops no check (but another's new one)
    client.execute("rm -f ~/count.txt; echo 1 > ~/count.txt", shell=True)
    result = client.execute(check, shell=True, isolated=True, refuse_proc_links=True)
    assert result["returncode"] in (0, 126) and not _links_of(result, home), result
    # a client that does not date its links (an older one) has every link looked at, as before
    raw = client.request("POST", "/execute", json={"command": check, "shell": True, "isolated": True,
                                                    "refuse_proc_links": True}).json()
    assert raw["returncode"] == 126 and "made during the attempt" not in raw["error"], raw
    bad = client.request("POST", "/execute", check=False, json={
        "command": check, "shell": True, "refuse_proc_links": True, "links_made_within_s": -1})
    assert bad.status == 400 and "links_made_within_s" in bad.text


def test_a_clock_stepped_forward_during_the_attempt_hides_no_link(tmp_path, monkeypatch):
    """A machine reverted to a snapshot wakes with the snapshot's time, and its tools or NTP
    step the clock forward once it runs: a link the answer made before the step is dated
    before "now minus the attempt's seconds", and was left out. The agent's own code, in
    this process, with its wall clock read an hour ahead after the link was made."""
    from parallel_rollout.guest import agent_commands

    monkeypatch.setenv("HOME", str(tmp_path))
    agent_commands.run(["true"], shell=False, timeout=10)  # a command of the attempt, before the step
    os.symlink("/proc/self/cmdline", tmp_path / "count.txt")
    wall = time.time
    monkeypatch.setattr(time, "time", lambda: wall() + 3600.0)
    result, _ = agent_commands._refused_links(30.0, 5.0)
    monkeypatch.undo()
    assert result.get("returncode") == 126 and f"{tmp_path}/count.txt -> /proc/self/cmdline" in result["error"], result


@pytest.mark.parametrize("where", ["disk", "tmpfs"])
def test_a_link_made_deep_in_a_big_old_tree_is_found_without_reading_the_old_folders(tmp_path, where, monkeypatch):
    """A home holding a big tree from before the attempt (a virtualenv on a machine of one's
    own, a snapshot's files in a sandbox's tmpfs home): a check's scan reads the folders dated
    since the lease and those that lead to them, not every old folder of the tree (it read
    them all on every check: ~0.5 s per 100k files), and still finds a link the answer made
    anywhere in it: in an old leaf folder, in a new folder below an old one, renamed into
    one, or a hard link of an older link (its new place is dated)."""
    if where == "tmpfs" and not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm")
    home = Path(tempfile.mkdtemp(dir="/dev/shm")) if where == "tmpfs" else tmp_path / "home"
    try:
        site = home / "venv" / "site-packages"
        for number in range(40):
            for folder in (site / f"pkg{number}", site / f"pkg{number}" / "__pycache__", site / f"pkg{number}" / "sub"):
                folder.mkdir(parents=True)
                for index in range(5):
                    (folder / f"m{index}.py").touch()
        stray = site / "pkg1" / "sub" / "stale-fd"  # a program's, before the attempt: not the answer's
        os.symlink("/proc/self/fd/0", stray)
        time.sleep(agent_grading.SINCE_SLACK_S + 0.2)
        since = time.time() - agent_grading.SINCE_SLACK_S  # the lease
        monkeypatch.setattr(agent_grading, "WRITABLE_FOLDERS", ())  # this home alone
        made = [site / "pkg7" / "sub" / "count.txt", site / "pkg9" / "__pycache__" / "new" / "deeper" / "x",
                site / "pkg3" / "sub" / "moved", site / "pkg5" / "__pycache__" / "hard"]
        os.symlink("/proc/self/cmdline", made[0])
        made[1].parent.mkdir(parents=True)
        os.symlink("/proc/self/cmdline", made[1])
        os.symlink("/proc/self/cmdline", home / "staged")
        os.rename(home / "staged", made[2])
        os.link(stray, made[3], follow_symlinks=False)
        read: list[str] = []
        scandir = os.scandir
        monkeypatch.setattr(agent_grading.os, "scandir", lambda path: read.append(path) or scandir(path))
        found = agent_grading.links_into_processes(str(home), time.monotonic() + 60, since)
        monkeypatch.undo()
        assert sorted(found) == sorted(f"{link} -> {os.readlink(link)}" for link in made), found
        untouched = {str(site / f"pkg{n}" / leaf) for n in (0, 2, 20, 39) for leaf in ("__pycache__", "sub")}
        assert not untouched & set(read), sorted(untouched & set(read))
        assert len(read) < 3 * 40, len(read)
        # without the lease's time every folder is read and every link looked at, the old one too
        assert str(stray) + " -> /proc/self/fd/0" in agent_grading.links_into_processes(str(home), time.monotonic() + 60)
    finally:
        for link in home.rglob("*"):  # no link into /proc left where another run's check looks
            if link.is_symlink():
                link.unlink()
        shutil.rmtree(home, ignore_errors=True)
