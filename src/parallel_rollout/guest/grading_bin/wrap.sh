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
unset path
# made_by_the_check FILE [-L]: FILE is not there, or dated (its ctime, which no user can set
# back) since the grading command began, $PARALLEL_ROLLOUT_GRADING_SINCE: the check's own, since
# the graded code's processes were all reaped before it began (npm trusts a package, make a
# makefile, so made). A link is dated as a link, or with -L by the file it leads to (what a
# check wrote through a link the graded code left)
made_by_the_check() {
    [ ! -e "$1" ] && [ ! -L "$1" ] && return 0
    [ -n "$PARALLEL_ROLLOUT_GRADING_SINCE" ] || return 1
    dated=$(stat ${2:+"$2"} -c %.9Z "$1" 2>/dev/null) || return 1
    s=${dated%.*} since=${PARALLEL_ROLLOUT_GRADING_SINCE%.*}
    [ "$s" -gt "$since" ] || { [ "$s" -eq "$since" ] && [ "1${dated#*.}" -ge "1${PARALLEL_ROLLOUT_GRADING_SINCE#*.}" ]; }
}
