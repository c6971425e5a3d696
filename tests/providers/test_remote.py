"""The remote provider against real guest agents on 127.0.0.1, reset by a script of the test.

Each "remote machine" is our guest agent started as ``python3 guest/server.py --host
127.0.0.1 --port P`` with its own home folder, as a user would run it (or OSWorld's server) on
a machine of their own. ``reset_machine.py`` (written below, given as ``--reset-command``)
plays the user's snapshot revert: it kills every process of that machine, the agent and
whatever it started, found by a marker in their environment (a stray ``setsid`` daemon keeps
it), copies the snapshot folder over the home, and starts a fresh agent on the same port.

Why not the contract suite (tests/providers/test_contract.py): its clauses assume the provider
owns what it starts — "stop leaves nothing" and "sweep after a SIGKILLed owner" count the
provider's processes and folders, which for remote are none by design (the machines are the
user's, and must outlive ``stop``); its sweep child builds the provider from options without
addresses; and its reset clause checks ``/tmp``, which machines that are plain processes on
this host share. The clauses that do apply (start reaches the agent, execute, files, reset
kills strays and restores the home, healthy after a kill from outside, stop idempotent) are
here, against the remote semantics.

The shell benchmark runs through the pool on two such machines minus the tasks that test
sandbox isolation rather than the harness: these "VMs" share this host's ``/tmp``, ``/proc``
(another session's stray would be seen) and network, which no reset script of a test can
give back; the home-only isolation pair (leave-leftover / no-leftover) stays in.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from parallel_rollout.cli import main
from parallel_rollout.config import build_config
from parallel_rollout.vm_address import normalize_address
from parallel_rollout.errors import ConfigError, VMError, VMSettingsMismatch
from parallel_rollout.guest.client import GuestClient, keyed_address
from parallel_rollout.pool.providers import get_provider
from parallel_rollout.pool.providers.base import ProviderOptions
from parallel_rollout.pool.providers.remote import RemoteProvider

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "src" / "parallel_rollout" / "guest" / "server.py"
SHELL_TASKS = ROOT / "benchmarks" / "shell_tasks.jsonl"
#: tasks that check the sandbox (shared /tmp, /proc, network here), not the harness
HOST_SHARED = {"start-sleeper", "no-stray-process", "tmp-scratch", "tmp-clean", "no-network"}
STRAY = "pr-remote-stray"
MARKER = "PR_REMOTE_MACHINE"

RESET_SCRIPT = textwrap.dedent('''
    """Reset one test machine: kill its processes, restore its home, start its agent."""
    import os, shutil, signal, subprocess, sys, time
    port, state, marker, agent = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    tag = f"{marker}={open(os.path.join(state, 'token')).read().strip()}-{port}".encode()
    if os.path.exists(os.path.join(state, f"fail-{port}")):
        print(f"cannot revert machine {port}: snapshot locked", flush=True)
        sys.exit(3)

    def ours():
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if tag in f.read().split(b"\\0"):
                        found.append(int(pid))
            except OSError:
                pass
        return found

    for pid in ours():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while any(open(f"/proc/{p}/stat").read().split(")")[-1].split()[0] != "Z"
              for p in ours() if os.path.exists(f"/proc/{p}/stat")):
        if time.monotonic() > deadline:
            sys.exit("processes of the machine survived SIGKILL")
        time.sleep(0.01)
    home = os.path.join(state, f"home-{port}")
    shutil.rmtree(home, ignore_errors=True)
    shutil.copytree(os.path.join(state, "snapshot"), home)
    env = {"PATH": os.environ["PATH"], "HOME": home, "LANG": "C.UTF-8",
           marker: tag.decode().split("=", 1)[1]}
    key = os.path.join(state, "key")  # a machine started with a key: its agent's --key-file
    with open(os.path.join(state, f"agent-{port}.log"), "ab") as log:
        subprocess.Popen([sys.executable, "-I", agent, "--host", "127.0.0.1", "--port", port,
                          *(["--key-file", key] if os.path.exists(key) else [])],
                         cwd=home, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                         start_new_session=True)
    print(f"machine {port} reverted", flush=True)
''')


class Machines:
    """Guest agents on 127.0.0.1 ports, each with a home restored from one snapshot folder."""

    def __init__(self, state: Path, count: int, key: str | None = None) -> None:
        self.state = state
        self.token = uuid.uuid4().hex[:12]
        state.mkdir(parents=True)
        (state / "token").write_text(self.token)
        #: the key each agent is started with (``--key-file``), in ``key_file``; None: none
        self.key, self.key_file = key, state / "key"
        if key is not None:
            self.key_file.write_text(key + "\n")
            self.key_file.chmod(0o600)
        (state / "snapshot").mkdir()
        (state / "snapshot" / "snapshot.txt").write_text("from the snapshot\n")
        self.script = state / "reset_machine.py"
        self.script.write_text(RESET_SCRIPT)
        self.ports = [_free_port() for _ in range(count)]
        self.addresses = [f"127.0.0.1:{p}" for p in self.ports]
        #: what the user would pass as --reset-command
        self.reset_command = (f"{sys.executable} {self.script} {{port}} {state} {MARKER} {AGENT}")
        for port in self.ports:  # "power on": the same script starts each agent
            subprocess.run([sys.executable, str(self.script), str(port), str(state), MARKER,
                            str(AGENT)], check=True, capture_output=True, timeout=30)
        for address in self.addresses:
            self.client(address).wait_ready(15)

    def client(self, address: str) -> GuestClient:
        """A client of the agent at ``address`` (HOST:PORT), with the machines' key."""
        return GuestClient(keyed_address(f"http://{address}", self.key) if self.key else f"http://{address}")

    def home(self, port: int) -> Path:
        return self.state / f"home-{port}"

    def processes(self) -> list[psutil.Process]:
        """Every process of these machines (agents and what they started)."""
        found = []
        for proc in psutil.process_iter():
            try:
                env = proc.environ()
                if env.get(MARKER, "").startswith(self.token + "-") and \
                        proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(proc)
            except psutil.Error:
                pass
        return found

    def power_off(self) -> None:
        procs = self.processes()
        for proc in procs:
            try:
                proc.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(procs, timeout=10)
        _reap_children()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _reap_children() -> None:
    # collect the exit status of any agent this process started (or adopted) that has ended
    for proc in psutil.Process().children():
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(proc.pid, os.WNOHANG)
        except (psutil.Error, ChildProcessError):
            pass


