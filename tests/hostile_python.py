"""Rows of the hostile table (tests/hostile_tasks.py, through tests/hostile_leftovers.py): shell
rows whose answer leaves behind what Python's test runners read as they start (pytest's ini
files, conftest.py and packages, a module or bytecode shadowing the check's own, a user site),
the programs their checks need, and honest checks of those runners through their wrappers.
"""

import os
import shutil

from parallel_rollout.guest.agent_grading import SYSTEM_PATH

#: name -> (shell commands of the answer, check, whether it can kill the guest agent)
PYTHON_ROWS = {}
#: pytest climbs from its tests' folder to the first folder with an ini file (pytest.ini, tox.ini,
#: setup.cfg, pyproject.toml) and reads it as its config, and loads every conftest.py above it
#: that no ini file bounds: the answer's /tmp/pytest.ini of `addopts = --co` (collect only) or
#: /tmp/conftest.py that ends the run with 0 passed a check's own tests in a `mktemp -d` folder,
#: which fail; the wrappers (pytest, py.test, python3 -m pytest) pin rootdir and config to the
#: tests' folder, and refuse (126) below an ini file they do not reach
PYTEST_TEST = ("d=$(mktemp -d) && printf 'def test_a():\\n    assert False\\n' > $d/test_a.py && cd $d && ")
PYTHON_ROWS["rig_check_pytest_ini"] = (["printf '[pytest]\\naddopts = --co\\n' > /tmp/pytest.ini"],
                                         PYTEST_TEST + "pytest -q", False)
#: from / the tests' folder is where pytest starts (/ encloses every folder the answer wrote)
PYTHON_ROWS["rig_check_pytest_ini_from_root"] = (PYTHON_ROWS["rig_check_pytest_ini"][0],
                                                   PYTEST_TEST.replace("cd $d", "cd /") + "pytest -q $d", False)
PYTHON_ROWS["rig_check_pytest_conftest"] = (["printf 'import os\\ndef pytest_sessionfinish():\\n    os._exit(0)\\n'"
                                               " > /tmp/conftest.py"], PYTEST_TEST + "python3 -m pytest -q", False)
#: a pyproject.toml's tool.pytest table spelled otherwise than the header the wrappers grepped for
#: (a quoted key, an escape, an inline table), which pytest reads all the same
PYTHON_ROWS["rig_check_pytest_toml_spelling"] = ([r"""printf '["tool"."\\u0070ytest".ini_options]\naddopts = "--co"\n'"""
                                                    " > /tmp/pyproject.toml"], PYTEST_TEST + "pytest -q", False)
PYTHON_ROWS["rig_check_pytest_toml_inline"] = (["""echo 'tool = {pytest = {ini_options = {addopts = "--co"}}}'"""
                                                  " > /tmp/pyproject.toml"], PYTEST_TEST + "pytest -q", False)
#: pytest by other names ran unwrapped: python3.11 -m pytest (python3's versioned name: the
#: machine's) and pytest-3 read the answer's /tmp/pytest.ini of `addopts = --co`
VERSIONED_PYTHON = os.path.basename(os.path.realpath(shutil.which("python3", path=SYSTEM_PATH) or "python3"))
PYTHON_ROWS["rig_check_pytest_versioned_python"] = (PYTHON_ROWS["rig_check_pytest_ini"][0],
                                                      PYTEST_TEST + f"{VERSIONED_PYTHON} -m pytest -q", False)
PYTHON_ROWS["rig_check_pytest_3"] = (PYTHON_ROWS["rig_check_pytest_ini"][0], PYTEST_TEST + "pytest-3 -q", False)
#: python3's flags joined to -m (-Im pytest) were taken for no module, and pytest ran unwrapped
PYTHON_ROWS["rig_check_pytest_joined_flags"] = (PYTHON_ROWS["rig_check_pytest_ini"][0], PYTEST_TEST + "python3 -Im pytest -q", False)
PYTHON_ROWS["rig_check_pytest_main_module"] = (PYTHON_ROWS["rig_check_pytest_ini"][0], PYTEST_TEST + "python3 -m pytest.__main__ -q", False)
#: pytest run otherwise than by its name, which no wrapper sees, read the answer's /tmp/pytest.ini
#: of `addopts = --co` as pytest does: /usr/bin/pytest by its path, a check's pytest.main(), a
#: program's subprocess.call([sys.executable, "-m", "pytest"]); the wrappers' sitecustomize.py
#: judges each as it starts
PYTEST_BY_PATH = shutil.which("pytest", path=SYSTEM_PATH) or "/usr/bin/pytest"
PYTHON_ROWS["rig_check_pytest_by_path"] = (PYTHON_ROWS["rig_check_pytest_ini"][0], PYTEST_TEST + f"{PYTEST_BY_PATH} -q", False)
PYTHON_ROWS["rig_check_pytest_main"] = (PYTHON_ROWS["rig_check_pytest_ini"][0], PYTEST_TEST
                                          + "python3 -c 'import pytest, sys; sys.exit(pytest.main([\"-q\"]))'", False)
