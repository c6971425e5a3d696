"""Reset verification (``--verify-reset``): a VM whose reset left something of its task is
quarantined, never leased again; a clean reset passes.

The escapes are real: a task's daemon in a session of its own, a file where the home copy
does not look, a file in /tmp. The reset that lets them through is the process provider's
with one bug (``chaos_plugins.LeakyResetProvider``: it copies the snapshot back over the
home and does nothing else); the real reset must pass the same checks.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import read_results, shell_task, write_tasks
from pool_support import read_events, wait_idle, wait_until
from parallel_rollout.cli import main
from parallel_rollout.config import build_config
from parallel_rollout.errors import ConfigError, VMError, VMSettingsMismatch
from parallel_rollout.exit_codes import EXIT_ABORTED
from parallel_rollout.guest.client import GuestClient
from parallel_rollout.pool.manager import VMPoolManager
from parallel_rollout.pool.providers import ProviderOptions, verify, verify_guest
from parallel_rollout.pool.providers.process import ProcessProvider

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

LEAKY = "chaos_plugins:LeakyResetProvider"
#: what a task leaves where a home copy does not reach
ESCAPE = ("setsid sleep 600 > /dev/null 2>&1 < /dev/null & "
          "mkdir -p ~/.cache && echo kept > ~/.cache/secret && echo kept > /tmp/stash && "
          "echo changed > ~/a.txt")


@pytest.fixture
def snapshot(tmp_path):
    """A home with a file, a hidden folder and a link: what a reset must bring back."""
    snap = tmp_path / "snap"
    (snap / ".config").mkdir(parents=True)
    (snap / "a.txt").write_text("initial")
    (snap / ".config" / "app.ini").write_text("[app]\n")
    os.symlink(".config/app.ini", snap / "app.ini")
    return snap




# -- the fingerprint --------------------------------------------------------------------------


def test_fingerprint_sees_names_sizes_mtimes_and_full_sees_content(tmp_path):
    tree = tmp_path / "t"
    (tree / "d").mkdir(parents=True)
    (tree / "d" / "f").write_text("abcd")
    os.symlink("d/f", tree / "link")
    fast, full = verify.tree_fingerprint(tree), verify.tree_fingerprint(tree, full=True)
    assert set(fast) == {"d", "d/f", "link"} and fast["link"] == ("link", 0, 0, "d/f")
    assert verify.diff_trees("/h", fast, verify.tree_fingerprint(tree)) == []
    stamp = os.stat(tree / "d" / "f").st_mtime_ns
    (tree / "d" / "f").write_text("wxyz")  # same size, and the old mtime put back
    os.utime(tree / "d" / "f", ns=(stamp, stamp))
    assert verify.diff_trees("/h", fast, verify.tree_fingerprint(tree)) == []
    assert verify.diff_trees("/h", full, verify.tree_fingerprint(tree, full=True)) == [
        "/h/d/f: content differs from the snapshot"]
    (tree / "d" / "f").write_text("longer")
    (tree / "new").write_text("x")
    (tree / "link").unlink()
    assert verify.diff_trees("/h", fast, verify.tree_fingerprint(tree)) == [
        "/h/d/f: 6 bytes, the snapshot has 4", "/h/link: missing (link)",
        "/h/new: not in the snapshot (file, 1 bytes)"]


def _as_nobody_python() -> str | None:
    """A python3 the user nobody may run (as a machine's agent runs the probe as its user), None
    when this is no root or there is none."""
    python = shutil.which("python3", path="/usr/bin:/bin")
    if os.geteuid() != 0 or not shutil.which("setpriv") or python is None:
        return None
    return python if subprocess.run(["setpriv", *NOBODY, python, "-c", "pass"]).returncode == 0 else None


NOBODY = ("--reuid=65534", "--regid=65534", "--clear-groups")


def test_a_fingerprint_by_a_user_that_is_not_root_passes_what_it_may_not_list():
    """The reset probe walks /tmp as the agent's user: on a machine whose agent is not root (an
    OSWorld VM's user, an agent with --run-as) /tmp holds folders of root's it may not list
    (systemd-private-…, 700). The walk raised PermissionError at every boot, so --verify-reset
    failed each boot until the replacement budget was spent; the folder is an entry now, and
    a root that may not be listed still raises."""
    python = _as_nobody_python()
    if python is None:
        pytest.skip("needs root, setpriv and a python3 the user nobody may run")
    walk = "\n".join(["from __future__ import annotations", "import hashlib, json, os, stat, sys",
                      inspect.getsource(verify.tree_fingerprint), inspect.getsource(verify.file_sha256),
                      "print(json.dumps(tree_fingerprint(sys.argv[1])))"])
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:  # pytest's folders: nobody may not look in
        os.chmod(tmp, 0o755)
        Path(tmp, "open.txt").write_text("x")
        Path(tmp, "private").mkdir(mode=0o700)
        Path(tmp, "private", "secret").write_text("root's")
        seen = subprocess.run(["setpriv", *NOBODY, python, "-I", "-c", walk, tmp], capture_output=True, text=True)
        assert seen.returncode == 0, seen.stderr
        found = json.loads(seen.stdout)
        assert found.keys() == {"open.txt", "private"} and found["private"] == ["dir", 0, 0, ""], found
        root = subprocess.run(["setpriv", *NOBODY, python, "-I", "-c", walk, f"{tmp}/private"],
                              capture_output=True, text=True)
    assert root.returncode == 1 and "PermissionError" in root.stderr, root.stderr


def test_scratch_folders_match_by_pattern_and_count():
    boot = verify.scratch_print({"dbus-hWWWE2S9A0": ("other", 0, 0, ""), ".X11-unix": ("dir", 0, 0, ""),
                                 ".X11-unix/X0": ("other", 0, 0, "")})
    again = {"dbus-Qz81kLm0aa": ("other", 0, 0, ""), ".X11-unix": ("dir", 0, 0, ""),
             ".X11-unix/X0": ("other", 0, 0, "")}
    assert verify.diff_scratch("/tmp", boot, verify.scratch_print(again)) == []
    again.update({"dbus-Zz81kLm0ab": ("other", 0, 0, ""), "stash": ("file", 5, 1, "")})
    assert verify.diff_scratch("/tmp", boot, verify.scratch_print(again)) == [
        "/tmp/dbus-*: not in the snapshot (other)", "/tmp/stash: not in the snapshot (file)"]
    assert verify.diff_scratch("/tmp", boot, {}) == [
        "/tmp/.X11-unix: missing (dir)", "/tmp/.X11-unix/X0: missing (other)", "/tmp/dbus-*: missing (other)"]


def test_mode_is_checked_with_a_clear_error(tmp_path):
    assert verify.check_mode(None) == "fast"
    with pytest.raises(ConfigError, match="--verify-reset must be one of off, fast, full"):
        verify.check_mode("paranoid")
    with pytest.raises(ConfigError, match="--verify-reset must be off, fast or full, got 'yes'"):
        build_config({"verify_reset": "yes", "output_dir": str(tmp_path)})


# -- the process provider ---------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["fast", "full"])
def test_escapes_are_seen_and_a_real_reset_is_clean(tmp_path, snapshot, mode):
    base = Path(os.environ["PARALLEL_ROLLOUT_PROCESS_DIR"])
    provider = ProcessProvider(f"v{mode}{os.getpid()}", ProviderOptions(
        snapshot_name=str(snapshot), boot_timeout_s=30, verify_reset=mode), base_dir=base)
    info = provider.start("vm0")
    try:
        assert provider.verify(info) == []  # a fresh boot is its own snapshot
        GuestClient(info.address).execute(ESCAPE, shell=True)
        found = provider.verify(info)
        assert any("sleep 600" in line and "left running" in line for line in found), found
        assert "/home/user/.cache: not in the snapshot (dir)" in found
        assert "/home/user/.cache/secret: not in the snapshot (file, 5 bytes)" in found
        assert "/tmp/stash: not in the snapshot (file)" in found
        assert "/home/user/a.txt: 8 bytes, the snapshot has 7" in found
        info = provider.reset(info)
        assert provider.verify(info) == []
    finally:
        provider.stop(info)


def test_off_checks_nothing(tmp_path, snapshot):
    base = Path(os.environ["PARALLEL_ROLLOUT_PROCESS_DIR"])
    provider = ProcessProvider(f"voff{os.getpid()}", ProviderOptions(
        snapshot_name=str(snapshot), boot_timeout_s=30, verify_reset="off"), base_dir=base)
    info = provider.start("vm0")
    try:
        GuestClient(info.address).execute(ESCAPE, shell=True)
        assert provider.verify(info) == []
    finally:
        provider.stop(info)


# -- the pool ---------------------------------------------------------------------------------


def _pool(tmp_path, provider, snapshot, size=1, budget=2, mode=None):
    return VMPoolManager(provider, f"q{time.monotonic_ns() % 10**9}", size,
                         options=ProviderOptions(snapshot_name=str(snapshot), boot_timeout_s=30,
                                                 verify_reset=mode),
                         events_path=str(tmp_path / "events.jsonl"), replacement_budget=budget)


def test_a_leaky_reset_is_quarantined_and_restarted(tmp_path, snapshot):
    pool = _pool(tmp_path, LEAKY, snapshot)
    try:
        wait_idle(pool, 1)
        first = pool.lease("w0", "escape#0", timeout=30, holder="h1")
        GuestClient(first.address).execute(ESCAPE, shell=True)
        pool.release(first.vm_id)
        second = pool.lease("w0", "next#0", timeout=30, holder="h1")
        assert second.vm_id != first.vm_id  # never handed out again
        client = GuestClient(second.address)
        assert client.execute("ls -A ~ /tmp; pgrep -x sleep", shell=True)["output"].split() == [
            "/home/user:", ".config", "a.txt", "app.ini", "/tmp:"]
        stats = pool.stats()
        # what the task left: a restart from the snapshot, not the replacement budget's
        assert stats["quarantined"] == 1 and stats["restarts"] == 1 and stats["replacements"] == 0
        # a clean task on the leaky VM: nothing to catch, no quarantine
        pool.release(second.vm_id)
        wait_until(lambda: pool.stats()["states"]["idle"] == 1)
        assert pool.stats()["quarantined"] == 1
    finally:
        pool.shutdown()
    dead = [e for e in read_events(tmp_path / "events.jsonl") if e["to"] == "dead" and e["vm"] == first.vm_id]
    assert len(dead) == 1 and dead[0]["from"] == "resetting"
    assert dead[0]["reason"].startswith("reset verification failed, 4 difference(s)")
    assert dead[0]["after_task"] == "escape#0"
    differences = dead[0]["differences"]
    assert "/tmp/stash: not in the snapshot (file)" in differences
    assert "/home/user/.cache/secret: not in the snapshot (file, 5 bytes)" in differences
    assert any("sleep 600" in line and "left running" in line for line in differences)
    leases = [e["vm"] for e in read_events(tmp_path / "events.jsonl") if e["to"] == "leased"]
    assert leases == [first.vm_id, second.vm_id]


def test_clean_resets_quarantine_nothing(tmp_path, snapshot):
    pool = _pool(tmp_path, "process", snapshot, mode="full")
    try:
        for n in range(4):
            info = pool.lease("w0", f"t#{n}", timeout=30, holder="h1")
            GuestClient(info.address).execute(ESCAPE, shell=True)
            pool.release(info.vm_id)
        wait_until(lambda: pool.stats()["states"]["idle"] == 1)
        stats = pool.stats()
        assert stats["resets"] == 4 and stats["quarantined"] == 0 and stats["marked_dead"] == 0
    finally:
        pool.shutdown()


# -- the CLI ----------------------------------------------------------------------------------


def _cli(tmp_path, run_id, *flags):
    tasks = [shell_task("escape", reap=False,  # the shell env would reap the daemon itself
                        reference=[ESCAPE.replace("~/a.txt", "~/x"), "touch ~/escape.done"]),
             shell_task("second"), shell_task("third")]
    data = write_tasks(tmp_path / "tasks.jsonl", tasks)
    result = CliRunner().invoke(main, ["--mode", "shell", "--data", str(data), "--output-dir",
                                       str(tmp_path / "out"), "--run-id", run_id, "--no-progress",
                                       "--use-vm-pool", "--num-vms", "1", "--num-rollouts", "1",
                                       *flags])
    assert result.exit_code == 0, (result.output, result.exception)
    run_dir = tmp_path / "out" / run_id
    assert {r["status"] for r in read_results(run_dir) if r.get("final")} == {"success"}
    return [e for e in read_events(run_dir / "events.jsonl") if e.get("event") == "vm"]


def _no_budget(tmp_path) -> str:
    """A run file that gives the pool no replacement budget at all."""
    path = tmp_path / "no-budget.toml"
    path.write_text("max-vm-replacements = 0\n")
    return str(path)


def test_cli_flag_quarantines_a_leaky_reset_and_off_does_not(tmp_path):
    # the default (fast); with no replacement budget: a quarantine after a task is free
    events = _cli(tmp_path, "on", "--provider-name", LEAKY, "--config", _no_budget(tmp_path))
    # the leaky reset keeps every file a task makes: each task's VM is quarantined
    quarantined = {e["after_task"]: e for e in events
                   if e["reason"].startswith("reset verification failed")}
    assert {"escape#0", "second#0"} <= set(quarantined)
    assert any("sleep 600" in line and "left running" in line
               for line in quarantined["escape#0"]["differences"]), quarantined
    assert quarantined["second#0"]["differences"] == [
        "/home/user/second.done: not in the snapshot (file, 0 bytes)"]
    leased = [e["vm"] for e in events if e["to"] == "leased"]
    assert len(leased) == len(set(leased)) == 3  # a quarantined VM is never leased again
    events = _cli(tmp_path, "off", "--provider-name", LEAKY, "--verify-reset", "off")
    assert not [e for e in events if e["to"] == "dead" and e["from"] != "idle"]
    events = _cli(tmp_path, "full", "--verify-reset", "full")  # the real reset
    assert not [e for e in events if e["reason"].startswith("reset verification")]
    bad = CliRunner().invoke(main, ["--mode", "shell", "--verify-reset", "maybe"])
    assert bad.exit_code != 0 and "'maybe' is not one of 'off', 'fast', 'full'" in bad.output


def test_a_fresh_vm_that_fails_its_check_spends_the_budget_and_ends_the_run(tmp_path):
    """No task ran on a VM checked before its first lease: a difference is the provider's
    fault (a restore that leaves a file), charged like a failed boot; the run ends clearly."""
    budget = tmp_path / "budget.toml"
    budget.write_text("max-vm-replacements = 2\n")
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a"), shell_task("b")])
    result = CliRunner().invoke(main, [
        "--mode", "shell", "--data", str(data), "--output-dir", str(tmp_path / "out"),
        "--run-id", "dirty", "--no-progress", "--use-vm-pool", "--num-vms", "1",
        "--num-rollouts", "1", "--provider-name", "chaos_plugins:DirtyBootProvider",
        "--config", str(budget)])
    assert result.exit_code == EXIT_ABORTED, (result.output, result.exception)
    assert ("replacement budget is spent (3 failed boots (3 of them a fresh VM that failed its "
            "check)") in " ".join(result.output.split()), result.output
    events = [e for e in read_events(tmp_path / "out" / "dirty" / "events.jsonl") if e.get("event") == "vm"]
    dead = [e for e in events if e["to"] == "dead"]
    assert len(dead) == 3 and {e["from"] for e in dead} == {"booting"}, dead
    for event in dead:
        assert event["reason"].startswith("verification of a fresh VM failed (no task ran on it")
        assert event["differences"] == ["/home/user/left-by-boot: not in the snapshot (file, 6 bytes)"]
    assert not [e for e in events if e["to"] in ("idle", "leased")]  # never handed out


def test_a_provider_that_cannot_verify_refuses_an_explicit_mode(tmp_path):
    """Never silently ignored: fast or full on a provider without ``verify`` is exit 2,
    naming the provider; left unset (or off) the run goes on, unchecked."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a")])
    run = ["--mode", "shell", "--data", str(data), "--output-dir", str(tmp_path / "out"),
           "--no-progress", "--num-rollouts", "1", "--provider-name", "chaos_plugins:UncheckedProvider"]
    for mode in ("fast", "full"):
        result = CliRunner().invoke(main, [*run, "--run-id", mode, "--verify-reset", mode])
        assert result.exit_code == 2, (result.output, result.exception)
        assert (f"the unchecked provider cannot verify its resets: --verify-reset {mode} cannot "
                "be honoured") in " ".join(result.output.split())
    for flags in ([], ["--verify-reset", "off"]):
        result = CliRunner().invoke(main, [*run, "--run-id", f"r{len(flags)}", *flags])
        assert result.exit_code == 0, (result.output, result.exception)


