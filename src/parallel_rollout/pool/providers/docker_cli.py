"""Talking to dockerd: the docker CLI, labelled containers, the container's init, the image's
agent command. What the docker provider and its spare containers share; no policy here.

Containers carry labels ``parallel-rollout.run``, ``.vm``, ``.owner`` (pid and start time of
the process that made them) and ``.host``; ``containers`` lists them by label. A container's
init (docker-init) is found by its host pid when this host sees it, so that a reset can kill
it directly and wait for the pid namespace to empty (see docker.py).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

import psutil

from ...errors import ConfigError, ProviderUnavailable, VMError
from . import host_dirs, images, sandbox_fs
from .common import same_process, signal_name, start_ticks, write_new_file
from .halted import halted_tree

LABEL = "parallel-rollout"
GUEST_HOME = "/home/user"
GUEST_SOCK_DIR = "/run/guest"
SOCKET_NAME = "agent.sock"
#: ordinary docker calls (inspect, create, start, rm); a daemon slower than this is sick
DOCKER_TIMEOUT_S = 60.0
#: how long a SIGKILLed container init may take to disappear before we ask dockerd instead
KILL_WAIT_S = 5.0
#: how long death_cause waits for a container whose agent stopped answering to stop running
DEATH_WAIT_S = 2.0
#: how often a boot asks a daemon that stopped answering whether it is back
DAEMON_POLL_S = 0.5
#: what the docker CLI says when no daemon answers at its socket
_NO_DAEMON = "Cannot connect to the Docker daemon"
START_HINT = "dockerd --bridge=none --iptables=false (as root; or: scripts/dockerd.sh start)"
_DEATHSIG = images.DEATHSIG


def docker(*args: str, timeout: float = DOCKER_TIMEOUT_S, check: bool = True) -> subprocess.CompletedProcess:
    """Run one docker CLI command; VMError on failure or when it outlives ``timeout``.

    The CLI runs under ``setpriv --pdeathsig KILL``: when the process that owns the VMs is
    killed, a ``docker run`` it had under way dies too instead of making a container after
    the sweep that follows the crash has already looked (the thread that forks it waits
    for it, so the signal fires only when the whole process is gone)."""
    argv = [*_DEATHSIG, "docker", *args]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise ProviderUnavailable("the docker CLI is not installed; install it with: "
                                  "apt-get install docker.io") from None
    except subprocess.TimeoutExpired:
        raise VMError(f"docker {args[0]} did not finish within {timeout:.0f}s") from None
    if check and done.returncode != 0:
        message = done.stderr.strip() or done.stdout.strip()
        if _NO_DAEMON in message or "Is the docker daemon running" in message:
            raise ProviderUnavailable(f"no Docker daemon answers at {daemon_address()}; start "
                                      f"one with: {START_HINT}")
        raise VMError(f"docker {' '.join(args[:2])} failed: {message[-800:]}")
    return done


def daemon_limits() -> dict[str, bool]:
    """Which limits this daemon enforces (``docker info``): ``pids`` (--pids-limit) and
    ``memory`` (--memory). A daemon without the kernel's cgroup support only warns and runs
    the container without the limit."""
    fields = docker("info", "--format", "{{.PidsLimit}} {{.MemoryLimit}}").stdout.split()
    return {"pids": fields[:1] == ["true"], "memory": fields[1:2] == ["true"]}


def containers(*label_filters: str) -> list[dict]:
    """Containers (any state) whose labels match every filter; name, state, run, vm, owner,
    host, pool."""
    keys = ("name", "state", "run", "vm", "owner", "host", "pool")
    fields = ["{{.Names}}", "{{.State}}", *[f'{{{{.Label "{LABEL}.{key}"}}}}' for key in keys[2:]]]
    argv = ["ps", "-a", "--no-trunc", "--format", "\t".join(fields)]
    for label in label_filters:
        argv += ["--filter", f"label={label}"]
    found = []
    for line in docker(*argv).stdout.splitlines():
        parts = line.split("\t")
        if len(parts) == len(keys):
            found.append(dict(zip(keys, parts)))
    return found


def remove_containers(names: list[str], *, strict: bool) -> None:
    """``docker rm -f -v``; a container that is already gone is fine."""
    if not names:
        return
    done = docker("rm", "-f", "-v", *names, check=False)
    if done.returncode != 0:
        problems = [line for line in done.stderr.splitlines()
                    if line.strip() and "No such container" not in line]
        if problems and strict:
            raise VMError(f"docker rm failed: {' '.join(problems)[-800:]}")


def remove_old_guest_images(keep: str, kind: str, log: Callable[[str], None]) -> None:
    """Remove guest images of this kind (guest, desktop) made from earlier agents or recipes
    (~100 MB each, ~1.9 GB with a desktop), and the one a ``--force`` build untagged; one
    that a container still uses stays (``docker rmi`` without ``-f`` refuses). Only builds
    of ours: tags in ``keep``'s repository, and untagged images ``docker import`` made. An
    image committed from a guest container (a ``--snapshot-name`` snapshot) carries the
    guest's label too, and is the user's: it stays, under any name."""
    keep_id = docker("image", "inspect", "--format", "{{.Id}}", keep).stdout.strip()
    repo = keep.rpartition(":")[0]
    listing = docker("images", "--no-trunc", "--filter", f"label={LABEL}.image={kind}",
                     "--format", "{{.ID}} {{.Repository}}:{{.Tag}}", check=False).stdout
    found = [line.split() for line in listing.splitlines() if line and not line.startswith(keep_id)]
    untagged = sorted({image_id for image_id, ref in found if ref == "<none>:<none>"})
    comments = docker("image", "inspect", "--format", "{{.Id}} {{.Comment}}", *untagged,
                      check=False).stdout if untagged else ""
    imported = {words[0] for words in map(str.split, comments.splitlines()) if words[1:2] == ["Imported"]}
    old = sorted({ref for _, ref in found if ref.rpartition(":")[0] == repo}
                 | {image_id for image_id in untagged if image_id in imported})
    if old and docker("rmi", *old, check=False).returncode == 0:
        log(f"[image] removed older guest images: {' '.join(old)}")


def image_exists(ref: str) -> bool:
    """Whether the daemon has the image ``ref``."""
    return docker("image", "inspect", "--format", "{{.Id}}", ref, check=False).returncode == 0


def container_state(name: str) -> str:
    """The container's status (``running``, ``exited``, …), or ``missing``."""
    done = docker("container", "inspect", "--format", "{{.State.Status}}", name, check=False)
    return done.stdout.strip() if done.returncode == 0 else "missing"


