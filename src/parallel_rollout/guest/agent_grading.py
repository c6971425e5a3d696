"""What a grading command runs in (``agent_commands.run(..., isolated=True)``).

Grading commands (``isolated: true`` on ``/execute``, ``/run_python``,
``/run_bash_script``: a shell task's check, the py judge, the osworld getters, the reset
probe) run in an environment the graded code cannot change: the agent's environment cut
to a few plain names (:data:`GRADING_NAMES`: HOME, the locale, the user's name, the
desktop's display and bus), a ``PATH`` and ``PYTHONPATH`` of system folders only
(:func:`grading_env`), Python without user site-packages or the current folder on its path
(``PYTHONNOUSERSITE``, ``PYTHONSAFEPATH``; ``/run_python`` runs ``python3 -I``), git without
the user's config (``~/.gitconfig``; through the wrapper below, nor ``~/.config/git``'s
ignore, attributes and config), pip and npm without a config file (``PIP_CONFIG_FILE``,
``NPM_CONFIG_USERCONFIG`` /dev/null: ``~/.config/pip/pip.conf``'s ``[list] path`` made
``pip list`` show a package the answer only faked, ``~/.npmrc`` can move npm's prefix; npm and npx
through a wrapper too, which reads no ``.npmrc`` of a workspace root above the package or of a
folder that is no package as the project's), psql without ``~/.psqlrc`` (``PSQLRC`` /dev/null,
so by its path too: Debian's ``/usr/bin/psql`` is pg_wrapper, which no front is at), and the shell run without startup files (``sh -c`` reads
none; ``ENV`` and ``BASH_ENV`` are not passed). A ``usercustomize.py``, a ``.pth`` file, a ``json.py`` in
the home or a ``~/bin`` shim left by the answer is then never loaded: only the files the
check inspects reach it. Programs that read a file of the home as their config are run
through the wrappers in ``grading_bin/`` (first on the PATH, read-only like the agent): curl
without ``~/.curlrc``, sqlite3 without ``~/.sqliterc``, jq without ``~/.jq``, file without
``~/.magic``, wget without ``~/.wgetrc``, psql without ``~/.psqlrc`` (both still read /etc's),
node without its global folders ``~/.node_modules`` and ``~/.node_libraries`` (its child
processes too, and what its code starts goes through the wrappers), mvn without ``~/.mavenrc`` (shell code Maven's script sources) or a ``.mvn`` above its project, gdb without
``~/.gdbinit`` (``--nh``), tmux without ``~/.tmux.conf``, less without a lesskey file (its ``LESSOPEN``), gpg without
``~/.gnupg/gpg.conf`` (``--no-options``), ImageMagick without ``~/.config/ImageMagick``,
ssh without ``~/.ssh/config``, vim without ``~/.vimrc`` and ``~/.vim`` (``--clean``), pytest (``python3 -m pytest`` too) without an ini file or
``conftest.py`` above its tests' folder (pinned there, or refused below such an ini file; started
otherwise, ``/usr/bin/pytest`` or a program's ``pytest.main()``, judged alike by the wrappers'
``sitecustomize.py``, their folder first on ``PYTHONPATH`` too), valgrind not beside a ``.valgrindrc`` (no option turns it off), make not where it would read a
``GNUmakefile`` or ``makefile`` in place of the ``Makefile`` the check wrote (and with ``-B`` on a
makefile the check wrote: no target taken for made from a file the graded code left), javac not beside
an annotation processor's ``META-INF/services`` file of its class path's current folder, java not
beside a ``META-INF/services`` file there that the check did not make (a provider the JVM loads), a grading
python importing a module the check wrote in the home or ``/tmp`` before the answer's package or
extension module beside it, and no bytecode older than its source there (``graded_imports.py``),
prove without ``~/.proverc`` (``--norc``), aspell without ``~/.aspell.conf`` or a personal word list, enchant-2 without
``~/.config/enchant`` or its aspell provider's, jshell without its settings kept in ``~/.java/.userPrefs``, tput, infocmp and
ncurses' other terminal programs without ``~/.terminfo``, soffice with a user profile of its own (not
``~/.config/libreoffice``, whose macros run headless too), gimp with a user folder of its own (not
``~/.config/GIMP``, whose scripts load in batch mode too), cmake without its user package registry
(``~/.cmake/packages``), git running no program that the config of the repo it reads names (the
answer's repo: ``core.fsmonitor``, filters, diff drivers, hooks …; ``git_no_programs.py``),
each of which could make a wrong answer pass; a check's own options win. In the process, docker
and qemu guests the real paths of the wrapped programs (env, git, jq …) and of the system python's
sitecustomize.py lead to the wrappers too (their fronts: ``pool/providers/grading_fronts.py``), for
a check that runs them by their paths.
The rest of the home is still read: node's ``node_modules`` of the folder it runs in (the
home: ``node -e "require('x')"`` there loads ``~/node_modules/x``), Debian psql's
``~/.postgresqlrc`` (the server and database of a check that names neither), credentials
(``~/.netrc``, ``~/.pgpass``), other programs' dotfiles: a check should not run them on what
the answer left in its home.
"""

