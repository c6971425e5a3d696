"""What a remote machine's first boot finds against the run's settings, and what ``--dry-run``
finds of it before: a machine no reset or other boot mends stops the run at once (exit 2), its
attempts left to ``--resume``. Real guest agents on 127.0.0.1, one started without the route
OSWorld's older servers lack (``/run_python``), as a user's machine may run."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import read_results, write_tasks
from parallel_rollout.cli import main
from parallel_rollout.errors import VMSettingsMismatch
from parallel_rollout.guest.client import GuestClient
from parallel_rollout.pool.providers.base import ProviderOptions
from parallel_rollout.pool.providers.remote import RemoteProvider
from providers.test_remote import AGENT, _free_port
from providers.test_remote_desktop import desktop_agent

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


@pytest.mark.skipif(not all(shutil.which(p) for p in ("Xvfb", "openbox", "xdotool")),
                    reason="no Xvfb, openbox or xdotool for a desktop")
def test_the_dry_run_finds_what_a_first_boot_would_stop_at(tmp_path):
    """--dry-run asks each machine what its first boot checks: a screen of another size, no
    desktop, no /run_python under --verify-reset. It said all was well of such machines (it
    asked only GET /platform), and the run then stopped at their first boot."""
    tasks = write_tasks(tmp_path / "o.jsonl", [
        {"id": "t0", "mode": "osworld", "instruction": "nothing to do", "config": [],
         "evaluator": {"func": "infeasible"}, "reference": ["FAIL"]}])

    def dry(data: Path, *addresses: str, args: tuple[str, ...] = ("--reset-command", "none")):
        return CliRunner().invoke(main, [
            "--data", str(data), "--agent", "oracle", "--provider-name", "remote", "--use-vm-pool",
            "--num-vms", str(len(addresses)), *(a for address in addresses for a in ("--vm-address", address)),
            *args, "--output-dir", str(tmp_path / "out"), "--dry-run"])

    (tmp_path / "plain").mkdir()
    with desktop_agent(tmp_path, AGENT, size="1280x720") as port, \
            agent(tmp_path / "plain", without=("/run_python",)) as plain:
        small = f"127.0.0.1:{port}"
        result = dry(tasks, small, plain)
        assert result.exit_code == 2, result.output
        said = " ".join(result.output.split())
        assert (f"machines: the remote machines: http://{small} has a 1280x720 screen; the run asks for 1920x1080: "
                "set the machine's screen to 1920x1080, or start a new run with --screen-width 1280 "
                "--screen-height 720") in said, said
        assert f"http://{plain} has no desktop: its agent answered POST /screen_size with 503" in said, said
        assert "start it with --desktop 1920x1080, the run's screen" in said, said
        fits = dry(tasks, small, args=("--reset-command", "none", "--screen-width", "1280", "--screen-height", "720",
                                       "--verify-reset", "off"))
        assert fits.exit_code == 0, fits.output
        probed = dry(_shell_tasks(tmp_path), small, plain, args=("--reset-command", "true", "--verify-reset", "fast"))
    assert probed.exit_code == 2, probed.output
    said = " ".join(probed.output.split())
    assert (f"machines: the remote machines: http://{plain}: its agent has no POST /run_python, which --verify-reset "
            "fast runs its probe through (HTTP 404)") in said, said
    assert small not in said, said  # this project's agent has it
    assert not (tmp_path / "out").exists()


def test_an_address_where_no_guest_agent_listens_stops_at_its_first_boot(tmp_path):
    """--vm-address naming another web server (a wrong port): it answers GET /platform 404 for
    the whole boot timeout, and no reset or other boot puts an agent there, so the first boot is
    the run's settings. It was a failed boot: booted again, a --boot-timeout-s each (a minute
    by default), until the replacement budget was spent, and the run exited 1."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(tmp_path)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    address = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        provider = RemoteProvider("r", ProviderOptions(vm_addresses=(address,), reset_command="true",
                                                       boot_timeout_s=1.0))
        with pytest.raises(VMSettingsMismatch, match=re.escape(
                f"VM vm0: {address} answered GET /platform with HTTP 404 for 1s (--boot-timeout-s): no guest agent "
                "listens there")):
            provider.start("vm0")
    finally:
        server.shutdown()
        server.server_close()
