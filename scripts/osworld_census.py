#!/usr/bin/env python3
"""Census of an OSWorld task set: every config/postconfig step type, getter type and metric
name its tasks use, with task counts, and which of them this project supports.

    python scripts/osworld_census.py [EVALUATION_EXAMPLES] [--index test_all.json] [--missing]

EVALUATION_EXAMPLES defaults to shared/osworld/evaluation_examples in the first folder above
the repository that has one.
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


def default_folder() -> Path | None:
    for base in ROOT.parents:
        candidate = base / "shared" / "osworld" / "evaluation_examples"
        if candidate.is_dir():
            return candidate
    return None


def load(folder: Path, index: str) -> list[dict]:
    """Every task of the index file, in its order."""
    listing = json.loads((folder / index).read_text())
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
    tasks = load(args.folder, args.index)
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
