"""VMs that never boot: a start that raises, a start that hangs, a sandbox that dies while it
boots. The run ends — never hangs — with PoolExhausted, a clear message and exit code 1, after
a bounded number of replacement boots; no sample it could not run gets a final record, so a
resume with a working provider runs every one of them, once. A failed boot leaves nothing
on disk."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from chaos_support import read_events, reap_adopted_sandboxes, stray_processes  # noqa: F401 - autouse fixture
from conftest import _SANDBOX_ROOT, assert_exactly_once, read_results, shell_task, write_tasks
from parallel_rollout.cli import main
from parallel_rollout.errors import VMError
from parallel_rollout.pool.providers import ProviderOptions
from parallel_rollout.pool.providers.common import run_folders
from parallel_rollout.pool.providers.process import ProcessProvider


#: provider -> (what the last death says, the pool's boot timeout in seconds)
NEVER_BOOTS = {
    "raises": ("chaos_plugins:BootFailsProvider", "boot failed: VMError: chaos: vm-", 5.0),
    # the timeout as given, and the config file's key that set it (it said 'after 0s' of 0.5 s,
    # and no flag; then --boot-timeout-s, a flag no one typed)
    "hangs": ("chaos_plugins:BootHangsProvider", "boot timed out after 0.5s (boot-timeout-s in ", 0.5),
    # on the command line: the value as the flag takes it (it said 'after --boot-timeout-s 0.5s')
    "hangs-flag": ("chaos_plugins:BootHangsProvider", "boot timed out after 0.5s (--boot-timeout-s 0.5)", 0.5),
}
POOL = 2
REPLACEMENTS = 2


def cli(tmp_path, data, *args):
    return CliRunner().invoke(main, ["run", "--mode", "shell", "--data", str(data), "--num-rollouts", "3",
                                     "--use-vm-pool", "--num-vms", str(POOL), "--output-dir", str(tmp_path / "out"),
                                     "--run-id", "boot", "--no-progress", "--config", str(tmp_path / "run.toml"),
                                     *args])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", sorted(NEVER_BOOTS))
def test_a_vm_that_never_boots_ends_the_run_with_pool_exhausted(tmp_path, case):
    provider, last_death, boot_timeout = NEVER_BOOTS[case]
    flag = case.endswith("-flag")
    (tmp_path / "run.toml").write_text(("" if flag else f"boot-timeout-s = {boot_timeout}\n")
                                       + f"max-vm-replacements = {REPLACEMENTS}\n")
    tasks = [shell_task(f"t{i}") for i in range(6)]
    data = write_tasks(tmp_path / "tasks.jsonl", tasks)
    run_dir = tmp_path / "out" / "boot"

    started = time.monotonic()
    result = cli(tmp_path, data, "--provider-name", provider, *(["--boot-timeout-s", f"{boot_timeout:g}"] if flag else []))
    elapsed = time.monotonic() - started
    print(f"[never-boots:{case}] ended in {elapsed:.1f}s")
    assert result.exit_code == 1, (result.output, result.exception)
    assert "Traceback" not in result.output
    message = " ".join(result.stderr.split())
    assert "every VM of the" in message and "pool is dead and the replacement budget is spent" in message
    assert last_death in message, message
    assert "--resume" in message and "--run-id boot" in message
    # Never a hang: the initial boots and every replacement die within two boot timeouts each.
    generations = 1 + REPLACEMENTS // POOL
    assert elapsed < 15 + generations * 2 * boot_timeout

    events = read_events(run_dir)
    boots = [e for e in events if e.get("to") == "booting"]
    assert len(boots) == POOL + REPLACEMENTS, "the replacement budget does not bound the boots"
    assert not [e for e in events if e.get("to") == "idle"]
    records = read_results(run_dir) if (run_dir / "results.jsonl").exists() else []
    assert not [r for r in records if r["final"]], "a sample that never ran got a final record"
    assert {r["status"] for r in records} <= {"pool_exhausted", "pool_closed"}
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["finished"] == 0 and summary["unfinished"] == len(tasks)
    # it says why it stopped, and that no attempt was retried: they are left to --resume
    assert "replacement budget is spent" in summary["stopped"]["reason"]
    assert summary["retried_attempts"] == 0 and summary["attempts_left_to_resume"] == len(records)
    assert f"attempts: {len(records)} (0 retried, {len(records)} left to --resume)" in result.output
    page = (run_dir / "report.html").read_text()
    assert '<p id="stopped" class="warn">stopped before its end: every VM of the' in page

    # the resume has a working provider, and a boot timeout a loaded machine can meet
    (tmp_path / "run.toml").write_text(f"boot-timeout-s = 60\nmax-vm-replacements = {REPLACEMENTS}\n")
    resumed = cli(tmp_path, data, "--resume", "--provider-name", "process")
    assert resumed.exit_code == 0, (resumed.output, resumed.exception)
    finals = assert_exactly_once(run_dir, {f"{t['id']}#0" for t in tasks})
    assert {r["status"] for r in finals.values()} == {"success"}


class AgentExitsProvider(ProcessProvider):
    """The sandbox starts, but its agent exits before it says ready."""

    def _argv(self, *args):
        argv = super()._argv(*args)
        return argv[: argv.index("--") + 1] + ["/bin/true"]


#: how a boot fails -> (provider class, boot timeout, what the error says, boots tried)
FAILED_BOOTS = {
    # killed a moment after bwrap starts: often before it has forked the namespace's init,
    # or before that init has set up --die-with-parent; many tries to hit every moment
    "timeout": (ProcessProvider, 0.001, r"guest agent after 0\.001s \(--boot-timeout-s 0\.001\)", 100),
    "agent-exits": (AgentExitsProvider, 10.0, "exited before it was ready", 3),
}


@pytest.mark.parametrize("how", sorted(FAILED_BOOTS))
def test_a_failed_boot_leaves_nothing_behind(how):
    """The pool has no VMInfo for a VM whose start() raised, so it never calls stop() on it:
    start() itself must leave nothing. It used to leave the VM's folder until a sweep, and,
    killed early enough, a live sandbox that no sweep could find (no meta.json yet)."""
    cls, boot_timeout, says, tries = FAILED_BOOTS[how]
    failed = 0
    for attempt in range(tries):
        provider = cls(f"failed-boot-{how}", ProviderOptions(boot_timeout_s=boot_timeout))
        try:
            info = provider.start(f"vm-{attempt}")
        except VMError as exc:
            assert re.search(says, str(exc)), exc
            failed += 1
        else:
            # on a loaded machine the boot can be done by the time its deadline is first
            # looked at (the thread was not scheduled for the 1 ms): a boot, not a failure
            provider.stop(info)
        assert not run_folders(_SANDBOX_ROOT, f"failed-boot-{how}")
    assert failed >= tries * 0.9, f"only {failed} of {tries} boots failed"
    assert stray_processes() == [], "a sandbox outlived its failed boot"
    assert ProcessProvider.sweep(f"failed-boot-{how}") == []


@pytest.mark.timeout(120)
def test_ctrl_c_during_a_slow_boot_does_not_wait_for_the_boot(tmp_path):
    """Ctrl-C while the only VM boots (its sandbox runs, its start takes 30 s more): exit 130
    at once, not after the boot; the half-booted sandbox is swept (the leak check)."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("t0")])
    tests_dir = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [tests_dir, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "parallel_rollout.cli", "run", "--mode", "shell", "--data", str(data),
         "--num-rollouts", "1", "--use-vm-pool", "--num-vms", "1", "--output-dir", str(tmp_path / "out"),
         "--run-id", "slowboot", "--no-progress", "--provider-name", "chaos_plugins:SlowBootProvider"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not any("init_pid" in meta.read_text()  # the sandbox runs: the boot is under way
                      for meta in _SANDBOX_ROOT.glob("slowboot@*/vm-*/meta.json")):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        time.sleep(1.0)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert time.monotonic() - sent < 15, "Ctrl-C waited for the slow boot"
