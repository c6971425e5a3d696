"""A grading command's python that reads its bytecode from a folder of the check's choosing
(``PYTHONPYCACHEPREFIX``, ``-X pycache_prefix``) in a process VM. Where the answer could guess that
folder (``/tmp/pr-pyc``) it left there timestamp pycs whose date and size are their sources': the
guest python's ``encodings`` (read as python starts, before any front could run), its
``sitecustomize``, a stdlib module, and under ``-X frozen_modules=off`` its startup modules
(``codecs``, ``os``, ``site`` …); their ``os._exit(0)`` passed the check. A check's own folder
is still written and read.
"""

from __future__ import annotations

import shutil

import pytest

from hostile_tasks import SHELL_ROWS, check_finished, check_row, run_table
from parallel_rollout.guest.client import GuestClient
from parallel_rollout.pool.providers.base import ProviderOptions
from parallel_rollout.pool.providers.process import ProcessProvider
from process_support import base_dir, no_leaked_sandbox  # noqa: F401 - fixtures

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

#: the rows whose check's python reads its bytecode elsewhere
PREFIX_ROWS = ("rig_check_python_pycache_prefix_encodings_pyc", "rig_check_python_pycache_prefix_sitecustomize_pyc",
               "rig_check_python_x_pycache_prefix_stdlib_pyc", "rig_check_python_pycache_prefix_pth",
               "rig_check_python_x_pycache_prefix_pth", "rig_check_python_frozen_off_pycache_prefix_startup_pyc",
               "rig_check_python_frozen_off_env_pycache_prefix_startup_pyc")


@pytest.fixture(scope="module")
def prefix_table(tmp_path_factory):
    left_out = {row: "not a cache folder's row" for row in SHELL_ROWS if row not in PREFIX_ROWS}
    return run_table(tmp_path_factory.mktemp("process"), left_out, provider_name="process")


@pytest.mark.parametrize("name", PREFIX_ROWS)
def test_a_cache_folder_row_scores_0_in_a_process_vm(prefix_table, name):
    check_row(prefix_table, name)


def test_the_cache_folder_run_finished(prefix_table):
    check_finished(prefix_table)


#: a python that writes json's bytecode into a folder of its own (a grading command's environment
#: says PYTHONDONTWRITEBYTECODE), and one that reads it from there (``-v`` names the file it took
#: the code from) and imports a codec as ever
OWN_FOLDER = ("unset PYTHONDONTWRITEBYTECODE; d=$(mktemp -d) && python3 -X pycache_prefix=$d -c 'import json'"
              " && PYTHONPYCACHEPREFIX=$d python3 -v -c 'import json, encodings.idna' 2>&1"
              " | grep -c \"code object from '$d/usr/lib/python3[.0-9]*/json/__init__\\.\"")


@pytest.mark.parametrize("flags", ["", "-X frozen_modules=off "], ids=["frozen", "frozen_modules=off"])
@pytest.mark.parametrize("grading", [False, True], ids=["graded code", "grading command"])
def test_a_cache_folder_written_since_is_read(base_dir, grading, flags):  # noqa: F811 - fixture
    provider = ProcessProvider("prefix", ProviderOptions(boot_timeout_s=20), base_dir=base_dir)
    info = provider.start("vm0")
    try:
        command = OWN_FOLDER.replace("python3 -", f"python3 {flags}-")
        got = GuestClient(info.address).execute(command, shell=True, isolated=grading, timeout=60)
        assert got["returncode"] == 0 and int(got["output"].split()[-1]) >= 1, got
    finally:
        provider.stop(info)
