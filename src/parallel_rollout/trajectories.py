"""Trajectory files: how an attempt's turns are stored, and read back whole.

One attempt writes ``trajectories/<task>/<sample>/attempt-<n>.jsonl`` (``trajectories/<name>/…``
for a named Assignment), one line per turn, and, when a turn's model request carries inline
images, ``attempt-<n>.images.jsonl`` beside it::

    worker ── turn ──► TrajectoryFile.write ──► images.jsonl: {"sha256", "url"}  (each image once)
                                            └─► attempt-n.jsonl: the turn, its request as a delta
    trainer / report ◄── read_turns(path) ◄── the full request of every turn, images put back

A chat agent's request is the whole conversation, re-sent every turn, with up to a few base64
screenshots: stored as is, a T-turn trajectory costs O(T²) bytes and every screenshot is
stored as often as it is re-sent (and a turn's ``prompt_token_ids``, the whole history in
tokens, is O(T²) the same way). So a turn line holds ``request_delta`` (``{"keep": k, "new":
[...]}``: the previous turn's first ``k`` messages, then ``new``) instead of ``request``, and
``prompt_delta`` (the first ``k`` ids of the previous prompt + reply, then ``new``) instead of
``prompt_token_ids``, and every ``data:`` image URL in it becomes ``sha256:<hex>``, whose data is a
line of the images file (written before the turn that first uses it, so a turn never points
at an image that is not on disk). Both files grow linearly with the turns. ``read_turns``
reassembles ``request`` (messages shared between turns are the same objects, so reading is
linear too); a line without ``request_delta`` is read as written, so older files still read.
A turn's ``earlier_calls`` (the model calls an agent made before its last one in that turn,
``agents/calls.py``) and ``outlived_calls`` (those still under way when its act returned)
are stored the same way, each as a delta from the previous turn's own request and prompt +
reply, which they leave as the base of the next turn's: a reader that knows neither list
still reads every turn's own fields right.

Every line is strict JSON, whatever an env or agent put in the turn: a number JSON does not
have (NaN, ±Infinity) is stored as ``null``, a value JSON cannot hold (an object, a set,
bytes) as the string ``"not JSON: <its repr>"`` (:data:`NOT_JSON`), numpy's numbers and
arrays as plain numbers and lists, a lone surrogate as its ``\\ud800`` escape; the first replacement a worker
makes is warned of in run.log, naming the attempt's file, its turn and the field.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import numbers
import os
from pathlib import Path
from typing import Any

from .results import StorageError

#: a turn's lists of model calls other than its own (``agents/calls.py``: CALL_LISTS)
_CALL_LISTS = ("earlier_calls", "outlived_calls")

#: the side file of an attempt's images, beside ``attempt-<n>.jsonl``
IMAGES_SUFFIX = ".images.jsonl"
#: what an image URL stored in the images file is replaced with in a turn line
IMAGE_REF = "sha256:"
#: the start of the string a value JSON cannot hold is stored as, its repr after it
NOT_JSON = "not JSON: "
#: whether this process has warned of a replaced value (once: a run may hold many)
_warned = False


class TrajectoryError(ValueError):
    """A trajectory file that cannot be read back whole (a missing image, a bad delta)."""


class TrajectoryFile:
    """One attempt's trajectory file (and images file), written turn by turn."""

    def __init__(self, folder: str | Path, run_dir: str | Path, attempt: int) -> None:
        # Plain strings, not pathlib: a short task's worker makes one of these per attempt,
        # and the Path joins and ``relative_to`` were a tenth of its time.
        folder, run_dir = os.fspath(folder), os.fspath(run_dir)
        root = run_dir.rstrip(os.sep) + os.sep
        if not folder.startswith(root):
            raise ValueError(f"{folder!r} is not inside the run folder {run_dir!r}")
        self._folder = folder
        self._path = os.path.join(folder, f"attempt-{attempt}.jsonl")
        #: the file relative to the run folder (what the attempt's record names)
        self.relpath = self._path[len(root):]
        self._fh = None
        self._images_fh = None
        self._stored: set[str] = set()
        self._previous: list[Any] = []
        self._previous_ids: list[int] = []

    @property
    def extra_dir(self) -> Path:
        """Where the env may write extra files of this attempt (created by the env): an
        absolute path, so that what an observation names (a screenshot's path) reads the same
        from any folder, not only the one the run was started in."""
        return Path(os.path.abspath(self._path.removesuffix(".jsonl")))

    def begin(self) -> None:
        """Create the file (empty) as the attempt starts: its record names it from then on,
        and one that ends before its first turn (a failed setup, a worker killed in it) has
        it all the same, with no turn. StorageError when the output folder cannot take it."""
        if self._fh is None:
            try:
                self._fh = self._open()
            except OSError as exc:
                raise self._storage_error(exc) from exc

    def write(self, entry: dict[str, Any]) -> None:
        """Append one turn; StorageError when the output folder cannot take it."""
        self.begin()
        try:
            entry = dict(entry)
            for name in _CALL_LISTS:  # before the turn's own: it moves the base
                if isinstance(entry.get(name), list):
                    entry[name] = [self._compact(call, move=False) if isinstance(call, dict) else call
                                   for call in entry[name]]
            _write_all(self._fh, self._line(self._compact(entry, move=True)))
        except OSError as exc:
            raise self._storage_error(exc) from exc

    def _storage_error(self, exc: OSError) -> StorageError:
        # A full disk is not the sample's outcome: the engine stops and a
        # resume runs the attempt again.
        return StorageError(f"cannot write {self._path}: {exc.strerror or exc}; free space "
                            "(or fix the folder) and rerun with --resume")

    def _line(self, entry: dict[str, Any]) -> bytes:
        """The turn as one line of strict JSON (see the module doc); the first replacement a
        process makes is warned of."""
        try:  # the common path: plain JSON as it is
            return (json.dumps(entry, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")
        except (TypeError, ValueError):  # UnicodeEncodeError is a ValueError
            pass
        replaced: list[str] = []
        # ensure_ascii: a lone surrogate as its escape, which strict readers take
        line = json.dumps(_plain(entry, "", replaced), allow_nan=False) + "\n"
        global _warned
        if replaced and not _warned:
            _warned = True
            logging.getLogger("parallel_rollout").warning(
                "%s, turn %s: values JSON cannot hold were replaced in the trajectory: %s (numbers "
                "JSON lacks are stored as null, other values as \"%s<repr>\"; warned once per worker)",
                self.relpath, entry.get("turn"), "; ".join(replaced[:5]), NOT_JSON)
        return line.encode("ascii")

    def _open(self) -> Any:
        """The trajectory file, created with its folder if need be. Unbuffered: a line is
        one ``write`` (a turn is on disk once written), and a short task's attempt pays no
        text layer; ``os.mkdir`` rather than ``makedirs``: a new sample's folder is usually
        the one missing (a new task's, its parent too; a retry's is there)."""
        try:
            os.mkdir(self._folder)
        except FileNotFoundError:
            os.makedirs(self._folder, exist_ok=True)
        except FileExistsError:
            pass
        return open(self._path, "wb", buffering=0)

    def _compact(self, entry: dict[str, Any], move: bool) -> dict[str, Any]:
        """A turn (or an earlier call of it) with its request and prompt ids as deltas from the
        previous turn's; ``move``: they become the base of the next turn's."""
        entry = dict(entry)
        if isinstance(entry.get("request"), list):
            entry["request_delta"] = self._delta(entry.pop("request"), move)
        if isinstance(entry.get("prompt_token_ids"), list):
            entry["prompt_delta"] = self._prompt_delta(entry.pop("prompt_token_ids"), entry.get("token_ids"), move)
        return entry

    def _delta(self, request: list[Any], move: bool = True) -> dict[str, Any]:
        """The request as what changed since the previous turn's, its images stored once."""
        stored = [self._store_images(message) for message in request]
        keep = _common_prefix(stored, self._previous)
        if move:
            self._previous = stored
        return {"keep": keep, "new": stored[keep:]}

    def _prompt_delta(self, prompt: list[int], sampled: Any, move: bool = True) -> dict[str, Any]:
        """The prompt's ids as what follows the previous prompt + reply (all of it on drift)."""
        keep = _common_prefix(prompt, self._previous_ids)
        if move:
            self._previous_ids = prompt + (sampled if isinstance(sampled, list) else [])
        return {"keep": keep, "new": prompt[keep:]}

    def _store_images(self, message: Any) -> Any:
        """The message with each inline image replaced by its reference (written if new)."""
        if not isinstance(message, dict) or not isinstance(message.get("content"), list):
            return message
        parts = []
        for part in message["content"]:
            url = _image_url(part)
            if url is not None and url.startswith("data:"):
                digest = hashlib.sha256(url.encode()).hexdigest()
                if digest not in self._stored:
                    if self._images_fh is None:
                        self._images_fh = open(images_path(Path(self._path)), "a", encoding="utf-8")
                    self._images_fh.write(json.dumps({"sha256": digest, "url": url}) + "\n")
                    self._images_fh.flush()
                    self._stored.add(digest)
                part = {**part, "image_url": {**part["image_url"], "url": IMAGE_REF + digest}}
            parts.append(part)
        return {**message, "content": parts}

    def close(self) -> None:
        """Close the files, if opened; never raises (it runs in a ``finally``)."""
        for name in ("_fh", "_images_fh"):
            fh = getattr(self, name)
            setattr(self, name, None)
            if fh is not None:
                try:
                    fh.close()
                except OSError:
                    pass  # the unflushed tail of a failed write; write() already raised


def _plain(value: Any, where: str, replaced: list[str], inside: set[int] | None = None) -> Any:
    """``value`` with what strict JSON cannot hold replaced (see the module doc), each
    replacement noted in ``replaced`` as ``field: what → stored``; ``inside``: the ids of the
    containers around ``value``."""
    inside = set() if inside is None else inside
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        if math.isfinite(number):
            return number
        replaced.append(f"{where or 'the turn'}: {number!r} → null")
        return None
    if isinstance(value, (dict, list, tuple)):
        if id(value) in inside:  # what holds itself: json.dumps would refuse the whole turn
            replaced.append(f"{where}: a circular reference → {NOT_JSON + '...'!r}")
            return NOT_JSON + "..."
        inside.add(id(value))
        if isinstance(value, dict):
            plain: Any = {_key(key, where, replaced): _plain(item, f"{where}.{key}" if where else str(key),
                                                             replaced, inside)
                          for key, item in value.items()}
        else:
            plain = [_plain(item, f"{where}[{index}]", replaced, inside) for index, item in enumerate(value)]
        inside.discard(id(value))
        return plain
    if callable(getattr(value, "tolist", None)):  # numpy's arrays and scalars (np.bool_ too)
        try:
            plain = value.tolist()
        except Exception:  # noqa: BLE001 - then it is stored as its repr, below
            plain = value
        if plain is not value:
            return _plain(plain, where, replaced, inside)
    shown = _marked(value)
    replaced.append(f"{where or 'the turn'}: {type(value).__name__} → {shown[:80]!r}")
    return shown


def _key(key: Any, where: str, replaced: list[str]) -> str:
    """A dict key as JSON's object keys are: strings (numbers and None as ``json`` writes them)."""
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, (bool, int, float)):
        return json.dumps(key)
    shown = _marked(key)
    replaced.append(f"{where or 'the turn'}: a {type(key).__name__} key → {shown[:80]!r}")
    return shown


def _marked(value: Any) -> str:
    """A value JSON cannot hold as the string stored in its place."""
    try:
        return NOT_JSON + repr(value)
    except Exception:  # noqa: BLE001 - a repr that raises still leaves its type
        return f"{NOT_JSON}<{type(value).__qualname__} whose repr failed>"


def _write_all(fh: Any, data: bytes) -> None:
    """All of ``data`` to an unbuffered file (a short write is retried; a full disk raises)."""
    view = memoryview(data)
    while view:
        view = view[fh.write(view):]


def images_path(path: Path) -> Path:
    """The images file beside the trajectory file ``path``."""
    return path.with_name(path.stem + IMAGES_SUFFIX)


def read_turns(path: Path) -> list[dict[str, Any]]:
    """Every turn of a trajectory file, each ``request`` whole again (images put back).

    A torn last line (a killed attempt) ends the turns; OSError when the file is missing;
    TrajectoryError when a turn points at an image the images file lacks."""
    path = Path(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    base = _Base(path)
    turns = []
    for number, line in enumerate(lines, 1):
        try:
            turn = json.loads(line)
        except ValueError:
            break  # a torn last line of a killed attempt
        for name in _CALL_LISTS if isinstance(turn, dict) else ():
            for call in turn[name] if isinstance(turn.get(name), list) else ():  # deltas from the turn's own base
                if isinstance(call, dict):
                    base.restore(call, number, move=False)
        if isinstance(turn, dict):
            base.restore(turn, number, move=True)
        turns.append(turn)
    return turns


class _Base:
    """What ``read_turns`` restores a turn's deltas from: the previous turn's request and
    prompt + reply ids, and the images file (read when first needed)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.images: dict[str, str] | None = None
        self.previous: list[Any] = []
        self.previous_ids: list[int] = []

    def restore(self, turn: dict[str, Any], number: int, move: bool) -> None:
        """``turn``'s request and prompt ids whole again (in place); ``move``: they are the
        base of the next turn's."""
        delta = turn.pop("request_delta", None)
        if delta is not None:
            if self.images is None:
                self.images = _read_images(images_path(self.path))
            try:
                new = [_restore_images(message, self.images) for message in delta["new"]]
                request = self.previous[: delta["keep"]] + new
            except KeyError as exc:
                raise TrajectoryError(f"{self.path}:{number}: the request refers to {exc.args[0]}, which "
                                      f"{images_path(self.path).name} does not hold") from None
            turn["request"] = request
            if move:
                self.previous = request
        ids = turn.pop("prompt_delta", None)
        if ids is not None:
            turn["prompt_token_ids"] = self.previous_ids[: ids["keep"]] + ids["new"]
            if move:
                self.previous_ids = turn["prompt_token_ids"] + (turn["token_ids"] if isinstance(turn.get("token_ids"), list)
                                                                else [])


def shown_turn(turn: dict[str, Any]) -> dict[str, Any]:
    """A stored turn line as a person reads it (the report's turn viewer): ``request_delta``
    becomes ``request`` and ``prompt_delta`` becomes ``prompt_token_ids``, each what the turn
    added, after a note of what it kept from the previous turn; the rest as stored. Images stay
    ``sha256:<hex>`` references (their data is in the images file)."""
    shown = dict(turn)
    for name in _CALL_LISTS:
        if isinstance(shown.get(name), list):
            shown[name] = [shown_turn(call) if isinstance(call, dict) else call for call in shown[name]]
    for stored, name, what in (("request_delta", "request", "messages of the previous turn's request"),
                               ("prompt_delta", "prompt_token_ids", "ids of the previous turn's prompt + reply")):
        delta = shown.pop(stored, None)
        if not isinstance(delta, dict) or not isinstance(delta.get("new"), list):
            if delta is not None:
                shown[stored] = delta
            continue
        keep = delta.get("keep") or 0
        shown[name] = ([f"… the first {keep} {what}, then:"] if keep else []) + delta["new"]
    return shown


def pack_files(run_dir: Path, relpath: str | None) -> dict[str, str]:
    """An attempt's trajectory and images files by path relative to ``run_dir`` (what a
    node without the driver's folder sends back with the record); {} when there are none."""
    files: dict[str, str] = {}
    if relpath:
        path = Path(run_dir) / relpath
        for each in (path, images_path(path)):
            try:
                files[str(each.relative_to(run_dir))] = each.read_text(encoding="utf-8")
            except FileNotFoundError:
                pass
    return files


def unpack_files(run_dir: Path, files: dict[str, str]) -> None:
    """Write the files ``pack_files`` sent where this host lacks them (a node that shares the
    folder wrote them already); StorageError when the folder cannot take them."""
    for relpath, text in files.items():
        path = Path(run_dir) / relpath
        if path.exists():
            continue
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise StorageError(f"cannot write {path}: {exc.strerror or exc}") from exc


def _common_prefix(items: list[Any], previous: list[Any]) -> int:
    """How many first items ``items`` shares with ``previous``."""
    if items[: len(previous)] == previous:  # the usual append-only history, compared in C
        return len(previous)
    keep = 0
    while keep < min(len(items), len(previous)) and items[keep] == previous[keep]:
        keep += 1
    return keep


def _read_images(path: Path) -> dict[str, str]:
    images = {}
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return images
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            break
        images[entry["sha256"]] = entry["url"]
    return images


def _restore_images(message: Any, images: dict[str, str]) -> Any:
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        return message
    parts = []
    for part in message["content"]:
        url = _image_url(part)
        if url is not None and url.startswith(IMAGE_REF):
            digest = url[len(IMAGE_REF):]
            if digest not in images:
                raise KeyError(url)
            part = {**part, "image_url": {**part["image_url"], "url": images[digest]}}
        parts.append(part)
    return {**message, "content": parts}


def _image_url(part: Any) -> str | None:
    """The URL of an OpenAI ``image_url`` content part, else None."""
    if isinstance(part, dict) and part.get("type") == "image_url" and isinstance(part.get("image_url"), dict):
        url = part["image_url"].get("url")
        return url if isinstance(url, str) else None
    return None
