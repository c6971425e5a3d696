"""The vmware and virtualbox providers, driven as OSWorld drives them, against stand-in
``vmrun`` and ``VBoxManage`` programs on PATH (``tests/hypervisor_standin.py``) that run this
machine's VMs: a process sandbox in the default run, QEMU in the slow one. The real products
cannot be installed here and are untested."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from parallel_rollout.cli import main
from parallel_rollout.errors import ConfigError, ProviderUnavailable, VMError, VMSettingsMismatch
from parallel_rollout.guest.client import GuestClient
from parallel_rollout.pool.providers import get_provider
from parallel_rollout.pool.providers.base import ProviderOptions

ROOT = Path(__file__).resolve().parents[2]


def _cycle(name: str, vm_files: list[str], boot_timeout_s: float = 60.0) -> None:
    """Start two VMs, isolate them, reset one, stop both."""
    provider = get_provider(name)("hv", ProviderOptions(
        path_to_vm=",".join(vm_files), snapshot_name="init_state", boot_timeout_s=boot_timeout_s))
    first = provider.start("vm0")
    second = provider.start("vm1")
    try:
        assert first.address != second.address and first.address.endswith(":5000")
        client = GuestClient(first.address)
        client.execute("echo mine > ~/mark", shell=True)
        assert client.execute("cat ~/mark", shell=True)["output"] == "mine\n"
        assert GuestClient(second.address).execute("ls ~/mark", shell=True)["returncode"] != 0
        assert provider.healthy(first) and provider.healthy(second)
        with pytest.raises(VMError, match="in use"):  # a third VM has no file (no wait)
            provider.slots.acquire("vm2", time.monotonic())
        first = provider.reset(first)
        assert GuestClient(first.address).execute("ls ~/mark", shell=True)["returncode"] != 0
    finally:
        provider.stop(first)
        provider.stop(second)
        provider.stop(second)  # twice is fine
    assert not provider.healthy(first)


def test_vmware_start_reset_stop_through_vmrun(standins):
    vmx, _ = standins
    _cycle("vmware", vmx)


def test_virtualbox_start_reset_stop_through_vboxmanage(standins):
    _cycle("virtualbox", ["/vms/ubuntu0.vbox", "ubuntu1"])


def test_the_original_runners_vmware_command_runs_tasks(standins, tmp_path):
    vmx, _ = standins
    tasks = [json.loads(line) for line in (ROOT / "benchmarks" / "shell_tasks.jsonl").read_text().splitlines()
             if line.strip()][:3]
    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    result = CliRunner().invoke(main, [
        "--mode", "shell", "--data", str(data), "--num-rollouts", "1", "--output-dir",
        str(tmp_path / "out"), "--run-id", "vmw", "--no-progress",
        "--provider-name", "vmware", "--path-to-vm", vmx[0], "--snapshot-name", "init_state"])
    assert result.exit_code == 0, result.output
    finals = [json.loads(line) for line in (tmp_path / "out" / "vmw" / "results.jsonl").read_text().splitlines()]
    assert {r["task_id"]: r["status"] for r in finals if r["final"]} == {t["id"]: "success" for t in tasks}


@pytest.mark.parametrize("name", ["vmware", "virtualbox"])
def test_bad_settings_say_what_is_missing(standins, name, monkeypatch):
    vmx, _ = standins
    cls = get_provider(name)
    with pytest.raises(ConfigError, match="--path-to-vm"):
        cls("hv", ProviderOptions(snapshot_name="init_state"))
    with pytest.raises(ConfigError, match="--snapshot-name"):
        cls("hv", ProviderOptions(path_to_vm=vmx[0]))
    with pytest.raises(ConfigError, match="more than once"):
        cls("hv", ProviderOptions(path_to_vm=f"{vmx[0]},{vmx[0]}", snapshot_name="s"))
    provider = cls("hv", ProviderOptions(path_to_vm=vmx[0] if name == "vmware" else "ubuntu0",
                                         snapshot_name="no_such_snapshot", boot_timeout_s=20))
    with pytest.raises(VMSettingsMismatch, match="has no snapshot named 'no_such_snapshot'"):
        provider.start("vm0")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    with pytest.raises(ProviderUnavailable, match=cls.program):
        cls.check_available()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vmware", "virtualbox"])
def test_the_providers_drive_qemu_vms(standins, name, monkeypatch):
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 is not installed")
    get_provider("qemu").build_image(log=lambda line: print(line, flush=True))
    monkeypatch.setenv("STANDIN_BACKEND", "qemu")
    vmx, _ = standins
    _cycle(name, vmx if name == "vmware" else ["ubuntu0", "ubuntu1"], boot_timeout_s=300.0)


def test_fewer_vm_files_than_the_pools_vms_is_refused_at_the_start(standins, tmp_path):
    """One VM file per VM: with fewer, the pool's other VMs waited for a file, failed their boot
    after --boot-timeout-s and spent the replacement budget until the run stopped (exit 1,
    'every VM of the vmware pool is dead'): OSWorld's command (one .vmx) with the default
    --num-rollouts 5 did so. Refused before anything runs (exit 2), as the remote provider's
    addresses are; as many files as VMs passes."""
    vmx, _ = standins
    data = ROOT / "benchmarks" / "shell_tasks.jsonl"

    def cli(*flags):
        return CliRunner().invoke(main, ["--mode", "shell", "--data", str(data), "--output-dir",
                                         str(tmp_path / "out"), "--no-progress", "--snapshot-name",
                                         "init_state", *flags])

    one = cli("--provider-name", "vmware", "--path-to-vm", vmx[0])  # OSWorld's runner's command
    assert one.exit_code == 2, (one.output, one.exception)
    assert ("the vmware provider has 1 VM file(s) (--path-to-vm) but the pool needs 5 VMs"
            in one.output), one.output
    two = cli("--provider-name", "virtualbox", "--path-to-vm", "ubuntu0,ubuntu1", "--use-vm-pool",
              "--num-vms", "3", "--num-rollouts", "3")
    assert two.exit_code == 2, (two.output, two.exception)
    assert "the virtualbox provider has 2 VM file(s) (--path-to-vm) but the pool needs 3 VMs" in two.output
    assert "give one file per VM, or fewer VMs" in two.output
    assert not (tmp_path / "out").exists()
    enough = cli("--provider-name", "vmware", "--path-to-vm", ",".join(vmx), "--use-vm-pool", "--num-vms",
                 "2", "--num-rollouts", "2", "--dry-run")
    assert enough.exit_code == 0, (enough.output, enough.exception)


@pytest.mark.parametrize("name, flag, value", [("vmware", "--vm-memory-mb", "2048"),
                                               ("virtualbox", "--vm-max-processes", "500")])
def test_a_limit_a_hypervisor_cannot_enforce_is_refused_naming_its_flag(standins, tmp_path, name, flag, value):
    """A per-VM limit of a VM the hypervisor runs: refused before anything runs (exit 2),
    naming the flag the user gave; it said "cannot enforce memory_mb", a field's name."""
    vmx, _ = standins
    result = CliRunner().invoke(main, [
        "--mode", "shell", "--data", str(ROOT / "benchmarks" / "shell_tasks.jsonl"), "--limit", "1",
        "--output-dir", str(tmp_path / "out"), "--no-progress", "--provider-name", name, "--path-to-vm",
        vmx[0] if name == "vmware" else "ubuntu0", "--snapshot-name", "init_state", "--num-rollouts", "1",
        flag, value])
    assert result.exit_code == 2, (result.output, result.exception)
    assert f"the {name} provider cannot enforce {flag}: set it in the VM's settings" in result.output, result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(not all(shutil.which(p) for p in ("Xvfb", "openbox", "xdotool")),
                    reason="no Xvfb, openbox or xdotool for a desktop")
