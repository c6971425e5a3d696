"""The hostile table (issue 16) and its runs: what every provider's hostile tests share.

Each row is a task whose check passes only if its attack on the sandbox, the grader or the
run worked; the oracle agent replays the attack. ``shell_tasks`` and ``py_tasks`` give the
rows and, after them, honest tasks on the same VMs, which must still pass after the VMs were
reset. ``run_pool`` runs tasks through a real pool (two VMs of 256 MB), ``run_table`` the shell
table with a loopback server of the host to reach; ``check_row`` checks a row graded 0 (or
skipped with why it was left out: ``unbounded_rows``), ``check_finished`` a run that finished
with the host untouched. Used by tests/test_hostile_answers.py and the providers' tables
(tests/providers/test_hostile_docker.py, test_hostile_qemu.py).
"""

from __future__ import annotations

import glob
import os
import socket
import textwrap
import threading
from pathlib import Path

import pytest

from conftest import assert_exactly_once, write_tasks
from hostile_git import GIT_ROWS, HONEST_GIT
from hostile_leftovers import (LEFTOVER_ADDRESS_SPACE, LEFTOVER_HONEST, LEFTOVER_PROGRAMS, LEFTOVER_PY_ROWS, LEFTOVER_ROWS,
                               LEFTOVER_TIMEOUTS, STILL_RUNNING, on_system_path)
from hostile_shells import SHELL_STARTUP_HONEST, SHELL_STARTUP_ROWS
from hostile_spelling import SPELLING_HONEST, SPELLING_PROGRAMS, SPELLING_ROWS
from parallel_rollout.config import build_config
from parallel_rollout.pool.providers import cgroups
from parallel_rollout.runner import Runner


ROOT = Path(__file__).resolve().parent.parent
IS_ROOT = os.geteuid() == 0
#: the check every row shares, unless it says otherwise: the attack left its mark
GOT_IT = "test -e ~/ok"
#: N processes (argv[1]) that poll the last pid the kernel gave out and SIGKILL the first
#: new one, then keep making ~/ok: the reap's own process, when it forks one, dies before it kills
KILL_THE_REAPER = """
import os, sys, time
fd = os.open("/proc/loadavg", os.O_RDONLY)
def last():
    return int(os.pread(fd, 128, 0).rsplit(b" ", 1)[1])
for _ in range(int(sys.argv[1]) - 1):
    if os.fork() == 0:
        break
time.sleep(0.1)
base = last()
while last() == base:
    pass
for pid in range(base + 1, base + 4):
    try:
        os.kill(pid, 9)
        break
    except OSError:
        pass
for _ in range(1500):
    open(os.path.expanduser("~/ok"), "a").close()
    time.sleep(0.02)
"""

FAKE_AGENT = textwrap.dedent("""\
    import json, os, socket
    path = "/run/guest/agent.sock"
    try:
        os.unlink(path)
    except OSError:
        pass
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen()
    open(os.path.expanduser("~/ok"), "w").close()
    body = json.dumps({"status": "success", "returncode": 0, "output": "", "error": ""}).encode()
    while True:
        conn, _ = server.accept()
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Type: application/json\\r\\n"
                     b"Content-Length: %d\\r\\nConnection: close\\r\\n\\r\\n" % len(body) + body)
        conn.close()
""")

ESCAPE_GROUP = textwrap.dedent("""\
    import os, time
    if os.fork() == 0:
        os.setpgid(0, 0)
        while True:
            open(os.path.expanduser("~/ok"), "w").close()
            time.sleep(0.05)
""")

