#!/usr/bin/env python3
"""Census of an OSWorld task set: every config/postconfig step type, getter type and metric
name its tasks use, with task counts, and which of them this project supports.

    python scripts/osworld_census.py [EVALUATION_EXAMPLES] [--index test_all.json] [--missing]

EVALUATION_EXAMPLES defaults to shared/osworld/evaluation_examples in the first folder above
the repository that has one; it is read as ``run --data`` reads an OSWorld folder (a checkout
that holds evaluation_examples/ too), and a folder that is not one, or an index it lacks, is
said as the run says it, exit 2, not as a traceback.
The last lines give, per kind, ``covered N/M names (T/U tasks)``, and how many tasks use only
supported features.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from parallel_rollout.envs.osworld import registry  # noqa: E402
from parallel_rollout.errors import TaskFileError  # noqa: E402
from parallel_rollout.tasks_osworld import (holds_no_task_set, missing_data, osworld_folder,  # noqa: E402
                                           read_osworld_index)


def default_folder() -> Path | None:
    for base in ROOT.parents:
        candidate = base / "shared" / "osworld" / "evaluation_examples"
        if candidate.is_dir():
            return candidate
    return None


def _said(value: object = None) -> str:
    """The script's words for the folder argument, in the loader's messages (``run`` says ``--data``)."""
    return "EVALUATION_EXAMPLES" if value is None else str(value)


def load(folder: Path, index: str) -> list[dict]:
    """Every task of the index file, in its order; TaskFileError when ``folder`` holds no task
    set or lacks the index."""
    if not folder.exists():
        raise TaskFileError(missing_data(folder, osworld=True, data_said=_said))
    # not the run's advice to give one task file as --data: the census reads a task set only
    if not folder.is_dir() or (folder.name != "examples" and holds_no_task_set(folder, folder / index)):
        raise TaskFileError(f"{folder}: no OSWorld task set; EVALUATION_EXAMPLES is its folder (examples/ beside "
                            "an index such as test_all.json) or the checkout that holds it")
    folder, index_path = osworld_folder(folder, index, _said)
    listing = read_osworld_index(index_path)
    tasks = []
    for domain, ids in listing.items():
        for task_id in ids:
            path = folder / "examples" / domain / f"{task_id}.json"
            try:
                tasks.append(json.loads(path.read_text()))
            except (OSError, ValueError) as exc:
                raise SystemExit(f"{path}: {exc}")
    return tasks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", type=Path, default=default_folder())
    parser.add_argument("--index", default="test_all.json")
    parser.add_argument("--missing", action="store_true", help="list only unsupported names")
    args = parser.parse_args(argv)
    if args.folder is None:
        parser.error("no evaluation_examples folder found; name one")
    try:
        tasks = load(args.folder, args.index)
    except TaskFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    counts = registry.census(tasks)
    summary = []
    for kind in registry.KINDS:
        names = counts[kind]
        covered = [n for n in names if registry.supported(kind, n)]
        print(f"== {kind}s")
        for name, count in names.most_common():
            ok = registry.supported(kind, name)
            if not (args.missing and ok):
                print(f"  {'ok ' if ok else '-- '} {count:4d}  {name}")
        summary.append(f"{kind}s: covered {len(covered)}/{len(names)} names "
                       f"({sum(names[n] for n in covered)}/{sum(names.values())} uses)")
    runnable = sum(1 for task in tasks if not registry.unsupported(task))
    print("\n".join(summary))
    print(f"tasks whose every feature is supported: {runnable} of {len(tasks)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
