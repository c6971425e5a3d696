"""Shared fixtures: a private sandbox folder per test session and a leak check after every test.

Every test ends with a check that it left no child process and no sandbox behind; a test that
leaks fails even when its own assertions passed.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

# Sandboxes of this test session live in their own folder, so the leak check sees only ours
# and a developer's real runs are never touched. Set before any worker is spawned: children
# inherit it.
# A worker process that imports a test module (a plugin agent defined there) imports this
# file too: it reuses the session's folder instead of making one of its own. Each pytest-xdist
# worker (./dev test runs two) is a session of its own: its folder, and so its leak check's
# marker, are its own, or each would see the other's runs as its leaks.
_XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if "PR_TEST_SANDBOX_ROOT" not in os.environ or os.environ.get("PR_TEST_SANDBOX_OWNER", "") != _XDIST_WORKER:
    os.environ["PR_TEST_SANDBOX_ROOT"] = tempfile.mkdtemp(prefix=f"pr-test-sandboxes-{_XDIST_WORKER}")
    os.environ["PR_TEST_SANDBOX_OWNER"] = _XDIST_WORKER
_SANDBOX_ROOT = Path(os.environ["PR_TEST_SANDBOX_ROOT"])
os.environ["PARALLEL_ROLLOUT_PROCESS_DIR"] = str(_SANDBOX_ROOT)


def pytest_sessionfinish(session, exitstatus):
    """Remove this session's sandbox folder (each xdist worker has one) once nothing but the
    bytecode caches is left in it; one that holds a leftover stays, as the leak check named it."""
    if _SANDBOX_ROOT.exists() and not leftover_sandboxes():
        shutil.rmtree(_SANDBOX_ROOT, ignore_errors=True)


def pytest_configure(config):
    """A suite started in the background (``cmd &`` in a script, as a CI job may be) inherits
    SIGINT ignored, and the CLI keeps an ignored signal ignored: every test that sends a run
    Ctrl-C would see it ignored. The session takes Python's own handler back, so the runs it
    starts get SIGINT at its default (tests of an ignored signal ignore it in the child)."""
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)

ROOT = Path(__file__).resolve().parent.parent
SHELL_TASKS = ROOT / "benchmarks" / "shell_tasks.jsonl"
#: OSWorld's task files: shared/osworld beside a folder above the checkout (as CI lays it),
#: else the workplace's; None where neither is
OSWORLD_EXAMPLES = next((base / "shared" / "osworld" / "evaluation_examples"
                         for base in [*ROOT.parents, Path("/work")]
                         if (base / "shared" / "osworld" / "evaluation_examples").is_dir()), None)


def leftover_sandboxes() -> list[str]:
    """Sandbox folders still on disk under this session's sandbox root (not the dot
    folders beside the runs: the agent's bytecode is a cache kept between runs)."""
    if not _SANDBOX_ROOT.exists():
        return []
    return sorted(str(p.relative_to(_SANDBOX_ROOT)) for p in _SANDBOX_ROOT.glob("*/*")
                  if p.is_dir() and not p.parent.name.startswith("."))


def vm_folders_of(run_id: str) -> list[str]:
    """This session's VM folders of ``run_id``, as ``leftover_sandboxes`` names them (each
    pool of the run has a folder of its own, ``<run id>@<key>``)."""
    return [p for p in leftover_sandboxes() if p.partition("/")[0].partition("@")[0] == run_id]


#: every process this session starts inherits this, orphans included: the leak check
#: finds them by it even after their parent died and init adopted them
_MARKER = ("PR_TEST_SANDBOX_ROOT", os.environ["PR_TEST_SANDBOX_ROOT"])


def _ours(proc: psutil.Process) -> bool:
    try:
        return proc.environ().get(_MARKER[0]) == _MARKER[1]
    except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess, OSError):
        return False