@pytest.fixture
def machines(tmp_path):
    found = Machines(tmp_path / "machines", 2)
    try:
        yield found
    finally:
        found.power_off()


def remote(machines: Machines, **options) -> RemoteProvider:
    options.setdefault("vm_addresses", tuple(machines.addresses))
    options.setdefault("reset_command", machines.reset_command)
    options.setdefault("boot_timeout_s", 20.0)
    return RemoteProvider(f"remote-{uuid.uuid4().hex[:6]}", ProviderOptions(**options))


def _stray_running(machines: Machines) -> bool:
    return any(STRAY in " ".join(p.cmdline()) for p in machines.processes())


# ------------------------------------------------------------------------ the provider


def test_registered_and_sweep_has_nothing_to_remove():
    assert get_provider("remote") is RemoteProvider
    assert RemoteProvider.sweep() == [] and RemoteProvider.sweep("any-run") == []


def test_start_execute_files_reset_and_stop(machines):
    provider = remote(machines)
    info = provider.start("vm0")
    try:
        assert info.provider == "remote" and info.vm_id == "vm0"
        assert info.address == f"http://{machines.addresses[0]}"
        port = info.private["port"]
        client = GuestClient(info.address)
        assert client.platform() == "Linux" and provider.healthy(info)
        assert client.execute("echo $((6 * 7)); pwd", shell=True)["output"] == \
            f"42\n{machines.home(port)}\n"
        payload = bytes(range(256)) * 64
        client.write_file("~/sub/blob.bin", payload)
        assert client.read_file("~/sub/blob.bin") == payload
        # a daemon that escapes the agent's process group, as a leaky task's would
        client.execute(f"setsid bash -c 'exec -a {STRAY} sleep 1000' >/dev/null 2>&1 "
                       "< /dev/null &", shell=True)
        deadline = time.monotonic() + 10
        while not _stray_running(machines):
            assert time.monotonic() < deadline, "the stray never started"
            time.sleep(0.05)
        old_agent = client.health()["pid"]

        info = provider.reset(info)
        assert provider.healthy(info) and client.health()["pid"] != old_agent
        listing = client.execute("ls -A ~", shell=True)["output"].split()
        assert listing == ["snapshot.txt"], listing
        assert not _stray_running(machines), "a process of the last task survived the reset"
    finally:
        provider.stop(info)
    provider.stop(info)  # twice is fine
    assert not provider.healthy(info), "a stopped VM is not this provider's any more"
    # the machine is the user's: stop gives the address back and leaves it running
    assert GuestClient(info.address).platform() == "Linux"


