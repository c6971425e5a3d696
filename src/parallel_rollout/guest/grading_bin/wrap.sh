# Sourced by the wrappers in this folder, which agent_grading.grading_env puts first on a
# grading command's PATH: takes the folder off PATH, so that what a wrapper execs is the
# system's program, never the wrapper again (anywhere else on PATH it would be).
case ":$PATH:" in
    ":${0%/*}:"*) PATH=${PATH#"${0%/*}"} PATH=${PATH#:} ;;
    *) echo "${0##*/}: ${0%/*} must come first on PATH" >&2; exit 127 ;;
esac
