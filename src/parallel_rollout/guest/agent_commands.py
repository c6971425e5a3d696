"""Commands of the guest agent: ``/execute``, ``/run_python``, ``/run_bash_script``, each run in
its own session so that a timeout kills the command's whole process group.

::

    route ──► run(argv) ── agent_spawn.spawn (a session of its own) ──► the command's process group
                                 │ outlives its timeout
                                 ▼
                         killpg(SIGKILL), then what it printed so far

A command that *runs but fails* is not an HTTP error: the answer is 200 with ``status:
"error"``, because the request itself was fine. Not found / not executable: returncode 127 /
126 (the shell's codes) with ``message: "command not found: ..."``; a timeout: ``timeout:
true``, the group's exit code (-9) and what was captured before the kill. A command that had
exited by the time the kill reached it (its own status, not SIGKILL's) answers that exit, no
timeout: a check that exited 0 as its deadline fired was graded "timed out".

**Who runs what.** With ``--run-as UID:GID`` (:data:`run_as`; the process provider as root,
docker, qemu) the agent keeps its own user and runs every command as that other,
unprivileged user, with no capabilities, an empty bounding set and no new privileges: from
its own fork (``agent_spawn.spawn(user=...)``) once it has given up what only a root command could use
(:data:`direct`, ``agent_server._seal``), else (a desktop agent) through util-linux ``setpriv``:
the graded code cannot signal, trace or replace the agent, and cannot reach
its socket (0600, in a folder it cannot write). Temp scripts and uploads are handed to that
user. A desktop (``desktop.py``) runs as that user too: its session, the apps it launches
and its helpers, all through :func:`as_user`. ``POST /reap`` (``agent_reap.py``) kills what a
task left running (daemons, a process that left its group) before its ``check`` runs. With ``--reap-all``
(given by a provider whose agent has a pid namespace or a VM of its own) it kills every
process of the commands' user (killed round after round from the agent itself, a process
group of theirs whole, until none is left: ``left`` in the answer counts any still alive), or without ``--run-as``
every process but the agent and the namespace's init.
Without ``--reap-all`` (an agent started on a shared host, e.g. a ``remote`` VM that is a
process on this machine) the agent is a child subreaper (``agent_server.py``) and /reap kills
only its own descendants, a daemon that left its session included (it was adopted by the
agent, not by the machine's init), then collects their zombies: never a process of the
machine it did not start.

**Commands that cannot start** because of what they hold are the command's failure, never
the agent's (a 500 would be taken for a broken VM): a shell command longer than one exec
argument may be (:data:`agent_scripts.MAX_ARG_BYTES`) is read by ``/bin/sh`` from a sealed script
(:class:`agent_scripts.Script`; ``$0`` is then the script's path), and an argument list past the system's
limit (E2BIG), a NUL byte or text no command line can carry is answered as exit code 126
with a message saying why.

**Limits.** ``--limit-as BYTES`` (:data:`limit_as`) runs every command under util-linux
``prlimit --as`` (RLIMIT_AS per process, inherited by its children), ``--limit-nproc N``
(:data:`limit_nproc`) under ``prlimit --nproc`` (RLIMIT_NPROC: in a user namespace of its own
it counts that namespace's processes of the uid, so it caps the VM; on a host it counts the
uid's processes host-wide); the agent itself stays unlimited so that a greedy command cannot
take the agent down with it.

**Output** is read as it comes and only its tail kept (``agent_output.py``): the request's
``tail`` (characters) or 8 MiB per stream; ``output_dropped`` / ``error_dropped`` say how
many bytes came before it.

**A process left holding the output.** A command that exits but leaves a process with its
stdout or stderr (``server &`` with no redirect, in its group or a session of its own) is
answered once it has exited and its pipes were read for ``agent_output.HELD_GRACE_S`` more:
its output, its exit code and ``note`` (:data:`HELD_NOTE`), no timeout. The process runs on,
as after a shell's prompt came back; what it writes is read and dropped
(``agent_output.DRAIN``: else it would die of SIGPIPE at its next line) until /reap
or the VM's reset. OSWorld's own ``/execute`` (``subprocess.run`` capturing the output) waits
for the pipes' end and answers a timeout after its 120 s; the answer's shape stays OSWorld's.

**Grading commands** (``isolated: true`` on ``/execute``, ``/run_python``,
``/run_bash_script``: a shell task's check, the py judge, the osworld getters, the reset
probe) run in an environment the graded code cannot change (``agent_grading.py``). A grading
script reaches its interpreter as a sealed memfd, never a file in /tmp that the graded code
could read or rewrite (:class:`agent_scripts.Script`).
"""