PYTHON_ROWS["rig_check_pytest_from_a_program"] = (PYTHON_ROWS["rig_check_pytest_ini"][0], PYTEST_TEST
                                                    + "python3 -c 'import subprocess, sys; sys.exit(subprocess.call("
                                                    "[sys.executable, \"-m\", \"pytest\", \"-q\"]))'", False)
#: tests a check wrote into the home itself and ran from there read the answer's ~/pytest.ini and
#: ~/conftest.py (no folder's name to guess); from the home the wrappers refuse (126) beside them
HOME_TEST = "printf 'def test_a():\\n    assert False\\n' > ~/test_check.py && "
PYTHON_ROWS["rig_check_pytest_home_ini"] = (["printf '[pytest]\\naddopts = --co\\n' > ~/pytest.ini"],
                                              HOME_TEST + "cd ~ && pytest -q ~/test_check.py", False)
PYTHON_ROWS["rig_check_pytest_home_conftest"] = (["printf 'import os\\ndef pytest_sessionfinish():\\n    os._exit(0)\\n'"
                                                    " > ~/conftest.py"], HOME_TEST + "cd / && py.test -q ~/test_check.py", False)
#: pytest imports the __init__.py of every folder up from its tests that has one as their
#: package: the answer's ~/__init__.py (os._exit(0)) ended the run of a check's failing tests
#: in the home with 0; the wrappers refuse (126) beside one in the home (or /tmp ...)
PYTHON_ROWS["rig_check_pytest_home_package"] = (["printf 'import os\\nos._exit(0)\\n' > ~/__init__.py"],
                                                  HOME_TEST + "cd ~ && pytest -q test_check.py", False)
#: pytest put the home, the folder of tests there, first on sys.path: the answer's ~/fractions.py
#: (os._exit(0)) shadowed the module the check's tests import; the wrappers pin --import-mode=append
PYTHON_ROWS["rig_check_pytest_home_module"] = (["printf 'import os\\nos._exit(0)\\n' > ~/fractions.py"],
                                                 "printf 'import fractions\\ndef test_a():\\n    assert False\\n'"
                                                 " > ~/test_check.py && cd ~ && pytest -q test_check.py", False)
#: python3 -m unittest discover put its top folder, the home, first on sys.path: the answer's
#: ~/fractions.py shadowed the module the check's tests import; the wrapper appends that folder
PYTHON_ROWS["rig_check_unittest_home_module"] = (["printf 'import os\\nos._exit(0)\\n' > ~/fractions.py"],
                                                   "printf 'import fractions, unittest\\nclass T(unittest.TestCase):\\n"
                                                   "    def test_a(self):\\n        self.fail()\\n' > ~/test_check.py"
                                                   " && cd ~ && python3 -m unittest discover -p test_check.py", False)
#: python3 -m doctest put the folder of the file it tests first on sys.path while importing it: the
#: answer's ~/fractions.py shadowed the module the check's ~/check_doc.py imports
PYTHON_ROWS["rig_check_doctest_home_module"] = (PYTHON_ROWS["rig_check_unittest_home_module"][0],
                                                  "printf '\"\"\"\\n>>> 1 + 1\\n3\\n\"\"\"\\nimport fractions\\n' > ~/check_doc.py"
                                                  " && cd ~ && python3 -m doctest check_doc.py", False)
#: Python found the answer's module first under the name of the one a check wrote in the home: a
#: package ~/test_check/ or an extension ~/test_check.so (its constructor exits 0) beside the
#: check's ~/test_check.py; or read the answer's bytecode of it from ~/__pycache__, an unchecked
#: hash-based pyc (PEP 552), never compared to the source: the check's failing tests passed. A
#: grading python imports the check's source first there, and no bytecode older than its source
UNITTEST_HOME = PYTHON_ROWS["rig_check_unittest_home_module"][1].replace("import fractions, ", "import ")
PYTHON_ROWS["rig_check_unittest_home_package"] = (["mkdir ~/test_check && printf 'import os\\nos._exit(0)\\n'"
                                                     " > ~/test_check/__init__.py"], UNITTEST_HOME, False)
PYTHON_ROWS["rig_check_pytest_home_extension"] = (["printf '#include <unistd.h>\\n__attribute__((constructor)) static void"
                                                     " f(void) { _exit(0); }\\n' > ~/x.c && cc -shared -fPIC -o ~/test_check.so"
                                                     " ~/x.c"], HOME_TEST + "cd ~ && pytest -q test_check.py", False)
