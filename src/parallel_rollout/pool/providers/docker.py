"""DockerProvider: every VM is a Docker container running the guest agent; reset = recreate.

::

    owning process ──docker CLI (subprocess, every call bounded)──► dockerd
                                                                      │ --network none --init
                                                                      ▼
    <base>/<run_id>/<vm_id>/<cid>/  ◄──bind mount /run/guest──  container pr-<run>-<vm>-<cid>
        agent.sock  the agent's unix socket: info.address            └─ docker-init (tini)
    <base>/<run_id>/<vm_id>/meta.json                                   └─ python3 server.py
        run id, vm id, owner: what sweep() reads for folders                 └─ commands

    base: $PARALLEL_ROLLOUT_DOCKER_DIR or /tmp/parallel-rollout/docker

**Image.** ``build_image`` makes ``parallel-rollout-guest:<key>`` from Debian's packages
alone (no registry is reachable where this runs): a debootstrapped bookworm tree
(:mod:`.images`, cached), the guest agent added to the tarball, then ``docker import`` with
CMD/ENV/WORKDIR/LABEL set through ``--change``. ``<key>`` hashes the agent and the recipe, so
a changed agent gets a new image and an unchanged one is never rebuilt (unless ``force``).
``--snapshot-name`` names another image instead, e.g. one made by ``docker commit`` from a
container prepared by hand; it needs ``python3``. The host's own guest package (``guest/``:
the agent, its desktop routes, the pyautogui shim) is bind-mounted read-only over the
image's copy, so the agent always matches the host's client.

**Desktop.** Desktop modes (osworld; ``options.desktop``) boot ``parallel-rollout-desktop:<key>``
(``image build --provider docker --desktop``): the same recipe plus
``images.DESKTOP_PACKAGES`` (Xvfb, openbox, xterm, mousepad, pcmanfm, xdotool, wmctrl,
ffmpeg, D-Bus and AT-SPI) and ``images.DESKTOP_APT_PACKAGES`` (LibreOffice Writer and Calc).
The agent starts with ``--desktop WxH``, so the desktop is up before the container counts as
booted and is part of the snapshot: the spare a reset hands out has a fresh one.

**Isolation.** ``--network none`` (only ``lo``), a fresh writable layer and a tmpfs ``/tmp``
per container, ``--init`` so orphans are reaped, ``--memory``/``--memory-swap`` from
``memory_mb`` (the container's total, unlike the process provider's per-process limit) and
``--pids-limit`` from ``max_processes`` (4096 when unset), a sized ``/tmp``, no privileged
flags, every capability dropped but the few the agent needs to run commands as another user
(``AGENT_CAPS``), ``no-new-privileges``. The agent is the container's root; every command
runs as uid 64000 through ``setpriv`` with no capabilities (``--run-as``, see
``guest/server.py``), so the graded code can neither signal the agent nor reach its socket.
A desktop container runs its commands as the agent's user (its session bus admits one uid).

**Reset = recreate, with a spare.** A container cannot be rolled back in place, but a new
one from the same image is the snapshot. What costs is ``docker start`` (namespaces, mounts,
cgroups: ~300 ms here) and the agent's start-up, while ``docker create`` is ~30 ms: so after
every start and reset a background thread boots the VM's *next* container, the spare, until
its agent answers. A reset then (1) SIGKILLs the old container's init from the host (its
pid and start time were recorded at boot) and waits until it is gone: the kernel lets a pid
namespace's init finish exiting only after every other process in it has, so nothing of the
old container runs any more; (2) hands out the spare after one /health; (3) leaves
``docker rm -f`` of the old container to a background thread, which ``stop`` waits for.
Where the init cannot be signalled (a remote daemon, another pid namespace, no permission)
the reset waits for ``docker rm -f`` instead. Measured (benchmarks/providers.py, 2 cores):
~15 ms p50 when the VM was in use for a second, the spare's boot (~0.4 s) when resets come
back to back. Files written after the snapshot go with the old writable layer and ``/tmp``
tmpfs. The price is one idle container (an agent, ~10 MB, plus its containerd-shim) per VM.
Each container has its own socket folder, hence its own address: an old client can never
reach the new VM.

**Readiness.** The agent listens on a unix socket in the mounted folder; we poll it
(connect + ``GET /health``, a few ms apart) until the agent answers with this VM's id, and
give up at ``boot_timeout_s`` with the container's state and log.

**Sweep.** Containers carry labels: ``parallel-rollout.run``, ``.vm``, ``.owner`` (pid and
start time of the process that made them) and ``.host``. ``sweep(run_id)`` removes every
container of that run and its folders; ``sweep()`` those whose owner process is gone on
this host. Spares are containers like any other: a killed run leaves no trace ``sweep``
cannot find. Every docker CLI call runs under ``setpriv --pdeathsig KILL``, so a ``docker
run`` under way dies with a killed owner instead of making a container after the sweep;
and a sweep that removed something lists once more, for a creation the daemon had already
accepted.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Callable

import psutil

from ...errors import ConfigError, ProviderUnavailable, VMError
from . import images
from .base import Provider, ProviderOptions, VMInfo

DEFAULT_BASE_DIR = "/tmp/parallel-rollout/docker"
#: the unprivileged user commands run as (the agent stays the container's root, with
#: AGENT_CAPS only), the size of /tmp, and the process cap when max_processes is not set
SANDBOX_UID = 64000
AGENT_CAPS = ("SETUID", "SETGID", "SETPCAP", "KILL", "CHOWN", "FOWNER", "DAC_OVERRIDE")
TMP_SIZE_MB = 512
DEFAULT_PIDS_LIMIT = 4096
BASE_DIR_ENV = "PARALLEL_ROLLOUT_DOCKER_DIR"
IMAGE_REPO = "parallel-rollout-guest"
#: the image of desktop modes: images.guest_recipe(desktop=True)
DESKTOP_IMAGE_REPO = "parallel-rollout-desktop"
LABEL = "parallel-rollout"
GUEST_HOME = "/home/user"
GUEST_SOCK_DIR = "/run/guest"
SOCKET_NAME = "agent.sock"
GUEST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: bump when the image recipe below changes in a way the key does not capture
IMAGE_RECIPE_VERSION = 3
#: sun_path holds 108 bytes; keep a margin
MAX_SOCKET_PATH = 100
#: ordinary docker calls (inspect, create, start, rm); a daemon slower than this is sick
DOCKER_TIMEOUT_S = 60.0
#: how long a SIGKILLed container init may take to disappear before we ask dockerd instead
KILL_WAIT_S = 5.0
#: `docker import` of a ~100 MB tarball (~1.9 GB with the desktop)
IMPORT_TIMEOUT_S = 900.0
START_HINT = "dockerd --bridge=none --iptables=false (as root; or: scripts/dockerd.sh start)"
_DEATHSIG = [shutil.which("setpriv"), "--pdeathsig", "KILL"] if shutil.which("setpriv") else []
#: a sweep lists again after this long, for containers whose creation was under way
SWEEP_SETTLE_S = 0.5
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def base_dir_default() -> Path:
    """Where socket folders live unless told otherwise: $PARALLEL_ROLLOUT_DOCKER_DIR or /tmp/..."""
    return Path(os.environ.get(BASE_DIR_ENV) or DEFAULT_BASE_DIR)


def image_tag(desktop: bool = False) -> str:
    """The guest image this version of the agent and recipe builds:
    ``parallel-rollout-guest:<key>``, or ``parallel-rollout-desktop:<key>`` with a desktop."""
    key = images.recipe_key("docker-guest", IMAGE_RECIPE_VERSION, images.guest_recipe(desktop),
                            _import_changes(desktop), images.guest_digest())
    return f"{DESKTOP_IMAGE_REPO if desktop else IMAGE_REPO}:{key}"


class DockerProvider(Provider):
    """VMs as containers of one image; a reset starts a fresh container made ahead of time."""

    name = "docker"

    def __init__(self, run_id: str, options: ProviderOptions | None = None,
                 base_dir: str | os.PathLike | None = None) -> None:
        super().__init__(run_id, options)
        _check_name("run id", run_id)
        if self.options.path_to_vm:
            raise ConfigError("the docker provider boots an image, not a VM file: path_to_vm "
                              "cannot be honoured (name an image with snapshot_name)")
        for limit in ("memory_mb", "max_processes"):
            value = getattr(self.options, limit)
            if value is not None and value <= 0:
                raise ConfigError(f"{limit} must be positive, got {value}")
        if self.options.memory_mb is not None and self.options.memory_mb < 6:
            raise ConfigError(f"docker needs memory_mb >= 6, got {self.options.memory_mb}")
        self.base_dir = Path(base_dir) if base_dir else base_dir_default()
        self.run_dir = self.base_dir / run_id
        self.desktop = self.options.desktop
        self.image = self.options.snapshot_name or image_tag(self.desktop)
        self._check_image()
        me = psutil.Process()
        self._owner = f"{me.pid}:{me.create_time():.3f}"
        self._lock = threading.Lock()
        #: vm id -> the spare container being created for its next reset
        self._spares: dict[str, Future] = {}
        #: vm id -> removals of its old containers still under way (stop waits for them)
        self._removals: dict[str, list[_Background]] = {}
        #: vm ids stopped by this instance: no spare may be made for them any more
        self._stopped: set[str] = set()

    def __repr__(self) -> str:
        return (f"DockerProvider(run_id={self.run_id!r}, image={self.image!r}, "
                f"base_dir={str(self.base_dir)!r})")

    @classmethod
    def supported_limits(cls) -> frozenset[str]:
        """memory_mb (--memory) and max_processes (--pids-limit), both enforced by dockerd."""
        return frozenset({"memory_mb", "max_processes"})

    # ------------------------------------------------------------------- contract

    @classmethod
    def check_available(cls) -> None:
        """ProviderUnavailable unless the docker CLI exists and a daemon answers it."""
        if shutil.which("docker") is None:
            raise ProviderUnavailable("the docker CLI is not installed; install it (with the "
                                      "daemon) with: apt-get install docker.io")
        try:
            probe = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"],
                                   capture_output=True, text=True, timeout=15)
            answered = probe.returncode == 0 and probe.stdout.strip()
            detail = probe.stderr.strip().splitlines()[-1:] if not answered else []
        except subprocess.TimeoutExpired:
            answered, detail = False, ["no answer within 15s"]
        if not answered:
            raise ProviderUnavailable(
                f"no Docker daemon answers at {_daemon_address()}; start one with: {START_HINT}"
                + (f" (docker said: {detail[0]})" if detail else ""))

    @classmethod
    def build_image(cls, *, force: bool = False, desktop: bool = False,
                    log: Callable[[str], None] = print) -> str:
        """Build (or find) ``parallel-rollout-guest:<key>`` (``-desktop`` with ``desktop``);
        return its tag."""
        cls.check_available()
        tag = image_tag(desktop)
        if not force and _image_exists(tag):
            log(f"[image] {tag} exists; nothing to build (--force rebuilds it)")
            return tag
        started = time.monotonic()
        rootfs = images.rootfs_tarball(**images.guest_recipe(desktop), force=force, log=log)
        extra = {name: (data, 0o644) for name, data in images.guest_files().items()}
        extra.update({GUEST_HOME: (None, 0o755), GUEST_SOCK_DIR: (None, 0o755)})
        with tempfile.TemporaryDirectory(prefix="pr-docker-image-",
                                         dir=images.cache_dir()) as work:
            tarball = images.copy_with_extra_files(rootfs, Path(work) / "guest.tar", extra)
            log(f"[image] docker import {tarball.name} as {tag}")
            argv = ["import"]
            for change in _import_changes(desktop):
                argv += ["--change", change]
            _docker(*argv, str(tarball), tag, timeout=IMPORT_TIMEOUT_S)
        _docker("tag", tag, f"{tag.partition(':')[0]}:latest")
        _remove_old_guest_images(keep=tag, kind=_image_kind(desktop), log=log)
        size = _docker("image", "inspect", "--format", "{{.Size}}", tag).stdout.strip()
        log(f"[image] built {tag} in {time.monotonic() - started:.0f}s "
            f"({int(size) / 1e6:.0f} MB)" if size.isdigit() else f"[image] built {tag}")
        return tag

    def start(self, vm_id: str) -> VMInfo:
        """Run a new container for ``vm_id``, wait for its agent, start the spare."""
        _check_name("vm id", vm_id)
        deadline = time.monotonic() + self.options.boot_timeout_s
        vm_dir = self.run_dir / vm_id
        leftovers = _containers(f"{LABEL}.run={self.run_id}", f"{LABEL}.vm={vm_id}")
        for leftover in leftovers:
            if leftover["state"] == "running":
                raise VMError(f"VM {vm_id} of run {self.run_id} is already running "
                              f"(container {leftover['name']})")
        # containers and the folder of an earlier life of this id
        self._remove(leftovers)
        shutil.rmtree(vm_dir, ignore_errors=True)
        with self._lock:
            self._stopped.discard(vm_id)
        _make_dirs(vm_dir)
        self._write_meta(vm_id, vm_dir)
        info = self._boot(vm_id, deadline)
        self._make_spare(vm_id)
        return info

    def reset(self, info: VMInfo) -> VMInfo:
        """Remove the container and hand out the spare (started ahead) in its place."""
        vm_id = info.vm_id
        vm_dir = Path(info.private["vm_dir"])
        if not vm_dir.is_dir():
            raise VMError(f"VM {vm_id}: its folder {vm_dir} is gone; it was stopped or swept")
        deadline = time.monotonic() + self.options.boot_timeout_s
        if _kill_init(info.private):
            # Every process of the old container is gone; dockerd may tidy up at leisure.
            self._remove_later(vm_id, info.private)
            new_info = self._take_spare(vm_id, deadline) or self._boot(vm_id, deadline)
        else:
            # The old container goes while we take (or, without a spare, boot) the new one;
            # its processes must be gone before the VM is leased again, so we wait for it.
            remover = _Background(self._remove, [info.private])
            try:
                new_info = self._take_spare(vm_id, deadline) or self._boot(vm_id, deadline)
            finally:
                remover.result()
        self._make_spare(vm_id)
        return new_info

    def healthy(self, info: VMInfo) -> bool:
        """Whether the container's agent answers /health as this VM (a killed container's
        socket refuses connections, a paused one times out)."""
        from ...guest.client import GuestClient

        try:
            return GuestClient(info.address, timeout_s=2.0).health().get("vm") == info.vm_id
        except Exception:  # unreachable, malformed: either way not healthy
            return False

    def stop(self, info: VMInfo) -> None:
        """Remove the VM's container, its spare and its folder; a second call does nothing."""
        with self._lock:
            self._stopped.add(info.vm_id)
        spare = self._take_spare(info.vm_id, time.monotonic() + self.options.boot_timeout_s,
                                 check=False)
        with self._lock:
            pending = self._removals.pop(info.vm_id, [])
        try:
            for removal in pending:
                try:
                    removal.result()
                except VMError:
                    pass  # sweep_vm below tries again
            self._remove([c.private for c in (info, spare) if c])
            # anything of this VM the bookkeeping above missed (another instance's spare)
            self.sweep_vm(info.vm_id)
        finally:
            shutil.rmtree(info.private["vm_dir"], ignore_errors=True)
            _remove_if_empty(self.run_dir)

    def sweep_vm(self, vm_id: str) -> None:
        """Remove every container and the folder of one VM of this run."""
        found = _containers(f"{LABEL}.run={self.run_id}", f"{LABEL}.vm={vm_id}")
        if found:
            self._remove(found)
        shutil.rmtree(self.run_dir / vm_id, ignore_errors=True)

    @classmethod
    def sweep(cls, run_id: str | None = None,
              base_dir: str | os.PathLike | None = None) -> list[str]:
        """Remove the containers and folders of ``run_id`` (any state), or, without a run id,
        those whose owning process is gone; return the removed VM ids."""
        base = Path(base_dir) if base_dir else base_dir_default()
        if run_id is not None:
            _check_name("run id", run_id)
        removed: set[str] = set()
        host = socket.gethostname()
        # A container whose creation was under way when its run died may appear just after
        # a listing; after removing some, list again until one finds nothing more.
        for _ in range(4):
            doomed = []
            for container in _containers(f"{LABEL}.run={run_id}" if run_id else f"{LABEL}.run"):
                if run_id is None and (container["host"] != host
                                       or _owner_alive(container["owner"])):
                    continue  # a live run's, or another machine's: not ours to sweep
                doomed.append(container)
                removed.add(container["vm"])
            if not doomed:
                break
            _remove_containers([c["name"] for c in doomed], strict=False)
            time.sleep(SWEEP_SETTLE_S)
        run_dirs = [base / run_id] if run_id else (
            sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else [])
        for run_dir in run_dirs:
            if not run_dir.is_dir():
                continue
            for vm_dir in sorted(p for p in run_dir.iterdir() if p.is_dir()):
                meta = _read_meta(vm_dir) or {}
                if run_id is None and _owner_alive(meta.get("owner", "")):
                    continue
                shutil.rmtree(vm_dir, ignore_errors=True)
                removed.add(vm_dir.name)
            _remove_if_empty(run_dir)
        return sorted(removed)

    # ------------------------------------------------------------------- internals

    def _run_container(self, vm_id: str, deadline: float) -> dict:
        """``docker run -d`` a container of this VM; its private record (name, folders)."""
        cid = secrets.token_hex(3)
        vm_dir = self.run_dir / vm_id
        sock_dir = vm_dir / cid
        socket_path = sock_dir / SOCKET_NAME
        if len(str(socket_path)) > MAX_SOCKET_PATH:
            raise ConfigError(
                f"socket path {socket_path} is longer than {MAX_SOCKET_PATH} characters; "
                f"set {BASE_DIR_ENV} to a shorter folder or use shorter run/vm ids")
        _make_dirs(sock_dir)
        name = f"pr-{self.run_id}-{vm_id}-{cid}"
        private = {"name": name, "sock_dir": str(sock_dir), "vm_dir": str(vm_dir)}
        argv = [
            "run", "-d",
            "--name", name, "--hostname", vm_id[:63],
            "--label", f"{LABEL}.run={self.run_id}", "--label", f"{LABEL}.vm={vm_id}",
            "--label", f"{LABEL}.owner={self._owner}",
            "--label", f"{LABEL}.host={socket.gethostname()}",
            "--network", "none", "--init",
            "--tmpfs", f"/tmp:mode=1777,size={TMP_SIZE_MB}m",
            # the agent keeps what running commands as another user takes; they get nothing
            "--cap-drop", "ALL", *[a for cap in AGENT_CAPS for a in ("--cap-add", cap)],
            "--security-opt", "no-new-privileges",
            "--log-opt", "max-size=1m",
            "-v", f"{sock_dir}:{GUEST_SOCK_DIR}",
            "-v", f"{images.GUEST_SOURCE_DIR}:{images.GUEST_DIR}:ro",
            "-w", GUEST_HOME,
            "-e", f"HOME={GUEST_HOME}", "-e", f"PATH={GUEST_PATH}", "-e", "LANG=C.UTF-8",
            "-e", "USER=root", "-e", f"PARALLEL_ROLLOUT_VM={vm_id}",
        ]
        if self.desktop:
            # shim/bin: wrappers of apps that refuse to run as root (vlc)
            argv += ["-e", f"PYTHONPATH={images.GUEST_SHIM_DIR}",
                     "-e", f"PATH={images.GUEST_SHIM_DIR}/bin:{GUEST_PATH}"]
        if self.options.memory_mb is not None:
            memory = f"{self.options.memory_mb}m"
            argv += ["--memory", memory, "--memory-swap", memory]
        argv += ["--pids-limit", str(self.options.max_processes or DEFAULT_PIDS_LIMIT)]
        agent = _agent_argv(self.options.screen)
        if not self.desktop:  # the desktop's session bus admits one uid
            agent += ["--run-as", f"{SANDBOX_UID}:{SANDBOX_UID}"]
        argv += [self.image, *agent]
        try:
            _docker(*argv, timeout=max(1.0, deadline - time.monotonic()))
        except VMError:
            shutil.rmtree(sock_dir, ignore_errors=True)
            # a create that timed out may still have made the container
            self._remove([private])
            raise
        return private

    def _await_agent(self, vm_id: str, container: dict, deadline: float) -> VMInfo:
        """Poll the container's socket until its agent answers as ``vm_id``."""
        from ...guest.client import GuestClient

        address = f"unix:{Path(container['sock_dir']) / SOCKET_NAME}"
        client = GuestClient(address)
        delay, next_check = 0.002, time.monotonic() + 1.0
        last = "no answer"
        while True:
            remaining = deadline - time.monotonic()
            try:
                answer = client.request("GET", "/health",
                                        timeout=max(0.05, min(remaining, 2.0))).json()
                if answer.get("vm") == vm_id:
                    break
                last = f"the agent answered as {answer.get('vm')!r}"
            except Exception as exc:  # not listening yet, or a half-started agent
                last = str(exc)
            if time.monotonic() >= next_check:
                state = _container_state(container["name"])
                if state not in ("running", "created"):
                    raise VMError(f"VM {vm_id}: container {container['name']} is {state} "
                                  f"before its agent answered; log: {_logs(container['name'])}")
                next_check = time.monotonic() + 1.0
            if time.monotonic() + delay > deadline:
                raise VMError(f"VM {vm_id}: the agent of {container['name']} did not answer "
                              f"within {self.options.boot_timeout_s:g}s ({last}); log: "
                              f"{_logs(container['name'])}")
            time.sleep(delay)
            delay = min(delay * 1.5, 0.02)
        return VMInfo(vm_id=vm_id, provider=self.name, address=address, run_id=self.run_id,
                      private={**container, "image": self.image})

    def _boot(self, vm_id: str, deadline: float) -> VMInfo:
        """``docker run`` a container of ``vm_id`` and wait for its agent."""
        container = self._run_container(vm_id, deadline)
        try:
            info = self._await_agent(vm_id, container, deadline)
            info.private.update(_init_process(container["name"]))
            return info
        except BaseException:
            self._remove([container])
            raise

    def _remove_later(self, vm_id: str, container: dict) -> None:
        """Remove a container in the background; ``stop`` waits for it."""
        with self._lock:
            pending = [r for r in self._removals.get(vm_id, []) if not r.done()]
            pending.append(_Background(self._remove, [container]))
            self._removals[vm_id] = pending

    def _make_spare(self, vm_id: str) -> None:
        """Boot the VM's next container in the background, ready for the next reset."""
        with self._lock:
            if vm_id in self._stopped or vm_id in self._spares:
                return
            future: Future = Future()
            self._spares[vm_id] = future

        def boot() -> None:
            try:
                deadline = time.monotonic() + self.options.boot_timeout_s
                future.set_result(self._boot(vm_id, deadline))
            except BaseException as exc:  # the reset that wants it boots one itself
                future.set_exception(exc)

        threading.Thread(target=boot, name=f"docker-spare-{vm_id}", daemon=True).start()

    def _take_spare(self, vm_id: str, deadline: float, check: bool = True) -> VMInfo | None:
        """The VM's spare, once booted and (with ``check``) still answering; None when
        there is none, it failed to boot, or it died meanwhile (then it is removed)."""
        with self._lock:
            future = self._spares.pop(vm_id, None)
        if future is None:
            return None
        try:
            # its boot is bounded by its own deadline; this one bounds the caller's wait
            spare = future.result(timeout=max(0.0, deadline - time.monotonic()))
        except Exception:  # noqa: BLE001 - a failed or late spare only costs the reset a boot
            future.add_done_callback(_remove_when_booted)
            return None
        if check and not self.healthy(spare):
            self._remove([spare.private])
            return None
        return spare

    def _remove(self, containers: list[dict]) -> None:
        """``docker rm -f`` the containers and remove their socket folders."""
        try:
            _remove_containers([c["name"] for c in containers], strict=True)
        finally:
            for container in containers:
                if container.get("sock_dir"):
                    shutil.rmtree(container["sock_dir"], ignore_errors=True)

    @staticmethod
    def _remaining(deadline: float) -> float:
        return max(1.0, deadline - time.monotonic())

    def _check_image(self) -> None:
        if _image_exists(self.image):
            return
        if self.options.snapshot_name:
            if _container_state(self.image) != "missing":
                raise ConfigError(
                    f"docker snapshot {self.image!r} is a container, not an image; commit it "
                    f"first: docker commit {self.image} my-snapshot, then snapshot_name "
                    "my-snapshot")
            raise ConfigError(f"docker snapshot image {self.image!r} does not exist "
                              "(docker image ls lists the images there are)")
        raise ProviderUnavailable(
            f"the docker guest image {self.image} is not built; build it with: parallel-rollout "
            "image build --provider docker" + (" --desktop" if self.desktop else ""))

    def _write_meta(self, vm_id: str, vm_dir: Path) -> None:
        meta = {"run_id": self.run_id, "vm_id": vm_id, "created": time.time(),
                "owner": self._owner, "image": self.image}
        tmp = vm_dir / "meta.json.tmp"
        tmp.write_text(json.dumps(meta, indent=1))
        tmp.replace(vm_dir / "meta.json")  # sweep must never read half a file


