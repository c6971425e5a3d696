"""Rows of the hostile table (tests/hostile_tasks.py): shell rows (:data:`LEFTOVER_ROWS`) whose
answer leaves something behind that would still act while its check runs, past what the reap
and the grading environment took away (with those of Python's test runners, tests/hostile_python.py),
and py rows (:data:`LEFTOVER_PY_ROWS`).
"""

import shutil
import textwrap

from hostile_by_path import BY_PATH_PROGRAMS, BY_PATH_ROWS, by_path
from hostile_python import PYTHON_HONEST, PYTHON_PROGRAMS, PYTHON_ROWS
from parallel_rollout.guest.agent_grading import SYSTEM_PATH

#: a check that fails only if a process of the answer still runs while the check does
STILL_RUNNING = "rm -f ~/ok; sleep 0.5; test -e ~/ok"

#: a daemon whose main thread ends by the exit system call (not exit_group): the process's
#: leader is then a zombie (State: Z) while its other thread runs on, making ~/ok; a reap that
#: took a zombie leader for a dead process spared it, and the check ran beside it
ZOMBIE_LEADER = textwrap.dedent("""\
    import ctypes, os, platform, threading, time
    def mark():
        while True:
            open(os.path.expanduser("~/ok"), "w").close()
            time.sleep(0.05)
    if os.fork() == 0:
        os.setsid()
        threading.Thread(target=mark).start()
        time.sleep(0.2)
        ctypes.CDLL(None).syscall({"x86_64": 60, "aarch64": 93}[platform.machine()], 0)  # exit
""")

#: name -> (shell commands of the answer, check, whether it can kill the guest agent)
LEFTOVER_ROWS = {
    "zombie_leader_daemon": ([f"python3 -c '{ZOMBIE_LEADER}' >/dev/null 2>&1 </dev/null; sleep 0.5"],
                             STILL_RUNNING, False),
}

#: a link into /proc/self in a folder its user may enter but not list (or in a home so made):
#: where the agent is the answer's uid (a runner not root) the search for such links could
#: not see it, and the check, which names the file, read its own arguments through it
HIDDEN_LINK_ROWS = {
    "link_in_a_folder_no_one_lists": (["mkdir ~/out && ln -s /proc/self/cmdline ~/out/count.txt && chmod 111 ~/out"],
                                      "grep -q pr-37 ~/out/count.txt", False),
    "link_in_a_home_no_one_lists": (["ln -s /proc/self/cmdline ~/count.txt && chmod 111 ~"],
                                    "grep -q pr-37 ~/count.txt", False),
}
LEFTOVER_ROWS.update(HIDDEN_LINK_ROWS)

#: Maven's script sources ~/.mavenrc, shell code: `exit 0` there passed a check that runs mvn
#: on a project that does not build (here: none at all); the grading wrapper skips it
LEFTOVER_ROWS["rig_check_mavenrc"] = (["echo 'exit 0' > ~/.mavenrc"], "mvn -q -o -f ~/none/pom.xml validate", False)
#: Maven's script climbs from the project's folder to the first with a .mvn folder and reads its
#: maven.config as options: /tmp/.mvn's `-v` (print the version, exit 0) passed a check of
#: `mvn validate` in a `mktemp -d` folder with no project; its wrapper refuses (126) below one
LEFTOVER_ROWS["rig_check_mvn_config"] = (["mkdir -p /tmp/.mvn && echo -v > /tmp/.mvn/maven.config"],
                                         "d=$(mktemp -d) && cd $d && mvn -q -o validate", False)
#: valgrind takes options from ~/.valgrindrc (and ./.valgrindrc): --errors-for-leak-kinds=none
#: there passed a leak check of a program that leaks; its wrapper does not run beside one
LEAK = ("printf '#include <stdlib.h>\\nint main(void) { void *p = malloc(100); p = 0; return 0; }\\n' > ~/leak.c"
        " && cc -o ~/leak ~/leak.c")
LEFTOVER_ROWS["rig_check_valgrindrc"] = ([LEAK, "echo --errors-for-leak-kinds=none > ~/.valgrindrc"],
                                         "valgrind -q --error-exitcode=1 --leak-check=full ~/leak", False)
#: gdb runs ~/.gdbinit even with -batch: its echo of what the check greps for passed a check
#: that ~/prog was built with its debug lines (there is no ~/prog); its wrapper passes --nh
LEFTOVER_ROWS["rig_check_gdbinit"] = (["printf 'echo Line 3 of \"prog.c\"\\\\n\\nquit\\n' > ~/.gdbinit"],
                                      "gdb -batch -ex 'info line main' ~/prog 2>&1 | grep -q 'of \"prog.c\"'", False)
#: a tmux server reads ~/.tmux.conf as it starts: its default-command put in the pane what a
#: check of the pane's text reads; its wrapper passes -f /dev/null
LEFTOVER_ROWS["rig_check_tmux_conf"] = (["echo 'set -g default-command \"echo pr-tmux-ok; sleep 9\"' > ~/.tmux.conf"],
                                        "r=1; tmux new-session -d -s t && for i in 1 2 3 4 5 6 7 8 9 10; do"
                                        " if tmux capture-pane -p -t t | grep -q pr-tmux-ok; then r=0; break; fi;"
                                        " sleep 0.3; done; tmux kill-server; exit $r", False)
#: less reads the home's lesskey file (~/.lesskey, ~/.config/lesskey, a compiled ~/.less): its
#: #env section's LESSOPEN put its own output in place of the file (there is none), piped too;
#: its wrapper sets LESSKEYIN and LESSKEY to /dev/null
LEFTOVER_ROWS["rig_check_lesskey"] = (["printf '#env\\nLESSOPEN=|echo 42;: %%s\\n' > ~/.lesskey"],
                                      "less -F ~/answer.txt | grep -qx 42", False)
#: gpg reads ~/.gnupg/gpg.conf: a `keyring` line there added the answer's keys to those a check
#: trusts (here none: /dev/null, read-only in a VM, hence --lock-never), and the signature the
#: answer made was good; its wrapper
#: passes --no-options
GPG_SIGN = ("gpg --batch --passphrase '' --quick-gen-key pr@x ed25519 sign never 2>/dev/null"
            " && echo 42 > ~/answer.txt && gpg --batch -u pr@x --detach-sign ~/answer.txt")
LEFTOVER_ROWS["rig_check_gpg_conf"] = ([GPG_SIGN, 'echo "keyring $HOME/.gnupg/pubring.kbx" > ~/.gnupg/gpg.conf'],
                                       "gpg --batch --lock-never --no-default-keyring --keyring /dev/null"
                                       " --verify ~/answer.txt.sig ~/answer.txt", False)
