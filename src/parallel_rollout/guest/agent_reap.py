"""``POST /reap``: kill what a task's commands left running, before its ``check`` runs.

With ``--reap-all`` (:data:`reap_all`: a provider whose agent has a pid namespace or a VM of
its own) it kills every process of the commands' user (``--run-as``), or without one every
process but the agent and the namespace's init; round after round, each killing whole each
process group that holds only such processes (one ``kill(-pgid)``: no member forks once it
began, so a fork bomb cannot refill what a pass empties) and stopping, then killing, the
others; ``left`` in the answer counts any still alive after the rounds (:func:`_kill_rounds`).
Without ``--reap-all`` (an agent started on a shared host) the agent is a child subreaper
(``agent_server.py``) and /reap kills only its own descendants, a daemon that left its session
included, then collects their zombies: never a process of the machine it did not start; a
thread of its own collects those of orphans nothing waits for meanwhile (:func:`collect_orphans`).
Either way the desktop the agent itself started (``--desktop``: its session bus, Xvfb, window
manager and the AT-SPI buses they started before "ready", :func:`keep_desktop`) is spared, by pid
and start time: a shell task's reap on a desktop agent ended it, and every later desktop task
on that agent failed. What a task started through them later (an app a bus activated) is reaped.
The commands themselves are ``agent_commands.py``'s.
"""

from __future__ import annotations

import os

try:
    from . import agent_commands, agent_spawn
    from .agent_http import Request
except ImportError:  # a sibling file in the guest, not a package
    import agent_commands  # type: ignore[no-redef]
    import agent_spawn  # type: ignore[no-redef]
    from agent_http import Request  # type: ignore[no-redef]

#: ``--reap-all``: the agent is alone in a pid namespace of its own (a sandbox, a container,
#: a VM), so /reap may kill every process it sees but itself and pid 1. Never the default:
#: an agent run on a host (a remote machine, a test) would kill the whole machine
reap_all = False


def route_reap(req: Request):
    """POST /reap: kill every process the commands left (see "Who runs what"); the body is
    an empty JSON object, like every POST route's a JSON object. ``left``: how many were
    still alive after it (0, or the reap failed: the client raises rather than grade)."""
    req.json()  # 400 for anything else: a malformed request is refused, not obeyed

    # With --run-as and --reap-all: that user's processes, from the agent itself (no fork).
    # It was one shell that ran `kill -9 -1` as that user: a process the answer left running
    # could kill that shell before its kill (its pid is the next one), and the check then
    # ran beside it (a daemon that re-created what the check tests, or killed its git).
    killed, left = _kill_rounds(agent_commands.run_as[0] if agent_commands.run_as is not None and reap_all else None,
                                spare=desktop)
    if not reap_all:
        _collect()
    return 200, {"status": "success" if not left else "error", "killed": killed, "left": left}


#: pid -> start time of the agent's own desktop processes (:func:`keep_desktop`), which /reap spares
desktop: dict[int, bytes] = {}


def keep_desktop() -> None:
    """Once the agent's desktop is up (before "ready", so before any command runs): its
    processes then, the agent's descendants, are the desktop's own, which /reap spares (by pid
    and start time: a pid reused later is not spared). The agent's end still ends them."""
    for pid in _descendants({pid: found[0] for pid in _pids() if (found := _status(pid)) is not None}):
        fields = _stat(f"/proc/{pid}/stat")
        if fields and len(fields) > 19:
            desktop[pid] = fields[19]


#: the signal that is stopping the agent (SIGTERM, SIGHUP), once one came
_stopped_by: list[int] = []


def end_with_the_agent() -> None:
    """On a shared host (no --reap-all): what the commands left running (a daemon, a web
    episode's page server and browser) goes when the agent is stopped, by SIGTERM, SIGHUP (an
    ssh session that ended) or ^C, instead of living on as the machine's: SIGTERM and SIGHUP
    (unless ignored: ``nohup``) end ``serve_forever`` so that :func:`agent_ends` runs. A
    SIGKILL leaves them, as it leaves any program's."""
    try:
        import _signal as signals
    except ImportError:  # not CPython
        import signal as signals  # type: ignore[no-redef]

    def stop(signum, frame):
        _stopped_by.append(signum)
        raise SystemExit(128 + signum)

    for signum in (signals.SIGTERM, signals.SIGHUP):
        if signals.getsignal(signum) == signals.SIG_DFL:
            signals.signal(signum, stop)


def agent_ends() -> None:
    """The agent stops: without --reap-all, kill its descendants (what /reap kills), then
    die by the signal that stopped it, as it did before."""
    if reap_all:
        return
    _kill_rounds()
    if _stopped_by:
        try:
            import _signal as signals
        except ImportError:
            import signal as signals  # type: ignore[no-redef]
        signals.signal(_stopped_by[0], signals.SIG_DFL)
        os.kill(os.getpid(), _stopped_by[0])


