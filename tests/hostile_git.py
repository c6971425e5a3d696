"""The answers that make a check's git run their program (the config of the repo they made
names it), and an honest one: rows of tests/test_grading_git.py, and of the hostile table
(tests/hostile_tasks.py: :data:`GIT_ROWS`).
"""

import shutil

#: a repo with a commit and an uncommitted change to f (g: unchanged, touched by the cheats so
#: that git reads it again, through a filter, and rewrites its index)
REPO = ("git init -q ~/repo && cd ~/repo && git config user.email a@b && git config user.name a"
        " && echo a > f && echo g > g && git add f g && git commit -qm init && echo b > f")
#: the answer's program: marks that it ran, kills git (its parent)
PROGRAM = "printf '#!/bin/sh\\ntouch ~/ran\\nkill -9 $PPID\\n' > ~/.x && chmod +x ~/.x && cd ~/repo && touch g"
STATUS = 'cd ~/repo && test -z "$(git status --porcelain)"'
DIFF = 'cd ~/repo && test -z "$(git diff)"'
#: a check that passes the option it relies on and takes git's failure for a failure
STATUS_ALL = 'cd ~/repo && s=$(git status --porcelain --untracked-files=all) && test -z "$s"'
#: the answer's files in the home's git config folder (git's default excludes and attributes)
XDG = "git commit -qam b && mkdir -p ~/.config/git && "
#: the check's git on a terminal, where it pages
PAGED = "cd ~/repo && test -z \"$(python3 -c 'import pty, sys; pty.spawn(sys.argv[1:])' git diff)\""
ATTRIBUTE = "echo '* {}=x' > .git/info/attributes && "
SUBMODULE = ("git init -q sub && cd sub && echo s > s && git add s && git -c user.name=a -c user.email=a@b"
             " commit -qm s && cd .. && git add sub 2>/dev/null && git commit -qm sub && echo t > sub/s"
             " && cd sub && ")

#: row -> (the answer's commands after PROGRAM, the check)
CHEATS = {
    "fsmonitor": ("git config core.fsmonitor ~/.x", STATUS),
    "clean_filter": (ATTRIBUTE.format("filter") + "git config filter.x.clean ~/.x", STATUS),
    "process_filter": (ATTRIBUTE.format("filter") + "git config filter.x.process ~/.x"
                       " && git config filter.x.required true", STATUS),
    "textconv": (ATTRIBUTE.format("diff") + "git config diff.x.textconv ~/.x", DIFF),
    "diff_command": (ATTRIBUTE.format("diff") + "git config diff.x.command ~/.x", DIFF),
    "diff_external": ("git config diff.external ~/.x", DIFF),
    "hooks_path": ("mkdir ~/hooks && cp ~/.x ~/hooks/post-index-change && git config core.hooksPath ~/hooks",
                   STATUS),
    "hook_in_the_repo": ("cp ~/.x .git/hooks/post-index-change", STATUS),
    "pager": ("git config core.pager ~/.x", PAGED),
    "pager_of_the_command": ("git config pager.diff ~/.x", PAGED),
    "include_path": ("printf '[filter \"x\"]\\n\\tclean = %s/.x\\n' \"$HOME\" > ~/inc && git config include.path ~/inc"
                     " && " + ATTRIBUTE.format("filter") + "true", STATUS),
    "include_if": ("printf '[core]\\n\\tfsmonitor = %s/.x\\n' \"$HOME\" > ~/inc"
                   " && git config includeIf.gitdir:~/repo/.path ~/inc", STATUS),
    "submodule_filter": (SUBMODULE + ATTRIBUTE.format("filter") + "git config filter.x.clean ~/.x && touch s",
                         STATUS),
    "user_config": ("git config --global core.fsmonitor ~/.x", "unset GIT_CONFIG_GLOBAL && " + STATUS),
    # no program: the home's ~/.config/git/ignore hides the untracked file, its attributes
    # file makes f's changed line endings no change to git diff
    "xdg_ignore": (XDG + "echo '*' > ~/.config/git/ignore && echo n > new", STATUS_ALL),
    "xdg_attributes": (XDG + "echo '* text' > ~/.config/git/attributes && printf 'b\\r\\n' > f", DIFF),
}