def test_each_address_is_one_vm_and_comes_back_after_stop(machines):
    provider = remote(machines, boot_timeout_s=1.5)
    first, second = provider.start("vm0"), provider.start("vm1")
    assert {first.address, second.address} == {f"http://{a}" for a in machines.addresses}
    started = time.monotonic()
    with pytest.raises(VMError, match="all 2 remote addresses are in use"):
        provider.start("vm2")
    assert time.monotonic() - started >= 1.4  # it waited for one to come back
    # a replacement boots while its dead predecessor is still being stopped: it waits
    got: dict = {}
    waiter = threading.Thread(target=lambda: got.update(info=provider.start("vm3")))
    waiter.start()
    time.sleep(0.2)
    provider.stop(first)
    waiter.join(10)
    assert got["info"].address == first.address
    for info in (second, got["info"]):
        provider.stop(info)


def test_reset_command_placeholders_environment_and_failures(machines, tmp_path):
    seen = tmp_path / "seen.txt"
    command = (f"echo {{address}} {{host}} {{port}} {{vm_id}} {{run_id}} "
               f"$PARALLEL_ROLLOUT_VM_PORT $PARALLEL_ROLLOUT_VM_ID awk-keeps-'{{x}}' >> {seen}")
    provider = remote(machines, vm_addresses=(machines.addresses[0],), reset_command=command)
    info = provider.start("vm0")
    provider.reset(info)
    port = machines.ports[0]
    line = f"http://127.0.0.1:{port} 127.0.0.1 {port} vm0 {provider.run_id} {port} vm0 awk-keeps-{{x}}"
    assert seen.read_text().splitlines() == [line, line]  # start resets too
    provider.stop(info)

    failing = remote(machines)
    info = failing.start("vm0")
    (machines.state / f"fail-{info.private['port']}").write_text("")
    with pytest.raises(VMError, match=r"reset command \(--reset-command\) exited with 3: cannot revert machine "
                                      rf"{info.private['port']}: snapshot locked"):
        failing.reset(info)
    failing.stop(info)

    flag = tmp_path / "hang"
    flag.write_text("")
    hanging = remote(machines, boot_timeout_s=1.0, vm_addresses=(machines.addresses[0],),
                     reset_command=f"echo reverting; test -e {flag} && exec sleep 60; true")
    started = time.monotonic()
    with pytest.raises(VMError, match=r"did not finish within 1s \(killed; --boot-timeout-s allows more\); output: reverting"):
        hanging.start("vm0")
    assert time.monotonic() - started < 5  # and the leak check finds no sleep left
    flag.unlink()
    info = hanging.start("vm1")
    assert info.address == hanging.addresses[0], "a failed start kept its address"
    hanging.stop(info)


def test_reset_none_keeps_the_machine_as_it_is(machines, caplog):
    with caplog.at_level("WARNING"):
        provider = remote(machines, reset_command="none")
        info = provider.start("vm0")
    assert "VMs are never reset" in caplog.text
    client = GuestClient(info.address)
    client.write_file("~/kept.txt", b"still here")
    info = provider.reset(info)
    assert client.read_file("~/kept.txt") == b"still here"
    provider.stop(info)


