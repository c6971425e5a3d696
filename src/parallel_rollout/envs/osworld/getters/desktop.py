"""Getters on the guest desktop and its apps: screen and window sizes, the wallpaper, the
terminal's text, a directory tree (the guest agent's routes, as OSWorld's client calls
them); VLC's settings file and its playing status (its web interface on the guest's
loopback), the default video player, GIMP's and VS Code's settings files; the audio and
background image of a slide of a presentation in the guest."""

from __future__ import annotations

import base64
import os
import time
import xml.etree.ElementTree as ET
import zipfile
from collections import Counter
from typing import Any
from urllib.parse import urlencode

from .files import get_vm_file

#: the MIME types OSWorld asks xdg-mime for
VIDEO_TYPES = ("3gp", "3gpp", "3gpp2", "avi", "divx", "dv", "fli", "flv", "mp2t", "mp4", "mp4v-es", "mpeg",
               "mpeg-system", "msvideo", "ogg", "quicktime", "vnd.divx", "vnd.mpegurl", "vnd.rn-realvideo",
               "webm", "x-anim", "x-avi", "x-flc", "x-fli", "x-flv", "x-m4v", "x-matroska", "x-mpeg",
               "x-mpeg-system", "x-mpeg2", "x-ms-asf", "x-ms-asf-plugin", "x-ms-asx", "x-ms-wm", "x-ms-wmv",
               "x-ms-wmx", "x-ms-wvx", "x-msvideo", "x-nsv", "x-ogm", "x-ogm+ogg", "x-theora", "x-theora+ogg")
#: VLC's web interface in the guest (OSWorld's port and password)
VLC_PORT, VLC_PASSWORD = 8080, "password"


def _home_path(env, path: str) -> str:
    code = f"import os; print(os.path.expanduser({path!r}))"
    return (env.vm.execute(["python3", "-c", code], timeout=30, isolated=True).get("output") or "").strip()


def _save(env, dest: str, data: bytes) -> str:
    target = os.path.join(env.cache_dir, dest)
    os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
    with open(target, "wb") as handle:
        handle.write(data)
    return target


def get_vm_screen_size(env, config: dict) -> dict:
    return env.vm.request("POST", "/screen_size").json()


def get_vm_window_size(env, config: dict) -> Any:
    response = env.vm.request("POST", "/window_size", data=urlencode({"app_class_name": config["app_class_name"]})
                              .encode(), content_type="application/x-www-form-urlencoded", check=False)
    return response.json() if response.status == 200 else None


def get_vm_wallpaper(env, config: dict) -> str:
    """The wallpaper image in the cache folder (an empty file when there is none)."""
    response = env.vm.request("POST", "/wallpaper", check=False)
    return _save(env, config["dest"], response.body if response.status == 200 else b"")


def get_vm_terminal_output(env, config: dict) -> Any:
    response = env.vm.request("GET", "/terminal", check=False)
    return response.json().get("output") if response.status == 200 else None


def get_list_directory(env, config: dict) -> dict:
    return env.vm.list_directory(config["path"]).get("directory_tree")


def get_vlc_config(env, config: dict) -> str:
    return _save(env, config["dest"], env.vm.read_file(_home_path(env, "~/.config/vlc/vlcrc")))


def get_vlc_playing_info(env, config: dict) -> str | None:
    """VLC's status.xml from its web interface, saved as ``dest`` (None when it does not answer)."""
    code = ("import base64, urllib.request\n"
            f"request = urllib.request.Request('http://127.0.0.1:{VLC_PORT}/requests/status.xml')\n"
            f"request.add_header('Authorization', 'Basic ' + base64.b64encode(b':{VLC_PASSWORD}').decode())\n"
            "try:\n    print(base64.b64encode(urllib.request.urlopen(request, timeout=10).read()).decode())\n"
            "except Exception:\n    print('')\n")
    output = (env.vm.execute(["python3", "-c", code], timeout=30, isolated=True).get("output") or "").strip()
    if not output:
        return None
    return _save(env, config["dest"], base64.b64decode(output))