def test_a_vm_whose_screen_is_not_the_runs_stops_the_run_at_its_first_boot(standins, monkeypatch, tmp_path):
    """An osworld run on a VM whose screen is 1024x768 (the stand-in's desktop) under the
    default 1920x1080: tasks click at pixel positions, and no revert or boot changes the VM's
    screen, so the run stops at the first boot (exit 2), naming the VM file, its size and the
    flags that match it, as the remote provider's machines do; the VM is stopped again. It
    ran the tasks on the other screen without a word."""
    monkeypatch.setenv("STANDIN_DESKTOP", "1")
    vm_file = standins[0][0]
    data = tmp_path / "o.jsonl"
    data.write_text(json.dumps({"id": "t0", "mode": "osworld", "instruction": "nothing to do", "config": [],
                                "evaluator": {"func": "infeasible"}, "reference": ["FAIL"]}) + "\n")
    result = CliRunner().invoke(main, [
        "--mode", "osworld", "--data", str(data), "--agent", "oracle", "--num-rollouts", "1", "--output-dir",
        str(tmp_path / "out"), "--run-id", "r", "--no-progress", "--provider-name", "vmware",
        "--path-to-vm", vm_file, "--snapshot-name", "init_state"])
    assert result.exit_code == 2, (result.output, result.exception)
    said = re.search(r"run stopped: (.*)", result.output).group(1)
    assert re.fullmatch(
        rf"VM vm-0 \({re.escape(vm_file)} at http://127\.0\.[0-9.]+:5000\) has a 1024x768 screen; the run asks "
        r"for 1920x1080: set the machine's screen to 1920x1080, or start a new run with --screen-width 1024 "
        r"--screen-height 768 \(a resume keeps the run's size\)", said), said
    assert "resume with:" in result.output
    events = [json.loads(line) for line in (tmp_path / "out" / "r" / "events.jsonl").read_text().splitlines()]
    assert len([e for e in events if e.get("to") == "booting"]) == 1  # no replacement booted
    # the standins fixture checks that the VM was stopped


