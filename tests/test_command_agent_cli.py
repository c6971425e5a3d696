"""The command agent's life as a plugin author meets it, through the CLI: a program that dies
within an episode fails its attempt (it is not started again mid-episode); one that hangs is
``task_timeout``, its stderr tail recorded; one that cannot start is refused before the run (a CRLF
``#!`` line, a script that is not executable, a host where its sandbox cannot be made) or, when
that cannot be seen, explained; shell syntax in --agent-cmd, which no shell runs, is refused.
"""

from __future__ import annotations

import shlex
import sys

from click.testing import CliRunner

from agent_runs import needs_bwrap
from conftest import read_results, shell_task, write_tasks
from parallel_rollout.cli import main


def run(tmp_path, run_id: str, agent_cmd: str, *flags: str, tasks: int = 2):
    """A shell run of ``tasks`` small tasks on one env loop, driven by ``agent_cmd``."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task(f"t{i}") for i in range(tasks)])
    return CliRunner().invoke(main, [
        "--mode", "shell", "--data", str(data), "--output-dir", str(tmp_path / "out"), "--run-id", run_id,
        "--num-rollouts", "1", "--agent", "command", "--no-progress", "--agent-cmd", agent_cmd, *flags])


def python_agent(tmp_path, name: str, source: str) -> str:
    script = tmp_path / name
    script.write_text(source)
    return " ".join(shlex.quote(part) for part in (sys.executable, str(script)))


# Replies to turn 1, then crashes; a process started again would get turn 2 without the
# task, and say DONE: the attempt would pass, graded on a process that never saw the episode.
CRASH_AFTER_REPLY = """\
import json, sys
msg = json.loads(sys.stdin.readline())
if msg["turn"] == 1:
    print(json.dumps({"command": f"sleep 0.5; touch ~/{msg['task_id']}.done"}), flush=True)
    raise RuntimeError("agent crashed after its first reply")
print(json.dumps("DONE"), flush=True)
"""


@needs_bwrap
def test_an_agent_that_dies_within_an_episode_fails_the_attempt(tmp_path):
    result = run(tmp_path, "crash", python_agent(tmp_path, "crash.py", CRASH_AFTER_REPLY))
    assert result.exit_code == 0, result.output[-3000:]
    records = read_results(tmp_path / "out" / "crash")
    assert sorted((r["task_id"], r["status"]) for r in records) == [("t0", "error"), ("t1", "error")], records
    for record in records:
        message = record["failure"]["message"]
        assert "turn 2: the agent" in message and "it exited with status 1" in message, message
        assert "during the episode (after its reply to turn 1" in message, message
        assert "agent crashed after its first reply" in message, message  # its stderr tail


# Hangs: one never reads its stdin, one reads it to the end (which never comes) first.
HANGS = """\
import sys, time
print("thinking forever", file=sys.stderr, flush=True)
time.sleep(600)
"""
READS_ALL = """\
import sys
print("reading until EOF", file=sys.stderr, flush=True)
sys.stdin.read()
"""


@needs_bwrap
def test_a_hanging_agent_is_a_task_timeout_with_its_stderr(tmp_path):
    """One outcome, not a race between the agent's wait for a reply (an ``error``) and the
    runner's kill at --task-timeout (a ``task_timeout`` that lost the stderr): the agent's
    wait ends first, its record is ``task_timeout`` and quotes the agent's stderr, and no
    worker is killed."""
    for name, source, said in (("hang", HANGS, "thinking forever"), ("readall", READS_ALL, "reading until EOF")):
        result = run(tmp_path, name, python_agent(tmp_path, f"{name}.py", source), "--task-timeout", "4")
        assert result.exit_code == 0, result.output[-3000:]
        records = read_results(tmp_path / "out" / name)
        assert [r["status"] for r in records] == ["task_timeout"] * 2, records
        for record in records:
            failure = record["failure"]
            assert failure["type"] == "TaskTimeout" and not record["infrastructure"], failure
            assert "turn 1: no reply within --task-timeout 4s" in failure["message"], failure
            assert f"stderr tail:\n{said}" in failure["message"], failure
        assert "killed after task_timeout" not in result.output, result.output


@needs_bwrap
def test_an_agent_that_does_not_read_a_large_observation_is_a_task_timeout_with_its_stderr(tmp_path):
    """The observation's write had no deadline: 200 KB to an agent that never reads its
    stdin blocked on the full pipe until the runner killed the worker at --task-timeout
    (its stderr tail lost). It is written by the reply's deadline: task_timeout, with the tail."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("big", instruction="x" * 200_000)])
    result = CliRunner().invoke(main, [
        "--mode", "shell", "--data", str(data), "--output-dir", str(tmp_path / "out"), "--run-id", "big",
        "--num-rollouts", "1", "--agent", "command", "--no-progress", "--task-timeout", "4",
        "--agent-cmd", python_agent(tmp_path, "hang.py", HANGS)])
    assert result.exit_code == 0, result.output[-3000:]
    [record] = read_results(tmp_path / "out" / "big")
    failure = record["failure"]
    assert record["status"] == "task_timeout" and failure["type"] == "TaskTimeout", record
    assert "turn 1: no reply within --task-timeout 4s" in failure["message"], failure
    assert "stderr tail:\nthinking forever" in failure["message"], failure
    assert "killed after task_timeout" not in result.output, result.output


