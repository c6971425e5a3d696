"""A ``googledrive`` setup step's ``args`` against its ``operation`` list, as OSWorld's
``_googledrive_setup`` reads them: ``args[i]`` is the object of ``operation[i]``, a delete's
``query`` and ``trash``, a mkdirs' ``path``, an upload's ``url`` and ``path``. A key the
operation does not read was ignored (a delete's ``"qurey"``: every file of the Drive
deleted), one it needs missing failed only as the step ran (a KeyError after the VM was
leased), args one short too (OSWorld's IndexError), one over never read, an operation after
an upload never ran (the step ends at its first upload, here as in OSWorld), and an upload's
path of folders was made here where OSWorld's upload puts the file at the Drive's root (it
reads no list as folders). Each is refused as the folder loads (the dry run, exit 2), naming
the file, the step, the parameter and the place in it."""

from __future__ import annotations

from pathlib import Path

from test_osworld_folder_cli import MODEL_AGENT, run_cli, said
from test_osworld_getter_keys import assert_each_refused, changed_folder
from test_osworld_step_flags import DRIVE
from test_osworld_step_values import _set
from test_osworld_taskset import needs_set

#: config step 1 a googledrive delete, then an upload
UPLOAD = "multi_apps/4e9f0faf-2ecc-4ae8-a804-28c9a75d1ddc.json"
#: config step 1 a googledrive delete, then a mkdirs
MKDIRS = "multi_apps/22a4636f-8179-4357-8e87-d1743ece1f81.json"

_STEP = "config step 1 (googledrive): parameter"
_NAME = ("the file's name, a string or a list of one name (OSWorld's upload makes no folders: the file goes to the "
         "Drive's root)")


def _drive(*edits):
    """The change that applies ``edits`` (each ``(operation, args) -> None``) to config step 1."""
    def change(task: dict) -> None:
        params = task["config"][0]["parameters"]
        for edit in edits:
            edit(params["operation"], params["args"])
    return change


def _rename(index: int, key: str, typo: str):
    return lambda operation, args: args[index].__setitem__(typo, args[index].pop(key))


#: task id -> (the real task it breaks, the break, what the refusal says after "task 'ID': ")
MISTAKES = {
    "delete-qurey": (DRIVE, _drive(_rename(0, "query", "qurey")),
                     f"{_STEP} 'args'[0] (delete) has the key 'qurey', which is not read (did you mean 'query'?)"),
    "mkdirs-paths": (MKDIRS, _drive(_rename(1, "path", "paths")),
                     f"{_STEP} 'args'[1] (mkdirs) has the key 'paths', which is not read (did you mean 'path'?)"),
    "upload-no-url": (UPLOAD, _drive(lambda operation, args: args[1].pop("url")),
                      f"{_STEP} 'args'[1] (upload) needs the key 'url'"),
    "mkdirs-given-a-query": (MKDIRS, _drive(lambda operation, args: args[1].update(query="title = 'x'")),
                             f"{_STEP} 'args'[1] (mkdirs) has the key 'query', which is not read (it reads 'path')"),
    "mkdirs-path-number": (MKDIRS, _drive(lambda operation, args: args[1].update(path=3)),
                           f"{_STEP} 'args'[1] (mkdirs) 'path' is 3, a number: give a string or a list of strings "
                           "(the folder path)"),
    "args-one-short": (MKDIRS, _drive(lambda operation, args: args.pop()),
                       f"{_STEP} 'args' has 1 object(s) for 2 operation(s): give one per operation, in its order"),
    "args-one-over": (DRIVE, _drive(lambda operation, args: args.append({"path": ["Reports"]})),
                      f"{_STEP} 'args' has 2 object(s) for 1 operation(s): give one per operation, in its order"),
    "args-not-an-object": (MKDIRS, _drive(lambda operation, args: args.__setitem__(1, "meetings")),
                           f"{_STEP} 'args'[1] (mkdirs) is \"meetings\", a string: give an object with 'path'"),
    "operation-after-upload": (
        UPLOAD, _drive(lambda operation, args: (operation.append("mkdirs"), args.append({"path": ["later"]}))),
        f"{_STEP} 'operation'[2] (mkdirs) follows an upload, which ends the step (as OSWorld's does): it would "
        "never run"),
    # OSWorld's upload never reads its path as folders (its check of a list always fails)
    "upload-into-folders": (UPLOAD, _drive(lambda operation, args: args[1].update(path=["Invoices", "invoice.pdf"])),
                            f"{_STEP} 'args'[1] (upload) 'path' is [\"Invoices\", \"invoice.pdf\"], a list: give {_NAME}"),
    "upload-no-name": (UPLOAD, _drive(lambda operation, args: args[1].update(path=[])),
                       f"{_STEP} 'args'[1] (upload) 'path' is [], a list: give {_NAME}"),
    "args-an-object": (DRIVE, _set(0, args={"query": "title = 'emails'"}),
                       f"{_STEP} 'args' is {{\"query\": \"title = 'emails'\"}}, an object: give a list of objects, one "
                       "per operation"),
}


@needs_set
def test_a_googledrive_steps_args_that_do_not_fit_its_operations_are_refused_at_load(tmp_path):
    assert_each_refused(tmp_path, MISTAKES, whole=True)


@needs_set
def test_googledrive_args_as_osworld_reads_them_load(tmp_path):
    """OSWorld's three Drive tasks of several operations load as they are; so do a delete of
    no query (every file), a mkdirs' path as one name and an upload's as a string."""
    tasks = {Path(source).stem: (source, lambda task: None) for source in (DRIVE, UPLOAD, MKDIRS)}
    tasks["delete-everything"] = (DRIVE, _drive(lambda operation, args: args[0].pop("query")))
    tasks["mkdirs-one-name"] = (MKDIRS, _drive(lambda operation, args: args[1].update(path="meetings")))
    tasks["upload-path-string"] = (UPLOAD, _drive(lambda operation, args: args[1].update(path="invoice.pdf")))
    done = run_cli("--data", str(changed_folder(tmp_path, tasks, whole=True)), "--dry-run", *MODEL_AGENT)
    assert done.returncode == 0, said(done)
    assert f"runnable {len(tasks)} of {len(tasks)} tasks" in done.stdout, said(done)
