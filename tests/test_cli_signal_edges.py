"""A stop signal at the two edges of ``run``'s own handlers, as a scheduler sends it: while
run parses its flags (its handlers not set yet), and once the run has its exit code (its
summary, report and gates written and said) while the interpreter ends (exit handlers,
multiprocessing's finalizers: tens of milliseconds).

Each case starts the command as its console script's process does (the CLI's early handler
is set only there) and sends the signal from within, at that point: a SIGTERM there killed
the process as the signal's default does (143) instead of the 130 of "nothing ran", or of
the run's own exit code."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from conftest import shell_task, write_tasks
from test_runner import stop_signals_ignoring

#: the command as ``parallel-rollout …`` runs it, with the signal sent to itself at WHERE:
#: ``parsing`` as run's flags are parsed, ``exiting`` in an exit handler of the interpreter,
#: ``finalizing`` as Python collects the main module, past its exit handlers
COMMAND = r"""
import atexit, os, sys, time, types
sys.argv[0] = "parallel-rollout"  # as the console script's process: the CLI's early handler is set
import parallel_rollout.cli as cli
where, signum = sys.argv.pop(1), int(sys.argv.pop(1))

def signal_now():
    os.kill(os.getpid(), signum)
    time.sleep(10)  # whatever the signal does happens meanwhile

if where == "parsing":
    parse = cli.run.parse_args
    def parse_args(self, ctx, args):
        signal_now()
        return parse(ctx, args)
    cli.run.parse_args = types.MethodType(parse_args, cli.run)
elif where == "exiting":
    atexit.register(signal_now)
else:
    class SignalWhenCollected:
        def __del__(self):
            os.kill(os.getpid(), signum)
            time.sleep(0.5)
    collected = SignalWhenCollected()
cli.main(prog_name="parallel-rollout")
"""

SIGNALS = [signal.SIGTERM, signal.SIGHUP, signal.SIGINT]


def _command(where: str, signum: int, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", COMMAND, where, str(int(signum)), *args], capture_output=True,
                          text=True, timeout=120, preexec_fn=stop_signals_ignoring())


@pytest.mark.parametrize("signum", SIGNALS, ids=[s.name for s in SIGNALS])
def test_a_signal_as_run_parses_its_flags_exits_130_and_says_nothing_ran(tmp_path, signum):
    """Between the command's choice (the group's invoke) and run's own handlers: the group
    gave every command the signals' defaults back, run too (it read the command's name
    before click had set it), so SIGTERM and SIGHUP ended it bare (143, 129) and Ctrl-C
    was click's 'Aborted!' (1, which reads as a run to resume)."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a")])
    done = _command("parsing", signum, "run", "--mode", "shell", "--data", str(data),
                    "--output-dir", str(tmp_path / "out"), "--run-id", "r", "--no-progress")
    assert done.returncode == 130, (done.returncode, done.stderr)
    assert f"interrupted by signal {int(signum)} before the run started: nothing ran" in done.stderr
    assert not (tmp_path / "out" / "r").exists()


@pytest.mark.parametrize("where", ["exiting", "finalizing"])
@pytest.mark.parametrize("signum", SIGNALS, ids=[s.name for s in SIGNALS])
def test_a_signal_as_the_finished_command_exits_keeps_the_runs_exit_code(tmp_path, signum, where):
    """A scheduler's stop that lands as the process ends, everything written and said: the
    run's own status (here 3, below --fail-under), which README says a later signal never
    changes. SIGTERM and SIGHUP found their defaults back then (143, 129); Ctrl-C was a
    KeyboardInterrupt's traceback in an exit handler, or the default's death (-2) past them."""
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a"), shell_task("b", check="false")])
    done = _command(where, signum, "run", "--mode", "shell", "--data", str(data), "--fail-under", "0.9",
                    "--output-dir", str(tmp_path / "out"), "--run-id", "r", "--no-progress")
    assert done.returncode == 3, (done.returncode, done.stderr)
    assert "success rate 50.0% is below --fail-under 0.9" in done.stderr, done.stderr
    assert "nothing ran" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert "run r: 2/2 samples finished, 1 succeeded" in done.stdout, done.stdout
    assert json.loads((tmp_path / "out" / "r" / "summary.json").read_text())["successes"] == 1