# ----------------------------------------------------------------------- docker CLI


def _docker(*args: str, timeout: float = DOCKER_TIMEOUT_S, check: bool = True) -> subprocess.CompletedProcess:
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
        if "Cannot connect to the Docker daemon" in message or "Is the docker daemon running" in message:
            raise ProviderUnavailable(f"no Docker daemon answers at {_daemon_address()}; start "
                                      f"one with: {START_HINT}")
        raise VMError(f"docker {' '.join(args[:2])} failed: {message[-800:]}")
    return done


def _containers(*label_filters: str) -> list[dict]:
    """Containers (any state) whose labels match every filter; name, state, vm, owner, host."""
    fields = ["{{.Names}}", "{{.State}}", f'{{{{.Label "{LABEL}.run"}}}}',
              f'{{{{.Label "{LABEL}.vm"}}}}', f'{{{{.Label "{LABEL}.owner"}}}}',
              f'{{{{.Label "{LABEL}.host"}}}}']
    argv = ["ps", "-a", "--no-trunc", "--format", "\t".join(fields)]
    for label in label_filters:
        argv += ["--filter", f"label={label}"]
    found = []
    for line in _docker(*argv).stdout.splitlines():
        parts = line.split("\t")
        if len(parts) == 6:
            found.append(dict(zip(("name", "state", "run", "vm", "owner", "host"), parts)))
    return found