def test_healthy_turns_false_when_the_machine_dies_and_reset_brings_it_back(machines):
    provider = remote(machines)
    info = provider.start("vm0")
    agent = GuestClient(info.address).health()["pid"]
    os.kill(agent, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while provider.healthy(info):
        assert time.monotonic() < deadline, "still healthy 10 s after the agent was killed"
        time.sleep(0.1)
    assert provider.healthy(provider.reset(info))
    provider.stop(info)


def test_a_desktop_run_on_an_agent_without_a_desktop_stops_at_once(machines, tmp_path):
    """An osworld run on a machine whose agent was started without --desktop: no reset or
    new boot gives it one, so the run stops at its first boot (exit 2), naming the machine and
    the agent's flag with the run's size. It was taken for a failed boot: the machine was reset
    and booted again until the replacement budget was spent, and the run exited 1."""
    provider = remote(machines, desktop=True, screen_width=1024, screen_height=768)
    with pytest.raises(VMSettingsMismatch, match=re.escape("has no desktop: its agent answered POST /screen_size "
                                                           "with 503")):
        provider.start("vm0")
    data = tmp_path / "tasks.jsonl"
    data.write_text(json.dumps({"id": "t0", "mode": "osworld", "instruction": "nothing to do", "config": [],
                                "evaluator": {"func": "infeasible"}, "reference": ["FAIL"]}) + "\n")
    result = CliRunner().invoke(main, [
        "--mode", "osworld", "--data", str(data), "--agent", "oracle", "--provider-name", "remote",
        "--vm-address", machines.addresses[0], "--reset-command", machines.reset_command, "--num-rollouts", "1",
        "--output-dir", str(tmp_path / "out"), "--run-id", "r", "--no-progress"])
    assert result.exit_code == 2, result.output
    said = re.search(r"run stopped: (.*)", result.output).group(1)
    assert said.startswith(f"VM vm-0 (http://{machines.addresses[0]}) has no desktop: its agent answered "
                           "POST /screen_size with 503"), said
    assert said.endswith("start it with --desktop 1920x1080, the run's screen"), said
    run = tmp_path / "out" / "r"
    boots = [e for e in map(json.loads, (run / "events.jsonl").read_text().splitlines()) if e.get("to") == "booting"]
    assert len(boots) == 1, boots  # no replacement booted


@pytest.mark.parametrize("options, message", [
    ({"vm_addresses": ()}, "needs the guest addresses of its VMs: --vm-address"),
    ({"reset_command": None}, "remote VMs cannot be reset without --reset-command"),
    ({"reset_command": "  "}, "--reset-command none accepts no reset"),
    ({"vm_addresses": ("h:1", "http://h:1/")}, "names http://h:1 more than once"),
    ({"vm_addresses": ("h:99999",)}, "port from 1 to 65535"),
    ({"vm_addresses": ("https://h",)}, "plain http"),
    ({"path_to_vm": "/vms/ubuntu.vmx"}, "cannot honour --path-to-vm"),
    ({"snapshot_name": "init_state"}, "cannot honour --snapshot-name"),
    ({"memory_mb": 512}, "cannot enforce --vm-memory-mb"),
    ({"max_processes": 64}, "cannot enforce --vm-max-processes"),
], ids=lambda v: str(v)[:30])
def test_what_it_cannot_honour_is_a_config_error(options, message):
    values = {"vm_addresses": ("127.0.0.1:5000",), "reset_command": "true", **options}
    with pytest.raises(ConfigError, match=re.escape(message)):
        RemoteProvider("r", ProviderOptions(**values))


def test_address_forms():
    assert [normalize_address(a) for a in ("10.0.0.5", "vm1:5001", "http://vm2:80/", "[::1]:7")] \
        == ["http://10.0.0.5:5000", "http://vm1:5001", "http://vm2:80", "http://[::1]:7"]


# --------------------------------------------------------------------------- the CLI


def _cli(tmp_path, *args):
    return CliRunner().invoke(main, ["--mode", "shell", "--data", str(SHELL_TASKS), "--output-dir",
                                     str(tmp_path / "out"), "--no-progress", *args])


@pytest.mark.parametrize("args, message", [
    (["--vm-address", "h1"], "--vm-address is not used by this run: it only applies to the remote provider"),
    (["--reset-command", "true"], "--reset-command is not used by this run: it only applies to the remote provider"),
    (["--provider-name", "remote", "--vm-address", "h1,h2", "--vm-address", "h3", "--reset-command", "true",
      "--use-vm-pool", "--num-vms", "4"], "has 3 VM address(es) (--vm-address) but the pool needs 4 VMs"),
    (["--provider-name", "remote", "--vm-address", "h1", "--num-rollouts", "1"],
     "remote VMs cannot be reset without --reset-command"),
    # a typo'd placeholder ran with the literal {hots}
    (["--provider-name", "remote", "--vm-address", "h1", "--num-rollouts", "1", "--reset-command",
      "ssh vmhost revert {hots} {VM_ID} awk-keeps-'{x}' '${HOME}'"],
     "--reset-command: unknown placeholder {hots} (did you mean {host}?), {VM_ID} (did you mean {vm_id}?); "
     "the placeholders are {address}, {host}, {port}, {vm_id}, {run_id}"),
    # every VM was quarantined at the first task that left anything, the budget spent as the
    # provider's fault, and the run stopped (exit 1)
    (["--provider-name", "remote", "--vm-address", "h1", "--num-rollouts", "1", "--reset-command", "none",
      "--verify-reset", "fast"], "--verify-reset fast checks each reset against the machine's first boot, and "
     "--reset-command none resets nothing"),
], ids=["address-on-process", "reset-on-process", "too-few", "no-reset", "placeholder-typo", "verify-no-reset"])
def test_cli_flags_are_checked_before_anything_runs(tmp_path, args, message):
    result = _cli(tmp_path, *args)
    assert result.exit_code == 2, (result.output, result.exception)
    assert message in " ".join(result.output.split())
    assert not (tmp_path / "out").exists()


def test_flags_reach_the_config_as_one_tuple(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('vm-address = ["a:1", "b:2,c"]\nreset-command = "none"\n')
    cfg = build_config({"provider_name": "remote", "num_rollouts": 3}, str(path))
    assert cfg.vm_address == ("a:1", "b:2", "c") and cfg.reset_command == "none"


# ----------------------------------------------------------------- through the pool


def test_shell_benchmark_through_the_pool_on_two_remote_machines(machines, tmp_path):
    """Through the CLI with the README's flags: --vm-address repeated, --reset-command, a pool."""
    tasks = [json.loads(l) for l in SHELL_TASKS.read_text().splitlines() if l.strip()]
    kept = [t for t in tasks if t["id"] not in HOST_SHARED]
    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps(t) + "\n" for t in kept))
    first, second = machines.addresses
    result = CliRunner().invoke(main, [
        "--mode", "shell", "--data", str(data), "--provider-name", "remote", "--vm-address", first,
        "--vm-address", second, "--use-vm-pool", "--num-vms", "2", "--num-rollouts", "4",
        "--reset-command", machines.reset_command, "--output-dir", str(tmp_path / "out"), "--run-id", "remote",
        "--no-progress"])
    assert result.exit_code == 0, (result.output, result.exception)
    summary = json.loads((tmp_path / "out" / "remote" / "summary.json").read_text())
    assert summary["status_counts"] == {"success": len(kept)}, summary
    assert summary["vm"]["provider"] == "remote"
    assert summary["vm"]["resets"] >= len(kept) - 2
    # the machines are still running: the run stopped its VMs, not the user's machines
    for address in machines.addresses:
        assert GuestClient(f"http://{address}").platform() == "Linux"