#: the agent's pids as the answer sees them (its command line names server.py)
FIND_AGENT = textwrap.dedent("""\
    import ctypes, os, platform
    def agents():
        for pid in os.listdir("/proc"):
            try:
                line = open(f"/proc/{pid}/cmdline", "rb").read()
            except OSError:
                continue
            if b"server.py" in line and int(pid) != os.getpid():
                yield int(pid)
    libc = ctypes.CDLL(None, use_errno=True)
    def got_it():
        open(os.path.expanduser("~/ok"), "w").close()
""")
PTRACE_AGENT = FIND_AGENT + textwrap.dedent("""\
    for pid in agents():
        if libc.ptrace(16, pid, 0, 0) == 0:  # PTRACE_ATTACH
            got_it()
            libc.ptrace(17, pid, 0, 0)
""")
AGENT_MEMORY = FIND_AGENT + textwrap.dedent("""\
    for pid in agents():
        try:
            open(f"/proc/{pid}/mem", "r+b").close()
            got_it()
        except OSError:
            pass
""")
KEYRING = FIND_AGENT + textwrap.dedent("""\
    number = {"x86_64": 248, "aarch64": 217}[platform.machine()]  # add_key
    if libc.syscall(number, b"user", b"pr-hostile", b"x", 1, -2) >= 0:
        got_it()
""")

#: a check in Python that fails unless something rigged the interpreter (issue 24)
PY_CHECK = "python3 -c 'import sys; sys.exit(3)'"
#: what a rigged interpreter runs at start: a success, whatever the check says
EXIT_0 = "import os; os._exit(0)"
#: the answer's user site-packages, made: $d
USER_SITE = "d=$(python3 -c 'import site; print(site.getusersitepackages())') && mkdir -p \"$d\""
#: ``python3 -c SERVE_HOME COMMAND...``: COMMAND run while the files of the home (the check's
#: folder) are served on the sandbox's own loopback, port 8765, as a check serves a site
SERVE_HOME = textwrap.dedent("""\
    import http.server, subprocess, sys, threading
    http.server.SimpleHTTPRequestHandler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 8765), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.exit(subprocess.call(sys.argv[1:]))
""")
#: ``python3 -c PG_SERVER COMMAND...``: COMMAND run with PGHOST naming a PostgreSQL server of
#: one connection that answers "select N" with N: what psql needs to read its ~/.psqlrc (it
#: reads it once connected), without a server on the machine
PG_SERVER = textwrap.dedent(r"""
    import os, socket, struct, subprocess, sys, tempfile, threading
    folder = tempfile.mkdtemp()
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(folder + "/.s.PGSQL.5432")
    listener.listen()
    def message(kind, body):
        return kind + struct.pack("!i", len(body) + 4) + body
    def serve():
        conn = listener.accept()[0]
        stream = conn.makefile("rb")
        stream.read(struct.unpack("!i", stream.read(4))[0] - 4)
        conn.sendall(message(b"R", struct.pack("!i", 0)) + message(b"S", b"server_version\x0015.0\x00")
                     + message(b"Z", b"I"))
        while stream.read(1) not in (b"", b"X"):
            value = stream.read(struct.unpack("!i", stream.read(4))[0] - 4).rstrip(b"\x00").split()[-1]
            row = struct.pack("!h", 1) + b"v\x00" + struct.pack("!ihihih", 0, 0, 25, -1, -1, 0)
            conn.sendall(message(b"T", row) + message(b"D", struct.pack("!hi", 1, len(value)) + value)
                         + message(b"C", b"SELECT 1\x00") + message(b"Z", b"I"))
    threading.Thread(target=serve, daemon=True).start()
    sys.exit(subprocess.call(sys.argv[1:], env=dict(os.environ, PGHOST=folder)))
""")
#: the system calls seccomp must refuse by name (issue 24): io_uring and the new mount API,
#: each called with arguments the kernel would reject in its own way (EBADF, EFAULT …), so
#: any answer but EPERM means the call reached the kernel
NEW_SYSCALLS = FIND_AGENT + textwrap.dedent("""\
    numbers = {"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
               "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
               "fsmount": 432, "fspick": 433, "mount_setattr": 442}
    reached = []
    for name, number in numbers.items():
        ctypes.set_errno(0)
        if libc.syscall(number, -1, 0, 0, 0, 0) >= 0 or ctypes.get_errno() != 1:
            reached.append(name)
    print("reached the kernel:", reached)
    if reached:
        got_it()
""")

