# Sourced by the LibreOffice wrappers here (soffice, libreoffice; localc, lowriter and the like run
# /usr/lib/libreoffice/program/soffice by its path, whose front leads here in a process VM): runs
# the program of the wrapper's name (see ./curl) with a user profile of its own
# (-env:UserInstallation, a new `mktemp -d` folder, removed after), so that it reads none of the
# graded code's (~/.config/libreoffice): the Basic macros that profile binds to the application's
# events run headless too (`--convert-to`), and the answer's, bound to its start in
# registrymodifications.xcu, rewrote the document a check converted as it was exported. It runs
# with PATH as it was (see ./wrap.sh): what a macro of the check's own starts goes through the
# wrappers. A check's own -env:UserInstallation wins (soffice takes the first one given).
. "${0%/*}/wrap.sh" || exit
program=$(command -v "${0##*/}") || exec "${0##*/}" "$@"
for arg; do
    case $arg in -env:UserInstallation=*) PATH=$path_as_it_was exec "$program" "$@" ;; esac
done
profile=$(mktemp -d) || exit
PATH=$path_as_it_was "$program" "-env:UserInstallation=file://$profile" "$@"
status=$?
rm -rf "$profile"
exit "$status"
