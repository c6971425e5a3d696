"""A check's git runs no program that the config of a repo the answer made names.

Each row is an answer that leaves a repo with an uncommitted change and makes git run its
program (``~/.x``: it marks ``~/ran`` and kills git, so that ``test -z "$(git status
--porcelain)"`` sees nothing); the check then runs as a grading command
(``agent_commands.run(..., isolated=True)``: the ``git`` of ``grading_bin`` first on its
PATH). Every cheat must fail without ``~/ran``, the honest answer pass. Run on the host, in
a home of the test's own; the rows (tests/hostile_git.py) are also rows of the hostile table,
run through a pool (tests/test_hostile_answers.py).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import assert_exactly_once, write_tasks
from parallel_rollout.cli import main
from parallel_rollout.guest import agent_commands, agent_grading

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

sys.path.insert(0, agent_grading.GRADING_BIN)
import git_no_programs  # noqa: E402  (a file of the guest's grading_bin, not a package)
from hostile_git import (ATTRIBUTE, CHEATS, DIFF, GIT_ROWS, ONLY_THE_WRAPPERS, PAGED, PROGRAM,  # noqa: E402
                         REPO, STATUS, STATUS_ALL)


def _home(tmp_path: Path, monkeypatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))  # the answer's own git
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)  # git's config folder: ~/.config
    return home


def _answer(*commands: str) -> None:
    for command in commands:
        result = agent_commands.run(command, shell=True, timeout=60)
        assert result["returncode"] == 0, (command, result)


def _check(check: str) -> dict:
    return agent_commands.run(check, shell=True, timeout=60, isolated=True)


@pytest.mark.parametrize("row", list(CHEATS))
def test_a_cheat_through_the_repos_config_fails_and_runs_nothing(tmp_path, monkeypatch, row):
    home = _home(tmp_path, monkeypatch)
    commands, check = CHEATS[row]
    _answer(REPO, f"{PROGRAM} && {commands}")
    result = _check(check)
    assert result["returncode"] != 0, result
    assert not (home / "ran").exists(), f"the answer's program ran: {result}"


@pytest.mark.parametrize("check", [STATUS, DIFF, PAGED])
def test_an_honest_answer_still_passes(tmp_path, monkeypatch, check):
    home = _home(tmp_path, monkeypatch)
    _answer(REPO, f"{PROGRAM} && git commit -qam done")
    assert _check(check)["returncode"] == 0
    # and git shows what it would without the wrapper, driver or not
    _answer(f"cd ~/repo && echo c > f && {ATTRIBUTE.format('diff')}git config diff.x.command ~/.x"
            " && git config filter.y.clean ~/.x")
    shown = _check("cd ~/repo && git diff && git -C ~/repo -c core.abbrev=12 log --oneline")
    assert shown["returncode"] == 0 and "-a\n+c" not in shown["output"], shown
    assert "\n-b\n+c\n" in shown["output"], shown  # git's own diff, through the driver's place
    assert re.search(r"^[0-9a-f]{12} done$", shown["output"], re.M), shown  # the check's -C and -c
    assert not (home / "ran").exists()


def test_every_key_that_names_a_program_is_set_again(tmp_path, monkeypatch):
    """What the wrapper gives git for a config naming a program in every key it knows (the
    rows above run a few): each key set again, after the check's own, with no ~ in it."""
    _home(tmp_path, monkeypatch)
    keys = {"core.fsmonitor": "x", "core.alternateRefsCommand": "x", "credential.helper": "x",
            "credential.https://h.helper": "x", "filter.a.smudge": "x", "filter.a.process": "x",
            "diff.b.textconv": "x", "interactive.diffFilter": "x", "merge.c.driver": "x",
            "remote.d.uploadpack": "x", "remote.d.receivepack": "x", "submodule.e.update": "!x",
            "trailer.f.command": "x", "tar.g.command": "x", "gpg.program": "x", "gpg.x509.program": "x",
            "gpg.ssh.program": "x", "gpg.ssh.defaultKeyCommand": "x", "help.autocorrect": "1",
            "user.name": "kept"}
    _answer(REPO, *(f"git -C ~/repo config '{key}' '{value}'" for key, value in keys.items()))
    monkeypatch.chdir(Path(os.environ["HOME"]) / "repo")
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "the.checks")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "own")
    env = git_no_programs.safe_env(["-c", "user.email=c@d", "status"])
    given = {env[f"GIT_CONFIG_KEY_{i}"]: env[f"GIT_CONFIG_VALUE_{i}"] for i in range(int(env["GIT_CONFIG_COUNT"]))}
    assert list(given)[0] == "the.checks"
    for key in keys:
        if key != "user.name":
            assert given[key.lower() if "://" not in key else key] != keys[key], key
    assert "user.name" not in given and given["core.hookspath"] == "/dev/null"
    assert given["filter.a.required"] == "false"
    assert env["GIT_PAGER"] == "cat" and env["GIT_ALLOW_PROTOCOL"] == "file:git:http:https"