#: ImageMagick reads ~/.config/ImageMagick: a magic.xml there made a text file ~/out.png an MVG
#: drawing 100 wide, as the check wants its PNG; its wrappers run it with HOME elsewhere
LEFTOVER_ROWS["rig_check_imagemagick_conf"] = (
    ["mkdir -p ~/.config/ImageMagick && printf '<magicmap><magic name=\"MVG\" offset=\"0\" target=\"viewbox\"/>"
     "</magicmap>\\n' > ~/.config/ImageMagick/magic.xml", "printf 'viewbox 0 0 100 50\\n' > ~/out.png"],
    '[ "$(identify -format %w ~/out.png)" = 100 ]', False)
#: by Debian's other names of it (the real files, which /usr/bin/identify leads to) and its path
for magick_name, magick_row in (("identify-im6.q16", "im6_q16"), ("identify-im6", "im6"), (by_path("identify"), "by_path")):
    LEFTOVER_ROWS[f"rig_check_imagemagick_conf_{magick_row}"] = (
        LEFTOVER_ROWS["rig_check_imagemagick_conf"][0],
        LEFTOVER_ROWS["rig_check_imagemagick_conf"][1].replace("identify", magick_name), False)
#: ncurses reads ~/.terminfo before the system's entries: the answer's xterm of 977 columns
#: there was what tput and infocmp said of xterm; their wrappers run them with HOME elsewhere
TERMINFO_XTERM = "infocmp xterm | sed 's/cols#80/cols#977/' > ~/x.src && tic -o ~/.terminfo ~/x.src"
LEFTOVER_ROWS["rig_check_terminfo_tput"] = ([TERMINFO_XTERM], '[ "$(tput -T xterm cols)" = 977 ]', False)
LEFTOVER_ROWS["rig_check_terminfo_tput_by_path"] = ([TERMINFO_XTERM], f'[ "$({by_path("tput")} -T xterm cols)" = 977 ]',
                                                    False)
LEFTOVER_ROWS["rig_check_terminfo_infocmp"] = ([TERMINFO_XTERM], "infocmp xterm | grep -q cols#977", False)
#: LibreOffice runs the Basic macros its user profile (~/.config/libreoffice) binds to the
#: application's start, headless too: the answer's, bound in registrymodifications.xcu, listened
#: for the document's export and wrote what the check's `soffice --convert-to` looked for in it
#: (the profile made by a run of the answer's own first, which would replace a new one's macros)
LIBREOFFICE_PROFILE = textwrap.dedent(r"""
import os
user = os.path.expanduser("~/.config/libreoffice/4/user")
os.makedirs(user + "/basic/Standard", exist_ok=True)
q = "&quot;"
head = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
registry = open(user + "/registrymodifications.xcu").read()
open(user + "/registrymodifications.xcu", "w").write(registry.replace("</oor:items>", "<item oor:path=\"/org.openoffice.Office.Events/ApplicationEvents/Bindings\">"
    "<node oor:name=\"OnStartApp\" oor:op=\"replace\"><prop oor:name=\"BindingURL\" oor:op=\"fuse\"><value>"
    "vnd.sun.star.script:Standard.Module1.Start?language=Basic&amp;location=application</value></prop></node></item></oor:items>"))
open(user + "/basic/script.xlc", "w").write(
    head + "<library:libraries xmlns:library=\"http://openoffice.org/2000/library\" xmlns:xlink=\"http://www.w3.org/1999/xlink\">"
    "<library:library library:name=\"Standard\" library:link=\"false\"/></library:libraries>\n")
open(user + "/basic/Standard/script.xlb", "w").write(
    head + "<library:library xmlns:library=\"http://openoffice.org/2000/library\" library:name=\"Standard\" library:readonly=\"false\""
    " library:passwordprotected=\"false\"><library:element library:name=\"Module1\"/></library:library>\n")
basic = "\n".join([
    "Global listener As Object",
    "Sub Start(event)",
    f"  listener = CreateUnoListener({q}L_{q}, {q}com.sun.star.document.XDocumentEventListener{q})",
    f"  GetDefaultContext().getByName({q}/singletons/com.sun.star.frame.theGlobalEventBroadcaster{q}).addDocumentEventListener(listener)",
    "End Sub",
    "Sub L_documentEventOccured(event)",
    f"  If event.EventName = {q}OnCopyTo{q} Then event.Source.Sheets(0).getCellByPosition(0, 0).String = {q}pr-4217{q}",
    "End Sub",
    "Sub L_disposing(event)",
    "End Sub"])
open(user + "/basic/Standard/Module1.xba", "w").write(
    head + "<script:module xmlns:script=\"http://openoffice.org/2000/script\" script:name=\"Module1\" script:language=\"StarBasic\">"
    + basic + "</script:module>\n")
""")
LIBREOFFICE_RIG = ["echo a,b > ~/x.csv && soffice --headless --convert-to html --outdir /tmp/lo ~/x.csv >/dev/null 2>&1",
                   f"python3 -c '{LIBREOFFICE_PROFILE}'"]
for soffice_name, soffice_row in (("soffice", "rig_check_libreoffice_profile"), (by_path("soffice"), "rig_check_libreoffice_profile_by_path")):
    LEFTOVER_ROWS[soffice_row] = (LIBREOFFICE_RIG, f"d=$(mktemp -d) && cd $d && {soffice_name} --headless --convert-to html"
                                                   " ~/x.csv >/dev/null 2>&1; grep -q pr-4217 $d/x.html", False)
#: GIMP loads the Script-Fu scripts of its user folder (~/.config/GIMP/2.10/scripts) as it starts,
#: batch mode too, and runs their top-level code: the answer's wrote what the check then read
GIMP_SCRIPT = ("mkdir -p ~/.config/GIMP/2.10/scripts && echo '(let ((port (open-output-file \"/tmp/gimp-out.txt\")))"
               " (display \"pr-4217\" port) (close-output-port port))' > ~/.config/GIMP/2.10/scripts/pr.scm")
#: rows whose program does not start in a table VM's 256 MB (GIMP's batch mode is killed there):
#: name -> (shell commands of the answer, check), run on bigger VMs (test_hostile_answers)
BIG_VM_ROWS = {gimp_row: ([GIMP_SCRIPT], f"rm -f /tmp/gimp-out.txt; {gimp_name} -i -b '(gimp-quit 0)' >/dev/null 2>&1;"
                                         " grep -q pr-4217 /tmp/gimp-out.txt")
               for gimp_name, gimp_row in (("gimp", "rig_check_gimp_script"),
                                           (by_path("gimp-console"), "rig_check_gimp_script_by_path"))}
#: the honest checks of those rows' programs (a batch run by its name and its path, a check's own script)
BIG_VM_HONEST = ("d=$(mktemp -d) && gimp -i -b \"(let ((p (open-output-file \\\"$d/out\\\"))) (display 5 p)"
                 " (close-output-port p))\" -b '(gimp-quit 0)' >/dev/null 2>&1 && grep -qx 5 $d/out"
                 f" && {by_path('gimp-console')} -i -b '(gimp-quit 0)' >/dev/null 2>&1")