from __future__ import annotations

import os
import sys
import time

try:
    from . import agent_grading, agent_output, agent_scripts, agent_sessions, agent_spawn
    from .agent_http import HTTPError, Request, field, timeout_field
except ImportError:  # a sibling file in the guest, not a package
    import agent_grading  # type: ignore[no-redef]
    import agent_output  # type: ignore[no-redef]
    import agent_scripts  # type: ignore[no-redef]
    import agent_sessions  # type: ignore[no-redef]
    import agent_spawn  # type: ignore[no-redef]
    from agent_http import HTTPError, Request, field, timeout_field  # type: ignore[no-redef]

DEFAULT_EXECUTE_TIMEOUT_S = 120.0
DEFAULT_PYTHON_TIMEOUT_S = 30.0
DEFAULT_BASH_TIMEOUT_S = 100.0
#: RLIMIT_AS in bytes for every command this agent runs (``--limit-as``); None: no limit
limit_as: int | None = None
#: RLIMIT_NPROC for every command this agent runs (``--limit-nproc``); None: no limit
limit_nproc: int | None = None
#: (uid, gid) every command runs as (``--run-as``); None: the agent's own
run_as: tuple[int, int] | None = None
#: commands start as ``run_as`` from the fork (``agent_spawn.spawn(user=...)``), not through setpriv
direct = False
#: what a command's answer says when it exited but a process it left running holds its output
HELD_NOTE = (f"the command exited, but a process it left running still holds its output open: "
             f"read for {agent_output.HELD_GRACE_S:g}s more, then left running (redirect its output, "
             "`cmd > file 2>&1 &`, to return at once)")
#: pids of the commands running now: their request's thread waits for each (``/reap``,
#: ``agent_reap.py``, leaves them to it)
running: set[int] = set()

def expand(path: str) -> str:
    """``~`` and ``$VARS`` of a guest path expanded."""
    return os.path.expandvars(os.path.expanduser(path))


def home() -> str:
    """The guest user's home: commands run there unless told otherwise."""
    return os.environ.get("HOME") or os.getcwd()


# ------------------------------------------------------------------------------ commands


#: how long a command's start is tried again while its user is at the process limit (EAGAIN):
#: the reap before a check kills what the answer left, and the kernel frees those processes a
#: moment later (a fork bomb's on a loaded machine: its check failed to start, a 500)
SPAWN_EAGAIN_S = 5.0


def _spawn(argv, **options):
    """``agent_spawn.spawn``, tried again for :data:`SPAWN_EAGAIN_S` on EAGAIN."""
    deadline, delay = time.monotonic() + SPAWN_EAGAIN_S, 0.01
    while True:
        try:
            return agent_spawn.spawn(argv, **options)
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.2)


