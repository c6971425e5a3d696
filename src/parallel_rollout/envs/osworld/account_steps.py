"""Steps and getters that need the user's Google account, taken the way OSWorld takes it:
``googledrive`` (clean or prepare the Drive: delete by query, make folders, upload a URL),
``login`` (sign in to Google Drive in the guest's browser) and the ``googledrive_file``
getter (download files from the Drive by path or query).

Credentials are files named by the task (``settings_file``), relative to OSWorld's root:
``evaluation_examples/settings/googledrive/settings.yml`` (PyDrive's settings, with its
OAuth client and saved credentials) and ``evaluation_examples/settings/google/settings.json``
(``{"email": …, "password": …}``). They are looked up above the task file and in the working
folder; ``$PARALLEL_ROLLOUT_OSWORLD_SETTINGS`` may name a folder that stands for
``evaluation_examples/settings``. Without the file the step fails with a setup error naming
where it looked. The Drive parts need PyDrive (``pip install pydrive``) and the network;
they are untested here (no Google account).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .sources import SetupError, local_source
from .step_values import FLAG, TEXT, TEXTS, Kind, Objects, one_of, texts_of

_PREFIX = "evaluation_examples/settings/"
DRIVE_URL = "https://drive.google.com/drive/my-drive"


def settings_path(env, settings_file: str, what: str) -> Path:
    """The credentials file a task names; SetupError naming every place looked at."""
    candidates = []
    override = os.environ.get("PARALLEL_ROLLOUT_OSWORLD_SETTINGS")
    if override and settings_file.startswith(_PREFIX):
        candidates.append(Path(override) / settings_file[len(_PREFIX):])
    source = Path(str(getattr(env.task, "source", "") or "").rsplit(":", 1)[0])
    if source.parts:
        candidates += [base / settings_file for base in source.resolve().parents]
    candidates.append(Path.cwd() / settings_file)
    for path in candidates:
        if path.is_file():
            return path
    raise SetupError(f"task {env.task.id!r}: {what} needs the credentials file {settings_file!r} "
                     f"(OSWorld's; looked at {', '.join(str(p) for p in candidates[:3])}"
                     f"{' …' if len(candidates) > 3 else ''}); put it there or set "
                     "$PARALLEL_ROLLOUT_OSWORLD_SETTINGS to the folder holding googledrive/ and google/")


def _drive(env, settings_file: str):
    path = settings_path(env, settings_file, "the Google Drive")
    try:
        from pydrive.auth import GoogleAuth
        from pydrive.drive import GoogleDrive
    except ImportError:
        raise SetupError(f"task {env.task.id!r}: the Google Drive steps need PyDrive: pip install pydrive") from None
    return GoogleDrive(GoogleAuth(settings_file=str(path)))


def _folder(drive, names: list[str]) -> str:
    """The id of the folder path (made where missing), 'root' for none."""
    parent = "root"
    for name in names:
        query = (f'"{parent}" in parents and title = "{name}" and '
                 'mimeType = "application/vnd.google-apps.folder" and trashed = false')
        found = drive.ListFile({"q": query}).GetList()
        if found:
            parent = found[0]["id"]
            continue
        folder = drive.CreateFile({"title": name, "mimeType": "application/vnd.google-apps.folder",
                                   **({} if parent == "root" else {"parents": [{"id": parent}]})})
        folder.Upload()
        parent = folder["id"]
    return parent


def googledrive(env, operation: list[str], args: list[dict],
                settings_file: str = _PREFIX + "googledrive/settings.yml") -> None:
    drive = _drive(env, settings_file)
    folder_type = "mimeType = 'application/vnd.google-apps.folder'"
    for kind, params in zip(operation, args):
        if kind == "delete":
            query = params.get("query", "").strip()
            files = f"( {query} ) and mimeType != 'application/vnd.google-apps.folder'" if query \
                else "mimeType != 'application/vnd.google-apps.folder'"
            folders = f"( {query} ) and {folder_type}" if query else folder_type
            for item in drive.ListFile({"q": files}).GetList() + drive.ListFile({"q": folders}).GetList():
                item.Trash() if params.get("trash", False) else item.Delete()
        elif kind == "mkdirs":
            paths = params["path"]
            _folder(drive, paths if isinstance(paths, list) else [paths])
        elif kind == "upload":
            source = local_source(env.task, params["url"], env.cache_root)
            # at the Drive's root, as OSWorld's puts it (_UPLOAD_NAME): a list is of one name
            name = params["path"][0] if isinstance(params["path"], list) else params["path"]
            item = drive.CreateFile({"title": name})
            item.SetContentFile(str(source))
            item.Upload()
            return  # OSWorld's step ends at its first upload
        else:
            raise ValueError(f"googledrive operation {kind!r} is not supported")


def login(env, platform: str, settings_file: str = _PREFIX + "google/settings.json") -> None:
    from . import chrome

    if platform != "googledrive":
        raise ValueError(f"login platform {platform!r} is not supported (OSWorld knows googledrive)")
    settings = json.loads(settings_path(env, settings_file, "the Google login").read_text())
    try:
        email, password = settings["email"], settings["password"]
    except (TypeError, KeyError):
        raise SetupError(f"task {env.task.id!r}: {settings_file} must hold 'email' and 'password'") from None
    chrome.fill_form(env.vm, DRIVE_URL, [
        {"selector": 'input[type="email"]', "value": email, "timeout": 3},
        {"selector": "#identifierNext > div > button"},
        {"selector": 'input[type="password"]', "value": password, "timeout": 5},
        {"selector": "#passwordNext > div > button"}])


def _title_query(path: list[str]) -> list[str]:
    return [f"title = '{name}' and mimeType = 'application/vnd.google-apps.folder' and trashed = false"
            if index < len(path) - 1 else f"title = '{name}' and trashed = false"
            for index, name in enumerate(path)]


def get_googledrive_file(env, config: dict) -> Any:
    """The Drive file(s) at ``path``/``query`` (or ``path_list``/``query_list``), downloaded
    to the cache folder as ``dest``; None for one not found."""
    drive = _drive(env, config.get("settings_file", _PREFIX + "googledrive/settings.yml"))

    def fetch(queries: list[str], dest: str):
        parent, item = "root", None
        try:
            for query in queries:
                found = drive.ListFile({"q": f'( {query} ) and "{parent}" in parents'}).GetList()
                if not found:
                    return None
                item = found[0]
                parent = item["id"]
            target = os.path.join(env.cache_dir, dest)
            os.makedirs(env.cache_dir, exist_ok=True)
            item.GetContentFile(target, mimetype=item["mimeType"])
            return target
        except Exception:
            return None

    if "query" in config:
        return fetch(config["query"], config["dest"])
    if "path" in config:
        return fetch(_title_query(config["path"]), config["dest"])
    lists = config.get("query_list") or [_title_query(p) for p in config["path_list"]]
    return [fetch(queries, dest) for queries, dest in zip(lists, config["dest"])]


STEPS = {"googledrive": googledrive, "login": login}
GETTERS = {"googledrive_file": get_googledrive_file}
_FOLDERS = Kind(lambda value: TEXT.test(value) or TEXTS.test(value), "a string or a list of strings (the folder path)")
#: an upload's path: OSWorld's _googledrive_setup means to read a list as folders and the
#: file's name, but its check of the kind (``params['path'] != list``) always holds, so it
#: makes no folder and gives the list whole as the title, at the Drive's root: a path of
#: folders would be uploaded here where OSWorld never puts it. Its one upload task gives
#: ``["invoice.pdf"]``, the file's name at the root, as a string does.
_UPLOAD_NAME = Kind(lambda value: TEXT.test(value) or TEXTS.test(value) and len(value) == 1,
                    "the file's name, a string or a list of one name (OSWorld's upload makes no folders: the file "
                    "goes to the Drive's root)")
#: a googledrive operation -> the object of args it reads, as OSWorld's _googledrive_setup
#: does: a delete's query (none: every file of the Drive) and trash, a mkdirs' path, an
#: upload's url and path (the file's name); a key of another
#: is refused (a delete's "qurey" was not read: every file was deleted)
DRIVE_ARGS = {"delete": Objects({}, optional={"query": TEXT, "trash": FLAG}, closed=True),
              "mkdirs": Objects({"path": _FOLDERS}, closed=True),
              "upload": Objects({"url": TEXT, "path": _UPLOAD_NAME}, closed=True)}
#: step type -> parameter -> the kind of value it needs (setup.VALUES); a googledrive's args
#: are checked against its operations by drive_problem
VALUES = {"googledrive": {"operation": texts_of(*DRIVE_ARGS),
                          "args": Kind(lambda value: isinstance(value, list), "a list of objects, one per operation"),
                          "settings_file": TEXT},
          "login": {"platform": one_of("googledrive"), "settings_file": TEXT}}


def drive_problem(params: dict) -> str | None:
    """What is wrong with a googledrive step's args against its operations, or None: OSWorld
    reads ``args[i]`` for ``operation[i]`` (one short raised as the step ran, one over was
    never read) and ends the step at its first upload (an operation after it never runs)."""
    operations, args = params["operation"], params["args"]
    if len(args) != len(operations):
        return (f"parameter 'args' has {len(args)} object(s) for {len(operations)} operation(s): give one per "
                "operation, in its order")
    for index, (operation, item) in enumerate(zip(operations, args)):
        problem = DRIVE_ARGS[operation].item_problem(item, f"[{index}] ({operation}) ")
        if problem:
            return f"parameter 'args'{problem}"
    if "upload" in operations[:-1]:
        index = operations.index("upload") + 1
        return (f"parameter 'operation'[{index}] ({operations[index]}) follows an upload, which ends the step (as "
                "OSWorld's does): it would never run")
    return None


#: step type -> its check of the parameters together (setup.check_steps, after VALUES)
CHECKS = {"googledrive": drive_problem}
