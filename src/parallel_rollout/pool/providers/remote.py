"""RemoteProvider: VMs that already run somewhere, given as guest addresses, reset by the user.

For OSWorld VM images (or any machine running our guest agent, whose routes match OSWorld's)
that the user runs themselves, e.g. on a VMware host or in a cloud::

    pool ── start(vm_id) ──► takes the next unused address ──► reset command ──► GET /platform
         ── reset(info)  ──► the user's reset command (on this host) ─────────► GET /platform
         ── stop(info)   ──► gives the address back (the machine keeps running)

    --vm-address 10.0.0.5:5000 --vm-address 10.0.0.6     (port 5000, OSWorld's, when omitted)
    --reset-command 'ssh vmhost vmrun revertToSnapshot /vms/{host}.vmx init_state'

**One address is one VM.** The pool needs one address per VM (``--num-vms`` with
``--use-vm-pool``, else ``--num-rollouts``); fewer is a ConfigError before the run (config.py).
``start`` takes an address no other VM of this provider holds and waits, up to
``boot_timeout_s``, for one to be given back (a replacement VM boots while its dead
predecessor is still being stopped). Two runs must not share addresses: nothing here can see
another run's leases.

**Reset = the user's command.** Only the user knows how their machines go back to a snapshot
(``vmrun revertToSnapshot``, ``virsh snapshot-revert``, a cloud API, a script that restarts the
agent in a clean home …), so ``--reset-command`` is a shell command run on this host (``/bin/sh
-c``) with these placeholders replaced, each shell-quoted: ``{address}``
(``http://host:port``), ``{host}``, ``{port}``, ``{vm_id}``, ``{run_id}``; the same values are
in its environment as ``PARALLEL_ROLLOUT_VM_ADDRESS``, ``…_VM_HOST``, ``…_VM_PORT``,
``…_VM_ID`` and ``PARALLEL_ROLLOUT_RUN_ID``. A ``{name}`` that reads as a typo of one of
them (``{hots}``, ``{VM_ID}``) is refused when the provider is made, naming them: it would run
as those characters. Other braces are left alone (shell and awk use them). The command and the agent's answer afterwards must fit in ``boot_timeout_s``: past it
the command's process group is killed. A non-zero exit is a VMError quoting the end of its
output (the pool then marks the VM dead); an exit of 126 or 127 (a program it runs that
cannot be executed or is not found) is the run's settings (VMSettingsMismatch: the run stops). The command should return once the old state is
gone: the first answer to ``GET /platform`` afterwards counts as ready. ``start`` runs it too,
so the first task on a machine starts from the snapshot whatever ran there before.

Without a reset command a remote VM could not be brought back, so there is no default:
``--reset-command none`` says so explicitly and accepts that each task sees what earlier
tasks left (no isolation; a warning is logged). Before each reset, and at each stop, the run's
modes end what an episode may have left running outside any reset's reach
(``ProviderOptions.cleanup_programs``, run through ``/run_python``: the web mode's page server
and Chromium, by the pids its driver started), so an episode cut short (its worker killed at
--task-timeout, the run stopped) leaves nothing running on the machine.

**Readiness and health** use ``GET /platform``: OSWorld's server has no ``/health``, and
``/screenshot`` is costly. A server that answers it 404 (or 405) for the whole boot timeout is no guest
agent: at a first boot, VMSettingsMismatch naming the address. With a desktop mode, ``start`` also checks ``POST /screen_size``
against ``--screen-width``/``--screen-height``, since tasks click at pixel positions; a
machine of another size is the run's settings, not a failed boot (VMSettingsMismatch: the
run stops at once, exit 2), at the first boot of its address in the run; at a later one (it
matched before) the machine changed, a VMError as any failed boot, and so for the others below.

**Verified resets** (``--verify-reset fast|full``; off by default: each check is a round
trip to the machine). The first start of each address in a run records what the machine
holds (the agent's home, ``/tmp``, its processes: ``verify_guest.GuestView``); after every
reset, and once after every later start, the machine must hold the same. A reset command that does
not take away what a task left is found: the task's VM is quarantined (free), and the
restart that runs the command again fails its check and spends the replacement budget. The
machine must run our guest agent (OSWorld's server has no ``/run_python`` for the probe: at a
first boot, VMSettingsMismatch).

**Keys.** Anything that reaches a guest agent's port can drive it: run commands, read and
write files (another user of the network; a ``command`` agent's program, which keeps the
host's network). An agent started with ``--key-file`` answers only connections that say its
key first (``PR-KEY``, what ``GuestClient`` sends for an address with ``#pr-key=``); the run
reads the key from ``--vm-key-file`` and keeps it in its VMs' addresses, never in a message,
config.json or a record (messages show ``shown_address``). Without one a warning says so.
An agent that refuses the run's key (or its lack) at a boot is the run's settings
(VMSettingsMismatch: the run stops at once, exit 2), as a screen of another size is.

**Not ours to remove.** ``stop`` gives the address back (after the cleanup above); it never
stops a machine this provider did not start. ``sweep`` has nothing to remove (it makes no containers, processes or
files) and returns ``[]``. ``snapshot_name``, ``path_to_vm`` and resource limits cannot be
honoured (the snapshot is whatever the reset command restores): ConfigError.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import tempfile
import threading
import time

from ... import process_group
from ...vm_address import RESET_PLACEHOLDERS, check_distinct, check_placeholders, left_as_typed
from ...errors import ConfigError, GuestKeyRefused, GuestUnreachable, VMError, VMSettingsMismatch
from ...guest.client import keyed_address, shown_address
from . import verify_guest
from .boot_checks import READY_ROUTE, check_booted, first_boot, no_agent_is_settings
from .base import Provider, ProviderOptions, VMInfo, refuse_limits
from .slots import Slots

log = logging.getLogger(__name__)

#: the --reset-command value that accepts no reset at all
NO_RESET = "none"
#: how long one health probe may take
HEALTH_TIMEOUT_S = 2.0
#: how long one of the run's cleanup programs (``ProviderOptions.cleanup_programs``) may run
#: on a machine before its reset, and at its stop (a Ctrl-C's stop waits for it)
CLEANUP_TIMEOUT_S = 15.0
CLEANUP_AT_STOP_S = 5.0
#: characters of the reset command's output quoted in a VMError
OUTPUT_TAIL = 2000
#: the reset command's exit statuses that say a program it names cannot be run (POSIX sh's,
#: and ssh's of the remote command): the run's settings, not a flaky machine
UNRUNNABLE = {126: "a program it runs cannot be executed", 127: "a program it runs was not found"}
#: placeholder -> the environment variable that holds the same value for the reset command
ENV_NAMES = dict(zip(RESET_PLACEHOLDERS, ("PARALLEL_ROLLOUT_VM_ADDRESS", "PARALLEL_ROLLOUT_VM_HOST",
                                         "PARALLEL_ROLLOUT_VM_PORT", "PARALLEL_ROLLOUT_VM_ID",
                                         "PARALLEL_ROLLOUT_RUN_ID"), strict=True))


class RemoteProvider(Provider):
    """VMs at fixed guest addresses (``http://host:port``), reset by a user-given command."""

    name = "remote"
    opens_windows = False  # another machine's
    #: its VMs are network addresses, not local sockets: the ray backend runs one pool (on the
    #: driver's node, where --reset-command runs) that workers on every node lease from
    reachable_from_any_node = True

    def __init__(self, run_id: str, options: ProviderOptions | None = None) -> None:
        super().__init__(run_id, options)
        opts = self.options
        for field, flag, why in (("path_to_vm", "--path-to-vm", "it does not boot VM files"),
                                 ("snapshot_name", "--snapshot-name",
                                  "the snapshot is whatever --reset-command restores")):
            if getattr(opts, field):
                raise ConfigError(f"the remote provider cannot honour {flag}: {why}")
        refuse_limits(opts, self.name, "it does not own the machines (limit them where they run)")
        raw = tuple(getattr(opts, "vm_addresses", ()) or ())
        if not raw:
            raise ConfigError("the remote provider needs the guest addresses of its VMs: "
                              "--vm-address HOST[:PORT] (repeat it, or a comma list), one per VM")
        self.addresses = check_distinct(raw)
        command = getattr(opts, "reset_command", None)
        if command is None or not command.strip():
            raise ConfigError(
                "remote VMs cannot be reset without --reset-command: a shell command run on "
                "this host that brings the machine at {address} ({host}, {port}) back to its "
                "snapshot; --reset-command none accepts no reset (each task sees what earlier "
                "tasks left)")
        self.reset_command = None if command.strip().lower() == NO_RESET else command
        if self.reset_command is None and (opts.verify_reset or "off") != "off":
            # a machine a task left anything on fails every later check, its restart's too
            # (nothing restores it), which was charged as the provider's fault until the run stopped
            raise ConfigError(f"--verify-reset {opts.verify_reset} checks each reset against the machine's first "
                              "boot, and --reset-command none resets nothing: the first task that leaves a "
                              "file or a process would make every VM fail its check; give a --reset-command, "
                              "or --verify-reset off")
        check_placeholders(command)
        #: what the messages of its runs call it: the setting as the user gave it (a flag, a
        #: config file's key, a variable), which "the reset command" named none of
        self._command = f"the reset command ({self.options.said('reset_command')})"
        #: what each agent asks every connection for (``--vm-key-file``); None: they ask nothing
        self._key = read_key(opts.vm_key_file)
        #: whether the warnings (agents without a key, machines never reset) are still to come:
        #: at the first start, so the pool says them once (not each construction that only
        #: checks the options)
        self._warn_first_start = True
        self._warning = threading.Lock()
        #: with --reset-command none a reset only waits for the machine's agent: the pool
        #: counts it as a release, not a reset
        self.restores_on_reset = self.reset_command is not None
        #: which VM holds which address
        self.slots = Slots(self.addresses, "remote addresses")
        #: the addresses that booted in this run: a mismatch found at a later boot of one (a
        #: screen, a key that was right) is the machine's change, not the run's settings
        self._booted: set[str] = set()
        #: reset verification through each machine's agent, against its first boot
        self._view = verify_guest.machine_view(opts)

    def _no_agent(self) -> str:
        """What a boot whose machine's agent never answered says to check, each setting as the
        user gave it: "no guest agent answered at that address (--vm-address) within 2s (--boot-timeout-s 2)
        after …", "… at that address (vm-address in run.toml) within 2s (boot-timeout-s in run.toml) …";
        the address named as the reset command is (``__init__``), whoever set it."""
        started = (f" after {self._command} ran" if self.reset_command is not None
                   else f", and {self.options.said_as('reset_command', 'none')} starts none: start its agent")
        return (f"no guest agent answered at that address ({self.options.said('vm_address')}) within "
                f"{self.options.boot_timeout_said}{started}")

    def __repr__(self) -> str:
        return (f"RemoteProvider(run_id={self.run_id!r}, addresses={self.addresses!r}, "
                f"held={len(self.slots)})")

    # ------------------------------------------------------------------- contract

    def start(self, vm_id: str) -> VMInfo:
        """Take an unused address, reset that machine, wait until its agent answers."""
        with self._warning:
            if self._warn_first_start and self.reset_command is None:
                log.warning("remote provider: --reset-command none: VMs are never reset; tasks "
                            "see what earlier tasks on the same machine left")
            if self._warn_first_start and self._key is None:
                log.warning("remote provider: no --vm-key-file: anything that reaches the guest agents at %s (another "
                            "user of the network, a command agent's program) can run commands there and read or "
                            "write their files; start each with --key-file FILE and give the run --vm-key-file FILE",
                            ", ".join(self.addresses))
            self._warn_first_start = False
        deadline = time.monotonic() + self.options.boot_timeout_s
        address = self.slots.acquire(vm_id, deadline)
        host, port = split_address(address)
        info = VMInfo(vm_id=vm_id, provider=self.name, run_id=self.run_id, private={"host": host, "port": port},
                      address=keyed_address(address, self._key) if self._key else address)
        try:
            with first_boot(self._booted, address):
                try:
                    with no_agent_is_settings(f"VM {vm_id}: {address}", self.options, "vm_address"):
                        self._reset_and_wait(info, deadline)
                except GuestKeyRefused:  # the run's key against the agent's: no other boot mends that
                    raise VMSettingsMismatch(f"VM {vm_id}: {key_refused(address, self.options.vm_key_file)}") from None
                except GuestUnreachable as exc:  # a later boot may find it up: still a failed boot, its settings said
                    raise GuestUnreachable(f"VM {vm_id}: {exc}: {self._no_agent()}") from None
                check_booted(self.options, self._view, address, info, f"VM {vm_id} ({address})")
        except BaseException:
            self.slots.release(address, info.vm_id)
            raise
        return info

    def reset(self, info: VMInfo) -> VMInfo:
        """Run the reset command for this machine, then wait until its agent answers."""
        if not self.slots.holds(shown_address(info.address), info.vm_id):
            raise VMError(f"VM {info.vm_id} ({shown_address(info.address)}) was stopped; it cannot be reset")
        deadline = time.monotonic() + self.options.boot_timeout_s
        self._clean_up(info, deadline)
        self._reset_and_wait(info, deadline)
        return info

    def verify(self, info: VMInfo) -> list[str]:
        """The machine's home (the agent's), /tmp and processes through a probe its agent
        runs, against what it had at its first boot in this run (``verify_guest.py``)."""
        return self._view.check(shown_address(info.address), None, info.address)

    def healthy(self, info: VMInfo) -> bool:
        """The address is still this VM's and its agent answers GET /platform quickly."""
        if not self.slots.holds(shown_address(info.address), info.vm_id):
            return False
        return answers(info.address, HEALTH_TIMEOUT_S)

    def stop(self, info: VMInfo) -> None:
        """Give the address back, after ending what the run's mode left running there (the
        machine itself is not ours to stop). Safe to call twice."""
        if self.slots.holds(shown_address(info.address), info.vm_id):
            self._clean_up(info, time.monotonic() + CLEANUP_AT_STOP_S)
        self.slots.release(shown_address(info.address), info.vm_id)

    @classmethod
    def sweep(cls, run_id: str | None = None, *, orphans_only: bool = False) -> list[str]:
        """Nothing to remove: this provider makes no containers, processes or files."""
        return []

    # ------------------------------------------------------------------- internals

    def _clean_up(self, info: VMInfo, deadline: float) -> None:
        """Run the modes' ``cleanup_programs`` on the machine: no reset command may end what an
        episode cut short started there (the web mode's browser), and a stop ends nothing.
        Best effort, within ``deadline`` and CLEANUP_TIMEOUT_S: a machine that does not answer
        is the reset's (and its check's) to find out."""
        from ...guest.client import GuestClient

        for program in self.options.cleanup_programs:
            budget = min(CLEANUP_TIMEOUT_S, deadline - time.monotonic())
            if budget <= 0:
                return
            try:  # the request bounded by the budget too: a machine gone silent must not hold a Ctrl-C's stop
                GuestClient(info.address).request("POST", "/run_python", json={"code": program, "timeout": budget},
                                                  timeout=budget + 2.0)
            except Exception as exc:  # noqa: BLE001 - best effort, as above
                log.warning("VM %s (%s): ending what its last episode left running failed: %s",
                            info.vm_id, shown_address(info.address), exc)

    def _reset_and_wait(self, info: VMInfo, deadline: float) -> None:
        if self.reset_command is not None:
            self._run_reset_command(info, deadline)
        wait_agent_ready(info.address, deadline, self.options.boot_timeout_s)

    def _run_reset_command(self, info: VMInfo, deadline: float) -> None:
        where = shown_address(info.address)
        values = {"address": where, "host": info.private["host"],
                  "port": str(info.private["port"]), "vm_id": info.vm_id, "run_id": self.run_id}
        command = self.reset_command
        for name, value in values.items():
            command = command.replace("{" + name + "}", shlex.quote(value))
        env = dict(os.environ)
        env.update({ENV_NAMES[name]: value for name, value in values.items()})
        timeout = max(0.0, deadline - time.monotonic())
        # Output goes to a file, not a pipe: a reset command that starts a daemon (a new
        # guest agent) would otherwise hold the pipe open and keep us waiting.
        with tempfile.TemporaryFile() as output:
            try:
                proc = subprocess.Popen(["/bin/sh", "-c", command], stdin=subprocess.DEVNULL,
                                        stdout=output, stderr=subprocess.STDOUT, env=env,
                                        start_new_session=True)
            except OSError as exc:
                raise VMError(f"VM {info.vm_id}: cannot run {self._command}: {exc}") from exc
            try:
                code = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                kill_group(proc)
                raise VMError(f"VM {info.vm_id} ({where}): {self._command} did not "
                              f"finish within {self.options.boot_timeout_s:g}s (killed; {self.options.said('boot_timeout_s')} "
                              f"allows more); "
                              f"output: {_tail(output)}") from None
            except BaseException:
                kill_group(proc)
                raise
            if code in UNRUNNABLE:  # the shell's own word: no later reset or boot finds the program
                raise VMSettingsMismatch(f"VM {info.vm_id} ({where}): {self._command} exited with {code}, "
                                         f"{UNRUNNABLE[code]}: {_tail(output)}{left_as_typed(self.reset_command)}; "
                                         f"fix {self.options.said('reset_command')} (a resume may give another)")
            if code != 0:
                raise VMError(f"VM {info.vm_id} ({where}): {self._command} exited "
                              f"with {code}: {_tail(output)}{left_as_typed(self.reset_command)}")



# --------------------------------------------------------------------------- helpers


def key_refused(address: str, key_file: str | None) -> str:
    """What to say of the agent at ``address`` that answered 401 to the run's key, that of
    ``key_file`` (``--vm-key-file``; None: the run gave none)."""
    if key_file:
        return (f"{address} refused the key of --vm-key-file {key_file} (401): give the run the file "
                "that holds its agent's key (the agent's --key-file)")
    return f"{address} asks for a key (401): give the run its agent's key with --vm-key-file FILE"


def read_key(path: str | None) -> str | None:
    """The key in ``path`` (one word, the guest agents' ``--key-file``); None without a path;
    ConfigError, not quoting the file, when it cannot be read or is no key."""
    if not path:
        return None
    try:
        with open(path, "rb") as handle:
            words = handle.read(4096).decode("ascii").split()
    except (OSError, UnicodeDecodeError) as exc:
        # the system's reason (no such file, a permission), never the file's bytes
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not a text file of a key"
        raise ConfigError(f"--vm-key-file {path}: cannot read a key: {why}") from None
    if len(words) != 1:
        raise ConfigError(f"--vm-key-file {path}: the file must hold one key, one word (what the guest "
                          "agents' --key-file holds: e.g. the output of `openssl rand -hex 16`)")
    return words[0]


def split_address(address: str) -> tuple[str, int]:
    """(host, port) of a normalized address; an IPv6 host keeps no brackets."""
    host, _, port = address[len("http://"):].rpartition(":")
    return host.strip("[]"), int(port)


def answers(address: str, timeout_s: float) -> bool:
    """Whether the guest agent at ``address`` answers GET /platform within ``timeout_s``."""
    from ...guest.client import GuestClient

    try:
        response = GuestClient(address, timeout_s=timeout_s).request(
            "GET", READY_ROUTE, timeout=timeout_s, check=False)
    except GuestUnreachable:
        return False
    return response.status == 200 and bool(response.body.strip())


def wait_agent_ready(address: str, deadline: float, budget_s: float) -> None:
    """Poll GET /platform until it answers (the one readiness wait of guest/client.py)."""
    from ...guest.client import GuestClient, wait_ready

    wait_ready(GuestClient(address, timeout_s=HEALTH_TIMEOUT_S), deadline, route=READY_ROUTE,
               accept=lambda response: bool(response.body.strip()), budget_s=budget_s,
               max_delay_s=0.5)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group of ``proc`` (a tunnel or VM tool) and reap it."""
    process_group.kill_group(proc.pid)
    proc.wait()


def _tail(output) -> str:
    output.seek(0)
    text = output.read().decode("utf-8", "replace").strip()
    if len(text) > OUTPUT_TAIL:
        text = "…" + text[-OUTPUT_TAIL:]
    return text or "(no output)"
