"""The qemu provider's own promises; the shared contract lives in test_contract.py.

KVM is probed (and bounded), reset is a loadvm of the internal snapshot, stop removes the
overlay and sockets, a boot that does not finish says why (the serial console's tail), and the
shell benchmark runs through the pool on qemu as it does on process (the image and what is
refused before a boot: test_qemu_image.py). After every test: no QEMU process, overlay, socket or folder left.

The guest image is built (or found current) once per session; the build is not part of the
time budget. Boots run under TCG here (about 10-20 s each), so each test boots at most one
VM itself, and the benchmark two.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from parallel_rollout.config import build_config
from parallel_rollout.cli import main
from parallel_rollout.errors import ConfigError, VMError, VMSettingsMismatch
from parallel_rollout.guest.client import GuestClient
from parallel_rollout.pool.providers import qemu
from parallel_rollout.pool.providers.base import ProviderOptions
from parallel_rollout.pool.providers.qemu import QemuProvider
from qemu_support import BOOT_TIMEOUT_S, SHELL_TASKS, _qemu_base, _run_id, image, no_qemu_left  # noqa: F401 - fixtures

pytestmark = pytest.mark.skipif(shutil.which(qemu.QEMU) is None,
                                reason="qemu-system-x86_64 is not installed (./dev installs it)")


# ----------------------------------------------------------------------- KVM probe


@pytest.fixture
def fake_qemu(tmp_path, monkeypatch, image):
    """Put a fake qemu-system-x86_64 first on PATH; write its body with the returned function."""
    folder = tmp_path / "bin"
    folder.mkdir()

    def install(body: str) -> None:
        script = folder / qemu.QEMU
        script.write_text(f"#!/bin/sh\n{body}\n")
        script.chmod(0o755)

    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    monkeypatch.delenv(qemu.ACCEL_ENV, raising=False)
    return install


def test_kvm_probe_is_bounded_in_time(fake_qemu):
    fake_qemu("exec sleep 1000")  # a KVM guest that hangs, as they do on this machine
    started = time.monotonic()
    accel, reason = qemu.probe_kvm(timeout_s=1.0)
    assert time.monotonic() - started < 5
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        assert (accel, reason) == ("tcg", "/dev/kvm is missing or not accessible")
    else:
        assert accel == "tcg" and "did not boot within 1s" in reason
    assert not [p for p in psutil.process_iter(["cmdline"])
                if p.info["cmdline"] and p.info["cmdline"][:2] == ["sleep", "1000"]]


def test_kvm_probe_crash_and_the_override(fake_qemu, monkeypatch):
    fake_qemu("echo 'kvm: assertion failed' >&2; exit 134")
    accel, reason = qemu.probe_kvm(timeout_s=10)
    assert accel == "tcg"
    if os.access("/dev/kvm", os.R_OK | os.W_OK):
        assert "exit 134" in reason and "assertion failed" in reason
    monkeypatch.setenv(qemu.ACCEL_ENV, "kvm")
    assert qemu.detect_accelerator() == "kvm"  # no probe at all
    monkeypatch.setenv(qemu.ACCEL_ENV, "hvf")
    with pytest.raises(ConfigError, match="kvm or tcg"):
        qemu.detect_accelerator()


@pytest.mark.slow  # ~30 s: the probe waits out a KVM guest that hangs here
def test_kvm_is_tried_on_this_machine_and_tcg_is_the_fallback(image, monkeypatch):
    """Here /dev/kvm exists but a KVM guest hangs or QEMU aborts: the real probe (the image's
    kernel under KVM) must notice, within its bound, and choose TCG."""
    monkeypatch.delenv(qemu.ACCEL_ENV, raising=False)
    started = time.monotonic()
    accel, reason = qemu.probe_kvm(timeout_s=qemu.KVM_PROBE_TIMEOUT_S)
    assert time.monotonic() - started < qemu.KVM_PROBE_TIMEOUT_S + 5
    if accel == "kvm":
        assert "booted" in reason  # a machine where KVM works: fine too
    else:
        assert reason
    assert qemu.detect_accelerator(use_cache=False) == accel
    assert qemu.detect_accelerator() == accel  # cached now, per process and per host boot
    cached = qemu.read_json(qemu.image_dir() / "accel.json")
    assert cached["accel"] == accel and cached["key"].startswith(qemu.boot_id())


# --------------------------------------------------------------- one VM, end to end


def test_loadvm_reset_restores_state_and_stop_removes_the_overlay(image, request):
    provider = QemuProvider(_run_id(request), ProviderOptions(boot_timeout_s=BOOT_TIMEOUT_S,
                                                              memory_mb=384))
    info = provider.start("vm0")
    vm_dir = Path(info.private["vm_dir"])
    try:
        assert info.private["accel"] == qemu.detect_accelerator()
        assert {p.name for p in vm_dir.iterdir()} >= {"overlay.qcow2", "qmp.sock", "meta.json",
                                                      "serial.log"}
        snapshots = subprocess.run([qemu.QEMU_IMG, "snapshot", "-U", "-l",
                                    str(vm_dir / "overlay.qcow2")],
                                   capture_output=True, text=True, check=True).stdout
        assert " init " in snapshots
        client = GuestClient(info.address)
        # memory_mb is the guest's RAM; the guest cannot reach out (restrict=on)
        mem_kb = int(client.execute("awk '/MemTotal/ {print $2}' /proc/meminfo",
                                    shell=True)["output"])
        assert 300_000 < mem_kb <= 384 * 1024
        # the graded code is not the guest's root: uid 64000 without capabilities
        who = client.execute("id -u; grep CapEff /proc/self/status", shell=True)["output"]
        assert who.split()[0] == "64000" and int(who.split()[2], 16) == 0, who
        with socket.create_server(("127.0.0.1", 0)) as listener:
            # without restrict=on the guest would reach this host listener at 10.0.2.2
            port = listener.getsockname()[1]
            outbound = client.run_python(
                "import socket\ntry:\n"
                f"    socket.create_connection(('10.0.2.2', {port}), timeout=2)\n"
                "    print('connected')\nexcept OSError as e:\n    print('blocked', e)")
        assert outbound["output"].startswith("blocked"), outbound

        client.execute("echo changed > /etc/hostname; echo t > /tmp/t; "
                       "setsid sleep 777 >/dev/null 2>&1 < /dev/null &", shell=True)
        assert "sleep 777" in client.execute("cat /proc/[0-9]*/cmdline | tr '\\0' ' '",
                                             shell=True)["output"]
        qemu_pid = info.private["pid"]
        info = provider.reset(info)
        assert info.private["pid"] == qemu_pid  # the same VM, not a reboot
        client = GuestClient(info.address)
        assert client.execute("cat /etc/hostname", shell=True)["output"] == "guest\n"
        assert client.execute("ls -A /tmp", shell=True)["output"] == ""
        assert "sleep 777" not in client.execute("cat /proc/[0-9]*/cmdline | tr '\\0' ' '",
                                                 shell=True)["output"]

        # the guest clock follows the host's right after a reset (loadvm would turn it back);
        # how long resets take is measured by benchmarks/providers.py --providers qemu
        info = provider.reset(info)
        asked = time.time()
        guest_time = float(client.execute(["date", "+%s.%N"])["output"])
        # within the call's own time (seconds under TCG on a loaded machine), not behind it
        assert asked - 1.0 < guest_time < time.time() + 1.0, (asked, guest_time)
        assert provider.healthy(info)
    finally:
        provider.stop(info)
    assert not vm_dir.exists() and not vm_dir.parent.exists()
    assert not psutil.pid_exists(info.private["pid"]) or \
        psutil.Process(info.private["pid"]).status() == psutil.STATUS_ZOMBIE
    assert not provider.healthy(info)
    provider.stop(info)  # idempotent
    with pytest.raises(VMError, match="QEMU process is gone"):
        provider.reset(info)


# ------------------------------------------------------------------- failure paths


@pytest.mark.slow
def test_boot_timeout_is_a_vm_error_with_the_serial_log_tail(image, request, monkeypatch):
    # the host's port leads to a guest port nobody listens on: this boot can never finish
    monkeypatch.setattr(qemu, "GUEST_PORT", 5999)
    provider = QemuProvider(_run_id(request), ProviderOptions(boot_timeout_s=12.0))
    started = time.monotonic()
    with pytest.raises(VMError) as caught:
        provider.start("vm0")
    assert time.monotonic() - started < 12.0 + 10
    message = str(caught.value)
    # what ran out, and the flag that sets it: under TCG a boot takes 9-18 s here
    assert re.search(r"did not answer within the boot timeout, 12s under (TCG|KVM) \(--boot-timeout-s\)", message), message
    tail = message.split("serial log tail:", 1)[1]
    assert "[    " in tail  # kernel messages: the guest was booting


def _disk(tmp_path, boot_code: bytes = b"") -> Path:
    """A raw disk of 1 MiB: zeros (nothing bootable), or an MBR whose boot code is ``boot_code``."""
    disk = bytearray(1024 * 1024)
    if boot_code:
        disk[:len(boot_code)] = boot_code
        disk[510:512] = b"\x55\xaa"
    path = tmp_path / ("mbr.raw" if boot_code else "zeros.raw")
    path.write_bytes(bytes(disk))
    return path


def test_a_path_to_vm_disk_with_nothing_to_boot_fails_at_once_naming_it(image, request, tmp_path):
    """A --path-to-vm disk nothing boots from: QEMU's BIOS says so and QEMU ends (it waited out
    the boot timeout, with empty qemu and serial logs, and the error did not name the disk)."""
    disk = _disk(tmp_path)
    provider = QemuProvider(_run_id(request), ProviderOptions(path_to_vm=str(disk), boot_timeout_s=60.0))
    with pytest.raises(VMError) as caught:
        provider.start("vm0")
    message = str(caught.value)
    assert f"VM vm0 did not boot from {disk}: QEMU exited" in message, message
    assert "nothing at all on its serial console" in message, message
    assert message.endswith("the BIOS: Booting from Hard Disk...; Boot failed: not a bootable disk; "
                            "No bootable device."), message


def test_a_path_to_vm_disk_that_never_serves_the_agent_says_what_was_seen(image, request, tmp_path):
    """Its boot code runs (here a jump to itself) and prints nothing: the error names the disk,
    the empty serial console and that the BIOS ran the disk's boot code. No VM of the disk
    booted before: the run's settings (the run stops), not a failed boot to replace."""
    disk = _disk(tmp_path, boot_code=b"\xeb\xfe")
    provider = QemuProvider(_run_id(request), ProviderOptions(path_to_vm=str(disk), boot_timeout_s=4.0))
    with pytest.raises(VMSettingsMismatch) as caught:
        provider.start("vm0")
    message = str(caught.value)
    assert f"VM vm0 did not boot from {disk}: the guest agent did not answer within the boot timeout" in message
    assert "nothing at all on its serial console, ttyS0" in message, message
    assert "the BIOS: Booting from Hard Disk...; Booting from 0000:7c00 (it ran the disk's boot code" in message