UNCHECKED_PYC = ("python3 -c 'import importlib.util as u, marshal, os, sys; d = os.path.expanduser(\"~/__pycache__\");"
                 " os.makedirs(d, exist_ok=True); open(f\"{d}/{sys.argv[1]}.{sys.implementation.cache_tag}.pyc\", \"wb\")"
                 ".write(u.MAGIC_NUMBER + bytes([1, 0, 0, 0]) + bytes(8) + marshal.dumps(compile(\"import os; os._exit(0)\","
                 " \"x\", \"exec\")))' ")
PYTHON_ROWS["rig_check_unittest_home_bytecode"] = ([UNCHECKED_PYC + "test_check"], UNITTEST_HOME, False)
PYTHON_ROWS["rig_check_doctest_home_bytecode"] = ([UNCHECKED_PYC + "check_doc"],
                                                    PYTHON_ROWS["rig_check_doctest_home_module"][1], False)
#: python3 -I (and -E, -S) reads no sitecustomize.py of the PYTHONPATH: ./python3 runs -m unittest,
#: -m doctest and -m pytest through module_folder_last.py, which puts the same rules
PYTHON_ROWS["rig_check_unittest_isolated_package"] = (PYTHON_ROWS["rig_check_unittest_home_package"][0],
                                                        UNITTEST_HOME.replace("python3 -m", "python3 -I -m"), False)
PYTHON_ROWS["rig_check_pytest_isolated_package"] = (PYTHON_ROWS["rig_check_unittest_home_package"][0],
                                                      HOME_TEST + "cd ~ && python3 -Im pytest -q test_check.py", False)
#: python3 -E ignores PYTHONNOUSERSITE and PYTHONSAFEPATH too: it ran the answer's usercustomize.py
#: of its user site-packages, and put the current folder (the home) first on sys.path; ./python3
#: runs it as -I
USERCUSTOMIZE = ("d=$(python3 -c 'import site; print(site.getusersitepackages())') && mkdir -p $d"
                 " && printf 'import os\\nos._exit(0)\\n' > $d/usercustomize.py")
PYTHON_ROWS["rig_check_python_e_usercustomize"] = ([USERCUSTOMIZE], "python3 -E -c 'import sys; sys.exit(3)'", False)
PYTHON_ROWS["rig_check_python_e_home_module"] = (["printf 'import os\\nos._exit(0)\\n' > ~/json.py"],
                                                   "cd ~ && python3 -E -c 'import json, sys; sys.exit(3)'", False)
PYTHON_ROWS["rig_check_unittest_e_home_module"] = (PYTHON_ROWS["rig_check_unittest_home_module"][0],
                                                     PYTHON_ROWS["rig_check_unittest_home_module"][1].replace(
                                                         "python3 -m", "python3 -BEm"), False)
#: the wrappers took HOME for the home: a check that runs its tests with a HOME of its own
#: (HOME=/nonexistent, a mktemp -d folder, env -u HOME) had none of their rules for the home it ran
#: them from, and the answer's ~/test_check/ package, ~/pytest.ini of `addopts = --co`,
#: ~/__init__.py or ~/fractions.py passed its failing tests; the grading environment names the home
#: apart (PARALLEL_ROLLOUT_GRADED_HOME), which the wrappers take as well
PYTHON_ROWS["rig_check_unittest_package_other_home"] = (PYTHON_ROWS["rig_check_unittest_home_package"][0],
                                                        UNITTEST_HOME.replace("python3 -m", "HOME=/nonexistent python3 -m"), False)
PYTHON_ROWS["rig_check_pytest_ini_other_home"] = (PYTHON_ROWS["rig_check_pytest_home_ini"][0],
                                                  HOME_TEST + "cd ~ && HOME=$(mktemp -d) pytest -q test_check.py", False)
PYTHON_ROWS["rig_check_pytest_package_no_home"] = (PYTHON_ROWS["rig_check_pytest_home_package"][0],
                                                   HOME_TEST + "cd ~ && env -u HOME python3 -m pytest -q test_check.py", False)
PYTHON_ROWS["rig_check_doctest_module_other_home"] = (PYTHON_ROWS["rig_check_doctest_home_module"][0],
                                                      PYTHON_ROWS["rig_check_doctest_home_module"][1].replace(
                                                          "python3 -m", "HOME=/nonexistent python3 -m"), False)
