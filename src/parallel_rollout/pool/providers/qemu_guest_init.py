"""PID 1 of a qemu guest (``guest-init``, a Python program written into the image).

It mounts the kernel's filesystems, starts the guest agent in a network namespace of its own
(only ``lo``: a task sees no network interface, as in the other providers), reaps every orphan
and restarts the agent if it dies, and relays the port QEMU forwards from the host to the
agent's unix socket, asking each connection for the VM's key (``pr.key``) first.
``qemu_image`` installs it into the disk; its text is one of the image's inputs, so a change
to it makes the image stale.
"""

from __future__ import annotations

from . import images


#: the guest agent's TCP port inside the VM (OSWorld's)
GUEST_PORT = 5000
#: the user graded code and a desktop run as (the agent is the VM's root)
SANDBOX_UID = 64000

GUEST_INIT_PATH = "/usr/local/sbin/guest-init"
#: the process sandbox's seccomp filter (``seccomp.py``), which the guest agent loads at start
#: (``server.py --seccomp``): the graded code runs on the guest's own kernel, but a way into
#: it (io_uring, the new mount API, …) is a way to the guest's root, who grades the answer
GUEST_SECCOMP_PATH = f"{images.GUEST_DIR}/seccomp.bpf"


# PID 1 of the guest. Python rather than a shell script: one process instead of a dozen
# under TCG, and it must reap the orphans of every command the agent runs.
GUEST_INIT = r'''#!/usr/bin/python3 -IS
"""PID 1 of a parallel-rollout QEMU guest: mounts, network, the guest agent, a relay.

The agent and every command it runs live in a network namespace of their own with only
lo: a task sees no network interface, as in the other providers. The NIC that QEMU
forwards the host's port to stays here, in PID 1's namespace, where a relay passes each
connection on to the agent's unix socket (pathname sockets belong to no namespace).
Any process of the host reaches that port: with ``pr.key`` given, a connection's first
line must be ``PR-KEY <key>``, or nothing is passed on, nor the clock set.
"""
import ctypes, fcntl, hmac, os, select, socket, struct, sys, threading, time

AGENT = "AGENT_PATH"
SHIM = "SHIM_PATH"
SECCOMP = "SECCOMP_PATH"
AGENT_SOCKET = "/run/guest/agent.sock"
HOME = "/home/user"
CLONE_NEWNET = 0x40000000
libc = ctypes.CDLL("libc.so.6", use_errno=True)


def say(message):
    sys.stderr.write("guest-init: %s\n" % message)
    sys.stderr.flush()


def mount(source, target, fstype, options=""):
    os.makedirs(target, exist_ok=True)
    if libc.mount(source.encode(), target.encode(), fstype.encode(), 0, options.encode()):
        errno = ctypes.get_errno()
        if errno != 16:  # EBUSY: already mounted (the initramfs moved /dev here)
            say("mount %s: %s" % (target, os.strerror(errno)))


def ifup(name, address, netmask):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    def ifreq(payload):
        return struct.pack("16s", name.encode()) + payload.ljust(24, b"\0")
    def sockaddr(ip):
        return struct.pack("H2s4s", socket.AF_INET, b"", socket.inet_aton(ip))
    fcntl.ioctl(s, 0x8916, ifreq(sockaddr(address)))       # SIOCSIFADDR
    fcntl.ioctl(s, 0x891C, ifreq(sockaddr(netmask)))       # SIOCSIFNETMASK
    flags = struct.unpack("H", fcntl.ioctl(s, 0x8913, ifreq(b""))[16:18])[0]  # SIOCGIFFLAGS
    fcntl.ioctl(s, 0x8914, ifreq(struct.pack("H", flags | 0x1 | 0x40)))  # IFF_UP|IFF_RUNNING
    s.close()


def start_agent():
    pid = os.fork()
    if pid:
        return pid
    try:
        os.setsid()
        os.chdir(HOME)
        os.dup2(os.open("/dev/null", os.O_RDONLY), 0)
        if libc.unshare(CLONE_NEWNET):
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET)")
        ifup("lo", "127.0.0.1", "255.0.0.0")
        if os.path.exists(AGENT_SOCKET):
            os.unlink(AGENT_SOCKET)
        env = {"PATH": "BASE_PATH", "HOME": HOME, "USER": "user", "LANG": "C.UTF-8",
               "PARALLEL_ROLLOUT_VM": hostname}
        # the agent is the VM's root; the graded code (and a desktop) an unprivileged user
        argv = ["python3", "-I", "-S", AGENT, "--unix", AGENT_SOCKET,
                "--run-as", "SANDBOX_UID:SANDBOX_UID", "--reap-all"]  # the VM is its own
        if os.path.exists(SECCOMP):  # the host's seccomp filter, as in every provider
            argv += ["--seccomp", SECCOMP]
        if desktop:  # WxH from the kernel command line
            argv += ["--desktop", desktop]
            env["PYTHONPATH"] = SHIM  # pyautogui is the shim's; so are sudo and vlc on PATH
            env["PATH"] = "DESKTOP_PATH"
        os.execve("/usr/bin/python3", argv, env)
    except BaseException as exc:
        say("cannot start the agent: %r" % (exc,))
    os._exit(1)


def relay_one(outside):
    inside = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        outside.settimeout(60)
        first = outside.recv(262144)
        if key:  # the runner's key first, else nothing
            while b"\n" not in first and 0 < len(first) < 256:
                more = outside.recv(256)
                if not more:
                    return
                first += more
            said, _, first = first.partition(b"\n")
            if not hmac.compare_digest(said, b"PR-KEY " + key.encode()):
                return
            first = first or outside.recv(262144)
        outside.settimeout(None)
        if first.startswith(b"PR-SETTIME "):  # from the host after loadvm: no agent involved
            time.clock_settime(time.CLOCK_REALTIME, float(first.split()[1]))
            outside.sendall(b"ok\n")
            return
        inside.connect(AGENT_SOCKET)
        inside.sendall(first)
        peer = {outside: inside, inside: outside}
        # poll, not select: select() refuses fds above 1023 (a relay each of 500 connections)
        poller, open_ends = select.poll(), {}
        for end in (outside, inside):
            poller.register(end, select.POLLIN)
            open_ends[end.fileno()] = end
        while open_ends:
            for fd, _ in poller.poll():
                end = open_ends[fd]
                data = end.recv(262144)
                if data:
                    peer[end].sendall(data)
                else:  # EOF one way: pass it on, keep the other way open
                    peer[end].shutdown(socket.SHUT_WR)
                    poller.unregister(fd)
                    del open_ends[fd]
    except (OSError, ValueError):
        pass  # the agent is not up yet, or either side went away: drop the connection
    finally:
        inside.close()
        outside.close()


def relay():
    server = socket.create_server(("0.0.0.0", PORT), backlog=128)
    while True:
        outside, _ = server.accept()
        threading.Thread(target=relay_one, args=(outside,), daemon=True).start()


for source, target, fstype, options in (
        ("proc", "/proc", "proc", ""), ("sysfs", "/sys", "sysfs", ""),
        ("devtmpfs", "/dev", "devtmpfs", ""), ("devpts", "/dev/pts", "devpts", "ptmxmode=666"),
        ("tmpfs", "/dev/shm", "tmpfs", "mode=1777"), ("tmpfs", "/run", "tmpfs", "mode=755"),
        ("tmpfs", "/tmp", "tmpfs", "mode=1777")):
    mount(source, target, fstype, options)
os.makedirs("/run/guest", exist_ok=True)
cmdline = open("/proc/cmdline").read().split()
hostname = next((a[12:] for a in cmdline if a.startswith("pr.hostname=")), "guest")
desktop = next((a[11:] for a in cmdline if a.startswith("pr.desktop=")), "")
key = next((a[7:] for a in cmdline if a.startswith("pr.key=")), "")
libc.sethostname(hostname.encode(), len(hostname.encode()))
agent = start_agent()  # before the relay's threads exist: fork a single-threaded process
try:
    ifup("lo", "127.0.0.1", "255.0.0.0")
    nics = sorted(n for n in os.listdir("/sys/class/net") if n != "lo")
    ifup(nics[0], "10.0.2.15", "255.255.255.0")  # QEMU user networking's guest address
    threading.Thread(target=relay, daemon=True).start()
except (OSError, IndexError) as exc:
    say("network: %r" % (exc,))
say("agent started (pid %d)" % agent)
while True:  # reap every orphan; restart the agent if it dies
    try:
        pid, status = os.wait()
    except ChildProcessError:
        time.sleep(1)
        continue
    if pid == agent:
        say("agent exited (status %d); restarting it" % status)
        time.sleep(0.5)
        agent = start_agent()
'''.replace("AGENT_PATH", images.GUEST_AGENT_PATH).replace("SHIM_PATH", images.GUEST_SHIM_DIR) \
    .replace("SECCOMP_PATH", GUEST_SECCOMP_PATH) \
    .replace("PORT", str(GUEST_PORT)).replace("SANDBOX_UID", str(SANDBOX_UID)) \
    .replace("BASE_PATH", images.guest_path()).replace("DESKTOP_PATH", images.guest_path(True))
