"""The guest agent: a small HTTP server that runs inside every VM and does what the host asks.

::

    host (GuestClient) ──HTTP/1.1 over a unix socket or TCP──► agent_http (one thread/request)
                                                                  │ ROUTES (this file)
                     ┌──────────────────────┬────────────────────┼───────────────────────┐
                     ▼                      ▼                    ▼                       ▼
              agent_commands         agent_files          desktop_routes        /health, /platform
          (its own process group,  (/file, /setup/upload,  (imported on first use:
           killed on a timeout)     /list_directory)        screenshots, windows …)

It runs with nothing but the standard library, since its files are copied next to each other
into sandboxes and VM images that only have ``python3``; ``server.py`` is the script that
starts it::

    python3 server.py --unix /path/to/sock        # what the process provider does
    python3 server.py --host 0.0.0.0 --port 5000  # what a VM image does (OSWorld's port)

**Modules.** ``agent_http`` is the HTTP layer (request parsing, multipart, dispatch, errors),
``agent_json`` its JSON, ``agent_commands`` runs commands (``agent_spawn`` starts them,
``agent_grading``: a grading command's environment, ``agent_sessions``: its session noted for
the grading fronts, ``agent_scripts``: the scripts an
interpreter reads; ``agent_reap``: ``/reap``), ``agent_files`` reads and writes files,
``agent_setup`` holds OSWorld's rarer setup routes, ``desktop`` starts the X display and
``desktop_routes`` serves the desktop. In a guest they are sibling files, not a package: each
imports the others relatively when it is part of ``parallel_rollout`` (tests) and as
top-level modules otherwise.

**Routes** follow OSWorld's guest server (``desktop_env/server/main.py``) where they overlap,
with the same JSON shapes, so one client drives both: ``GET /health``, ``GET /platform``,
``POST /execute`` (alias ``/setup/execute``), ``POST /run_python``, ``POST /run_bash_script``,
``POST /file``, ``POST /setup/upload``, ``POST /list_directory``. The desktop routes
(``/screenshot``, ``/setup/launch``, ``/setup/open_file``, ``/accessibility``, recording,
``/terminal``, ``/wallpaper`` …) live in ``desktop_routes.py``, imported on their first call (or
at start-up with ``--desktop WxH``, which starts Xvfb and a window manager before the agent
says it is ready); ``/setup/download_file``, ``/desktop_path`` and
``/execute_with_verification`` in ``agent_setup.py``, also imported on first use. A desktop
route on an agent without a desktop answers 503 ("no desktop"), an unknown route 404.

**Errors** (see ``agent_http``): a request the server cannot make sense of gets a 4xx with
``{"status": "error", "message"}``; an unknown route 404, a known route with the wrong method
405; a command that runs but fails is a 200 with ``status: "error"`` (see ``agent_commands``).

**Start-up time** is the cost of a ``process`` VM reset, so the rarer modules
(``urllib.parse``, ``base64``, the desktop) are imported on first use, and what every request
needs stays off the standard library's heavier modules: ``agent_http`` serves on ``_socket``
and ``_thread``, ``agent_json`` encodes through ``_json``, ``agent_spawn`` starts commands
without ``subprocess`` (its start and first command ~58 → ~29 ms of CPU; ``enum``, ``re``,
``functools`` and ``collections`` are never imported unless a rarer route needs them).

**Readiness.** With ``--ready-fd N`` the server writes ``ready\\n`` to file descriptor N once
it listens, then closes it: the host waits on a pipe instead of polling the socket.
"""

from __future__ import annotations

import os
import sys

if __package__:
    from . import agent_commands, agent_files, agent_http, agent_reap
else:  # server.py put this folder on sys.path
    import agent_commands  # type: ignore[no-redef]
    import agent_files  # type: ignore[no-redef]
    import agent_http  # type: ignore[no-redef]
    import agent_reap  # type: ignore[no-redef]

Request = agent_http.Request


#: the X display of the desktop this agent started (``--desktop``), None without one
display = None
#: its DevTools ports where they are not OSWorld's (``desktop_routes.claim_devtools_ports``)
devtools_ports: dict = {}