def run(argv, *, shell: bool, timeout: float, cwd: str | None = None,
        env: dict | None = None, merge_stderr: bool = False, isolated: bool = False,
        tail: int | None = None, pass_fds: tuple = ()) -> dict:
    """Run a command in its own session; the whole group is killed when it times out.

    ``isolated``: a grading command (``agent_grading.py``). ``tail``: characters of each
    stream to keep (see "Output"). Returns ``{returncode, output, error}`` plus ``timeout:
    True, message`` on a timeout, or ``not_found: True, message`` when the program cannot
    be started (see "Commands that cannot start").
    """
    agent_grading.note_clock()  # a step of the clock between the attempt's commands (wall_since)
    program = argv if isinstance(argv, str) else (argv[0] if argv else "")
    cwd = expand(cwd) if cwd else home()
    if not os.path.isdir(cwd):
        raise HTTPError(400, f"working directory does not exist: {cwd}")
    full_env = None
    if isolated:
        full_env = {**agent_grading.grading_env(home()), **(env or {})}
    elif env:
        full_env = dict(os.environ)
        full_env.update(env)
    script = None
    # a grading command's session noted where the fronts read it (its program's own environment may lose the marker)
    session = agent_sessions.Session(full_env if isolated else {})
    try:
        # setpriv's work done by the fork itself (``direct``); a prlimit then runs as the user
        user = run_as if direct and run_as else None
        try:
            if shell and agent_scripts.too_long_for_exec(argv):
                # one argument of an exec holds at most MAX_ARG_BYTES: the shell reads a
                # longer command from a sealed script (nothing written to the guest's files)
                if "\0" in argv:
                    raise ValueError("embedded null byte")  # as an exec's argument would
                script = agent_scripts.Script(argv, ".sh", sealed=True, name="command", owner=run_as)
                argv, shell, pass_fds = ["/bin/sh", script.path], False, (*pass_fds, *script.fds)
            argv, shell = _limited(argv, shell, full_env, [] if user else _setpriv() if run_as else [])
            if argv is None:
                return {"returncode": 127, "output": "", "error": "No such file or directory",
                        "not_found": True, "message": f"command not found: {program}"}
            argv = ["/bin/sh", "-c", argv] if shell else list(argv)
            # in a session of its own, so a timeout kills its children with it
            with session:
                proc = _spawn(argv, cwd=cwd, env=full_env, user=user, pass_fds=pass_fds,
                              merge_stderr=merge_stderr)
                session.started(proc.pid)
        except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
            code = 126 if isinstance(exc, PermissionError) else 127
            what = "permission denied" if code == 126 else "command not found"
            return {"returncode": code, "output": "", "error": str(exc),
                    "not_found": True, "message": f"{what}: {program}"}
        except (OSError, ValueError) as exc:
            if isinstance(exc, OSError) and exc.errno != agent_scripts.E2BIG:
                raise  # the guest's own failure (no descriptors, no memory): not the command's
            why = agent_scripts.unstartable(exc, argv, full_env)
            return {"returncode": 126, "output": "", "error": why, "not_found": True, "message": why}
        running.add(proc.pid)
        try:
            return _finish(proc, timeout, tail)
        finally:
            running.discard(proc.pid)
    finally:
        session.end()
        if script is not None:
            script.close()


def _finish(proc, timeout: float, tail: int | None) -> dict:
    """What a started command printed (its tails) and returned, killing its group when it
    outlives ``timeout``."""
    import time

    keep = agent_output.keep_bytes(tail)
    out, err = agent_output.Tail(keep), agent_output.Tail(keep)
    pipes = {proc.stdout: out}
    if proc.stderr is not None:
        pipes[proc.stderr] = err
    deadline = time.monotonic() + timeout
    ended = agent_output.collect(pipes, deadline, proc)
    # exited, but a process it left running (``server &``) holds its output open: it runs on,
    # as after a shell's prompt came back, until /reap or the VM's reset
    held = not ended and proc.poll() is not None
    timed_out = not ended and not held
    if ended:  # it may have closed its output and gone on
        timed_out = not agent_output.exited_within(proc, max(0.0, deadline - time.monotonic()))
    if timed_out:
        _kill_group(proc.pid)
        # a child that escaped the group (setsid) may still hold the pipes open
        agent_output.collect(pipes, time.monotonic() + 2.0)
        proc.kill()
    drained = held and agent_output.DRAIN.add(list(pipes))  # the pipes still open
    for stream in (proc.stdout, proc.stderr):
        if stream is not None and not (drained and stream in pipes):
            stream.close()
    proc.wait()
    # exited on its own between the deadline and the kill (a status of its own, not the kill's
    # SIGKILL, which reaches the whole group at once): its exit is its answer, not a timeout
    timed_out = timed_out and proc.returncode == -agent_spawn.SIGKILL
    result = {"returncode": proc.returncode, "output": out.text(tail), "error": err.text(tail)}
    for name, stream in (("output", out), ("error", err)):
        if stream.dropped:
            result[f"{name}_dropped"] = stream.dropped
    if timed_out:
        result["timeout"] = True
        result["message"] = f"timed out after {timeout:g}s; its process group was killed"
    if held:
        result["note"] = HELD_NOTE
    return result