#: a grading python took a file changed since the check began (its ctime) for the check's: a
#: check's own chmod -R of the home so dated the answer's ~/test_check/ package and its unchecked
#: bytecode of ~/test_check.py, which shadowed the check's ~/test_check.py; what shadows a check's
#: source, or is its bytecode, is the check's only if written since (mtime, ctime, one name)
CHMOD_HOME = UNITTEST_HOME.replace(" && cd ~ && ", " && chmod -R go-w ~ && cd ~ && ")
PYTHON_ROWS["rig_check_unittest_package_chmod"] = (PYTHON_ROWS["rig_check_unittest_home_package"][0], CHMOD_HOME, False)
PYTHON_ROWS["rig_check_unittest_bytecode_chmod"] = (PYTHON_ROWS["rig_check_unittest_home_bytecode"][0], CHMOD_HOME, False)
#: a check that cleared its environment (env -i PATH=/usr/bin:/bin) ran the system's python3, none of
#: the wrappers' rules: the answer's ~/test_check/ package passed its failing tests; the wrappers'
#: env gives what it runs the grading command's own names back, the wrappers first on its PATH
PYTHON_ROWS["rig_check_unittest_env_cleared"] = (PYTHON_ROWS["rig_check_unittest_home_package"][0],
                                                 UNITTEST_HOME.replace("python3 -m", "env -i PATH=/usr/bin:/bin python3 -m"), False)
#: a check with a PATH of its own (PATH=/usr/bin:/bin, or python3 by its path) ran python3 unwrapped:
#: unittest's discover put the home first on sys.path, and the answer's ~/fractions.py shadowed the
#: module the check's tests import; the wrappers' sitecustomize.py puts it last as ./python3 does
PYTHON_ROWS["rig_check_unittest_own_path"] = (PYTHON_ROWS["rig_check_unittest_home_module"][0],
                                              PYTHON_ROWS["rig_check_unittest_home_module"][1].replace(
                                                  "python3 -m", "PATH=/usr/bin:/bin python3 -m"), False)
#: the wrappers work through PATH and PYTHONPATH: a check that runs the system's programs by their
#: paths (python3 -I or -E, env, pytest with a PYTHONPATH of its own) or with a PATH of its own ran
#: them unwrapped, and the answer's ~/test_check/ package, ~/fractions.py, usercustomize.py or
#: /tmp/pytest.ini passed its failing tests. A process VM binds the wrappers' fronts over env and
#: the system python's sitecustomize.py, as the docker and qemu images have them (pool/providers/grading_fronts.py)
SYSTEM_PYTHON = shutil.which("python3", path=SYSTEM_PATH) or "/usr/bin/python3"
SYSTEM_ENV = shutil.which("env", path=SYSTEM_PATH) or "/usr/bin/env"
PYTHON_ROWS["rig_check_unittest_isolated_by_path"] = (PYTHON_ROWS["rig_check_unittest_home_package"][0],
                                                      UNITTEST_HOME.replace("python3 -m", f"{SYSTEM_PYTHON} -I -m"), False)
PYTHON_ROWS["rig_check_unittest_e_by_path"] = (PYTHON_ROWS["rig_check_unittest_home_module"][0],
                                               PYTHON_ROWS["rig_check_unittest_home_module"][1].replace(
                                                   "python3 -m", f"{SYSTEM_PYTHON} -E -m"), False)
PYTHON_ROWS["rig_check_python_e_usercustomize_by_path"] = ([USERCUSTOMIZE], f"{SYSTEM_PYTHON} -E -c 'import sys; sys.exit(3)'",
                                                           False)
PYTHON_ROWS["rig_check_python_e_home_module_by_path"] = (PYTHON_ROWS["rig_check_python_e_home_module"][0],
                                                         f"cd ~ && {SYSTEM_PYTHON} -E -c 'import json, sys; sys.exit(3)'", False)
PYTHON_ROWS["rig_check_unittest_env_by_path"] = (PYTHON_ROWS["rig_check_unittest_home_package"][0],
                                                 UNITTEST_HOME.replace("python3 -m", f"{SYSTEM_ENV} -i PATH=/usr/bin:/bin python3 -m"),
                                                 False)
#: env by its path from a check whose environment is cleared outright (bash's `exec -c`: no
#: PARALLEL_ROLLOUT_GRADING_SINCE, no PATH) was the system's env, which ran the system's python3 with
#: none of the wrappers' rules; the front finds the grading command by its session
#: (guest/agent_sessions.py), gives the grading names back and runs the wrappers' env
PYTHON_ROWS["rig_check_unittest_env_cleared_by_path"] = (
    PYTHON_ROWS["rig_check_unittest_home_package"][0],
    UNITTEST_HOME.replace("python3 -m unittest discover -p test_check.py",
                          f"bash -c 'exec -c {SYSTEM_ENV} python3 -m unittest discover -p test_check.py'"), False)
