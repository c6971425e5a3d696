"""git as a grading command runs it (./git, see ../agent_grading.py): no program that a repo's
config names runs.

A check that runs ``git status`` in a repo the graded code made reads that repo's
``.git/config``, and git starts programs named there on read-only commands: a
``core.fsmonitor`` hook, the hooks of ``.git/hooks`` or ``core.hooksPath`` (``git status``
writes the index: ``post-index-change``), a ``filter.<driver>`` that ``.gitattributes``
names, a ``diff.<driver>.textconv``, a pager, a credential helper … Any of them could make git
print what the check looks for, or kill git so that it prints nothing (``test -z "$(git
status --porcelain)"`` then passes). So before it runs git:

* the environment names the programs git takes from it before its config: the pager, the
  editors, askpass, the git:// proxy (:data:`ENV`; a check's own values win), and only the
  transports that start no command (``GIT_ALLOW_PROTOCOL``: no ``ext::``, no ssh);
* git reads none of its files in the home's config folder: ``XDG_CONFIG_HOME`` is a folder
  that does not exist (next to this file, read-only), so the answer's ``~/.config/git/ignore``
  (the default ``core.excludesFile``: ``*`` there hides every untracked file from ``git
  status``), ``~/.config/git/attributes`` (the default ``core.attributesFile``) and
  ``~/.config/git/config`` are not read (``~/.gitconfig`` neither: ``GIT_CONFIG_GLOBAL`` is
  ``/dev/null`` in a grading command's environment);
* every key of the repo's config (what it includes too, and ``~/.gitconfig`` when a check
  reads it) that names a program (:data:`NEUTRAL`) is given again on git's command line
  (``GIT_CONFIG_COUNT``, which git reads after every config file) with a value that runs
  nothing of the answer's: ``cat`` for a filter or a textconv, git's own diff and merge for
  a diff or merge driver, the default for the rest; hooks are off (``core.hooksPath`` is
  ``/dev/null``). The same for every submodule's config (``git status`` runs git in each).

What is left is data, which a check reading the repo trusts: what the repo records
(``assume-unchanged``, its excludes (``.git/info/exclude``, ``.gitignore`` files, an excludes
file its config names), ``.git`` files, ``core.worktree``, ``GIT_DIR``) and config
that changes what git reports (``status.showUntrackedFiles``, ``submodule.<name>.ignore``).
Commands whose purpose is to run a configured tool (``difftool``, ``mergetool``, an alias
of the answer's, ``send-email``, ``web--browse``) run it.
"""

import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
#: what git takes from its environment before its config (a check's own values win)
ENV = {"GIT_PAGER": "cat", "GIT_EDITOR": "true", "GIT_SEQUENCE_EDITOR": "true", "GIT_ASKPASS": "",
       "GIT_TERMINAL_PROMPT": "0", "GIT_PROXY_COMMAND": "", "GIT_ALLOW_PROTOCOL": "file:git:http:https",
       "XDG_CONFIG_HOME": os.path.join(HERE, "no-config")}
#: keys set whatever the config says (the hooks are files of the repo, not config), also
#: for the reads of the repo this file makes
ALWAYS = {"core.hookspath": "/dev/null", "core.fsmonitor": "false"}
#: (a config key that names a program, as ``git config --list`` prints it, the value that
#: runs none of the answer's); a key not listed here runs nothing
NEUTRAL = [
    (r"core\.alternaterefscommand", "true"),
    (r"credential\.(.+\.)?helper", ""),  # an empty helper empties the list
    (r"filter\..+\.(clean|smudge)", "cat"),
    (r"filter\..+\.process", ""),  # then clean and smudge, cat, are not used either
    (r"diff\.external|diff\..+\.command", os.path.join(HERE, "git_external_diff")),
    (r"diff\..+\.textconv|interactive\.difffilter", "cat"),
    (r"merge\..+\.driver", "git merge-file --marker-size=%L %A %O %B"),
    (r"remote\..+\.uploadpack", "git-upload-pack"),
    (r"remote\..+\.receivepack", "git-receive-pack"),
    (r"submodule\..+\.update", "checkout"),  # "!command" runs command
    (r"trailer\..+\.(command|cmd)", "true"),
    (r"tar\..+\.command", "gzip -cn"),
    (r"gpg(\.openpgp)?\.program", "gpg"),
    (r"gpg\.x509\.program", "gpgsm"),
    (r"gpg\.ssh\.program", "ssh-keygen"),
    (r"gpg\.ssh\.defaultkeycommand", "true"),
    (r"help\.autocorrect", "0"),  # it runs the command it guessed: an alias of the answer's
]
_NEUTRAL = [(re.compile(pattern + r"\Z", re.S), value) for pattern, value in NEUTRAL]
#: git's global options that take the next argument (``git -C dir status``)
WITH_VALUE = {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--config-env",
              "--attr-source"}
#: those that take their value after an ``=`` (``--git-dir=x``)
EQUALS = {option for option in WITH_VALUE if option.startswith("--")} | {"--exec-path", "--list-cmds"}
#: those that take none and may come before a command
FLAGS = {"-p", "--paginate", "-P", "--no-pager", "--bare", "--no-replace-objects", "--literal-pathspecs",
         "--glob-pathspecs", "--noglob-pathspecs", "--icase-pathspecs", "--no-optional-locks",
         "--no-lazy-fetch"}