def route_health(req: Request):
    """GET /health: liveness, plus the pid, the VM id the sandbox gave us, the display of
    the agent's desktop (the first free one, or ``--display``'s) and, on a host's second
    desktop, the ports its Chrome tasks' 9222 and 1337 are (``devtools_ports``)."""
    answer = {"status": "ok", "pid": os.getpid(), "vm": os.environ.get("PARALLEL_ROLLOUT_VM"), "display": display}
    if devtools_ports:
        answer["devtools_ports"] = {str(port): ours for port, ours in devtools_ports.items()}
    return 200, answer


def route_platform(req: Request):
    """GET /platform: ``platform.system()`` as plain text, like OSWorld."""
    return 200, os.uname().sysname  # what platform.system() answers on POSIX, minus its import


#: routes of modules imported on first use (see resolve): the desktop's, and OSWorld's
#: rarer setup routes
LAZY_ROUTES = {
    **dict.fromkeys((
        "/screenshot", "/cursor_position", "/screen_size", "/window_size", "/accessibility",
        "/setup/launch", "/setup/open_file", "/setup/activate_window", "/setup/close_window",
        "/start_recording", "/end_recording", "/terminal", "/wallpaper",
        "/setup/change_wallpaper"), "desktop_routes"),
    **dict.fromkeys(("/desktop_path", "/setup/download_file", "/execute_with_verification",
                     "/setup/execute_with_verification"), "agent_setup"),
}


def _sibling(name: str):
    """A guest module next to this file: a package import in tests, a sibling file in a VM."""
    import importlib

    return importlib.import_module(f"{__package__}.{name}" if __package__ else name)


ROUTES = {
    "/health": ("GET", route_health),
    "/platform": ("GET", route_platform),
    "/execute": ("POST", agent_commands.route_execute),
    "/setup/execute": ("POST", agent_commands.route_execute),
    "/run_python": ("POST", agent_commands.route_run_python),
    "/run_bash_script": ("POST", agent_commands.route_run_bash_script),
    "/file": ("POST", agent_files.route_file),
    "/setup/upload": ("POST", agent_files.route_upload),
    "/list_directory": ("POST", agent_files.route_list_directory),
    "/reap": ("POST", agent_reap.route_reap),
}


def resolve(path: str):
    """``(method, route)`` for a path, importing the desktop's routes on first use; None for
    an unknown path."""
    route = ROUTES.get(path)
    if route is None and path in LAZY_ROUTES:
        route = _sibling(LAZY_ROUTES[path]).ROUTES[path]
    return route


#: the environment variable that names the agent to the commands it runs: ``port-PORT`` (TCP),
#: else ``pid-PID``
AGENT_ENV = "PARALLEL_ROLLOUT_AGENT"
#: the environment variable an agent's key may come in instead of --key-file
KEY_ENV = "PARALLEL_ROLLOUT_GUEST_KEY"
_USAGE = """usage: server.py [--unix PATH | --listen-fd FD | --host HOST --port PORT] [--ready-fd FD]
                 [--max-body-mb MB] [--limit-as BYTES] [--limit-nproc N] [--run-as UID:GID]
                 [--seed-home DIR] [--desktop WxH [--display :N]] [--seccomp FILE] [--reap-all]
                 [--key-file FILE] [--verbose]

--listen-fd FD      serve a unix socket the caller bound and listens on (the process
                   sandbox: the socket's folder stays outside, where commands cannot
                   unlink it and bind their own)
--limit-as BYTES   RLIMIT_AS of every command run (through util-linux prlimit)
--limit-nproc N    RLIMIT_NPROC of every command run (a cap on the VM's processes when the
                   agent is in a user namespace of its own)
--run-as UID:GID   run every command as this user (through util-linux setpriv)
--seed-home DIR    copy DIR into $HOME (given to --run-as's user) before saying ready
--desktop WxH      start Xvfb at WxH and a window manager before saying ready, on the first
                   free display (:0 unless an X server of the machine holds it; GET /health
                   says which)
--display :N       the desktop's display, instead of the first free one
--seccomp FILE     load this compiled seccomp BPF program (pool/providers/seccomp.py) before
                   anything else: the agent and every process it starts are under it
--reap-all         /reap kills every process but this one and pid 1: only for an agent
                   alone in its own pid namespace (without it, its descendants only)
--key-file FILE    answer only connections that say this file's key first (a PR-KEY line:
                   the runner's --vm-key-file), others 401; or the key in $%s,
                   which the agent takes out of its environment (its commands never see it);
                   a warning when its commands can read the file (no --run-as user kept out)""" % KEY_ENV