#: a check's python that runs python itself with an empty environment (`subprocess.run(["python3", "-m",
#: "unittest", …], env={})`, `[sys.executable, …]`) lost the grading names: python has no front, and
#: its sitecustomize.py front read the environment alone; the answer's ~/test_check/ package,
#: ~/fractions.py, ~/json.py or usercustomize.py passed the check. That python finds the grading
#: command by its session (guest/agent_sessions.py), as the fronts do, and starts again with its names


def env_empty(argv: str, env: str = "{}") -> str:
    """A check's python3 that runs ``argv`` (a Python list's items) with ``env`` (a dict's
    display: none of the grading names), exiting with its code."""
    return f"python3 -c 'import subprocess, sys; sys.exit(subprocess.run([{argv}], env={env}).returncode)'"


PYTHON_ROWS["rig_check_unittest_env_empty"] = (
    PYTHON_ROWS["rig_check_unittest_home_package"][0],
    UNITTEST_HOME.replace("python3 -m unittest discover -p test_check.py",
                          env_empty('"python3", "-m", "unittest", "discover", "-p", "test_check.py"')), False)
PYTHON_ROWS["rig_check_unittest_sys_executable_env_empty"] = (
    PYTHON_ROWS["rig_check_unittest_home_module"][0],
    PYTHON_ROWS["rig_check_unittest_home_module"][1].replace(
        "python3 -m unittest discover -p test_check.py",
        env_empty('sys.executable, "-m", "unittest", "discover", "-p", "test_check.py"')), False)
PYTHON_ROWS["rig_check_python_env_empty_home_module"] = (PYTHON_ROWS["rig_check_python_e_home_module"][0],
                                                         "cd ~ && " + env_empty('"python3", "-c", "import json, sys; sys.exit(3)"'),
                                                         False)
PYTHON_ROWS["rig_check_python_env_empty_usercustomize"] = ([USERCUSTOMIZE], env_empty('"python3", "-c", "import sys; sys.exit(3)"'),
                                                           False)
#: a check's python that runs python with an environment of its own (env={} or env={"HOME": home},
#: bash's `exec -c`) has no PYTHONNOUSERSITE: `site` ran the answer's .pth of the user site of the
#: graded home (`import os; os._exit(0)`) before the sitecustomize.py front could start it again; the
#: front in python's encodings (pool/providers/python_front.py) starts it again before `site`
USER_PTH = USERCUSTOMIZE.replace("\\nos._exit(0)\\n' > $d/usercustomize.py", "; os._exit(0)\\n' > $d/pr-hostile.pth")
PYTHON_ROWS["rig_check_python_env_empty_pth"] = ([USER_PTH], env_empty('"python3", "-c", "import sys; sys.exit(3)"'), False)
PYTHON_ROWS["rig_check_python_sys_executable_env_empty_pth"] = ([USER_PTH], env_empty('sys.executable, "-c", "import sys; sys.exit(3)"'),
                                                                 False)
PYTHON_ROWS["rig_check_python_home_given_pth"] = ([USER_PTH], "python3 -c 'import os, subprocess, sys; sys.exit(subprocess.run("
                                                              "[\"python3\", \"-c\", \"import sys; sys.exit(3)\"],"
                                                              " env={\"HOME\": os.environ[\"HOME\"]}).returncode)'", False)
PYTHON_ROWS["rig_check_python_exec_c_pth"] = ([USER_PTH], "bash -c 'exec -c python3 -c \"import sys; sys.exit(3)\"'", False)
PYTHON_ROWS["rig_check_python_versioned_exec_c_pth"] = ([USER_PTH], f"bash -c 'exec -c {os.path.realpath(SYSTEM_PYTHON)} -c"
                                                                    " \"import sys; sys.exit(3)\"'", False)
#: a python that reads its bytecode elsewhere (PYTHONPYCACHEPREFIX, -X pycache_prefix: a folder of the
#: check's) found no encodings bytecode there and compiled the module's source, which had no front:
#: the answer's .pth ran (its os._exit(0) passed the check); the front is in the source too
PYCACHE_ELSEWHERE = "\"PYTHONPYCACHEPREFIX\": __import__(\"tempfile\").mkdtemp()"
PYTHON_ROWS["rig_check_python_pycache_prefix_pth"] = (
    [USER_PTH], PYTHON_ROWS["rig_check_python_home_given_pth"][1].replace("\"HOME\": os.environ[\"HOME\"]", PYCACHE_ELSEWHERE), False)
PYTHON_ROWS["rig_check_python_x_pycache_prefix_pth"] = (
    [USER_PTH], env_empty('"python3", "-X", "pycache_prefix=" + __import__("tempfile").mkdtemp(), "-c", "import sys; sys.exit(3)"'), False)
