"""DockerProvider: every VM is a Docker container running the guest agent; reset = recreate.

::

    owning process ──docker CLI (subprocess, every call bounded)──► dockerd
                                                                      │ --network none --init
                                                                      ▼
    <base>/<run_id>@<pool>/<vm_id>/<cid>/  ◄──bind mount /run/guest──  container pr-<run>-<vm>-<cid>
        agent.sock  the agent's unix socket: info.address                   └─ docker-init (tini)
    <base>/<run_id>@<pool>/<vm_id>/meta.json                                   └─ python3 server.py
        run id, vm id, owner: what sweep() reads for folders                        └─ commands

    base: $PARALLEL_ROLLOUT_DOCKER_DIR or /tmp/parallel-rollout/docker; pool: this provider's key

**Image.** ``build_image`` makes ``parallel-rollout-guest:<key>`` from Debian's packages
alone (no registry is reachable where this runs): a debootstrapped bookworm tree
(:mod:`.images`, cached), the guest agent added to the tarball, then ``docker import`` with
CMD/ENV/WORKDIR/LABEL set through ``--change``. ``<key>`` hashes the agent and the recipe, so
a changed agent gets a new image and an unchanged one is never rebuilt (unless ``force``).
``--snapshot-name`` names another image instead (``docker commit`` of a container prepared
by hand; it needs ``python3``). The host's own guest package (``guest/``) is bind-mounted
read-only over the image's copy, so the agent always matches the host's client.

**Desktop.** Desktop modes (osworld; ``options.desktop``) boot ``parallel-rollout-desktop:<key>``
(``image build --provider docker --desktop``): the same recipe plus ``images.DESKTOP_PACKAGES``
and ``images.DESKTOP_APT_PACKAGES`` (LibreOffice). The agent starts with ``--desktop WxH``:
the desktop is up before the container counts as booted, and a reset's spare has a fresh one.

**Isolation.** ``--network none`` (only ``lo``), a fresh writable layer and a tmpfs ``/tmp``
per container, ``--init`` so orphans are reaped, ``--memory``/``--memory-swap`` from
``memory_mb`` (else the pool's ``default_memory_mb``, ``base.py``), ``--pids-limit`` from
``max_processes`` (4096 when unset) and ``--ulimit nofile`` within the VM's share of the
host's pid and file tables (``host_share.py``), a sized ``/tmp``, no privileged flags, every capability
dropped but the few the agent needs to run commands as another user (``AGENT_CAPS``),
``no-new-privileges``, at most 64 ptys (``local_init``). The agent is the container's root; every command runs as a uid of
the VM's own through ``setpriv`` with no capabilities (``--run-as``, see ``guest/agent_server.py``),
so the graded code can neither signal the agent nor reach its socket. Containers share the
host's user namespace, where the kernel counts some limits per uid (inotify instances): each
VM holds a uid of the process sandboxes' range (``sandbox_uids.py``) across resets, named
``user`` in an /etc/passwd and /etc/group bound over the image's.
The agent loads the process sandbox's seccomp filter (``seccomp.py``) on top of Docker's.
A desktop container's whole desktop (session bus, X server, apps) runs as that user too
(``guest/desktop.py``), who is ``user`` in that /etc/passwd (dbus-daemon and xterm look
their user up); OSWorld's getters and the screenshots stay out of its reach.

**Reset = recreate, with a spare** (``docker_spare.py``; the CLI calls are in ``docker_cli.py``). A container cannot be rolled back in place, but a new
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

**Sweep** (``docker_sweep.py``). Containers carry labels (run, VM, pool, owner, host):
``sweep(run_id)`` removes every container of that run (every pool's) and its folders;
``sweep()`` those whose owner process is gone on this host. The pool holds a lock on its
folder while it lives (``pool_lock.hold_pool_lock``), as the process and qemu pools do, so a
sweep from another PID namespace, where the owner's pid means nothing, sees it live too.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

import psutil

from ...errors import ConfigError, GuestUnreachable, ProviderUnavailable, VMError
from . import docker_sweep, grading_fronts, host_dirs, host_share, images, seccomp, verify
from .base import Provider, ProviderOptions, VMInfo
from .common import (LONG_VM_ID, check_name, checked_socket, make_vm_dir, new_pool_key, pool_folder, read_meta,
                     remove_run_dir_if_empty, secure_base_dir, start_ticks, write_meta)
from .docker_cli import (GUEST_HOME, GUEST_SOCK_DIR, LABEL, SOCKET_NAME, START_HINT, agent_argv,
                         check_image, check_leftovers_free, container_death_cause, container_state,
                         containers, daemon_address, daemon_limits, docker, image_exists, image_kind,
                         import_changes, kill_init, local_init, logs,
                         remove_containers, remove_old_guest_images, wait_for_daemon, write_user_files)
from .docker_spare import Background, SpareContainers
from .layer_diff import LayerView
from .sandbox_uids import SandboxUids

log = logging.getLogger(__name__)

DEFAULT_BASE_DIR = host_dirs.DOCKER.default
#: the image's ``user`` (a VM's commands run as a uid of its own; the agent stays root, with
#: AGENT_CAPS only), the size of /tmp, and the process cap when max_processes is not set
SANDBOX_UID = 64000
AGENT_CAPS = ("SETUID", "SETGID", "SETPCAP", "KILL", "CHOWN", "FOWNER", "DAC_OVERRIDE")
TMP_SIZE_MB = 512
DEFAULT_PIDS_LIMIT = 4096
BASE_DIR_ENV = host_dirs.DOCKER.env
IMAGE_REPO = "parallel-rollout-guest"
#: the image of desktop modes: images.guest_recipe(desktop=True)
DESKTOP_IMAGE_REPO = "parallel-rollout-desktop"
#: bump when the image recipe below changes in a way the key does not capture
IMAGE_RECIPE_VERSION = 4
#: `docker import` of a ~100 MB tarball (~1.9 GB with the desktop)
IMPORT_TIMEOUT_S = 900.0


def base_dir_default() -> Path:
    """Where socket folders live unless told otherwise: $PARALLEL_ROLLOUT_DOCKER_DIR or /tmp/..."""
    return host_dirs.DOCKER.path()


def image_tag(desktop: bool = False) -> str:
    """The guest image this version of the agent and recipe builds:
    ``parallel-rollout-guest:<key>``, or ``parallel-rollout-desktop:<key>`` with a desktop."""
    key = images.recipe_key("docker-guest", IMAGE_RECIPE_VERSION, images.guest_recipe(desktop),
                            import_changes(desktop), images.guest_digest(), grading_fronts.image_key())
    return f"{DESKTOP_IMAGE_REPO if desktop else IMAGE_REPO}:{key}"


class DockerProvider(SpareContainers, Provider):
    """VMs as containers of one image; a reset starts a fresh container made ahead of time."""

    name = "docker"
    opens_windows = False

    def __init__(self, run_id: str, options: ProviderOptions | None = None,
                 base_dir: str | os.PathLike | None = None) -> None:
        super().__init__(run_id, options)
        if self.options.path_to_vm:
            raise ConfigError("the docker provider boots an image, not a VM file: --path-to-vm "
                              "cannot be honoured (name an image with --snapshot-name)")
        for limit, flag in (("memory_mb", "--vm-memory-mb"), ("max_processes", "--vm-max-processes")):
            value = getattr(self.options, limit)
            if value is not None and value <= 0:
                raise ConfigError(f"{flag} must be positive, got {value}")
        if self.options.memory_mb is not None and self.options.memory_mb < 6:
            raise ConfigError(f"docker needs --vm-memory-mb >= 6, got {self.options.memory_mb}")
        self.base_dir = Path(base_dir) if base_dir else base_dir_default()
        self._pool = new_pool_key()  # this pool's folder and containers: not another run's of the id
        self.run_dir = pool_folder(self.base_dir, run_id, self._pool)
        checked_socket(self.run_dir, LONG_VM_ID, "0" * 6, SOCKET_NAME, env=BASE_DIR_ENV)  # a cid
        self.desktop = self.options.desktop
        self.image = self.options.snapshot_name or image_tag(self.desktop)
        check_image(self.image, bool(self.options.snapshot_name), self.desktop)
        self._check_limits()
        me = psutil.Process()
        self._owner = f"{me.pid}:{me.create_time():.3f}"
        self._init_spares()
        #: a uid of each VM's own for its commands: per-user kernel limits are per VM
        self._uids = SandboxUids()
        self._uids.check_room(self.options.pool_size)
        #: reset verification from the host through /proc/<docker-init>/root; the image's
        #: home is the snapshot (verify.py); full adds the writable layer (layer_diff.py)
        self._view = LayerView(self.options.verify_reset or "fast", GUEST_HOME, None,
                               spare_processes=verify.DESKTOP_LAZY if self.desktop else (),
                               windows=self.desktop)

    def __repr__(self) -> str:
        return (f"DockerProvider(run_id={self.run_id!r}, image={self.image!r}, "
                f"base_dir={str(self.base_dir)!r})")

    def _check_limits(self) -> None:
        """ConfigError when a limit asked for would be discarded by the daemon (it only warns),
        so that no container runs without the bound it was promised; the memory default."""
        enforced = daemon_limits()
        for limit, setting, key, flag in (("max_processes", "--vm-max-processes", "pids", "--pids-limit"),
                                          ("memory_mb", "--vm-memory-mb", "memory", "--memory")):
            if getattr(self.options, limit) is not None and not enforced[key]:
                raise ConfigError(
                    f"{setting} cannot be honoured: this Docker daemon does not enforce {flag} "
                    f"(docker info: {key} limit false; its kernel or cgroup setup lacks the "
                    f"{key} controller)")
        self._memory_mb = self.options.memory_limit(bounded=enforced["memory"])
        #: the process cap and RLIMIT_NOFILE, within the VM's share of the host's tables
        self._pids, self._nofile = host_share.process_limits(
            self.options.max_processes or DEFAULT_PIDS_LIMIT, explicit=self.options.max_processes is not None,
            vms=self.options.pool_size)
        if not enforced["pids"]:
            log.warning("this Docker daemon does not enforce --pids-limit: containers run "
                        "without a process cap")

    @classmethod
    def supported_limits(cls) -> frozenset[str]:
        """memory_mb (--memory) and max_processes (--pids-limit), both enforced by dockerd."""
        return frozenset({"memory_mb", "max_processes"})

    # ------------------------------------------------------------------- contract

    @classmethod
    def check_available(cls) -> None:
        """ProviderUnavailable unless libseccomp, the docker CLI and its daemon work."""
        seccomp.program()
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
                f"no Docker daemon answers at {daemon_address()}; start one with: {START_HINT}"
                + (f" (docker said: {detail[0]})" if detail else ""))

    @classmethod
    def build_image(cls, *, force: bool = False, desktop: bool = False,
                    log: Callable[[str], None] = print) -> str:
        """Build (or find) ``parallel-rollout-guest:<key>`` (``-desktop`` with ``desktop``);
        return its tag."""
        cls.check_available()
        tag = image_tag(desktop)
        if not force and image_exists(tag):
            log(f"[image] {tag} exists; nothing to build (--force rebuilds it)")
            return tag
        started = time.monotonic()
        rootfs = images.rootfs_tarball(**images.guest_recipe(desktop), force=force, log=log)
        extra: dict[str, tuple[bytes | None, int]] = dict(images.guest_files())
        extra.update({GUEST_HOME: (None, 0o755), GUEST_SOCK_DIR: (None, 0o755)})
        extra.update(images.guest_user_files(rootfs, SANDBOX_UID))  # a desktop's bus needs it
        extra.update(grading_fronts.tarball_files(rootfs))  # a check's /usr/bin/env, git … lead to the wrappers
        with tempfile.TemporaryDirectory(prefix="pr-docker-image-",
                                         dir=images.cache_dir()) as work:
            tarball = images.copy_with_extra_files(rootfs, Path(work) / "guest.tar", extra)
            log(f"[image] docker import {tarball.name} as {tag}")
            argv = ["import"]
            for change in import_changes(desktop):
                argv += ["--change", change]
            docker(*argv, str(tarball), tag, timeout=IMPORT_TIMEOUT_S)
        docker("tag", tag, f"{tag.partition(':')[0]}:latest")
        remove_old_guest_images(keep=tag, kind=image_kind(desktop), log=log)
        size = docker("image", "inspect", "--format", "{{.Size}}", tag).stdout.strip()
        log(f"[image] built {tag} in {time.monotonic() - started:.0f}s "
            f"({int(size) / 1e6:.0f} MB)" if size.isdigit() else f"[image] built {tag}")
        return tag

    def start(self, vm_id: str) -> VMInfo:
        """Run a new container for ``vm_id``, wait for its agent, start the spare. A daemon
        that stops answering (a restart) is waited for within the boot's time: its boots
        failed at once and spent the pool's replacement budget in a second, aborting the run."""
        check_name("vm id", vm_id)
        deadline = time.monotonic() + self.options.boot_timeout_s
        while True:
            try:
                return self._start(vm_id, deadline)
            except ProviderUnavailable:
                if not wait_for_daemon(deadline):
                    raise

    def _start(self, vm_id: str, deadline: float) -> VMInfo:
        vm_dir = self.run_dir / vm_id
        leftovers = containers(*self._labels(vm_id)[:3])  # run, vm, pool
        check_leftovers_free(self.run_id, vm_id, leftovers, read_meta(vm_dir), self._owner,
                             socket.gethostname())
        # containers and the folder of an earlier life of this id
        self._remove(leftovers)
        shutil.rmtree(vm_dir, ignore_errors=True)
        with self._lock:
            self._stopped.discard(vm_id)
        secure_base_dir(self.base_dir)  # 0700 and ours, not another user's folder
        make_vm_dir(vm_dir, lock_pool=True)  # a sweep in another PID namespace sees it live
        self._write_meta(vm_id, vm_dir)
        try:
            write_user_files(self.image, vm_dir, self._uids.acquire(vm_id), self._labels(vm_id))
            info = self._boot(vm_id, deadline)
            try:
                if info.private.get("init_pid"):
                    self._view.baseline(vm_id, info.private["init_pid"], info.address,
                                        container=info.private["name"])
            except BaseException:
                self._remove([info.private])
                raise
        except BaseException:
            self._uids.release(vm_id)  # no container of the VM holds it (_boot removes its own)
            # nor is anything of it left: its passwd, group and meta.json go (stop's work,
            # which a caller of a start that failed has no VMInfo to ask for)
            shutil.rmtree(vm_dir, ignore_errors=True)
            remove_run_dir_if_empty(self.run_dir)
            raise
        self._make_spare(vm_id)
        return info

    def reset(self, info: VMInfo) -> VMInfo:
        """Remove the container and hand out the spare (started ahead) in its place."""
        vm_id = info.vm_id
        vm_dir = Path(info.private["vm_dir"])
        if not vm_dir.is_dir():
            raise VMError(f"VM {vm_id}: its folder {vm_dir} is gone; it was stopped or swept")
        deadline = time.monotonic() + self.options.boot_timeout_s
        if kill_init(info.private):
            # Every process of the old container is gone; dockerd may tidy up at leisure.
            self._remove_later(vm_id, info.private)
            new_info = self._take_spare(vm_id, deadline) or self._boot(vm_id, deadline)
        else:
            # The old container goes while we take (or, without a spare, boot) the new one;
            # its processes must be gone before the VM is leased again, so we wait for it.
            remover = Background(self._remove, [info.private])
            try:
                new_info = self._take_spare(vm_id, deadline) or self._boot(vm_id, deadline)
            finally:
                remover.result()
        self._make_spare(vm_id)
        return new_info

    def verify(self, info: VMInfo) -> list[str]:
        """The home, /tmp and the processes of the new container, seen from the host (and in
        full its whole writable layer, docker diff); no check where the host cannot see the
        container's init (a remote daemon)."""
        pid = info.private.get("init_pid")
        return self._view.check(info.vm_id, pid, info.address, info.private["name"]) if pid else []

    def healthy(self, info: VMInfo) -> bool:
        """Whether the container's agent answers /health as this VM (a killed container's
        socket refuses connections, a paused one times out)."""
        from ...guest.client import GuestClient

        try:
            return GuestClient(info.address, timeout_s=2.0).health().get("vm") == info.vm_id
        except Exception:  # unreachable, malformed: either way not healthy
            return False

    def still_runs(self, info: VMInfo) -> bool:
        """The container's init (recorded at boot, where this host sees it) has not exited:
        its /proc/PID/stat, the same start (``docker kill`` ends it; a reused pid is another)."""
        ticks = info.private.get("init_ticks")
        return ticks is None or start_ticks(info.private.get("init_pid")) == ticks

    def death_cause(self, info: VMInfo) -> str | None:
        """Why the container died or stopped answering, when its task cannot have done it
        (``docker_cli``); its commands run as the VM's sandbox uid."""
        return container_death_cause(info.private["name"], self._memory_mb is not None, info.private.get("uid"))

    def stop(self, info: VMInfo) -> None:
        """Remove the VM's container, its spare and its folder; a second call does nothing."""
        self._view.forget(info.vm_id)
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
            self._uids.release(info.vm_id)  # once no container of it is left
        finally:
            shutil.rmtree(info.private["vm_dir"], ignore_errors=True)
            remove_run_dir_if_empty(self.run_dir)

    def sweep_vm(self, vm_id: str) -> None:
        """Remove every container and the folder of one VM of this run."""
        found = containers(*self._labels(vm_id)[:3])  # this pool's only
        if found:
            self._remove(found)
        shutil.rmtree(self.run_dir / vm_id, ignore_errors=True)

    @classmethod
    def sweep(cls, run_id: str | None = None,
              base_dir: str | os.PathLike | None = None, *, orphans_only: bool = False) -> list[str]:
        """Remove the containers and folders of ``run_id`` (any state), or, without a run id,
        those whose owning process is gone (``docker_sweep``); return the removed VMs as
        ``<run id>/<vm id>``."""
        return docker_sweep.sweep(Path(base_dir) if base_dir else base_dir_default(), run_id,
                                  orphans_only=orphans_only)

    # ------------------------------------------------------------------- internals

    def _run_container(self, vm_id: str, deadline: float) -> dict:
        """``docker run -d`` a container of this VM; its private record (name, folders)."""
        cid = secrets.token_hex(3)
        vm_dir = self.run_dir / vm_id
        socket_path = checked_socket(self.run_dir, vm_id, cid, SOCKET_NAME, env=BASE_DIR_ENV)
        sock_dir = socket_path.parent
        make_vm_dir(sock_dir)
        name = f"pr-{self.run_id}-{vm_id}-{cid}"
        uid = self._uids.uid(vm_id)
        if uid is None:  # never a container whose commands would run as root: a late spare
            raise VMError(f"VM {vm_id} holds no sandbox uid (it was stopped)")
        private = {"name": name, "sock_dir": str(sock_dir), "vm_dir": str(vm_dir), "uid": uid}
        argv = [
            "run", "-d",
            "--name", name, "--hostname", vm_id[:63],
            *[arg for label in self._labels(vm_id) for arg in ("--label", label)],
            "--network", "none", "--init",
            # the agent is the container's command, as root (it runs the commands as the VM's
            # uid): a snapshot image's own ENTRYPOINT or USER would keep it from starting
            "--entrypoint", "", "--user", "0:0",
            "--tmpfs", f"/tmp:mode=1777,size={TMP_SIZE_MB}m",
            # the agent keeps what running commands as another user takes; they get nothing
            "--cap-drop", "ALL", *[a for cap in AGENT_CAPS for a in ("--cap-add", cap)],
            "--security-opt", "no-new-privileges",
            "--log-opt", "max-size=1m",
            "-v", f"{sock_dir}:{GUEST_SOCK_DIR}",
            "-v", f"{images.GUEST_SOURCE_DIR}:{images.GUEST_DIR}:ro",
            "-v", f"{vm_dir / 'passwd'}:/etc/passwd:ro", "-v", f"{vm_dir / 'group'}:/etc/group:ro",
            "-w", GUEST_HOME,
            "-e", f"HOME={GUEST_HOME}", "-e", f"PATH={images.guest_path(self.desktop)}",
            "-e", "LANG=C.UTF-8", "-e", f"USER={images.GUEST_USER}",
            "-e", f"PARALLEL_ROLLOUT_VM={vm_id}",
        ]
        if self.desktop:
            argv += ["-e", f"PYTHONPATH={images.GUEST_SHIM_DIR}"]
        if self._memory_mb is not None:
            memory = f"{self._memory_mb}m"
            argv += ["--memory", memory, "--memory-swap", memory]
        argv += ["--pids-limit", str(self._pids), "--ulimit", f"nofile={self._nofile}:{self._nofile}"]
        # the desktop runs as that user too; the process sandbox's seccomp filter on Docker's
        seccomp.write(sock_dir / "seccomp.bpf")
        agent = [*agent_argv(self.options.screen), "--seccomp", f"{GUEST_SOCK_DIR}/seccomp.bpf",
                 "--run-as", f"{uid}:{uid}", "--reap-all"]
        argv += [self.image, *agent]
        try:
            docker(*argv, timeout=max(1.0, deadline - time.monotonic()))
        except VMError:
            shutil.rmtree(sock_dir, ignore_errors=True)
            # a create that timed out may still have made the container
            self._remove([private])
            raise
        return private

    def _await_agent(self, vm_id: str, container: dict, deadline: float) -> VMInfo:
        """Poll the container's socket until its agent answers as ``vm_id``."""
        from ...guest.client import GuestClient, wait_ready

        address = f"unix:{Path(container['sock_dir']) / SOCKET_NAME}"

        def running() -> None:
            state = container_state(container["name"])
            if state not in ("running", "created"):
                raise VMError(f"VM {vm_id}: container {container['name']} is {state} "
                              f"before its agent answered; log: {logs(container['name'])}")

        try:
            # the answer must come from this VM's agent, not a stale one on a reused socket
            wait_ready(GuestClient(address), deadline, check_alive=running, max_delay_s=0.02,
                       accept=lambda response: response.json().get("vm") == vm_id,
                       budget_s=self.options.boot_timeout_s)
        except GuestUnreachable as exc:
            raise VMError(f"VM {vm_id}: the agent of {container['name']} did not answer "
                          f"({exc}); log: {logs(container['name'])}") from None
        return VMInfo(vm_id=vm_id, provider=self.name, address=address, run_id=self.run_id,
                      private={**container, "image": self.image})

    def _boot(self, vm_id: str, deadline: float) -> VMInfo:
        """``docker run`` a container of ``vm_id`` and wait for its agent."""
        container = self._run_container(vm_id, deadline)
        try:
            info = self._await_agent(vm_id, container, deadline)
            info.private.update(local_init(container["name"]))
            return info
        except BaseException:
            self._remove([container])
            raise

    def _remove(self, containers: list[dict]) -> None:
        """``docker rm -f`` the containers and remove their socket folders."""
        try:
            remove_containers([c["name"] for c in containers], strict=True)
        finally:
            for container in containers:
                if container.get("sock_dir"):
                    shutil.rmtree(container["sock_dir"], ignore_errors=True)

    def _labels(self, vm_id: str) -> list[str]:
        """The labels of ``vm_id``'s containers: run, vm and pool (what names them), owner, host."""
        return [f"{LABEL}.{key}={value}" for key, value in (
            ("run", self.run_id), ("vm", vm_id), ("pool", self._pool), ("owner", self._owner),
            ("host", socket.gethostname()))]

    def _write_meta(self, vm_id: str, vm_dir: Path) -> None:
        write_meta(vm_dir, {"run_id": self.run_id, "vm_id": vm_id, "created": time.time(),
                            "owner": self._owner, "image": self.image})