def test_reset_none_counts_no_reset_through_the_cli(machines, tmp_path):
    """--reset-command none resets nothing: the summary counts the releases as not reset, not
    as resets that never happened."""
    tasks = [{"id": f"t{i}", "mode": "shell", "instruction": "x", "check": "true", "reference": ["true"]}
             for i in range(3)]
    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    result = CliRunner().invoke(main, [
        "--mode", "shell", "--data", str(data), "--provider-name", "remote", "--vm-address", machines.addresses[0],
        "--use-vm-pool", "--num-vms", "1", "--num-rollouts", "1", "--reset-command", "none",
        "--output-dir", str(tmp_path / "out"), "--run-id", "unreset", "--no-progress"])
    assert result.exit_code == 0, (result.output, result.exception)
    vm = json.loads((tmp_path / "out" / "unreset" / "summary.json").read_text())["vm"]
    assert vm["resets"] == 0 and vm["released_not_reset"] == 3, vm
    assert "0 resets (3 released, not reset)" in result.output
    # agents without a key: one warning says anything that reaches their port drives them
    assert (tmp_path / "out" / "unreset" / "run.log").read_text().count("no --vm-key-file: anything that reaches") == 1
    assert result.output.count("no --vm-key-file: anything that reaches") == 1, result.output
    # and one that the machines are never reset (it was said twice: once by the options' check)
    assert result.output.count("--reset-command none: VMs are never reset") == 1, result.output


