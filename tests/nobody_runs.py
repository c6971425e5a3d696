"""Runs as the unprivileged user ``nobody`` for the hostile tests (which run as root: the
README's commands): whether this machine lets them run, a pids cgroup delegated to nobody for
a whole run, and a CLI run of tasks as nobody. Used by tests/test_hostile_answers.py,
test_vm_costs.py and test_grading_out_of_reach.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from conftest import assert_exactly_once, write_tasks
from hostile_tasks import IS_ROOT, ROOT
from parallel_rollout.pool.providers import cgroups


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
                   agent: str = "oracle", memory_mb: int | None = 256, vms: int = 2):
    """The CLI run of ``tasks`` as nobody with ``agent`` (tests/ is on its path: the chaos
    agents), ``vms`` rollouts on as many VMs and ``--vm-memory-mb memory_mb`` (None: none), in the cgroup whose cgroup.procs
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
            "--data", str(data), "--agent", agent, "--num-rollouts", str(vms), "--num-vms", str(vms),
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
