"""The contract every VM provider meets, and the small record that names a VM."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

from ...errors import ConfigError


@dataclass(frozen=True)
class VMInfo:
    """A started VM: small and picklable, so it crosses the Manager's process boundary.

    ``address`` says how to reach the guest agent: ``unix:/path/to/socket`` or
    ``http://host:port``. ``private`` is the provider's own data (pids, paths, names).
    """

    vm_id: str
    provider: str
    address: str
    run_id: str
    private: dict[str, Any] = field(default_factory=dict, compare=False)
    #: set by the pool on the copy it hands out: which lease this is, so a late release
    #: from a worker that was reclaimed cannot touch the VM's next lease
    lease: int | None = field(default=None, compare=False)


@dataclass(frozen=True)
class ProviderOptions:
    """What the user may ask of a provider; a provider rejects what it cannot honour."""

    snapshot_name: str | None = None
    path_to_vm: str | None = None
    headless: bool = True
    boot_timeout_s: float = 60.0
    #: per-VM resource limits; None keeps the provider's default
    memory_mb: int | None = None
    max_processes: int | None = None
    #: the VMs the pool runs at once (its size and spares): what a default limit that
    #: shares something of the runner among its VMs divides by
    pool_size: int = 1
    #: the memory limit of a VM when ``memory_mb`` is None (:func:`default_memory_mb`),
    #: applied where the provider bounds a VM's total (a memory cgroup, a container), never
    #: as a per-process address-space limit, which would break programs that reserve much
    #: more than they use (Chromium)
    default_memory_mb: int | None = None
    #: a desktop in every VM (osworld): an X display of screen_width × screen_height with
    #: a window manager, part of the snapshot (a reset brings back a clean desktop)
    desktop: bool = False
    screen_width: int = 1920
    screen_height: int = 1080
    #: remote provider: the guest agents' addresses (one per VM) and the shell command that
    #: resets one ("none": no reset); other providers ignore them (the runner rejects them)
    vm_addresses: tuple[str, ...] = ()
    reset_command: str | None = None
    #: remote provider: the file holding the key its guest agents ask each connection for
    vm_key_file: str | None = None
    #: how a reset is checked before the VM goes back to the pool: off, fast or full
    #: (see ``verify.py``); None: the provider's ``verify_default``
    verify_reset: str | None = None
    #: warm spares the pool keeps beyond its size (``pool/spares.py``); None: the
    #: provider's ``default_spares``
    spare_vms: int | None = None
    #: the files the run's tasks are loaded from (``--data``: a named dataset's file too),
    #: the gold files their checks compare against and OSWorld's download cache, by real path
    #: (``providers.hidden_files``): no VM may read its own check, tests or gold file there (the
    #: process provider masks those its system folders hold: HumanEval's, pip-installed under
    #: /usr/local; an OSWorld install's gold files under /usr/local/share)
    hidden_files: tuple[str, ...] = ()
    #: Python programs (the run's modes' ``Env.cut_cleanup``) that a provider whose reset does
    #: not restore the machine (remote) runs through its agent's ``/run_python`` at each reset
    #: and stop: they end what an episode cut short left running there (web: the page server
    #: and Chromium its driver started, by pid)
    cleanup_programs: tuple[str, ...] = ()
    #: the settings a provider's messages name, as the user gave them (``config_checks.as_given``:
    #: ``reset-command in run.toml``, ``the environment variable PARALLEL_ROLLOUT_RESET_COMMAND``);
    #: one not in it by its flag (``said``)
    given: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    def said(self, name: str) -> str:
        """Setting ``name`` as the user gave it (``given``), else its flag: ``--reset-command``."""
        return self.given.get(name) or "--" + name.replace("_", "-")

    def said_as(self, name: str, value: str, typed: str | None = None) -> str:
        """Setting ``name`` with ``value`` (as a message writes it) as the user gave it: on the
        command line (or not given) its flag and the value as the flag takes it, ``typed``, after
        a value written otherwise (``2s (--boot-timeout-s 2)``), else before it (``--reset-command
        none``); off it, where: ``2s (boot-timeout-s in run.toml)``, ``none (the environment variable …)``."""
        said = self.said(name)
        if not said.startswith("--"):
            return f"{value} ({said})"
        return f"{said} {value}" if typed in (None, value) else f"{value} ({said} {typed})"

    @property
    def boot_timeout_said(self) -> str:
        """The boot timeout as a message says it: ``2s (--boot-timeout-s 2)`` (``said_as``)."""
        return self.said_as("boot_timeout_s", f"{self.boot_timeout_s:g}s", f"{self.boot_timeout_s:g}")

    def memory_limit(self, bounded: bool) -> int | None:
        """A VM's memory limit: ``memory_mb``, else ``default_memory_mb`` where the provider
        can bound the VM's total (``bounded``: a memory cgroup, a container), else None."""
        if self.memory_mb is not None:
            return self.memory_mb
        return self.default_memory_mb if bounded else None

    @property
    def screen(self) -> str | None:
        """``WxH`` of the desktop a VM's agent starts (``--desktop WxH``), None without one."""
        return f"{self.screen_width}x{self.screen_height}" if self.desktop else None


