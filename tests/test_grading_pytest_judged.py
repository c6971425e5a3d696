"""pytest started otherwise than by its name in a grading command (``pytest.main()`` of a
program) is judged by the wrappers' sitecustomize.py as the wrappers judge pytest; the
hostile table's rows run it in a sandbox, these its edges on the host's own python and pytest."""

from __future__ import annotations

import os
import subprocess

import pytest

from hostile_python import PYTEST_BY_PATH
from parallel_rollout.guest.agent_grading import GRADING_BIN, grading_env

pytestmark = pytest.mark.skipif(not os.path.exists(PYTEST_BY_PATH), reason="needs the system's pytest")

#: a folder of failing tests below an ini file the answer could have written
FAILING = "def test_a():\n    assert False\n"


def _grading(cmd: list[str], cwd, home, **extra) -> subprocess.CompletedProcess:
    env = {**grading_env(str(home)), "HOME": str(home), **extra}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_a_second_pytest_main_in_a_judged_pytest_and_the_systems_sitecustomize(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = --co\n")
    tests = tmp_path / "t"
    tests.mkdir()
    (tests / "test_a.py").write_text(FAILING)
    # the pytest a wrapper judged (its pid marked) runs; a pytest.main() of its own is judged again
    program = ("import os, sys, pytest\nos.environ['PARALLEL_ROLLOUT_PYTEST_JUDGED'] = str(os.getpid())\n"
               "print('first', pytest.main(['-q', '--co', '-p', 'no:cacheprovider']), flush=True)\n"
               "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider']))\n")
    done = _grading(["python3", "-c", program], tests, tmp_path)
    assert "first 0" in done.stdout and done.returncode == 126, (done.stdout, done.stderr)
    assert f"{tmp_path}/pytest.ini" in done.stderr
    # a sitecustomize of the folders after the wrappers' (a distribution's) still runs, once
    system = tmp_path / "site"
    system.mkdir()
    (system / "sitecustomize.py").write_text("print('system sitecustomize')\n")
    done = _grading(["python3", "-c", "pass"], tests, tmp_path, PYTHONPATH=f"{GRADING_BIN}:{system}")
    assert done.stdout == "system sitecustomize\n" and done.returncode == 0, (done.stdout, done.stderr)
