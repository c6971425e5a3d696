"""Real OSWorld tasks with the oracle agent, through a pool of desktop VMs.

::

    python benchmarks/osworld_oracle.py [--data ../shared/osworld/evaluation_examples]
        [--provider process] [--num-rollouts 3] [--num-vms 2] [--domain D] [--out results]

Runs every task that has a project-written reference (``envs/data/osworld_references.jsonl``)
from OSWorld's own task files, with ``--agent oracle --action-space pyautogui`` at OSWorld's
1920x1080. The tasks' input files come from a local download cache: an http(s) URL already
in the user's cache is used, any other gets an equivalent file made here by its type (an
image, a document, a workbook, an archive …), since these machines cannot reach the URLs.
Prints per domain the tasks passed and the run folder; exit 0 when every task passed.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tarfile
import tempfile
from collections import Counter
from pathlib import Path

from parallel_rollout.config import build_config
from parallel_rollout.envs.osworld import downloads
from parallel_rollout.envs.osworld.references import reference_index
from parallel_rollout.runner import Runner
from parallel_rollout.tasks import osworld_folder

DEFAULT_DATA = Path("../shared/osworld/evaluation_examples")  # from the checkout, as the README says


def equivalent_file(name: str) -> bytes:
    """A small valid file of the type ``name`` says (what the task would download)."""
    suffix = name.lower().rsplit(".", 1)[-1] if "." in name else ""
    if suffix in ("png", "jpg", "jpeg", "webp", "gif", "bmp", "pdf"):
        from PIL import Image

        out = io.BytesIO()
        Image.new("RGB", (320, 240), (200, 120, 40)).save(
            out, format={"jpg": "JPEG", "jpeg": "JPEG"}.get(suffix, suffix.upper()))
        return out.getvalue()
    if suffix == "docx":
        import docx

        document, out = docx.Document(), io.BytesIO()
        document.add_paragraph("An equivalent document made for a local run.")
        document.save(out)
        return out.getvalue()
    if suffix == "xlsx":
        import openpyxl

        book, out = openpyxl.Workbook(), io.BytesIO()
        book.active.append(["name", "value"])
        book.active.append(["a", 1])
        book.save(out)
        return out.getvalue()
    if suffix == "gz" or name.endswith(".tar"):
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w:gz"):
            pass
        return out.getvalue()
    return b"equivalent input made for a local run\n"


def fill_cache(folder: Path, index: dict[str, list[str]]) -> int:
    """Put an equivalent file in the download cache for every URL of the tasks not there."""
    made = 0
    for domain, ids in index.items():
        for task_id in ids:
            task = json.loads((folder / "examples" / domain / f"{task_id}.json").read_text())
            for url in downloads.urls_in([task.get("config", []), task.get("evaluator", {})]):
                target = downloads.cache_path(url)
                if not target.is_file():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(equivalent_file(downloads.basename(url)))
                    made += 1
    return made


def main(argv: list[str] | None = None) -> int:
    """Run the tasks, print per-domain results."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--provider", default="process")
    parser.add_argument("--num-rollouts", type=int, default=3)
    parser.add_argument("--num-vms", type=int, default=2)
    parser.add_argument("--domain", default="all")
    parser.add_argument("--out", default=tempfile.mkdtemp(prefix="osworld-oracle-"))
    parser.add_argument("--run-id", default="oracle")
    args = parser.parse_args(argv)
    folder, _ = osworld_folder(args.data)
    index = reference_index()
    if args.domain != "all":
        index = {args.domain: index[args.domain]}
    index_file = Path(args.out) / "oracle_index.json"
    index_file.parent.mkdir(parents=True, exist_ok=True)
    index_file.write_text(json.dumps(index, indent=1))
    os.environ.setdefault(downloads.CACHE_ENV, str(Path(args.out) / "cache"))
    print(f"cache {downloads.cache_root()}: {fill_cache(folder, index)} equivalent inputs made",
          flush=True)
    outcome = Runner(build_config(dict(
        mode="osworld", data=str(folder), osworld_index=str(index_file), agent="oracle",
        action_space="pyautogui", provider_name=args.provider, num_rollouts=args.num_rollouts,
        num_vms=args.num_vms, use_vm_pool=True, output_dir=args.out, run_id=args.run_id,
        progress=False, max_turns=5, task_timeout=600.0, boot_timeout_s=300.0))).run()
    records = [json.loads(line) for line in (outcome.run_dir / "results.jsonl").read_text().splitlines()]
    finals = [r for r in records if r.get("final")]
    domain_of = {task_id: domain for domain, ids in index.items() for task_id in ids}
    passed, total = Counter(), Counter()
    for record in finals:
        domain = domain_of[record["task_id"]]
        total[domain] += 1
        passed[domain] += bool(record.get("success"))
        if not record.get("success"):
            why = (record.get("failure") or {}).get("message") or record.get("eval")
            print(f"  FAIL {domain}/{record['task_id']}: {record['status']}: {str(why)[:300]}")
    for domain in sorted(total):
        print(f"{domain}: {passed[domain]} of {total[domain]} passed")
    print(f"passed {sum(passed.values())} of {sum(total.values())} tasks in "
          f"{len(total)} domains; run folder {outcome.run_dir}")
    return 0 if passed == total else 1


if __name__ == "__main__":
    sys.exit(main())
