"""Fill or inspect the osworld download cache for a machine without internet: the
``osworld-cache`` command of the CLI (``parallel-rollout osworld-cache …``, ``python -m
parallel_rollout osworld-cache …``, ``./dev osworld-cache …``; ``scripts/osworld_cache.py`` in a
checkout is the same command)::

    osworld-cache where URL            # the path the cache keeps URL at
    osworld-cache put URL FILE         # copy FILE there
    osworld-cache missing DATA [--index test_all.json] [--domain D]
                                       # every http(s) file the run's tasks download that is
                                       # not cached yet (not the web pages Chrome opens)

``missing`` takes what the run takes: its ``--data`` (an OSWorld folder, or a task file) and,
for a folder, its ``--osworld-index`` and ``--domain``; the dry run's note names the command
with the run's own. It loads them as the run does (a domain the index lacks, a folder that is
none: the loader's message, exit 2) and lists ``<domain>/<task id>\\t<url>`` per file.

The cache is ``$PARALLEL_ROLLOUT_OSWORLD_CACHE`` or ``~/.cache/parallel-rollout/osworld``
(see :mod:`.downloads`). A file an earlier version had put at ``<cache>/<task id>/<name>``
counts as cached, as a run takes it from there too.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from ...config import build_config
from ...errors import ConfigError, TaskFileError
from ...tasks import load_task_set
from ...tasks_osworld import DEFAULT_INDEX
from ..registry import task_validators
from . import downloads
from .sources import task_sources

#: the command's name under the CLI's program
COMMAND = "osworld-cache"


def _data_said(value: Any = None) -> str:
    """The loader's words for the data, this command's DATA argument (``--data`` is the run's flag)."""
    return "DATA" if value is None else str(value)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """The command line above; ``prog``: how the user reaches it, for its usage lines."""
    parser = argparse.ArgumentParser(prog=prog, description="Fill or inspect the osworld download cache "
                                     "for a machine without internet.")
    sub = parser.add_subparsers(dest="command", required=True)
    where = sub.add_parser("where", help="the path the cache keeps URL at")
    where.add_argument("url", help="a URL a task downloads (osworld-cache missing lists them)")
    put = sub.add_parser("put", help="copy FILE into the cache as URL's file")
    put.add_argument("url", help="the URL the file is the download of")
    put.add_argument("file", help="the file, fetched on a machine with internet")
    missing = sub.add_parser("missing", help="list the files the run's tasks download that are not cached yet")
    missing.add_argument("data", help="the run's --data: an OSWorld folder, or a task file")
    # also by the run's own name, which the loader's messages say (a task file given an index)
    missing.add_argument("--index", "--osworld-index", dest="index", default=DEFAULT_INDEX,
                         help="the run's --osworld-index (default: %(default)s)")
    missing.add_argument("--domain", default="all", help="the run's --domain (default: %(default)s)")
    args = parser.parse_args(argv)
    name = f"{parser.prog} {args.command}"
    if args.command in ("where", "put") and not downloads.is_remote(args.url):
        # the cache holds the http(s) downloads a run makes; any other key is a file no run reads
        swapped = " (the URL comes first: put URL FILE)" if args.command == "put" and downloads.is_remote(
            args.file) else ""
        print(f"{name}: {args.url!r} is not an http(s) URL{swapped}; {parser.prog} missing DATA lists the "
              "URLs a run downloads", file=sys.stderr)
        return 2
    if args.command == "where":
        print(downloads.cache_path(args.url))
    elif args.command == "put":
        if not Path(args.file).is_file():
            print(f"{name}: no such file {args.file}", file=sys.stderr)
            return 2
        target = downloads.cache_path(args.url)
        target.parent.mkdir(parents=True, exist_ok=True)
        # a copy cut short must not be taken for the file: a run uses whatever is at target
        partial = target.with_name(f".{target.name}.part")
        shutil.copyfile(args.file, partial)
        os.replace(partial, target)
        print(target)
    else:
        try:  # the run's settings as the run makes them (--osworld-index a path from here, or the folder's)
            cfg = build_config({"mode": "osworld", "data": args.data, "osworld_index": args.index, "domain": args.domain})
            task_set = load_task_set(cfg.data, default_mode="osworld", validators=task_validators(),
                                     domain=cfg.domain, index=cfg.osworld_index, data_said=_data_said)
        except (ConfigError, TaskFileError) as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            return 2
        for task in task_set.tasks + [left.task for left in task_set.unsupported]:
            urls = [url for url in task_sources(task.payload) if downloads.is_remote(url)]
            for url in dict.fromkeys(urls):
                if downloads.cached(url, task.id) is None:
                    print(f"{task_set.domains.get(task.id, 'all')}/{task.id}\t{url}")
    return 0
