"""The MiniWoB++ environments: where their pages ship, which exist, and the files one needs.

The pages come from the ``miniwob`` package on PyPI (the ``[web]`` extra), found without
importing it (its ``__init__`` pulls in gymnasium and Selenium, which this mode does not use)::

    site-packages/miniwob/html/miniwob/<env>.html   one page per environment
                              core/ common/          MiniWoB's core.js, jQuery UI, d3, helpers

A task's page and every file it loads (``src=``/``href=`` into ``core/`` and ``common/``,
with jQuery UI's folder whole for its images) go into the VM as one gzipped tar, built once
per environment and process.
"""

from __future__ import annotations

import base64
import functools
import importlib.util
import io
import re
import tarfile
from pathlib import Path

#: the environments the shipped set (``--data miniwob``) holds: the ones the oracle solves
DEFAULT_ENVS = (
    "click-button", "click-link", "click-dialog", "click-dialog-2", "click-test", "click-test-2",
    "click-test-transfer", "click-widget", "focus-text", "focus-text-2", "click-option",
    "click-checkboxes", "click-checkboxes-large", "click-checkboxes-transfer", "enter-text",
    "enter-text-2", "enter-text-dynamic", "enter-password", "login-user", "click-tab",
    "click-tab-2", "click-collapsible", "click-collapsible-2", "choose-list", "use-autocomplete",
    "find-word", "read-table", "simple-arithmetic", "copy-paste", "scroll-text", "unicode-test",
    "text-transform",
)
#: seeds of each environment in the shipped set
DEFAULT_SEEDS = (0, 1, 2)
_REF = re.compile(r"""(?:src|href)\s*=\s*["'](\.\./[^"'#?]+)["']""")


class MiniwobMissing(FileNotFoundError):
    """The ``miniwob`` package is not installed."""


def html_root() -> Path:
    """``miniwob/html`` of the installed package."""
    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        raise MiniwobMissing("the web mode needs the miniwob package (MiniWoB++'s pages): "
                             "pip install 'parallel-rollout[web]'")
    root = Path(list(spec.submodule_search_locations)[0]) / "html"
    if not (root / "miniwob").is_dir():
        raise MiniwobMissing(f"the installed miniwob package has no pages under {root}/miniwob")
    return root


@functools.lru_cache(maxsize=1)
def environments() -> tuple[str, ...]:
    """Every MiniWoB++ environment the installed package ships, by name."""
    return tuple(sorted(p.stem for p in (html_root() / "miniwob").glob("*.html")))


def check_env(name: str) -> None:
    """ValueError naming close matches when ``name`` is not a MiniWoB++ environment."""
    known = environments()
    if name in known:
        return
    import difflib

    close = difflib.get_close_matches(name, known, n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else f" ({len(known)} known, e.g. click-button)"
    raise ValueError(f"unknown MiniWoB++ environment {name!r}{hint}")


def page(name: str) -> str:
    """The page's path below the bundle root (and the loopback server's root)."""
    return f"miniwob/{name}.html"


@functools.lru_cache(maxsize=256)
def bundle(name: str) -> str:
    """Base64 of a gzipped tar with the page of ``name`` and every file it loads."""
    root = html_root()
    files = {root / page(name)}
    for ref in _REF.findall((root / page(name)).read_text(encoding="utf-8", errors="replace")):
        target = (root / "miniwob" / ref).resolve()
        if target.is_file() and root.resolve() in target.parents:
            files.add(target)
            if "jquery-ui" in target.parts:
                files.update(p for p in (root / "core" / "jquery-ui").rglob("*") if p.is_file())
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=6) as tar:
        for path in sorted(files):
            tar.add(path, arcname=str(path.resolve().relative_to(root.resolve())))
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def default_tasks() -> list[dict]:
    """The shipped task set: every default environment with every default seed."""
    return [{"id": f"{env}-{seed}", "mode": "web", "env": env, "seed": seed}
            for env in DEFAULT_ENVS for seed in DEFAULT_SEEDS]


def miniwob_path() -> Path:
    """The shipped task set as a file (``--data miniwob``)."""
    html_root()  # say now that the pages are missing, not when the first task starts
    from importlib import resources

    return Path(str(resources.files("parallel_rollout.envs") / "data" / "miniwob.jsonl"))
