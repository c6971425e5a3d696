"""What a remote machine's first boot finds against the run's settings, and what ``--dry-run``
finds of it before: a machine no reset or other boot mends stops the run at once (exit 2), its
attempts left to ``--resume``. Real guest agents on 127.0.0.1, one started without the route
OSWorld's older servers lack (``/run_python``), as a user's machine may run."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

from click.testing import CliRunner

from conftest import read_results, write_tasks
from parallel_rollout.cli import main
from parallel_rollout.guest.client import GuestClient
from providers.test_remote import AGENT, _free_port

#: the guest agent with some of its routes taken away (a server that lacks them)
WITHOUT_ROUTES = """import sys
sys.path.insert(0, {folder!r})
import agent_server
for route in {routes!r}:
    del agent_server.ROUTES[route]
sys.exit(agent_server.main())
"""


@contextmanager
def agent(tmp_path: Path, *args: str, without: tuple[str, ...] = ()):
    """A guest agent on a free port of 127.0.0.1 (its home in ``tmp_path``), without the routes
    ``without``; yields its address HOST:PORT."""
    home, port = tmp_path / "home", _free_port()
    home.mkdir(exist_ok=True)
    script = [str(AGENT)]
    if without:
        script = ["-c", WITHOUT_ROUTES.format(folder=str(AGENT.parent), routes=without)]
    with (tmp_path / "agent.log").open("ab") as log:
        proc = subprocess.Popen([sys.executable, "-I", *script, "--host", "127.0.0.1", "--port", str(port), *args],
                                cwd=home, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                env={"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"})
    try:
        GuestClient(f"http://127.0.0.1:{port}").wait_ready(30)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _shell_tasks(tmp_path: Path, count: int = 2) -> Path:
    return write_tasks(tmp_path / "tasks.jsonl", [
        {"id": f"t{i}", "mode": "shell", "instruction": "x", "check": "true", "reference": ["true"]}
        for i in range(count)])


def _boots(run: Path) -> list[dict]:
    return [e for e in map(json.loads, (run / "events.jsonl").read_text().splitlines())
            if e.get("event") == "vm" and e.get("to") == "booting"]


def test_a_verified_run_on_an_agent_without_run_python_stops_at_its_first_boot(tmp_path):
    """--verify-reset on a machine whose agent has no POST /run_python (OSWorld's server):
    no reset or other boot gives it one, so the run stops at the first boot (exit 2), naming
    the machine and what to change, its attempts left to a resume with --verify-reset off.
    It was taken for a failed boot: the machine was booted again until the replacement budget
    was spent, and the run exited 1."""
    data = _shell_tasks(tmp_path)
    with agent(tmp_path, without=("/run_python",)) as address:
        result = CliRunner().invoke(main, [
            "--mode", "shell", "--data", str(data), "--agent", "oracle", "--provider-name", "remote",
            "--vm-address", address, "--reset-command", "true", "--verify-reset", "fast", "--num-rollouts", "1",
            "--output-dir", str(tmp_path / "out"), "--run-id", "r", "--no-progress"])
    assert result.exit_code == 2, result.output
    said = re.search(r"run stopped: (.*)", result.output).group(1)
    assert said.startswith(f"VM vm-0 (http://{address}): its agent has no POST /run_python, which "
                           "--verify-reset fast runs its probe through (guest agent answered 404"), said
    assert said.endswith("run this project's guest agent there (guest/server.py), or --verify-reset off "
                         "(a resume may give it)"), said
    assert "resume with:" in result.output
    run = tmp_path / "out" / "r"
    assert len(_boots(run)) == 1  # no replacement booted
    assert [(r["status"], r["final"]) for r in read_results(run)] == [("vm_settings_mismatch", False)]
