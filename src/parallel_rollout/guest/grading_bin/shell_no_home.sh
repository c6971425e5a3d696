# Sourced by the wrappers ./bash, ./sh and ./dash (bash's front at /usr/bin/bash leads to ./bash):
# runs the shell of the wrapper's name (see ./curl), when a check starts it as a login or an
# interactive shell, with none of the home's startup files, the graded code's: its ~/.profile,
# ~/.bash_profile, ~/.bash_login and ~/.bashrc put its ~/bin first on the PATH, and a check of
# `bash -lc 'which spotify'` found the fake program there. A login shell runs as no login (-l and
# --login taken out: a login bash runs ~/.bash_logout as it exits, --noprofile or not, and an
# `exit 0` there made a check's `exit 3` pass), a bash with --noprofile --norc (so not
# /etc/profile either, as a grading command's own shell); an interactive dash reads only the
# check's own ENV (the grading environment passes none). Every other call (`sh -c`, a script)
# runs the shell as it is, at the cost of this file's builtins: no process is started for it.
# The shell runs with PATH as it was (see ./wrap.sh): what it runs goes through the wrappers.
. "${0%/*}/wrap.sh" || exit
# the shell itself: the first of the wrapper's name on the PATH without the wrappers
shell_name=${0##*/} program= IFS_was=$IFS IFS=:
set -f  # PATH split, not globbed
for shell_dir in $PATH /usr/bin /bin; do  # folders only (an empty or relative entry: a shell the answer left)
    case $shell_dir in /*) ;; *) continue ;; esac
    if [ -x "$shell_dir/$shell_name" ] && [ ! -d "$shell_dir/$shell_name" ]; then
        program=$shell_dir/$shell_name; break
    fi
done
IFS=$IFS_was
set +f
PATH=$path_as_it_was
if [ -z "$program" ]; then echo "$shell_name: not found" >&2; exit 127; fi
# login_or_interactive ARG...: the shell's options (the words before its command or script)
# make it a login or an interactive shell
login_or_interactive() {
    while [ "$#" -gt 0 ]; do
        case $1 in
            --login) return 0 ;;
            --rcfile|--init-file) shift ;;
            --) return 1 ;;
            --*) ;;
            [-+][!-]*) case $1 in -*[li]*) return 0 ;; esac
                       case $1 in *[oO]) shift ;; esac ;;
            *) return 1 ;;
        esac
        shift
    done
    return 1
}
if ! login_or_interactive "$@"; then exec "$program" "$@"; fi
case $(readlink -f "$program") in
    *bash*) set -- --noprofile --norc "$@" ;;
esac
# the options again, -l and --login taken out (an option's value, `-o pipefail`, kept as it is)
options=1 value= total=$#
for arg; do
    if [ -n "$value" ]; then
        value=
    elif [ -n "$options" ]; then
        case $arg in
            --login) continue ;;
            --rcfile|--init-file) value=1 ;;
            --) options= ;;
            --*) ;;
            [-+][!-]*) case $arg in -*l*) arg=$(printf '%s' "$arg" | tr -d l)
                                          if [ "$arg" = - ]; then continue; fi ;;
                       esac
                       case $arg in *[oO]) value=1 ;; esac ;;
            *) options= ;;
        esac
    fi
    set -- "$@" "$arg"
done
shift "$total"
unset options value total arg
exec "$program" "$@"