from __future__ import annotations

import errno
import os
import time

#: the PATH of a grading command: system folders (those of the agent's PATH among them)
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: wrappers of programs that read a config file from the home, first on a grading command's
#: PATH; next to the agent wherever its files are
GRADING_BIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "grading_bin")
_WRAPPERS = [GRADING_BIN] if os.path.isdir(GRADING_BIN) else []
_AGENT_FOLDER = os.path.dirname(os.path.abspath(__file__))
#: the names of the agent's environment a grading command gets (all set by whoever started
#: the agent, none by the graded code): the home it inspects, the locale, who it is, the
#: desktop it may look at and the ports its Chrome's DevTools are on (desktop_routes.DEVTOOLS_ENV)
GRADING_NAMES = ("HOME", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "TERM", "USER", "LOGNAME",
                 "DISPLAY", "DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR", "PARALLEL_ROLLOUT_VM",
                 "PARALLEL_ROLLOUT_DEVTOOLS_PORTS")


def grading_env(home: str) -> dict[str, str]:
    """The environment of a grading command whose user's home is ``home``: nothing in it
    comes from the graded code, and nothing in it points into what that code can write."""
    env = {name: os.environ[name] for name in GRADING_NAMES if name in os.environ}
    path = _system_folders(os.environ.get("PATH", ""), home)
    env["PATH"] = ":".join(dict.fromkeys(_WRAPPERS + path + SYSTEM_PATH.split(":")))
    # the wrappers' sitecustomize.py first (pytest, however started, judged as they judge it),
    # then a desktop's shims
    python_path = list(dict.fromkeys(_WRAPPERS + _system_folders(os.environ.get("PYTHONPATH", ""), home)))
    if python_path:
        env["PYTHONPATH"] = ":".join(python_path)
    # PYTHONUSERBASE too, which site reads under -E as well (that ignores PYTHONNOUSERSITE): the
    # agent's read-only folder, no user site-packages in it (`/usr/bin/python3 -E` ran the graded
    # code's ~/.local/lib/python3.*/site-packages/usercustomize.py)
    env.update(PYTHONNOUSERSITE="1", PYTHONUSERBASE=_AGENT_FOLDER, PYTHONSAFEPATH="1", PYTHONDONTWRITEBYTECODE="1",
               GIT_CONFIG_GLOBAL="/dev/null", PIP_CONFIG_FILE=os.devnull, NPM_CONFIG_USERCONFIG=os.devnull,
               # psql by any path (Debian's /usr/bin/psql is pg_wrapper, which no front is at): no ~/.psqlrc
               PSQLRC=os.devnull)
    env[GRADING_SINCE] = grading_since()
    env[GRADED_HOME] = home
    return env


