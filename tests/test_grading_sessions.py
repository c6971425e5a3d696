"""The grading sessions the fronts read (guest/agent_sessions.py), through agent_commands.run as
the agent runs a grading command: its session's file holds the grading names while it runs and
is gone with the folder once it ended; what was planted at the folder's path before is removed
first; a command that is no grading one notes nothing. (A front that reads them in a guest: the
hostile table's rows rig_check_*_env_cleared, tests/providers/test_process_fronts.py.)"""

from __future__ import annotations

import os

import pytest

from parallel_rollout.guest import agent_commands, agent_sessions


@pytest.fixture
def sessions(tmp_path, monkeypatch):
    folder = tmp_path / "guest" / "grading"
    (tmp_path / "guest").mkdir(mode=0o755)
    monkeypatch.setattr(agent_sessions, "SESSIONS", str(folder))
    monkeypatch.setattr(agent_sessions, "_fit", None)
    return folder


def _note_of_this_command(folder) -> str:
    """What a grading command reads of its own session's file, as a front does (by its session id),
    once the agent has written it and removed the start's file: the command may run before (a
    front reads the start's file then), and under load it did."""
    starting = f"{folder}/{agent_sessions.STARTING}"
    return (f"sid=$(cut -d' ' -f6 /proc/$$/stat); i=0; "
            f"while {{ [ ! -e {folder}/$sid ] || [ -e {starting} ]; }} && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done; "
            f"cat {folder}/$sid; test -e {starting} && echo STARTING-LEFT; true")


def test_a_grading_commands_session_is_noted_while_it_runs(sessions, tmp_path):
    (sessions.parent / "grading").write_text("PATH=/planted\n")  # left at the folder's path before
    done = agent_commands.run(_note_of_this_command(sessions), shell=True, timeout=60, isolated=True,
                              cwd=str(tmp_path))
    lines = done["output"].splitlines()
    assert done["returncode"] == 0, done
    names = dict(line.split("=", 1) for line in lines)
    assert names["PARALLEL_ROLLOUT_GRADING_SINCE"] and names["GIT_CONFIG_GLOBAL"] == os.devnull, lines
    assert names["PATH"] != "/planted" and "STARTING-LEFT" not in lines, lines
    assert not sessions.exists(), "the folder outlived the last grading command"


def test_a_command_of_the_graded_code_notes_nothing(sessions, tmp_path):
    done = agent_commands.run(f"test -e {sessions} && echo THERE; true", shell=True, timeout=60, cwd=str(tmp_path))
    assert done["output"] == "" and not sessions.exists(), done


def test_a_folder_others_may_write_is_not_used(sessions, tmp_path):
    os.chmod(sessions.parent, 0o777)
    done = agent_commands.run(f"test -e {sessions} && echo THERE; true", shell=True, timeout=60, isolated=True,
                              cwd=str(tmp_path))
    assert done["output"] == "" and not sessions.exists(), done