@pytest.mark.parametrize("name, vm_file, snapshot, said", [
    ("vmware", "{vmx}", "init-state", "VM vm-0 ({vmx}) has no snapshot named 'init-state' (--snapshot-name); "
     "its snapshots: 'init_state': take that snapshot of the VM, or start a new run with the one every task starts "
     "from (a resume keeps the run's --snapshot-name)"),
    ("virtualbox", "ubuntu0", "Init_State", "VM vm-0 (ubuntu0) has no snapshot named 'Init_State' (--snapshot-name); "
     "its snapshots: 'init_state': take that snapshot of the VM, or start a new run with the one every task starts "
     "from (a resume keeps the run's --snapshot-name)"),
    ("virtualbox", "/vms/ubuntu9.vbox", "init_state", "VM vm-0 (/vms/ubuntu9.vbox): VBoxManage list vms has no VM "
     "named '/vms/ubuntu9.vbox' or 'ubuntu9': register the VM, or start a new run whose --path-to-vm gives a VM's "
     "name or uuid (VBoxManage list vms), or its file (a resume keeps the run's --path-to-vm)"),
    ("vmware", "{vmx}9", "init_state", "--path-to-vm: no such VM file {vmx}9 (the .vmx of each VM)"),
], ids=["vmware-snapshot", "virtualbox-snapshot", "virtualbox-vm", "vmware-vm"])
def test_a_misnamed_snapshot_or_vm_stops_the_run_at_its_first_boot(standins, tmp_path, name, vm_file, snapshot, said):
    """A --snapshot-name the VM does not have (init-state for init_state), or a VM the product
    does not know: no boot finds it, so the run stops at once (exit 2), naming the VM, the
    snapshot and those it has. It was a failed boot each time, replaced until the budget was
    spent, and the run exited 1 as if the VMs had died; a .vmx that is not there is refused
    before anything runs."""
    vmx = standins[0][0]
    vm_file, said = vm_file.format(vmx=vmx), said.format(vmx=vmx)
    result = CliRunner().invoke(main, [
        "--mode", "shell", "--data", str(ROOT / "benchmarks" / "shell_tasks.jsonl"), "--limit", "1",
        "--num-rollouts", "1", "--output-dir", str(tmp_path / "out"), "--run-id", "r", "--no-progress",
        "--provider-name", name, "--path-to-vm", vm_file, "--snapshot-name", snapshot])
    assert result.exit_code == 2, (result.output, result.exception)
    assert said in " ".join(result.output.split()), result.output
    events = tmp_path / "out" / "r" / "events.jsonl"
    if events.exists():
        assert len([e for e in map(json.loads, events.read_text().splitlines()) if e.get("to") == "booting"]) == 1


