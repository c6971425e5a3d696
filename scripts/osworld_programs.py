#!/usr/bin/env python3
"""Census of the programs an OSWorld task set runs in the guest (config and postconfig
``execute``/``command``/``launch`` steps, ``vm_command_line``/``vm_command_error`` getters,
the oracle's references that call subprocess) against the desktop image: where the image has
each one, or that it misses it.

    python scripts/osworld_programs.py [EVALUATION_EXAMPLES] [--index test_all.json]
        [--image ROOTFS.tar] [--missing]

The image is the desktop guest's Debian tree (what ``parallel-rollout image build --desktop``
makes from ``images.DESKTOP_PACKAGES`` and ``DESKTOP_APT_PACKAGES``, docker and qemu alike),
by default the cached tarball of the current recipe. A program counts as there when the
tree has it on the guest's PATH or ``guest/shim/bin`` shims it (a ``launch`` of
``google-chrome`` starts Chromium). Exit 1 when a program is missing that
``programs.LEFT_OUT`` does not expect, 2 when the image is not built.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))

from osworld_census import default_folder, load  # noqa: E402
from parallel_rollout.envs.osworld import programs  # noqa: E402
from parallel_rollout.envs.osworld.references import references  # noqa: E402
from parallel_rollout.pool.providers import images  # noqa: E402


def census(tasks: list[dict]) -> dict[str, dict[str, set[str]]]:
    """Program -> {"tasks": task ids, "where": step types, ``getter``, ``reference``}."""
    found: dict[str, dict[str, set[str]]] = defaultdict(lambda: {"tasks": set(), "where": set()})
    known = references()
    for task in tasks:
        uses = programs.task_programs(task)
        entry = known.get(task.get("id", ""))
        for action in entry["reference"] if entry else []:
            if isinstance(action, str):
                for program in programs.reference_programs(action):
                    uses.setdefault(program, set()).add("reference")
        for program, where in uses.items():
            found[program]["tasks"].add(task.get("id", "?"))
            found[program]["where"] |= where
    return dict(found)


def report(tasks: list[dict], image: dict[str, str], missing_only: bool = False) -> tuple[list[str], list[str]]:
    """The census's lines, and the programs missing that nothing expects to miss."""
    shims = programs.guest_shims()
    lines, unexpected = [], []
    for program, use in sorted(census(tasks).items(), key=lambda item: (-len(item[1]["tasks"]), item[0])):
        place = programs.locate(program, use["where"], image, shims)
        if place is None:
            place = "MISSING" + (f" (expected: {programs.LEFT_OUT[program]})"
                                 if program in programs.LEFT_OUT else "")
            if program not in programs.LEFT_OUT:
                unexpected.append(program)
        elif missing_only:
            continue
        lines.append(f"{len(use['tasks']):4d}  {program:24s} {place:28s} "
                     f"{','.join(sorted(use['where']))}  e.g. {min(use['tasks'])}")
    return lines, unexpected


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", type=Path, default=default_folder())
    parser.add_argument("--index", default="test_all.json")
    parser.add_argument("--image", type=Path, default=None,
                        help="a guest's rootfs tarball (default: the desktop recipe's, cached)")
    parser.add_argument("--missing", action="store_true", help="list only missing programs")
    args = parser.parse_args(argv)
    if args.folder is None:
        parser.error("no evaluation_examples folder found; name one")
    tarball = args.image or images.rootfs_tarball_path(**images.guest_recipe(desktop=True))
    if not tarball.exists():
        print(f"{tarball}: not built; `parallel-rollout image build --provider docker --desktop` "
              "builds it", file=sys.stderr)
        return 2
    tasks = load(args.folder, args.index)
    lines, unexpected = report(tasks, programs.image_programs(tarball), args.missing)
    print(f"tasks programs (image: {tarball.name})")
    print("\n".join(lines))
    print(json.dumps({"programs": len(census(tasks)), "missing": unexpected}))
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