def container_death_cause(name: str, memory_limited: bool, task_uid: int | None = None) -> str | None:
    """Why a container died or stopped answering, when the task in it cannot have done it
    (``Provider.death_cause``): removed, paused, a process of it that is not the task's
    (``task_uid``'s: docker-init, the agent) stopped or traced from outside (``halted``), or
    its init (or agent) killed by a signal with no OOM of its own memory limit. The task runs
    as another user than the agent and docker-init, so it can signal neither. An OOM kill is
    the task's when the container has a memory limit (it used it up), the host's otherwise.
    A container that still runs is waited for (DEATH_WAIT_S): dockerd learns of a killed
    init a moment after its agent's socket closed."""
    deadline = time.monotonic() + DEATH_WAIT_S
    while True:
        done = docker("container", "inspect", "--format", '{"state": {{json .State}}, "id": {{json .Id}}}', name,
                      check=False)
        if done.returncode != 0:
            if _NO_DAEMON in done.stderr:  # a restart stops every container: none was removed
                return f"the Docker daemon stopped answering at {daemon_address()} (restarted or ended)"
            return f"its container {name} is gone (removed from outside)"
        try:
            found = json.loads(done.stdout)
            state, container_id = found["state"], found["id"]
        except (ValueError, KeyError, TypeError):
            return None
        if state.get("Paused"):
            return f"its container {name} was paused from outside"
        if not state.get("Running"):
            break
        init = local_pid(state.get("Pid"), container_id)
        halted = halted_tree(init, host_uid(init, task_uid)) if init and task_uid is not None else None
        if halted:
            return f"{halted} (container {name})"
        if time.monotonic() > deadline:
            return None  # alive: its agent stopped answering, as far as anyone can tell
        time.sleep(0.05)
    if state.get("OOMKilled"):
        return None if memory_limited else "the host's OOM killer killed it"
    code = state.get("ExitCode") or 0
    if code > 128:
        return f"its container {name} was stopped by {signal_name(code - 128)} from outside (exit code {code})"
    return None


def local_pid(pid, container_id: str) -> int | None:
    """``pid`` (a container's init as dockerd reports it) when it is that container's process
    on this host (its cgroup path names the container), else None: a daemon on another
    machine, or in another PID namespace, reports pids this host's /proc does not hold."""
    if not isinstance(pid, int) or pid <= 0 or not container_id:
        return None
    try:
        with open(f"/proc/{pid}/cgroup") as cgroup:
            return pid if container_id in cgroup.read() else None
    except OSError:
        return None