#: a check's python that reads its bytecode from a folder of the check's choosing that the answer can
#: guess (/tmp/pr-pyc) read the answer's timestamp pycs there, their date and size the source's:
#: encodings' (read as python starts, before any front), sitecustomize's, a stdlib module's; their
#: os._exit(0) passed the check. The guest's encodings is bytecode alone, and a grading python reads
#: no bytecode from its cache folder written before the grading command began
PREFIX_FOLDER = "/tmp/pr-pyc"


def forged_pycs(*modules: str) -> str:
    """The answer's shell command that leaves in :data:`PREFIX_FOLDER` a timestamp pyc of
    ``import os; os._exit(0)`` for each of ``modules`` that has a source, as python checks it."""
    script = ("import importlib.util as u, marshal, os, sys\n"
              "for name in sys.argv[1:]:\n"
              "    source = getattr(u.find_spec(name), 'origin', None) or ''\n"
              "    if not source.endswith('.py') or not os.path.isfile(source):\n"
              "        continue\n"
              "    status, pyc = os.stat(source), u.cache_from_source(source)\n"
              "    os.makedirs(os.path.dirname(pyc), exist_ok=True)\n"
              "    header = [0, int(status.st_mtime) & 0xFFFFFFFF, status.st_size & 0xFFFFFFFF]\n"
              "    with open(pyc, 'wb') as out:\n"
              "        out.write(u.MAGIC_NUMBER + b''.join(n.to_bytes(4, 'little') for n in header)"
              " + marshal.dumps(compile('import os; os._exit(0)', source, 'exec')))\n").replace("'", '"')
    return f"python3 -X pycache_prefix={PREFIX_FOLDER} -c '{script}' {' '.join(modules)}"


PYTHON_ROWS["rig_check_python_pycache_prefix_encodings_pyc"] = (
    [forged_pycs("encodings")], env_empty('sys.executable, "-c", "import sys; sys.exit(3)"',
                                          f'{{"PYTHONPYCACHEPREFIX": "{PREFIX_FOLDER}"}}'),
    False)
PYTHON_ROWS["rig_check_python_pycache_prefix_sitecustomize_pyc"] = (
    [forged_pycs("sitecustomize")], PYTHON_ROWS["rig_check_python_pycache_prefix_encodings_pyc"][1], False)
PYTHON_ROWS["rig_check_python_x_pycache_prefix_stdlib_pyc"] = (
    [forged_pycs("json")], f"python3 -X pycache_prefix={PREFIX_FOLDER} -c 'import json, sys; sys.exit(3)'", False)
#: under -X frozen_modules=off python reads its startup modules (codecs, which encodings imports
#: first; io, abc, os, site …) from their sources, and their bytecode from that folder: the answer's
#: pycs of them ran before any front (its os._exit(0) passed the check). The guest's encodings reads
#: them from the stdlib's own bytecode (python_front.py's head), then no bytecode of that folder written
#: before the grading command began
STARTUP_MODULES = ("codecs", "io", "abc", "os", "stat", "posixpath", "genericpath", "_collections_abc", "site",
                   "_sitebuiltins")
FORGED_STARTUP = forged_pycs(*STARTUP_MODULES).replace("python3 -X", "python3 -X frozen_modules=off -X", 1).replace(
    "import os; os._exit(0)", "import posix; posix._exit(0)")  # os's own pyc is forged too
PYTHON_ROWS["rig_check_python_frozen_off_pycache_prefix_startup_pyc"] = (
    [FORGED_STARTUP], f"python3 -X frozen_modules=off -X pycache_prefix={PREFIX_FOLDER} -c 'import sys; sys.exit(3)'", False)
PYTHON_ROWS["rig_check_python_frozen_off_env_pycache_prefix_startup_pyc"] = (
    [FORGED_STARTUP], env_empty('sys.executable, "-X", "frozen_modules=off", "-c", "import sys; sys.exit(3)"',
                                f'{{"PYTHONPYCACHEPREFIX": "{PREFIX_FOLDER}"}}'), False)
PYTHON_ROWS["rig_check_doctest_own_path"] = (PYTHON_ROWS["rig_check_doctest_home_module"][0],
                                             PYTHON_ROWS["rig_check_doctest_home_module"][1].replace(
                                                 "python3 -m", "PATH=/usr/bin:/bin python3 -m"), False)
PYTHON_ROWS["rig_check_doctest_isolated_by_path"] = (PYTHON_ROWS["rig_check_doctest_home_module"][0],
                                                     PYTHON_ROWS["rig_check_doctest_home_module"][1].replace(
                                                         "python3 -m", f"{SYSTEM_PYTHON} -I -m"), False)
