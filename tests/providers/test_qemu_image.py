"""The qemu provider's image and what it refuses before a VM boots: a missing, stale or damaged
image says how to fix it, image build puts the shims and wrappers in and is a no-op when the
image is current, and settings it cannot honour or a pool the host's RAM cannot hold are
refused. After every test: no QEMU process, overlay, socket or folder left.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time

import psutil
import pytest
from click.testing import CliRunner

from parallel_rollout.cli import main
from parallel_rollout.errors import ConfigError, ProviderUnavailable
from parallel_rollout.pool.providers import get_provider, images, qemu, qemu_image
from parallel_rollout.pool.providers.base import ProviderOptions
from parallel_rollout.pool.providers.qemu import QemuProvider
from qemu_support import SHELL_TASKS, image, no_qemu_left  # noqa: F401 - fixtures

pytestmark = pytest.mark.skipif(shutil.which(qemu.QEMU) is None,
                                reason="qemu-system-x86_64 is not installed (./dev installs it)")


def test_without_an_image_or_qemu_the_error_says_how_to_fix_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PARALLEL_ROLLOUT_PROG", "parallel-rollout")  # the hint names the tool as typed
    monkeypatch.setenv("PARALLEL_ROLLOUT_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(ProviderUnavailable,
                       match="no qemu guest image in .*empty-cache/qemu; build it with: "
                             "parallel-rollout image build --provider qemu$"):
        QemuProvider("r")
    with pytest.raises(ProviderUnavailable,
                       match="no qemu guest image in .*empty-cache/qemu-desktop; build it with: "
                             "parallel-rollout image build --provider qemu --desktop$"):
        QemuProvider("r", ProviderOptions(desktop=True))
    monkeypatch.setenv("PATH", str(tmp_path))  # no QEMU on PATH
    with pytest.raises(ProviderUnavailable, match="qemu-system-x86_64 is not installed; install "
                       "it with: apt-get install qemu-system-x86 qemu-utils"):
        QemuProvider.check_available()


def test_a_stale_image_asks_for_a_rebuild(image, monkeypatch):
    monkeypatch.setenv("PARALLEL_ROLLOUT_PROG", "parallel-rollout")  # the hint names the tool as typed
    monkeypatch.setattr(qemu, "image_inputs", lambda desktop=False: "another-agent")
    with pytest.raises(ProviderUnavailable, match="another guest agent or recipe; rebuild it "
                       "with: parallel-rollout image build --provider qemu$"):
        QemuProvider("r")


def test_a_damaged_image_is_refused_at_once_and_image_build_rebuilds_it(image, tmp_path, monkeypatch):
    """A base.qcow2 cut short (an interrupted copy, a disk that filled up): every guest panicked
    at boot, the pool spent its budget on boots of ~45 s each and the run ended on a kernel
    stack trace, while image build called the image current. Now refused before anything
    boots, naming the file, and image build rebuilds it."""
    monkeypatch.setenv("PARALLEL_ROLLOUT_PROG", "parallel-rollout")  # the hint names the tool as typed
    cache = tmp_path / "cache"
    shutil.copytree(image, cache / "qemu", ignore=shutil.ignore_patterns(".build*"))
    monkeypatch.setenv("PARALLEL_ROLLOUT_CACHE", str(cache))
    QemuProvider("r")  # the copy is whole
    os.truncate(cache / "qemu" / "base.qcow2", 10 * 2**20)
    with pytest.raises(ProviderUnavailable, match=r"qemu guest image in .*/cache/qemu is damaged \(base.qcow2 has "
                       r"10485760 bytes, built with \d+\); rebuild it with: parallel-rollout image build --provider qemu$"):
        QemuProvider("r")

    class Building(Exception):
        pass

    def building(*args, **kwargs):
        raise Building()

    monkeypatch.setattr(qemu_image, "_fetch_packages", building)  # the build's first step
    with pytest.raises(Building):
        QemuProvider.build_image(log=lambda line: None)


def test_the_shims_and_wrappers_go_into_images_and_a_changed_shim_makes_them_stale(tmp_path, monkeypatch):
    # guest/shim/bin (OSWorld's sudo, vlc, thunderbird) is part of the guest package images hold
    files = images.guest_files()
    for name in ("sudo", "vlc", "thunderbird"):
        data, mode = files[f"{images.GUEST_SHIM_BIN}/{name}"]
        assert data.startswith(b"#!/bin/sh") and mode == 0o755, (name, oct(mode))
    # and so are the grading wrappers, beside the agent (agent_grading.GRADING_BIN)
    for name in ("curl", "jq", "sqlite3", "file", "wget", "psql", "node", "git", "git_external_diff"):
        data, mode = files[f"{images.GUEST_GRADING_BIN}/{name}"]
        assert data.startswith(b"#!/bin/sh") and mode == 0o755, (name, oct(mode))
    for name in ("wrap.sh", "wgetrc", "node_no_home.js", "git_no_programs.py"):  # what they read: no commands
        assert files[f"{images.GUEST_GRADING_BIN}/{name}"][1] == 0o644, name
    source = tmp_path / "guest"
    shutil.copytree(images.GUEST_SOURCE_DIR, source, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(images, "GUEST_SOURCE_DIR", source)
    seen = [qemu_image.image_inputs(desktop=True)]
    vlc = source / "shim" / "bin" / "vlc"
    vlc.write_text(vlc.read_text() + "# another shim\n")
    seen.append(qemu_image.image_inputs(desktop=True))
    vlc.chmod(0o644)  # no longer a program
    seen.append(qemu_image.image_inputs(desktop=True))
    assert len(set(seen)) == 3, seen


def test_rejects_what_it_cannot_honour(image, tmp_path):  # a stale image would be said first
    assert get_provider("qemu") is QemuProvider
    assert QemuProvider.supported_limits() == {"memory_mb"}
    with pytest.raises(ConfigError, match="--vm-max-processes cannot be enforced"):
        QemuProvider("r", ProviderOptions(max_processes=10))
    with pytest.raises(ConfigError, match="at least 128"):
        QemuProvider("r", ProviderOptions(memory_mb=16))
    with pytest.raises(ConfigError, match="not a disk image"):
        QemuProvider("r", ProviderOptions(path_to_vm=str(tmp_path / "nope.qcow2")))
    with pytest.raises(ConfigError, match="--snapshot-name 'two words' must be 1-64 letters"):
        QemuProvider("r", ProviderOptions(snapshot_name="two words"))
    disk = tmp_path / "mine.raw"
    disk.write_bytes(b"\0" * 1024 * 1024)
    provider = QemuProvider("r", ProviderOptions(path_to_vm=str(disk), snapshot_name="clean"))
    assert (provider.user_image, provider.user_format, provider.snapshot_name) == \
        (disk, "raw", "clean")
    assert "-kernel" not in provider._argv("vm0", tmp_path, "tcg", 5555)  # it boots itself


@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
def test_a_snapshot_name_qemu_cannot_take_is_refused_naming_the_flag(image, tmp_path, dry_run):
    """A --snapshot-name that is no qemu snapshot's name: refused before anything boots (exit 2),
    naming the flag; it said "snapshot name 'two words' must be …", no setting's name."""
    data = tmp_path / "tasks.jsonl"
    data.write_text('{"id": "t0", "mode": "shell", "instruction": "x", "check": "true", "reference": ["true"]}\n')
    result = CliRunner().invoke(main, [
        "--mode", "shell", "--data", str(data), "--agent", "oracle", "--provider-name", "qemu",
        "--snapshot-name", "two words", "--num-rollouts", "1", "--output-dir", str(tmp_path / "out"),
        "--run-id", "r", "--no-progress", *(["--dry-run"] if dry_run else [])])
    assert result.exit_code == 2, result.output
    assert "--snapshot-name 'two words' must be 1-64 letters, digits, '.', '_' or '-'" in result.output, \
        result.output
    assert not (tmp_path / "out" / "r").exists()