def live_descendants() -> list[psutil.Process]:
    """Running processes of this test session other than the test process: its children,
    and any process carrying the session's marker (an orphan a killed worker left)."""
    me = os.getpid()
    found = {p.pid: p for p in psutil.Process().children(recursive=True)}
    for proc in psutil.process_iter():
        if proc.pid != me and proc.pid not in found and _ours(proc):
            found[proc.pid] = proc
    alive = []
    for proc in found.values():
        try:
            # multiprocessing's resource tracker is one per test process, by design.
            if proc.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(proc.cmdline()):
                alive.append(proc)
        except psutil.NoSuchProcess:
            pass
    return alive


@pytest.fixture(autouse=True)
def no_leaks():
    """Fail the test if it leaves a process or a sandbox behind (after a short grace)."""
    before = {p.pid for p in live_descendants()}
    yield
    check_no_leaks(before, allowed=lambda proc: _grader_of_an_older_worker(proc, before))


@pytest.fixture(autouse=True)
def project_logger_propagates():
    """A CLI run in this process (CliRunner) stops the project's logger from propagating to
    the root (logs.console_logging): put it back, so the next test's caplog sees it."""
    yield
    logging.getLogger("parallel_rollout").propagate = True


@pytest.fixture(autouse=True)
def stop_signals_as_they_were(request):
    """Put SIGINT, SIGTERM and SIGHUP back as the test found them (their handlers, and their
    mask on this thread), saying which test changed them: a run a later test starts inherits a
    signal ignored or blocked here, and a Ctrl-C that test sends it was lost (the run finished
    and exited 0 where 130 was checked)."""
    import signal
    import sys

    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    handlers = {sig: signal.getsignal(sig) for sig in signals}
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    yield
    changed = [sig for sig in signals if signal.getsignal(sig) is not handlers[sig]]
    now_blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    for sig in changed:
        signal.signal(sig, handlers[sig])
    if now_blocked != blocked:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    if changed or now_blocked != blocked:
        print(f"{request.node.nodeid} left {[signal.Signals(s).name for s in changed]} handled otherwise "
              f"and {sorted(signal.Signals(s).name for s in now_blocked ^ blocked)} blocked otherwise: "
              "put back", file=sys.stderr)


def _grader_of_an_older_worker(proc: psutil.Process, before: set[int]) -> bool:
    """A math grader (envs/math_grader.py) whose worker was running before the test, or of
    this test process: it is that process's, kept for its next grading (a module's shared
    engine; tests/test_math.py grades in this process and stops its graders at its end)."""
    try:
        return ("parallel_rollout.envs.math_grader" in " ".join(proc.cmdline())
                and (proc.ppid() in before or proc.ppid() == os.getpid()))
    except psutil.Error:
        return False


def _where(proc: psutil.Process) -> str:
    """What a leftover process is doing: its parent, state, wait channel and children, for
    the failure message (a leftover bwrap with no child once had no other clue)."""
    try:
        wchan = Path(f"/proc/{proc.pid}/wchan").read_text().strip() or "-"
    except OSError:
        wchan = "?"
    try:
        return (f"[ppid {proc.ppid()}, {proc.status()}, wchan {wchan}, "
                f"children {[c.pid for c in proc.children()]}]")
    except psutil.Error:
        return f"[wchan {wchan}]"


def check_no_leaks(before: set[int], allowed=lambda proc: False, grace_s: float = 10.0) -> None:
    """Fail when a process (other than ``before`` and those ``allowed``) or a sandbox is left."""
    deadline = time.monotonic() + grace_s
    while True:
        procs = [p for p in live_descendants() if p.pid not in before and not allowed(p)]
        dirs = leftover_sandboxes()
        if (not procs and not dirs) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    described = []
    for proc in procs:
        try:
            described.append(f"{proc.pid} {' '.join(proc.cmdline())[:120]} {_where(proc)}")
        except psutil.NoSuchProcess:
            pass
    for proc in procs:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    for leftover in dirs:  # reported below: one leak fails one test, not every one after it
        shutil.rmtree(_SANDBOX_ROOT / leftover, ignore_errors=True)
    assert not described, f"processes left behind: {described}"
    assert not dirs, f"sandboxes left behind: {dirs}"


def write_tasks(path: Path, tasks: list[dict]) -> Path:
    """Write tasks as JSONL and return the path."""
    path.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    return path