_OPTIONS = {"--unix": str, "--listen-fd": int, "--host": str, "--port": int, "--ready-fd": int,
            "--max-body-mb": float, "--limit-as": int, "--limit-nproc": int, "--desktop": str, "--run-as": str,
            "--seed-home": str, "--seccomp": str, "--key-file": str, "--display": str}


def _parse_args(argv: list[str]) -> dict:
    # argparse (with the re and shutil it imports) would add ~5 ms to every VM reset
    args = {"unix": None, "listen_fd": None, "host": "127.0.0.1", "port": 5000, "ready_fd": None,
            "max_body_mb": 256.0, "verbose": False, "limit_as": None, "limit_nproc": None, "desktop": None,
            "run_as": None, "seed_home": None, "seccomp": None, "reap_all": False, "key_file": None,
            "display": None}
    items = list(argv)
    while items:
        item = items.pop(0)
        if item in ("-h", "--help"):
            print(_USAGE)
            sys.exit(0)
        if item in ("--verbose", "--reap-all"):
            args[item[2:].replace("-", "_")] = True
            continue
        name, eq, value = item.partition("=")
        if name not in _OPTIONS:
            sys.exit(f"{_USAGE}\nserver.py: unknown argument {item!r}")
        if not eq:
            if not items:
                sys.exit(f"{_USAGE}\nserver.py: {name} needs a value")
            value = items.pop(0)
        try:
            args[name[2:].replace("-", "_")] = _OPTIONS[name](value)
        except ValueError:
            sys.exit(f"{_USAGE}\nserver.py: bad value for {name}: {value!r}")
    return args


def _which(program: str) -> bool:
    return any(os.access(os.path.join(d, program), os.X_OK)
               for d in os.environ.get("PATH", os.defpath).split(os.pathsep) if d)


def _prctl(option: int, value: int, what: str) -> None:
    import ctypes

    if ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) != 0:
        sys.exit(f"server.py: prctl({what}) failed: {os.strerror(ctypes.get_errno())}")


