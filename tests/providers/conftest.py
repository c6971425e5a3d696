"""What every provider's tests need: a harness per provider and a leak check per test.

A harness knows, for one provider, how to make it usable here (docker: a daemon and the guest
image; qemu: the guest image), how to kill a VM from outside, and where a VM could leave
something behind (containers, processes, overlays, sockets, folders). Run ids of this session
share one prefix, so the checks see only what these tests made.

The Docker daemon: when none answers, ``scripts/dockerd.sh start`` starts one exactly as
``dockerd --bridge=none --iptables=false`` and records its pid; the last test session that
uses it (each holds a shared flock) stops it at its end, whichever session started it.
"""

from __future__ import annotations

import fcntl
import json
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from parallel_rollout.errors import ConfigError, ProviderUnavailable
from parallel_rollout.pool.providers import get_provider
from parallel_rollout.pool.providers.base import ProviderOptions
from parallel_rollout.pool.providers.common import POOL_SEP, run_folders

ROOT = Path(__file__).resolve().parents[2]
DOCKERD_SCRIPT = ROOT / "scripts" / "dockerd.sh"
#: stand-in vmrun and VBoxManage over this machine's VMs (the ``standins`` fixture)
STANDIN = ROOT / "tests" / "hypervisor_standin.py"
DOCKERD_DIR = Path(os.environ.get("PARALLEL_ROLLOUT_DOCKERD_DIR", "/tmp/parallel-rollout-dockerd"))
#: the pid of a daemon scripts/dockerd.sh started for a test session
TESTS_DAEMON = DOCKERD_DIR / "started-by-tests"
PROVIDERS = ("process", "docker", "qemu")

# Like the process sandboxes (tests/conftest.py), this session's docker socket folders and
# qemu overlays live in folders of their own: the checks look only there, a developer's real
# runs are never touched. Short paths: sockets must fit in 108 bytes.
for _env, _prefix in (("PARALLEL_ROLLOUT_DOCKER_DIR", "prt-dk-"), ("PARALLEL_ROLLOUT_QEMU_DIR", "prt-qm-")):
    os.environ[_env] = tempfile.mkdtemp(prefix=_prefix, dir="/tmp")

#: every run id of this session starts with this
RUN_PREFIX = f"ct{os.getpid()}"
_run_numbers = itertools.count()
#: (harness, run id) made during the current test; the leak check reads and clears it
_runs_of_test: list[tuple["Harness", str]] = []


class Harness:
    """One provider as the contract tests drive it."""

    name = ""
    boot_timeout_s = 30.0

    def prepare(self) -> None:
        """Make the provider usable here, or skip with the reason."""
        try:
            self.cls = get_provider(self.name)
        except ConfigError as exc:
            pytest.skip(f"provider {self.name!r} is not available in this tree: {exc}")
        try:
            self.cls.check_available()
        except ProviderUnavailable as exc:
            pytest.skip(f"provider {self.name!r} cannot run here: {exc}")

    def new_run_id(self) -> str:
        """A run id of this session, remembered for the leak check."""
        run_id = f"{RUN_PREFIX}-{self.name[:2]}{next(_run_numbers)}"
        _runs_of_test.append((self, run_id))
        return run_id

    def provider(self, run_id: str | None = None, **options):
        """A provider instance of a fresh run (or of ``run_id``)."""
        options.setdefault("boot_timeout_s", self.boot_timeout_s)
        return self.cls(run_id or self.new_run_id(), ProviderOptions(**options))

    def kill_from_outside(self, info) -> None:
        """Kill the VM the way a crash or an operator would, behind the provider's back."""
        raise NotImplementedError

    def leftovers(self, run_id: str) -> list[str]:
        """Everything of ``run_id`` that still exists: processes, containers, files."""
        raise NotImplementedError

    @staticmethod
    def files_under(base_env: str, run_id: str) -> list[str]:
        found = []
        for run_dir in run_folders(Path(os.environ[base_env]), run_id):  # each pool's of the run
            found += [f"file {p}" for p in sorted(run_dir.rglob("*"))] or [f"folder {run_dir}"]
        return found

    @staticmethod
    def processes_mentioning(marker: str, names: tuple[str, ...]) -> list[str]:
        found = []
        for proc in psutil.process_iter(["pid", "name", "cmdline"]):
            try:
                if proc.info["name"] in names and marker in " ".join(proc.info["cmdline"] or ()) \
                        and proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(f"process {proc.pid} {proc.info['name']}")
            except psutil.Error:
                pass
        return found


class ProcessHarness(Harness):
    name = "process"
    boot_timeout_s = 20.0

    def kill_from_outside(self, info) -> None:
        for pid in (info.private["init_pid"], info.private["pid"]):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def leftovers(self, run_id: str) -> list[str]:
        base = os.environ["PARALLEL_ROLLOUT_PROCESS_DIR"]
        return (self.files_under("PARALLEL_ROLLOUT_PROCESS_DIR", run_id)
                + self.processes_mentioning(f"{base}/{run_id}{POOL_SEP}", ("bwrap",)))