#: rows of the hostile table (tests/hostile_tasks.py): name -> (the answer's commands, the
#: check, whether it can kill the guest agent)
GIT_ROWS = {f"rig_check_git_{row}": ([REPO, f"{PROGRAM} && {CHEATS[row][0]}"], CHEATS[row][1], False)
            for row in ("fsmonitor", "clean_filter", "textconv", "hooks_path", "pager", "include_path",
                        "xdg_ignore")}
#: git by its path (`/usr/bin/git status`) was git without the wrapper, and ran the program the
#: answer's repo config names; every guest we make has the wrappers' front there (pool/providers/grading_fronts.py)
SYSTEM_GIT = shutil.which("git", path="/usr/bin:/bin") or "/usr/bin/git"
GIT_ROWS["rig_check_git_fsmonitor_by_path"] = (GIT_ROWS["rig_check_git_fsmonitor"][0],
                                               STATUS.replace("git status", f"{SYSTEM_GIT} status"), False)
#: git by its path from a check that runs it with an environment of its own (python's env={},
#: bash's `exec -c`) lost PARALLEL_ROLLOUT_GRADING_SINCE, so the front ran the system's git; it
#: finds the grading command by its session now (guest/agent_sessions.py)
ENV_CLEARED = f"python3 -c 'import subprocess; subprocess.run([\"{SYSTEM_GIT}\", \"status\", \"--porcelain\"], env={{}})'"
GIT_ROWS["rig_check_git_fsmonitor_env_cleared"] = (GIT_ROWS["rig_check_git_fsmonitor"][0],
                                                   STATUS.replace("git status --porcelain", ENV_CLEARED), False)
GIT_ROWS["rig_check_git_fsmonitor_exec_c"] = (GIT_ROWS["rig_check_git_fsmonitor"][0],
                                              STATUS.replace("git status --porcelain",
                                                             f"bash -c 'exec -c {SYSTEM_GIT} status --porcelain'"), False)
#: git by its name from bash's `exec -c` (no environment, the wrappers' git found on bash's own PATH): a
#: guard, the wrapper's dash has its default PATH then
GIT_ROWS["rig_check_git_fsmonitor_exec_c_by_name"] = (GIT_ROWS["rig_check_git_fsmonitor"][0],
                                                      STATUS.replace("git status --porcelain",
                                                                     "bash -c 'exec -c git status --porcelain'"), False)
#: a check's PATH of the wrappers' folder alone (a grading command's first entry): the git wrapper took
#: it off and left `/opt/system-originals:`, whose empty entry is the current folder, and ran the
#: answer's ./python3 of its repo in place of the system's (exit 0: an empty `git status`), or none (127)
ONLY_THE_WRAPPERS = "PATH=${PATH%%:*} "
GIT_ROWS["rig_check_git_python3_in_the_repo"] = ([REPO, "cd ~/repo && printf '#!/bin/sh\\nexit 0\\n' > python3 && chmod +x python3"],
                                                 f'cd ~/repo && s=$({ONLY_THE_WRAPPERS}git status --porcelain) && test -z "$s"', False)
#: the honest answer's status, git by its path with an empty environment: its exit code and output
HONEST_ENV_CLEARED = ("cd ~/repo && python3 -c 'import subprocess, sys; r = subprocess.run("
                      f"[\"{SYSTEM_GIT}\", \"status\", \"--porcelain\"], env={{}}, capture_output=True);"
                      " sys.exit(r.returncode or len(r.stdout))'")
#: an honest answer to them: it commits the change (its repo's program is still there, unused)
HONEST_GIT = ([REPO, f"{PROGRAM} && git commit -qam done && git config core.fsmonitor ~/.x"],
              f"{STATUS} && {STATUS.replace('git status', f'{SYSTEM_GIT} status')} && {HONEST_ENV_CLEARED}"
              # by its name with no environment, and from a PATH of the wrappers' folder alone
              f" && {GIT_ROWS['rig_check_git_fsmonitor_exec_c_by_name'][1]}"
              f" && {GIT_ROWS['rig_check_git_python3_in_the_repo'][1]}"
              " && test ! -e ~/ran")
