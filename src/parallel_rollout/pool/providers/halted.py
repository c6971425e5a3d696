"""A VM that stopped answering because a process of it was stopped or traced from outside.

A guest agent that gets SIGSTOP (an operator's ``kill -STOP``, a debugger's attach) answers
nothing, as a killed one does, but nothing exits: no exit status, no gone container, no dead
QEMU to tell the provider why. What tells it is ``/proc``: the process's state (``T``
stopped, ``t`` stopped by a tracer) or a ``TracerPid``. Whether that is the task's doing
depends on who the process is: the task's user can stop its own processes, never another
user's (the agent and the namespace's init as root, a process provider's or docker's; the
QEMU process, which nothing in a guest can reach).

``halted_tree`` walks a process and its descendants and names the first one, not of the
task's user, that is stopped or traced. The process provider asks it of a sandbox's init,
docker of a container's init (its host pid, when the daemon runs on this host), qemu of its
QEMU process. Read from the host's ``/proc``: a few files per process, said at once, so
that a provider need not wait for a death that will not come.
"""

from __future__ import annotations

import os


def halted_tree(root: int, task_uid: int | None, what: str = "process") -> str | None:
    """Which process of ``root`` and its descendants is stopped or traced, as a sentence for
    a VMKilled's cause, or None. A process whose real or saved uid is ``task_uid`` is left
    out, with what it started: the task may have stopped it itself (None: no process is
    left out), and the walk stays short whatever the task forked. ``what``: how the sentence
    names a process ("its QEMU process")."""
    pending, seen = [root], set()
    while pending:
        pid = pending.pop()
        if pid in seen:
            continue
        seen.add(pid)
        fields = proc_status(pid)
        uids = fields.get("Uid", "").split()
        if len(uids) < 3:
            continue  # gone
        if task_uid is not None and str(task_uid) in (uids[0], uids[2]):
            continue  # the task's: it may stop it, and what it starts is its too (no_new_privs: no setuid)
        state, tracer = fields.get("State", "")[:1], fields.get("TracerPid", "0")
        if state in ("T", "t") or tracer not in ("", "0"):
            how = f"traced by process {tracer}" if tracer not in ("", "0") else "stopped"
            who = "nothing inside the VM can do" if task_uid is None else f"the task's user (uid {task_uid}) cannot do"
            return f"its {what} {pid} ({fields.get('Name', '?')}, uid {uids[0]}) was {how} from outside, which {who}"
        pending.extend(children_of(pid))
    return None


def proc_status(pid: int) -> dict[str, str]:
    """``/proc/PID/status`` as its fields ({} when the process is gone)."""
    try:
        with open(f"/proc/{pid}/status", errors="replace") as status:  # a Name may be any bytes
            return dict(line.rstrip("\n").split(":\t", 1) for line in status if ":\t" in line)
    except OSError:
        return {}


def children_of(pid: int, proc: str = "/proc", strict: bool = False) -> list[int]:
    """The pids of ``pid``'s children, from each of its threads' ``children`` file in
    ``proc``; none when it is gone. ``strict``: a file there that cannot be read (not ours
    to read, no such file on this kernel) raises OSError instead of counting as no children."""
    found = []
    try:
        threads = os.listdir(f"{proc}/{pid}/task")
    except FileNotFoundError:
        return found
    except OSError:
        if strict:
            raise
        return found
    for thread in threads:
        try:
            with open(f"{proc}/{pid}/task/{thread}/children") as children_file:
                found.extend(int(child) for child in children_file.read().split())
        except FileNotFoundError:
            continue  # the thread ended meanwhile
        except (OSError, ValueError):
            if strict:
                raise OSError(f"{proc}/{pid}/task/{thread}/children cannot be read") from None
            continue
    return found
