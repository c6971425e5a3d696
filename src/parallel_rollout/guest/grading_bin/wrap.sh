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