@needs_bwrap
def test_a_program_that_cannot_start_is_refused_before_the_run(tmp_path):
    """A script with Windows line ends passed --dry-run, then every task failed with
    "bwrap: execvp ./agent.sh: No such file or directory" of a file that exists: its #! line
    named '/bin/bash\\r'. Found at the start now (the run and --dry-run alike, exit 2), with
    a script that is not executable and one whose interpreter does not exist."""
    crlf = tmp_path / "agent_crlf.sh"
    crlf.write_bytes(b'#!/bin/bash\r\nwhile read -r line; do echo \'"DONE"\'; done\r\n')
    crlf.chmod(0o755)
    result = run(tmp_path, "crlf", str(crlf))
    assert result.exit_code == 2, result.output[-3000:]
    assert (f"{str(crlf)!r} starts with the line '#!/bin/bash\\r', which ends in a carriage return (\\r): "
            "the file has Windows (CRLF) line ends") in result.output, result.output
    assert "looks for the interpreter '/bin/bash\\r', which does not exist" in result.output, result.output
    assert not (tmp_path / "out" / "crlf" / "results.jsonl").exists()
    dry = run(tmp_path, "crlf-dry", str(crlf), "--dry-run")
    assert dry.exit_code == 2 and "Windows (CRLF) line ends" in dry.output, dry.output[-3000:]

    plain = tmp_path / "agent.sh"
    plain.write_text('#!/bin/sh\nwhile read -r line; do echo \'"DONE"\'; done\n')
    result = run(tmp_path, "noexec", str(plain))
    assert result.exit_code == 2 and f"{str(plain)!r} is not executable: chmod +x" in result.output, result.output

    plain.write_text('#!/no/such/interpreter\n')
    plain.chmod(0o755)
    result = run(tmp_path, "nointerp", str(plain))
    assert result.exit_code == 2, result.output[-3000:]
    assert "but its interpreter '/no/such/interpreter' does not exist" in result.output, result.output


def test_a_script_the_interpreter_cannot_find_is_refused_before_the_run(tmp_path, monkeypatch):
    """--agent-cmd 'python3 agnet.py' (a typo, or a job run from another folder): its dry run
    passed and the run exited 0 with every task the agent's error, graded 0, python3 saying
    "can't open file" in each record. Refused at the start now (the run and --dry-run alike,
    exit 2), naming the script and the folder a relative one is looked for in."""
    monkeypatch.chdir(tmp_path)
    command = f"{shlex.quote(sys.executable)} agnet.py"
    for run_id, flags in (("typo", ()), ("typo-dry", ("--dry-run",))):
        result = run(tmp_path, run_id, command, *flags)
        said = " ".join(result.output.split())
        assert result.exit_code == 2, result.output[-3000:]
        assert (f"would run the script 'agnet.py', which does not exist (in {tmp_path}, the folder the agent "
                "starts in)") in said, said
        assert not (tmp_path / "out" / run_id / "results.jsonl").exists()
    from parallel_rollout.agents.command_checks import check_script

    (tmp_path / "agnet.py").write_text("")
    check_script([sys.executable, "agnet.py"])  # there: passes
    check_script([sys.executable, "-m", "no_such_module"])  # an option first: not looked into


def refused_with_a_bwrap_that_fails_at(tmp_path, monkeypatch, run_id: str, option: str, complaint: str) -> str:
    """A run whose bubblewrap says ``complaint`` and fails at ``option``, as a restricted
    host's does: refused before the run (exit 2, no record); what it said, on one line."""
    from parallel_rollout.agents import agent_sandbox

    bwrap = tmp_path / "bwrap"
    bwrap.write_text(f'#!/bin/sh\nfor arg; do [ "$arg" = {option} ] && '
                     f'{{ echo {shlex.quote(complaint)} >&2; exit 1; }}; done\nexec {agent_sandbox._SANDBOX[0]} "$@"\n')
    bwrap.chmod(0o755)
    monkeypatch.setattr(agent_sandbox, "_SANDBOX", [str(bwrap), *agent_sandbox._SANDBOX[1:]])
    result = run(tmp_path, run_id, python_agent(tmp_path, "argv.py", ARGV_AGENT))
    assert result.exit_code == 2, result.output[-3000:]
    assert not (tmp_path / "out" / run_id / "results.jsonl").exists()
    return " ".join(result.output.split())


@needs_bwrap
def test_a_host_where_bubblewrap_cannot_hide_a_folder_is_refused_before_the_run(tmp_path, monkeypatch):
    """The start's probe ran bubblewrap without the mounts that hide the VM folders, the
    run's folder and its task file: on a host where those mounts fail, the probe passed and
    every task failed as the agent's error, graded 0. It probes with them now (exit 2)."""
    said = refused_with_a_bwrap_that_fails_at(tmp_path, monkeypatch, "nomount", "--tmpfs",
                                              "bwrap: Can't mount tmpfs: Operation not permitted")
    assert "the folders and files it hides from the agent): bwrap: Can't mount tmpfs" in said, said


