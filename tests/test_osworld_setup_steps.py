"""OSWorld's setup steps as its SetupController runs them, against a real guest agent (no
desktop): an ``execute`` step's ``stdout``/``stderr`` kept in the attempt's cache folder,
where a ``cache_file`` getter reads them (OSWorld's thunderbird and multi_apps tasks list
a folder this way)."""

from __future__ import annotations

from types import SimpleNamespace

from parallel_rollout.envs.osworld import setup as steps
from parallel_rollout.envs.osworld.getters import GETTERS
from parallel_rollout.tasks import Task

from test_guest import agent  # noqa: F401  (the fixture: a running agent, no desktop)


def test_execute_keeps_its_output_for_the_cache_file_getter(agent, tmp_path):  # noqa: F811
    client, home = agent
    (home / "Local Folders").mkdir()
    (home / "Local Folders" / "COMPANY.msf").write_text("")
    env = SimpleNamespace(task=Task(id="t1", mode="osworld", payload={}), vm=client,
                          cache_dir=str(tmp_path / "attempt"), placeholders={})
    steps.run_steps(env, [
        {"type": "execute", "parameters": {"command": ["ls", "-R", str(home / "Local Folders")],
                                           "stdout": "listing.ls"}},
        {"type": "execute", "parameters": {"command": "ls /no/such/folder", "shell": True,
                                           "stderr": "errors.txt"}}], "postconfig")
    listing = GETTERS["cache_file"](env, {"type": "cache_file", "path": "listing.ls"})
    assert "COMPANY.msf" in open(listing).read()
    errors = GETTERS["cache_file"](env, {"type": "cache_file", "path": "errors.txt"})
    assert "No such file" in open(errors).read()


def test_execute_runs_until_one_of_its_conditions_holds(agent, tmp_path):  # noqa: F811
    """As OSWorld's ``_execute_setup`` (its conditions joined by ``or``): the command's exit
    status 0 ends the wait though its output never shows the text also waited for."""
    client, home = agent
    count = home / "runs.txt"
    env = SimpleNamespace(task=Task(id="t1", mode="osworld", payload={}), vm=client,
                          cache_dir=str(tmp_path / "attempt"), placeholders={})
    steps.run_steps(env, [{"type": "execute", "parameters": {
        "command": f"echo run >> {count}", "shell": True, "timeout": 5,
        "until": {"returncode": 0, "stdout": "never printed"}}}], "config")
    assert count.read_text().splitlines() == ["run"]
