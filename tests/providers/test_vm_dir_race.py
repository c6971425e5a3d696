"""A VM's folder made while the stop of the run's last VM removes the run folder.

``common.make_vm_dir`` makes the pool's run folder first (``lock_pool``) with
``os.makedirs(…, exist_ok=True)``, which raises FileExistsError when the folder was there at
its mkdir and gone by its check that it is a folder (removed by the concurrent stop). A
replacement VM's boot then failed, and with it a pool whose budget it spent (seen: test_pool's
mark_dead test, "boot failed: FileExistsError: … File exists: '<base>/<run>@<key>'"). The race
is made here by an mkdir that finds the run folder there while it is not.
"""

from __future__ import annotations

import os

from parallel_rollout.pool.providers import common


def test_a_run_folder_removed_as_a_vm_folder_is_made_is_made_again(tmp_path, monkeypatch):
    run = tmp_path / "run@key"  # gone: the stop of the run's last VM removed it
    vm_dir = run / "vm-1"
    # makedirs' mkdir of the run folder found it there (the stop had not removed it yet); by its
    # check that it is a folder, it was gone: FileExistsError for a folder that is not there
    monkeypatch.setattr(os, "mkdir", _failing_once_for(run, os.mkdir))
    common.make_vm_dir(vm_dir, "sock", lock_pool=True)  # the pool folder made (and locked) first
    assert (vm_dir / "sock").is_dir()


def _failing_once_for(path, mkdir):
    """os.mkdir that finds ``path`` there once (EEXIST), as when it existed at that mkdir."""
    seen = []

    def mkdir_(name, mode=0o777, *args, **kwargs):
        if os.fspath(name) == os.fspath(path) and not seen:
            seen.append(name)
            raise FileExistsError(17, "File exists", os.fspath(name))
        return mkdir(name, mode, *args, **kwargs)
    return mkdir_