def read_results(run_dir: Path) -> list[dict]:
    """Every record of a run's results.jsonl."""
    # split on "\n" only: a record may hold U+2028, which str.splitlines() would split on
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().split("\n") if line.strip()]


@pytest.fixture
def llm_servers():
    """``llm_servers(policy, n)``: n local test servers (tests/llm_server.py) sharing a policy;
    stopped after the test."""
    from llm_server import LLMServer

    made: list[LLMServer] = []

    def start(policy, count: int = 1) -> list[LLMServer]:
        new = [LLMServer(policy=policy).start() for _ in range(count)]
        made.extend(new)
        return new

    yield start
    for server in made:
        server.stop()


def run_ok(*args: str):
    """``parallel-rollout run ARGS`` through click's runner, as a user types it; it must exit 0."""
    from click.testing import CliRunner

    from parallel_rollout.cli import main

    result = CliRunner().invoke(main, ["run", *args])
    assert result.exit_code == 0, result.output
    return result


def finals_by_key(records: list[dict]) -> dict[str, list[dict]]:
    """key -> the final records of that sample (exactly one is the only correct answer), or,
    for a sample with none that was never graded (infrastructure failures past its retries),
    its ``never_graded`` records (exactly one too: a resume that grades it writes a final)."""
    out: dict[str, list[dict]] = {}
    never: dict[str, list[dict]] = {}
    for record in records:
        if record.get("final"):
            out.setdefault(record["key"], []).append(record)
        elif record.get("never_graded"):
            never.setdefault(record["key"], []).append(record)
    return out | {key: rs for key, rs in never.items() if key not in out}


def assert_exactly_once(run_dir: Path, keys: set[str]) -> dict[str, dict]:
    """Every sample in ``keys`` has exactly one final record, and no attempt is written twice."""
    records = read_results(run_dir)
    finals = finals_by_key(records)
    assert set(finals) == keys, f"missing: {keys - set(finals)}, unexpected: {set(finals) - keys}"
    doubled = {k: len(v) for k, v in finals.items() if len(v) != 1}
    assert not doubled, f"samples with more than one final record: {doubled}"
    attempts = [(r["key"], r["attempt"]) for r in records]
    assert len(attempts) == len(set(attempts)), "an attempt was recorded twice"
    return {k: v[0] for k, v in finals.items()}


def max_overlap(records: list[dict]) -> int:
    """The most attempts running at one moment, from the records' start and end times."""
    points = sorted([(r["started_at"], 1) for r in records] + [(r["ended_at"], -1) for r in records],
                    key=lambda p: (p[0], p[1]))
    level = peak = 0
    for _, delta in points:
        level += delta
        peak = max(peak, level)
    return peak


def shell_task(task_id: str, **extra) -> dict:
    """A small passing shell task."""
    task = {"id": task_id, "mode": "shell", "instruction": f"create {task_id}",
            "check": f"test -e ~/{task_id}.done", "reference": [f"touch ~/{task_id}.done"]}
    task.update(extra)
    return task


@contextmanager
def child_cgroup(controller: str, limits, prefix: str):
    """A child of our own ``controller`` cgroup with ``limits(version)`` (file -> value)
    written into it, and whatever is made in it; removed after. Root only."""
    from parallel_rollout.pool.providers import cgroups

    if os.geteuid() != 0 or controller not in cgroups.available():
        pytest.skip(f"needs root and a working {controller} cgroup")
    hierarchy = cgroups._probe()[0][controller]
    path = hierarchy.root / f"{prefix}-{os.getpid()}-{secrets.token_hex(3)}"
    path.mkdir()
    try:
        try:
            for name, value in limits(hierarchy.version).items():
                (path / name).write_text(value)
        except OSError as exc:
            pytest.skip(f"cannot limit a child of our cgroup: {exc}")
        yield path
    finally:
        for folder in sorted(path.rglob("*"), key=lambda p: -len(p.parts)):
            if folder.is_dir():
                cgroups.remove_paths([str(folder)], parents=False)
        cgroups.remove_paths([str(path)], parents=False)