def test_a_run_stopped_for_a_missing_snapshot_resumes_once_the_vm_has_it(standins, tmp_path):
    """What the stop says to do works: a resume keeps the run's --snapshot-name (another is
    refused, naming the flag), and once the VM has that snapshot the resume runs the tasks.
    The message said 'a resume may give another', which a resume refuses."""
    vmx = standins[0][0]

    def run(snapshot, *flags):
        return CliRunner().invoke(main, [
            "--mode", "shell", "--data", str(ROOT / "benchmarks" / "shell_tasks.jsonl"), "--limit", "2",
            "--num-rollouts", "1", "--output-dir", str(tmp_path / "out"), "--run-id", "r", "--no-progress",
            "--provider-name", "vmware", "--path-to-vm", vmx, "--snapshot-name", snapshot, *flags])

    stopped = run("init-state")
    said = " ".join(stopped.output.split())
    assert stopped.exit_code == 2 and "a resume keeps the run's --snapshot-name" in said, said
    other = run("init_state", "--resume")
    assert other.exit_code == 2 and "--snapshot-name ('init-state' then, 'init_state' now)" in other.output, \
        other.output
    with open(vmx, "a") as vm_file:  # the user takes the snapshot the run names
        vm_file.write('snapshot = "init-state"\n')
    resumed = run("init-state", "--resume")
    assert resumed.exit_code == 0, resumed.output
    finals = [json.loads(line) for line in (tmp_path / "out" / "r" / "results.jsonl").read_text().splitlines()]
    assert sorted(r["status"] for r in finals if r["final"]) == ["success", "success"], finals


def test_the_dry_run_finds_a_misnamed_snapshot_or_vm(standins, tmp_path):
    """--dry-run asks each VM's snapshots (read-only: nothing starts or reverts) what its
    first boot would stop at, a --snapshot-name it lacks or a VirtualBox VM it does not know.
    It said all was well, and the run then stopped at the first boot."""
    vmx = standins[0][0]

    def dry(name, vm_files, snapshot):
        return CliRunner().invoke(main, [
            "--mode", "shell", "--data", str(ROOT / "benchmarks" / "shell_tasks.jsonl"), "--limit", "2",
            "--use-vm-pool", "--num-vms", str(len(vm_files.split(","))), "--output-dir", str(tmp_path / "out"),
            "--provider-name", name, "--path-to-vm", vm_files, "--snapshot-name", snapshot, "--dry-run"])

    vbox = dry("virtualbox", "ubuntu0,ubuntu9", "init-state")
    assert vbox.exit_code == 2, vbox.output
    said = " ".join(vbox.output.split())
    assert ("machines: the virtualbox VMs: ubuntu0 has no snapshot named 'init-state' (--snapshot-name); its "
            "snapshots: 'init_state': take that snapshot of the VM, or start a new run with the one every task "
            "starts from") in said, said
    assert "; ubuntu9: VBoxManage list vms has no VM named 'ubuntu9': register the VM" in said, said
    wrong = dry("vmware", vmx, "init-state")
    assert wrong.exit_code == 2 and f"machines: the vmware VMs: {vmx} has no snapshot named 'init-state'" in \
        " ".join(wrong.output.split()), wrong.output
    right = dry("vmware", vmx, "init_state")
    assert right.exit_code == 0, right.output
    assert not (tmp_path / "out").exists() and not list(standins[1].glob("*.ready"))  # nothing started


