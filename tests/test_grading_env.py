"""env as a grading command runs it (guest/grading_bin/env): what a check runs under `env -i` (or
`env -`, `env -u PYTHONPATH`, `env PATH=...`) keeps the wrappers and the grading environment's
names, whatever else the check clears. Before, `env -i PATH=/usr/bin:/bin python3 -m unittest`
ran the system's python without the wrappers' import rules, and the answer's ~/test_check/
package beside a check's ~/test_check.py passed its failing tests. The hostile table's row runs
the attack in a sandbox; these run the wrapper on the host, in a home under /tmp."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from parallel_rollout.guest.agent_grading import GRADING_BIN, GRADING_NAMES, grading_env

FAILING_TEST = "import unittest\nclass T(unittest.TestCase):\n    def test_a(self):\n        self.fail()\n"
PASSING_TEST = FAILING_TEST.replace("self.fail()", "self.assertEqual(1 + 1, 2)")


def _check(home: Path, command: str, test: str = "", **more: str) -> subprocess.CompletedProcess:
    """``command`` as a grading command runs it: sh, the grading environment, from the home,
    after the check wrote its ``test`` to ~/test_check.py (since the grading command began)."""
    env = {**grading_env(str(home)), "HOME": str(home), **more}
    if test:
        (home / "test_check.py").write_text(test)
    return subprocess.run(["sh", "-c", command], cwd=home, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("command", [
    "env -i PATH=/usr/bin:/bin python3 -m unittest discover -p test_check.py",
    "env - python3 -m unittest discover -p test_check.py",
    "env -u PYTHONPATH -u PATH /usr/bin/python3 -m unittest discover -p test_check.py",
    "env -iS 'PATH=/usr/bin:/bin python3 -m unittest' discover -p test_check.py",
])
def test_a_check_that_clears_its_environment_keeps_the_import_rules(tmp_path, command):
    # the answer's package, left before the grading command began, under the name of the check's module
    (tmp_path / "test_check").mkdir()
    (tmp_path / "test_check" / "__init__.py").write_text("import os\nos._exit(0)\n")
    done = _check(tmp_path, f"cd ~ && {command}", FAILING_TEST)
    assert done.returncode == 1 and "FAILED (failures=" in done.stderr, (done.returncode, done.stderr)


def test_an_honest_check_still_gets_the_environment_it_asks_for(tmp_path):
    done = _check(tmp_path, "cd ~ && env -i PATH=/usr/bin:/bin python3 -m unittest discover -p test_check.py",
                  PASSING_TEST)
    assert done.returncode == 0 and "OK" in done.stderr, (done.returncode, done.stderr)
    # what the check cleared stays cleared, what it set is set, a name it sets itself wins
    done = _check(tmp_path, "env -i A=1 GIT_CONFIG_GLOBAL=/etc/gitconfig sh -c 'echo $A ${LANG-none} ${B-none}"
                  " $GIT_CONFIG_GLOBAL $HOME'", LANG="C.UTF-8", B="2")
    assert done.stdout.split() == ["1", "none", "none", "/etc/gitconfig"], done
    # with nothing to run, env prints the environment as ever
    assert _check(tmp_path, "env -i").stdout == ""
    assert "A=1\n" in _check(tmp_path, "env A=1").stdout


def test_the_wrapper_keeps_every_name_the_grading_environment_sets(tmp_path):
    env = grading_env(str(tmp_path))
    fixed = set(env) - set(GRADING_NAMES) - {"PATH", "PYTHONPATH"}
    kept = re.search(r'^GRADED="([^"]*)"$', (Path(GRADING_BIN) / "env").read_text(), re.M)
    assert kept and set(kept.group(1).split()) == fixed
    done = _check(tmp_path, "env -i sh -c env")
    assert {line.partition("=")[0] for line in done.stdout.splitlines()} >= fixed | {"PATH", "PYTHONPATH"}