def limited_cgroup(limit_mb: int, prefix: str = "pr-share"):
    """A child of our own memory cgroup limited to ``limit_mb``, with whatever is made in it
    (a runner started in it makes its VMs' cgroups there); removed after. Root only."""
    return child_cgroup("memory", lambda version: {
        "memory.max" if version == 2 else "memory.limit_in_bytes": str(limit_mb << 20)}, prefix)


@contextmanager
def small_tmpfs(folder: Path, size: str):
    """A tmpfs of ``size`` mounted on ``folder``: a real ENOSPC for storage-fault tests.
    Needs root; skips the test where mounting is not allowed."""
    folder.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", default=False,
                     help="also run the tests marked slow (long acceptance checks)")


#: parametrized cases that are slow where their test's other cases are not (a test marks
#: itself slow with ``@pytest.mark.slow``): another provider, model setting or size of a check
#: the default run makes once; each took 10-50 s of a 2-core run
SLOW_CASES = frozenset({
    *(f"tests/providers/test_contract.py::{test}[qemu]" for test in (
        "test_execute", "test_file_round_trip", "test_reset_restores_the_snapshot",
        "test_healthy_turns_false_when_killed_from_outside", "test_death_cause_names_a_kill_from_outside",
        "test_stop_leaves_nothing_and_is_idempotent", "test_sweep_after_a_sigkilled_owner_leaves_nothing")),
    "tests/providers/test_contract.py::test_start_reaches_the_guest_agent[qemu]",  # test_qemu.py boots one
    "tests/test_fleet.py::test_cli_two_servers_share_out_workers_of_one_env_loop_each[4]",
    "tests/rl/test_aborts.py::test_a_scheduler_aborts_eight_env_loops_mid_turn[partial]",
    "tests/test_runner.py::test_resume_after_main_process_is_sigkilled[20]",
    "tests/test_vm_costs.py::test_one_vm_cannot_take_the_machines_ptys[nobody]",
    "tests/test_osworld_openai.py::test_openai_agent_solves_desktop_tasks_from_screenshots"
    "[computer_13-screenshot_a11y_tree]",
    # one case of each stays in the default run: the fence's tag, the folder flag beside a task
    # file, the failure policy a fixed server's batch comes under
    *(f"tests/test_osworld_openai.py::test_a_fenced_block_of_any_tag_is_its_body_as_in_osworld[{tag}]"
      for tag in ("code", "bash")),
    "tests/test_osworld_folder_cli.py::test_a_folder_flag_with_a_task_file_is_refused"
    "[flags1---domain os and --osworld-index test_small.json apply]",
    "tests/test_osworld_folder_cli.py::test_a_folder_flag_with_a_task_file_is_refused[flags2---domain os applies]",
    "tests/rl/test_liveness.py::test_a_trainer_that_fixes_its_server_after_the_failure_error_gets_a_batch[placeholder]",
})
#: long tests (6-37 s each of a quiet 2-core run) whose area keeps a shorter test in the default
#: run: the stop from outside (test_outside_stops' two others, test_death_cause), random kills
#: (test_manager_dies), Ray (a node lost), timeouts, limits, resumes and plugin imports
LONG_TESTS = frozenset({
    "tests/test_outside_stops.py::test_a_guest_agent_stopped_from_outside_is_retried_not_graded",
    "tests/chaos/test_random_kills.py::test_random_kills_lose_nothing_and_double_nothing",
    "tests/test_ray_driver.py::test_engine_submit_cancel_pause_and_a_killed_worker_actor",
    "tests/test_timeout_records.py::test_an_osworld_grading_timeout_names_the_osworld_phase",
    "tests/test_openai_agent.py::test_an_attempt_whose_time_runs_out_while_a_failed_model_request_is_retried_is_the_endpoints",
    "tests/test_command_agent_cli.py::test_a_hanging_agent_is_a_task_timeout_with_its_stderr",
    "tests/providers/test_remote.py::test_shell_benchmark_through_the_pool_on_two_remote_machines",
    "tests/test_pool.py::test_a_hung_reset_is_given_up_and_the_vm_restarted",
    "tests/test_math_grader.py::test_a_grader_is_bounded_in_memory_and_a_grading_that_used_much_ends_it",
    "tests/test_math_grader.py::test_a_grading_past_rlimit_cpus_hard_limit_is_the_answers_cpu_limit",
    "tests/test_compare_runs.py::test_a_run_killed_hard_is_partial_of_its_whole_total_everywhere[resume-of-an-interrupted-run]",
    "tests/test_compare_runs.py::test_a_run_killed_hard_is_partial_of_its_whole_total_everywhere[resume-with-a-higher-limit]",
    "tests/test_vm_costs.py::test_one_vm_cannot_take_another_vms_per_user_limits",
    "tests/test_run_lifecycle.py::test_a_plugin_import_that_never_ends_stops_the_run_at_the_start_deadline",
    "tests/test_run_lifecycle.py::test_a_slow_plugin_import_is_said_while_the_workers_start",
    "tests/test_run_lifecycle.py::test_a_signal_ignored_at_start_stays_ignored_by_the_run_and_its_workers[SIGHUP]",
    "tests/test_process_group.py::test_a_worker_whose_runner_died_takes_what_it_led_with_it[helper-hangs]",
    "tests/test_process_group.py::test_a_worker_whose_runner_died_takes_what_it_led_with_it[leads-nothing]",
    "tests/chaos/test_boot_failures.py::test_ctrl_c_during_a_slow_boot_does_not_wait_for_the_boot",
    "tests/test_command_agent_limits.py::test_stray_lines_cost_the_worker_a_few_lines_of_memory_and_fail_the_attempt",
    "tests/rl/test_liveness.py::test_replies_longer_than_the_api_timeout_are_no_silence",
    "tests/rl/test_sources.py::test_a_restarted_scheduler_running_ahead_gets_the_same_next_tasks",
    # Ray keeps its RL batches on the nodes and the driver's own address; the sessions' ids keep
    # test_a_later_session_of_a_run_id_is_refused_or_kept_apart; two desktop agents' Chrome ports
    # keep the 9222 test of test_osworld_apps (whose pkill stops only the agent's own Chromium)
    "tests/test_ray_driver.py::test_a_driver_that_never_set_ray_s_address_variable_joins_a_cluster_on_loopback",
    "tests/test_ray_driver.py::test_an_rl_run_goes_on_when_one_node_of_several_is_lost",
    "tests/rl/test_run_folder.py::test_trajectory_ids_are_unique_across_siblings_and_sessions",
    "tests/test_guest_desktops.py::test_two_desktop_agents_on_one_host_each_reach_their_own_chrome",
    # a CI-style run took 25:35 on a slow day: 12-15 s each, their area keeping a shorter case
    # (OSWorld's export by the README's command and of a skipped task, a VM stopped from
    # outside around one call, the run lifecycle's test of which earlier run a new run names)
    "tests/test_osworld_export.py::test_a_sample_graded_without_the_evaluators_result_is_scored_by_osworlds_scripts_as_by_the_run",
    "tests/test_outside_stops.py::test_a_guest_agent_stopped_from_outside_past_the_task_timeout_is_not_the_tasks_timeout",
    "tests/test_osworld_resume_data.py::test_a_run_started_again_after_a_stop_says_which_run_to_resume",
    # a CI-style run took 26:41: a node's warnings said in a Python run()'s keywords (its CLI
    # test keeps the lines' way to the driver, test_api_life the keywords), a worker dying beside
    # a paused pool (its module's cluster with it: test_ray_lost_nodes keeps a node's death), an
    # output flood as nobody (the runner's case stays), a ray run's second resume flag, a
    # machine that never answers set in a config file (the flags' cases stay, and the file's
    # words of test_a_provider_that_refuses_its_settings_says_where_they_were_given)
    "tests/test_ray_backend.py::test_a_python_runs_node_warnings_are_said_in_its_keywords",
    "tests/test_ray_stalls.py::test_a_dead_worker_s_paused_pool_holds_back_no_other_node",
    "tests/test_vm_costs.py::test_an_output_flood_costs_no_process_its_size[nobody]",
    "tests/test_ray_config.py::test_a_ray_run_resumes_on_the_local_backend[flags1]",
    "tests/providers/test_machine_settings.py::test_a_machine_that_does_not_answer_is_named_with_the_flags_to_check[none-in-config]",
})
#: the same, by the start of their ids (ids with free text in them)
SLOW_CASE_PREFIXES = (
    *(f"tests/test_run_provenance.py::test_resume_refuses_another_model_setting_naming_it[{case}-"
      for case in ("args0", "args1", "args3")),
    # 401 stays, with the same fix said; 404's stop and resume are 401's (the fleet tests refuse 404)
    "tests/test_endpoint_refusals.py::test_a_refused_key_or_unknown_model_stops_the_run_and_its_resume_runs_every_sample[403-",
    "tests/test_endpoint_refusals.py::test_a_refused_key_or_unknown_model_stops_the_run_and_its_resume_runs_every_sample[404-",
)


