"""An osworld run's trajectories in OSWorld's own result layout, for OSWorld's scripts.

OSWorld's ``run.py`` writes, and its ``show_result.py`` reads, one folder per example::

    <result_dir>/<action_space>/<observation_type>/<model>/<domain>/<example_id>/
        traj.jsonl  step_1.png …  result.txt  [recording.mp4]

A run of ours keeps the same files per attempt, under
``trajectories/<task>/<sample>/attempt-<n>/``. :func:`export_osworld` puts the files of the
attempt that counts for each sample (the final one) into that layout, as copies (OSWorld's
``run.py`` resumes into such a folder and appends to its files: a link would change the
run's own). The domain is the task's folder in the OSWorld index the run read (``--data
FOLDER``; a task it no longer lists, that of the task file the run recorded reading); a run
of a task file has no domains, so its examples go under ``all``. A sample
never graded (its VM failed, say: no final attempt) is exported as it is, with no
``result.txt``: OSWorld's scripts count an example only once it has one, which is how they
treat an unfinished example of their own. A sample graded without the evaluator's
``result.txt`` (a task ``--skip-unsupported`` skipped, with no attempt's files; an attempt
past --task-timeout or ended by the agent's error, scored 0) gets one of its score, so
OSWorld's scripts score the run over the same examples as the run's summary.

The ``<model>`` folder is named as OSWorld's ``run.py`` names it, by joining the model's
name into the path: ``Qwen/Qwen2.5-VL-7B-Instruct`` is a folder ``Qwen`` holding
``Qwen2.5-VL-7B-Instruct``, which is where OSWorld's ``show_result.py`` looks for that model.

OSWorld has one folder per example and no samples: with ``--group-size`` k > 1 a call
exports one sample index (``sample``, 0 by default).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError
from .run_data import RunData


@dataclass
class Exported:
    """What :func:`export_osworld` wrote."""

    #: ``<result_dir>/<action_space>/<observation_type>/<model>``
    folder: Path
    #: example folders written, and how many of them hold a ``result.txt``
    examples: int = 0
    scored: int = 0
    #: task ids whose final attempt left no folder of files (nothing to export)
    without_files: list[str] = field(default_factory=list)
    #: where the domains came from: the run's OSWorld index, or None (all under ``all``)
    index: Path | None = None
    #: the index could not be read (moved, another machine): the domains are those of the
    #: task files the run recorded reading (config.json's provenance, ``examples/<domain>/``)
    recorded: bool = False


def export_osworld(run_dir: str | Path, result_dir: str | Path, *, sample: int = 0,
                   model: str | None = None, overwrite: bool = False) -> Exported:
    """Export the final attempts of ``sample`` of an osworld run into ``result_dir``
    (see the module docstring); ConfigError naming what is wrong: not an osworld run, no
    such sample, or an example folder already there (unless ``overwrite``)."""
    run = RunData.load(run_dir, with_events=False)
    if run.mode != "osworld":
        raise ConfigError(f"{run.run_dir}: a {run.mode} run; only an osworld run has OSWorld's files")
    finals = [r for r in run.finals.values() if r.get("sample_idx") == sample]
    if not finals:
        samples = sorted({r.get("sample_idx") for r in run.finals.values()})
        raise ConfigError(f"{run.run_dir}: no final attempt of sample {sample} (samples: "
                          f"{', '.join(map(str, samples)) or 'none'})")
    config = run.config
    layout = (Path(result_dir) / str(config.get("action_space") or "pyautogui")
              / str(config.get("observation_type") or "screenshot"))
    folder = layout / _model_folder(_model_name(config) if model is None else model, layout)
    index_path, domains = _domains(config)
    recorded = _recorded_domains(run)
    out = Exported(folder=folder, index=index_path, recorded=bool(recorded) and not domains)
    # a task the index no longer lists (an index of the user's own, edited since) keeps the
    # domain of the task file the run read, not 'all'
    domains = {**recorded, **domains}
    plan = []
    for record in sorted(finals, key=lambda r: r["task_id"]):
        source = _attempt_folder(run.run_dir, record)
        if source is None and not record.get("final"):
            out.without_files.append(record["task_id"])
            continue
        domain = _safe(domains.get(record["task_id"], "all"), "domain")
        target = folder / domain / _safe(record["task_id"], "task id")
        if target.exists() and not overwrite:
            raise ConfigError(f"{target} already exists: export into an empty result folder, "
                              "or pass --overwrite to replace its examples")
        plan.append((source, target, record))
    for source, target, record in plan:
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        for item in sorted(source.iterdir()) if source is not None else ():
            if item.is_file():
                shutil.copy2(item, target / item.name)
        if record.get("final") and not (target / "result.txt").exists():
            # graded with no evaluator's result.txt (skipped as unsupported: no attempt's files;
            # past --task-timeout, an agent's error: reward 0): its score, as run.py writes one
            (target / "result.txt").write_text(f"{float(record.get('reward') or 0.0)}\n")
        out.examples += 1
        out.scored += (target / "result.txt").is_file()
    return out


def layout_hint(run_dir: str | Path, result_dir: str, program: str) -> str | None:
    """The line a run given OSWorld's ``--result_dir`` ends with: that folder holds the run's
    own ``<run-id>/``, where OSWorld's show_result.py finds nothing, so it names the layout
    show_result.py reads there and the command, as typed, that fills it. None while no sample
    has a final attempt: the command would refuse ('no final attempt'). Where the layout holds
    some of its examples already (this run's, exported before its resume, or an earlier run's
    of the same tasks), the command has ``--overwrite``, without which it refuses them."""
    import glob
    import shlex

    run = RunData.load(run_dir, with_events=False)
    exported = {r["task_id"] for r in run.finals.values() if r.get("sample_idx") == 0}
    if not exported:
        return None
    config = run.config
    layout = "/".join([result_dir.rstrip("/") or "/", str(config.get("action_space") or "pyautogui"),
                       str(config.get("observation_type") or "screenshot"), _model_name(config)])
    there = sum(bool(glob.glob(f"{glob.escape(layout)}/*/{glob.escape(str(task_id))}")) for task_id in exported)
    replaced = "" if not there else (f"; {there} of this run's examples {'is' if there == 1 else 'are'} there "
                                     "already, which --overwrite replaces")
    return (f"OSWorld's layout, which its show_result.py reads ({layout}/<domain>/<example id>/{replaced}): "
            f"{program} runs export-osworld {shlex.quote(str(run_dir))} {shlex.quote(result_dir)}"
            f"{' --overwrite' * bool(there)}")


def _model_name(config: dict) -> str:
    """The run's model where its agent asked one (``openai``, or ``--model`` given), else
    its agent's name (the oracle's run is not the default model's)."""
    if config.get("model") and (config.get("agent") == "openai" or "model" in config.get("explicit", ())):
        return str(config["model"])
    return str(config.get("agent") or "model")