PYTHON_ROWS["rig_check_pytest_own_pythonpath_by_path"] = (PYTHON_ROWS["rig_check_pytest_ini"][0],
                                                          PYTEST_TEST + f"PYTHONPATH=src {PYTEST_BY_PATH} -q", False)
#: row -> the program its check needs (hostile_tasks.NEEDS_PROGRAM)
PYTHON_PROGRAMS = {"rig_check_pytest_ini": "pytest", "rig_check_pytest_conftest": "pytest",
                   "rig_check_pytest_ini_from_root": "pytest", "rig_check_pytest_versioned_python": "pytest",
                   "rig_check_pytest_3": "pytest-3", "rig_check_pytest_home_ini": "pytest",
                   "rig_check_pytest_home_conftest": "pytest", "rig_check_pytest_joined_flags": "pytest",
                   "rig_check_pytest_home_module": "pytest", "rig_check_pytest_toml_spelling": "pytest",
                   "rig_check_pytest_toml_inline": "pytest", "rig_check_pytest_main_module": "pytest",
                   "rig_check_unittest_home_module": "python3", "rig_check_doctest_home_module": "python3",
                   "rig_check_unittest_env_cleared": "python3", "rig_check_unittest_own_path": "python3",
                   "rig_check_unittest_home_package": "python3", "rig_check_pytest_home_extension": "pytest",
                   "rig_check_unittest_home_bytecode": "python3", "rig_check_doctest_home_bytecode": "python3",
                   "rig_check_unittest_isolated_package": "python3", "rig_check_pytest_isolated_package": "pytest",
                   "rig_check_python_e_usercustomize": "python3", "rig_check_python_e_home_module": "python3",
                   "rig_check_unittest_e_home_module": "python3", "rig_check_pytest_home_package": "pytest",
                   "rig_check_pytest_by_path": "pytest", "rig_check_pytest_main": "pytest",
                   "rig_check_pytest_from_a_program": "pytest", "rig_check_unittest_package_other_home": "python3",
                   "rig_check_pytest_ini_other_home": "pytest", "rig_check_pytest_package_no_home": "pytest",
                   "rig_check_doctest_module_other_home": "python3", "rig_check_unittest_package_chmod": "python3",
                   "rig_check_unittest_bytecode_chmod": "python3", "rig_check_unittest_isolated_by_path": "python3",
                   "rig_check_unittest_e_by_path": "python3", "rig_check_python_e_usercustomize_by_path": "python3",
                   "rig_check_python_e_home_module_by_path": "python3", "rig_check_unittest_env_by_path": "python3",
                   "rig_check_unittest_env_cleared_by_path": "python3", "rig_check_unittest_env_empty": "python3",
                   "rig_check_unittest_sys_executable_env_empty": "python3",
                   "rig_check_python_env_empty_home_module": "python3", "rig_check_python_env_empty_usercustomize": "python3",
                   "rig_check_python_env_empty_pth": "python3", "rig_check_python_sys_executable_env_empty_pth": "python3",
                   "rig_check_python_exec_c_pth": "python3", "rig_check_python_versioned_exec_c_pth": "python3",
                   "rig_check_python_home_given_pth": "python3", "rig_check_python_pycache_prefix_pth": "python3",
                   "rig_check_python_x_pycache_prefix_pth": "python3",
                   "rig_check_python_pycache_prefix_encodings_pyc": "python3",
                   "rig_check_python_pycache_prefix_sitecustomize_pyc": "python3",
                   "rig_check_python_x_pycache_prefix_stdlib_pyc": "python3",
                   "rig_check_python_frozen_off_pycache_prefix_startup_pyc": "python3",
                   "rig_check_python_frozen_off_env_pycache_prefix_startup_pyc": "python3",
                   "rig_check_doctest_own_path": "python3", "rig_check_doctest_isolated_by_path": "python3",
                   "rig_check_pytest_own_pythonpath_by_path": "pytest"}

