"""Stand-in ``vmrun`` and ``VBoxManage`` for the vmware and virtualbox providers' tests: the
subcommands OSWorld's runner uses, answering as the real programs do, over this machine's own
VMs (QEMU, or a process sandbox for the fast test).

::

    vmrun -T ws start X.vmx nogui ──► spawns `hypervisor_standin.py daemon X.vmx` (detached):
        the daemon starts one VM of our provider (STANDIN_BACKEND: qemu | process), relays
        <ip>:5000 (an address of 127/8, one per VM) to its guest agent, and obeys "reset" and
        "stop" on a unix socket in $STANDIN_DIR
    (STANDIN_HANG=start: a start that hangs)
    vmrun revertToSnapshot X.vmx SNAP ──► "reset" (a VM that is off boots from the snapshot)
    vmrun getGuestIPAddress X.vmx -wait ──► the relay's ip;  vmrun stop ──► "stop";  vmrun list;
    vmrun listSnapshots X.vmx
    a .vmx's daemon keeps its vmware.log (beside it) as VMware's VMX process
    does: begun at each power-on (the last one kept as vmware-0.log), ended by "VMX has left the
    building" when the VM stops of its own accord, so a daemon killed never writes that line
    VBoxManage list vms | list runningvms | startvm | controlvm UUID savestate |
               snapshot UUID restore SNAP | snapshot UUID list --machinereadable |
               showvminfo UUID --machinereadable |
               guestproperty get UUID /VirtualBox/GuestInfo/Net/0/V4/IP

A ``.vmx`` here is a text file with ``snapshot = "NAME"`` lines; VirtualBox's VMs are listed in
``$STANDIN_DIR/vbox.json`` (``{"name": {"uuid": ..., "snapshots": [...]}}``). Run as
``python3 hypervisor_standin.py vmrun|VBoxManage|daemon ARGS``.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

STATE = Path(os.environ.get("STANDIN_DIR", "/tmp/hypervisor-standin"))
BOOT_TIMEOUT_S = float(os.environ.get("STANDIN_BOOT_TIMEOUT_S", "300"))
#: STANDIN_HANG=start: ``vmrun start`` and ``VBoxManage startvm`` never return (a VM whose
#: power-on hangs), until the provider kills them at its boot timeout
HANG = os.environ.get("STANDIN_HANG", "")


def _key(vm: str) -> str:
    return hashlib.sha1(vm.encode()).hexdigest()[:12]


def _ip(vm: str) -> str:
    return f"127.0.{int(_key(vm)[:4], 16) % 200 + 20}.{int(_key(vm)[4:8], 16) % 250 + 2}"


def _control(vm: str) -> Path:
    return STATE / f"{_key(vm)}.sock"


def _running(vm: str) -> bool:
    pid_file = STATE / f"{_key(vm)}.pid"
    try:
        os.kill(int(pid_file.read_text()), 0)
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return False
    return _control(vm).exists()


def _send(vm: str, command: str, timeout: float = BOOT_TIMEOUT_S) -> str:
    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(timeout)
        conn.connect(str(_control(vm)))
        conn.sendall(command.encode() + b"\n")
        return conn.makefile().readline().strip()


def _start(vm: str) -> None:
    if HANG == "start":
        time.sleep(BOOT_TIMEOUT_S)
        sys.exit(f"Error: the virtual machine {vm} did not power on in time")
    if _running(vm):
        return
    STATE.mkdir(parents=True, exist_ok=True)
    ready = STATE / f"{_key(vm)}.ready"
    ready.unlink(missing_ok=True)
    log = open(STATE / f"{_key(vm)}.log", "ab")
    subprocess.Popen([sys.executable, __file__, "daemon", vm], stdin=subprocess.DEVNULL,
                     stdout=log, stderr=log, start_new_session=True)
    deadline = time.monotonic() + BOOT_TIMEOUT_S
    while not ready.exists():
        if time.monotonic() > deadline:
            sys.exit(f"Error: the virtual machine {vm} did not power on in time")
        time.sleep(0.1)
    if ready.read_text().strip() != "ok":
        sys.exit(f"Error: cannot power on {vm}: {ready.read_text().strip()}")


# --------------------------------------------------------------------------- daemon


def daemon(vm: str) -> None:
    """Own one VM of our provider until told to stop; relay <ip>:5000 to its agent."""
    from parallel_rollout.pool.providers import get_provider
    from parallel_rollout.pool.providers.base import ProviderOptions

    ready = STATE / f"{_key(vm)}.ready"
    backend = os.environ.get("STANDIN_BACKEND", "qemu")
    desktop = os.environ.get("STANDIN_DESKTOP") == "1"
    try:
        provider = get_provider(backend)(f"standin-{_key(vm)}", ProviderOptions(
            boot_timeout_s=BOOT_TIMEOUT_S, desktop=desktop, screen_width=1024, screen_height=768))
        info = provider.start("vm")
        relay = socket.create_server((_ip(vm), 5000))
        server = socket.socket(socket.AF_UNIX)
        _control(vm).unlink(missing_ok=True)
        server.bind(str(_control(vm)))
        server.listen()
    except Exception as exc:  # said to the waiting `start`
        ready.write_text(f"{type(exc).__name__}: {exc}")
        raise
    _vmx_log(vm, f"Log for VMware Workstation (stand-in) pid={os.getpid()}")
    holder = {"info": info}
    threading.Thread(target=_relay, args=(relay, holder), daemon=True).start()
    (STATE / f"{_key(vm)}.pid").write_text(str(os.getpid()))
    ready.write_text("ok")
    while True:
        conn, _ = server.accept()
        with conn:
            command = conn.makefile().readline().strip()
            if command == "reset":
                holder["info"] = provider.reset(holder["info"])
                conn.sendall(b"ok\n")
            elif command == "stop":
                provider.stop(holder["info"])
                _vmx_log(vm, "VMX exit (0).", "VMX has left the building: 0.")
                _control(vm).unlink(missing_ok=True)
                (STATE / f"{_key(vm)}.pid").unlink(missing_ok=True)
                conn.sendall(b"ok\n")
                return


def _vmx_log(vm: str, *lines: str) -> None:
    """Write ``lines`` to a .vmx's vmware.log as its VMX process would: the first of a power-on
    begins the log anew (the earlier one kept as vmware-0.log)."""
    if not vm.endswith(".vmx"):
        return
    path = Path(vm).resolve().parent / "vmware.log"
    if lines[0].startswith("Log for"):
        if path.exists():
            path.replace(path.with_name("vmware-0.log"))
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    with path.open("a") as log:
        log.write("".join(f"{stamp}.000Z| vmx| I005: {line}\n" for line in lines))


def _relay(listener: socket.socket, holder: dict) -> None:
    while True:
        client, _ = listener.accept()
        threading.Thread(target=_pipe_pair, args=(client, holder["info"].address),
                         daemon=True).start()


def _pipe_pair(client: socket.socket, address: str) -> None:
    from parallel_rollout.guest.client import KEY_LINE, KEY_MARK

    if address.startswith("unix:"):
        upstream = socket.socket(socket.AF_UNIX)
        upstream.connect(address[len("unix:"):])
    else:  # a QEMU VM's relay asks for its key first (``#pr-key=``, as GuestClient says it)
        address, _, key = address.partition(KEY_MARK)
        host, _, port = address[len("http://"):].rpartition(":")
        upstream = socket.create_connection((host, int(port)))
        if key:
            upstream.sendall(f"{KEY_LINE} {key}\n".encode())
    relay(client, upstream)


def relay(client: socket.socket, upstream: socket.socket) -> None:
    """Copy both ways until each side has said EOF; then close both."""
    def pump(src, dst):
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
    back.start()
    pump(client, upstream)
    back.join(timeout=300)
    client.close()
    upstream.close()


# ---------------------------------------------------------------------------- vmrun


def _snapshots_of_vmx(vmx: str) -> list[str]:
    try:
        text = Path(vmx).read_text()
    except OSError:
        sys.exit(f"Error: Cannot open VM: {vmx}, The virtual machine cannot be found")
    return [line.split("=", 1)[1].strip().strip('"') for line in text.splitlines()
            if line.strip().startswith("snapshot")]


def vmrun(args: list[str]) -> None:
    """``vmrun -T ws|fusion COMMAND ...`` (the subcommands OSWorld uses)."""
    if args[:1] == ["-T"]:
        args = args[2:]
    command, rest = args[0], args[1:]
    if command == "list":
        known = [p.read_text() for p in STATE.glob("*.name")] if STATE.exists() else []
        running = [vm for vm in known if _running(vm)]
        print("\n".join([f"Total running VMs: {len(running)}", *running]))
        return
    vmx = rest[0]
    snapshots = _snapshots_of_vmx(vmx)
    STATE.mkdir(parents=True, exist_ok=True)
    (STATE / f"{_key(vmx)}.name").write_text(vmx)
    if command == "start":
        _start(vmx)
    elif command == "revertToSnapshot":
        if rest[1] not in snapshots:
            sys.exit("Error: A snapshot with that name does not exist")
        if _running(vmx):
            _send(vmx, "reset")
    elif command == "getGuestIPAddress":
        if not _running(vmx):
            sys.exit("Error: The virtual machine is not powered on: " + vmx)
        print(_ip(vmx))
    elif command == "stop":
        if _running(vmx):
            _send(vmx, "stop")
    elif command == "listSnapshots":
        print("\n".join([f"Total snapshots: {len(snapshots)}", *snapshots]))
    else:
        sys.exit(f"Error: Unrecognized command: {command}")


# ------------------------------------------------------------------------ VBoxManage


def _vbox_vms() -> dict:
    return json.loads((STATE / "vbox.json").read_text())


def _vbox_name(uuid: str) -> str:
    for name, vm in _vbox_vms().items():
        if uuid in (name, vm["uuid"]):
            return name
    sys.exit(f"VBoxManage: error: Could not find a registered machine named '{uuid}'")


def vboxmanage(args: list[str]) -> None:
    """``VBoxManage COMMAND ...`` (the subcommands OSWorld uses)."""
    command, rest = args[0], args[1:]
    if command == "list":
        vms = _vbox_vms()
        for name, vm in vms.items():
            if rest[0] == "vms" or _running(name):
                print(f'"{name}" {{{vm["uuid"]}}}')
    elif command == "startvm":
        _start(_vbox_name(rest[0]))
    elif command == "controlvm" and rest[1] in ("savestate", "poweroff"):
        name = _vbox_name(rest[0])
        if _running(name):
            _send(name, "stop")
    elif command == "snapshot" and rest[1] == "restore":
        name = _vbox_name(rest[0])
        if rest[2] not in _vbox_vms()[name]["snapshots"]:
            sys.exit(f"VBoxManage: error: Could not find a snapshot named '{rest[2]}'")
        if _running(name):
            sys.exit("VBoxManage: error: Cannot restore a snapshot of a running machine")
    elif command == "snapshot" and rest[1] == "list":
        snapshots = _vbox_vms()[_vbox_name(rest[0])]["snapshots"]
        if not snapshots:
            sys.exit("This machine does not have any snapshots")
        print("\n".join(f'SnapshotName{"-1" * i}="{name}"' for i, name in enumerate(snapshots)))
    elif command == "showvminfo":  # a daemon killed from outside (never told to stop): aborted
        name = _vbox_name(rest[0])
        state = "running" if _running(name) else "aborted" if (STATE / f"{_key(name)}.pid").exists() else "poweroff"
        print(f'name="{name}"\nVMState="{state}"')
    elif command == "guestproperty" and rest[0] == "get":
        name = _vbox_name(rest[1])
        print(f"Value: {_ip(name)}" if _running(name) else "No value set!")
    else:
        sys.exit(f"VBoxManage: error: unknown command {' '.join(args)}")


if __name__ == "__main__":
    role, argv = sys.argv[1], sys.argv[2:]
    {"vmrun": vmrun, "VBoxManage": vboxmanage}.get(role, lambda a: daemon(a[0]))(argv)
