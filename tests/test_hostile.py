"""Hostile answers through a real pool: each is graded 0, the host is untouched, the run ends.

One table of answers that attack the sandbox, the grader or the run (issue 16), run through
the process provider as the user running the tests (root here: the README's commands) and,
where the machine allows, as ``nobody`` through the CLI. Each row is a task whose check
passes only if the attack worked; the oracle agent replays the attack. Around the table:
honest tasks on the same VMs, which must still pass after the VMs were reset, and checks
on the host (no file under /usr, no connection to a loopback server of the host, a host
that still spawns processes, no process left: the autouse leak check).

The whole table is one run per user (a module-scoped fixture), so its cost is that of one
small run; the rows are reported one by one.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
from pathlib import Path

import psutil
import pytest

from conftest import assert_exactly_once, read_results, shell_task, write_tasks
from parallel_rollout.config import build_config
from parallel_rollout.pool.providers import cgroups, default_memory_mb
from parallel_rollout.runner import Runner

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

ROOT = Path(__file__).resolve().parent.parent
IS_ROOT = os.geteuid() == 0
#: the check every row shares, unless it says otherwise: the attack left its mark
GOT_IT = "test -e ~/ok"
#: a check that fails only if a process of the answer still runs while the check does
STILL_RUNNING = "rm -f ~/ok; sleep 0.5; test -e ~/ok"

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
    "rig_check_sqliterc": (["echo '.print 5' > ~/.sqliterc"], "sqlite3 :memory: 'select 0' | grep -qx 5", False),
    "rig_check_magic": (["echo '0 string x PNG image data' > ~/.magic"], "echo x | file -b - | grep -q PNG",
                        False),
    "rig_check_wgetrc": (["echo pr-rigged > ~/fake && echo http://127.0.0.1:8765/fake > ~/urls"
                          " && printf 'input = %s/urls\\n' \"$HOME\" > ~/.wgetrc"],
                         f"python3 -c '{SERVE_HOME}' wget -qO- http://127.0.0.1:8765/page | grep -q pr-rigged", False),
    "rig_check_psqlrc": (["printf '%s\\n' '\\echo 5' > ~/.psqlrc"],
                         f"python3 -c '{PG_SERVER}' psql -tAc 'select 0' | grep -qx 5", False),
    "rig_check_node_modules": (["for d in .node_modules .node_libraries; do mkdir -p ~/$d"
                                " && echo 'process.exit(0)' > ~/$d/pr-hostile.js; done"],
                               "node -e \"require('pr-hostile'); process.exit(3)\"", False),
    "io_uring_and_mount_api": ([f"python3 -c '{NEW_SYSCALLS}'"], GOT_IT, False),
    "aio_contexts": ([f"python3 -c '{AIO_CONTEXTS}'"], GOT_IT, False),
    "write_sandbox_folders": ([WRITE_SANDBOX_FOLDERS], GOT_IT, False),
}

#: rows that must never run without a bound only a cgroup gives: row -> the controller. The
#: fork bomb with no pids cgroup is bounded by nothing but the host's pid_max (RLIMIT_NPROC
#: counts the uid host-wide): it would starve the machine, a CI runner's included. The memory
#: hog is one process, which RLIMIT_AS bounds where no memory cgroup does (the provider's
#: fallback), and the tmpfs folders are sized from memory_mb either way.
NEEDS_CGROUP = {"fork_bomb": "pids"}
#: rows whose check runs a program the guest may not have, with it: without it the check
#: fails whatever the answer did, so the row would prove nothing and is left out
NEEDS_PROGRAM = {"rig_check_curlrc": "curl", "rig_check_jq": "jq", "rig_check_sqliterc": "sqlite3",
                 "rig_check_magic": "file", "rig_check_wgetrc": "wget", "rig_check_psqlrc": "psql",
                 "rig_check_node_modules": "node"}
#: program -> an honest task's check of it through its wrapper: the real program runs, arguments
#: and all, on what the task's answer wrote (~/a.json, ~/t.db), where its row is not left out
HONEST_TOOLS = {
    "jq": "jq -e '.a == 2' ~/a.json",
    "sqlite3": "[ \"$(sqlite3 ~/t.db 'select x from t')\" = 4 ]",
    "curl": "curl -sf \"file://$HOME/a.json\" | grep -q '\"a\"'",
    "file": "file -b ~/a.json | grep -q JSON",
    "wget": f"python3 -c '{SERVE_HOME}' wget -qO- http://127.0.0.1:8765/a.json | grep -q '\"a\"'",
    "psql": f"[ \"$(python3 -c '{PG_SERVER}' psql -tAc 'select 4')\" = 4 ]",
    # the home and its HOME are still the answer's (the wrapper only hides its global folders)
    "node": "node -e 'const os = require(\"os\"); process.exit(process.env.HOME === os.homedir()"
            " && require(os.homedir() + \"/a.json\").a === 2 ? 0 : 1)'",
}
#: an honest task's check that needs none of them: the wrappers come first on a check's PATH
HONEST_WRAPPERS = " && ".join(f'[ "$(command -v {p})" = /opt/parallel-rollout/grading_bin/{p} ]'
                              for p in NEEDS_PROGRAM.values())


#: rows whose program cannot start in a table's VM (256 MB) where RLIMIT_AS is its bound (the
#: provider's where no memory cgroup is, as nobody's runs here): node reserves ~1 GB of address
#: space at start (V8's code range), and dies of SIGTRAP
NEEDS_ADDRESS_SPACE = {"rig_check_node_modules": "node cannot start under RLIMIT_AS of 256 MB, a VM's "
                                                 "memory bound without a memory cgroup"}


def rows_without_programs(where: str, has=shutil.which) -> dict[str, str]:
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
PY_ROWS = {
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
PY_ROW_TESTS = {"shadow_a_module_of_the_tests": (
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


def shell_tasks(port: int, leave_out=()) -> list[dict]:
    """The table's rows but ``leave_out``, then two honest tasks."""
    tasks = []
    for name, (commands, check, _) in SHELL_ROWS.items():
        if name in leave_out:
            continue
        tasks.append({"id": name, "mode": "shell", "instruction": f"hostile: {name}",
                      "reference": [c.replace("PORT", str(port)) for c in commands],
                      "check": check, "timeout": 5})
    # honest tasks after the hostile ones: the same (reset) VMs still work
    for index in range(2):
        tasks.append({"id": f"honest{index}", "mode": "shell", "instruction": "make ok",
                      "reference": ["touch ~/ok"], "check": GOT_IT, "timeout": 30})  # a loaded machine: no hurry
    tasks.append({"id": "honest_wrappers", "mode": "shell", "instruction": "nothing",
                  "reference": ["true"], "check": HONEST_WRAPPERS, "timeout": 30})
    tools = [program for row, program in NEEDS_PROGRAM.items() if row not in leave_out]
    if tools:
        table = ["sqlite3 ~/t.db 'create table t(x); insert into t values (4);'"] if "sqlite3" in tools else []
        tasks.append({"id": "honest_tools", "mode": "shell", "instruction": "a JSON file and a table",
                      "reference": ["echo '{\"a\": 2}' > ~/a.json", *table],
                      "check": " && ".join(HONEST_TOOLS[program] for program in tools), "timeout": 30})
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


