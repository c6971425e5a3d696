"""What the ``command`` agent (``agents.command``) checks of its program before a run starts,
and how it explains a program that bubblewrap could not start.

``shell_syntax_problem``: --agent-cmd is split into words as a shell would split it but run
without one, so ``|``, ``&&``, ``;``, a redirection (``>``, ``2>/dev/null``, ``<``), a command
substitution (``$(…)``, a backtick) or a leading ``VAR=value`` would reach the program as
arguments (or be taken for the program): such syntax, written unquoted, as a word of its own
or against one (``a.py;``, ``a.py|cat``, ``x>y``: shlex's ``punctuation_chars`` makes each run
of operator characters a token), is refused, with ``sh -c`` or a wrapper script as the way.

``check_program`` (from ``CommandAgent.check_config``, so ``--dry-run`` says it too): the
program must be an executable file or on PATH, and a script's ``#!`` line must name an
interpreter that exists; ``check_script``: a script an interpreter is given (``python3
agent.py``) must exist. A ``#!`` line that ends in a carriage return (a file with Windows
CRLF line ends) is refused as such: the system reads the ``\\r`` as part of the line and
looks for ``/bin/bash\\r``, which bubblewrap reports only once the attempt starts, as
``execvp ./agent.sh: No such file or directory`` of a file that exists. What cannot be
checked so cheaply (an interpreter that is a script itself) is explained when it happens
(``exec_failure_hint``).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil

from ..errors import ConfigError

#: bytes of a program read to find its #! line (the kernel reads at most 256)
_SHEBANG_BYTES = 256
#: words a shell runs itself, which are no program of their own
_SHELL_BUILTINS = frozenset({"cd", "export", "source", ".", "set", "unset", "alias", "exec", "eval", "ulimit",
                             "umask", "pushd", "popd", "if", "for", "while", "until", "case", "{", "(", "!"})
#: the characters of a shell's control operators and redirections (shlex's punctuation_chars)
_PUNCTUATION = frozenset("();<>|&")
#: a first word a shell reads as setting a variable
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
#: programs whose first argument, with no option before it, is the script they run
_INTERPRETER = re.compile(r"(python|pypy|node|nodejs|bash|sh|dash|zsh|ksh|ruby|perl|php|lua|Rscript)[\d.]*")
#: bubblewrap's word when it cannot exec the program
_EXEC_FAILED = re.compile(r"bwrap: execvp (.+?): (No such file or directory|Permission denied)")


def check_program(name: str) -> None:
    """ConfigError when ``name`` (--agent-cmd's first word) cannot be started: not found,
    not executable, or a script whose #! line names an interpreter that does not exist."""
    path = shutil.which(name)
    if path is None:
        raise ConfigError(f"--agent-cmd: {_why_not_found(name)}")
    try:
        with open(path, "rb") as program:
            head = program.read(_SHEBANG_BYTES)
    except OSError:
        return  # unreadable but executable: its start will say
    line = head.split(b"\n", 1)[0]
    if line.startswith(b"#!"):
        problem = _shebang_problem(line[2:], name)
        if problem:
            raise ConfigError(f"--agent-cmd: {name!r} starts with the line "
                              f"{line.decode(errors='replace')!r}, {problem}")


def check_script(words: list[str]) -> None:
    """ConfigError when --agent-cmd runs an interpreter (``python3 agent.py``, ``node``,
    ``bash`` …) on a script, its first argument with no option before it, that does not exist
    from the runner's folder, the agent's too: every attempt would fail as the agent's error,
    graded 0 (exit 0), after a dry run that passed. An option first (``-m``, ``-c``) is not
    looked into."""
    if len(words) < 2 or not _INTERPRETER.fullmatch(os.path.basename(words[0])) or words[1].startswith("-"):
        return
    if not os.path.exists(words[1]):
        where = "" if os.path.isabs(words[1]) else f" (in {os.getcwd()}, the folder the agent starts in)"
        raise ConfigError(f"--agent-cmd: {words[0]!r} would run the script {words[1]!r}, which does not "
                          f"exist{where}; every attempt would fail as the agent's error")


def shell_syntax_problem(command: str) -> str | None:
    """Why ``command`` (--agent-cmd, which shlex splits) needs a shell: the first operator,
    redirection or command substitution of it, written unquoted, that a shell would read as
    its own syntax, whether a word of its own or written against one (``a.py;``, ``x>y``,
    ``a&&b``, ``$(…)``, a backtick); or None."""
    try:
        words = shlex.split(command, posix=False)  # keeps the quotes: a quoted '>' is an argument
    except ValueError:  # non-POSIX quoting knows no backslash: it\'s
        words = shlex.split(command)
    if words and _ASSIGNMENT.match(words[0]):
        return (f"{words[0]!r} sets a variable, as a shell would, but --agent-cmd is not run by a shell: its "
                f"first word is the program; use env (--agent-cmd {'env ' + command!r}), or set the variable "
                "before the run (the agent inherits the runner's environment)")
    # a shell expands $(…) and `…` within "…" too, not within '…'
    substitutions = [("$(" if "$(" in word else "`", "a command substitution") for word in words
                     if not word.startswith("'") and ("$(" in word or "`" in word)]
    operators = [(word, "a redirection" if set(word) & {"<", ">"} else "a shell operator")
                 for word in _tokens(command) if set(word) <= _PUNCTUATION]  # a quoted one keeps its quotes
    for word, what in (*substitutions, *operators):
        if word:
            return (f"{word!r} is {what}, but --agent-cmd is not run by a shell: it is split into words as "
                    f"a shell would, and the words are the program and its arguments ({word!r} would "
                    f"reach the program as an argument); run a shell yourself (--agent-cmd "
                    f"{'sh -c ' + shlex.quote(command)!r}) or put the command line in a script")
    return None


def _tokens(command: str) -> list[str]:
    """``command``'s words with each run of operator characters a token of its own, written
    against a word or not (``a.py;`` is ``a.py`` and ``;``); a quoted word keeps its quotes."""
    for posix in (False, True):  # non-POSIX quoting knows no backslash: it\'s
        lexer = shlex.shlex(command, posix=posix, punctuation_chars=True)
        lexer.whitespace_split = True
        try:
            return list(lexer)
        except ValueError:
            continue
    return []


def exec_failure_hint(stderr_report: str) -> str:
    """Why bubblewrap could not exec the program, when the agent's stderr says it could not
    (``bwrap: execvp PROGRAM: No such file or directory`` of a file that exists), or ""."""
    failed = _EXEC_FAILED.search(stderr_report)
    if failed is None:
        return ""
    program, reason = failed.groups()
    if reason == "Permission denied":
        return (f" (bubblewrap could not start {program}: it, or the interpreter its #! line names, "
                "is not executable)")
    return (f" (bubblewrap could not start {program}: it, or the interpreter its #! line names, does not "
            "exist; a #! line with a Windows (CRLF) line end names '/bin/bash\\r' or the like, which does "
            "not exist; so does an interpreter that is itself a script whose interpreter is missing)")


def _why_not_found(name: str) -> str:
    if os.sep in name and os.path.isdir(name):
        return f"{name!r} is a folder, not an executable file"
    if os.sep in name and os.path.exists(name):
        return (f"{name!r} is not executable: chmod +x {name}, or name its interpreter "
                f"(--agent-cmd 'bash {name}', 'python3 {name}' …)")
    if name in _SHELL_BUILTINS:
        return (f"{name!r} is a shell builtin, not an executable file: --agent-cmd is not run by a shell; "
                "run one yourself (--agent-cmd \"sh -c '…'\") or put the command line in a script")
    if os.path.isfile(name):
        return (f"{name!r} is not on PATH (a program in this folder is named with its path: "
                f"--agent-cmd './{name}')")
    return f"{name!r} is not an executable file (nor a program on PATH)"


def _shebang_problem(line: bytes, name: str) -> str:
    """What is wrong with a #! line (without its "#!"), or "": as the kernel reads it, the
    interpreter is its first word, the rest (spaces and tabs trimmed) one argument."""
    words = re.split(rb"[ \t]+", line.strip(b" \t"), maxsplit=1)
    if not words or not words[0]:
        return "which names no interpreter"
    interpreter = words[0].decode(errors="replace")
    argument = words[1].strip(b" \t").decode(errors="replace") if len(words) > 1 else ""
    if line.endswith(b"\r"):
        looks_for = (f"looks for the interpreter {interpreter!r}, which does not exist"
                     if interpreter.endswith("\r") else f"passes {argument!r} to {interpreter}")
        return (f"which ends in a carriage return (\\r): the file has Windows (CRLF) line ends, and the "
                f"system, reading the \\r as part of the line, {looks_for}; convert the file to Unix line "
                f"ends (dos2unix {name}, or sed -i 's/\\r$//' {name})")
    if not os.path.isfile(interpreter):
        return f"but its interpreter {interpreter!r} does not exist"
    if not os.access(interpreter, os.X_OK):
        return f"but its interpreter {interpreter!r} is not executable"
    program = argument
    if (os.path.basename(interpreter) == "env" and program and not program.startswith("-")
            and "=" not in program and shutil.which(program) is None):
        return f"but {program!r}, which it runs through env, is not on PATH"
    return ""
