"""What grades an answer is out of the answer's reach (issue 24), as root and as nobody.

A grading script reaches its interpreter as a sealed memfd: a daemon of the answer watching
/tmp neither reads nor rewrites it. The sandbox's namespace init holds neither the runner's
environment nor a file on the host's disk; the agent reads the files a grader fetches with
the answer's rights; grading wrappers the sandbox's user cannot run are a clear error before
any VM starts. The VMs are the process provider's, started by a script of the test's own, run
as the runner or, through setpriv, as nobody.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from hostile_tasks import IS_ROOT, ROOT
from nobody_runs import _nobody_can_run

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


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
    wrappers = tmp_path / "grading_bin"
    shutil.copytree(process.GRADING_BIN, wrappers)
    (wrappers / "jq").chmod(0o700)  # a checkout made under umask 077
    monkeypatch.setattr(process, "GRADING_BIN", wrappers)  # the readability check's list
    with pytest.raises(ConfigError, match=r"cannot read the guest's .*grading_bin/jq \(0o700\).*"
                                          r"chmod -R o\+rX"):
        process.ProcessProvider("hostile-wrappers")
    (wrappers / "jq").chmod(0o755)
    process.ProcessProvider("hostile-wrappers")