def run_pool(tmp: Path, mode: str, tasks: list[dict], **flags) -> tuple[dict, dict, int]:
    """``tasks`` through a real pool (the oracle, two VMs of 256 MB; ``flags`` override):
    (final records by key, summary, exit code)."""
    data = write_tasks(tmp / f"{mode}.jsonl", tasks)
    config = dict(mode=mode, data=str(data), agent="oracle", num_rollouts=2, num_vms=2,
                  use_vm_pool=True, output_dir=str(tmp / "out"), run_id=f"hostile-{mode}",
                  progress=False, vm_memory_mb=256)
    if flags.get("provider_name", "process") == "process" and "pids" in cgroups.available():
        config["vm_max_processes"] = 128
    config.update(flags)
    outcome = Runner(build_config(config)).run()
    finals = assert_exactly_once(outcome.run_dir, {f"{t['id']}#0" for t in tasks})
    return finals, outcome.summary, outcome.exit_code


def run_table(tmp: Path, left_out: dict[str, str], **flags) -> dict:
    """The shell table but the rows ``left_out`` (row -> why) through a pool, with a
    loopback server of the host to reach: what a provider's table checks."""
    server = LoopbackServer()
    marks = _host_marks()
    try:
        finals, summary, code = run_pool(tmp, "shell", shell_tasks(server.port, left_out), **flags)
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


@pytest.fixture(scope="module")
def shell_table(loopback, tmp_path_factory):
    marks = _host_marks()
    left_out = unbounded_rows()
    finals, summary, code = run_pool(tmp_path_factory.mktemp("shell"), "shell",
                                     shell_tasks(loopback.port, left_out))
    return {"finals": finals, "summary": summary, "exit_code": code, "marks_before": marks,
            "left_out": left_out}


@pytest.fixture(scope="module")
def py_table(tmp_path_factory):
    finals, summary, code = run_pool(tmp_path_factory.mktemp("py"), "py", py_tasks())
    return {"finals": finals, "summary": summary, "exit_code": code}


@pytest.mark.parametrize("name", list(SHELL_ROWS))
def test_hostile_shell_answer_is_graded_zero(shell_table, name):
    check_row(shell_table, name)


@pytest.mark.parametrize("user", ["runner", "nobody"])
@pytest.mark.parametrize("name", list(PY_ROWS))
def test_forged_py_verdict_is_graded_zero(request, user, name):
    # as nobody the judge shares the answer's uid: only its process (not dumpable) guards it
    table = request.getfixturevalue("py_table" if user == "runner" else "nobody_py_table")
    record = table["finals"][f"{name}#0"]
    assert record["status"] == "failure" and record["reward"] == 0.0, record
    assert record["eval"]["kind"] != "passed", record["eval"]


def test_the_host_is_untouched_and_the_runs_finished(shell_table, py_table, loopback):
    assert _host_marks() == shell_table["marks_before"], "a sandbox wrote under the host's /usr"
    assert loopback.connections == 0, "a sandbox reached the host's loopback"
    assert subprocess.run(["true"], timeout=10).returncode == 0  # the host still spawns
    for table in (shell_table, py_table):
        assert table["exit_code"] == 0
        honest = [r for key, r in table["finals"].items() if key.startswith("honest")]
        assert honest and all(r["status"] == "success" for r in honest), honest
    if IS_ROOT:
        # the agent is another user: no attack took a VM down, no replacement was spent
        for table in (shell_table, py_table):
            assert table["summary"]["vm"]["marked_dead"] == 0, table["summary"]["vm"]
            assert table["summary"]["vm"]["replacements"] == 0, table["summary"]["vm"]


# ------------------------------------------------------------------ as an unprivileged user


#: rows an unprivileged runner cannot contain without a delegated pids cgroup: the fork bomb
#: counts against the same RLIMIT_NPROC as the runner (one uid), so it starves the run itself
NOT_AS_NOBODY = {"fork_bomb": "no pids cgroup delegated to nobody on this machine (the test "
                              "delegates a cgroup v1 pids one; v2 delegation is the host's "
                              "business); RLIMIT_NPROC's cap is tested on its own below"}
#: what the whole run as nobody may hold at once, whatever its VMs' own limits
NOBODY_PIDS_MAX = 1000


@contextlib.contextmanager
def _delegated_pids_cgroup(uid: int, gid: int):
    """A cgroup v1 pids cgroup handed to ``uid`` (as a host delegates one to a user) with
    ``pids.max`` for the whole run, which nobody can raise; yields its cgroup.procs for the
    run to join, or None where there is no such hierarchy (cgroup v2: delegating there
    means moving this test's own processes, out of a test's reach)."""
    hierarchy = next((h for h in cgroups.hierarchies()
                      if h.version == 1 and "pids" in h.controllers), None)
    if hierarchy is None or "pids" not in cgroups.available():
        yield None
        return
    path = hierarchy.root / f"pr-hostile-nobody-{os.getpid()}"
    path.mkdir()
    try:
        (path / "pids.max").write_text(str(NOBODY_PIDS_MAX))
        for name in ("", "cgroup.procs", "tasks"):
            os.chown(path / name, uid, gid)
        yield path / "cgroup.procs"
    finally:
        inner = sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
        cgroups.remove_paths([str(p) for p in inner] + [str(path)], parents=False)