class DockerHarness(Harness):
    name = "docker"
    boot_timeout_s = 60.0
    _users_lock = None

    def prepare(self) -> None:
        """A daemon (started by scripts/dockerd.sh when none answers) and the guest image."""
        if shutil.which("docker") is None:
            pytest.skip("the docker CLI is not installed (./dev installs docker.io)")
        DOCKERD_DIR.mkdir(parents=True, exist_ok=True)
        if not _docker_answers():
            if shutil.which("dockerd", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") is None:
                pytest.skip("no Docker daemon answers and dockerd is not installed "
                            "(./dev installs docker.io)")
            # The daemon is shared by every test session of the machine (the flock below): not
            # this session's, so without its marker, or the leak checks of this session would
            # take another session's containers' shims for this one's leftovers
            out = subprocess.run([str(DOCKERD_SCRIPT), "start"], capture_output=True, text=True,
                                 timeout=120, env={k: v for k, v in os.environ.items()
                                                   if not k.startswith("PR_TEST_SANDBOX_")})
            if out.returncode != 0:
                pytest.fail(f"scripts/dockerd.sh start failed: {out.stderr.strip()}")
            if out.stdout.startswith("started"):
                # whichever test session ends last stops it, not only this one: one left to a
                # session that is then torn down dies by SIGKILL (test_dockerd_script.py)
                TESTS_DAEMON.write_text(out.stdout.split()[1])
        # A shared lock while this session uses the daemon: the session that ends with no
        # other holding one stops it, if a test session started it.
        DockerHarness._users_lock = open(DOCKERD_DIR / "users.lock", "a")
        fcntl.flock(DockerHarness._users_lock, fcntl.LOCK_SH)
        super().prepare()
        started = time.monotonic()
        tag = self.cls.build_image(log=lambda line: print(line, flush=True))
        print(f"[docker] guest image {tag} ready after {time.monotonic() - started:.1f}s")

    def kill_from_outside(self, info) -> None:
        subprocess.run(["docker", "kill", info.private["name"]], capture_output=True, timeout=60,
                       check=True)

    def leftovers(self, run_id: str) -> list[str]:
        names = subprocess.run(
            ["docker", "ps", "-a", "--format", "{{.Names}} {{.State}}", "--filter",
             f"label=parallel-rollout.run={run_id}"],
            capture_output=True, text=True, timeout=60, check=True).stdout.split("\n")
        return ([f"container {n}" for n in names if n.strip()]
                + self.files_under("PARALLEL_ROLLOUT_DOCKER_DIR", run_id))

    @classmethod
    def finish(cls) -> None:
        """Stop a daemon test sessions started once no other session uses it."""
        if cls._users_lock is None:
            return
        fcntl.flock(cls._users_lock, fcntl.LOCK_UN)
        try:
            fcntl.flock(cls._users_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            print("[docker] another test session uses dockerd: leaving it to that one")
        else:
            pid = _tests_daemon()
            if pid is not None:
                subprocess.run([str(DOCKERD_SCRIPT), "stop"], capture_output=True, timeout=60)
                TESTS_DAEMON.unlink(missing_ok=True)
                try:  # this process may have adopted the daemon (a subreaper): collect it
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
        cls._users_lock.close()
        cls._users_lock = None


def _tests_daemon() -> int | None:
    """The pid of the daemon a test session started, while scripts/dockerd.sh still records it
    (a daemon a developer started with the script is not the tests' to stop)."""
    try:
        ours = int(TESTS_DAEMON.read_text())
        recorded = int((DOCKERD_DIR / "dockerd.pid").read_text())
    except (OSError, ValueError):
        return None
    return ours if ours == recorded else None


class QemuHarness(Harness):
    name = "qemu"
    boot_timeout_s = 300.0

    def prepare(self) -> None:
        """The provider's module and QEMU, then the guest image (built when missing)."""
        try:
            self.cls = get_provider(self.name)
        except ConfigError as exc:
            pytest.skip(f"the qemu provider is not in this tree yet ({exc})")
        if shutil.which("qemu-system-x86_64") is None:
            pytest.skip("qemu-system-x86_64 is not installed")
        try:
            self.cls.build_image(log=lambda line: print(line, flush=True))
            self.cls.check_available()
        except ProviderUnavailable as exc:
            pytest.skip(f"the qemu provider cannot run here: {exc}")

    def kill_from_outside(self, info) -> None:
        os.kill(info.private["pid"], signal.SIGKILL)

    def leftovers(self, run_id: str) -> list[str]:
        return (self.files_under("PARALLEL_ROLLOUT_QEMU_DIR", run_id)
                + self.processes_mentioning(f"parallel-rollout-{run_id}-",
                                            ("qemu-system-x86_64", "setpriv")))


HARNESSES = {h.name: h for h in (ProcessHarness(), DockerHarness(), QemuHarness())}


def _docker_answers() -> bool:
    try:
        return subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"],
                              capture_output=True, timeout=15).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session", params=PROVIDERS)
def harness(request) -> Harness:
    """Each provider in turn, prepared once per session (or skipped with the reason)."""
    chosen = HARNESSES[request.param]
    if chosen.name == "qemu" and not (request.config.getoption("--slow") or os.environ.get("PR_SLOW") == "1"):
        # every QEMU desktop case is slow under TCG (tests/conftest.py): the default run does
        # not build an image (~1 min, more under load) that none of its tests boots
        pytest.skip("the QEMU desktop image's build and boots are slow under TCG: run with ./dev test --slow")
    if not getattr(chosen, "_prepared", False):
        chosen.prepare()
        chosen._prepared = True
    return chosen


@pytest.fixture(scope="session")
def docker_harness() -> Harness:
    """The docker provider, prepared (daemon, image), for tests that only concern docker."""
    chosen = HARNESSES["docker"]
    if not getattr(chosen, "_prepared", False):
        chosen.prepare()
        chosen._prepared = True
    return chosen


@pytest.fixture(scope="session", params=("docker", "qemu"))
def desktop(request) -> Harness:
    """docker, then qemu, each with its desktop image (osworld mode) built once per session
    (minutes the first time: a debootstrap of the desktop's packages), or skipped saying why."""
    chosen = HARNESSES[request.param]
    if chosen.name == "qemu" and not (request.config.getoption("--slow") or os.environ.get("PR_SLOW") == "1"):
        # every QEMU desktop case is slow under TCG (tests/conftest.py): the default run does
        # not build an image (~1 min, more under load) that none of its tests boots
        pytest.skip("the QEMU desktop image's build and boots are slow under TCG: run with ./dev test --slow")
    if not getattr(chosen, "_prepared", False):
        chosen.prepare()
        chosen._prepared = True
    started = time.monotonic()
    try:
        where = chosen.cls.build_image(desktop=True, log=lambda line: print(line, flush=True))
    except ProviderUnavailable as exc:
        pytest.skip(f"no {chosen.name} desktop image here: {exc}")
    print(f"[{chosen.name}] desktop image {where} ready after {time.monotonic() - started:.1f}s")
    return chosen


@pytest.fixture
def standins(tmp_path, monkeypatch):
    """vmrun and VBoxManage on PATH, two .vmx files and two VirtualBox VMs; (vmx paths, state)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for role in ("vmrun", "VBoxManage"):
        script = bin_dir / role
        script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STANDIN}" {role} "$@"\n')
        script.chmod(0o755)
    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_DIR", str(state))
    monkeypatch.setenv("STANDIN_BACKEND", "process")
    vmx = []
    for name in ("ubuntu0", "ubuntu1"):
        path = tmp_path / "vms" / name / f"{name}.vmx"  # a folder each, as VMware makes them
        path.parent.mkdir(parents=True)
        path.write_text('displayName = "Ubuntu"\nsnapshot = "init_state"\n')
        vmx.append(str(path))
    (state / "vbox.json").write_text(json.dumps({
        "ubuntu0": {"uuid": "11111111-2222-3333-4444-555555555555", "snapshots": ["init_state"]},
        "ubuntu1": {"uuid": "66666666-7777-8888-9999-000000000000", "snapshots": ["init_state"]}}))
    yield vmx, state
    # nothing may outlive the test: every daemon was stopped through the provider
    assert not list(state.glob("*.pid")), "a stand-in VM was left running"


@pytest.fixture(scope="session", autouse=True)
def _session_end():
    """Stop the daemon if this session started it; remove this session's (empty) folders."""
    yield
    DockerHarness.finish()
    for env in ("PARALLEL_ROLLOUT_DOCKER_DIR", "PARALLEL_ROLLOUT_QEMU_DIR"):
        try:
            os.rmdir(os.environ[env])
        except OSError:
            pass  # not empty: the leak checks said what is left


@pytest.fixture(autouse=True)
def no_provider_leftovers():
    """Fail the test if any VM of its runs left a container, process, overlay, socket or
    folder behind (after a short grace); then sweep it, so later tests start clean."""
    _runs_of_test.clear()
    yield
    deadline = time.monotonic() + 15
    while True:
        left = {run_id: h.leftovers(run_id) for h, run_id in _runs_of_test}
        left = {run_id: items for run_id, items in left.items() if items}
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    for h, run_id in _runs_of_test:
        if run_id in left:
            h.cls.sweep(run_id)
    _runs_of_test.clear()
    assert not left, f"left behind: {left}"


def pytest_plugin_registered(plugin, manager):
    """Put tests/conftest.py back as the module ``conftest`` once this file is loaded.

    Folders of tests/ are not packages, so pytest imports every conftest.py as the module
    ``conftest``, each replacing the last in sys.modules; test modules collected after this
    folder (tests/test_*.py) then ``from conftest import ...`` meaning the top one."""
    if plugin is sys.modules.get(__name__) and __name__ == "conftest":
        top = manager.get_plugin(str(Path(__file__).resolve().parents[1] / "conftest.py"))
        if top is not None:
            sys.modules["conftest"] = top