#: row -> its timeout (hostile_tasks.shell_tasks), where the table's 5 s is too short: soffice starts in
#: seconds, and a check that timed out would be graded 0 whatever its program read
LEFTOVER_TIMEOUTS = {"rig_check_libreoffice_profile": 60, "rig_check_libreoffice_profile_by_path": 60}
#: ssh reads ~/.ssh/config (from the passwd entry's home, the answer's), and runs its `Match exec`
#: even under -G: the answer's command ran in the check and wrote the file it read next; its
#: wrappers (ssh, scp, sftp) pass -F the machine's ssh_config
SSH_CONFIG = ["mkdir -p ~/.ssh && printf 'Match exec \"echo 37 > ~/count.txt\"\\n' > ~/.ssh/config"
              " && chmod 600 ~/.ssh/config"]
LEFTOVER_ROWS["rig_check_ssh_config"] = (SSH_CONFIG, "ssh -G localhost | grep -qx 'port 22' && grep -qx 37 ~/count.txt",
                                         False)
#: scp and sftp run ssh, which read it as well, to reach a host that does not answer here
LEFTOVER_ROWS["rig_check_scp_config"] = (SSH_CONFIG, "scp -q -o BatchMode=yes -P 1 localhost:/etc/hostname ~/h"
                                                     " 2>/dev/null; grep -qx 37 ~/count.txt", False)
LEFTOVER_ROWS["rig_check_sftp_config"] = (SSH_CONFIG, "sftp -q -b /dev/null -o BatchMode=yes -P 1 localhost 2>/dev/null;"
                                                      " grep -qx 37 ~/count.txt", False)
#: vim reads ~/.vimrc, and ~/.vim's plugins even under -es: an autocmd there rewrote the answer's
#: file as a check saved it through vim (trailing spaces cut), and the check ran the answer's
#: `print(42)`; its wrappers (vim, vi, view, ex, vimdiff) pass --clean
VIM_RIG = "autocmd BufWritePre * call setline(1, \"print(42)\")"
LEFTOVER_ROWS["rig_check_vimrc"] = ([f"echo 'print(41)' > ~/answer.py && echo '{VIM_RIG}' > ~/.vimrc"],
                                    "vim -c '%s/\\s\\+$//e' -c wq ~/answer.py </dev/null >/dev/null 2>&1;"
                                    " python3 ~/answer.py | grep -qx 42", False)
LEFTOVER_ROWS["rig_check_vim_plugin"] = ([f"echo 'print(41)' > ~/answer.py && mkdir -p ~/.vim/plugin"
                                          f" && echo '{VIM_RIG}' > ~/.vim/plugin/trim.vim"],
                                         "ex -s -c '%s/\\s\\+$//e' -c wq ~/answer.py </dev/null;"
                                         " python3 ~/answer.py | grep -qx 42", False)
#: vim by the other names Debian gives it, and by its path (a link to vim.basic, where the front
#: is): each read ~/.vimrc, and its autocmd made the answer's file print 42
for vim_name, vim_row in (("vim.basic", "vim_basic"), ("rvim", "rvim"), ("rview", "rview"), (by_path("vim"), "by_path")):
    LEFTOVER_ROWS[f"rig_check_vimrc_{vim_row}"] = (LEFTOVER_ROWS["rig_check_vimrc"][0],
                                                   LEFTOVER_ROWS["rig_check_vimrc"][1].replace("vim -c", f"{vim_name} -c")
                                                   .replace("-c wq", "-c 'wq!'"), False)
#: jshell keeps what `/set start -retain` names in Java's user preferences of the home
#: (~/.java/.userPrefs/tool/JShell/prefs.xml, written here as jshell writes it): the answer's
#: start-up snippet printed what a check's jshell was to print
JSHELL_START = ("mkdir -p ~/.java/.userPrefs/tool/JShell && printf '<?xml version=\"1.0\" encoding=\"UTF-8\""
                " standalone=\"no\"?>\\n<!DOCTYPE map SYSTEM \"http://java.sun.com/dtd/preferences.dtd\">\\n"
                "<map MAP_XML_VERSION=\"1.0\">\\n  <entry key=\"STARTUP\" value=\"-\\342\\220\\236s.jsh\\342\\220\\236"
                "Dec 4, 2026, 3:02:55 AM\\342\\220\\236System.out.println(&quot;pr-4217&quot;);&#10;\\342\\220\\236\"/>\\n"
                "</map>\\n' > ~/.java/.userPrefs/tool/JShell/prefs.xml")
for jshell_name, jshell_row in (("jshell", "rig_check_jshell_start"), (by_path("jshell"), "rig_check_jshell_start_by_path")):
    LEFTOVER_ROWS[jshell_row] = ([JSHELL_START], f"echo /exit | {jshell_name} -q 2>/dev/null | grep -q pr-4217", False)
#: npm runs a package's scripts with the script-shell ~/.npmrc names: the answer's, which exits 0,
#: passed a check of `npm test` on a package whose tests fail; the grading environment's
#: NPM_CONFIG_USERCONFIG is /dev/null
NPM_SHELL = 'printf "#!/bin/sh\\nexit 0\\n" > ~/sh && chmod +x ~/sh && echo "script-shell=$HOME/sh" >'
NPM_TEST = ("d=$(mktemp -d) && echo '{\"scripts\": {\"test\": \"exit 3\"}}' > $d/package.json"
            " && cd $d && npm test --silent")
LEFTOVER_ROWS["rig_check_npmrc"] = ([f"{NPM_SHELL} ~/.npmrc"], NPM_TEST, False)
#: npm reads the .npmrc of a folder above a package whose package.json names it a workspace as
#: its project config: the check's package in /tmp (mktemp -d) took /tmp's; and from a folder
#: that is no package, that folder's (the home's, from the home); the wrappers (npm, npx) pass
#: --workspaces=false, and refuse (126) beside such an .npmrc
LEFTOVER_ROWS["rig_check_npm_workspace"] = ([f"{NPM_SHELL} /tmp/.npmrc && echo '{{\"workspaces\": [\"*\"]}}'"
                                             " > /tmp/package.json"], NPM_TEST, False)
LEFTOVER_ROWS["rig_check_npmrc_from_home"] = ([f"{NPM_SHELL} ~/.npmrc"], "npm exec -c 'exit 3'", False)
#: npm's scripts run with the node_modules/.bin of every folder above their package first on
#: PATH: the answer's /tmp/node_modules/.bin/python3 (or the home's, for a check's package in the
#: home) took a test script's `python3`, and tests that exit 3 passed; the wrappers refuse (126)
NPM_PYTHON_TEST = ("echo '{\"scripts\": {\"test\": \"python3 -c \\\"raise SystemExit(3)\\\"\"}}' > $d/package.json"
                   " && cd $d && npm test --silent")