def _nobody_can_run() -> str | None:
    """Why the table cannot run as nobody here, or None."""
    if not IS_ROOT:
        return "the tests do not run as root: they already are an unprivileged user"
    if shutil.which("setpriv") is None:
        return "util-linux setpriv is missing"
    python = "/usr/bin/python3"
    if not os.access(python, os.X_OK):
        return "no system python3 for nobody (the venv's interpreter lives under /root, 0700)"
    version = subprocess.run([python, "-c", "import sys; print(sys.version_info[:2])"],
                             capture_output=True, text=True).stdout.strip()
    if version != str(tuple(sys.version_info[:2])):
        return f"the system python3 is {version}, the venv's {sys.version_info[:2]}"
    probe = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                            "bwrap", "--unshare-user", "--ro-bind", "/", "/", "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return f"bubblewrap cannot run as nobody here: {probe.stderr.strip()}"
    return None


def _run_as_nobody(mode: str, tasks: list[dict], join: Path | None = None, *flags: str,
                   agent: str = "oracle", memory_mb: int | None = 256):
    """The CLI run of ``tasks`` as nobody with ``agent`` (tests/ is on its path: the chaos
    agents) and ``--vm-memory-mb memory_mb`` (None: none), in the cgroup whose cgroup.procs
    is ``join`` (if any); yields {proc, finals, summary}."""
    nobody = pwd.getpwnam("nobody")
    work = Path(tempfile.mkdtemp(prefix="pr-hostile-nobody-"))
    os.chmod(work, 0o755)
    os.chown(work, nobody.pw_uid, nobody.pw_gid)
    data = write_tasks(work / f"{mode}.jsonl", tasks)
    (work / "chaos").mkdir()
    os.chown(work / "chaos", nobody.pw_uid, nobody.pw_gid)
    site = next(p for p in sys.path if p.endswith("site-packages") and "/.venv/" in p)
    env = {**os.environ, "HOME": str(work), "PYTHONPATH": f"{ROOT / 'src'}:{ROOT / 'tests'}:{site}",
           "PARALLEL_ROLLOUT_PROCESS_DIR": str(work / "vms"), "PR_CHAOS_DIR": str(work / "chaos")}
    # nobody has no cgroup of its own: RLIMIT_NPROC (per uid) keeps a runaway from loading
    # the machine, and --vm-memory-mb falls back to RLIMIT_AS per process
    enter = ["/bin/sh", "-c", 'echo $$ > "$1" && shift && exec "$@"', "join", str(join)] \
        if join else []
    argv = [*enter, "prlimit", "--nproc=2000", "--",
            "setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups",
            "/usr/bin/python3", "-m", "parallel_rollout.cli", "run", "--mode", mode,
            *(("--vm-memory-mb", str(memory_mb)) if memory_mb is not None else ()),
            "--data", str(data), "--agent", agent, "--num-rollouts", "2", "--num-vms", "2",
            "--use-vm-pool", "--output-dir", str(work / "out"), "--run-id", "hostile-nobody",
            "--no-progress", *flags]
    try:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300,
                              cwd=work)
        finals = assert_exactly_once(work / "out" / "hostile-nobody",
                                     {f"{t['id']}#0" for t in tasks})
        summary = json.loads((work / "out" / "hostile-nobody" / "summary.json").read_text())
        yield {"proc": proc, "finals": finals, "summary": summary,
               "run_dir": work / "out" / "hostile-nobody"}
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def nobody_table(loopback):
    why = _nobody_can_run()
    if why:
        pytest.skip(why)
    nobody = pwd.getpwnam("nobody")
    with _delegated_pids_cgroup(nobody.pw_uid, nobody.pw_gid) as join:
        left_out = {**unbounded_rows(), **NEEDS_ADDRESS_SPACE, **({} if join else NOT_AS_NOBODY)}
        tasks = shell_tasks(loopback.port, left_out)
        flags = ("--vm-max-processes", "128") if join else ()
        for table in _run_as_nobody("shell", tasks, join, *flags):
            yield {**table, "left_out": left_out}


@pytest.fixture(scope="module")
def nobody_py_table():
    why = _nobody_can_run()
    if why:
        pytest.skip(why)
    yield from _run_as_nobody("py", py_tasks())


@pytest.mark.parametrize("name", list(SHELL_ROWS))
def test_hostile_shell_answer_as_nobody(nobody_table, name):
    check_row(nobody_table, name)


def test_an_agent_killed_by_its_own_answer_is_that_tasks_sandbox_violation(nobody_table):
    """As nobody the answer shares its agent's uid and kills it (the kill_agent row): a VM
    broken from inside, so the task's ``sandbox_violation``, graded 0 and not retried; no
    cause outside the task is claimed (a VM killed from outside is retried instead:
    test_crash, tests/chaos/test_random_kills.py)."""
    record = nobody_table["finals"]["kill_agent#0"]
    assert record["status"] == "sandbox_violation" and record["reward"] == 0.0, record
    assert not record["infrastructure"] and record["attempt"] == 0, record
    assert "broke during the task's action" in record["failure"]["message"], record["failure"]


def test_the_runs_as_nobody_finished(nobody_table, nobody_py_table, loopback):
    for table in (nobody_table, nobody_py_table):
        proc = table["proc"]
        assert proc.returncode == 0, proc.stderr[-2000:]
        honest = [r for key, r in table["finals"].items() if key.startswith("honest")]
        assert honest and all(r["status"] == "success" for r in honest), honest
    assert loopback.connections == 0
    assert not _host_marks()


