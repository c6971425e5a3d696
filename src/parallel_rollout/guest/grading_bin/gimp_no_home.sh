# Sourced by the GIMP wrappers here (gimp, gimp-console and their -2.10 names, the real files):
# runs the program of the wrapper's name (see ./curl) with GIMP2_DIRECTORY, its user folder, a new
# `mktemp -d` folder, removed after, so that it reads none of the graded code's
# (~/.config/GIMP): GIMP loads the Script-Fu scripts and plug-ins there as it starts, batch mode
# (`gimp -i -b …`) too, and a script's top-level code ran in the check's process. It runs with
# PATH as it was (see ./wrap.sh): what a check's own script starts goes through the wrappers.
# A check's own GIMP2_DIRECTORY wins.
. "${0%/*}/wrap.sh" || exit
program=$(command -v "${0##*/}") || exec "${0##*/}" "$@"
if [ -n "${GIMP2_DIRECTORY-}" ]; then PATH=$path_as_it_was exec "$program" "$@"; fi
folder=$(mktemp -d) || exit
PATH=$path_as_it_was GIMP2_DIRECTORY=$folder "$program" "$@"
status=$?
rm -rf "$folder"
exit "$status"