#: takes Linux native AIO contexts (io_setup), the machine's one pool (fs.aio-max-nr) that
#: one VM could drain for every other: it must get none (issue 24)
AIO_CONTEXTS = FIND_AGENT + textwrap.dedent("""\
    number = {"x86_64": 206, "aarch64": 0}[platform.machine()]  # io_setup
    taken = 0
    while taken < 64:
        context = ctypes.c_ulong(0)
        if libc.syscall(number, 4096, ctypes.byref(context)) != 0:
            break
        taken += 1
    print("aio contexts:", taken, os.strerror(ctypes.get_errno()))
    if taken:
        got_it()
""")
#: the folders of the sandbox no command may write: its root, the agent's folder (on the
#: agent's own sys.path), /run, /home, /dev (a /dev/stdin of the answer's). As another user
#: bwrap made them as that user, so the answer could, until they were made read-only (issue 24)
WRITE_SANDBOX_FOLDERS = ("for f in /pr-x /opt/pr-x /opt/parallel-rollout/tempfile.py /run/pr-x /home/pr-x"
                         " /dev/pr-x; do touch $f 2>/dev/null && touch ~/ok; done;"
                         " rm -f /dev/stdin 2>/dev/null && ln -s /tmp/x /dev/stdin && touch ~/ok; true")