#: program -> an honest check of it through its wrapper (hostile_tasks.HONEST_TOOLS)
PYTHON_HONEST = {
                 # the check's own config in its tests' folder, by pytest's search and by -c; what
                 # a test runs still runs through the wrappers
                 "pytest": "d=$(mktemp -d) && mkdir $d/t && printf '[pytest]\\npython_files = check_*.py\\n' > $d/pytest.ini"
                           " && printf 'import os\\ndef test_a():\\n    assert os.environ[\"PATH\"].startswith("
                           "\"/opt/parallel-rollout/grading_bin:\")\\n' > $d/t/check_a.py && (cd $d && pytest -q t)"
                           " && python3 -m pytest -q -c $d/pytest.ini $d/t"
                           # and by its path, by pytest.main(), the project's own config as ever
                           f" && (cd $d && {PYTEST_BY_PATH} -q t && PYTHONPATH=t {PYTEST_BY_PATH} -q t && python3 -c 'import pytest, sys; sys.exit(pytest.main([\"-q\", \"t\"]))')"
                           # a pyproject.toml above that only names pytest is no config of pytest's
                           " && e=$(mktemp -d) && mkdir $e/t && printf 'def test_a():\\n    pass\\n' > $e/t/test_a.py"
                           " && printf '[project]\\nname = \"t\"\\ndependencies = [\"pytest\"]\\n' > $e/pyproject.toml"
                           " && (cd $e/t && pytest -q)",
                 # from the home with nothing of pytest's there, and a project's own config in the
                 # home, by pytest's other names
                 "pytest-3": "printf 'def test_a():\\n    pass\\n' > ~/test_ok.py && cd ~ && pytest-3 -q test_ok.py"
                             # the answer's module, which the tests import from the home
                             " && printf 'def f():\\n    return 3\\n' > ~/sol.py && printf 'from sol import f\\n"
                             "def test_f():\\n    assert f() == 3\\n' > ~/test_sol.py && pytest -q test_sol.py && HOME=/nonexistent pytest -q test_sol.py"
                             f" && {VERSIONED_PYTHON} -m pytest -q ~/test_ok.py && mkdir ~/proj && cp ~/test_ok.py ~/proj/check_ok.py"
                             " && printf '[pytest]\\npython_files = check_*.py\\n' > ~/proj/pytest.ini && cd ~/proj && py.test-3 -q"
                             " && python3 -BImpytest -q && python3 -X dev -Im pytest -q && python3 -m pytest.__main__ -q"
                             # a package of tests the check made in the home
                             " && mkdir ~/pk && touch ~/pk/__init__.py && cp ~/test_ok.py ~/pk && cd ~ && pytest -q pk",
                 # unittest's discover and doctest in a folder of the home, and -Im unittest of a mktemp -d
                 # folder: the tests import their own module (the answer's, and its own helper), a folder's
                 # found after the system's
                 "python3": "mkdir ~/ut && printf 'def h():\\n    return 2\\n' > ~/ut/helper.py && printf 'from helper import h\\n"
                            "def f():\\n    \"\"\"\\n    >>> f()\\n    3\\n    \"\"\"\\n    return h() + 1\\n' > ~/ut/sol.py"
                            " && printf 'import unittest\\nfrom sol import f\\nclass T(unittest.TestCase):\\n    def test_f(self):\\n"
                            "        self.assertEqual(f(), 3)\\n' > ~/ut/test_sol.py && cd ~/ut"
                            " && python3 -m unittest discover -v 2>&1 | grep -q 'test_f .* ok'"
                            " && python3 -m doctest -v ~/ut/sol.py | grep -q '^1 passed and 0 failed'"
                            " && d=$(mktemp -d) && cp ~/ut/*.py $d && cd / && python3 -Im unittest discover -v -s $d 2>&1"
                            " | grep -q 'test_f .* ok' && cd ~/ut && python3 -E -m unittest discover -v 2>&1 | grep -q 'test_f .* ok'"
                            # and under a HOME of the check's own
                            " && HOME=/nonexistent python3 -m unittest discover -v 2>&1 | grep -q 'test_f .* ok'"
                            " && HOME=/nonexistent python3 -m doctest ~/ut/sol.py"
                            # and by their paths, with a PATH of the check's own, under env -i, by a #! line
                            f" && {SYSTEM_PYTHON} -I -m unittest discover -v 2>&1 | grep -q 'test_f .* ok'"
                            f" && {SYSTEM_PYTHON} -I -m doctest ~/ut/sol.py && PATH=/usr/bin:/bin python3 -m doctest ~/ut/sol.py"
                            f" && {SYSTEM_ENV} -i PATH=/usr/bin:/bin python3 -m unittest discover -v 2>&1 | grep -q 'test_f .* ok'"
                            f" && printf '#!{SYSTEM_ENV} python3\\nimport fractions\\n' > ~/ut/run.py"
                            " && chmod +x ~/ut/run.py && ~/ut/run.py"
                            # and from a check's python with an empty environment (the session's names back)
                            " && " + env_empty('"python3", "-m", "unittest", "discover", "-v"') + " 2>&1 | grep -q 'test_f .* ok'"
                            " && " + env_empty('sys.executable, "-m", "doctest", "sol.py"') +
                            # and after a chmod -R of the home
                            " && chmod -R go-w ~ && python3 -m unittest discover -v 2>&1 | grep -q 'test_f .* ok'"}
