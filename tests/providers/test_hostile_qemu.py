"""The hostile table of tests/hostile_tasks.py on the qemu provider: every row graded 0, the
host untouched, the run finished, no VM lost.

A QEMU VM is its own kernel: the graded code runs in the guest as uid 64000 without
capabilities (the agent is the guest's root) under the process sandbox's seccomp filter,
which the agent loads (io_uring and the new mount API refused: the guest's root grades the
answer), ``-m`` bounds its memory (a fork bomb or a memory hog exhausts the guest, not the
host: QEMU's RSS is fixed by ``-m``), and the network is QEMU's user mode with
``restrict=on`` (no way out, not even to the host's loopback). Slow: two TCG VMs boot
(9-18 s each on 2 cores) before the table runs.
"""

from __future__ import annotations

import shutil

import pytest

from hostile_tasks import SHELL_ROWS, check_finished, check_row, rows_without_programs, run_table
from parallel_rollout.errors import ProviderUnavailable
from parallel_rollout.pool.providers import qemu
from parallel_rollout.pool.providers.qemu import QemuProvider

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which(qemu.QEMU) is None,
                                 reason="qemu-system-x86_64 is not installed (./dev installs it)")]

#: rows left out on qemu, and why: those whose check runs a program the guest image does not
#: have (it has python3, its agent's, as docker's, and no other; the table's honest_wrappers
#: task checks that their wrappers come first on a check's PATH); no other since the guest's
#: agent loads the seccomp filter (nested user namespaces and the guest kernel's keyring are
#: refused there too)
NOT_ON_QEMU: dict[str, str] = rows_without_programs("the guest image (minbase and python3)",
                                                    has=lambda program: program == "python3")


@pytest.fixture(scope="module")
def qemu_table(tmp_path_factory):
    try:
        QemuProvider.build_image(log=lambda line: print(line, flush=True))
        QemuProvider.check_available()
    except ProviderUnavailable as exc:
        pytest.skip(f"the qemu provider cannot run here: {exc}")
    return run_table(tmp_path_factory.mktemp("qemu"), NOT_ON_QEMU, vms=2, provider_name="qemu",
                     vm_memory_mb=384, boot_timeout_s=120.0)


@pytest.mark.parametrize("name", list(SHELL_ROWS))
def test_hostile_shell_answer_on_qemu(qemu_table, name):
    check_row(qemu_table, name)


def test_qemu_host_untouched_and_the_run_finished(qemu_table):
    check_finished(qemu_table)