def test_a_run_on_a_disk_that_never_boots_stops_at_its_first_boot_timeout(image, request, tmp_path):
    """A run whose --path-to-vm disk never serves the agent: no VM of it ever booted, so its
    first boot timeout stops the run (exit 2, its attempt left to a resume), naming the disk
    and what to change. The VM, its spare and then a replacement of each waited out the boot
    timeout in turn (4 boots, twice the timeout), and the run exited 1 on a spent budget."""
    disk = _disk(tmp_path, boot_code=b"\xeb\xfe")
    data = tmp_path / "tasks.jsonl"
    data.write_text(json.dumps({"id": "t0", "mode": "shell", "instruction": "x", "check": "true",
                                "reference": ["true"]}) + "\n")
    result = CliRunner().invoke(main, [
        "--mode", "shell", "--data", str(data), "--agent", "oracle", "--provider-name", "qemu",
        "--path-to-vm", str(disk), "--boot-timeout-s", "4", "--num-rollouts", "1",
        "--output-dir", str(tmp_path / "out"), "--run-id", _run_id(request), "--no-progress"])
    assert result.exit_code == 2, result.output
    found = re.search(r"run stopped: (.*)", result.output)
    assert found, result.output
    stopped = " ".join(found.group(1).split())
    assert re.match(rf"VM vm-[01] did not boot from {re.escape(str(disk))}: the guest agent did not answer", stopped)
    assert stopped.endswith("No VM of this disk booted in this run, so no replacement would: give --path-to-vm a "
                            "disk whose system serves the guest agent on port 5000 (in a new run: a resume keeps "
                            "the run's --path-to-vm), or more time with --boot-timeout-s (a resume may give "
                            "another)"), stopped
    events = map(json.loads, (tmp_path / "out" / _run_id(request) / "events.jsonl").read_text().splitlines())
    boots = [e["vm"] for e in events if e.get("event") == "vm" and e.get("to") == "booting"]
    assert sorted(boots) == ["vm-0", "vm-1"], boots  # the VM and its spare, at once; no replacement