@pytest.mark.slow  # two boots and the task twice: ~13 s
@pytest.mark.parametrize("name, vm_file, said", [
    ("virtualbox", "ubuntu0", "VirtualBox VM ubuntu0 (11111111-2222-3333-4444-555555555555) aborted: its VM "
     "process ended outside the guest (killed, or it crashed)"),
    ("vmware", "{vmx}", "VMware VM {vmx} ended without its VMX process's own exit"),
], ids=["virtualbox", "vmware"])
def test_a_hypervisor_vm_killed_under_a_task_is_the_infrastructures_not_the_tasks(standins, tmp_path, name, vm_file,
                                                                                  said):
    """The VM's process killed from outside mid-task (the stand-in's, as VirtualBox's VM
    process or VMware's VMX): VirtualBox says the VM aborted, VMware's vmware.log lacks the VMX's
    own exit, which no task can do, so the attempt is
    vm_error (infrastructure), naming the VM, and runs again on the VM restarted from its
    snapshot. It was the task's sandbox_violation, graded 0 and final."""
    vmx, state = standins
    vm_file, said = vm_file.format(vmx=vmx[0]), said.format(vmx=vmx[0])
    data = tmp_path / "k.jsonl"
    data.write_text(json.dumps({"id": "k0", "mode": "shell", "instruction": "x", "check": "test -e ~/k0.done",
                                "reference": ["sleep 2; touch ~/k0.done"]}) + "\n")
    run = tmp_path / "out" / "r"

    def kill_once_leased():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if (run / "events.jsonl").exists() and '"leased"' in (run / "events.jsonl").read_text():
                time.sleep(0.5)  # the task's sleep runs
                pid_file = next(state.glob("*.pid"))
                killed.append(pid_file.stem)
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
                return
            time.sleep(0.05)

    killed: list[str] = []
    killer = threading.Thread(target=kill_once_leased)
    killer.start()
    try:
        result = CliRunner().invoke(main, [
            "--mode", "shell", "--data", str(data), "--num-rollouts", "1", "--output-dir", str(tmp_path / "out"),
            "--run-id", "r", "--no-progress", "--provider-name", name, "--path-to-vm", vm_file,
            "--snapshot-name", "init_state"])
    finally:
        killer.join()
        for key in killed:  # what the killed stand-in's own sandbox left
            get_provider("process").sweep(f"standin-{key}")
    assert result.exit_code == 0, (result.output, result.exception)
    records = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    assert [(r["status"], r["infrastructure"], r["final"]) for r in records] == [
        ("vm_error", True, False), ("success", False, True)], records
    assert said in records[0]["failure"]["message"], records[0]



def test_a_vmware_vm_whose_vmx_was_killed_is_the_infrastructures(standins):
    """vmrun tells nothing of who stopped a VM, but its vmware.log does: a VMX process that
    exits of its own accord (a power-off, the guest's own included: the task's, which may hold
    sudo) ends it with 'VMX has left the building'; one killed from outside never writes that.
    So a VM whose VMX was killed under a task is the infrastructure's (death_cause names it:
    vm_error, retried on the VM restarted), as VirtualBox's aborted VM is. It was the task's
    sandbox_violation, graded 0 and final."""
    vmx, state = standins
    provider = get_provider("vmware")("hv", ProviderOptions(path_to_vm=vmx[0], snapshot_name="init_state",
                                                            boot_timeout_s=60))
    info = provider.start("vm0")
    pid_file = next(state.glob("*.pid"))
    try:
        os.kill(int(pid_file.read_text()), signal.SIGKILL)  # the VMX killed from outside
        cause = provider.death_cause(info)
    finally:
        provider.stop(info)
        get_provider("process").sweep(f"standin-{pid_file.stem}")  # what the killed stand-in's sandbox left
        pid_file.unlink()  # as a killed VMX leaves its lock
    assert cause is not None and cause.startswith(f"VMware VM {vmx[0]} ended without its VMX process's own exit: "
                                                  f"{Path(vmx[0]).parent / 'vmware.log'} does not end with 'VMX has "
                                                  "left the building'"), cause
    assert "killed from outside the guest" in cause, cause


@pytest.mark.slow  # a boot and a stop: ~4 s
def test_a_vmware_vm_that_powered_off_is_still_the_tasks(standins):
    """A VM whose VMX exited of its own accord (a power-off, as a task with sudo may make its
    guest do; here vmrun stop) wrote 'VMX has left the building': death_cause claims no cause
    outside the task, so it stays the task's sandbox_violation."""
    vmx, _ = standins
    provider = get_provider("vmware")("hv", ProviderOptions(path_to_vm=vmx[0], snapshot_name="init_state",
                                                            boot_timeout_s=60))
    info = provider.start("vm0")
    try:
        subprocess.run(["vmrun", "-T", "ws", "stop", vmx[0]], check=True)
        assert provider.death_cause(info) is None
        assert "VMX has left the building" in (Path(vmx[0]).parent / "vmware.log").read_text()
    finally:
        provider.stop(info)