#: what makes git look elsewhere than where it runs; a submodule is looked at without them
REPO_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY",
            "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE", "GIT_PREFIX")
#: at most this many repositories (a repo and its submodules) are read; more is refused
MAX_REPOS = 100


class Refused(Exception):
    """git is not run: its config cannot be read (git's own message), or too many submodules."""

    def __init__(self, message: str, code: int = 128) -> None:
        super().__init__(message)
        self.code = code


def global_options(argv: list[str]) -> list[str]:
    """The options of ``argv`` before git's command, which choose the repo it runs on."""
    taken = 0
    while taken < len(argv):
        arg = argv[taken]
        if arg in WITH_VALUE:
            taken += 2
        elif arg in FLAGS or arg.split("=", 1)[0] in EQUALS:
            taken += 1
        else:
            break
    return argv[:min(taken, len(argv))]


def answer_keys(options: list[str], env: dict) -> list[str]:
    """The keys of the repo's config that the answer may have written: every scope but the
    system's and the command line's (what a check gives is its own), includes followed."""
    listing = _git([*options, "config", "--list", "--includes", "--name-only", "--show-scope", "-z"], env)
    if listing.returncode == 129:  # git < 2.26: no scopes; every key is taken as the answer's
        listing = _git([*options, "config", "--list", "--includes", "--name-only", "-z"], env)
        return [key for key in listing.stdout.split("\0") if key] if listing.returncode == 0 \
            else _refuse(listing)
    if listing.returncode != 0:
        _refuse(listing)
    words = listing.stdout.split("\0")
    return [key for scope, key in zip(words[::2], words[1::2]) if scope not in ("system", "command")]


def submodules(options: list[str], env: dict) -> list[str]:
    """The work trees of the repo's submodules that have a git folder (gitlinks of its index)."""
    staged = _git([*options, "ls-files", "--stage", "--full-name", "-z"], env)
    links = [entry.split("\t", 1)[1] for entry in staged.stdout.split("\0")
             if entry.startswith("160000 ")] if staged.returncode == 0 else []
    if not links:
        return []
    top = _git([*options, "rev-parse", "--show-toplevel"], env).stdout.strip()
    return [os.path.join(top, link) for link in links
            if top and os.path.lexists(os.path.join(top, link, ".git"))]


def neutral_config(options: list[str], env: dict) -> dict[str, str]:
    """key -> value, for git's command line: every key naming a program in the config of
    the repo ``options`` choose and of its submodules, set to run none of the answer's."""
    config = dict(ALWAYS)
    pending, seen = [(options, env)], set()
    while pending:
        options, env = pending.pop()
        for key in answer_keys(options, env):
            for pattern, value in _NEUTRAL:
                if pattern.match(key):
                    config[key] = value
                    if key.startswith("filter."):  # else a required filter fails, git with it
                        config[key.rsplit(".", 1)[0] + ".required"] = "false"
        outside = {name: value for name, value in env.items() if name not in REPO_ENV}
        for tree in submodules(options, env):
            real = os.path.realpath(tree)
            if real not in seen:
                seen.add(real)
                pending.append((["-C", tree], outside))
        if len(seen) >= MAX_REPOS:
            raise Refused(f"git: the repo has more than {MAX_REPOS} submodules; a grading command "
                          "reads no more")
    return config


def safe_env(argv: list[str]) -> dict[str, str]:
    """The environment to run ``git *argv`` in: :data:`ENV`, then the repo's program keys set
    again after the check's own ``GIT_CONFIG_COUNT`` entries."""
    env = {**ENV, **os.environ}
    config = neutral_config(global_options(argv), _with_config(env, ALWAYS))
    return _with_config(env, config)


def _with_config(env: dict, config: dict) -> dict:
    env = dict(env)
    count = int(env.get("GIT_CONFIG_COUNT") or 0)
    for index, (key, value) in enumerate(config.items(), count):
        env[f"GIT_CONFIG_KEY_{index}"], env[f"GIT_CONFIG_VALUE_{index}"] = key, value
    env["GIT_CONFIG_COUNT"] = str(count + len(config))
    return env


def _git(argv: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *argv], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, errors="surrogateescape")


def _refuse(listing: subprocess.CompletedProcess):
    raise Refused(listing.stderr.rstrip("\n") or "git: cannot read the repo's config", listing.returncode)


def main(argv: list[str]) -> None:
    """Run git with ``argv`` (the check's) in :func:`safe_env`."""
    try:
        env = safe_env(argv)
    except Refused as refused:
        print(refused, file=sys.stderr)
        sys.exit(refused.code)
    # git is the system's (this PATH, ./git's, has no wrappers); what it starts (an alias's
    # `!cmd`, `git bisect run`, `rebase --exec`) runs with PATH as it was, through the wrappers:
    # it ran the system's jq, which read the graded code's ~/.jq
    program = shutil.which("git", path=env.get("PATH", os.defpath))
    env["PATH"] = env.pop("PR_PATH_AS_IT_WAS", env.get("PATH", os.defpath))
    if program is None:
        os.execvpe("git", ["git", *argv], env)  # not found: the shell's error, as without the wrapper
    os.execve(program, ["git", *argv], env)


if __name__ == "__main__":
    main(sys.argv[1:])
