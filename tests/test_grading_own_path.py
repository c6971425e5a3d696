"""A check that reaches python3 otherwise than through the wrappers' ./python3 (a PATH of its own,
python3 by its path with -E) keeps the grading rules, on the host, in a home under /tmp: the
wrappers' sitecustomize.py puts doctest's import of the file it tests under the import rules when
`-m doctest` runs as __main__, and a grading command's PYTHONUSERBASE keeps the user site out of
`-E`. Before, the answer's ~/fractions.py was what a check's ~/check_doc.py imported, and its
usercustomize.py ran under `/usr/bin/python3 -E`: failing checks passed. (By their paths under
-I, and env by its path, only a process VM's fronts reach them: the hostile table's rows.)"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from parallel_rollout.guest.agent_grading import SYSTEM_PATH, grading_env

SYSTEM_PYTHON = shutil.which("python3", path=SYSTEM_PATH)
pytestmark = pytest.mark.skipif(SYSTEM_PYTHON is None, reason="needs the system's python3")
#: a check's doctest that fails, of a file that imports the standard library's fractions
CHECK_DOC = '"""\n>>> 1 + 1\n3\n"""\nimport fractions\n'
EXITS_0 = "import os\nos._exit(0)\n"


def _check(home: Path, command: str) -> subprocess.CompletedProcess:
    """``command`` as a grading command runs it: sh, the grading environment, from the home."""
    env = {**grading_env(str(home)), "HOME": str(home)}
    return subprocess.run(["sh", "-c", command], cwd=home, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("python", ["python3 -m doctest", "python3 -X dev -mdoctest", "python3 -B -m doctest -v"])
def test_doctest_with_a_path_of_the_checks_own_imports_the_standard_library(tmp_path, python):
    (tmp_path / "fractions.py").write_text(EXITS_0)  # the answer's, left before the check began
    done = _check(tmp_path, f"printf '%s' '{CHECK_DOC}' > ~/check_doc.py && PATH=/usr/bin:/bin {python} check_doc.py")
    assert done.returncode == 1 and "1 fail" in done.stdout + done.stderr, (done.returncode, done.stdout, done.stderr)


def test_doctest_with_a_path_of_the_checks_own_still_finds_the_files_own_modules(tmp_path):
    (tmp_path / "ut").mkdir()
    (tmp_path / "ut" / "helper.py").write_text("def h():\n    return 2\n")
    (tmp_path / "ut" / "sol.py").write_text('from helper import h\ndef f():\n    """\n    >>> f()\n    3\n    """\n'
                                            "    return h() + 1\n")
    done = _check(tmp_path, "cd ~/ut && PATH=/usr/bin:/bin python3 -m doctest -v sol.py")
    assert done.returncode == 0 and "1 passed and 0 failed" in done.stdout, (done.stdout, done.stderr)


def test_python_e_by_its_path_runs_no_usercustomize(tmp_path):
    # the answer's user site-packages, where site looks without PYTHONUSERBASE: ~/.local/lib/pythonX.Y/...
    version = subprocess.run([SYSTEM_PYTHON, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    user_site = tmp_path / ".local" / "lib" / f"python{version}" / "site-packages"
    user_site.mkdir(parents=True)
    (user_site / "usercustomize.py").write_text(EXITS_0)
    (user_site / "answer.pth").write_text("import os; os._exit(0)\n")
    done = _check(tmp_path, f"{SYSTEM_PYTHON} -E -c 'import sys; sys.exit(3)'")
    assert done.returncode == 3, (done.returncode, done.stderr)