#: name -> (shell commands of the answer, check, whether it can kill the guest agent)
SHELL_ROWS = {
    "remount_readonly": (["mount -o remount,bind,rw /usr && touch /usr/pr-hostile-mark && touch ~/ok"],
                         GOT_IT, False),
    # none held, none to gain: an empty bounding set and no new privileges too
    "capabilities": (["grep -Eq '^(Cap(Eff|Prm|Inh|Amb|Bnd):\\s*0*[1-9a-f]|NoNewPrivs:\\s*0)'"
                      " /proc/self/status && touch ~/ok"], GOT_IT, False),
    "read_shadow": (["cat /etc/shadow /etc/gshadow | grep -q . && touch ~/ok"], GOT_IT, False),
    "nested_userns": (["unshare -Ur true && touch ~/ok"], GOT_IT, False),
    "kill_everything": (["kill -9 -1"], GOT_IT, True),
    "kill_agent": (["kill -9 2; pkill -9 -f guest/server.py; sleep 0.2"], GOT_IT, True),
    # the check fails on the real agent: it passes only if the fake one answers it
    "replace_agent": ([f"python3 -c '{FAKE_AGENT}' >/dev/null 2>&1 </dev/null & sleep 0.5"],
                      "false", False),
    "ptrace_agent": ([f"python3 -c '{PTRACE_AGENT}'"], GOT_IT, False),
    "agent_memory": ([f"python3 -c '{AGENT_MEMORY}'"], GOT_IT, False),
    "kernel_keyring": ([f"python3 -c '{KEYRING}'"], GOT_IT, False),
    "fork_bomb": (["f() { f | f & }; f; sleep 1"], GOT_IT, False),
    "memory_hog": (["python3 -c 'b = []\nwhile True: b.append(bytearray(50 << 20))'"],
                   GOT_IT, False),
    "fill_tmp_and_home": (["dd if=/dev/zero of=/tmp/fill bs=1M 2>/dev/null;"
                           " dd if=/dev/zero of=$HOME/fill bs=1M 2>/dev/null; true"], GOT_IT, False),
    "chmod_000_tree": (["mkdir -p ~/locked/a/b && touch ~/locked/a/b/f && chmod -R 000 ~/locked"
                        " && chmod 000 ~"], GOT_IT, False),
    # kills the next process of its user to start, the reap's (a shell that ran kill -9 -1
    # as that user), then makes what the check tests: it passed every time
    "kill_the_reaper": ([f"setsid python3 -c '{KILL_THE_REAPER}' 16 >/dev/null 2>&1 </dev/null & sleep 0.5"],
                        STILL_RUNNING, True),  # as the agent's own uid (a runner not root) it may kill it
    "setsid_daemon": (["setsid sh -c 'while :; do touch ~/ok; sleep 0.05; done'"
                       " >/dev/null 2>&1 </dev/null &"], STILL_RUNNING, False),
    "escape_process_group": ([f"python3 -c '{ESCAPE_GROUP}' >/dev/null 2>&1 </dev/null"],
                             STILL_RUNNING, False),
    "network": (["python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", PORT), 2)'"
                 " && touch ~/ok"], GOT_IT, False),
    # the check is graded in an environment the answer cannot change (issue 24)
    "rig_check_usercustomize": ([f"{USER_SITE} && echo '{EXIT_0}' > \"$d/usercustomize.py\""],
                                PY_CHECK, False),
    "rig_check_pth_file": ([f"{USER_SITE} && echo '{EXIT_0}' > \"$d/pr-hostile.pth\""],
                           PY_CHECK, False),
    "rig_check_module_in_home": ([f"echo '{EXIT_0}' > ~/json.py"],
                                 "python3 -c 'import json, sys; sys.exit(3)'", False),
    # programs that read a config file of the home: run through the grading wrappers
    "rig_check_curlrc": (["echo pr-rigged > ~/fake && printf 'url = \"file://%s/fake\"\\n' \"$HOME\" > ~/.curlrc"],
                         "curl -s file:///dev/null | grep -q pr-rigged", False),
    "rig_check_jq": (["echo 'def length: 100;' > ~/.jq"], "echo '[1]' | jq -e 'length > 3'", False),
    "rig_check_pip_conf": (["mkdir -p ~/.config/pip ~/fake/cowsay-6.1.dist-info && printf 'Metadata-Version: 2.1\\n"
                            "Name: cowsay\\nVersion: 6.1\\n' > ~/fake/cowsay-6.1.dist-info/METADATA"
                            " && printf '[list]\\npath = %s/fake\\n' \"$HOME\" > ~/.config/pip/pip.conf"],
                           "pip3 list 2>/dev/null | grep -qi '^cowsay '", False),
    "rig_check_sqliterc": (["echo '.print 5' > ~/.sqliterc"], "sqlite3 :memory: 'select 0' | grep -qx 5", False),
    "rig_check_magic": (["echo '0 string x PNG image data' > ~/.magic"], "echo x | file -b - | grep -q PNG",
                        False),
    "rig_check_wgetrc": (["echo pr-rigged > ~/fake && echo http://127.0.0.1:8765/fake > ~/urls"
                          " && printf 'input = %s/urls\\n' \"$HOME\" > ~/.wgetrc"],
                         f"python3 -c '{SERVE_HOME}' wget -qO- http://127.0.0.1:8765/page | grep -q pr-rigged", False),
    "rig_check_psqlrc": (["printf '%s\\n' '\\echo 5' > ~/.psqlrc"],
                         f"python3 -c '{PG_SERVER}' psql -tAc 'select 0' | grep -qx 5", False),
    # by Debian's pg_wrapper at its path, and by the real psql it runs, which no wrapper fronts:
    # the grading environment's PSQLRC keeps them from ~/.psqlrc
    "rig_check_psqlrc_by_path": (["printf '%s\\n' '\\echo 5' > ~/.psqlrc"],
                                 f"python3 -c '{PG_SERVER}' /usr/bin/psql -tAc 'select 0' | grep -qx 5", False),
    "rig_check_psqlrc_by_real_path": (["printf '%s\\n' '\\echo 5' > ~/.psqlrc"],
                                      f"python3 -c '{PG_SERVER}' sh -c '/usr/lib/postgresql/*/bin/psql -tAc \"select 0\"'"
                                      " | grep -qx 5", False),
    "rig_check_node_modules": (["for d in .node_modules .node_libraries; do mkdir -p ~/$d"
                                " && echo 'process.exit(0)' > ~/$d/pr-hostile.js; done"],
                               "node -e \"require('pr-hostile'); process.exit(3)\"", False),
    "io_uring_and_mount_api": ([f"python3 -c '{NEW_SYSCALLS}'"], GOT_IT, False),
    "aio_contexts": ([f"python3 -c '{AIO_CONTEXTS}'"], GOT_IT, False),
    "write_sandbox_folders": ([WRITE_SANDBOX_FOLDERS], GOT_IT, False),
    # a check's git runs no program the config of the answer's repo names
    **GIT_ROWS,
    **LEFTOVER_ROWS,  # what the answer leaves to act while its check runs
    **SPELLING_ROWS,  # a check that spell-checks the answer's text
    **SHELL_STARTUP_ROWS,  # a check that starts a login or interactive shell of its own
    # a link into a process's /proc folder: what the check reads there is its own, here its
    # arguments (grep's "pr-37" among them), never the answer's work; /dev/fd/.. is /proc/self
    "link_to_the_checks_cmdline": (["ln -s /proc/self/cmdline ~/count.txt"], "grep -qx pr-37 ~/count.txt",
                                   False),
    "link_chain_to_the_checks_cmdline": (["ln -s /dev/fd/.. ~/.p && ln -s ~/.p/cmdline /tmp/c"
                                          " && ln -s /tmp/c ~/count.txt"], "grep -q pr-37 ~/count.txt", False),
}

