# Sourced by the wrappers in this folder, which agent_grading.grading_env puts first on a
# grading command's PATH: takes the folder off PATH, wherever it is (a check's own
# `export PATH=~/bin:$PATH` or `PATH=./node_modules/.bin:$PATH` puts it later), so that what a
# wrapper execs is the system's program, never the wrapper again. A wrapper whose program runs
# others (npm its scripts, pytest its tests) execs it by its path with PATH as it was,
# $path_as_it_was, so that what it runs goes through the wrappers too.
path_as_it_was=$PATH
path=:$PATH:
while :; do
    case $path in
        *":${0%/*}:"*) path=${path%%":${0%/*}:"*}:${path#*":${0%/*}:"} ;;
        *) break ;;
    esac
done
path=${path#:}
PATH=${path%:}
# a PATH of the wrappers' folder alone (`PATH=/opt/parallel-rollout/grading_bin git status`, `PATH=.`
# from it) left none, and the prefix below made it `/opt/system-originals:`, whose empty entry is
# the current folder: git's wrapper ran no python3 (127), or the answer's ./python3 in its repo
# (its exit 0 an empty `git status`); the system's folders then, as dash's PATH when none is given
if [ -z "$PATH" ]; then PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin; fi
# every guest we make has the wrappers' fronts at their programs' real paths (/usr/bin/env,
# /usr/bin/git, /usr/bin/jq …: ./system_front), which would run the wrapper again: their system
# programs are found here first
if [ -d /opt/system-originals ]; then PATH=/opt/system-originals:$PATH; fi
unset path
# made_by_the_check FILE [-L]: FILE is not there, or written since the grading command began,
# $PARALLEL_ROLLOUT_GRADING_SINCE: the check's own, since the graded code's processes were all
# reaped before it began (npm trusts a package, make a makefile, so made). Written: dated so by
# its ctime (which no user can set back) and its mtime, the mtime no later than the ctime, one
# name: a ctime alone moved on for what the check did to the graded code's file without writing
# it (cp -a or tar x of its folder, a chmod, mv or ln of another name of it, a future mtime kept),
# and one name of several took the check's `>>` to another. A link is dated as a link, or with
# -L by the file it leads to (what a check wrote through a link the graded code left)
made_by_the_check() {
    [ ! -e "$1" ] && [ ! -L "$1" ] && return 0
    dated=$(stat ${2:+"$2"} -c '%.9Y %.9Z %h' "$1" 2>/dev/null) || return 1
    set -- "${dated%% *}" "${dated#* }"
    [ "${2#* }" = 1 ] && not_before "$1" "$PARALLEL_ROLLOUT_GRADING_SINCE" && not_before "${2% *}" "$1"
}
# dated_since FILE [-L]: FILE is there and its ctime is since the grading command began (what
# the check may have written: make refuses beside a Makefile so dated)
dated_since() {
    dated=$(stat ${2:+"$2"} -c %.9Z "$1" 2>/dev/null) && not_before "$dated" "$PARALLEL_ROLLOUT_GRADING_SINCE"
}
# not_before A B: the time A (seconds.nanoseconds) is B or later; never when B is not given
not_before() {
    [ -n "$2" ] || return 1
    [ "${1%.*}" -gt "${2%.*}" ] || { [ "${1%.*}" -eq "${2%.*}" ] && [ "1${1#*.}" -ge "1${2#*.}" ]; }
}
# graded_folder DIR: DIR is one of the folders every user may write (./graded_folders), by its
# path or its real one (/var/lock, /run/lock)
graded_folder() {
    graded_real=$(cd "$1" 2>/dev/null && pwd -P) || graded_real=$1
    while read -r graded_top; do
        case $graded_top in /*) ;; *) continue ;; esac
        if [ "$1" = "$graded_top" ] || [ "$graded_real" = "$graded_top" ] \
                || [ "$graded_real" = "$(cd "$graded_top" 2>/dev/null && pwd -P)" ]; then
            return 0
        fi
    done < "${0%/*}/graded_folders"
    return 1
}