def _remove_containers(names: list[str], *, strict: bool) -> None:
    """``docker rm -f -v``; a container that is already gone is fine."""
    if not names:
        return
    done = _docker("rm", "-f", "-v", *names, check=False)
    if done.returncode != 0:
        problems = [line for line in done.stderr.splitlines()
                    if line.strip() and "No such container" not in line]
        if problems and strict:
            raise VMError(f"docker rm failed: {' '.join(problems)[-800:]}")


def _remove_old_guest_images(keep: str, kind: str, log: Callable[[str], None]) -> None:
    """Remove guest images of this kind (guest, desktop) made from earlier agents or recipes
    (~100 MB each, ~1.9 GB with a desktop), and the one a ``--force`` build untagged; one
    that a container still uses stays (``docker rmi`` without ``-f`` refuses)."""
    keep_id = _docker("image", "inspect", "--format", "{{.Id}}", keep).stdout.strip()
    listing = _docker("images", "--no-trunc", "--filter", f"label={LABEL}.image={kind}",
                      "--format", "{{.ID}} {{.Repository}}:{{.Tag}}", check=False).stdout
    old = sorted({ref if not ref.endswith("<none>") else image_id
                  for image_id, ref in (line.split() for line in listing.splitlines() if line)
                  if image_id != keep_id})
    if old and _docker("rmi", *old, check=False).returncode == 0:
        log(f"[image] removed older guest images: {' '.join(old)}")


