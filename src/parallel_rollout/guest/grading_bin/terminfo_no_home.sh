# Sourced by ncurses' terminal programs here (tput, infocmp, clear, tabs, tset, reset, toe):
# runs the program of the wrapper's name (see ./curl) with HOME a folder that does not exist,
# so that it reads no ~/.terminfo of the graded code's, which ncurses searches before the
# system's entries: one compiled there for xterm (tic -o ~/.terminfo) of 977 columns made
# `tput -T xterm cols` say 977 to a check that tested what the answer made of tput's output.
# The system's entries are still read; a check's own TERMINFO or TERMINFO_DIRS wins.
. "${0%/*}/wrap.sh" && HOME=${0%/*}/no-home exec "${0##*/}" "$@"