@pytest.mark.parametrize("argv, options", [
    (["status"], []),
    (["-C", "r", "-c", "a.b=c", "--git-dir=g", "--no-pager", "log", "-C"], ["-C", "r", "-c", "a.b=c",
                                                                           "--git-dir=g", "--no-pager"]),
    (["--work-tree", "w", "--bare", "diff"], ["--work-tree", "w", "--bare"]),
    (["--version"], []),
    (["-C"], ["-C"]),
])
def test_the_options_that_choose_the_repo(argv, options):
    assert git_no_programs.global_options(argv) == options


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_the_homes_git_files_do_not_pass_a_check_through_the_cli(tmp_path):
    """A run of the process provider, as a user starts it: an answer that makes git ignore
    every file (``~/.config/git/ignore``) or read its attributes from the home fails the check
    it would have passed; the same repo answered honestly passes."""
    setup = ("git init -q ~/repo && cd ~/repo && git config user.email a@b && git config user.name a"
             " && echo a > f && git add f && git commit -qm init && echo n > new")
    tasks = [{"id": "ignore", "reference": ["mkdir -p ~/.config/git && echo '*' > ~/.config/git/ignore"]},
             {"id": "attributes", "check": "cd ~/repo && git check-attr -a f | grep -q .",
              "reference": ["mkdir -p ~/.config/git && echo 'f diff=x' > ~/.config/git/attributes"]},
             {"id": "honest", "reference": ["cd ~/repo && git add new && git commit -qm new"]}]
    data = write_tasks(tmp_path / "git.jsonl", [
        {"mode": "shell", "instruction": "Commit ~/repo/new so that the work tree is clean.", "setup": [setup],
         "check": STATUS_ALL, **task} for task in tasks])
    result = CliRunner().invoke(main, ["--mode", "shell", "--data", str(data), "--agent", "oracle",
                                       "--num-rollouts", "1", "--num-vms", "1", "--use-vm-pool",
                                       "--output-dir", str(tmp_path / "out"), "--run-id", "git", "--no-progress"])
    assert result.exit_code == 0, (result.output[-3000:], result.exception)
    finals = assert_exactly_once(tmp_path / "out" / "git", {"ignore#0", "attributes#0", "honest#0"})
    assert {key: (r["status"], r["reward"]) for key, r in finals.items()} == {
        "ignore#0": ("failure", 0.0), "attributes#0": ("failure", 0.0), "honest#0": ("success", 1.0)}


def test_a_check_that_puts_a_folder_before_the_wrappers_still_runs_through_them(tmp_path, monkeypatch):
    """A check that puts a folder of its own first on PATH (``export PATH=~/bin:$PATH``,
    ``PATH=./node_modules/.bin:$PATH``) runs the programs the wrappers wrap, through them:
    each exited 127 ('must come first on PATH'), so an honest answer failed its check, and a
    wrong one passed ``test -z "$(git status --porcelain)"``, which saw no output."""
    home = _home(tmp_path, monkeypatch)
    _answer(REPO, f"{PROGRAM} && git commit -qam done")
    first = 'export PATH="$HOME/bin:/usr/games:$PATH"; '
    assert _check(first + STATUS_ALL)["returncode"] == 0
    assert _check(first + "echo 2 > ~/n && curl -s file://$HOME/n | grep -qx 2")["returncode"] == 0
    _answer("cd ~/repo && echo c > f")  # a change left: the answer is wrong
    assert _check(first + STATUS)["returncode"] != 0
    _answer("cd ~/repo && git config core.fsmonitor ~/.x")  # and the wrapper still acts
    result = _check(first + STATUS)
    assert result["returncode"] != 0 and not (home / "ran").exists(), result


def test_a_path_of_the_wrappers_folder_alone_still_runs_the_systems_git(tmp_path, monkeypatch):
    """A check whose PATH is the wrappers' folder alone (or ``.`` in it) ran git's wrapper, which
    takes its folder off PATH: none was left (``/opt/system-originals:`` in a guest, whose empty
    entry is the current folder), so it ran no python3 (127: an honest answer failed its check), or
    the answer's ./python3 of its repo, whose exit 0 was an empty ``git status``: a wrong answer
    passed. And bash's ``exec -c git`` (no environment at all) runs the wrapper still."""
    home = _home(tmp_path, monkeypatch)
    _answer(REPO, f"{PROGRAM} && git commit -qam done && git config core.fsmonitor ~/.x")
    by_name = GIT_ROWS["rig_check_git_fsmonitor_exec_c_by_name"][1]
    rigged, only_the_wrappers, _ = GIT_ROWS["rig_check_git_python3_in_the_repo"]
    for check in (by_name, only_the_wrappers):
        assert _check(check)["returncode"] == 0, check
    shown = _check('cd "${PATH%%:*}" && PATH=. git -C "$HOME/repo" log -1 --oneline')
    assert shown["returncode"] == 0 and shown["output"].strip().endswith("done"), shown
    _answer(rigged[1], "cd ~/repo && echo c > f")  # the answer's python3 in its repo, a change left
    result = _check(only_the_wrappers)
    assert result["returncode"] != 0, result
    assert ONLY_THE_WRAPPERS in only_the_wrappers and not (home / "ran").exists(), result
