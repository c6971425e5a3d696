"""The guest agent on a machine of one's own (the ``remote`` provider's README section): a
home and a ``/tmp`` that hold what other programs made before the run, and processes of the
user's that are not the run's. Real guest agents on 127.0.0.1 (``test_remote.Machines``).
"""

from __future__ import annotations

import json
import os
import time

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


def test_the_answers_own_links_are_still_refused_and_named_once(machines):
    """The attempt's links into /proc are caught beside an older one, a chain through the
    older one included; each named once (the home lies inside /tmp here) and never the old
    one, which is not the answer's."""
    stray = _stray_link(machines)
    client = GuestClient(f"http://{machines.addresses[0]}")  # as a lease makes it
    check = "grep -q 1 ~/count.txt"
    for answer in ("ln -s /proc/self/cmdline ~/count.txt", f"ln -s {stray} ~/count.txt"):
        assert client.execute(f"rm -f ~/count.txt; {answer}", shell=True)["returncode"] == 0
        result = client.execute(check, shell=True, isolated=True, refuse_proc_links=True)
        assert result["returncode"] == 126, result
        assert result["error"].count("/count.txt ->") == 1 and stray + " ->" not in result["error"], result
        assert "1 link(s) made during the attempt" in result["error"], result
    # an old link alone, which nothing of the attempt made, stops no check
    client.execute("rm -f ~/count.txt; echo 1 > ~/count.txt", shell=True)
    assert client.execute(check, shell=True, isolated=True, refuse_proc_links=True)["returncode"] == 0
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