#: a reap's time: BASE_S, then a round that leaves fewer processes alive than any before it
#: (it killed more than were forked meanwhile) extends it to PROGRESS_S past that round, up to
#: MAX_S in all (below the client's 20 s wait for the answer)
REAP_BASE_S, REAP_PROGRESS_S, REAP_MAX_S = 5.0, 3.0, 15.0


def _kill_rounds(uid: int | None = None, spare: dict[int, bytes] | None = None) -> tuple[int, int]:
    """Kill what /reap kills (of ``uid`` only, when given; never ``spare``'s processes, pid ->
    start time) from the agent itself, which
    needs no fork, round after round until a round finds none alive: REAP_BASE_S, longer
    while rounds make progress (see there). (How many were killed, how many are still alive.)

    A process group all of whose processes are to be killed is killed whole, by one
    ``kill(-pgid, SIGKILL)``: the kernel signals every member at once, and a fork under way
    in it is cancelled or its child killed too, so no member forks once the kill began; a
    fork bomb (a shell's ``f() { f | f & }``: one group) ends in one round. Killed one pid at a
    time (stopped first, then killed), processes forked between a round's listing and its
    signals refilled each slot of ``pids.max`` a kill freed, and new ones appeared even after
    a round that found every process stopped (the kernel continues an orphaned group that has
    stopped members, SIGHUP then SIGCONT, and a kill orphans one): on a loaded machine dozens
    survived 5 s of rounds. The others (a group that also holds a process /reap must spare)
    are stopped, then killed, one by one as before."""
    import time

    start = time.monotonic()
    deadline, fewest = start + REAP_BASE_S, None
    killed: set[int] = set()
    while True:
        members, whole = _members(uid, spare or {})
        now = time.monotonic()
        if fewest is None or len(members) < fewest:
            fewest = len(members)
            deadline = min(max(deadline, now + REAP_PROGRESS_S), start + REAP_MAX_S)
        if not members or now >= deadline:
            return len(killed), len(members)
        for pgid in whole:
            _signal(-pgid, agent_spawn.SIGKILL)
        rest = [pid for pid, pgid in members.items() if pgid not in whole]
        for signal in (agent_spawn.SIGSTOP, agent_spawn.SIGKILL):
            for pid in rest:
                _signal(pid, signal)
        killed.update(members)
        time.sleep(0.002)  # a killed process takes a moment to be a zombie


#: the states of a process that is gone but for its exit status
DEAD = (b"Z", b"X")


def _gone(pid: int, state: bytes) -> bool:
    """Whether process ``pid`` (its leader in ``state``) is gone but for its exit status: a
    leader that ended by the exit system call (not exit_group) is a zombie while the other
    threads of its process run on, and a daemon of the answer that did so was spared, its
    threads rewriting what the check read."""
    if state not in DEAD:
        return False
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    for tid in threads:
        fields = _stat(f"/proc/{pid}/task/{tid}/stat")
        if fields and fields[0] not in DEAD:  # (none: gone meanwhile)
            return False
    return True


def _members(uid: int | None, spare: dict[int, bytes]) -> tuple[dict[int, int], set[int]]:
    """(pid -> process group of each live process /reap kills (of ``uid`` only, when
    given; none of ``spare``, pid -> start time), the groups all of whose live processes are
    among them)."""
    me = os.getpid()
    table = {pid: found for pid in _pids() if (found := _status(pid)) is not None}
    if reap_all:
        chosen = {pid for pid in table if pid not in (1, me)}
    else:
        chosen = _descendants({pid: found[0] for pid, found in table.items()})
    members, spared = {}, set()
    for pid, (_, state, owner) in table.items():
        if _gone(pid, state):
            continue
        try:
            pgid = os.getpgid(pid)
        except OSError:
            continue  # gone meanwhile
        if pid in chosen and (uid is None or owner == uid) and not _spared(pid, spare):
            members[pid] = pgid
        else:
            spared.add(pgid)
    return members, set(members.values()) - spared


def _spared(pid: int, spare: dict[int, bytes]) -> bool:
    """Whether ``pid`` is one of ``spare``'s processes, with the start time it had then."""
    if pid not in spare:
        return False
    fields = _stat(f"/proc/{pid}/stat")
    return bool(fields) and len(fields) > 19 and fields[19] == spare[pid]


#: seconds between two looks for zombies no request waits for (no --reap-all): see
#: :func:`collect_orphans`
ORPHAN_LOOK_S = 5.0


