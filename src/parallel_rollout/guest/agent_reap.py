"""``POST /reap``: kill what a task's commands left running, before its ``check`` runs.

With ``--reap-all`` (:data:`reap_all`: a provider whose agent has a pid namespace or a VM of
its own) it kills every process of the commands' user (``--run-as``), or without one every
process but the agent and the namespace's init; round after round, each stopping them all
before it kills them, so a fork bomb cannot refill what a pass empties; ``left`` in the
answer counts any still alive. Without ``--reap-all`` (an agent started on a shared host) the
agent is a child subreaper (``agent_server.py``) and /reap kills only its own descendants, a
daemon that left its session included, then collects their zombies: never a process of the
machine it did not start. The commands themselves are ``agent_commands.py``'s.
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
    killed, left = _kill_rounds(agent_commands.run_as[0] if agent_commands.run_as is not None and reap_all else None)
    if not reap_all:
        _collect()
    return 200, {"status": "success" if not left else "error", "killed": killed, "left": left}


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


def _kill_rounds(uid: int | None = None) -> tuple[int, int]:
    """Kill what /reap kills (of ``uid`` only, when given) from the agent itself, which
    needs no fork: each round stops them all, so that none forks or kills meanwhile (a fork
    bomb refills what one pass of kills empties), then kills them, until none is left alive
    (5 s at most). (How many were killed, how many are still alive.)"""
    import time

    deadline, killed = time.monotonic() + 5.0, 0
    while True:
        alive = [pid for pid in _reapable() if _alive(pid, uid)]
        if not alive or time.monotonic() >= deadline:
            return killed, len(alive)
        for signal in (agent_spawn.SIGSTOP, agent_spawn.SIGKILL):
            for pid in alive:
                try:
                    os.kill(pid, signal)
                except OSError:
                    pass
        killed += len(alive)
        time.sleep(0.001)  # a killed process takes a moment to be a zombie


def _alive(pid: int, uid: int | None) -> bool:
    """Whether process ``pid`` runs (not a zombie), as ``uid`` when given."""
    try:
        with open(f"/proc/{pid}/status", "rb") as handle:
            fields = dict(line.split(b":", 1) for line in handle if line.startswith((b"State:", b"Uid:")))
        return fields[b"State"].split()[0] != b"Z" and \
            (uid is None or int(fields[b"Uid"].split()[0]) == uid)
    except (OSError, KeyError, ValueError, IndexError):
        return False  # gone meanwhile


def _reapable() -> dict[int, int]:
    """What /reap kills without --run-as, pid -> parent pid: with --reap-all every process
    but the agent and pid 1; else the agent's descendants (the agent is then a child
    subreaper, so a daemon that left its session is still one), nothing else of the
    machine."""
    me = os.getpid()
    parents = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as handle:
                    parents[int(name)] = int(handle.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass  # gone meanwhile
    if reap_all:
        return {pid: ppid for pid, ppid in parents.items() if pid not in (1, me)}
    ours = {me}
    grew = True
    while grew:  # pid order is not parents first
        grew = False
        for pid, ppid in parents.items():
            if ppid in ours and pid not in ours:
                ours.add(pid)
                grew = True
    return {pid: parents[pid] for pid in ours if pid != me}


def _collect() -> None:
    """Wait for the agent's children that no request waits for: orphans it adopted as a
    subreaper, which the kill made zombies (a grandchild may be adopted only as its
    parent dies, so look until none is left, for at most 2 s)."""
    import time

    deadline = time.monotonic() + 2.0
    while True:
        adopted = [pid for pid, ppid in _reapable().items()
                   if ppid == os.getpid() and pid not in agent_commands.running]
        for pid in adopted:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        if not adopted or time.monotonic() > deadline:
            return
        time.sleep(0.01)