# -- a desktop --------------------------------------------------------------------------------


def test_a_window_left_open_on_a_desktop_is_seen(tmp_path):
    from desktop_support import wait_window

    base = Path(os.environ["PARALLEL_ROLLOUT_PROCESS_DIR"])
    try:
        provider = ProcessProvider(f"vd{os.getpid()}", ProviderOptions(
            boot_timeout_s=60, desktop=True, screen_width=800, screen_height=600), base_dir=base)
    except ConfigError as exc:
        pytest.skip(f"no desktop here: {exc}")
    info = provider.start("vm0")
    try:
        assert provider.verify(info) == []  # the desktop's own windows and processes
        client = GuestClient(info.address, timeout_s=60.0)
        client.launch(["xmessage", "-title", "big", "left open"])
        wait_window(client, "big", timeout_s=60)
        found = provider.verify(info)
        assert "window 'big' left open" in found, found
        assert any("(xmessage) left running" in line for line in found), found
        info = provider.reset(info)
        assert provider.verify(info) == []
    finally:
        provider.stop(info)


# -- through the guest agent (qemu, where the host cannot look in) -----------------------------


def _sandbox(snapshot, prefix: str):
    """(provider, info) of one process sandbox seeded from ``snapshot``, its run named by
    ``prefix`` and this process; the caller stops it."""
    provider = ProcessProvider(f"{prefix}{os.getpid()}", ProviderOptions(
        snapshot_name=str(snapshot), boot_timeout_s=30), base_dir=Path(os.environ["PARALLEL_ROLLOUT_PROCESS_DIR"]))
    return provider, provider.start("vm0")


