"""OSWorld's ``run.py`` flag spellings, read as this CLI's flags.

OSWorld users' scripts call ``python run.py --path_to_vm … --observation_type screenshot
--max_steps 15 --test_all_meta_path evaluation_examples/test_all.json --result_dir ./results``.
``run`` accepts those spellings: each flag with an equivalent here is rewritten to it before
click parses the command line (so help and completion show one name per flag), and each
flag without one is refused with a message that says what to use instead, rather than
click's bare "no such option". The flags typed in OSWorld's spelling are kept: errors name
them so (``--observation_type must be …``, not ``--observation-type``, which was never typed).

``--test_all_meta_path`` is a path from the current folder in OSWorld; here the index is
``--osworld-index``, relative to ``--data`` unless absolute, so the path is made absolute,
and when neither ``--data`` nor ``--test_config_base_dir`` is given, ``--data`` is the
index's folder (where ``test_all.json`` sits beside ``examples/``, as in OSWorld's layout).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import click

#: OSWorld's run.py / run_multienv.py flag -> this CLI's flag of the same meaning
OSWORLD_ALIASES = {
    "--path_to_vm": "--path-to-vm",
    "--provider_name": "--provider-name",
    "--snapshot_name": "--snapshot-name",
    "--action_space": "--action-space",
    "--observation_type": "--observation-type",
    "--screen_width": "--screen-width",
    "--screen_height": "--screen-height",
    "--sleep_after_execution": "--sleep-after-execution",
    "--max_steps": "--max-turns",
    "--max_tokens": "--max-tokens",
    "--client_password": "--client-password",
    "--test_config_base_dir": "--data",
    "--test_all_meta_path": "--osworld-index",
    "--result_dir": "--output-dir",
    "--num_envs": "--num-rollouts",
    "--base_url": "--base-url",
}

#: OSWorld flags with no equivalent here -> what to do instead
OSWORLD_REFUSED = {
    "--top_p": "set it with --sampling top_p=VALUE (the openai agent's sampling parameters)",
    "--stop_token": "set it with --sampling stop=TEXT (the openai agent's sampling parameters)",
    # agents/openai_agent.KEEP_IMAGES (tests/test_cli_conventions.py holds the two equal)
    "--max_trajectory_length": "the openai agent keeps the 3 newest screenshots in its conversation (as "
                               "OSWorld's default, 3, does) and every turn's text; that window is not set "
                               "here: leave the flag out",
    "--region": "cloud providers (aws, azure) are not built in; use --provider-name remote "
                "with --vm-address for guests you started yourself",
    "--log_level": "use -v (DEBUG) or -q (warnings only) for the console; run.log keeps INFO",
    "--api_key": "the openai agent reads its key from OPENAI_API_KEY",
}
#: OSWorld's flags that run one task of the set -> whose (--example_id: forks' multi-env
#: runners'): refused with _one_task_advice, which names the task and its domain
ONE_TASK_FLAGS = {"--specific_task_id": "run.py", "--example_id": "runners"}


#: the flags of this CLI that messages say as the user typed them (``said_as_typed``) -> where: as
#: their OSWorld spelling reads the value the same, --data, --output-dir and the VM's (the providers'
#: refusals of an OSWorld script's --path_to_vm, --snapshot_name) always, --osworld-index before an
#: absolute path only (a bare name is the --data folder's there, the current folder's after
#: --test_all_meta_path, whose value is made absolute)
SAID_AS_TYPED = {"--data": "", "--output-dir": "", "--path-to-vm": "", "--snapshot-name": "",
                 "--osworld-index": "(?= /)"}
#: a quoted text in a message (a task's command, 'curl --data x'): said as it is
_QUOTED = r"""(?<!\w)'[^'\n]*'(?!\w)|(?<!\w)"[^"\n]*"(?!\w)"""


def said_as_typed(message: str, typed: dict[str, str]) -> str:
    """``message`` of the core, which says ``--data``, with that flag as the user typed it,
    ``typed`` (``translate_osworld_flags``' second value): ``--test_config_base_dir``; so
    ``--osworld-index /path``, ``--test_all_meta_path /path``."""
    for flag, before in SAID_AS_TYPED.items():
        if flag in typed:
            message = re.sub(rf"{_QUOTED}|(?<![\w-]){flag}(?![\w-]){before}",
                             lambda found: found.group(0) if found.group(0)[0] in "'\"" else typed[flag], message)
    return message


