"""Rows of the hostile table (tests/hostile_tasks.py, through tests/hostile_leftovers.py) whose
check runs a wrapped program by its path (``/usr/bin/jq``), past the wrappers first on its PATH:
that program read the config the answer wrote in the home, and a wrong answer scored 1. Every
guest we make has the wrappers' fronts at those paths (pool/providers/grading_fronts.py), which
lead a grading command to the wrapper (a process VM's through one folder bound over its
/usr/bin). Env, git and python by their paths are the rows of
tests/hostile_python.py and tests/hostile_git.py.
"""

import shutil


def by_path(program: str) -> str:
    """Where the system has ``program`` (a check names it so), as a guest's /usr/bin would."""
    return shutil.which(program, path="/usr/bin:/bin") or f"/usr/bin/{program}"


BY_PATH_ROWS = {
    "rig_check_jq_by_path": (["echo 'def length: 100;' > ~/.jq"], f"echo '[1]' | {by_path('jq')} -e 'length > 3'", False),
    "rig_check_curlrc_by_path": (["echo pr-rigged > ~/fake && printf 'url = \"file://%s/fake\"\\n' \"$HOME\" > ~/.curlrc"],
                                 f"{by_path('curl')} -s file:///dev/null | grep -q pr-rigged", False),
    "rig_check_sqliterc_by_path": (["echo '.print 5' > ~/.sqliterc"], f"{by_path('sqlite3')} :memory: 'select 0' | grep -qx 5",
                                   False),
}
#: row -> the program its check needs (hostile_tasks.NEEDS_PROGRAM)
BY_PATH_PROGRAMS = {"rig_check_jq_by_path": "jq", "rig_check_curlrc_by_path": "curl", "rig_check_sqliterc_by_path": "sqlite3"}