#: tests that share what one machine has once, each group run by one pytest-xdist worker
#: (``--dist loadgroup``): the providers' Docker daemon, images and VMs; the Ray clusters
XDIST_GROUPS = (("tests/providers/", "providers"), ("tests/test_ray_", "ray"))
#: test files under tests/providers/ of the process provider alone, which share none of that
#: (no daemon, no image, no other provider's VM): each test goes wherever a worker is free, as
#: any other test that boots process VMs does, and the providers' group (the run's longest
#: work unit, one worker's for its whole time) is shorter by them
PROCESS_PROVIDER_ONLY = tuple(f"tests/providers/{name}" for name in (
    "test_process", "test_host_share.py", "test_halted.py", "test_machine_settings.py"))
#: tests that must have the machine to themselves (marked ``exclusive``: ./dev test runs them
#: after the others, one at a time): this host as a ``remote`` machine, whose shell checks
#: refuse any link into /proc made in its /tmp during the attempt, another test's too (the
#: hostile answers' sandboxes live in /tmp)
EXCLUSIVE = ("tests/providers/test_remote", "tests/test_web_remote.py",
             "tests/test_ray_backend.py::test_remote_vms_are_one_pool_leased_from_every_node",
             # which uid a VM gets: the lowest the machine's runs leave free
             "tests/providers/test_process.py::test_each_vm_runs_its_commands_as_a_uid_of_its_own")