def _load_seccomp(path: str) -> None:
    """Put this process, and so everything it will start, under the seccomp program in
    ``path`` (a docker container: on top of Docker's own profile, the calls the process
    sandbox refuses, io_uring among them). One thread runs yet: the filter covers all."""
    import ctypes

    with open(path, "rb") as handle:
        program = handle.read()
    if not program or len(program) % 8:
        sys.exit(f"server.py: --seccomp {path}: not a BPF program ({len(program)} bytes)")

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    fprog = SockFprog(len(program) // 8, program)
    _prctl(38, 1, "PR_SET_NO_NEW_PRIVS")  # what loading a filter without CAP_SYS_ADMIN takes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, MODE_FILTER
        sys.exit(f"server.py: cannot load the seccomp filter: {os.strerror(ctypes.get_errno())}")


def _libc_call(name: str, *args) -> int:
    """``name(*args)`` of the C library; ints and bytes (as pointers) only. Through
    ``_ctypes`` (0.4 ms to import, where ``ctypes`` costs ~4 ms of every boot), else ctypes."""
    try:
        import _ctypes

        return _ctypes.call_function(_ctypes.dlsym(_ctypes.dlopen(None, 2), name), args)
    except (ImportError, AttributeError):
        import ctypes

        return getattr(ctypes.CDLL(None), name)(*args)


def _status_fields(*names: str) -> dict[str, str]:
    with open("/proc/self/status") as handle:
        fields = dict(line.split(":", 1) for line in handle if ":" in line)
    return {name: fields.get(name, "").strip() for name in names}


def _seal() -> bool:
    """Give up, for good, what only a root command could use: no new privileges, no
    inheritable or ambient capabilities, an empty bounding set; the agent keeps its own
    (effective, permitted) set. Its children are then, once their uid is switched, exactly
    what ``setpriv --clear-groups --inh-caps=-all --bounding-set=-all --no-new-privs``
    makes them (the kernel clears the permitted and effective sets of a process that leaves
    uid 0), so commands start as the sandbox user with one exec, not through setpriv
    (``agent_commands.direct``). True when /proc/self/status shows all of it; False
    (commands keep setpriv) where a call fails."""
    try:
        _libc_call("prctl", 38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
        _libc_call("prctl", 47, 4, 0, 0, 0)  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL
        held = _status_fields("CapEff", "CapPrm")
        effective, permitted = (int(held[name], 16) for name in ("CapEff", "CapPrm"))
        header = (0x20080522).to_bytes(4, sys.byteorder) + bytes(4)  # version 3, this process
        data = b"".join(word.to_bytes(4, sys.byteorder) for word in (
            effective & 0xFFFFFFFF, permitted & 0xFFFFFFFF, 0, effective >> 32, permitted >> 32, 0))
        _libc_call("capset", header, data)  # the inheritable set emptied
        # last: with the bounding set kept, root can still exec setpriv (a seal that failed
        # before here leaves commands their setpriv; this one fails whole, at its first cap)
        with open("/proc/sys/kernel/cap_last_cap") as handle:
            last = int(handle.read())
        for cap in range(last + 1):
            _libc_call("prctl", 24, cap, 0, 0, 0)  # PR_CAPBSET_DROP (needs CAP_SETPCAP)
        now = _status_fields("CapInh", "CapAmb", "CapBnd", "NoNewPrivs")
    except (OSError, ValueError, TypeError):
        return False
    return now["NoNewPrivs"] == "1" and all(int(now[name] or "1", 16) == 0
                                            for name in ("CapInh", "CapAmb", "CapBnd"))


def _key(path: str | None) -> bytes | None:
    """The key every connection must say first: ``--key-file``'s, else ``$KEY_ENV``'s, which
    leaves the environment either way (no command the agent runs inherits it); None: none."""
    key = os.environ.pop(KEY_ENV, None)
    if path:
        try:
            with open(path, "rb") as handle:
                key = handle.read().decode("ascii")
        except (OSError, UnicodeDecodeError) as exc:
            sys.exit(f"server.py: --key-file {path}: cannot read a key: {exc}")
    if key is None:
        return None
    key = key.strip()
    if not key or len(key.split()) != 1:
        sys.exit(f"server.py: the key ({'--key-file ' + path if path else '$' + KEY_ENV}) must be one word, "
                 "no spaces: e.g. the output of `openssl rand -hex 16`")
    return key.encode()


def _commands_read(path: str, run_as: str | None) -> bool:
    """Whether the commands the agent runs can read the file ``path``: as its own user (no
    ``--run-as``) they can; as ``run_as``'s (UID:GID), what ``test -r`` says as that user."""
    uid, _, gid = (run_as or "").partition(":")
    if not run_as:
        return True
    if not (uid.isdigit() and gid.isdigit()) or not _which("setpriv"):
        return False  # refused below
    import subprocess

    return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "/bin/sh", "-c",
                           'test -r "$0"', path], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0


def main(argv: list[str] | None = None) -> int:
    """Serve until killed."""
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    key = _key(args["key_file"])
    if args["key_file"] and _commands_read(args["key_file"], args["run_as"]):
        # with the key a command's output (a run's trajectory) carries, anything drives the agent
        agent_http.log(f"warning: the commands this agent runs can read --key-file {args['key_file']}: one that "
                       "prints it puts the key in what it answers (a run's results), and with it anything that "
                       "reaches this port drives the agent; keep the file where they cannot read it (--run-as "
                       f"another user), or give the key in ${KEY_ENV} and keep no copy they can read")
    if args["seccomp"]:
        _load_seccomp(args["seccomp"])
    agent_http.verbose = args["verbose"]
    agent_commands.limit_as = args["limit_as"]
    agent_commands.limit_nproc = args["limit_nproc"]
    agent_reap.reap_all = args["reap_all"]
    for option in ("limit_as", "limit_nproc"):
        if args[option] is not None and not _which("prlimit"):
            sys.exit(f"server.py: --{option.replace('_', '-')} needs util-linux prlimit on PATH")
    if args["run_as"]:
        uid, _, gid = args["run_as"].partition(":")
        if not (uid.isdigit() and gid.isdigit()) or int(uid) == os.getuid():
            sys.exit(f"server.py: --run-as takes UID:GID of another user, got {args['run_as']!r}")
        if not _which("setpriv"):
            sys.exit("server.py: --run-as needs util-linux setpriv on PATH")
        agent_commands.run_as = (int(uid), int(gid))
        agent_commands.give(agent_commands.home())
        # a desktop starts its session through setpriv as root (agent_commands.as_user),
        # which needs the bounding set: it keeps it, and its commands keep setpriv; so does
        # a guest's Python older than 3.9 (no Popen(user=))
        agent_commands.direct = not args["desktop"] and sys.version_info >= (3, 9) and _seal()
    else:
        # commands run as the agent's own user: not dumpable, it is out of their reach
        # (/proc/PID/mem, pidfd_getfd need CAP_SYS_PTRACE then); its commands are dumpable
        # again, as execve resets the flag
        _prctl(4, 0, "PR_SET_DUMPABLE")
    if not agent_reap.reap_all:
        # on a shared host: a daemon a command leaves is adopted by the agent, not by the
        # machine's init, so /reap still finds it among the agent's descendants
        _prctl(36, 1, "PR_SET_CHILD_SUBREAPER")
        agent_reap.end_with_the_agent()
        agent_reap.collect_orphans()
    if args["seed_home"]:
        agent_files.seed_home(args["seed_home"], agent_commands.home())
    if args["display"] is not None and not (args["desktop"] and args["display"].startswith(":")
                                            and args["display"][1:].isdigit()):
        sys.exit(f"server.py: --display takes :N with --desktop, got {args['display']!r}")
    if args["desktop"]:
        global display
        width, _, height = args["desktop"].partition("x")
        if not (width.isdigit() and height.isdigit()):
            sys.exit(f"server.py: --desktop takes WIDTHxHEIGHT, got {args['desktop']!r}")
        desktop = _sibling("desktop")
        try:
            desktop.start_desktop(int(width), int(height), display=args["display"])
        except BaseException:
            agent_reap.agent_ends()  # its session bus and Xvfb, in sessions of their own, go too
            raise
        display = desktop.DISPLAY
        devtools_ports.update(_sibling("desktop_routes").claim_devtools_ports())
        agent_reap.keep_desktop()  # the desktop's own processes: /reap spares them
        if not agent_reap.reap_all and (others := agent_reap.others_in_reach("Xvfb")):
            agent_http.log(f"warning: this machine runs other X servers ({', '.join(f'pid {p}, uid {u}' for p, u in others.items())}) "
                           "that this agent's commands can signal (they run as root or as their user): a task's pkill "
                           "or kill -9 -1 ends another desktop agent's desktop, and its task fails as its own; start "
                           "each desktop agent with --run-as UID:GID of a user of its own")
    server = agent_http.make_server(resolve, unix=args["unix"], host=args["host"], port=args["port"],
                                    max_body_mb=args["max_body_mb"], listen_fd=args["listen_fd"], key=key)
    if args["unix"] and agent_commands.run_as is not None:
        os.chmod(args["unix"], 0o600)  # the commands' user must not talk to the agent
    # the agent's name in its commands' environment: what a web episode's files are kept under
    # (envs/web/browser.py), so two agents of one home (one host, two ports) keep theirs apart
    os.environ[AGENT_ENV] = (f"pid-{os.getpid()}" if args["unix"] or args["listen_fd"] is not None
                             else f"port-{server.server_address[1]}")
    if args["listen_fd"] is not None:
        where = f"fd {args['listen_fd']}"
    else:
        where = args["unix"] or f"{args['host']}:{server.server_address[1]}"
    if args["ready_fd"] is not None:
        os.write(args["ready_fd"], b"ready\n")
        os.close(args["ready_fd"])
    if agent_http.verbose:
        agent_http.log(f"listening on {where}" + (" (each connection must say the key first)" if key else ""))
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        agent_reap.agent_ends()
    return 0