@needs_bwrap
def test_a_host_where_bubblewrap_cannot_bind_a_folder_is_refused_before_the_run(tmp_path, monkeypatch):
    """The agent sees the host read-only but for a few writable folders (bound read-write),
    with the runner's code inside those bound read-only again: the start's probe makes those
    binds too, and a host where they fail is refused before the run (exit 2), saying what it
    tried to show the agent writable."""
    said = refused_with_a_bwrap_that_fails_at(tmp_path, monkeypatch, "nobind", "--bind",
                                              "bwrap: Can't bind mount /oldroot/tmp on /newroot/tmp: "
                                              "Operation not permitted")
    assert "with the view of the host it gives the agent (the host read-only but for /tmp," in said, said
    assert "the folders and files it hides from the agent): bwrap: Can't bind mount /oldroot/tmp" in said, said


@needs_bwrap
def test_bubblewraps_enoent_is_explained_when_it_happens(tmp_path):
    """What the start cannot check cheaply (the interpreter is a script whose own interpreter
    is missing): bubblewrap's "No such file or directory" of a file that exists is explained."""
    interpreter = tmp_path / "interp.sh"
    interpreter.write_text("#!/no/such/interpreter\n")
    agent = tmp_path / "agent.sh"
    agent.write_text(f"#!{interpreter}\n")
    for script in (interpreter, agent):
        script.chmod(0o755)
    result = run(tmp_path, "nested", str(agent), tasks=1)
    assert result.exit_code == 0, result.output[-3000:]
    [record] = read_results(tmp_path / "out" / "nested")
    message = record["failure"]["message"]
    assert record["status"] == "error" and f"bwrap: execvp {agent}: No such file or directory" in message, record
    assert (f"(bubblewrap could not start {agent}: it, or the interpreter its #! line names, does not exist; "
            "a #! line with a Windows (CRLF) line end names '/bin/bash\\r'") in message, message


# Says DONE to every turn, having written its arguments down.
ARGV_AGENT = """\
import json, sys
open(sys.argv[1], "w").write(json.dumps(sys.argv[2:]))
for line in sys.stdin:
    print(json.dumps("DONE"), flush=True)
"""


@needs_bwrap
def test_shell_syntax_in_agent_cmd_is_refused(tmp_path):
    """--agent-cmd is split as a shell would split it but not run by one: "cd x && node a.js"
    was refused as "'cd' is not an executable file", and "node a.js 2>/dev/null" or
    "python3 x.py | cat" ran, `2>/dev/null`, `|` and `cat` handed to the program as arguments.
    Such words are refused, before the run, saying how to run a shell; --help says it."""
    agent = python_agent(tmp_path, "argv.py", ARGV_AGENT)
    for command, word, way in (
            ("cd cmds && node ../agent.js", "'&&' is a shell operator", "sh -c 'cd cmds && node ../agent.js'"),
            (f"{agent} out.json 2>/dev/null", "'>' is a redirection", "sh -c "),
            (f"{agent} out.json | cat", "'|' is a shell operator", "sh -c "),
            (f"{agent} out.json ; true", "';' is a shell operator", "sh -c "),
            (f"{agent} out.json > log", "'>' is a redirection", "or put the command line in a script"),
            (f"{agent} out.json <in.txt", "'<' is a redirection", "sh -c "),
            # written against a word, as a shell reads them too
            (f"{agent} out.json; echo x", "';' is a shell operator", "sh -c "),
            (f"{agent} out.json|cat", "'|' is a shell operator", "sh -c "),
            (f"{agent} out.json&&true", "'&&' is a shell operator", "sh -c "),
            (f"{agent} out.json>log", "'>' is a redirection", "sh -c "),
            (f"{agent} $(pwd)/out.json", "'$(' is a command substitution", "sh -c "),
            (f"{agent} `pwd`/out.json", "'`' is a command substitution", "sh -c "),
            (f"{agent} \"$(pwd)/out.json\"", "'$(' is a command substitution", "sh -c "),
            (f"FOO=1 {agent} out.json", "'FOO=1' sets a variable", f"'env FOO=1 {agent} out.json'")):
        result = run(tmp_path, "shell", command)
        assert result.exit_code == 2, (command, result.output[-3000:])
        assert "but --agent-cmd is not run by a shell" in result.output, (command, result.output)
        assert word in result.output and way in result.output, (command, result.output)
        assert not (tmp_path / "out" / "shell").exists(), command
    # quoted, such a word is an argument like any other
    argv_file = tmp_path / "argv.json"
    result = run(tmp_path, "quoted", f"{agent} {argv_file} '>' \"2>/dev/null\" '|' 'a;b' '$(x)'", tasks=1)
    assert result.exit_code == 0, result.output[-3000:]
    assert argv_file.read_text() == '[">", "2>/dev/null", "|", "a;b", "$(x)"]'
    help_text = " ".join(CliRunner().invoke(main, ["run", "--help"]).output.split())
    assert "Split into words as a shell would, but not run by one" in help_text, help_text