#: the name of the grading command's start, ``seconds.nanoseconds`` on the clock of a file's
#: ctime, in its environment: a file dated since is the check's own (the graded code's
#: processes were reaped before it began), which a wrapper may trust (npm a package the check
#: made above the folder it runs from)
GRADING_SINCE = "PARALLEL_ROLLOUT_GRADING_SINCE"
#: the name of the graded code's home in a grading command's environment: the wrappers take the
#: home for a folder the graded code writes by it as well as by HOME, which the check may set
#: otherwise (HOME=/nonexistent, env -u HOME) without the home ceasing to be the graded code's
GRADED_HOME = "PARALLEL_ROLLOUT_GRADED_HOME"
#: the kernel's coarse wall clock (CLOCK_REALTIME_COARSE), which dates files on a kernel without
#: fine-grained timestamps
_COARSE_REALTIME = getattr(time, "CLOCK_REALTIME_COARSE", 5)
#: seconds a grading command's start waits at most for the coarse clock to pass the fine one
_COARSE_WAIT_S = 0.05


def grading_since() -> str:
    """Now, as :data:`GRADING_SINCE` says it: after every write of the graded code (reaped
    before a grading command starts) and before every write of the grading command. The fine
    clock, returned once the coarse clock has passed it (a tick at most, 4 ms at HZ=250), so
    that a file the command makes is dated after it on a kernel that dates files by the coarse
    clock (Debian 12's 6.1), as on one of multigrain timestamps (6.13 on), which dates a file
    by the fine clock once its times were read. The coarse clock alone was no such time: there
    the answer's last writes in the tick before the check were dated after it, and npm ran the
    answer's ``~/.npmrc`` as the check's own package's (one attempt in four)."""
    try:
        now = time.clock_gettime_ns(time.CLOCK_REALTIME)
        waited_until = time.monotonic() + _COARSE_WAIT_S
        while time.clock_gettime_ns(_COARSE_REALTIME) <= now and time.monotonic() < waited_until:
            time.sleep(0.0005)
    except OSError:  # no such clock (not Linux)
        now = time.time_ns()
    return f"{now // 10**9}.{now % 10**9:09d}"


def _system_folders(value: str, home: str) -> list[str]:
    """The entries of a PATH-like ``value`` in system folders or the agent's own folder
    (read-only in every guest: a desktop's shims are there), never in the home, ``/tmp`` or
    anything relative."""
    trusted = ("/usr", "/bin", "/sbin", _AGENT_FOLDER)
    kept = []
    for entry in value.split(":"):
        if not entry.startswith("/"):
            continue
        entry = os.path.normpath(entry)
        if not _inside(entry, home) and any(_inside(entry, top) for top in trusted):
            kept.append(entry)
    return kept