#: the per-VM limits of ``ProviderOptions``, by the flag that sets each
LIMIT_FLAGS = {"memory_mb": "--vm-memory-mb", "max_processes": "--vm-max-processes"}


def refuse_limits(options: ProviderOptions, provider: str, why: str) -> None:
    """ConfigError naming the flag of a per-VM limit set in ``options`` that the ``provider``
    provider cannot enforce (``why``: what to do instead)."""
    for limit, flag in LIMIT_FLAGS.items():
        if getattr(options, limit) is not None:
            raise ConfigError(f"the {provider} provider cannot enforce {flag}: {why}")


#: the largest default memory limit of a VM, and of a desktop VM (a browser and an office
#: suite want more)
DEFAULT_MEMORY_CAP_MB = 2048
DESKTOP_MEMORY_CAP_MB = 4096
#: the least a default limit leaves a VM (the agent, a shell, a Python interpreter)
DEFAULT_MEMORY_FLOOR_MB = 256


def default_memory_mb(num_vms: int, desktop: bool = False, in_runner_cgroup: bool = False) -> int:
    """A VM's memory limit unless the user sets one: min(2048 MB (4096 with a desktop),
    80% of the host's memory / ``num_vms``), at least 256 MB. M VMs then never hold more
    than 80% of the host between them, and no one VM more than the cap. With
    ``in_runner_cgroup`` (VMs whose memory counts in the runner's own cgroup) a memory limit
    on that cgroup or an ancestor counts as the host's memory when less
    (``host_share.memory_total_mb``)."""
    from .host_share import DEFAULT_MEMORY_SHARE, memory_total_mb

    share = DEFAULT_MEMORY_SHARE * memory_total_mb(in_runner_cgroup)[0] / max(1, num_vms)
    cap = DESKTOP_MEMORY_CAP_MB if desktop else DEFAULT_MEMORY_CAP_MB
    return max(DEFAULT_MEMORY_FLOOR_MB, min(cap, int(share)))