def test_a_reset_command_whose_program_is_not_found_stops_the_run_at_once(tmp_path):
    """A --reset-command whose program is not there (a typo, a tool not installed: the
    shell's exit 127): no later reset or boot finds it, so the run stops at the first boot
    (exit 2), naming the machine and the shell's complaint, its attempt left to a resume
    (which may give another command). It was taken for a failed boot: the command ran again
    for each replacement until the budget was spent, and the run exited 1."""
    data = tmp_path / "tasks.jsonl"
    data.write_text(json.dumps({"id": "t0", "mode": "shell", "instruction": "x", "check": "true",
                                "reference": ["true"]}) + "\n")
    address = f"127.0.0.1:{_free_port()}"  # the command fails before any agent is asked
    result = CliRunner().invoke(main, [
        "--mode", "shell", "--data", str(data), "--provider-name", "remote", "--vm-address", address,
        "--num-rollouts", "1", "--reset-command", "vmrunn-not-installed revertToSnapshot {host} init_state",
        "--output-dir", str(tmp_path / "out"), "--run-id", "r", "--no-progress"])
    assert result.exit_code == 2, result.output
    said = re.search(r"run stopped: (.*)", result.output).group(1)  # the shell's words are its own
    assert said.startswith(f"VM vm-0 (http://{address}): the reset command (--reset-command) exited with 127, a program it runs "
                           "was not found: /bin/sh: "), said
    assert "vmrunn-not-installed" in said and said.endswith("; fix --reset-command (a resume may give another)"), said
    run = tmp_path / "out" / "r"
    boots = [e for e in map(json.loads, (run / "events.jsonl").read_text().splitlines()) if e.get("to") == "booting"]
    assert len(boots) == 1, boots  # no replacement booted
    assert [(r["status"], r["final"]) for r in map(json.loads, (run / "results.jsonl").read_text().splitlines())] \
        == [("vm_settings_mismatch", False)]


def test_a_mismatch_at_a_later_boot_of_a_machine_is_no_settings_error(machines, tmp_path):
    """A machine that booted in the run and later fails the same way (its reset's program
    gone from it) changed: a failed boot, replaced from the budget, not the run's settings."""
    flag = tmp_path / "gone"
    provider = remote(machines, vm_addresses=(machines.addresses[0],),
                      reset_command=f"test -e {flag} && exec vmrunn-not-installed; true")
    provider.stop(provider.start("vm0"))
    flag.write_text("")
    with pytest.raises(VMError, match="exited with 127, a program it runs was not found") as failed:
        provider.start("vm1")
    assert not isinstance(failed.value, VMSettingsMismatch)