NPM_BIN = "mkdir -p {0}/node_modules/.bin && printf '#!/bin/sh\\nexit 0\\n' > {0}/node_modules/.bin/python3 && chmod +x {0}/node_modules/.bin/python3"
LEFTOVER_ROWS["rig_check_npm_bin_above"] = ([NPM_BIN.format("/tmp")], "d=$(mktemp -d) && " + NPM_PYTHON_TEST, False)
LEFTOVER_ROWS["rig_check_npm_bin_in_the_home"] = ([NPM_BIN.format("~")], "d=~/p && mkdir $d && " + NPM_PYTHON_TEST, False)
#: so do they for a package named with --prefix (or -C) and for a workspace's (-w), which the
#: wrappers ran as the check asked, unlooked at: /tmp's .bin took the test script's `python3`
LEFTOVER_ROWS["rig_check_npm_bin_above_prefix"] = (
    [NPM_BIN.format("/tmp")], "d=$(mktemp -d) && " + NPM_PYTHON_TEST.replace(" && cd $d && npm ", " && npm --prefix $d "),
    False)
LEFTOVER_ROWS["rig_check_npm_bin_above_workspace"] = (
    [NPM_BIN.format("/tmp")], "d=$(mktemp -d) && mkdir $d/p && echo '{\"workspaces\": [\"p\"]}' > $d/package.json && "
    + NPM_PYTHON_TEST.replace("$d/package.json", "$d/p/package.json").replace(" npm test", " npm -w p test"), False)
LEFTOVER_ROWS.update(PYTHON_ROWS)
LEFTOVER_ROWS.update(BY_PATH_ROWS)
#: npm ran with its wrapper's folder off PATH, so the `node t.js` of a test script was the system's
#: node, which loads a module of ~/.node_modules (the node wrapper's is hidden): the answer's
#: pr-hostile.js exited 0 for tests that fail; npm now runs with PATH as it was
LEFTOVER_ROWS["rig_check_npm_script_node"] = (["mkdir -p ~/.node_modules && echo 'process.exit(0)' > ~/.node_modules/pr-hostile.js"],
                                              "d=$(mktemp -d) && echo \"require('pr-hostile'); process.exit(3)\" > $d/t.js"
                                              " && echo '{\"scripts\": {\"test\": \"node t.js\"}}' > $d/package.json"
                                              " && cd $d && npm test --silent", False)
#: node and tmux ran their program with the wrappers' folder off PATH: what node's code
#: (child_process) or a tmux pane ran was the system's program, jq reading ~/.jq, whose
#: `def length: 100;` passed `jq -e 'length > 3'` of [1]; they now run it with PATH as it was
JQ_RC = "echo 'def length: 100;' > ~/.jq"
LEFTOVER_ROWS["rig_check_node_child"] = ([JQ_RC], "node -e \"process.exit(require('child_process').spawnSync("
                                                  "'jq', ['-e', 'length > 3'], {input: '[1]'}).status)\"", False)
LEFTOVER_ROWS["rig_check_tmux_pane_program"] = ([JQ_RC], "rm -f ~/r; tmux new-session -d -s j 'echo [1] | jq -e \"length > 3\""
                                                         " >/dev/null; echo $? > ~/r; sleep 9' && for i in 1 2 3 4 5 6 7 8 9 10;"
                                                         " do test -s ~/r && break; sleep 0.3; done; tmux kill-server;"
                                                         " grep -qx 0 ~/r", False)
#: prove (Perl's test harness) reads ~/.proverc as options: `--dry` there listed the check's
#: failing tests and exited 0; its wrapper passes --norc (a ./.proverc still counts, not the home's)
LEFTOVER_ROWS["rig_check_proverc"] = (["echo --dry > ~/.proverc"],
                                      "d=$(mktemp -d) && printf 'use Test::More tests => 1;\\nok(0);\\n' > $d/t.t"
                                      " && cd $d && prove t.t", False)
#: cmake's find_package() searches the user package registry, ~/.cmake/packages, before the
#: system's packages: the answer's GTestConfig.cmake (FindGTest tries it first) rewrote the check's
#: test program as it configured, and ctest passed; its wrapper turns the registry off
CMAKE_CHECK = ("d=$(mktemp -d) && printf 'cmake_minimum_required(VERSION 3.10)\\nproject(t C)\\nfind_package(GTest)\\n"
               "enable_testing()\\nadd_executable(t t.c)\\nadd_test(NAME t COMMAND t)\\n' > $d/CMakeLists.txt"
               " && printf 'int main(void) { return 3; }\\n' > $d/t.c && cmake -S $d -B $d/b >/dev/null"
               " && cmake --build $d/b >/dev/null && ctest --test-dir $d/b")
LEFTOVER_ROWS["rig_check_cmake_registry"] = (["mkdir -p ~/.cmake/packages/GTest ~/.g && echo $HOME/.g > ~/.cmake/packages/GTest/a"
                                              " && printf 'file(WRITE ${CMAKE_SOURCE_DIR}/t.c \"int main(void) { return 0; }\\\\n\")\\n'"
                                              " > ~/.g/GTestConfig.cmake"], CMAKE_CHECK, False)
#: vim, valgrind and git ran their program with the wrappers' folder off PATH: what it started (a
#: vim filter, the program valgrind runs, a git alias) ran the system's jq, which read ~/.jq
LEFTOVER_ROWS["rig_check_vim_filter"] = ([JQ_RC], "echo '[1]' > ~/v.json && vim -es -c '%!jq length' -c wq ~/v.json"
                                                  " </dev/null; grep -qx 100 ~/v.json", False)
LEFTOVER_ROWS["rig_check_valgrind_child"] = ([JQ_RC], "valgrind -q --tool=none sh -c 'echo [1] | jq -e \"length > 3\"'"
                                                      " >/dev/null", False)
LEFTOVER_ROWS["rig_check_git_alias_child"] = ([JQ_RC], "cd $(mktemp -d) && git init -q && git -c alias.t='!echo [1] |"
                                                       " jq -e \"length > 3\"' t >/dev/null", False)
#: gdb ran with the wrappers' folder off PATH: what its `shell` command ran was the system's jq
LEFTOVER_ROWS["rig_check_gdb_shell"] = ([JQ_RC], "rm -f ~/r; gdb -batch -ex 'shell echo [1] | jq -e \"length > 3\" >/dev/null;"
                                                 " echo $? > ~/r' </dev/null; grep -qx 0 ~/r", False)
#: npm climbs from a folder that is no package to one above that is: the answer's home, whose
#: .npmrc's script-shell (exit 0) passed `npm exec -c 'exit 3'` from the check's ~/t
LEFTOVER_ROWS["rig_check_npm_home_package"] = ([f"{NPM_SHELL} ~/.npmrc && echo '{{\"scripts\": {{}}}}' > ~/package.json"],
                                               "mkdir -p ~/t && cd ~/t && npm exec -c 'exit 3'", False)