def _image_exists(ref: str) -> bool:
    return _docker("image", "inspect", "--format", "{{.Id}}", ref, check=False).returncode == 0


def _container_state(name: str) -> str:
    done = _docker("container", "inspect", "--format", "{{.State.Status}}", name, check=False)
    return done.stdout.strip() if done.returncode == 0 else "missing"


def _logs(name: str) -> str:
    done = _docker("logs", "--tail", "20", name, check=False, timeout=10)
    text = (done.stdout + done.stderr).strip()
    return text[-1500:] or "(empty)"


def _daemon_address() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def _agent_argv(screen: str | None = None) -> list[str]:
    # -S: site.py costs ~5 ms per start; -I: the image's environment cannot redirect imports
    argv = ["python3", "-I", "-S", images.GUEST_AGENT_PATH,
            "--unix", f"{GUEST_SOCK_DIR}/{SOCKET_NAME}"]
    return argv + ["--desktop", screen] if screen else argv


def _image_kind(desktop: bool) -> str:
    return "desktop" if desktop else "guest"


def _import_changes(desktop: bool = False) -> list[str]:
    """Dockerfile instructions the imported image gets (what a standalone `docker run` uses:
    the desktop image starts a 1920x1080 desktop)."""
    changes = [
        f"CMD {json.dumps(_agent_argv('1920x1080' if desktop else None))}",
        f"ENV HOME={GUEST_HOME}", f"ENV PATH={GUEST_PATH}", "ENV LANG=C.UTF-8",
        f"WORKDIR {GUEST_HOME}",
        f"LABEL {LABEL}.image={_image_kind(desktop)}",
    ]
    return changes + [f"ENV PYTHONPATH={images.GUEST_SHIM_DIR}"] if desktop else changes