class Provider(abc.ABC):
    """One VM technology. Every VM it makes is labelled with the run id, so ``sweep`` finds
    what a killed run left behind."""

    name: ClassVar[str] = ""
    #: warm spares when --spare-vms is not given: worth it where a reset or boot is slow
    default_spares: ClassVar[int] = 0
    #: whether its VMs' memory counts in the runner's own cgroup (a process sandbox's cgroups
    #: are children of it, a QEMU guest is a process of the runner), so a limit there bounds
    #: them with the runner (``host_share``); a container's is dockerd's, elsewhere
    vms_in_runner_cgroup: ClassVar[bool] = False
    #: whether its VMs may open a window on this host, which --headless keeps shut (a
    #: hypervisor's GUI; a plugin's, which reads options.headless); False where none does
    opens_windows: ClassVar[bool] = True
    #: whether its VMs' processes are the pool's process's children (a sandbox's bwrap and
    #: init) and outlive its death by SIGKILL as zombies: the process that starts the pool is
    #: their child subreaper while the pool lives and reaps them as it sweeps (``orphans``)
    adopted_by_runner: ClassVar[bool] = False
    #: whether ``reset`` brings a VM back to its snapshot; False where it only waits for the
    #: VM (the remote provider with --reset-command none): the pool counts a release then,
    #: not a reset
    restores_on_reset: bool = True

    def __init__(self, run_id: str, options: ProviderOptions | None = None) -> None:
        from .common import check_name

        check_name("run id", run_id)  # it names folders, containers and cgroups
        self.run_id = run_id
        self.options = options or ProviderOptions()
        mode = self.options.verify_reset
        if mode not in (None, "off") and type(self).verify is Provider.verify:
            raise ConfigError(
                f"the {self.name or type(self).__name__} provider cannot verify its resets: "
                f"--verify-reset {mode} cannot be honoured (leave it off for this provider)")

    @classmethod
    def check_available(cls) -> None:
        """Raise ProviderUnavailable (with an install hint) when this machine cannot run it."""

    @classmethod
    def build_image(cls, *, force: bool = False, desktop: bool = False,
                    log: Callable[[str], None] = print) -> str:
        """Build (or find cached) the guest image this provider boots; return where it is.
        ``desktop``: the image for desktop modes (osworld), with an X desktop and its apps.

        Providers without an image (process) have nothing to build."""
        raise ConfigError(f"the {cls.name or cls.__name__} provider has no image to build")

    @classmethod
    def supported_limits(cls) -> frozenset[str]:
        """The ProviderOptions limits (memory_mb, max_processes) this machine can enforce."""
        return frozenset()

    @abc.abstractmethod
    def start(self, vm_id: str) -> VMInfo:
        """Boot a VM, wait for its guest agent, make sure its snapshot exists."""

    @abc.abstractmethod
    def reset(self, info: VMInfo) -> VMInfo:
        """Bring the VM back to its snapshot; raise VMError when that fails."""

    def verify(self, info: VMInfo) -> list[str]:
        """After a reset, and once after a boot: how the VM differs from its snapshot
        (``verify.py``), one line per difference; empty when it is clean or when
        ``options.verify_reset`` is off. A provider that does not override this cannot
        verify, and ``__init__`` refuses an explicit ``fast`` or ``full`` (ConfigError)."""
        return []

    @abc.abstractmethod
    def healthy(self, info: VMInfo) -> bool:
        """Whether the VM runs and its guest agent answers. The pool asks it every few
        seconds of each IDLE VM (``pool/watchers.py``): answer within a few seconds, never
        raise; three noes in a row replace the VM."""

    def still_runs(self, info: VMInfo) -> bool:
        """Whether the VM's own process still runs, where the provider can tell for a syscall
        or one small /proc read (no call into the guest, no subprocess): the pool asks it,
        under its lock, of the VM a lease is about to hand out, so that a VM killed while
        idle, before the idle check's noes add up, is replaced instead of given to a task.
        True where it cannot tell that cheaply (this default); never raises."""
        return True

    def death_cause(self, info: VMInfo) -> str | None:
        """Why a VM that broke under a task died, when the cause is outside the task: its
        VM, sandbox or agent killed by a signal the pool did not send (or stopped, traced,
        paused from outside), the host's OOM killer, the machine gone. The VM is then an infrastructure failure, retried on
        another VM; with None (the default: the provider cannot tell, or the task's own
        code could have done it) it is the task's ``sandbox_violation``. Asked right after
        the task's call failed, before the VM is stopped; may wait a few seconds for a
        dying VM to finish; never raises."""
        return None

    @abc.abstractmethod
    def stop(self, info: VMInfo) -> None:
        """Stop the VM and remove everything it left; safe to call twice."""

    @classmethod
    @abc.abstractmethod
    def sweep(cls, run_id: str | None = None, *, orphans_only: bool = False) -> list[str]:
        """Remove VMs left behind by crashed runs (of ``run_id``, or of every run);
        return what was removed, each as ``<run id>/<vm id>``. Without a run id, or with ``orphans_only``, a VM whose
        owning process is alive is kept: two runs of one run id in two output folders
        must not sweep each other's."""