def _inside(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


# ------------------------------------------------ links to what a check would read of itself

def _listed_folders() -> tuple[str, ...]:
    """The folders of grading_bin/graded_folders, one a line (/tmp … without the wrappers)."""
    if not _WRAPPERS:
        return ("/tmp", "/var/tmp", "/dev/shm")
    with open(os.path.join(GRADING_BIN, "graded_folders")) as lines:
        return tuple(line.strip() for line in lines if line.startswith("/"))


#: where the graded code leaves files a check reads (the home is added): the folders every
#: user may write, as the wrappers list them (grading_bin/graded_folders: /run/lock too)
WRITABLE_FOLDERS = _listed_folders()
#: errors of a readlink that say only that a path is not a link (or not there): a plain step
_PLAIN = {errno.EINVAL, errno.ENOENT, errno.ENOTDIR, errno.EACCES}
#: seconds before the attempt's start a link may be dated and still count as the attempt's:
#: a file's ctime is the kernel's coarse clock (a tick behind ``time.time()``), and the
#: caller's count of the attempt's seconds is its own clock's
SINCE_SLACK_S = 1.0
#: the guest's wall clock against its monotonic one, ``(time.monotonic(), time.time() -
#: time.monotonic())``, noted when the agent starts and at each command it runs once it moved
#: (a step: a VM reverted to a snapshot, then set right by its tools or NTP)
_clock: list[tuple[float, float]] = []


def note_clock() -> None:
    """Note the wall clock's offset when it moved since the last note (a step, not a drift)."""
    now = time.monotonic()
    offset = time.time() - now
    if not _clock or abs(offset - _clock[-1][1]) > 0.01:
        _clock.append((now, offset))
        del _clock[:-1000]


def wall_since(within: float) -> float:
    """The wall-clock time (a ctime's clock) ``within`` seconds ago, by the earliest reading
    the clock gave since: a clock stepped forward meanwhile would else date a link made
    before the step older than the attempt. ``-inf`` (every link) when the offset in effect
    then was not noted (the agent started since)."""
    note_clock()
    start = time.monotonic() - within
    before = [offset for mono, offset in _clock if mono <= start]
    if not before:
        return float("-inf")
    return start + min([before[-1]] + [offset for mono, offset in _clock if mono > start]) - SINCE_SLACK_S


note_clock()


def links_into_processes(home: str, deadline: float, since: float | None = None) -> list[str]:
    """The symlinks in ``home`` and :data:`WRITABLE_FOLDERS` that lead into a process's
    folder of ``/proc`` (``self``, ``thread-self``, a pid: ``/dev/stdin`` and ``/dev/fd``
    lead there too), as ``link -> target``. What a check reads through one is the reader's
    own: ``/proc/self/cmdline`` holds the check's arguments, so ``grep -qx 37 ~/count.txt``
    passed when the answer made ``~/count.txt`` that link instead of counting. With
    ``since`` (a ``time.time()``), only links whose ctime is at or after it: those the
    attempt could have made (no user can set a ctime back; a rename or a hard link of an
    older link dates it anew). On a machine of one's own (a ``remote`` VM) ``/tmp`` and the
    home hold other programs' links, made before the attempt: they are not the answer's, and
    one of them failed every check of a run. A link made since that leads through an older
    one is still found, the chain being followed. TimeoutError past ``deadline``
    (``time.monotonic()``). A folder that its user may enter but not list (``chmod 111``:
    a check reads a link in it by name, which the search cannot see where this agent is
    that user) is named as ``folder/* -> ?``, unless dated before ``since``.

    With ``since``, a folder dated before it (:func:`_folder`) holds no link made since: a
    link made, renamed or hard-linked into a folder dates the folder anew (its ctime, as its
    mtime). Its links are not looked at, and on a filesystem that counts a folder's subfolders
    in its link count it is read only until its subfolders are found (not at all without
    any): a link made deep in an old tree dates its own folder, not the tree's, so every
    folder below is still visited. An old link whose own ctime moved while its folder's did
    not (a hard link of it made elsewhere, which is found there; its owner or attributes
    changed) is the same link where it was before the attempt."""
    found: list[str] = []
    kinds = _filesystems() if since is not None else {}
    stack: list[tuple[str, bool, int | None]] = []
    seen: set[tuple[int, int]] = set()
    for top in dict.fromkeys(os.path.realpath(f) for f in (home, *WRITABLE_FOLDERS) if os.path.isdir(f)):
        try:  # a home inside /tmp is looked at once, not once more from /tmp
            info = os.stat(top)
        except OSError:
            continue
        seen.add((info.st_dev, info.st_ino))
        stack.append(_folder(top, info, since, kinds))
    stack.reverse()  # the home first: its links are named first (a machine's /tmp holds others')
    while stack:
        path, old, subfolders = stack.pop()
        if subfolders == 0:
            continue  # nothing made in it since, and no folder below it
        try:
            folder = os.scandir(path)
        except OSError as exc:
            # nor can the check list it; but one it may still enter (execute, not read: what
            # `chmod 111` leaves) reads a link in it by name, unseen here, where this agent is
            # the answer's uid (a runner not root): a link of it that the attempt hid so is named
            if exc.errno in (errno.EACCES, errno.EPERM) and not old and os.access(path, os.X_OK):
                found.append(f"{path}/* -> ? (a folder its user may enter but not list: "
                             "the links in it cannot be looked at)")
            continue
        with folder:
            for entry in folder:
                if time.monotonic() > deadline:
                    raise TimeoutError
                try:
                    if entry.is_symlink():
                        if not old and (since is None or entry.stat(follow_symlinks=False).st_ctime >= since) \
                                and _through_a_process(entry.path):
                            found.append(f"{entry.path} -> {os.readlink(entry.path)}")
                    elif entry.is_dir(follow_symlinks=False):
                        info = entry.stat(follow_symlinks=False)
                        if (info.st_dev, info.st_ino) not in seen:  # a folder inside another's
                            seen.add((info.st_dev, info.st_ino))
                            stack.append(_folder(entry.path, info, since, kinds))
                        if subfolders is not None:
                            subfolders -= 1
                            if subfolders == 0:
                                break  # the rest of an old folder: no link to look at, no folder
                except OSError:
                    continue
    return found


#: local filesystems that date a folder anew (its ctime) whenever an entry is made, removed
#: or renamed in it, as POSIX asks
_DATED = frozenset({"tmpfs", "ext2", "ext3", "ext4", "xfs", "btrfs", "overlay"})
#: those whose folder's link count is 2 + its subfolders, exactly (``find``'s leaf
#: optimization; ext4 says 1 past 65,000 subfolders, btrfs and overlayfs's merged folders 1 always)
_COUNTED = frozenset({"tmpfs", "ext2", "ext3", "ext4", "xfs"})


def _folder(path: str, info: os.stat_result, since: float | None,
            kinds: dict[int, str]) -> tuple[str, bool, int | None]:
    """``(path, old, subfolders)``: ``old`` when it is dated before ``since`` on a filesystem
    of :data:`_DATED` (a filesystem of unknown ways, FUSE or NFS, never is); then, on one of
    :data:`_COUNTED`, how many folders it holds (None: unknown)."""
    kind = kinds.get(info.st_dev)
    old = since is not None and kind in _DATED and info.st_ctime < since
    counted = old and kind in _COUNTED and info.st_nlink >= 2
    return path, old, info.st_nlink - 2 if counted else None


def _filesystems() -> dict[int, str]:
    """Device number -> filesystem type, of every mount this process sees."""
    kinds: dict[int, str] = {}
    try:
        with open("/proc/self/mountinfo") as handle:
            for line in handle:
                fields = line.split()
                major, _, minor = fields[2].partition(":")
                kinds[os.makedev(int(major), int(minor))] = fields[fields.index("-") + 1]
    except (OSError, ValueError, IndexError):
        return {}
    return kinds


def _through_a_process(link: str, hops: int = 40) -> bool:
    """Whether resolving ``link`` (absolute) as the kernel does, one component and one link
    at a time, passes through ``/proc/self``, ``/proc/thread-self`` or ``/proc/<pid>``
    (never through this agent's own: those are not followed). A chain this cannot follow
    (too long a path) counts as one that does."""
    pending = link.split("/")[::-1]
    resolved = ""
    while pending:
        name = pending.pop()
        if name in ("", "."):
            continue
        if name == "..":
            resolved = resolved.rsplit("/", 1)[0]
            continue
        path = f"{resolved}/{name}"
        if resolved == "/proc" and (name in ("self", "thread-self") or name.isdigit()):
            return True
        try:
            target = os.readlink(path)
        except OSError as exc:
            if exc.errno not in _PLAIN:
                return True  # ENAMETOOLONG, ELOOP …: what a reader would meet is unknown
            resolved = path
            continue
        hops -= 1
        if hops < 0:
            return False  # a loop: every reader gets ELOOP
        if target.startswith("/"):
            resolved = ""
        pending.extend(target.split("/")[::-1])
    return False