class _Background:
    """Run ``target(*args)`` in a thread now; ``result()`` joins it and re-raises."""

    def __init__(self, target, *args) -> None:
        self._future: Future = Future()

        def run() -> None:
            try:
                self._future.set_result(target(*args))
            except BaseException as exc:
                self._future.set_exception(exc)

        threading.Thread(target=run, name="docker-background", daemon=True).start()

    def result(self):
        return self._future.result(timeout=DOCKER_TIMEOUT_S + 5)

    def done(self) -> bool:
        return self._future.done()


# ------------------------------------------------------------------------- helpers


def _check_name(what: str, value: str) -> None:
    # these become container names, folder names and a hostname
    if not isinstance(value, str) or not _SAFE_NAME.match(value):
        raise ConfigError(f"{what} {value!r} must be 1-64 characters of letters, digits, "
                          "'.', '_' or '-' (starting with a letter or digit)")


def _init_process(name: str) -> dict:
    """The host pid and start time of the container's init (docker-init), when this host
    sees it (a local daemon, in our pid namespace); {} otherwise."""
    done = _docker("inspect", "--format", "{{.State.Pid}}", name, check=False)
    try:
        proc = psutil.Process(int(done.stdout.strip()))
        if "init" not in proc.name():
            return {}
        return {"init_pid": proc.pid, "init_create_time": proc.create_time()}
    except (ValueError, psutil.Error):
        return {}