@pytest.mark.parametrize("in_file", [False, True], ids=["flags", "config-file"])
def test_a_vm_whose_ip_serves_no_guest_agent_says_a_resume_keeps_its_vm_file(tmp_path, monkeypatch, in_file):
    """A VM whose guest IP's port 5000 is another web server (404 for the whole boot timeout)
    stops the run at its first boot naming --path-to-vm; a resume keeps the run's --path-to-vm,
    so the message says to fix it in a new run. It said 'a resume may give another', which a
    resume refuses ('the run was made with other settings for --path-to-vm'). Given in a
    --config file, the settings are said as its keys, where: it named the flags."""
    from functools import partial
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    ip = "127.0.77.7"  # a vmrun that powers nothing on, whose 'guest' answers 404 to everything
    quiet = type("Quiet", (SimpleHTTPRequestHandler,), {"log_message": lambda *args: None})
    server = ThreadingHTTPServer((ip, 5000), partial(quiet, directory=str(tmp_path)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "vmrun").write_text(
        '#!/bin/sh\n[ "$1" = -T ] && shift 2\ncase "$1" in\n'
        f'  getGuestIPAddress) echo {ip} ;;\n'
        '  listSnapshots) printf "Total snapshots: 1\\ninit_state\\n" ;;\n'
        '  list) echo "Total running VMs: 0" ;;\nesac\nexit 0\n')
    (bin_dir / "vmrun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    vmx = tmp_path / "ubuntu.vmx"
    vmx.write_text('displayName = "Ubuntu"\n')
    config = tmp_path / "vms.toml"
    config.write_text(f'path-to-vm = "{vmx}"\nboot-timeout-s = 2\n')
    given = ["--config", str(config)] if in_file else ["--path-to-vm", str(vmx), "--boot-timeout-s", "2"]
    try:
        result = CliRunner().invoke(main, [
            "--mode", "shell", "--data", str(ROOT / "benchmarks" / "shell_tasks.jsonl"), "--limit", "1",
            "--num-rollouts", "1", "--output-dir", str(tmp_path / "out"), "--run-id", "r", "--no-progress",
            "--provider-name", "vmware", "--snapshot-name", "init_state", *given])
    finally:
        server.shutdown()
        server.server_close()
    said = " ".join(result.output.split())
    assert result.exit_code == 2, said
    timeout, fix = ((f"boot-timeout-s in {config}", f"fix path-to-vm in {config} (in a new run: a resume keeps the "
                     "value the run started with)") if in_file else
                    ("--boot-timeout-s", "fix --path-to-vm (in a new run: a resume keeps the run's --path-to-vm)"))
    assert (f"VM vm-0 ({vmx}): port 5000 of its guest IP answered GET /platform with HTTP 404 for 2s "
            f"({timeout}): no guest agent listens there") in said, said
    assert fix in said, said


@pytest.mark.parametrize("written", ["boot-timeout-s", "boot_timeout_s"])
def test_a_boot_that_hangs_says_the_timeout_as_the_config_file_set_it(standins, tmp_path, monkeypatch, written):
    """A ``vmrun start`` that hangs, killed at the boot timeout a config file set: it said
    "(killed; --boot-timeout-s allows more)", a flag no one typed; it names the key as the file
    writes it, and the file."""
    vmx, _ = standins
    monkeypatch.setenv("STANDIN_HANG", "start")
    config = tmp_path / "vms.toml"
    config.write_text(f'{written} = 2\n')
    result = CliRunner().invoke(main, [
        "--mode", "shell", "--data", str(ROOT / "benchmarks" / "shell_tasks.jsonl"), "--limit", "1",
        "--num-rollouts", "1", "--output-dir", str(tmp_path / "out"), "--run-id", "r", "--no-progress",
        "--provider-name", "vmware", "--snapshot-name", "init_state", "--path-to-vm", vmx[0],
        "--config", str(config)])
    said = " ".join(result.output.split())
    assert result.exit_code == 1, said  # every VM of the pool dead: the run stops
    # the boot's 2 s, or what the revert before it left of them (a loaded machine: "within 1s" said a
    # limit no one set)
    within = rf"(2s|[01]\.\ds, what was left of the boot's 2s) \(killed; {re.escape(written)} in {re.escape(str(config))} allows more\)"
    assert re.search(rf"start {re.escape(vmx[0])} gui did not finish within {within}", said), said
    assert "--boot-timeout-s" not in said, said


def test_a_boot_commands_time_limit_is_said_as_the_boots_or_what_was_left_of_it():
    from parallel_rollout.pool.providers.hypervisors import _within

    assert _within(2.0, 2.0) == "2s"
    assert _within(1.04, 2.0) == "1.0s, what was left of the boot's 2s"  # a revert took the rest
    assert _within(10.0, 2.0) == "10s"  # a snapshot list has a limit of its own
