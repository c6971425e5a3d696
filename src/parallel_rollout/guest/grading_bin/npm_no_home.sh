# Sourced by the wrappers ./npm and ./npx: runs the program of the wrapper's name (see ./curl)
# so that it reads no .npmrc of the graded code's as a project's config. The grading
# environment's NPM_CONFIG_USERCONFIG (/dev/null) keeps ~/.npmrc from being the user's config,
# but npm reads $prefix/.npmrc as the project's, its prefix the nearest folder up from the
# current one with a package.json or node_modules, and climbs on to a folder whose package.json
# names that one among its workspaces: a /tmp/package.json of {"workspaces": ["*"]} made /tmp
# the prefix of a check's package in a `mktemp -d` folder, and the script-shell of /tmp/.npmrc
# ran its `npm test` (exit 0 for tests that fail). So a package runs with --workspaces=false,
# which stops that climb (one that is a workspace of another runs as a package of its own); one
# that names workspaces itself, or a folder that is no package, is not run at all (126) below a
# workspace root with an .npmrc, or beside an .npmrc (the home's, from the home) that would be
# its config. Nor is it run (126) below a package, a folder with a package.json or node_modules
# above the current one: npm takes that for the project, so the graded code's ~/package.json
# and ~/.npmrc (or its scripts) passed `npm exec -c 'exit 3'` (or `npm test`) from a folder of
# the check's in the home; a package the check made itself (its package.json, and its .npmrc
# if any, dated since the grading command began, $PARALLEL_ROLLOUT_GRADING_SINCE: the graded
# code's processes were all reaped before) is run from a folder below it as npm would. A
# check's own --prefix, -g, -w or --workspaces runs npm as the check asks (below no .bin of the
# graded code's: bins_above). npm runs
# with PATH as it was (see ./wrap.sh): the `node test.js` of a package's test script is the
# wrapped node, which reads no ~/.node_modules of the graded code's.
. "${0%/*}/wrap.sh" || exit
program=$(command -v "${0##*/}") || exec "${0##*/}" "$@"
PATH=$path_as_it_was
# bins_above FOLDER SAID: not run (126) below a node_modules/.bin of a folder above FOLDER (SAID, as
# the refusal names it) holding a file the check did not make: npm's scripts (npm test, npm run,
# npm exec -c) run with the node_modules/.bin of the package's folder and of every folder above it
# first on PATH, and the graded code's /tmp/node_modules/.bin/python3 (or the home's, for a check's
# package in the home) took a test script's `python3`: tests that exit 3 passed
bins_above() {
    above=$1
    while [ -n "$above" ] && [ "$above" != / ]; do
        above=${above%/*}
        bin=$above/node_modules/.bin
        for found in "$bin" "$bin"/* "$bin"/.[!.]* "$bin"/..?*; do
            if [ "$found" = "$bin" ]; then  # a link, or a folder no one may list: the graded code's
                if [ -L "$bin" ] || { [ -e "$bin" ] && { [ ! -r "$bin" ] || [ ! -x "$bin" ]; }; }; then break; fi
            elif { [ -e "$found" ] || [ -L "$found" ]; } && ! made_by_the_check "$found"; then break; fi
            found=
        done
        if [ -n "$found" ]; then
            echo "${0##*/}: not run: $found, a program the graded code could have left, would be on the PATH of the package's scripts (npm puts the node_modules/.bin of each folder above $2 there): run it from a folder of the check's own" >&2
            exit 126
        fi
    done
}
# A check's own --prefix (-C) or workspace (-w, --workspaces) runs npm as it asks, once the
# folders above the package it names (above the workspaces: the current folder and up) hold no
# such .bin; -g runs the global packages' scripts, which no folder of the graded code's holds
named= prefix_next= workspaces=
for arg in "$@"; do
    if [ -n "$prefix_next" ]; then named=$arg prefix_next=; continue; fi
    case $arg in
        --prefix|-C) prefix_next=1 ;;
        --prefix=*) named=${arg#--prefix=} ;;
        -w|--workspace|--workspace=*|-ws|--workspaces|--workspaces=*) workspaces=1 ;;
        -g|--global|--global=*|--location|--location=*) exec "$program" "$@" ;;
        --) break ;;
    esac
done
if [ -n "$named" ] || [ -n "$workspaces" ]; then
    folder=$(cd "${named:-.}" 2>/dev/null && pwd) || exec "$program" "$@"  # npm says a prefix that is not there
    if [ -n "$workspaces" ]; then bins_above "$folder/." "the workspaces of $folder"; else bins_above "$folder" "$folder"; fi
    exec "$program" "$@"
fi
refuse() {
    echo "${0##*/}: not run: $1/.npmrc, a file the graded code could have written, would be read as the config of the project it runs" >&2
    exit 126
}
package=$PWD
while [ ! -e "${package%/}/package.json" ] && [ ! -d "${package%/}/node_modules" ]; do
    if [ -z "$package" ]; then  # no package here or above: npm's prefix is the current folder
        if [ -e .npmrc ] || [ -L .npmrc ]; then refuse "$PWD"; fi
        exec "$program" "$@"
    fi
    package=${package%/*}
done
if [ "$package" != "$PWD" ] && [ -e "${package%/}/package.json" ] \
    && made_by_the_check "${package%/}/package.json" && made_by_the_check "${package%/}/.npmrc"; then
    :  # the check's own package, made since it began (a subfolder of it is where npm runs)
elif [ "$package" != "$PWD" ]; then  # a package above: npm runs its scripts, reads its .npmrc
    echo "${0##*/}: not run: ${package:-/}, a package the graded code could have made (its package.json or node_modules) above the current folder, would be the project npm runs, its scripts and its .npmrc (run npm in the folder of the package it tests, or name it with --prefix)" >&2
    exit 126
fi
bins_above "$package" "${package:-/}"
if ! grep -q '"workspaces"' "${package%/}/package.json" 2>/dev/null; then
    exec "$program" --workspaces=false "$@"
fi
above=$package
while [ -n "$above" ] && [ "$above" != / ]; do
    above=${above%/*}
    if [ -e "$above/package.json" ] && { [ -e "$above/.npmrc" ] || [ -L "$above/.npmrc" ]; }; then refuse "${above:-/}"; fi
done
exec "$program" "$@"