def test_a_sandbox_killed_from_outside_is_retried_as_nobody():
    """As nobody, a sandbox killed from outside under a task (its bwrap and every process of
    it, SIGKILLed by the same user: an operator, a crashing provider) is infrastructure,
    retried on another VM, its cause recorded, and the task succeeds: the task's code, in the
    sandbox's pid namespace, cannot signal bwrap. (Its agent alone, killed from outside,
    cannot be told from the code's own kill as nobody: README, "What the sandbox is, and is
    not"; the kill_agent row above is that task's.)"""
    why = _nobody_can_run()
    if why:
        pytest.skip(why)
    tasks = [shell_task(f"t{i}") for i in range(3)]
    tasks[1]["chaos"] = "kill_sandbox"
    for table in _run_as_nobody("shell", tasks, None, "--vm-max-processes", "128",
                                "--max-retries", "2", agent="chaos_plugins:ChaosAgent"):
        assert table["proc"].returncode == 0, table["proc"].stderr[-2000:]
        finals = table["finals"]
        assert {key: r["status"] for key, r in finals.items()} == \
            {f"t{i}#0": "success" for i in range(3)}, finals
        first = [r for r in read_results(table["run_dir"]) if r["key"] == "t1#0"][0]
        failure = first["failure"]
        assert first["infrastructure"] and first["attempt"] == 0 and not first["final"], first
        assert failure["type"] == "VMKilled" and "killed from outside" in failure["message"], failure
        assert "its bwrap" in failure["message"] and "SIGKILL" in failure["message"], failure
        assert finals["t1#0"]["attempt"] == 1


def test_without_a_memory_cgroup_nobody_is_told_its_vms_have_no_memory_limit():
    """A runner that is not root has no memory cgroup here (none is delegated to nobody), and
    an unprivileged user has no other way to bound a sandbox's total memory: no default limit
    applies (a default RLIMIT_AS per process would break browsers), and the run says so on
    the console; with --vm-memory-mb a memory hog is stopped (the memory_hog row as nobody)."""
    why = _nobody_can_run()
    if why:
        pytest.skip(why)
    tasks = [t for t in FLOOD_TASKS if t["id"] == "honest0"]
    for table in _run_as_nobody("shell", tasks, None, "--vm-max-processes", "128", memory_mb=None):
        proc = table["proc"]
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert table["finals"]["honest0#0"]["status"] == "success", table["finals"]
        assert "the VMs have no memory limit; --vm-memory-mb sets one" in proc.stderr, proc.stderr[-2000:]


#: forks sleepers until the cap refuses one; writes how many it got
COUNT_FORKS = ("import os, time\nn = 0\nfor _ in range(400):\n    try:\n        pid = os.fork()\n"
               "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(60)\n"
               "        os._exit(0)\n    n += 1\nopen(os.path.expanduser('~/n'), 'w').write(str(n))\n")


def _skip_unless_nproc_caps_a_sandbox_as_nobody() -> None:
    """Skip unless the tests can run as nobody and RLIMIT_NPROC caps nobody's sandboxes."""
    why = _nobody_can_run()
    if why:
        pytest.skip(why)
    if not subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                           sys.executable, "-c", "from parallel_rollout.pool.providers import "
                           "cgroups; raise SystemExit(not cgroups.nproc_caps_a_sandbox())"],
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")}).returncode == 0:
        pytest.skip("RLIMIT_NPROC does not cap a sandbox here (Linux before 5.14)")


def test_without_a_pids_cgroup_rlimit_nproc_caps_each_vm_as_nobody(loopback):
    """A runner that is not root and has no pids cgroup (nobody here: the v1 hierarchy is
    root's) caps each VM with RLIMIT_NPROC in the sandbox's user namespace: a task gets fewer
    than --vm-max-processes 128 processes even though nobody runs more than that on the
    host, a fork bomb is contained, and the run finishes."""
    _skip_unless_nproc_caps_a_sandbox_as_nobody()
    tasks = [{"id": "count_forks", "mode": "shell", "instruction": "fork until refused",
              "reference": [f"python3 -c \"{COUNT_FORKS}\" >/dev/null 2>&1 </dev/null"], "timeout": 20,
              "check": 'n=$(cat ~/n) && [ "$n" -ge 50 ] && [ "$n" -lt 128 ]'},
             *[t for t in shell_tasks(loopback.port) if t["id"] in ("fork_bomb", "honest0")]]
    for table in _run_as_nobody("shell", tasks, None, "--vm-max-processes", "128"):
        proc = table["proc"]
        assert proc.returncode == 0, proc.stderr[-2000:]
        finals = table["finals"]
        assert finals["count_forks#0"]["status"] == "success", finals["count_forks#0"]
        assert finals["fork_bomb#0"]["reward"] == 0.0 and finals["honest0#0"]["status"] == "success"
        assert table["summary"]["vm"]["marked_dead"] == 0, table["summary"]["vm"]


#: forks sleepers until refused (at most 3000), says how many, and holds them a while
HOLD_FORKS = ("import os, time\nn = 0\nwhile n < 3000:\n    try:\n        pid = os.fork()\n"
              "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(20)\n"
              "        os._exit(0)\n    n += 1\nopen(os.path.expanduser('~/n'), 'w').write(str(n))\n"
              "time.sleep(10)\n")


@pytest.mark.slow
def test_one_vm_cannot_take_the_runners_process_limit_as_nobody():
    """As nobody without a pids cgroup, every sandbox's processes also count against the
    runner's own RLIMIT_NPROC (2000 here): a VM's default cap is its share of it (the
    limit split among the pool's two VMs and the runner: cgroups.nproc_share), so a task
    forking all it can leaves the other VM room to start its commands. At 4096 per VM the
    first took the 2000 whole and the other VM's commands failed to start."""
    _skip_unless_nproc_caps_a_sandbox_as_nobody()
    share = 2000 // 3
    tasks = [{"id": "hog", "mode": "shell", "instruction": "fork all you can", "timeout": 40,
              "reference": [f"python3 -c \"{HOLD_FORKS}\" >/dev/null 2>&1 </dev/null"],
              "check": f'n=$(cat ~/n) && [ "$n" -ge 50 ] && [ "$n" -le {share} ]'},
             {"id": "victim", "mode": "shell", "instruction": "start 50 processes", "timeout": 40,
              "reference": ["sleep 4; for i in $(seq 50); do sleep 5 & done; wait && touch ~/ok"],
              "check": GOT_IT}]
    for table in _run_as_nobody("shell", tasks):
        assert table["proc"].returncode == 0, table["proc"].stderr[-2000:]
        finals = table["finals"]
        assert finals["hog#0"]["status"] == "success", finals["hog#0"]
        assert finals["victim#0"]["status"] == "success", finals["victim#0"]
        first, second = sorted(finals.values(), key=lambda record: record["started_at"])
        assert first["vm"] != second["vm"] and second["started_at"] < first["ended_at"], (first, second)