def _kill_init(private: dict) -> bool:
    """SIGKILL the container's init and wait until it is gone; True when it is. The kernel
    lets a pid namespace's init finish exiting only after every other process of the
    namespace has, so then nothing of the container runs any more. False (the caller falls
    back to ``docker rm -f``) when we cannot: no recorded pid, not allowed, or too slow."""
    pid, created = private.get("init_pid"), private.get("init_create_time")
    if not pid or not _same_process(pid, created):
        return False
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    deadline = time.monotonic() + KILL_WAIT_S
    delay = 0.0005
    while _same_process(pid, created):
        if time.monotonic() > deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.02)
    return True


def _same_process(pid: int, create_time: float | None) -> bool:
    """Whether ``pid`` runs and is the process that started at ``create_time``."""
    try:
        proc = psutil.Process(pid)
        return (create_time is not None and abs(proc.create_time() - create_time) < 0.01
                and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _remove_when_booted(future: Future) -> None:
    """Remove a spare that booted after the reset waiting for it had given up on it."""
    try:
        spare = future.result()
    except BaseException:  # noqa: BLE001 - a failed boot removed its container itself
        return
    _remove_containers([spare.private["name"]], strict=False)
    shutil.rmtree(spare.private["sock_dir"], ignore_errors=True)


def _owner_alive(owner: str) -> bool:
    """Whether ``pid:create_time`` names a running process (not a reused pid)."""
    pid, _, created = (owner or "").partition(":")
    try:
        proc = psutil.Process(int(pid))
        return (abs(proc.create_time() - float(created)) < 0.01
                and proc.status() != psutil.STATUS_ZOMBIE)
    except (ValueError, psutil.Error):
        return False


def _read_meta(vm_dir: Path) -> dict | None:
    try:
        return json.loads((vm_dir / "meta.json").read_text())
    except (OSError, ValueError):
        return None


def _make_dirs(vm_dir: Path) -> None:
    """Create ``vm_dir``; a concurrent stop of the run's last VM may remove the run folder
    between the creation of the parents, so try again when that happens."""
    for _ in range(10):
        try:
            vm_dir.mkdir(parents=True, exist_ok=True)
            return
        except FileNotFoundError:
            continue
    vm_dir.mkdir(parents=True, exist_ok=True)


def _remove_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass  # not empty, or already gone