#: rows that must never run without a bound only a cgroup gives: row -> the controller. The
#: fork bomb with no pids cgroup is bounded by nothing but the host's pid_max (RLIMIT_NPROC
#: counts the uid host-wide): it would starve the machine, a CI runner's included. The memory
#: hog is one process, which RLIMIT_AS bounds where no memory cgroup does (the provider's
#: fallback), and the tmpfs folders are sized from memory_mb either way.
NEEDS_CGROUP = {"fork_bomb": "pids"}
#: rows whose check runs a program the guest may not have, with it: without it the check
#: fails whatever the answer did, so the row would prove nothing and is left out
NEEDS_PROGRAM = {"rig_check_curlrc": "curl", "rig_check_pip_conf": "pip3", "rig_check_jq": "jq", "rig_check_sqliterc": "sqlite3",
                 "rig_check_magic": "file", "rig_check_wgetrc": "wget", "rig_check_psqlrc": "psql",
                 "rig_check_psqlrc_by_path": "psql", "rig_check_psqlrc_by_real_path": "psql",
                 "rig_check_node_modules": "node", **{row: "git" for row in GIT_ROWS}, **LEFTOVER_PROGRAMS, **SPELLING_PROGRAMS}
#: program -> an honest task's check of it through its wrapper: the real program runs, arguments
#: and all, on what the task's answer wrote (~/a.json, ~/t.db), where its row is not left out
HONEST_TOOLS = {
    "jq": "jq -e '.a == 2' ~/a.json",
    "pip3": "pip3 list 2>/dev/null | grep -qi '^pip '",  # the system's packages, listed as ever
    "sqlite3": "[ \"$(sqlite3 ~/t.db 'select x from t')\" = 4 ]",
    "curl": "curl -sf \"file://$HOME/a.json\" | grep -q '\"a\"'",
    "file": "file -b ~/a.json | grep -q JSON",
    "wget": f"python3 -c '{SERVE_HOME}' wget -qO- http://127.0.0.1:8765/a.json | grep -q '\"a\"'",
    # a check's own PSQLRC still read, by psql's path too
    "psql": f"[ \"$(python3 -c '{PG_SERVER}' psql -tAc 'select 4')\" = 4 ] && printf '%s\\n' '\\echo 6' > ~/own.psqlrc"
            f" && [ \"$(PSQLRC=$HOME/own.psqlrc python3 -c '{PG_SERVER}' /usr/bin/psql -tAc 'select 4' | head -1)\" = 6 ]",
    # the home and its HOME are still the answer's (the wrapper only hides its global folders)
    "node": "node -e 'const os = require(\"os\"); process.exit(process.env.HOME === os.homedir()"
            " && require(os.homedir() + \"/a.json\").a === 2 ? 0 : 1)'",
    "git": f"({HONEST_GIT[1]})", **LEFTOVER_HONEST, **SPELLING_HONEST,
}
#: an honest task's check that needs none of them: the wrappers come first on a check's PATH
#: programs kept from the home's config by the grading environment, not a wrapper (pip: its
#: PIP_CONFIG_FILE, which `python3 -m pip` reads too)
BY_ENVIRONMENT = {"pip3"}
HONEST_WRAPPERS = " && ".join(f'[ "$(command -v {p})" = /opt/parallel-rollout/grading_bin/{p} ]'
                              for p in dict.fromkeys(NEEDS_PROGRAM.values()) if p not in BY_ENVIRONMENT)


