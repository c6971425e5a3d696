"""Reset verification through the guest agent: for VMs the host cannot look into.

A qemu guest, a remote machine or a vmware or virtualbox VM runs its own kernel: the host sees
neither its files nor its processes. ``GuestView`` makes the same checks as ``verify.HostView``
(the module doc there says which and what they cost) on what a probe, a Python program the
guest agent runs, reports: the home's, ``/tmp``'s and ``/dev/shm``'s fingerprints (the probe
carries ``verify.tree_fingerprint`` itself) and the processes, compressed on one line.
``machine_view`` and ``baseline_machine`` are the user's machines' side (remote, vmware,
virtualbox): the agent's home, each machine checked against its first boot in the run.
"""

from __future__ import annotations

import base64
import inspect
import json
import zlib

from .verify import DESKTOP_LAZY, HostView, file_sha256, tree_fingerprint


#: characters of the reset probe's answer kept (a fingerprint of a large home is long: more
#: than the agent's default tail of a command's output)
PROBE_TAIL_CHARS = 2_000_000


#: what an agent without the probe's route answers it (OSWorld's server: no /run_python)
NO_ROUTE = (404, 405)


def no_probe_route(mode: str, answered: str) -> str:
    """What to say of a machine whose agent ``answered`` the probe's route as having none."""
    return (f"its agent has no POST /run_python, which --verify-reset {mode} runs its probe through ({answered}): "
            "run this project's guest agent there (guest/server.py), or --verify-reset off (a resume may give it)")


class ProbeUnusable(LookupError):
    """The machine cannot be checked by the probe, and no reset or other boot changes that: its
    agent has no ``POST /run_python`` (OSWorld's server), or it holds more than the probe's
    answer may report. At a machine's first boot, the run's settings (``baseline_machine``)."""


class GuestView(HostView):
    """Verifies a VM the host cannot look into (qemu, remote, vmware, virtualbox): the same
    checks, with the home, /tmp, /dev/shm and the processes read by a probe the guest agent
    runs (a Python program of this module's tree walk; tens of ms, more under TCG: off unless
    asked for). Kernel threads and the probe's own session are left out of the processes.
    A ``home`` of ``~`` is the agent's own home (a machine the user set up)."""

    def _observe(self, pid: int | None, address: str | None) -> dict:
        from ...guest.client import GuestClient, GuestRequestError

        try:
            result = GuestClient(address, timeout_s=60.0).run_python(
                _probe_source(self.home, self.mode == "full"), timeout=60.0, isolated=True,
                tail=PROBE_TAIL_CHARS)
        except GuestRequestError as exc:
            if exc.status not in NO_ROUTE:
                raise LookupError(f"the VM's agent did not answer the reset probe: {exc}") from None
            raise ProbeUnusable(no_probe_route(self.mode, str(exc))) from None
        except Exception as exc:  # noqa: BLE001 - unreachable, refused: a difference
            raise LookupError(f"the VM's agent did not answer the reset probe: {exc}") from None
        output = result.get("output") or ""
        if len(output) >= PROBE_TAIL_CHARS:
            raise ProbeUnusable(f"the reset probe's answer passed {PROBE_TAIL_CHARS:,} characters, compressed: the "
                              f"VM's home, /tmp and /dev/shm hold too many entries for --verify-reset "
                              f"{self.mode} to compare (a few hundred thousand); slim them, or use "
                              "--verify-reset off for these VMs")
        try:
            seen = json.loads(zlib.decompress(base64.b64decode(output.strip().splitlines()[-1])))
        except Exception as exc:  # noqa: BLE001 - garbled: a difference
            raise LookupError(f"the reset probe answered what is not its report ({exc}): "
                              f"{(result.get('error') or output)[-300:]!r}") from None
        seen["home"] = {rel: tuple(entry) for rel, entry in seen["home"].items()}
        return seen


def machine_view(options, default: str = "off") -> GuestView:
    """The view of a provider whose VMs are the user's machines running our guest agent
    (remote, vmware, virtualbox): the agent's home, checked through it; ``default`` when
    ``--verify-reset`` is not given (a probe is a round trip: off)."""
    return GuestView(options.verify_reset or default, "~", None,
                     spare_processes=DESKTOP_LAZY if options.desktop else (),
                     windows=options.desktop)


def baseline_machine(view: GuestView, slot: str, info) -> None:
    """Take the baseline of the machine ``slot`` (an address, a VM file) at its first boot
    and keep it: a restart of that machine is then checked against its first boot, so a
    restore that does not take away what a task left shows before the next lease. VMError
    when its agent cannot run the probe; VMSettingsMismatch when no retry changes that
    (``ProbeUnusable``: only a first boot takes the baseline)."""
    from ...errors import VMError, VMSettingsMismatch
    from ...guest.client import shown_address

    try:
        view.baseline(slot, None, info.address, keep=True)
    except ProbeUnusable as exc:  # the machine against the run's --verify-reset: no boot mends it
        raise VMSettingsMismatch(f"VM {info.vm_id} ({shown_address(info.address)}): {exc}") from None
    except LookupError as exc:
        raise VMError(f"VM {info.vm_id} ({shown_address(info.address)}): {exc}") from None


def _probe_source(home: str, full: bool) -> str:
    """The program GuestView runs in the guest: prints one JSON line of what it sees."""
    functions = inspect.getsource(tree_fingerprint) + "\n" + inspect.getsource(file_sha256)
    return f"""from __future__ import annotations
import base64, hashlib, json, os, stat, zlib
{functions}
me, procs = os.getsid(0), []
for name in os.listdir("/proc"):
    try:
        if not name.isdigit() or os.getsid(int(name)) == me:
            continue
        with open(f"/proc/{{name}}/cmdline", "rb") as fh:
            cmdline = fh.read().replace(b"\\0", b" ").decode(errors="replace").strip()
        with open(f"/proc/{{name}}/comm") as fh:
            comm = fh.read().strip()
    except OSError:
        continue
    if cmdline:  # a kernel thread has none
        procs.append((int(name), comm, cmdline))
boot = [float(line.split()[1]) for line in open("/proc/stat") if line.startswith("btime")][0]
tmp = tree_fingerprint("/tmp")
tmp.pop(os.path.basename(globals().get("__file__", "")), None)  # this probe's own file
seen = json.dumps({{"home": tree_fingerprint(os.path.expanduser({home!r}), {full!r}), "tmp": tmp,
                    "shm": tree_fingerprint("/dev/shm"), "processes": procs,
                    "booted_ns": int((boot - 1) * 1e9)}})
# compressed: a home of tens of thousands of entries is megabytes of JSON, a tenth of it so
print(base64.b64encode(zlib.compress(seen.encode(), 6)).decode())
"""