def xdist_scope(nodeid: str) -> str:
    """What one pytest-xdist worker runs together: a group of XDIST_GROUPS, the whole of a module
    that has a module-scoped fixture (a hostile table's run, a built wheel: built once, not once
    a worker and again whenever that worker's turn in the module is broken), else the test."""
    group = None if nodeid.startswith(PROCESS_PROVIDER_ONLY) else \
        next((name for start, name in XDIST_GROUPS if nodeid.startswith(start)), None)
    if group:
        return group
    module = nodeid.split("::", 1)[0]
    return module if _has_module_fixture(module) else nodeid


@functools.lru_cache(maxsize=None)
def _has_module_fixture(module: str) -> bool:
    path = Path(__file__).parent.parent / module
    return path.suffix == ".py" and path.is_file() and 'scope="module"' in path.read_text()


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup``, its work units from :func:`xdist_scope`. xdist 3.8 names a test's
    ``xdist_group`` by rewriting ``Item._nodeid``, which pytest 9 no longer reads, so the mark
    grouped nothing: the providers' and Ray's tests ran on both workers, and every module
    fixture was built on each."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class Scheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid)

    return Scheduling(config, log)


def pytest_collection_modifyitems(config, items):
    """Leave the tests marked ``slow`` (and SLOW_CASES) out of the default run, so it stays
    lean; ``--slow`` or PR_SLOW=1 runs them too."""
    for item in items:
        if item.nodeid.startswith(EXCLUSIVE):
            item.add_marker(pytest.mark.exclusive)
    if config.getoption("--slow") or os.environ.get("PR_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: run with ./dev test --slow")
    for item in items:
        if "slow" in item.keywords or item.nodeid in SLOW_CASES or item.nodeid in LONG_TESTS or item.nodeid.startswith(SLOW_CASE_PREFIXES):
            item.add_marker(skip)