def test_qemu_that_exits_at_once_says_why(image, request):
    provider = QemuProvider(_run_id(request))
    provider.memory_mb = 64 * 1024 * 1024  # past the refusal at start: QEMU cannot allocate it
    with pytest.raises(VMError, match=r"(?s)QEMU exited with status \d+.*qemu log: .*memory"):
        provider.start("vm0")


def test_a_vm_folder_is_labelled_before_qemu_starts(image, request):
    """The folder is labelled as it is made (see the process provider's test): a sweep of
    orphans while the overlay is made and QEMU starts leaves it alone."""
    swept = []

    class Swept(QemuProvider):
        def _boot(self, vm_id, vm_dir, *args):
            swept.append(QemuProvider.sweep(self.run_id, orphans_only=True))
            raise VMError("stopped here by the test")

    with pytest.raises(VMError, match="stopped here by the test"):
        Swept(_run_id(request)).start("vm0")
    assert swept == [[]]




# ------------------------------------------------------------- the pool, end to end


@pytest.mark.slow  # ~50 s under TCG; the default run keeps the py benchmark on qemu below
def test_shell_benchmark_through_the_pool_on_qemu(image, tmp_path, request):
    """N=4 workers, M=2 VMs: 25/25, as on process (reset by loadvm gives a fresh /tmp)."""
    from parallel_rollout.runner import Runner

    config = build_config(dict(
        mode="shell", data=str(SHELL_TASKS), output_dir=str(tmp_path / "out"),
        run_id=_run_id(request), progress=False, provider_name="qemu", num_rollouts=4,
        num_vms=2, use_vm_pool=True, boot_timeout_s=BOOT_TIMEOUT_S))
    outcome = Runner(config).run()
    assert outcome.exit_code == 0, outcome.message
    assert outcome.summary["status_counts"] == {"success": 25}
    assert outcome.summary["vm"]["resets"] >= 24