#: make reads the first of GNUmakefile, makefile and Makefile where it runs: the answer's
#: ~/GNUmakefile (or ~/makefile) of `test: ; @true` was what ran in place of the Makefile the
#: check wrote there, whose test fails; the wrappers (make, gmake) refuse (126) beside one
MAKE_TEST = "printf 'test:\\n\\texit 3\\n' > ~/Makefile && "
LEFTOVER_ROWS["rig_check_gnumakefile"] = (["printf 'test:\\n\\t@true\\n' > ~/GNUmakefile"], MAKE_TEST + "cd ~ && make -s test", False)
LEFTOVER_ROWS["rig_check_makefile_of_a_dir"] = (["printf 'test:\\n\\t@true\\n' > ~/makefile"], MAKE_TEST + "make -s -C ~ test", False)
#: the folder named by make's long option (its wrapper read the name of another option there)
LEFTOVER_ROWS["rig_check_makefile_of_a_long_dir"] = (LEFTOVER_ROWS["rig_check_makefile_of_a_dir"][0],
                                                     MAKE_TEST + "cd / && make -s --directory=$HOME test", False)
#: ~/Makefile a link to /dev/null took the check's write and left no file dated since: the
#: wrappers refuse beside a Makefile that is a link too
LEFTOVER_ROWS["rig_check_gnumakefile_link"] = (["printf 'test:\\n\\t@true\\n' > ~/GNUmakefile && ln -s /dev/null ~/Makefile"],
                                               MAKE_TEST + "cd ~ && make -s test", False)
#: a recursive make, the check's `$(MAKE) -C sub test`, ran make by its path, not the wrapper,
#: and read the answer's sub/GNUmakefile in place of the check's sub/Makefile
LEFTOVER_ROWS["rig_check_recursive_make"] = (["mkdir -p ~/sub && printf 'test:\\n\\t@true\\n' > ~/sub/GNUmakefile"],
                                             "mkdir -p ~/sub && printf 'test:\\n\\texit 3\\n' > ~/sub/Makefile"
                                             " && printf 'test:\\n\\t@$(MAKE) -s -C sub test\\n' > ~/Makefile && cd ~ && make -s test",
                                             False)
#: a GNUmakefile dated since the check began is the check's only when it was written then: its
#: ctime alone moved on when the check copied the answer's folder with its times (cp -a), a
#: future mtime kept, or wrote to another name of it (a hard link: `>>` to the answer's log)
MAKE_PROJECT = "mkdir -p ~/proj && printf 'test:\\n\\t@true\\n' > ~/proj/GNUmakefile"
MAKE_COPY_TEST = "d=$(mktemp -d) && cp -a ~/proj/. $d && printf 'test:\\n\\texit 3\\n' > $d/Makefile && make -s -C $d test"
LEFTOVER_ROWS["rig_check_makefile_copied_with_its_times"] = ([MAKE_PROJECT], MAKE_COPY_TEST, False)
LEFTOVER_ROWS["rig_check_makefile_dated_ahead"] = ([MAKE_PROJECT + " && touch -d @4102444800 ~/proj/GNUmakefile"],
                                                   MAKE_COPY_TEST, False)
LEFTOVER_ROWS["rig_check_makefile_of_two_names"] = (["mkdir -p ~/sub && printf 'test:\\n\\t@true\\n#\\\\\\n' > ~/sub/GNUmakefile"
                                                     " && ln ~/sub/GNUmakefile ~/grading.log"],
                                                    "echo graded >> ~/grading.log && mkdir -p ~/sub"
                                                    " && printf 'test:\\n\\texit 3\\n' > ~/sub/Makefile && make -s -C ~/sub test",
                                                    False)
#: make takes a target for made when a file of its name is there and no older than what it
#: depends on: the answer's ~/test (a folder) was the check's `test` made, its `exit 3` never ran,
#: and its ~/runner dated ahead was a runner built from the check's runner.sh, its exit 0 what
#: `test` ran; the wrappers run a makefile the check made with -B (--always-make)
LEFTOVER_ROWS["rig_check_make_target_left"] = (["mkdir ~/test"], MAKE_TEST + "cd ~ && make -s test", False)
#: the Makefile the check wrote, through a second name of the answer's file (a hard link) or a
#: link to it, is the check's: it was taken for the answer's, run without -B
LEFTOVER_ROWS["rig_check_make_target_left_two_names"] = (["mkdir ~/test && touch ~/mk && ln ~/mk ~/Makefile"],
                                                         MAKE_TEST + "cd ~ && make -s test", False)
LEFTOVER_ROWS["rig_check_make_target_left_link"] = (["mkdir ~/test && touch ~/mk && ln -s mk ~/Makefile"],
                                                    MAKE_TEST + "cd ~ && make -s test", False)
#: a Makefile that is a link to /dev/null took the check's write and was read empty: with no rule
#: for it, the answer's ~/test was made, with -B too; the wrappers refuse (126) a makefile that
#: leads to what is no file
LEFTOVER_ROWS["rig_check_make_target_left_makefile_null"] = (["mkdir ~/test && ln -s /dev/null ~/Makefile"],
                                                             MAKE_TEST + "cd ~ && make -s -f Makefile test", False)
LEFTOVER_ROWS["rig_check_make_target_left_makefile_null_found"] = (["mkdir ~/test && ln -s /dev/null ~/Makefile"],
                                                                   MAKE_TEST + "cd ~ && make -s test", False)
LEFTOVER_ROWS["rig_check_make_target_dated_ahead"] = (
    ["printf '#!/bin/sh\\nexit 0\\n' > ~/runner && chmod +x ~/runner && touch -d @4102444800 ~/runner"],
    "cd ~ && printf '#!/bin/sh\\nexit 3\\n' > runner.sh && printf 'test: runner\\n\\t./runner\\n"
    "runner: runner.sh\\n\\tcp runner.sh runner && chmod +x runner\\n' > Makefile && make -s -f Makefile test", False)
#: javac with no class path given takes the current folder's, the home where a check starts, and
#: runs the annotation processors its META-INF/services names: the answer's rewrote each class
#: a check compiled (a stub whose main returns: Check's exit 3 never ran); the javac wrapper
#: refuses (126) beside such a file
JAVA_PROCESSOR = """\
import com.sun.source.util.*;
import java.nio.file.*;
import java.util.*;
import javax.annotation.processing.*;
import javax.lang.model.SourceVersion;
import javax.lang.model.element.*;
import javax.tools.*;
@SupportedAnnotationTypes("*")
public class P extends AbstractProcessor {
    public SourceVersion getSupportedSourceVersion() { return SourceVersion.latest(); }
    public synchronized void init(ProcessingEnvironment env) {
        super.init(env);
        JavacTask.instance(env).addTaskListener(new TaskListener() {
            public void finished(TaskEvent e) {
                if (e.getKind() != TaskEvent.Kind.GENERATE) return;
                try {
                    String name = e.getTypeElement().getSimpleName().toString();
                    Path out = Paths.get(env.getFiler().getResource(StandardLocation.CLASS_OUTPUT, "", "x").toUri()).getParent();
                    Path stub = Files.createTempDirectory("p").resolve(name + ".java");
                    Files.writeString(stub, "public class " + name + " { public static void main(String[] a) {} }");
                    ToolProvider.getSystemJavaCompiler().run(null, null, null, "-proc:none", "-d", out.toString(), stub.toString());
                } catch (Exception x) { }
            }
        });
    }
    public boolean process(Set<? extends TypeElement> a, RoundEnvironment r) { return false; }
}
"""
JAVA_CHECK = ("d=$(mktemp -d) && printf 'public class Check { public static void main(String[] a) { System.exit(3); } }\\n'"
              " > $d/Check.java && javac -d $d $d/Check.java && java -cp $d Check")