def host_uid(pid: int, uid: int) -> int:
    """``uid`` inside the user namespace of process ``pid`` as this host sees it (a daemon
    with ``userns-remap`` maps a container's uids to a range of the host's; none: itself)."""
    try:
        with open(f"/proc/{pid}/uid_map") as uid_map:
            for line in uid_map:
                inside, outside, count = (int(word) for word in line.split())
                if inside <= uid < inside + count:
                    return outside + uid - inside
    except (OSError, ValueError):
        pass
    return uid


def check_image(image: str, snapshot_named: bool, desktop: bool) -> None:
    """ConfigError when a snapshot image the user named is missing (or is a container),
    ProviderUnavailable (how to build it, naming the older builds there are) when the guest
    image is not built."""
    if image_exists(image):
        return
    if snapshot_named:
        if container_state(image) != "missing":
            raise ConfigError(
                f"--snapshot-name {image!r} is a docker container, not an image; commit it "
                f"first: docker commit {image} my-snapshot, then --snapshot-name my-snapshot")
        raise ConfigError(f"--snapshot-name {image!r}: no such docker image "
                          "(docker image ls lists the images there are)")
    listing = docker("images", "--format", "{{.Repository}}:{{.Tag}}", image.rpartition(":")[0], check=False)
    older = [ref for ref in listing.stdout.split() if not ref.endswith(":latest")]
    stale = f" ({', '.join(older)}, built from another guest agent or recipe, is there)" if older else ""
    raise ProviderUnavailable(f"the docker guest image {image} is not built{stale}; build it with: "
                              f"{images.build_command('docker', desktop)}")


def write_user_files(image: str, folder: Path, uid: int, labels: list[str]) -> None:
    """``folder``/passwd and ``folder``/group: the image's, with ``user`` as ``uid``
    (``images.with_guest_user``), for a VM's containers to bind over the image's. ``labels``
    go on the container that reads them (the VM's: a sweep finds it if we die meanwhile)."""
    for kind, text in image_user_files(image, labels).items():
        write_new_file(folder / kind, images.with_guest_user(kind, text, uid))
        (folder / kind).chmod(0o644)


def image_user_files(image: str, labels: list[str]) -> dict[str, str]:
    """The text of ``image``'s /etc/passwd and /etc/group (empty where it has none), read
    from a container that is created with ``labels`` (a sweep's), never started, and
    removed; cached per image id, so a process reads an image once."""
    image_id = docker("image", "inspect", "--format", "{{.Id}}", image).stdout.strip()
    with _user_files_lock:
        if image_id in _user_files:
            return _user_files[image_id]
        name = f"pr-users-{secrets.token_hex(4)}"
        argv = ["create", "--name", name, "--network", "none"]
        for label in labels:
            argv += ["--label", label]
        docker(*argv, image_id, "true")
        found = {}
        try:
            with tempfile.TemporaryDirectory(prefix="pr-docker-users-") as work:
                for kind in ("passwd", "group"):
                    copied = docker("cp", "-L", f"{name}:/etc/{kind}", f"{work}/{kind}", check=False)
                    found[kind] = (Path(work, kind).read_text(encoding="utf-8", errors="replace")
                                   if copied.returncode == 0 else "")
        finally:
            remove_containers([name], strict=False)
        _user_files[image_id] = found
        return found


_user_files_lock = threading.Lock()
#: image id -> {"passwd": text, "group": text}
_user_files: dict[str, dict[str, str]] = {}


def logs(name: str) -> str:
    """The tail of the container's output (the last 1500 characters), for error messages."""
    done = docker("logs", "--tail", "20", name, check=False, timeout=10)
    text = (done.stdout + done.stderr).strip()
    return text[-1500:] or "(empty)"


def daemon_address() -> str:
    """Where the Docker CLI looks for the daemon (``DOCKER_HOST`` or the default socket)."""
    return os.environ.get("DOCKER_HOST") or host_dirs.DEFAULT_DOCKER_HOST


def wait_for_daemon(deadline: float) -> bool:
    """Whether the daemon answers again before ``deadline``, asked every DAEMON_POLL_S: a
    daemon restarting (``systemctl restart docker``) is gone for seconds, not for good."""
    while time.monotonic() < deadline:
        time.sleep(min(DAEMON_POLL_S, max(0.0, deadline - time.monotonic())))
        try:
            docker("version", "--format", "{{.Server.Version}}",
                   timeout=max(1.0, min(DOCKER_TIMEOUT_S, deadline - time.monotonic())))
            return True
        except (ProviderUnavailable, VMError):
            continue
    return False