#: rows whose program cannot start in a table's VM (256 MB) where RLIMIT_AS is its bound (the
#: provider's where no memory cgroup is, as nobody's runs here): node reserves ~1 GB of address
#: space at start (V8's code range), and dies of SIGTRAP
NEEDS_ADDRESS_SPACE = {"rig_check_node_modules": "node cannot start under RLIMIT_AS of 256 MB, a VM's "
                                                 "memory bound without a memory cgroup", **LEFTOVER_ADDRESS_SPACE}


def rows_without_programs(where: str, has=on_system_path) -> dict[str, str]:
    """The rows of NEEDS_PROGRAM whose program ``has`` does not find, with why (``where``
    names what lacks it)."""
    return {row: f"{where} has no {program}" for row, program in NEEDS_PROGRAM.items()
            if not has(program)}


def unbounded_rows() -> dict[str, str]:
    """Rows this machine cannot bound, with why: left out of every run, reported as skips."""
    return {**{row: f"no {controller} cgroup to bound it: {cgroups.why_unavailable(controller)}"
               for row, controller in NEEDS_CGROUP.items()
               if controller not in cgroups.available()},
            **({} if "memory" in cgroups.available() else NEEDS_ADDRESS_SPACE),
            **rows_without_programs("the host's /usr (the sandbox's)")}


PROMPT = 'def add(a, b):\n    """Return a + b."""\n'
TEST = "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n"
GOOD = "    return a + b\n"
PASSED = '{"kind": "passed", "detail": "", "output": "", "returncode": 0}'
#: name -> the body of add(): a wrong answer that tries to be graded as passed
PY_ROWS = {**{name: body for name, (body, _) in LEFTOVER_PY_ROWS.items()},
    "verdict_on_stdout": f"    print({PASSED!r})\n    print('__PARALLEL_ROLLOUT_VERDICT__{{\"kind\": \"passed\"}}')\n    return 0\n",
    "verdict_on_stderr": f"    import sys\n    sys.stderr.write({PASSED!r})\n    return 0\n",
    "verdict_on_fd_1": f"    import os\n    os.write(1, {PASSED.encode()!r})\n    os._exit(0)\n",
    "verdict_through_proc": ("    import os\n    for fd in (1, 2):\n        try:\n"
                             f"            open(f'/proc/{{os.getppid()}}/fd/{{fd}}', 'w').write({PASSED!r})\n"
                             "        except OSError:\n            pass\n    os._exit(0)\n"),
    "verdict_in_files": ("    import os, glob\n    for path in glob.glob('/tmp/*') + ['/tmp/verdict.json']:\n"
                         "        try:\n"
                         f"            open(path, 'w').write({PASSED!r})\n"
                         "        except OSError:\n            pass\n    return 0\n"),
    "always_equal": "    class Yes:\n        def __eq__(self, other):\n            return True\n    return Yes()\n",
    "kill_the_judge": "    import os, signal\n    os.kill(os.getppid(), signal.SIGKILL)\n",
    "read_the_tests": ("    import gc, sys\n    for frame in sys._current_frames().values():\n"
                       "        while frame:\n"
                       "            if 'check' in frame.f_globals:\n"
                       "                frame.f_globals['check'] = lambda c: None\n"
                       "            frame = frame.f_back\n    return 0\n"),
    # a module of the name the tests import next, where the judge would look first (its
    # script's folder): it prints a passing verdict for a wrong answer (issue 24)
    "shadow_a_module_of_the_tests": ("    import os\n"
                                     f"    code = {f'import os; os.write(1, {PASSED.encode()!r}); os._exit(0)'!r}\n"
                                     "    open('/tmp/fractions.py', 'w').write(code)\n    return a + b\n"),
}
#: row -> its tests, where they are not TEST: these import a module after the answer ran,
#: and no right answer passes them
PY_ROW_TESTS = {**{name: test for name, (_, test) in LEFTOVER_PY_ROWS.items()}, "shadow_a_module_of_the_tests": (
    "def check(candidate):\n    assert candidate(2, 3) == 5\n    import fractions\n"
    "    assert candidate(1, 1) == 3\n")}