def _domains(config: dict) -> tuple[Path | None, dict[str, str]]:
    """Task id -> domain from the OSWorld index the run read, when it still can be read."""
    from ..errors import TaskFileError
    from ..tasks_osworld import DEFAULT_INDEX, osworld_folder, read_osworld_index

    data = Path(str(config.get("data") or ""))
    if not data.is_dir():
        return None, {}
    try:
        _, index_path = osworld_folder(data, str(config.get("osworld_index") or DEFAULT_INDEX))
        index = read_osworld_index(index_path)
    except (TaskFileError, OSError):
        return None, {}
    return index_path, {task_id: domain for domain, ids in index.items() for task_id in ids}


def _recorded_domains(run: RunData) -> dict[str, str]:
    """Task id -> domain from the task files the run read, as its provenance recorded them
    (config.json's, else summary.json's: ``examples/<domain>/<id>.json``): the index's
    selection when it was read."""
    import json

    try:
        provenance = json.loads((run.run_dir / "config.json").read_text()).get("provenance")
    except (OSError, ValueError, AttributeError):
        provenance = None
    provenance = provenance or (run.summary or {}).get("provenance") or {}
    files = [name for entry in (provenance.get("data") or []) if isinstance(entry, dict)
             for name in (entry.get("file_sha256") or {})]
    return {parts[-1][: -len(".json")]: parts[-2] for parts in (Path(name).parts for name in files)
            if len(parts) >= 3 and parts[-3] == "examples" and parts[-1].endswith(".json")}


def _attempt_folder(run_dir: Path, record: dict) -> Path | None:
    """``trajectories/…/attempt-<n>/`` of a record (its ``trajectory`` file without
    ``.jsonl``), when it exists."""
    trajectory = record.get("trajectory")
    if not isinstance(trajectory, str) or not trajectory.endswith(".jsonl"):
        return None
    folder = run_dir / trajectory[: -len(".jsonl")]
    return folder if folder.is_dir() else None


def _model_folder(name: str, layout: Path) -> Path:
    """The <model> folder, as OSWorld's run.py joins the model's name into the path: a name
    with '/' is folders in folders (``Qwen/Qwen2.5-VL-7B-Instruct``). ConfigError for a name
    that names no folder, or one outside ``layout`` (``<result_dir>/<action_space>/<observation_type>``:
    an absolute path, a '..' part)."""
    path = Path(name)
    if path.is_absolute() or ".." in path.parts:
        why = f"it would put the examples outside {layout}"
    elif not path.parts or "\0" in name:
        why = "it is no folder name"
    else:
        return path
    raise ConfigError(f"the model's name {name!r} cannot be the <model> folder of OSWorld's layout ({why}): "
                      "name the folder with --model NAME")


def _safe(name: str, what: str) -> str:
    """``name`` as one folder name: no separator, not '.' or '..'."""
    name = str(name)
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise ConfigError(f"{what} {name!r} cannot be a folder name in OSWorld's layout")
    return name