def test_a_pool_the_host_ram_cannot_hold_is_refused_before_anything_starts(tmp_path, caplog):
    """Guests that together need more than the host's RAM would be started, then killed by the
    OOM killer mid-run: refused (exit 2) with the numbers and what to lower; beyond the memory
    free now only a warning."""
    total_mb = psutil.virtual_memory().total // 2**20
    too_many = total_mb // 1024 + 1  # with the one default spare: two VMs too many
    with pytest.raises(ConfigError, match=rf"{too_many + 1} QEMU VMs of 1024 MB .* "
                                          rf"this host's {total_mb} MB .* at most {too_many - 1} VMs"):
        QemuProvider("r", ProviderOptions(memory_mb=1024, pool_size=too_many))
    with pytest.raises(ConfigError, match=r"default guest RAM"):  # 512 MB guests, no spare
        QemuProvider("r", ProviderOptions(pool_size=total_mb // 512 + 1, spare_vms=0))
    with pytest.raises(ConfigError, match=rf"one QEMU VM of {64 * 2**20} MB is more than this host's"):
        QemuProvider("r", ProviderOptions(memory_mb=64 * 2**20, pool_size=1, spare_vms=0))
    held = b"\1" * (1536 * 2**20)  # 1.5 GB in use, so that less is free than there is
    vms = total_mb // 128 - 1  # a pool within what there is, beyond what is free
    try:  # at this logger's own level: an earlier test may have quietened "parallel_rollout"
        with caplog.at_level(logging.WARNING, logger="parallel_rollout.pool.providers.qemu_machine"):
            QemuProvider("r", ProviderOptions(memory_mb=128, pool_size=vms, spare_vms=0))
    except ProviderUnavailable:
        pass  # no image here: the warning came first
    del held
    assert f"{vms} QEMU VMs of 128 MB each need up to" in caplog.text

    big = str(total_mb // 2048 + 1)  # as many rollouts as VMs: a run boots no more VMs than it can use
    proc = subprocess.run(
        [sys.executable, "-m", "parallel_rollout.cli", "--mode", "shell", "--data", str(SHELL_TASKS),
         "--provider-name", "qemu", "--num-rollouts", big, "--num-vms", big,
         "--use-vm-pool", "--spare-vms", "0", "--vm-memory-mb", "2048", "--output-dir", str(tmp_path),
         "--run-id", "big", "--no-progress"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"more than this host's {total_mb} MB of RAM" in proc.stderr and "--vm-memory-mb" in proc.stderr
    assert not (tmp_path / "big").exists()


def test_image_build_is_a_no_op_when_current(image):
    lines: list[str] = []
    started = time.monotonic()
    QemuProvider.build_image(log=lines.append)
    assert time.monotonic() - started < 5
    assert lines and "is current" in lines[-1]