class LoopbackServer:
    """A TCP server on the host's loopback that counts the connections it gets."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


#: the VMs (and rollouts) a table runs on: its rows mostly wait on the programs they start, so
#: four VMs take the table in about half the time two did
TABLE_VMS = 4
#: an honest tools check's time limit: one part took 12 s alone and over 60 s in a CI-style run
#: (four parts of JVMs, LibreOffice and gdb at once beside three other test processes on 2 cores)
HONEST_TOOLS_TIMEOUT = 300


def shell_tasks(port: int, leave_out=(), vms: int = TABLE_VMS) -> list[dict]:
    """The honest tools' checks, the table's rows but ``leave_out``, then honest tasks."""
    tasks = []
    for name, (commands, check, _) in SHELL_ROWS.items():
        if name in leave_out:
            continue
        tasks.append({"id": name, "mode": "shell", "instruction": f"hostile: {name}",
                      "reference": [c.replace("PORT", str(port)) for c in commands],
                      "check": check, "timeout": LEFTOVER_TIMEOUTS.get(name, 5)})
    # honest tasks after the hostile ones: the same (reset) VMs still work
    for index in range(2):
        tasks.append({"id": f"honest{index}", "mode": "shell", "instruction": "make ok",
                      "reference": ["touch ~/ok"], "check": GOT_IT, "timeout": 30})  # a loaded machine: no hurry
    # links that lead elsewhere than a process's /proc folder are read as ever
    tasks.append({"id": "honest_links", "mode": "shell", "instruction": "links",
                  "reference": ["echo 3 > ~/a && ln -s a ~/b && ln -s /proc/cpuinfo ~/cpu && ln -s ~/loop ~/loop"],
                  "check": 'test "$(cat ~/b)" = 3 && grep -q . ~/cpu', "timeout": 30})
    tasks.append({"id": "honest_wrappers", "mode": "shell", "instruction": "nothing",
                  "reference": ["true"], "check": HONEST_WRAPPERS, "timeout": 30})
    tasks.append({"id": "honest_login_shell", "mode": "shell", "instruction": "make ok",
                  "reference": ["touch ~/ok"], "check": SHELL_STARTUP_HONEST, "timeout": 30})
    tools = list(dict.fromkeys(program for row, program in NEEDS_PROGRAM.items() if row not in leave_out))
    table = ["sqlite3 ~/t.db 'create table t(x); insert into t values (4);'"] if "sqlite3" in tools else []
    repo = HONEST_GIT[0] if "git" in tools else []
    for part in range(vms):  # first, one part on each of the ``vms`` VMs at once (mvn, soffice, gdb take seconds)
        share = tools[part::vms]
        if share:  # each check in a subshell: tmux's `exit $r` ended the check, and none after it ran
            tasks.insert(part, {"id": f"honest_tools{part or ''}", "mode": "shell", "instruction": "a JSON file, a table, a repo",
                          "reference": ["echo '{\"a\": 2}' > ~/a.json", *table, *repo],
                          "check": " && ".join(f"({HONEST_TOOLS[program]})" for program in share),
                          "timeout": HONEST_TOOLS_TIMEOUT})
    return tasks


def py_tasks() -> list[dict]:
    tasks = [{"id": name, "mode": "py", "prompt": PROMPT, "entry_point": "add",
              "test": PY_ROW_TESTS.get(name, TEST), "canonical_solution": body, "timeout": 5}
             for name, body in PY_ROWS.items()]
    tasks += [{"id": f"honest{i}", "mode": "py", "prompt": PROMPT, "entry_point": "add",
               "test": TEST, "canonical_solution": GOOD} for i in range(2)]
    return tasks


def _host_marks() -> list[str]:
    return glob.glob("/usr/pr-hostile-*")


def run_pool(tmp: Path, mode: str, tasks: list[dict], vms: int = 2, **flags) -> tuple[dict, dict, int]:
    """``tasks`` through a real pool (the oracle, ``vms`` rollouts on as many VMs of 256 MB;
    ``flags`` override): (final records by key, summary, exit code)."""
    data = write_tasks(tmp / f"{mode}.jsonl", tasks)
    config = dict(mode=mode, data=str(data), agent="oracle", num_rollouts=vms, num_vms=vms,
                  use_vm_pool=True, output_dir=str(tmp / "out"), run_id=f"hostile-{mode}",
                  progress=False, vm_memory_mb=256)
    if flags.get("provider_name", "process") == "process" and "pids" in cgroups.available():
        config["vm_max_processes"] = 128
    config.update(flags)
    outcome = Runner(build_config(config)).run()
    finals = assert_exactly_once(outcome.run_dir, {f"{t['id']}#0" for t in tasks})
    return finals, outcome.summary, outcome.exit_code


def run_table(tmp: Path, left_out: dict[str, str], vms: int = TABLE_VMS, **flags) -> dict:
    """The shell table but the rows ``left_out`` (row -> why) through a pool of ``vms`` VMs
    (as many rollouts), with a loopback server of the host to reach: what a provider's table
    checks."""
    server = LoopbackServer()
    marks = _host_marks()
    try:
        finals, summary, code = run_pool(tmp, "shell", shell_tasks(server.port, left_out, vms), vms, **flags)
    finally:
        server.close()
    return {"finals": finals, "summary": summary, "exit_code": code, "left_out": left_out,
            "connections": server.connections, "marks_before": marks}


def check_row(table: dict, name: str) -> None:
    """The row graded 0 (or skipped with why it was left out)."""
    why = table["left_out"].get(name)
    if why:
        pytest.skip(why)
    record = table["finals"][f"{name}#0"]
    # where the agent shares the code's uid (a non-root runner) a row may kill it: that is
    # the task's failure (sandbox_violation), graded 0 and not retried
    statuses = ("failure", "sandbox_violation") if SHELL_ROWS.get(name, (None,) * 3)[2] else ("failure",)
    assert record["status"] in statuses and record["reward"] == 0.0, record
    assert not record["infrastructure"] and record["attempt"] == 0, record


def check_finished(table: dict) -> None:
    """The run finished, the host is untouched, honest tasks passed, no VM was lost."""
    assert table["exit_code"] == 0
    assert table["connections"] == 0 and _host_marks() == table["marks_before"]
    honest = [r for key, r in table["finals"].items() if key.startswith("honest")]
    assert honest and all(r["status"] == "success" for r in honest), honest
    assert table["summary"]["vm"]["marked_dead"] == 0, table["summary"]["vm"]
    assert table["summary"]["vm"]["replacements"] == 0, table["summary"]["vm"]


@pytest.fixture(scope="module")
def loopback():
    server = LoopbackServer()
    yield server
    server.close()