def collect_orphans() -> None:
    """Without --reap-all, in a thread of the agent's own, for as long as it runs: collect the
    zombies of the processes it adopted as a child subreaper that nothing else waits for (a
    web episode's page server and Chromium, ended by pid once graded: a dozen zombies an
    episode, which piled up under an agent on a machine no reset clears until /reap or the
    agent's end). A zombie child that is no running command's and is still one, with the same
    start time, ORPHAN_LOOK_S later is waited for by no request: a request's thread collects
    its own as it exits."""
    import _thread  # not threading: the agent's boot imports no module it can do without
    import time

    def look() -> None:
        seen: dict[int, bytes] = {}
        while True:
            time.sleep(ORPHAN_LOOK_S)
            try:
                zombies = _zombie_children()
            except OSError:  # /proc unreadable for a moment: the thread goes on
                continue
            for pid, started in zombies.items():
                if seen.get(pid) == started and pid not in agent_commands.running:
                    try:
                        os.waitpid(pid, os.WNOHANG)
                    except ChildProcessError:
                        pass  # collected meanwhile
            seen = zombies

    _thread.start_new_thread(look, ())


def _zombie_children() -> dict[int, bytes]:
    """pid -> start time of the agent's children that are zombies."""
    me, found = os.getpid(), {}
    for pid in _pids():
        fields = _stat(f"/proc/{pid}/stat")
        if fields and len(fields) > 19 and fields[0] == b"Z" and fields[1] == b"%d" % me:
            found[pid] = fields[19]
    return found


def _stat(path: str) -> list[bytes] | None:
    """The fields of a ``/proc/PID/stat`` (or a thread's) after the command's name: the state
    letter, the parent pid …, the start time at [19]; None when the process is gone."""
    try:
        with open(path, "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None  # gone meanwhile


def _signal(pid: int, signal: int) -> None:
    try:
        os.kill(pid, signal)
    except OSError:
        pass  # gone meanwhile


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _status(pid: int) -> tuple[int, bytes, int] | None:
    """(parent pid, state letter, real uid) of process ``pid``; None when it is gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as handle:
            fields = dict(line.split(b":", 1) for line in handle
                          if line.startswith((b"State:", b"PPid:", b"Uid:")))
        return int(fields[b"PPid"]), fields[b"State"].split()[0], int(fields[b"Uid"].split()[0])
    except (OSError, KeyError, ValueError, IndexError):
        return None  # gone meanwhile


def own_processes(name: str) -> dict[int, int]:
    """pid -> parent pid of the live processes named ``name`` (their ``comm``) that /reap would
    count as the commands': this agent's descendants (every process but pid 1 and the agent's
    with --reap-all), never another agent's of the same host."""
    table = _live()
    chosen = set(table) - {1, os.getpid()} if reap_all else _descendants({pid: f[0] for pid, f in table.items()})
    return {pid: table[pid][0] for pid in chosen if _named(pid, name)}


def _live() -> dict[int, tuple[int, bytes, int]]:
    """pid -> (parent pid, state, uid) of every live process (no zombie)."""
    return {pid: found for pid in _pids() if (found := _status(pid)) is not None and not _gone(pid, found[1])}


def _named(pid: int, name: str) -> bool:
    """Whether process ``pid``'s ``comm`` is ``name`` (False once it is gone)."""
    try:
        with open(f"/proc/{pid}/comm", "rb") as handle:
            return handle.read().strip() == name.encode()
    except OSError:
        return False  # gone meanwhile


def others_in_reach(name: str) -> dict[int, int]:
    """pid -> uid of the live processes named ``name`` (their ``comm``) that are not this
    agent's but that its commands can signal: all of them when the commands run as root,
    else those of the commands' user. On a host of several desktop agents whose commands run
    as one user (or root), a task's ``pkill Xvfb`` or ``kill -9 -1`` ends another agent's
    desktop, and that agent's task fails as if it were its own doing."""
    commands_uid = agent_commands.run_as[0] if agent_commands.run_as is not None else os.getuid()
    table = _live()
    ours = _descendants({pid: found[0] for pid, found in table.items()}) | {os.getpid()}
    return {pid: owner for pid, (_, _, owner) in table.items()
            if pid not in ours and commands_uid in (0, owner) and _named(pid, name)}


def _descendants(parents: dict[int, int]) -> set[int]:
    """The agent's descendants among ``parents`` (pid -> parent pid): the agent is then a
    child subreaper, so a daemon that left its session is still one."""
    me = os.getpid()
    ours = {me}
    grew = True
    while grew:  # pid order is not parents first
        grew = False
        for pid, ppid in parents.items():
            if ppid in ours and pid not in ours:
                ours.add(pid)
                grew = True
    ours.discard(me)
    return ours


def _collect() -> None:
    """Wait for the agent's children that no request waits for: orphans it adopted as a
    subreaper, which the kill made zombies (a grandchild may be adopted only as its
    parent dies, so look until none is left, for at most 2 s)."""
    import time

    deadline = time.monotonic() + 2.0
    while True:
        adopted = [pid for pid in _pids() if pid not in agent_commands.running
                   and (found := _status(pid)) is not None and found[0] == os.getpid()]
        for pid in adopted:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        if not adopted or time.monotonic() > deadline:
            return
        time.sleep(0.01)