def get_default_video_player(env, config: dict) -> str:
    """The desktop file most video types open with (xdg-mime), 'unknown' for none."""
    apps: Counter = Counter()
    for kind in VIDEO_TYPES:
        answer = env.vm.execute(["xdg-mime", "query", "default", f"video/{kind}"], timeout=30,
                                isolated=True).get("output") or ""
        if answer:
            # OSWorld's list names each type twice but x-ogm+ogg; the counts decide
            apps[answer] += 1 if kind == "x-ogm+ogg" else 2
    return Counter(apps).most_common(1)[0][0] if apps else "unknown"


def get_gimp_config_file(env, config: dict) -> str | None:
    data = env.vm.read_file(_home_path(env, f"~/.config/GIMP/2.10/{config['file_name']}"))
    return _save(env, config["dest"], data) if data else None


def get_vscode_config(env, config: dict) -> str | None:
    """Run a VS Code command through its palette (ctrl+shift+p), then fetch ``path``."""
    command = config["vscode_extension_command"]
    for code in ("pyautogui.hotkey('ctrl', 'shift', 'p')", f"pyautogui.typewrite({command!r})",
                 "pyautogui.press('enter')"):
        env.vm.execute(["python3", "-c", f"import pyautogui; {code}"], timeout=60, isolated=True)
    time.sleep(1.0)
    return get_vm_file(env, {"path": config["path"], "dest": config["dest"]})


_REL = "{http://schemas.openxmlformats.org/package/2006/relationships}Relationship"


def _slide_part(env, config: dict, kind: str, wanted_id: str | None = None) -> str | None:
    """The slide's related part of ``kind`` (audio, image): extracted beside the fetched deck,
    or, for a linked file://, fetched from the guest."""
    deck = get_vm_file(env, {"path": config["ppt_file_path"], "dest": os.path.basename(config["ppt_file_path"])})
    rels = f"ppt/slides/_rels/slide{int(config['slide_index']) + 1}.xml.rels"
    with zipfile.ZipFile(deck) as archive:
        if rels not in archive.namelist():
            return None
        for rel in ET.fromstring(archive.read(rels)).iter(_REL):
            if kind not in rel.get("Type", "") or (wanted_id is not None and rel.get("Id") != wanted_id):
                continue
            target = rel.get("Target")
            if target.startswith(".."):
                inner = os.path.normpath(os.path.join("ppt/slides", target)).replace("\\", "/")
                archive.extract(inner, os.path.dirname(deck))
                return os.path.join(os.path.dirname(deck), inner)
            if not target.startswith("file://"):
                raise ValueError(f"slide part target {target!r} is neither inside the deck nor file://")
            return get_vm_file(env, {"path": target[7:], "dest": config["dest"]})
    return None


def get_audio_in_slide(env, config: dict) -> str | None:
    return _slide_part(env, config, "audio")


def get_background_image_in_slide(env, config: dict) -> str | None:
    deck = get_vm_file(env, {"path": config["ppt_file_path"], "dest": os.path.basename(config["ppt_file_path"])})
    slide = f"ppt/slides/slide{int(config['slide_index']) + 1}.xml"
    with zipfile.ZipFile(deck) as archive:
        if slide not in archive.namelist():
            return None
        root = ET.fromstring(archive.read(slide))
    blip = "{http://schemas.openxmlformats.org/drawingml/2006/main}blip"
    embed = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}embed"
    for background in root.iter("{http://schemas.openxmlformats.org/presentationml/2006/main}bgPr"):
        for element in background.iter(blip):
            if embed in element.attrib:
                return _slide_part(env, config, "image", element.attrib[embed])
    return None


GETTERS = {f.__name__[4:]: f for f in (
    get_vm_screen_size, get_vm_window_size, get_vm_wallpaper, get_vm_terminal_output, get_list_directory,
    get_vlc_config, get_vlc_playing_info, get_default_video_player, get_gimp_config_file, get_vscode_config,
    get_audio_in_slide, get_background_image_in_slide)}