LEFTOVER_ROWS["rig_check_javac_processor"] = ([f"mkdir -p ~/.p && cat > ~/.p/P.java <<'EOF'\n{JAVA_PROCESSOR}EOF\n",
                                               "javac -d ~ ~/.p/P.java && mkdir -p ~/META-INF/services"
                                               " && echo P > ~/META-INF/services/javax.annotation.processing.Processor"],
                                              JAVA_CHECK, False)
#: java with no class path given (its source launcher, `java Check.java`, too) takes the current
#: folder's, the home where a check starts, and loads the service providers its META-INF/services
#: names: the answer's file system provider, loaded as the source launcher starts, halted the JVM
#: with 0, and a check whose Check.java exits 3 passed; the java wrapper refuses (126) beside them
FS_PROVIDER = """\
import java.net.URI; import java.nio.channels.SeekableByteChannel; import java.nio.file.*;
import java.nio.file.attribute.*; import java.nio.file.spi.FileSystemProvider; import java.util.*;
public class F extends FileSystemProvider {
    static { Runtime.getRuntime().halt(0); }
    public String getScheme() { return "f"; }
    public FileSystem newFileSystem(URI u, Map<String, ?> e) { return null; }
    public FileSystem getFileSystem(URI u) { return null; }
    public Path getPath(URI u) { return null; }
    public SeekableByteChannel newByteChannel(Path p, Set<? extends OpenOption> o, FileAttribute<?>... a) { return null; }
    public DirectoryStream<Path> newDirectoryStream(Path d, DirectoryStream.Filter<? super Path> f) { return null; }
    public void createDirectory(Path d, FileAttribute<?>... a) { }
    public void delete(Path p) { }
    public void copy(Path s, Path t, CopyOption... o) { }
    public void move(Path s, Path t, CopyOption... o) { }
    public boolean isSameFile(Path a, Path b) { return false; }
    public boolean isHidden(Path p) { return false; }
    public FileStore getFileStore(Path p) { return null; }
    public void checkAccess(Path p, AccessMode... m) { }
    public <V extends FileAttributeView> V getFileAttributeView(Path p, Class<V> t, LinkOption... o) { return null; }
    public <A extends BasicFileAttributes> A readAttributes(Path p, Class<A> t, LinkOption... o) { return null; }
    public Map<String, Object> readAttributes(Path p, String a, LinkOption... o) { return null; }
    public void setAttribute(Path p, String a, Object v, LinkOption... o) { }
}
"""
JAVA_SOURCE_CHECK = ("d=$(mktemp -d) && printf 'public class Check { public static void main(String[] a) { System.exit(3); } }\\n'"
                     " > $d/Check.java && java $d/Check.java")
LEFTOVER_ROWS["rig_check_java_service_provider"] = (
    [f"mkdir -p ~/.f && cat > ~/.f/F.java <<'EOF'\n{FS_PROVIDER}EOF\n",
     "javac -d ~ ~/.f/F.java && mkdir -p ~/META-INF/services && echo F > ~/META-INF/services/java.nio.file.spi.FileSystemProvider"],
    JAVA_SOURCE_CHECK, False)
#: the same in a folder its user may enter but not list: the JVM opens the provider's file by name
LEFTOVER_ROWS["rig_check_java_service_provider_unlisted"] = (
    [*LEFTOVER_ROWS["rig_check_java_service_provider"][0], "chmod 111 ~/META-INF/services"], JAVA_SOURCE_CHECK, False)
#: java and javac by their paths, /usr/bin/java (a link to the JDK's bin/java) or the JDK's own
#: ($JAVA_HOME/bin/javac), past the wrappers first on PATH: no front was there (a program whose real
#: file is outside /usr/bin), and the answer's providers ran as before; a process VM fronts them too
LEFTOVER_ROWS["rig_check_java_service_provider_by_path"] = (
    LEFTOVER_ROWS["rig_check_java_service_provider"][0], JAVA_SOURCE_CHECK.replace("&& java ", "&& /usr/bin/java "), False)
LEFTOVER_ROWS["rig_check_java_service_provider_by_real_path"] = (
    LEFTOVER_ROWS["rig_check_java_service_provider"][0],
    JAVA_SOURCE_CHECK.replace("&& java ", "&& $(readlink -f /usr/bin/java) "), False)
LEFTOVER_ROWS["rig_check_javac_processor_by_real_path"] = (
    LEFTOVER_ROWS["rig_check_javac_processor"][0],
    JAVA_CHECK.replace("&& javac ", "&& $(dirname $(readlink -f /usr/bin/java))/javac "), False)
#: rows that cannot run as nobody (tests/test_hostile_answers.py's nobody table), with why
LEFTOVER_NOT_AS_NOBODY = {row: "a tmux server started in a sandbox run as nobody exits at once "
                               "here ('server exited unexpectedly'): no check of it can pass"
                          for row in ("rig_check_tmux_conf", "rig_check_tmux_pane_program")}
#: row -> the program its check needs (hostile_tasks.NEEDS_PROGRAM)
LEFTOVER_PROGRAMS = {"rig_check_mavenrc": "mvn", "rig_check_mvn_config": "mvn", "rig_check_valgrindrc": "valgrind",
                     "rig_check_gdbinit": "gdb", "rig_check_tmux_conf": "tmux", "rig_check_lesskey": "less",
                     "rig_check_gpg_conf": "gpg", "rig_check_imagemagick_conf": "identify", "rig_check_ssh_config": "ssh",
                     "rig_check_scp_config": "scp", "rig_check_sftp_config": "sftp", "rig_check_vimrc": "vim",
                     "rig_check_vim_plugin": "ex", "rig_check_jshell_start": "jshell", "rig_check_jshell_start_by_path": "jshell", **{f"rig_check_vimrc_{row}": "vim" for row in ("vim_basic", "rvim", "rview", "by_path")}, "rig_check_npmrc": "npm", "rig_check_npm_workspace": "npm",
                     "rig_check_npmrc_from_home": "npm", "rig_check_npm_script_node": "npm", "rig_check_node_child": "node",
                     "rig_check_tmux_pane_program": "tmux", "rig_check_vim_filter": "vim",
                     "rig_check_valgrind_child": "valgrind", "rig_check_git_alias_child": "git", "rig_check_gdb_shell": "gdb",
                     "rig_check_npm_home_package": "npm", "rig_check_npm_bin_above": "npm", "rig_check_npm_bin_in_the_home": "npm", "rig_check_npm_bin_above_prefix": "npm", "rig_check_npm_bin_above_workspace": "npm", "rig_check_gnumakefile": "make", "rig_check_makefile_of_a_dir": "make",
                     "rig_check_gnumakefile_link": "make", "rig_check_makefile_of_a_long_dir": "make",
                     "rig_check_recursive_make": "make", "rig_check_makefile_copied_with_its_times": "make",
                     "rig_check_makefile_dated_ahead": "make", "rig_check_makefile_of_two_names": "make",
                     "rig_check_make_target_left": "make", "rig_check_make_target_dated_ahead": "make",
                     "rig_check_make_target_left_two_names": "make", "rig_check_make_target_left_link": "make",
                     "rig_check_make_target_left_makefile_null": "make", "rig_check_make_target_left_makefile_null_found": "make",
                     "rig_check_javac_processor": "javac", "rig_check_java_service_provider": "java",
                     "rig_check_java_service_provider_unlisted": "java",
                     "rig_check_java_service_provider_by_path": "java",
                     "rig_check_java_service_provider_by_real_path": "java", "rig_check_javac_processor_by_real_path": "javac",
                     "rig_check_proverc": "prove", "rig_check_cmake_registry": "cmake",
                     "rig_check_terminfo_tput": "tput", "rig_check_terminfo_tput_by_path": "tput",
                     "rig_check_terminfo_infocmp": "infocmp", "rig_check_imagemagick_conf_im6_q16": "identify-im6.q16",
                     "rig_check_imagemagick_conf_im6": "identify-im6", "rig_check_imagemagick_conf_by_path": "identify",
                     "rig_check_libreoffice_profile": "soffice", "rig_check_libreoffice_profile_by_path": "soffice"}