def translate_osworld_flags(args: list[str], aliases: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """``args`` with OSWorld's flags rewritten to this CLI's, and each flag typed in another
    spelling -> that spelling as typed (of a flag given twice, the last, the one click keeps):
    OSWorld's, or one of ``aliases`` (a flag's other name -> its own: ``--num-workers`` ->
    ``--num-rollouts``); UsageError for one without an equivalent, naming what to use instead."""
    out: list[str] = []
    typed: dict[str, str] = {}
    index_path: str | None = None
    data: str | None = None
    one_task: str | None = None
    one_task_flag = ""
    has_data = False
    data_flag = "--data"  # as typed, for the --specific_task_id advice
    rest = iter(args)
    for arg in rest:
        if arg == "--":
            out.append(arg)
            out.extend(rest)
            break
        flag, eq, value = arg.partition("=")
        if flag in ONE_TASK_FLAGS:  # refused once the line is read: the advice names its --data
            one_task, one_task_flag = (value if eq else next(rest, "")), flag
            continue
        if flag in OSWORLD_REFUSED:
            raise click.UsageError(f"{flag} (OSWorld's run.py) has no equivalent here: {OSWORLD_REFUSED[flag]}")
        new = OSWORLD_ALIASES.get(flag)
        if flag.startswith("--"):
            typed[(aliases or {}).get(new or flag, new or flag)] = flag
        if flag in ("--data", "--test_config_base_dir"):  # kept as given, its value noted
            has_data, data_flag = True, flag
            out.append(f"{new or flag}{eq}{value}")
            if not eq:
                data = next(rest, None)
                out += [data] if data is not None else []
            else:
                data = value
            continue
        if new is None:
            out.append(arg)
            continue
        if new == "--osworld-index":
            if not eq:
                value = next(rest, "")
            index_path = value
            value = os.path.abspath(value) if value else value
            out.append(f"{new}={value}")
            continue
        out.append(f"{new}{eq}{value}" if eq else new)
    if index_path and not has_data:
        data = os.path.dirname(os.path.abspath(index_path))
        problem = _index_folder_problem(data, index_path)
        if problem:  # the core would say it of --data, which this line never typed
            raise click.UsageError(
                f"--test_all_meta_path {index_path}: {problem} (without --test_config_base_dir, the index's folder "
                f"is the task set's: examples/ beside the index; a relative path is from the current folder, "
                f"{os.getcwd()})")
        out.append(f"--data={data}")
    for at, arg in enumerate(out):  # OSWorld's fourth observation, which click's choice said as a typo
        if arg == "--":
            break
        if arg == "--observation-type=som" or (arg == "--observation-type" and out[at + 1:at + 2] == ["som"]):
            raise click.UsageError(f"{typed['--observation-type']} som (OSWorld's set-of-marks: numbered boxes drawn "
                                   "on the screenshot) is not supported here: give screenshot, a11y_tree or "
                                   "screenshot_a11y_tree")
    if one_task is not None:
        raise click.UsageError(f"{one_task_flag} (OSWorld's {ONE_TASK_FLAGS[one_task_flag]}) has no equivalent here: "
                               f"{_one_task_advice(one_task, data, data_flag)}")
    return out, {flag: spelled for flag, spelled in typed.items() if spelled != flag}


def _index_folder_problem(folder: str, index_path: str) -> str | None:
    """Why the folder of ``--test_all_meta_path``, given alone, is no task set's: not there,
    or there and holding no task set (empty, or task files to give as --data); else None."""
    from .tasks_osworld import folder_files, holds_no_task_set

    if not os.path.isdir(folder):
        return f"no such folder {folder}"
    if not holds_no_task_set(Path(folder), Path(os.path.abspath(index_path))):
        return None
    names, files = folder_files(Path(folder))
    what = (f"its task files run as --data: --data {Path(folder) / files[0]}" if files
            else "the folder is empty" if not names else "it holds no index, no examples/ and no task file")
    return f"no such file, and no OSWorld task set in its folder {folder}: {what}"


def _one_task_advice(task_id: str, data: str | None, data_flag: str) -> str:
    """How to run one task of an OSWorld task set: an index of one's own that lists it, with
    its domain when the task is found under ``data``'s examples/ (given as ``data_flag``, as typed)."""
    from .tasks_osworld import task_domain

    domain = task_domain(data, task_id) if data and task_id else None
    index = json.dumps({domain or "<domain>": [task_id or "<task id>"]})
    where = "" if domain else " (<domain>: the folder of examples/ that holds the task's file)"
    # ./: a bare name is looked up in the --data folder, a path from here is read as it is
    return (f"to run one task, write {index} to a file one.json{where} and add --osworld-index ./one.json, "
            f"with the task set's folder as {data_flag}; --domain runs a whole domain")