@pytest.mark.slow
def test_py_benchmark_runs_unchanged_on_qemu(image, tmp_path, request):
    """HumanEval (first 6) with the oracle through a pool of 2 qemu VMs: code runs in the VM."""
    from parallel_rollout.runner import Runner

    config = build_config(dict(
        mode="py", data="humaneval", limit=6, output_dir=str(tmp_path / "out"),
        run_id=_run_id(request), progress=False, provider_name="qemu", num_rollouts=4,
        num_vms=2, use_vm_pool=True, boot_timeout_s=BOOT_TIMEOUT_S))
    outcome = Runner(config).run()
    assert outcome.exit_code == 0, outcome.message
    assert outcome.summary["status_counts"] == {"success": 6}
    assert outcome.summary["vm"]["provider"] == "qemu" and outcome.summary["vm"]["resets"] >= 5


@pytest.mark.slow  # two boots under TCG
def test_verify_reset_fast_quarantines_what_a_task_left_in_a_qemu_vm(image, tmp_path, request):
    """--verify-reset fast on QEMU, through the guest agent's probe: a reset that forgets its
    loadvm (chaos_plugins.LeakyQemuProvider) lets a task's daemon and home file through; the
    VM is quarantined (free: no replacement budget at all here) and restarted; after a clean
    task the same reset leaves nothing to catch."""
    from click.testing import CliRunner

    from conftest import read_results, write_tasks
    from pool_support import read_events
    from parallel_rollout.cli import main

    escape = ("setsid sleep 600 > /dev/null 2>&1 < /dev/null & mkdir -p ~/.cache && "
              "echo kept > ~/.cache/secret")
    data = write_tasks(tmp_path / "tasks.jsonl", [
        {"id": "escape", "mode": "shell", "instruction": "leave things", "reap": False,
         "check": "test -e ~/.cache/secret", "reference": [escape]},
        {"id": "clean", "mode": "shell", "instruction": "leave nothing",
         "check": "test -d /", "reference": ["echo hello"]}])
    settings = tmp_path / "run.toml"
    settings.write_text(f"boot-timeout-s = {BOOT_TIMEOUT_S}\nmax-vm-replacements = 0\n")
    run_id = _run_id(request)
    result = CliRunner().invoke(main, [
        "--mode", "shell", "--data", str(data), "--output-dir", str(tmp_path / "out"),
        "--run-id", run_id, "--no-progress", "--provider-name", "chaos_plugins:LeakyQemuProvider",
        "--verify-reset", "fast", "--use-vm-pool", "--num-vms", "1", "--spare-vms", "0",
        "--num-rollouts", "1", "--config", str(settings)])
    assert result.exit_code == 0, (result.output, result.exception)
    run_dir = tmp_path / "out" / run_id
    assert {r["task_id"]: r["status"] for r in read_results(run_dir) if r["final"]} == {
        "escape": "success", "clean": "success"}
    events = [e for e in read_events(run_dir / "events.jsonl") if e.get("event") == "vm"]
    quarantined = {e["after_task"]: e["differences"] for e in events
                   if e["to"] == "dead" and e["reason"].startswith("reset verification failed")}
    assert list(quarantined) == ["escape#0"], events  # not after the clean task
    found = quarantined["escape#0"]
    assert "/home/user/.cache/secret: not in the snapshot (file, 5 bytes)" in found, found
    assert any("sleep 600" in line and "left running" in line for line in found), found
    leased = [e["vm"] for e in events if e["to"] == "leased"]
    assert len(leased) == len(set(leased)) == 2  # the quarantined VM is never leased again
