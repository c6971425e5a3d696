"""The Python API as a script meets it: an interrupted run, a script without a main guard,
the errors' wording (said as Python spells the settings)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from textwrap import dedent

import pytest

from conftest import ROOT, shell_task, write_tasks
from parallel_rollout.api import ConfigError, NotARunFolder, load_run, run
from process_tree import signal_at
from test_runner import stop_signals_ignoring, wait_for_results


def _script(tmp_path, body: str):
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task(f"k{i}", reference=["sleep 0.3", f"touch ~/k{i}.done"])
                                                  for i in range(20)])
    path = tmp_path / "script.py"
    path.write_text(dedent(body).format(data=str(data), out=str(tmp_path / "out")))
    return path


def test_ctrl_c_stops_a_script_that_loops_over_runs(tmp_path):
    script = _script(tmp_path, """\
        from parallel_rollout.api import RunInterrupted, run

        if __name__ == "__main__":
            try:
                for i in range(2):
                    run(mode="shell", data={data!r}, output_dir={out!r}, run_id=f"r{{i}}", progress=False,
                        num_rollouts=2, num_vms=2, use_vm_pool=True)
                    print("RUN", i, "returned", flush=True)
            except KeyboardInterrupt as exc:
                assert isinstance(exc, RunInterrupted)
                print("STOPPED", exc.outcome.exit_code, exc.outcome.summary["interrupted"], exc, flush=True)
        """)
    proc = subprocess.Popen([sys.executable, str(script)], cwd=str(ROOT), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=stop_signals_ignoring())
    wait_for_results(tmp_path / "out" / "r0", 2, proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "RUN 0 returned" not in out and "STOPPED 130 True" in out, (out, err)
    assert "run(resume=True, run_id='r0', ...) continues it" in out
    assert not (tmp_path / "out" / "r1").exists()  # the loop stopped: no second run
    assert json.loads((tmp_path / "out" / "r0" / "summary.json").read_text())["interrupted"]


def test_a_script_without_a_main_guard_gets_one_clear_error_and_no_folder(tmp_path):
    script = _script(tmp_path, """\
        from parallel_rollout.api import run

        outcome = run(mode="shell", data={data!r}, output_dir={out!r}, progress=False,
                      num_rollouts=2, num_vms=2, use_vm_pool=True)
        """)
    done = subprocess.run([sys.executable, str(script)], cwd=str(ROOT), capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert f'run() is called at the top level of {script}:3' in done.stderr
    assert 'put the call under `if __name__ == "__main__":`' in done.stderr
    assert "bootstrapping phase" not in done.stderr and "EOFError" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_a_call_under_the_guard_through_a_function_is_not_refused(tmp_path):
    script = _script(tmp_path, """\
        from parallel_rollout.api import run

        def main():
            return run(mode="shell", data={data!r}, output_dir={out!r}, progress=False, limit=1, run_id="ok")

        if __name__ == "__main__":
            print("EXIT", main().exit_code)
        """)
    done = subprocess.run([sys.executable, str(script)], cwd=str(ROOT), capture_output=True, text=True, timeout=120)
    assert "EXIT 0" in done.stdout, done.stderr


def test_a_script_started_with_stdout_closed_runs_without_a_worker_error(tmp_path):
    """``python script.py >&-``: sys.stdout is None there and in the workers, each of which
    printed AttributeError as it flushed it on its way out."""
    script = _script(tmp_path, """\
        from parallel_rollout.api import run

        if __name__ == "__main__":
            raise SystemExit(run(mode="shell", data={data!r}, output_dir={out!r}, progress=False, limit=4,
                                 run_id="closed").exit_code)
        """)
    done = subprocess.run([sys.executable, str(script)], cwd=str(ROOT), stderr=subprocess.PIPE, text=True,
                          timeout=120, preexec_fn=lambda: os.close(1))
    assert done.returncode == 0, done.stderr
    assert "AttributeError" not in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_api_errors_speak_python(tmp_path):
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a")])
    settings = dict(mode="shell", data=str(data), output_dir=str(tmp_path / "out"), run_id="again", progress=False)
    assert run(**settings).exit_code == 0
    with pytest.raises(ConfigError, match=r"add resume=True to continue that run or pick a new run_id"):
        run(**settings)
    with pytest.raises(ConfigError, match=r"run\(\): unknown key 'agnet'; did you mean agent\?"):
        run(agnet="oracle", **settings)
    with pytest.raises(NotARunFolder, match=r"/nonexistent: no such folder"):
        load_run("/nonexistent")


def test_ctrl_c_as_a_run_writes_its_summary_and_report_lets_them_be_written_and_stops_the_script(tmp_path):
    """Ctrl-C once a run has ended, as it writes its summary and report: Python's
    KeyboardInterrupt broke the finish off (no report); the run's handler now lets it write
    them, and the script stops as after any Ctrl-C (RunInterrupted), before its next run."""
    script = _script(tmp_path, """\
        import sys
        from parallel_rollout.api import RunInterrupted, run

        if __name__ == "__main__":
            try:
                for i in range(2):
                    run(mode="shell", data={data!r}, output_dir=sys.argv[1], run_id=f"r{{i}}", progress=False, limit=3)
                    print("RUN", i, "returned", flush=True)
            except KeyboardInterrupt as exc:
                assert isinstance(exc, RunInterrupted)
                print("STOPPED", exc.outcome.exit_code, exc.outcome.summary["finished"], flush=True)
        """)
    for attempt in range(10):  # until the signal lands between the summary and the report
        out_dir = tmp_path / "out" / str(attempt)
        run_dir = out_dir / "r0"
        proc = subprocess.Popen([sys.executable, str(script), str(out_dir)], cwd=str(ROOT), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True,
                                preexec_fn=stop_signals_ignoring())
        landed = signal_at(proc, (run_dir / "summary.json").exists, signal.SIGINT,
                           still=lambda: not (run_dir / "report.html").exists())
        out, err = proc.communicate(timeout=60)
        if landed:
            break
    assert landed, "the signal never landed between the summary and the report"
    assert proc.returncode == 0, err
    assert "STOPPED 0 3" in out and "RUN 0 returned" not in out, (out, err)
    assert (run_dir / "report.html").exists()
    assert not (out_dir / "r1").exists()  # the loop stopped


#: bad run() calls, each refused before anything runs; the CLI's errors for the same settings
#: name its flags, a call's must name its keywords (README: `add resume=True`, not `--resume`)
BAD_CALLS = [
    {"num_vms": 0, "use_vm_pool": True}, {"num_vms": 2}, {"resume": True}, {"agent": "command"},
    {"agent": "command", "agent_cmd": "python3 agent.py | cat"}, {"agent": "openai"},
    {"agent": "openai", "base_url": "http://127.0.0.1:1/v1,http://127.0.0.1:2/v1"}, {"ray_address": "h:1"},
    {"mode": "py"}, {"provider_name": "remote"}, {"domain": "chrome"}, {"fail_under": 2.0},
    {"screen_width": 800}, {"run_id": "a/b"}, {"junit_xml": "-"}, {"compare_to": "a/b"},
]


def test_every_error_of_a_bad_call_names_the_calls_keywords_and_the_clis_its_flags(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from parallel_rollout.cli import main

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a")])
    base = {"mode": "shell", "data": str(data), "output_dir": str(tmp_path / "out"), "progress": False}
    for bad in BAD_CALLS:
        settings = {**base, **bad}
        with pytest.raises(ConfigError) as raised:
            run(**settings)
        assert not re.search(r"--[a-z]", str(raised.value)), (bad, str(raised.value))
        flags = [word for name, value in settings.items() if name != "progress"
                 for word in ([f"--{name.replace('_', '-')}"] + ([] if value is True else [str(value)]))]
        done = CliRunner().invoke(main, [*flags, "--no-progress"])
        assert done.exit_code == 2 and re.search(r"--[a-z]", done.output), (bad, done.output)
    assert not (tmp_path / "out").exists()
    # said as the call spells it: the keyword, and the value it was given
    with pytest.raises(ConfigError, match=r"^resume=True needs the run_id of the run"):
        run(**base, resume=True)
    with pytest.raises(ConfigError, match=r"^agent='command' needs agent_cmd, e\.g\. agent_cmd='python"):
        run(**base, agent="command")
    # the call's own text stays as it is: an agent's flags are no settings of the run
    with pytest.raises(ConfigError, match=r"agent_cmd='python3 agent\.py --model m \| cat': '\|' is a shell"):
        run(**base, agent="command", agent_cmd="python3 agent.py --model m | cat")


def test_a_flags_value_the_call_did_not_give_is_said_as_a_value(tmp_path, monkeypatch):
    """A message that names a flag with a value of its own, not the call's (``--backend ray``,
    ``--agent openai``): the value was left as a bare word, 'ray_address needs backend ray',
    'the default: agent openai calls the model', which no call can be written from."""
    from parallel_rollout.api import as_called

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    data = write_tasks(tmp_path / "tasks.jsonl", [shell_task("a")])
    base = {"mode": "shell", "data": str(data), "output_dir": str(tmp_path / "out"), "progress": False}
    with pytest.raises(ConfigError, match=r"^ray_address needs backend='ray' \(ray_address='h:1' in run\(\)\)$"):
        run(**base, ray_address="h:1")
    with pytest.raises(ConfigError, match=r"the default: agent='openai' calls the model$"):
        run(**base, model="gpt-4o")
    assert not (tmp_path / "out").exists()
    # each kind of such a value; a word of the sentence after a flag stays a word
    said = as_called("leave --mode out, or give --mode osworld; --data miniwob; --verify-reset off; "
                     "--reset-command none; --fail-under none; --num-vms is; --agent oracle: no", {"agent": "oracle"})
    assert said == ("leave mode out, or give mode='osworld'; data='miniwob'; verify_reset='off'; "
                    "reset_command='none'; fail_under=None; num_vms is; agent='oracle': no"), said
    # a path (given as a Path too), a URL, a file's name: values, never words of the sentence
    folder = tmp_path / "osworld"
    said = as_called(f"--data {folder} holds an OSWorld task set; --config run.toml; --base-url "
                     "http://127.0.0.1:8000/v1 is down; --output-dir results/x", {"data": folder})
    assert said == (f"data='{folder}' holds an OSWorld task set; config_file='run.toml'; base_url="
                    "'http://127.0.0.1:8000/v1' is down; output_dir='results/x'"), said


def test_a_script_read_from_stdin_gets_one_clear_error_and_no_folder(tmp_path):
    """``python - <<EOF`` (a shell's here-document): multiprocessing starts the helper
    processes by running the main module's file, '<stdin>', again; each run's Manager died of
    FileNotFoundError ('no sample ran', exit 1) and left a run folder."""
    script = _script(tmp_path, """\
        from parallel_rollout.api import run

        if __name__ == "__main__":
            run(mode="shell", data={data!r}, output_dir={out!r}, progress=False, limit=1, run_id="stdin")
        """)
    done = subprocess.run([sys.executable, "-"], input=script.read_text(), cwd=str(tmp_path), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1 and "ConfigError: run() cannot start the run's helper processes" in done.stderr
    assert f"{tmp_path}/<stdin> is none (a script read from stdin" in done.stderr, done.stderr
    assert "FileNotFoundError" not in done.stderr and not (tmp_path / "out").exists()
