"""Fill or inspect the osworld download cache for a machine without internet.

::

    python scripts/osworld_cache.py where URL            # the path the cache keeps URL at
    python scripts/osworld_cache.py put URL FILE         # copy FILE there
    python scripts/osworld_cache.py missing [FOLDER] [--index test_all.json] [--domain D]
                                                         # every http(s) file the task set
                                                         # downloads that is not cached yet
                                                         # (not the web pages Chrome opens)

The cache is ``$PARALLEL_ROLLOUT_OSWORLD_CACHE`` or ``~/.cache/parallel-rollout/osworld``
(see ``parallel_rollout/envs/osworld/downloads.py``). A file an earlier version had put at
``<cache>/<task id>/<name>`` counts as cached, as a run takes it from there too.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from parallel_rollout.envs.osworld import downloads
from parallel_rollout.envs.osworld.sources import task_sources
from parallel_rollout.tasks_osworld import DEFAULT_INDEX, osworld_folder


def main(argv: list[str] | None = None) -> int:
    """The command line above."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    where = sub.add_parser("where")
    where.add_argument("url")
    put = sub.add_parser("put")
    put.add_argument("url")
    put.add_argument("file", type=Path)
    missing = sub.add_parser("missing")
    missing.add_argument("folder", nargs="?", default="../shared/osworld/evaluation_examples")
    missing.add_argument("--index", default=DEFAULT_INDEX)
    missing.add_argument("--domain", default="all")
    args = parser.parse_args(argv)
    if args.command == "where":
        print(downloads.cache_path(args.url))
    elif args.command == "put":
        target = downloads.cache_path(args.url)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(args.file, target)
        print(target)
    else:
        folder, index_path = osworld_folder(Path(args.folder), args.index)
        index = json.loads(index_path.read_text())
        for domain in sorted(index) if args.domain == "all" else [args.domain]:
            for task_id in index[domain]:
                task = json.loads((folder / "examples" / domain / f"{task_id}.json").read_text())
                urls = [url for url in task_sources(task) if downloads.is_remote(url)]
                for url in dict.fromkeys(urls):
                    if downloads.cached(url, task_id) is None:
                        print(f"{domain}/{task_id}\t{url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
