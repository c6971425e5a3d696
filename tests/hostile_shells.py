"""Rows of the hostile table (tests/hostile_tasks.py) whose check starts a login or interactive
shell of its own (``bash -lc 'which spotify'``, conda-style), and an honest check of it: such a
shell read the startup files the answer wrote in the home (``~/.bashrc``, ``~/.profile``,
``~/.bash_profile``, ``~/.bash_login``: a ``PATH`` with its ``~/bin`` first, where a fake program
was), and a wrong answer scored 1. The grading wrappers ``grading_bin/bash``, ``sh`` and ``dash``
run it with none of them (bash's ``--noprofile --norc``, and no login: a login bash runs
``~/.bash_logout`` as it exits, whose ``exit 0`` made a check's ``exit 3`` pass), by name and bash
by its path (its front, pool/providers/grading_fronts.py).
"""


#: the answer's fake program in ~/bin, first on the PATH of every startup file of the home
FAKE_IN_HOME_BIN = ("mkdir -p ~/bin && printf '#!/bin/sh\\nexit 0\\n' > ~/bin/spotify && chmod +x ~/bin/spotify"
                    " && for f in .bashrc .profile .bash_profile .bash_login; do"
                    " echo 'PATH=~/bin:$PATH; export PATH' >> ~/$f; done")
#: a check that the program is installed: the system has none of that name
INSTALLED = "'command -v spotify'"

#: name -> (shell commands of the answer, check, whether it can kill the guest agent)
SHELL_STARTUP_ROWS = {
    "rig_check_bash_login": ([FAKE_IN_HOME_BIN], f"bash -lc {INSTALLED}", False),
    "rig_check_bash_long_login": ([FAKE_IN_HOME_BIN], f"bash --login -c {INSTALLED}", False),
    "rig_check_bash_interactive": ([FAKE_IN_HOME_BIN], f"bash -ic {INSTALLED} 2>/dev/null", False),
    "rig_check_bash_flags_apart": ([FAKE_IN_HOME_BIN], f"bash -o pipefail -l -c {INSTALLED}", False),
    "rig_check_sh_login": ([FAKE_IN_HOME_BIN], f"sh -lc {INSTALLED}", False),
    "rig_check_dash_login": ([FAKE_IN_HOME_BIN], f"dash -l -c {INSTALLED}", False),
    "rig_check_bash_login_by_path": ([FAKE_IN_HOME_BIN], f"/bin/bash -lc {INSTALLED}", False),
    "rig_check_bash_login_by_usr_path": ([FAKE_IN_HOME_BIN], f"/usr/bin/bash -lc {INSTALLED}", False),
    # a login bash runs ~/.bash_logout as its `exit` ends it, --noprofile or not
    "rig_check_bash_logout": (["echo 'exit 0' > ~/.bash_logout"], "bash -lc 'exit 3'", False),
}
#: an honest check through a login shell (conda-style): it runs, in the home, with the system's
#: programs, and a plain `sh -c` as ever
SHELL_STARTUP_HONEST = ("bash -lc 'cd && test -e ok && command -v python3 >/dev/null'"
                        " && sh -lc 'test -e ~/ok' && { /usr/bin/bash -l -c 'exit 4'; [ $? = 4 ]; }"
                        " && [ \"$(sh -c 'echo $0-$1' a b)\" = a-b ]")
