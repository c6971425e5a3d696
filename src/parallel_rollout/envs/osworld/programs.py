"""The programs OSWorld's tasks run in a guest, found without running them: a desktop image
must have each one (or the guest a shim of it), else a task's setup or grading meets
``sh: 1: gsettings: not found`` on one provider and passes on another whose guest has it.

Where a task names programs:

* ``config`` and ``postconfig`` steps ``execute``, ``command`` and ``launch``: ``command`` is
  an argv (its first word, or the script of ``bash -c``/``sh -c``) or, with ``shell``, a
  shell script;
* the getters ``vm_command_line`` and ``vm_command_error`` of ``result``/``expected``;
* this project's oracle references (``envs/data/osworld_references.jsonl``): pyautogui code
  whose ``subprocess`` calls (``run``, ``Popen``, ``check_output`` …) name a program or a
  shell script (``shell=True``, or ``bash -i`` fed a script on its input).

A shell script's programs are the first words of its simple commands (after ``;``, ``&&``,
``||``, ``|``, newlines, ``$(…)`` and backquotes, assignments and redirections skipped), and
the program that ``sudo``, ``timeout``, ``env``, ``nohup``, ``nice`` or ``xargs`` runs.
Builtins and words that are no program name (``$VAR``, ``./script``, ``~/bin/x``) are left
out: they are in every shell, or the task makes them.

::

    task_programs(task)          -> {program: {"launch", "execute", "getter", ...}}
    reference_programs(code)     -> {program, ...}        (one reference action)
    shell_programs(script)       -> {program, ...}
    image_programs(tarball)      -> {name or path: path}  (what a guest tree has on its PATH)
    locate(program, where, image) -> "/usr/bin/gsettings", "shim", "alias chromium" or None

``scripts/osworld_programs.py`` prints the census of a task set against the desktop image;
:data:`LEFT_OUT` are the programs it expects to miss, and why.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import tarfile
from pathlib import Path
from typing import Any, Iterable, Mapping

#: programs OSWorld's tasks run that the desktop image leaves out on purpose, and why (their
#: tasks' setup fails, ``setup_failed``: never graded; a getter's gives the attempt 0)
LEFT_OUT = {
    "code": "VS Code is not in Debian",
    "nautilus": "GNOME's file manager: 73 packages, ~128 MB (GTK 4, libadwaita, gvfs, the "
                "tracker indexer) for tasks that only open a folder in it",
    "timedatectl": "asks systemd-timedated, which needs systemd as the guest's init: "
                   "installing systemd would not answer it"}

#: words a shell runs itself, never a file on PATH (dash's and bash's builtins and keywords
#: that have no program of the same name in Debian's base)
SHELL_WORDS = frozenset({
    "!", "{", "}", "[[", "]]", ":", ".", "alias", "bg", "break", "case", "cd", "continue",
    "declare", "do", "done", "elif", "else", "esac", "eval", "exec", "exit", "export", "fg",
    "fi", "for", "function", "getopts", "hash", "if", "in", "jobs", "let", "local", "read",
    "readonly", "return", "select", "set", "shift", "source", "then", "time", "trap", "type",
    "typeset", "ulimit", "umask", "unalias", "unset", "until", "wait", "while", "history",
    "pushd", "popd", "dirs", "disown", "shopt", "builtin", "logout", "mapfile", "complete"})
#: programs that run the program named after their own options: both count
WRAPPERS = {"sudo": {"-u", "-g", "-p", "-C", "-D", "-h", "-r", "-t", "-U"},
            "timeout": {"-s", "--signal", "-k", "--kill-after"},
            "env": {"-u", "--unset", "-C", "--chdir"}, "nohup": set(),
            "nice": {"-n", "--adjustment"}, "xargs": {"-I", "-n", "-d", "-P", "-L", "-s", "-E"},
            "exec": set(), "command": {"-v", "-V"}, "setsid": set(), "stdbuf": set()}
#: shell words after which a command follows
COMMAND_BEFORE = frozenset({"!", "{", "do", "then", "else", "if", "elif", "while", "until",
                            "time", "exec", "command"})
#: keywords after which a loop's or case's words follow up to the next separator
SKIP_TO_SEPARATOR = frozenset({"for", "case", "select", "function"})
#: shells that run ``-c SCRIPT`` (or, with ``-i`` or nothing, a script on their input)
SHELLS = frozenset({"sh", "bash", "dash", "/bin/sh", "/bin/bash", "/usr/bin/bash"})
#: a task's steps that start programs, by where they are
STEP_TYPES = ("execute", "command", "launch")
GETTER_TYPES = ("vm_command_line", "vm_command_error")
SEPARATORS = frozenset({";", "&&", "||", "|", "&", "(", ")", ";;", "|&", "\n"})
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")
_NAME = re.compile(r"[A-Za-z0-9_./+-]+")
#: subprocess functions whose first argument is the command
SUBPROCESS_CALLS = frozenset({"run", "Popen", "call", "check_call", "check_output", "getoutput",
                              "getstatusoutput", "system", "popen"})


def is_program_word(word: str) -> bool:
    """True for a word that names a program to look for: a bare name or an absolute path,
    not a variable, a relative path or one in a home (the task makes those)."""
    if not word or not _NAME.fullmatch(word) or word.startswith(("./", "../")):
        return False
    return not word[0].isdigit() and not word.startswith("-")


def shell_programs(script: str) -> set[str]:
    """The programs a shell script runs (see the module doc)."""
    found: set[str] = set()
    script = _lift_substitutions(script, found)
    try:
        lexer = shlex.shlex(_mark_newlines(script), posix=True, punctuation_chars=";&|()<>")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        tokens = list(lexer)
    except ValueError:  # an unbalanced quote: the words outside quotes still tell
        tokens = re.split(r"\s+|(?=[;&|()])|(?<=[;&|()])", script)
    _walk(tokens, found)
    return found


def _lift_substitutions(script: str, found: set[str]) -> str:
    """``script`` with every ``$(…)`` and backquoted part replaced by a plain word, their
    programs added to ``found`` (they may sit in double quotes, which shlex keeps whole)."""
    out, i = [], 0
    while i < len(script):
        if script.startswith("$(", i) and not script.startswith("$((", i):
            depth, j = 1, i + 2
            while j < len(script) and depth:
                depth += {"(": 1, ")": -1}.get(script[j], 0)
                j += 1
            found |= shell_programs(script[i + 2:j - 1])
            out.append("SUBST")
            i = j
        elif script[i] == "`":
            j = script.find("`", i + 1)
            j = len(script) if j < 0 else j
            found |= shell_programs(script[i + 1:j])
            out.append("SUBST")
            i = j + 1
        else:
            out.append(script[i])
            i += 1
    return "".join(out)


def _mark_newlines(script: str) -> str:
    """``script`` with the newlines outside quotes made ``;`` (shlex takes them for spaces)."""
    out, quote, escaped = [], "", False
    for char in script:
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "\n":
            char = ";"
        out.append(char)
    return "".join(out)


def _walk(tokens: list[str], found: set[str]) -> None:
    """Add the programs of ``tokens`` (a script's words) to ``found``, command by command."""
    command: list[str] = []
    for token in [*tokens, ";"]:
        if token in SEPARATORS or (token and set(token) <= set(";&|()")):
            _simple_command(command, found)
            command = []
        elif token:
            command.append(token)


def _simple_command(words: list[str], found: set[str]) -> None:
    """Add the program of one simple command (and of the program its wrapper runs)."""
    plain, redirect = [], False
    for word in words:  # redirections and their targets out: ``2>/dev/null``, ``> out``
        if set(word) <= set("<>"):
            redirect = True
        elif redirect:
            redirect = False
        else:
            plain.append(word)
    wrapper = None
    for index, word in enumerate(plain):
        if wrapper is not None:
            options = WRAPPERS[wrapper]
            if word.startswith("-"):
                continue
            if index and plain[index - 1] in options:
                continue  # an option's value: ``sudo -u user``, ``timeout -s KILL``
            if wrapper == "timeout" and re.fullmatch(r"[0-9.]+[smhd]?", word):
                continue
        if _ASSIGNMENT.match(word):
            continue
        if word in SKIP_TO_SEPARATOR:
            return
        if word in COMMAND_BEFORE:
            wrapper = word if word in WRAPPERS else None
            continue  # ``if``, ``then``, ``!``, ``exec``: the command comes after
        if word in SHELL_WORDS or not is_program_word(word):
            return
        found.add(word)
        if word not in WRAPPERS:
            return
        wrapper = word


def argv_programs(argv: list[str]) -> set[str]:
    """The programs an argv runs: its first word, and a shell's ``-c`` script."""
    words = [w for w in argv if isinstance(w, str)]
    if not words:
        return set()
    found = {words[0]} if is_program_word(words[0]) else set()
    if words[0] in SHELLS and "-c" in words[1:-1]:
        found |= shell_programs(words[words.index("-c", 1) + 1])
    elif words[0] in WRAPPERS:
        found |= shell_programs(" ".join(shlex.quote(w) for w in words))
    return found


def command_programs(command: Any, shell: Any = False) -> set[str]:
    """The programs of a step's or getter's ``command`` (an argv, or a script with shell)."""
    if isinstance(command, str):
        return shell_programs(command) if shell or " " in command.strip() else argv_programs([command])
    if isinstance(command, list):
        return argv_programs(command)
    return set()


def _steps(task: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    yield from task.get("config") or []
    yield from (task.get("evaluator") or {}).get("postconfig") or []


def _getters(task: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    evaluator = task.get("evaluator") or {}
    for key in ("result", "expected"):
        value = evaluator.get(key)
        for getter in value if isinstance(value, list) else [value]:
            if isinstance(getter, Mapping):
                yield getter


def task_programs(task: Mapping[str, Any]) -> dict[str, set[str]]:
    """Program -> where the task runs it (its step types, ``getter``)."""
    where: dict[str, set[str]] = {}
    for step in _steps(task):
        if isinstance(step, Mapping) and step.get("type") in STEP_TYPES:
            parameters = step.get("parameters") or {}
            for program in command_programs(parameters.get("command"), parameters.get("shell")):
                where.setdefault(program, set()).add(step["type"])
    for getter in _getters(task):
        if getter.get("type") in GETTER_TYPES:
            for program in command_programs(getter.get("command"), getter.get("shell")):
                where.setdefault(program, set()).add("getter")
    return where


def reference_programs(code: str) -> set[str]:
    """The programs one oracle reference action (pyautogui code) runs through subprocess or
    os.system; nothing for DONE, FAIL, WAIT or code that does not parse."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set()
    found: set[str] = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in SUBPROCESS_CALLS and node.args):
            continue
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        first = _literal(node.args[0])
        shell = node.func.attr in ("system", "popen", "getoutput", "getstatusoutput") or (
            isinstance(keywords.get("shell"), ast.Constant) and keywords["shell"].value is True)
        if isinstance(first, str):
            found |= shell_programs(first) if shell else argv_programs([first])
        elif isinstance(first, list):
            found |= argv_programs(first)
            script = _literal(keywords.get("input"))
            if first and first[0] in SHELLS and isinstance(script, str):
                found |= shell_programs(script)
    return found


def _literal(node: Any) -> Any:
    """The value of a literal argument (a string, a list of strings), else None."""
    if node is None:
        return None
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        if isinstance(node, ast.List):  # a list with a computed item: its literal words
            return [_literal(item) if isinstance(item, ast.Constant) else "" for item in node.elts]
        return None


#: the folders of a guest's PATH (``images.GUEST_PATH``), as a tree's members name them
PATH_FOLDERS = ("usr/local/sbin", "usr/local/bin", "usr/sbin", "usr/bin", "sbin", "bin")


def image_programs(tarball: str | os.PathLike) -> dict[str, str]:
    """What a guest tree (a rootfs tarball, ``images.rootfs_tarball_path``) holds on its
    PATH: each program by its name (the first folder of PATH that has it) and by its path."""
    entries: dict[str, str] = {}
    links: dict[str, str] = {}
    with tarfile.open(tarball) as archive:
        for member in archive:
            name = member.name.removeprefix("./")
            if member.issym() and name in PATH_FOLDERS:  # merged /usr: /bin -> usr/bin
                links[name] = os.path.normpath(os.path.join(os.path.dirname(name), member.linkname))
            elif (member.isfile() or member.issym() or member.islnk()) and os.path.dirname(name) in PATH_FOLDERS:
                entries[name] = "/" + name
    for link, target in links.items():
        for name in [n for n in entries if os.path.dirname(n) == target]:
            entries.setdefault(f"{link}/{os.path.basename(name)}", "/" + name)
    found: dict[str, str] = {"/" + name: path for name, path in entries.items()}
    for folder in reversed(PATH_FOLDERS):  # the first folder of PATH wins
        for name, path in entries.items():
            if os.path.dirname(name) == folder:
                found[os.path.basename(name)] = path
    return found


def guest_shims() -> set[str]:
    """The programs ``guest/shim/bin`` wraps (first on a desktop guest's PATH)."""
    shim_bin = Path(__file__).resolve().parents[2] / "guest" / "shim" / "bin"
    return {path.name for path in shim_bin.iterdir() if path.is_file()}


def locate(program: str, where: Iterable[str], image: Mapping[str, str],
           shims: Iterable[str] = ()) -> str | None:
    """Where a guest finds ``program``: its path in ``image`` (:func:`image_programs`),
    ``shim`` (a guest shim of that name), ``alias X`` (a ``launch`` of an app the guest
    starts as X, ``guest/desktop_routes.APP_ALIASES``), or None: not there."""
    from ...guest.desktop_routes import APP_ALIASES

    if os.path.basename(program) in set(shims):
        return "shim"
    if program in image:
        return image[program]
    alias = APP_ALIASES.get(program)
    if alias and set(where) <= {"launch"} and alias[0] in image:
        return f"alias {alias[0]}"
    return None