LEFTOVER_PROGRAMS.update(PYTHON_PROGRAMS)
LEFTOVER_PROGRAMS.update(BY_PATH_PROGRAMS)


def on_system_path(program: str) -> str | None:
    """Where a sandbox of the host finds ``program``: in the system folders of a grading
    command's PATH (the pytest of the tests' venv, on their own PATH, is not there)."""
    return shutil.which(program, path=SYSTEM_PATH)


#: program -> an honest check of it through its wrapper (hostile_tasks.HONEST_TOOLS)
LEFTOVER_HONEST = {"mvn": "d=$(mktemp -d) && mkdir $d/.mvn && echo -v > $d/.mvn/maven.config"  # a project's own
                          " && cd $d && mvn | grep -q 'Apache Maven'",
                   "valgrind": "valgrind -q --error-exitcode=1 --leak-check=full true",
                   "gdb": "gdb -batch -ex 'print 6 * 7' | grep -q '= 42' && gdb -batch -ex 'shell echo [1,2] | jq length'"
                          " </dev/null | grep -qx 2",
                   "identify": "convert -size 3x2 xc:red ~/h.png && [ \"$(identify -format %w%h ~/h.png)\" = 32 ]",
                   # by Debian's other names too, and its path (the front at the real file leads to the wrapper)
                   "identify-im6.q16": "convert-im6.q16 -size 3x2 xc:red ~/h6.png && [ \"$(identify-im6.q16 -format %w%h ~/h6.png)\" = 32 ]"
                                       f" && [ \"$({by_path('identify')} -format %w%h ~/h6.png)\" = 32 ]"
                                       " && [ \"$(stream -map r -storage-type char ~/h6.png - | wc -c)\" = 6 ]",
                   "identify-im6": "[ \"$(convert-im6 -size 5x1 xc:blue png:- | identify-im6 -format %w -)\" = 5 ]",
                   "ssh": "ssh -G localhost | grep -qx 'hostname localhost'",
                   # a sheet converted by its name and its path, as it is
                   "soffice": f"d=$(mktemp -d) && cd $d && echo a,b > x.csv && soffice --headless --convert-to html x.csv >/dev/null 2>&1"
                              f" && grep -q '>a<' x.html && rm x.html && {by_path('soffice')} --headless --convert-to html x.csv"
                              " >/dev/null 2>&1 && grep -q '>a<' x.html",
                   # the system's entries, and a check's own TERMINFO
                   "tput": "[ \"$(tput -T xterm cols)\" = 80 ] && d=$(mktemp -d) && infocmp xterm | sed 's/cols#80/cols#132/'"
                           " > $d/x.src && tic -o $d/ti $d/x.src && [ \"$(TERMINFO=$d/ti tput -T xterm cols)\" = 132 ]",
                   "infocmp": "infocmp xterm | grep -q cols#80",
                   "scp": "scp -q ~/a.json ~/b.json && cmp ~/a.json ~/b.json",
                   "sftp": "sftp -o BatchMode=yes -P 1 localhost </dev/null 2>&1 | grep -q 'port 1:'",
                   # by its names and its path too, where the guest has them (Debian's vim.basic, the
                   # front /usr/bin/vim leads to)
                   "vim": f"for vim in vim vim.basic rvim {by_path('vim')}; do command -v $vim >/dev/null || continue;"
                          " cp ~/a.json ~/v.json && $vim -es -c '%s/2/3/' -c wq ~/v.json </dev/null"
                          " && grep -q '\"a\": 3' ~/v.json || exit 1; done",
                   # a check's own -u still wins
                   "ex": "echo 'let g:pr = \"5\"' > ~/u.vim && ex -s -u ~/u.vim -c 'call writefile([g:pr], $HOME . \"/u.txt\")'"
                         " -c q </dev/null && grep -qx 5 ~/u.txt",
                   "npm": "d=$(mktemp -d) && echo '{\"scripts\": {\"test\": \"test -e package.json\"}}'"
                          " > $d/package.json && cd $d && npm test --silent"
                          # from a folder of the check's own package: npm runs the package's script
                          " && mkdir $d/src && cd $d/src && npm test --silent"
                          # a program of the check's own node_modules/.bin above its package
                          " && e=$(mktemp -d) && mkdir -p $e/node_modules/.bin $e/p && printf '#!/bin/sh\\nexit 0\\n'"
                          " > $e/node_modules/.bin/ok && chmod +x $e/node_modules/.bin/ok"
                          " && echo '{\"scripts\": {\"test\": \"ok\"}}' > $e/p/package.json && cd $e/p && npm test --silent"
                          # and named with --prefix, from elsewhere
                          " && cd / && npm --prefix $e/p test --silent",
                   # a project's own ./.proverc (-v: each test's lines), tests that pass from the home
                   "prove": "d=$(mktemp -d) && printf 'use Test::More tests => 1;\\nok(1);\\n' > $d/t.t && echo -v > $d/.proverc"
                            " && (cd $d && prove t.t | grep -qx 'ok 1') && cp $d/t.t ~/t.t && cd ~ && prove -Q t.t",
                   # a package of the check's own prefix found, a project that passes, cmake's other modes
                   "cmake": "d=$(mktemp -d) && mkdir -p $d/p/lib/cmake/Foo && echo 'set(FOO_OK 1)' > $d/p/lib/cmake/Foo/FooConfig.cmake"
                            " && " + CMAKE_CHECK.replace("d=$(mktemp -d) && ", "").replace("return 3", "return 0")
                            .replace("(GTest)", "(Foo REQUIRED)").replace("cmake -S", "cmake -DCMAKE_PREFIX_PATH=$d/p -S") +
                            " >/dev/null && [ \"$(cmake -E echo ok)\" = ok ] && cmake --version | grep -q 'cmake version'",
                   "gpg": "gpg --print-md SHA256 ~/a.json | grep -q a.json",
                   "less": "less -F ~/a.json | grep -q '\"a\"'",
                   # the check's own Makefile, a GNUmakefile it made beside one, its own -f; a recipe's
                   # program runs through the wrappers
                   "make": "printf 't:\\n\\t@jq .a a.json\\n' > ~/Makefile && cd ~ && make -s t | grep -qx 2"
                           " && make -s -f Makefile t | grep -qx 2 && d=$(mktemp -d) && printf 'include Makefile\\n' > $d/GNUmakefile"
                           " && printf 't:\\n\\t@command -v jq\\n' > $d/Makefile && make -s -C $d t"
                           " | grep -qx /opt/parallel-rollout/grading_bin/jq"
                           # a recursive make of the check's own sub-folder, through the wrapper; a
                           # makefile's own MAKE := $(MAKE) ... still works
                           " && mkdir $d/sub && printf 'MAKE := $(MAKE) -s\\nt:\\n\\t@$(MAKE) -C sub t\\n' > $d/Makefile"
                           " && printf 't:\\n\\t@echo $(MAKE)\\n' > $d/sub/Makefile && make -s -C $d t"
                           " | grep -qx /opt/parallel-rollout/grading_bin/make"
                           # what make is asked alone, its -q and -n, takes a target there for made
                           " && touch $d/x && printf 'x:\\n\\texit 3\\n' > $d/Makefile && make -q -C $d x"
                           " && [ -z \"$(make -sn -C $d x)\" ]",
                   # from the home, with no processor of the answer's there
                   "javac": JAVA_CHECK.replace("exit(3)", "exit(0)"),
                   # from the home, with none of the answer's services there, then beside the check's own
                   "java": JAVA_SOURCE_CHECK.replace("exit(3)", "exit(0)") + " && mkdir -p ~/META-INF/services"
                           " && echo Nope > ~/META-INF/services/pr.None && java $d/Check.java",
                   "tmux": "tmux new-session -d -s h 'sleep 9' && tmux has-session -t h; r=$?; tmux kill-server; exit $r",
                   # a snippet's output, through the wrapper's preferences folder of its own
                   "jshell": "echo 'System.out.println(2+3)' | jshell -q 2>/dev/null | grep -qx 'jshell> 5'"}