@pytest.mark.slow
def test_200_tasks_50_hostile_on_two_vms(tmp_path, loopback):
    """The acceptance run of issue 16: 200 shell tasks of which 50 are hostile (the table's
    rows in turn), M=2: every hostile one 0, every honest one 1, no VM budget spent."""
    left_out = unbounded_rows()
    rows = [t for t in shell_tasks(loopback.port, left_out) if not t["id"].startswith("honest")]
    tasks = []
    for index in range(200):
        if index % 4 == 0:
            row = dict(rows[(index // 4) % len(rows)])
            row["id"] = f"hostile{index}-{row['id']}"
        else:
            row = {"id": f"honest{index}", "mode": "shell", "instruction": "make ok",
                   "reference": ["touch ~/ok"], "check": GOT_IT, "timeout": 5}
        tasks.append(row)
    finals, summary, code = run_pool(tmp_path, "shell", tasks, num_rollouts=4)
    assert code == 0
    for key, record in finals.items():
        expected = 0.0 if key.startswith("hostile") else 1.0
        assert record["reward"] == expected, record
    assert summary["vm"]["replacements"] == 0 and summary["vm"]["marked_dead"] == 0
    assert loopback.connections == 0 and not _host_marks()


# ------------------------------------------------- what one VM may cost (issue 24, 2 and 3)


#: an answer that prints 1 GB, then a line the kept tail ends with
FLOOD = "head -c 1000000000 /dev/zero | tr '\\0' x; echo; echo END-OF-FLOOD"
#: the most memory any process of the run (a worker, the pool, a guest agent) may hold
#: while an answer floods its output
FLOOD_RSS_MB = 200


class PeakRss:
    """The largest RSS each process below this one reached while the block ran, sampled
    every 20 ms."""

    def __init__(self) -> None:
        self.peaks: dict[int, tuple[int, str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(0.02):
            for proc in me.children(recursive=True):
                try:
                    rss = proc.memory_info().rss
                    if rss > self.peaks.get(proc.pid, (0, ""))[0]:
                        self.peaks[proc.pid] = (rss, " ".join(proc.cmdline())[:200])
                except psutil.Error:
                    pass

    def __enter__(self) -> "PeakRss":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def over(self, limit_mb: int) -> list[tuple[int, str]]:
        """(MB, command line) of every process that went over ``limit_mb``."""
        return [(rss >> 20, cmd) for rss, cmd in self.peaks.values() if rss >> 20 > limit_mb]


def _observations(run_dir: Path, task: str) -> list[dict]:
    lines = []
    for path in sorted(run_dir.glob(f"trajectories/{task}/*/attempt-*.jsonl")):
        lines += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return lines


FLOOD_TASKS = [{"id": "flood", "mode": "shell", "instruction": "print a lot",
                "reference": [FLOOD], "check": "true", "timeout": 120},
               {"id": "honest0", "mode": "shell", "instruction": "make ok",
                "reference": ["touch ~/ok"], "check": GOT_IT, "timeout": 30}]


def _check_flood(peaks: PeakRss, finals: dict, run_dir: Path) -> None:
    assert finals["flood#0"]["status"] == "success", json.dumps(finals["flood#0"])[:3000]
    assert finals["honest0#0"]["status"] == "success", finals["honest0#0"]
    outputs = [str(turn) for turn in _observations(run_dir, "flood")]
    assert any("END-OF-FLOOD" in text for text in outputs), outputs[:1]
    assert len(max(outputs, key=len)) < 20_000, "more than the kept tail reached the record"
    assert not peaks.over(FLOOD_RSS_MB), peaks.over(FLOOD_RSS_MB)
    assert peaks.peaks, "no process of the run was seen"


@pytest.mark.parametrize("user", ["runner", "nobody"])
def test_an_output_flood_costs_no_process_its_size(tmp_path, user):
    """An answer printing 1 GB: the guest agent and the worker read it as it comes and keep
    the tail (which ends with what it printed last); no process of the run holds more than
    200 MB, and the run goes on."""
    if user == "runner":
        with PeakRss() as peaks:
            data = write_tasks(tmp_path / "flood.jsonl", FLOOD_TASKS)
            outcome = Runner(build_config(dict(
                mode="shell", data=str(data), agent="oracle", num_rollouts=1, num_vms=1,
                use_vm_pool=True, output_dir=str(tmp_path / "out"), run_id="flood",
                progress=False))).run()
        finals = assert_exactly_once(outcome.run_dir, {"flood#0", "honest0#0"})
        _check_flood(peaks, finals, outcome.run_dir)
        return
    why = _nobody_can_run()
    if why:
        pytest.skip(why)
    with PeakRss() as peaks:
        # the runner's hard RLIMIT_NPROC (2000) is below the default cap of a VM (4096)
        for table in _run_as_nobody("shell", FLOOD_TASKS, None, "--vm-max-processes", "128"):
            assert table["proc"].returncode == 0, table["proc"].stderr[-2000:]
            _check_flood(peaks, table["finals"], table["run_dir"])


def test_a_vm_has_a_memory_limit_by_default(tmp_path):
    """Without --vm-memory-mb a shell VM is bounded too (base.default_memory_mb: min(2048 MB,
    80% of the host / M)): an answer that takes 500 MB more than that is killed, not given
    it, and the VM serves the next task."""
    if not IS_ROOT or "memory" not in cgroups.available():
        pytest.skip("the default limit is a memory cgroup's: none here"
                    + ("" if IS_ROOT else " for an unprivileged runner"))
    limit = default_memory_mb(1)
    hog = {"id": "hog", "mode": "shell", "instruction": "take memory", "timeout": 60,
           "reference": [f"python3 -c 'b = []\nfor _ in range({limit // 100 + 5}): "
                         "b.append(bytearray(100 << 20))' && touch ~/ok"], "check": GOT_IT}
    finals, summary, code = run_pool(tmp_path, "shell", [hog, FLOOD_TASKS[1]], vm_memory_mb=None,
                                     num_vms=1, num_rollouts=1)
    assert code == 0
    assert finals["hog#0"]["status"] == "failure" and finals["hog#0"]["reward"] == 0.0, finals["hog#0"]
    assert finals["honest0#0"]["status"] == "success", finals["honest0#0"]
    assert summary["vm"]["marked_dead"] == 0, summary["vm"]


@pytest.mark.parametrize("flags, vms", [
    (dict(mode="shell", num_rollouts=64), 64),  # a VM per worker: --num-rollouts VMs
    (dict(mode="shell", num_vms=64, use_vm_pool=True), 64),
    (dict(mode="py", num_vms=200, use_vm_pool=True), 200),  # py's own 2048 MB, never beyond the share
])
def test_the_default_memory_is_sized_from_the_pools_vms(flags, vms):
    """The default limit shares the host among the VMs the pool really boots: with one VM
    per worker that is --num-rollouts (it was sized from --num-vms, 3 by default, whatever
    the number of VMs), and the py mode's 2048 MB is no exception."""
    from parallel_rollout.envs.registry import get_env
    from parallel_rollout.pool.providers import provider_options
    from parallel_rollout.pool.providers.process import ProcessProvider

    config = build_config(flags)
    options = provider_options(config, ProcessProvider, [get_env(flags["mode"])])
    share = default_memory_mb(vms)
    assert options.default_memory_mb == share
    if flags["mode"] == "py" and "memory_mb" in ProcessProvider.supported_limits():
        assert options.memory_mb == min(2048, share)


#: takes every inotify instance its user may have, says how many, and holds them a while
HOLD_INOTIFY = ("import ctypes, os, time\nlibc = ctypes.CDLL(None, use_errno=True)\nn = 0\n"
                "while n < 100000 and libc.inotify_init() >= 0:\n    n += 1\n"
                "open(os.path.expanduser(\"~/n\"), \"w\").write(str(n))\ntime.sleep(8)\n")


def test_one_vm_cannot_take_another_vms_per_user_limits(tmp_path):
    """Two VMs at once, each task takes every inotify instance its user may hold (128 by
    default) and keeps them: as root each VM's commands have a uid of their own
    (sandbox_uids.py), so both get (nearly) all of them. With one uid for every VM the
    second got none ("inotify_init: Too many open files")."""
    if not IS_ROOT:
        pytest.skip("an unprivileged runner's VMs share its uid: per-user kernel limits are "
                    "the runner's, split by nothing (README, 'What the sandbox is, and is not')")
    check_own_per_user_limits(*run_pool(tmp_path, "shell", hold_inotify_tasks()))


def hold_inotify_tasks() -> list[dict]:
    """Two tasks that each take every inotify instance their user may hold, and pass only
    if they got at least three quarters of them."""
    limit = int(Path("/proc/sys/fs/inotify/max_user_instances").read_text())
    return [{"id": f"hold{i}", "mode": "shell", "instruction": "hold inotify instances",
             "reference": [f"python3 -c '{HOLD_INOTIFY}'"], "timeout": 30,
             "check": f'n=$(cat ~/n) && [ "$n" -ge {limit * 3 // 4} ]'} for i in range(2)]


def check_own_per_user_limits(finals: dict, summary: dict, code: int) -> None:
    """Both hold_inotify_tasks succeeded, on two VMs at once (not one after the other)."""
    assert code == 0
    for key, record in finals.items():
        assert record["status"] == "success", record
    first, second = sorted(finals.values(), key=lambda record: record["started_at"])
    assert first["vm"] != second["vm"] and second["started_at"] < first["ended_at"], (first, second)


#: takes every pseudo-terminal it can, says how many, and holds them a while
HOLD_PTYS = ("import os, time\nfds = []\nwhile len(fds) < 5000:\n    try:\n"
             "        fds.append(os.openpty())\n    except OSError:\n        break\n"
             "open(os.path.expanduser(\"~/n\"), \"w\").write(str(len(fds)))\ntime.sleep(8)\n")


def hold_pty_tasks() -> list[dict]:
    """Two tasks that each take every pseudo-terminal they can and hold them: each passes
    only if it got its VM's share (sandbox_fs.MAX_PTYS), no more and not much less."""
    from parallel_rollout.pool.providers.sandbox_fs import MAX_PTYS

    return [{"id": f"hold{i}", "mode": "shell", "instruction": "hold ptys",
             "reference": [f"python3 -c '{HOLD_PTYS}'"], "timeout": 30,
             "check": f'n=$(cat ~/n) && [ "$n" -ge {MAX_PTYS * 3 // 4} ] && [ "$n" -le {MAX_PTYS} ]'}
            for i in range(2)]


@pytest.mark.parametrize("user", ["runner", "nobody"])
def test_one_vm_cannot_take_the_machines_ptys(tmp_path, user):
    """Two VMs at once, each task takes every pseudo-terminal it can and keeps them. The
    kernel's pty.max is one pool for every sandbox of the machine (3072 beyond the host's
    reserve): before each sandbox's devpts had a cap of its own, the first took them all
    and the second got none ("openpty: No space left on device")."""
    if user == "runner":
        check_own_per_user_limits(*run_pool(tmp_path, "shell", hold_pty_tasks()))
        return
    why = _nobody_can_run()
    if why:
        pytest.skip(why)
    for table in _run_as_nobody("shell", hold_pty_tasks(), None, "--vm-max-processes", "128"):
        assert table["proc"].returncode == 0, table["proc"].stderr[-2000:]
        check_own_per_user_limits(table["finals"], table["summary"], 0)


def test_the_pty_cap_never_remounts_the_hosts_devpts():
    """The cap is a remount, which changes a devpts for every mount of it: asked of a
    process that shares the host's /dev/pts (this one), it refuses and leaves it as it was."""
    from parallel_rollout.pool.providers.sandbox_fs import cap_ptys

    before = [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if "devpts" in line]
    why = cap_ptys(os.getpid(), own_userns=not IS_ROOT)
    assert why and "host's" in why, why
    after = [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if "devpts" in line]
    assert after == before


@pytest.mark.skipif(not IS_ROOT, reason="a runner that is not root caps by nsenter")
def test_the_pty_cap_from_a_thread_caps_the_sandbox_and_leaves_the_runner_where_it_was(monkeypatch):
    """As root the cap is remounted from a thread of the runner that joins the sandbox's
    mount namespace and root (no nsenter, no mount program: ~5 ms of every boot). The
    sandbox's devpts gets the cap; the process (its other threads, and threads it starts
    later) stays in its own namespace, root and folder, with its own devpts untouched."""
    from parallel_rollout.pool.providers import sandbox_fs
    from parallel_rollout.pool.providers.process import ProcessProvider

    def no_programs(*args, **kwargs):
        raise AssertionError(f"ran a program: {args}")

    def seen_by_a_new_thread() -> list[str]:
        seen: list[str] = []
        thread = threading.Thread(target=lambda: seen.extend(
            [os.readlink("/proc/thread-self/ns/mnt"), os.readlink("/proc/thread-self/root"), os.getcwd()]))
        thread.start()
        thread.join()
        return seen

    def devpts(pid: int | str) -> list[str]:
        return [line.split(" - ")[1] for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
                if " /dev/pts " in line]

    provider = ProcessProvider("pty-cap-thread")
    info = provider.start("vm0")
    try:
        here = [os.readlink("/proc/self/ns/mnt"), os.readlink("/proc/self/root"), os.getcwd()]
        own_devpts = devpts("self")
        monkeypatch.setattr(sandbox_fs.subprocess, "run", no_programs)
        assert sandbox_fs.cap_ptys(info.private["init_pid"], own_userns=False, limit=17) is None
        assert any("max=17" in line for line in devpts(info.private["init_pid"])), devpts(info.private["init_pid"])
        assert [os.readlink("/proc/self/ns/mnt"), os.readlink("/proc/self/root"), os.getcwd()] == here
        assert seen_by_a_new_thread() == here
        assert devpts("self") == own_devpts
        assert not sandbox_fs._thread_failed
    finally:
        provider.stop(info)


#: a daemon of the answer (as an osworld task leaves one: no /reap there) that watches /tmp
#: and, for every file the agent makes there, notes its name, copies what it says and
#: rewrites it to print FORGED: what a grading script written to /tmp met (issue 24)
SCRIPT_WATCHER = textwrap.dedent("""\
    import ctypes, os, struct, time
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init()
    libc.inotify_add_watch(fd, b"/tmp", 0x100 | 0x4)  # IN_CREATE, IN_ATTRIB (the agent's chown)
    home = os.path.expanduser("~")
    open(home + "/watching", "w").close()
    forged = set()
    while True:
        data = os.read(fd, 65536)
        offset = 0
        while offset < len(data):
            _, _, _, size = struct.unpack_from("iIII", data, offset)
            name = data[offset + 16:offset + 16 + size].rstrip(b"\\0").decode()
            offset += 16 + size
            open(home + "/seen", "a").write(name + "\\n")
            deadline = time.monotonic() + 0.5
            while name not in forged and time.monotonic() < deadline:
                try:
                    with open("/tmp/" + name, "r+") as handle:
                        open(home + "/stolen", "a").write(handle.read())
                        handle.seek(0)
                        handle.truncate()
                        handle.write("print(\\"FORGED\\")\\n")
                    forged.add(name)
                except PermissionError:  # not the user's yet: the agent chowns it next
                    continue
                except OSError:  # gone
                    break
""")
#: one VM of the process provider, the watcher started in it, then grading scripts run:
#: prints what they printed, what the watcher saw in /tmp, and whether it read one
SCRIPT_RACE = textwrap.dedent("""\
    import json, sys, time
    from parallel_rollout.guest.client import GuestClient
    from parallel_rollout.pool.providers.process import ProcessProvider
    provider = ProcessProvider("script-race")
    info = provider.start("vm0")
    try:
        client = GuestClient(info.address)
        client.execute(["sh", "-c", "setsid python3 -c \\"$0\\" >/dev/null 2>&1 </dev/null &", sys.argv[1]])
        deadline = time.monotonic() + 20
        while client.execute("test -e ~/watching", shell=True)["returncode"]:
            assert time.monotonic() < deadline, "the watcher never started"
            time.sleep(0.05)
        outputs = [client.run_python("print(\\"TESTS-\\" + \\"%d\\")" % i, isolated=True)["output"].strip()
                   for i in range(3)]
        outputs.append(client.run_bash_script("echo TESTS-bash", isolated=True)["output"].strip())
        seen = client.execute("cat ~/seen", shell=True)["output"].split()
        stolen = "TESTS" in client.execute("cat ~/stolen", shell=True)["output"]
        print(json.dumps({"outputs": outputs, "seen": seen, "stolen": stolen}))
    finally:
        provider.stop(info)
""")


def _provider_script(user: str, code: str, *args: str) -> dict:
    """Run ``code`` (which starts VMs of the process provider itself) as ``user`` (the
    runner, or nobody through setpriv), with ``args``; the JSON of its last line."""
    argv = [sys.executable, "-c", code, *args]
    work = Path(tempfile.mkdtemp(prefix="pr-hostile-"))  # short: a socket's path must fit
    env = {**os.environ, "PARALLEL_ROLLOUT_PROCESS_DIR": str(work / "vms"),
           "PR_HOSTILE_MARK": "runner-secret"}
    if user == "nobody":
        why = _nobody_can_run()
        if why:
            pytest.skip(why)
        nobody = pwd.getpwnam("nobody")
        site = next(p for p in sys.path if p.endswith("site-packages") and "/.venv/" in p)
        os.chown(work, nobody.pw_uid, nobody.pw_gid)
        env.update(PYTHONPATH=f"{ROOT / 'src'}:{site}", HOME=str(work),
                   PARALLEL_ROLLOUT_PROCESS_DIR=str(work / "vms"))
        argv = ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups",
                "/usr/bin/python3", *argv[1:]]
    try:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("user", ["runner", "nobody"])
def test_a_grading_script_is_out_of_reach_of_a_daemon_of_the_answer(user):
    """A grading script (the py judge with its tests, an osworld getter) reaches its
    interpreter as a sealed memfd: a daemon of the answer watching /tmp sees no file of it,
    reads nothing and rewrites nothing. Written to /tmp and given to the commands' user, it
    was read and rewritten to print a forged answer before the interpreter opened it."""
    seen = _provider_script(user, SCRIPT_RACE, SCRIPT_WATCHER)
    assert seen["outputs"] == ["TESTS-0", "TESTS-1", "TESTS-2", "TESTS-bash"], seen
    assert not seen["stolen"] and not any(name.startswith("guest_exec_") for name in seen["seen"]), seen


#: a VM whose command reads the namespace init's environment and writes 8 MB to its stderr
#: (/proc/1: bwrap's own process, as another user than root the commands' uid): what the
#: command saw, and how big the VM's agent.log on the host's disk grew
THROUGH_THE_INIT = textwrap.dedent("""\
    import json, os
    from parallel_rollout.guest.client import GuestClient
    from parallel_rollout.pool.providers.process import ProcessProvider
    provider = ProcessProvider("init")
    info = provider.start("vm0")
    try:
        client = GuestClient(info.address)
        seen = client.execute("tr '\\\\0' '\\\\n' < /proc/1/environ; "
                              "head -c 8000000 /dev/zero > /proc/1/fd/2", shell=True, timeout=60)
        size = os.path.getsize(os.path.join(info.private["vm_dir"], "agent.log"))
        print(json.dumps({"environ": seen["output"], "log_bytes": size}))
    finally:
        provider.stop(info)
""")


@pytest.mark.parametrize("user", ["runner", "nobody"])
def test_the_namespace_init_holds_neither_the_runners_environment_nor_a_file(user):
    """bwrap's init (pid 1 of the sandbox) runs as the commands' uid when the runner is not
    root, so they can read its environment and write to its stdout and stderr. It holds an
    environment of its own (not the runner's: an API key), and a pipe that the provider
    copies into agent.log up to 1 MiB. It once held the runner's environment and agent.log
    itself: 8 MB written there reached the host's disk, and anything would have."""
    from parallel_rollout.pool.providers.sandbox_log import LOG_CAP

    seen = _provider_script(user, THROUGH_THE_INIT)
    assert "runner-secret" not in seen["environ"], seen["environ"]
    assert seen["log_bytes"] <= LOG_CAP + 200, seen["log_bytes"]


#: the answer points files of its home at what only root reads: the namespace init's
#: environment and a file of its own made unreadable; then the agent is asked for them
#: (/file, as an osworld getter fetches a file the answer wrote) and for the home's listing
ROOT_ONLY_THROUGH_A_SYMLINK = textwrap.dedent("""\
    import json
    from parallel_rollout.errors import VMError
    from parallel_rollout.guest.client import GuestClient, GuestRequestError
    from parallel_rollout.pool.providers.process import ProcessProvider
    provider = ProcessProvider("symlinks")
    info = provider.start("vm0")
    try:
        client = GuestClient(info.address)
        client.execute("ln -s /proc/1/environ ~/result.txt && mkdir ~/closed && "
                       "echo secret > ~/closed/f && chmod 000 ~/closed", shell=True)
        got = {}
        for name, call in (("symlink", lambda: client.read_file("~/result.txt")),
                           ("listing", lambda: client.list_directory("~/closed"))):
            try:
                got[name] = repr(call())
            except (GuestRequestError, VMError) as exc:
                got[name] = "refused: " + str(exc)
        print(json.dumps(got))
    finally:
        provider.stop(info)
""")


def test_the_agent_reads_a_graders_files_with_the_answers_rights():
    """As root the agent holds CAP_DAC_OVERRIDE: a file a grader fetches (/file), which the
    answer made a symlink to what only root may read (here the init's environment; on a host,
    /etc/docker/key.json or an ssh host key, bound in with /etc), was read and handed to the
    grader, and a folder the answer closed was listed. The agent now reads them as the
    commands' user: refused."""
    if not IS_ROOT:
        pytest.skip("as another user the agent has the commands' own rights")
    got = _provider_script("runner", ROOT_ONLY_THROUGH_A_SYMLINK)
    assert got["symlink"].startswith("refused") and "Permission denied" in got["symlink"], got
    assert "'f'" not in got["listing"], got


@pytest.mark.skipif(not IS_ROOT, reason="as another user the sandbox shares the runner's uid")
def test_grading_wrappers_the_sandboxs_user_cannot_run_are_a_clear_error(tmp_path, monkeypatch):
    from parallel_rollout.errors import ConfigError
    from parallel_rollout.pool.providers import process
    from parallel_rollout.pool.providers.base import ProviderOptions
    wrappers = tmp_path / "grading_bin"
    shutil.copytree(process.GRADING_BIN, wrappers)
    (wrappers / "jq").chmod(0o700)  # a checkout made under umask 077
    monkeypatch.setattr(process, "GRADING_BIN", wrappers)  # the readability check's list
    with pytest.raises(ConfigError, match=r"cannot read the guest's .*grading_bin/jq \(0o700\).*"
                                          r"chmod -R o\+rX"):
        process.ProcessProvider("hostile-wrappers")
    (wrappers / "jq").chmod(0o755)
    process.ProcessProvider("hostile-wrappers")