def agent_argv(screen: str | None = None) -> list[str]:
    """The guest agent's command line in a container; ``screen`` adds a desktop of that size."""
    # -S: site.py costs ~5 ms per start; -I: the image's environment cannot redirect imports
    argv = ["python3", "-I", "-S", images.GUEST_AGENT_PATH,
            "--unix", f"{GUEST_SOCK_DIR}/{SOCKET_NAME}"]
    return argv + ["--desktop", screen] if screen else argv


def image_kind(desktop: bool) -> str:
    """The image label value of a guest or desktop image."""
    return "desktop" if desktop else "guest"


def import_changes(desktop: bool = False) -> list[str]:
    """Dockerfile instructions the imported image gets (what a standalone `docker run` uses:
    the desktop image starts a 1920x1080 desktop)."""
    changes = [
        f"CMD {json.dumps(agent_argv('1920x1080' if desktop else None))}",
        f"ENV HOME={GUEST_HOME}", f"ENV PATH={images.guest_path(desktop)}", "ENV LANG=C.UTF-8",
        f"WORKDIR {GUEST_HOME}",
        f"LABEL {LABEL}.image={image_kind(desktop)}",
    ]
    return changes + [f"ENV PYTHONPATH={images.GUEST_SHIM_DIR}"] if desktop else changes


def local_init(name: str) -> dict:
    """The host pid and start time of the container's init (docker-init), and its start in
    clock ticks (``DockerProvider.still_runs``), when this host sees it (a local daemon, in
    our pid namespace); {} otherwise. Such a container's devpts
    gets a process sandbox's cap (``sandbox_fs.cap_ptys``): the machine's pseudo-terminals are
    one pool, and one container took them all."""
    done = docker("inspect", "--format", "{{.State.Pid}}", name, check=False)
    try:
        proc = psutil.Process(int(done.stdout.strip()))
        if "init" not in proc.name():
            return {}
        found = {"init_pid": proc.pid, "init_create_time": proc.create_time(),
                 "init_ticks": start_ticks(proc.pid)}
    except (ValueError, psutil.Error):
        return {}
    sandbox_fs.cap_ptys(proc.pid, own_userns=False)
    return found


def kill_init(private: dict) -> bool:
    """SIGKILL the container's init and wait until it is gone; True when it is. The kernel
    lets a pid namespace's init finish exiting only after every other process of the
    namespace has, so then nothing of the container runs any more. False (the caller falls
    back to ``docker rm -f``) when we cannot: no recorded pid, not allowed, or too slow."""
    pid, created = private.get("init_pid"), private.get("init_create_time")
    if not pid or not same_process(pid, created):
        return False
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    deadline = time.monotonic() + KILL_WAIT_S
    delay = 0.0005
    while same_process(pid, created):
        if time.monotonic() > deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.02)
    return True


def check_leftovers_free(run_id: str, vm_id: str, leftovers: list[dict], meta: dict | None,
                         owner: str, host: str) -> None:
    """VMError unless a boot of ``vm_id`` by the pool ``owner`` may remove the VM's
    ``leftovers`` (its containers, from ``containers``) and its folder (whose meta.json is
    ``meta``): not while one of them runs, nor while they or the folder belong to another
    live pool on this host (maybe between two containers of that VM: it keeps them, and its
    folder). A guard: ``leftovers`` are this pool's, by its ``.pool`` label."""
    owners = [c["owner"] for c in leftovers if c["host"] == host] + [(meta or {}).get("owner", owner)]
    others = {o for o in owners if o != owner and owner_alive(o)}
    if others:
        pids = ", ".join(sorted(o.partition(":")[0] for o in others))
        raise VMError(f"VM {vm_id} of run {run_id} belongs to another live run of that id "
                      f"(pool pid {pids}); its containers and folder are left alone")
    for leftover in leftovers:
        if leftover["state"] == "running":
            raise VMError(f"VM {vm_id} of run {run_id} is already running "
                          f"(container {leftover['name']})")


def owner_alive(owner: str) -> bool:
    """Whether the ``pid:create_time`` of a container label names a running process."""
    pid, _, created = (owner or "").partition(":")
    try:
        return same_process(int(pid), float(created))
    except ValueError:
        return False