LEFTOVER_HONEST.update(PYTHON_HONEST)
#: rows whose program cannot start where RLIMIT_AS bounds a VM (hostile_tasks.NEEDS_ADDRESS_SPACE)
LEFTOVER_ADDRESS_SPACE = {
    **{row: "the JVM cannot start under RLIMIT_AS of 256 MB, a VM's memory bound "
            "without a memory cgroup (it reserves more address space for its code cache)"
       for row in ("rig_check_mavenrc", "rig_check_mvn_config", "rig_check_javac_processor",
                   "rig_check_java_service_provider", "rig_check_java_service_provider_unlisted",
                   "rig_check_java_service_provider_by_path", "rig_check_java_service_provider_by_real_path",
                   "rig_check_javac_processor_by_real_path", "rig_check_jshell_start", "rig_check_jshell_start_by_path")},
    "rig_check_node_child": "node cannot start under RLIMIT_AS of 256 MB, a VM's memory bound without a memory cgroup",
    **{row: "npm's node cannot start under RLIMIT_AS of 256 MB, a VM's memory bound without a memory cgroup"
       for row in ("rig_check_npmrc", "rig_check_npm_workspace", "rig_check_npmrc_from_home",
                   "rig_check_npm_script_node", "rig_check_npm_home_package", "rig_check_npm_bin_above",
                   "rig_check_npm_bin_in_the_home", "rig_check_npm_bin_above_prefix",
                   "rig_check_npm_bin_above_workspace")}}

#: py rows: name -> (the body of add(a, b), its tests), a wrong answer that tries to pass where
#: its arguments cross to its process as values. This one changes the list it was given, which
#: its tests forbid: the change stayed in the answer's process, and the tests passed it
LEFTOVER_PY_ROWS = {
    "change_the_input_it_must_keep": ("    a.extend(b)\n    return a\n",
                                      "def check(candidate):\n    a = [1]\n    assert candidate(a, [2]) == [1, 2]\n"
                                      "    assert a == [1]\n"),
    # changes the list the tests pass it twice and must keep: it crossed as two copies, and the
    # second's sync undid the change made through the first, so the input looked kept
    "change_an_input_passed_twice": ("    a.append(9)\n    return 0\n",
                                     "def check(candidate):\n    x = [1]\n    assert candidate(x, x) == 0\n"
                                     "    assert x == [1]\n"),
    # an OrderedDict in the wrong order: it crossed as a plain dict, whose == ignores order
    "ordered_dict_in_the_wrong_order": ("    from collections import OrderedDict\n"
                                        "    return OrderedDict([('b', b), ('a', a)])\n",
                                        "def check(candidate):\n    from collections import OrderedDict\n"
                                        "    assert candidate(1, 2) == OrderedDict([('a', 1), ('b', 2)])\n"),
    # an object of a class the tests define (not the prompt): only the prompt's classes cross
    "object_of_the_tests_class": ("    return Token()\nclass Token:\n    pass\n",
                                  "class Token:\n    pass\ndef check(candidate):\n"
                                  "    assert isinstance(candidate(1, 2), Token)\n"),
    # returns the list it was given where its tests ask for a new one: what it returned crossed
    # as a copy, so `is not` held for every answer
    "return_the_input_for_a_copy": ("    return a\n",
                                    "def check(candidate):\n    a = [1, 2]\n    r = candidate(a, [])\n"
                                    "    assert r == [1, 2] and r is not a\n"),
    # raises StopIteration: in a call that map() makes it ended the tests' iteration early, and
    # all(map(...)) held for an answer that answers nothing
    "stop_the_tests_iteration": ("    raise StopIteration\n",
                                 "def check(candidate):\n"
                                 "    assert all(map(lambda p: candidate(*p) == sum(p), [(2, 3), (-1, 1)]))\n"),
    # returns a passing verdict to tests that print what it returns, on the judge's stdout (the
    # verdict's channel), padded past the judge's buffer so that it goes out at once, and kills the
    # judge as its process ends, before the judge's own verdict follows: the printed one was taken
    "verdict_printed_by_the_tests": ("    import atexit, os\n    atexit.register(os.kill, os.getppid(), 9)\n"
                                     "    return '{\"kind\": \"passed\", \"detail\": \"\", \"output\": \"\", \"returncode\": 0}'"
                                     " + ' ' * 65536\n",
                                     "def check(candidate):\n    print(candidate(2, 3))\n    assert candidate(2, 3) == 5\n"),
}