def wrapped(argv, shell: bool, env: dict | None = None):
    """``(argv, shell)`` to start a command of the graded code with: wrapped in util-linux
    ``setpriv`` (``--run-as``) and ``prlimit`` (``--limit-as``, ``--limit-nproc``), or as it
    is without any; (None, False) when the program does not exist.

    Wrapper binaries, not ``preexec_fn``: Python code between fork and exec can deadlock in a
    threaded server. They exec the command themselves, so a missing program would show up as
    their exit code 127 with status "success"; look it up first to answer like the plain path.
    """
    return _limited(argv, shell, env, _setpriv() if run_as is not None else [])


def _limited(argv, shell: bool, env: dict | None, wrapper: list[str]):
    """``argv`` behind ``wrapper`` and prlimit (when limits are set); as it is when neither."""
    limits = ([f"--as={limit_as}"] if limit_as is not None else []) + \
        ([f"--nproc={limit_nproc}"] if limit_nproc is not None else [])
    if not (wrapper or limits):
        return argv, shell
    if shell:
        argv = ["/bin/sh", "-c", argv]
    elif "/" not in argv[0]:
        import shutil

        path = (env or os.environ).get("PATH", os.defpath)
        if shutil.which(argv[0], path=path) is None:
            return None, False
    if limits:
        wrapper = [*wrapper, "prlimit", *limits, "--"]
    return wrapper + list(argv), False


def as_user(argv: list[str]) -> list[str]:
    """``argv`` run as the commands' user with no capabilities (``--run-as``), as it is
    without: what a desktop's own processes (Xvfb, the buses, the window manager) and
    helpers (wmctrl, the AT-SPI walker) are started with, so that its session bus sees one
    user and nothing of the desktop holds a capability."""
    return _setpriv() + list(argv) if run_as is not None else list(argv)


def _setpriv() -> list[str]:
    uid, gid = run_as
    return ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]


def give(path: str) -> None:
    """Hand a file the agent made to the user commands run as (no-op without --run-as)."""
    if run_as is not None:
        os.lchown(path, *run_as)


def take_over(paths) -> bool:
    """Remove each of ``paths`` (a killed X server's socket and lock) that is another user's than
    the one commands run as (--run-as, or the agent's): that user's Xvfb, unlike root's, cannot
    remove them from the sticky /tmp and would not start. False when one cannot be removed."""
    uid = run_as[0] if run_as is not None else os.getuid()
    for path in paths:
        try:
            if uid != 0 and os.lstat(path).st_uid != uid:
                os.unlink(path)
        except FileNotFoundError:
            continue
        except OSError:
            return False
    return True


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, agent_spawn.SIGKILL)
    except ProcessLookupError:
        pass


def _command_argv(body: dict):
    command = field(body, "command", (list, str), required=True)
    shell = field(body, "shell", (bool,), False)
    if isinstance(command, list):
        if not command or not all(isinstance(part, str) for part in command):
            raise HTTPError(400, "field 'command' must be a non-empty list of strings")
        if shell:
            import shlex

            command = shlex.join(command)
    elif not shell:
        import shlex

        try:
            command = shlex.split(command)
        except ValueError as exc:
            raise HTTPError(400, f"cannot split command: {exc}") from None
        if not command:
            raise HTTPError(400, "field 'command' is empty")
    if isinstance(command, list):
        # like OSWorld: "~/x" arguments mean the guest user's home
        command = [os.path.expanduser(p) if p.startswith("~") else p for p in command]
    return command, shell


def _output_fields(body: dict) -> dict:
    """``isolated`` and ``tail`` of a command request, checked (see the module doc)."""
    tail = field(body, "tail", (int,))
    if tail is not None and tail < 0:
        raise HTTPError(400, f"field 'tail' must be a non-negative number of characters, got {tail}")
    return {"isolated": field(body, "isolated", (bool,), False), "tail": tail}