def test_the_guest_probe_sees_what_the_host_sees(snapshot):
    """GuestView (qemu's verification) on a sandbox, where the host's view is known."""
    provider, info = _sandbox(snapshot, "vg")
    view = verify_guest.GuestView("full", "/home/user", None)
    try:
        view.baseline("vm0", None, info.address)
        assert view.check("vm0", None, info.address) == []  # the probe's own file is left out
        # (a.txt left alone: a sandbox's "boot" in the probe's eyes is the host kernel's)
        GuestClient(info.address).execute(ESCAPE.replace("echo changed > ~/a.txt", "true"), shell=True)
        found, host = view.check("vm0", None, info.address), provider.verify(info)
        without_pids = lambda lines: sorted(re.sub(r"process \d+", "process N", x) for x in lines)  # noqa: E731
        assert len(found) == 4 and without_pids(found) == without_pids(host), (found, host)
        info = provider.reset(info)
        assert view.check("vm0", None, info.address) == []
    finally:
        provider.stop(info)
    assert view.check("vm0", None, "unix:/nonexistent/agent.sock")[0].startswith(
        "the VM's agent did not answer the reset probe")


def test_the_guest_probe_compares_a_home_of_tens_of_thousands_of_entries(snapshot):
    """A home of 60,000 files (a pip cache) made the probe's JSON pass the 2,000,000
    characters kept of its answer: the cut line was no JSON, and every reset of the machine
    was quarantined as 'the VM's agent did not answer'. The answer is compressed now; a
    leftover among the 60,000 is still found."""
    provider, info = _sandbox(snapshot, "vb")
    view = verify_guest.GuestView("fast", "/home/user", None)
    try:
        GuestClient(info.address).execute(
            "mkdir -p ~/.cache/pip && cd ~/.cache/pip && for d in $(seq 0 119); do mkdir $d; "
            "(cd $d && touch $(seq -f wheel-%g.bin 0 499)); done", shell=True, timeout=120)
        view.baseline("vm0", None, info.address)
        assert view.check("vm0", None, info.address) == []
        GuestClient(info.address).execute("touch ~/.cache/pip/7/left-behind", shell=True)
        found = view.check("vm0", None, info.address)
        assert len(found) == 1 and ".cache/pip/7/left-behind" in found[0], found
        # an answer past what is kept, even compressed, says so (not "did not answer")
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(verify_guest, "PROBE_TAIL_CHARS", 2000)
            [too_big] = view.check("vm0", None, info.address)
        assert "the reset probe's answer passed 2,000 characters, compressed" in too_big, too_big
    finally:
        provider.stop(info)


def test_a_machine_the_probe_cannot_report_stops_the_run_at_its_first_boot(snapshot):
    """A machine that holds more than the probe may report (its snapshot: every reset brings
    it back) is the run's settings at its first boot, not a failed boot: it was booted again
    until the replacement budget was spent. A probe that fails otherwise is still a failed boot."""
    provider, info = _sandbox(snapshot, "vc")
    view = verify_guest.GuestView("fast", "/home/user", None)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(verify_guest, "PROBE_TAIL_CHARS", 40)
            with pytest.raises(VMSettingsMismatch, match=re.escape(
                    f"VM vm0 ({info.address}): the reset probe's answer passed 40 characters")):
                verify_guest.baseline_machine(view, "slot", info)
    finally:
        provider.stop(info)
    with pytest.raises(VMError, match="did not answer the reset probe") as failed:
        verify_guest.baseline_machine(view, "slot", info)
    assert not isinstance(failed.value, VMSettingsMismatch)
