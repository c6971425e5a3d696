"""Files of the guest agent: read one (``/file``), write one (``/setup/upload``), list a tree
(``/list_directory``), with OSWorld's request and answer shapes.

``/file`` takes a url-encoded form or a JSON body and answers the raw bytes, or OSWorld's
exact ``404 {"error": "File not found"}`` that its clients look for. ``/setup/upload`` takes
OSWorld's multipart form (``file_path`` and ``file_data``) or JSON with ``content_b64`` and
creates the parent folders. ``/list_directory`` answers OSWorld's nested ``directory_tree``,
cut short after :data:`MAX_LIST_ENTRIES` entries (and then says ``truncated``).
:func:`seed_home` copies a snapshot into the home at the agent's start (``--seed-home``).

``/file`` and ``/list_directory`` read with the rights of the commands' user
(:class:`AsCommandsUser`), never the agent's: a grader fetches files the answer wrote, and
the answer may have made one a symlink to what only root reads (a host's
``/etc/docker/key.json`` is bound into the sandbox with the system folders).
"""

from __future__ import annotations

import os

try:
    from . import agent_commands
    from .agent_commands import expand, give
    from .agent_http import HTTPError, Request, field, parse_multipart
except ImportError:  # a sibling file in the guest, not a package
    import agent_commands  # type: ignore[no-redef]
    from agent_commands import expand, give  # type: ignore[no-redef]
    from agent_http import HTTPError, Request, field, parse_multipart  # type: ignore[no-redef]

#: a directory listing bigger than this is cut short (and says so)
MAX_LIST_ENTRIES = 20_000


class AsCommandsUser:
    """``with AsCommandsUser():`` the calling thread opens files with the rights of the
    commands' user (``--run-as``; nothing changes without it): its file-system uid and gid
    are that user's, and the kernel drops the agent's file capabilities (CAP_DAC_OVERRIDE
    …) while its fsuid is not 0. Linux keeps these ids per thread, so other requests are
    untouched."""

    def __enter__(self) -> None:
        self.ids = agent_commands.run_as
        if self.ids is not None:
            self._switch(*self.ids)

    def __exit__(self, *exc) -> None:
        if self.ids is not None:
            self._switch(os.getuid(), os.getgid())

    @staticmethod
    def _switch(uid: int, gid: int) -> None:
        libc = _libc()
        libc.setfsgid(gid)
        libc.setfsuid(uid)
        # both answer the previous id; an id they refuse leaves it: ask again (-1 changes nothing)
        if libc.setfsuid(-1) != uid or libc.setfsgid(-1) != gid:
            raise HTTPError(500, f"cannot take the file-system ids {uid}:{gid}")


_libc_handle = None


def _libc():
    """The C library, loaded once (two fs-id switches per file request)."""
    global _libc_handle
    if _libc_handle is None:
        import ctypes

        _libc_handle = ctypes.CDLL(None)
    return _libc_handle


def route_file(req: Request):
    """POST /file: the bytes of ``file_path`` (form or JSON), read as the commands' user;
    404 when it does not exist."""
    file_path = req.form().get("file_path")
    if not file_path:
        raise HTTPError(400, "missing required field 'file_path'")
    path = expand(file_path)
    with AsCommandsUser():
        if not os.path.isfile(path):
            # OSWorld's exact shape, which its clients look for
            return 404, {"error": "File not found"}
        try:
            with open(path, "rb") as handle:
                return 200, handle.read()
        except OSError as exc:
            raise HTTPError(400, f"cannot read {path}: {exc.strerror}") from None


def route_upload(req: Request):
    """POST /setup/upload: write ``file_data`` to ``file_path``, creating parent folders."""
    ctype = req.headers.get("content-type", "")
    if ctype.startswith("multipart/form-data"):
        fields = parse_multipart(ctype, req.body)
        file_path = fields.get("file_path", b"").decode("utf-8", "replace")
        if "file_data" not in fields:
            raise HTTPError(400, "missing multipart file field 'file_data'")
        data = fields["file_data"]
    elif ctype.startswith("application/json"):
        body = req.json()
        file_path = field(body, "file_path", (str,), required=True)
        import base64
        import binascii

        try:
            data = base64.b64decode(field(body, "content_b64", (str,), required=True),
                                    validate=True)
        except binascii.Error as exc:
            raise HTTPError(400, f"field 'content_b64' is not base64: {exc}") from None
    else:
        raise HTTPError(400, "expected a multipart/form-data or JSON body")
    if not file_path:
        raise HTTPError(400, "missing required field 'file_path'")
    path = expand(file_path)
    try:
        parent = os.path.dirname(path)
        if parent:
            _makedirs(parent)
        with open(path, "wb") as handle:
            handle.write(data)
        give(path)
    except OSError as exc:
        raise HTTPError(400, f"cannot write {path}: {exc.strerror}") from None
    return 200, f"File Uploaded: {len(data)} bytes"

def _makedirs(path: str) -> None:
    """os.makedirs, each new folder handed to the commands' user."""
    if os.path.isdir(path):
        return
    _makedirs(os.path.dirname(path))
    try:
        os.mkdir(path)
    except FileExistsError:
        return
    give(path)


def route_list_directory(req: Request):
    """POST /list_directory: the tree under ``path``, OSWorld's ``{directory_tree}``."""
    path = expand(field(req.json(), "path", (str,), required=True))
    with AsCommandsUser():
        if not os.path.isdir(path):
            raise HTTPError(400, f"not a directory: {path}")
        budget = [MAX_LIST_ENTRIES]
        tree = _tree(path, os.path.basename(path.rstrip("/")) or path, budget)
    answer = {"directory_tree": tree}
    if budget[0] <= 0:
        answer["truncated"] = True
    return 200, answer


def _tree(path: str, name: str, budget: list) -> dict:
    node = {"type": "directory", "name": name, "children": []}
    try:
        entries = sorted(os.scandir(path), key=lambda e: e.name)
    except OSError:
        return node  # unreadable: shown empty, as OSWorld does
    for entry in entries:
        if budget[0] <= 0:
            break
        budget[0] -= 1
        if entry.is_dir(follow_symlinks=False):
            node["children"].append(_tree(entry.path, entry.name, budget))
        else:
            node["children"].append({"type": "file", "name": entry.name})
    return node


def seed_home(source: str, target: str) -> None:
    """Copy the snapshot's tree into the (empty) home, owned by the commands' user."""
    import shutil

    give(target)
    for root, dirs, files in os.walk(source):
        here = os.path.normpath(os.path.join(target, os.path.relpath(root, source)))
        if here != os.path.normpath(target):
            os.mkdir(here)
            shutil.copystat(root, here)
            give(here)
        links = [d for d in dirs if os.path.islink(os.path.join(root, d))]
        for name in files + links:
            src, dst = os.path.join(root, name), os.path.join(here, name)
            if os.path.islink(src):
                os.symlink(os.readlink(src), dst)
            else:
                shutil.copy2(src, dst)
            give(dst)
        dirs[:] = [d for d in dirs if d not in links]