def _refused_links(timeout: float, within: float | None) -> tuple[dict, float]:
    """The answer of a command not run because the graded code left a link into a process's
    ``/proc`` folder (``agent_grading.links_into_processes``), or ``{}``; and what is left
    of ``timeout``, which the search spends. ``within``: the attempt's seconds so far (the
    request's ``links_made_within_s``), when only links made since it began count."""
    import time

    start = time.monotonic()
    since = None if within is None else agent_grading.wall_since(within)
    try:
        links = agent_grading.links_into_processes(home(), start + timeout, since)
    except TimeoutError:
        return {"returncode": -9, "output": "", "error": "", "timeout": True,
                "message": f"timed out after {timeout:g}s looking for links into /proc"}, timeout
    if not links:
        return {}, max(0.0, timeout - (time.monotonic() - start))
    made = "" if within is None else f" made during the attempt (its last {within:.0f}s; older links are left alone)"
    why = (f"not run: the answer left {len(links)} link(s){made} into a process's folder of /proc, where "
           f"what a check reads is its own (its arguments, its input): {', '.join(links[:3])}")
    return {"returncode": 126, "output": "", "error": why, "not_found": True, "message": why}, timeout


def route_execute(req: Request):
    """POST /execute: run a command, OSWorld's ``{status, output, error, returncode}``."""
    body = req.json()
    argv, shell = _command_argv(body)
    timeout = timeout_field(body, DEFAULT_EXECUTE_TIMEOUT_S)
    cwd = field(body, "cwd", (str,))
    env = field(body, "env", (dict,))
    if env and not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise HTTPError(400, "field 'env' must map strings to strings")
    options, result = _output_fields(body), {}
    if field(body, "refuse_proc_links", (bool,), False):  # a shell task's check
        within = field(body, "links_made_within_s", (int, float))
        if within is not None and not within >= 0:
            raise HTTPError(400, f"field 'links_made_within_s' must be a number of seconds >= 0, got {within}")
        result, timeout = _refused_links(timeout, within)
    if not result:
        result = run(argv, shell=shell, timeout=timeout, cwd=cwd, env=env, **options)
    failed = result.pop("not_found", False) or result.get("timeout", False)
    result["status"] = "error" if failed else "success"
    return 200, result


def route_run_python(req: Request):
    """POST /run_python: run code with python3 from a temp file, OSWorld's shape."""
    body = req.json()
    code = field(body, "code", (str,), required=True)
    timeout = timeout_field(body, DEFAULT_PYTHON_TIMEOUT_S)
    options = _output_fields(body)
    # -I: no user site-packages, no PYTHON* variables, not the script's folder (/tmp) on
    # sys.path, where the graded code could have left a module of a name the script imports
    python = [sys.executable, "-I"] if options["isolated"] else [sys.executable]
    with agent_scripts.Script(code, ".py", options["isolated"], owner=run_as) as (path, fds):
        result = run([*python, path], shell=False, timeout=timeout, pass_fds=fds, **options)
    ok = result["returncode"] == 0
    answer = {
        "status": "success" if ok else "error",
        "message": result.get("message")
        or ("Command executed successfully" if ok else "Command failed"),
        "need_more": False,
        "output": result["output"],
        "error": result["error"],
        "return_code": result["returncode"],
    }
    if result.get("timeout"):
        answer["timeout"] = True
    return 200, answer


def route_run_bash_script(req: Request):
    """POST /run_bash_script: bash with stderr merged into stdout, OSWorld's shape."""
    body = req.json()
    script = field(body, "script", (str,), required=True)
    timeout = timeout_field(body, DEFAULT_BASH_TIMEOUT_S)
    working_dir = field(body, "working_dir", (str,))
    options = _output_fields(body)
    bash = ["/bin/bash", "--noprofile", "--norc"] if options["isolated"] else ["/bin/bash"]
    with agent_scripts.Script(script, ".sh", options["isolated"], owner=run_as) as (path, fds):
        result = run([*bash, path], shell=False, timeout=timeout, cwd=working_dir,
                     merge_stderr=True, pass_fds=fds, **options)
    answer = {
        "status": "success" if result["returncode"] == 0 else "error",
        "output": result["output"],
        "error": "",
        "returncode": result["returncode"],
    }
    if "message" in result:
        answer["message"] = result["message"]
    if result.get("timeout"):
        answer["timeout"] = True
    return 200, answer
