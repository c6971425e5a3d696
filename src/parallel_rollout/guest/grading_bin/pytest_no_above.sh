# Sourced by the wrappers ./pytest, ./py.test and ./python3 (for `python3 -m pytest`): finds the
# program of the wrapper's name (see ./wrap.sh) in $program, to be run with PATH as it was (the
# wrappers' folder kept for what it runs: a test's `git status` is the wrapped git), and defines
# pytest_pin, which pins pytest's config, rootdir and conftest.py files to the folder it runs
# from. pytest climbs from its tests' folder to the first folder with an ini file (pytest.ini,
# pytest.toml, tox.ini's [pytest], setup.cfg's [tool:pytest], pyproject.toml's [tool.pytest...])
# and reads it as its config, and loads the conftest.py files of every folder above its tests
# up to that one (up to / with none): the graded code's /tmp/pytest.ini of `addopts = --co`
# (collect only) or its /tmp/conftest.py that ended the run with 0 passed a check's failing
# tests in a `mktemp -d` folder. The folder pytest runs from is the current one when the tests
# it names lie in it or below (none named: the current one), else (or from /) their common folder: an ini
# file there or between it and the tests is passed as -c, with none pytest gets --rootdir and
# --confcutdir of that folder (or of a setup.py's folder on the way, pytest's own rootdir),
# and pytest is not run at all (126, saying why) below an ini file above it. A check's own -c
# (--config-file) runs pytest as the check asks; its own --rootdir or --confcutdir wins. From
# the home itself (its tests there, or run from there with tests below it) pytest is not run
# (126) beside an ini file or a conftest.py in the home, which the graded code writes without
# guessing a folder's name: its ~/pytest.ini of `addopts = --co` passed `cd ~ && pytest
# ~/test_check.py` of a check's failing tests. A project's own config in a folder of the home
# (cd ~/proj && pytest) is read as ever. Tests in the home (or in ./graded_folders themselves:
# /tmp, /var/tmp, /dev/shm, /run/lock …) run with --import-mode=append (a check's own --import-mode wins): pytest put their
# folder first on sys.path, and the graded code's ~/fractions.py (os._exit(0)) was what the
# check's tests imported; its own module the tests import is still found, after the system's.
# Nor is pytest run (126) where the folders of its tests' packages (each up from them with an
# __init__.py) reach the home or one of ./graded_folders with an __init__.py the check did not
# make: pytest imports it as their package, and the graded code's ~/__init__.py (os._exit(0))
# passed `cd ~ && pytest test_check.py` of a check's failing tests.

. "${0%/*}/wrap.sh" || exit
if [ "${0##*/}" != pytest_judge ]; then  # ./pytest_judge runs no program: it judges
    program=$(command -v "${0##*/}") || exec "${0##*/}" "$@"
fi
PATH=$path_as_it_was

pytest_ini_in() {  # the first file of folder $1 that pytest takes for its config, in $found
    for name in pytest.toml .pytest.toml pytest.ini .pytest.ini; do
        if [ -f "$1/$name" ]; then found=$1/$name; return 0; fi
    done
    found=$1/pyproject.toml
    if [ -f "$found" ] && pytest_toml_table "$found"; then return 0; fi
    found=$1/tox.ini
    if [ -f "$found" ] && grep -q '^[[:space:]]*\[pytest\]' "$found"; then return 0; fi
    found=$1/setup.cfg
    if [ -f "$found" ] && grep -q '^[[:space:]]*\[tool:pytest\]' "$found"; then return 0; fi
    found=
    return 1
}

pytest_toml_table() {  # the TOML file $1 has a tool.pytest table, however its keys are spelled
    # (["tool".pytest.ini_options], an inline table tool = {pytest = ...}: a grep for a header
    # missed both, and /tmp/pyproject.toml's addopts = "--co" passed failing tests); a file
    # that does not parse is none (pytest stops at it); with no TOML parser, every one is
    python3 -I -c 'import sys
try:
    import tomllib
except ImportError:
    try:
        import tomli as tomllib
    except ImportError:
        sys.exit(0)
try:
    with open(sys.argv[1], "rb") as f:
        tool = tomllib.load(f).get("tool")
except Exception:
    sys.exit(1)
sys.exit(0 if isinstance(tool, dict) and "pytest" in tool else 1)' "$1" 2>/dev/null
}

pytest_none_of_home() {  # pytest runs from the home itself: no ini file or conftest.py there
    if pytest_ini_in "$base"; then pytest_home_refuse; fi
    found=$base/conftest.py
    if [ -f "$found" ] || [ -L "$found" ]; then pytest_home_refuse; fi
}

pytest_home_refuse() {
    echo "pytest: not run: $found, a file the graded code could have written in the home, would be read as pytest's config or conftest.py (write the tests, and their config, to a folder of their own, d=\$(mktemp -d), and run pytest there)" >&2
    exit 126
}

pytest_pin() {  # $1: how many of the words after it are not pytest's; sets pin_c, pin_rootdir, pin_cut, pin_import
    shift "$(($1 + 1))"
    # the pytest this wrapper execs (its pid: $$) is judged: ./sitecustomize.py judges it no more
    export PARALLEL_ROLLOUT_PYTEST_JUDGED=$$
    pin_c= pin_rootdir= pin_cut= pin_import= own_c= own_import= own_rootdir= own_cut= skip= top= any=
    # the home: HOME, and the graded code's as the grading environment set it, which a check's own
    # HOME (HOME=/nonexistent, env -u HOME) does not move; either stands for the other when unset
    home=${HOME%/} graded_home=${PARALLEL_ROLLOUT_GRADED_HOME%/}
    home=${home:-$graded_home} graded_home=${graded_home:-$home}
    for arg; do
        if [ -n "$skip" ]; then skip=; continue; fi
        case $arg in
            -c|--config-file) own_c=1 skip=1 ;;
            -c?*|--config-file=*) own_c=1 ;;
            --import-mode|--import-mode=*) own_import=1 ;;
            --rootdir) own_rootdir=1 skip=1 ;;
            --rootdir=*) own_rootdir=1 ;;
            --confcutdir) own_cut=1 skip=1 ;;
            --confcutdir=*) own_cut=1 ;;
            -k|-m|-p|-o|-W|-r|--override-ini|--basetemp|--deselect|--ignore|--ignore-glob|--junitxml|--junit-xml|--log-file|--tb|--durations|--maxfail|--capture|--color)
                skip=1 ;;
            --) ;;
            -*) ;;
            *)
                dir=${arg%%::*}
                if [ -e "$dir" ]; then
                    if [ ! -d "$dir" ]; then
                        case $dir in */*) dir=${dir%/*} ;; *) dir=. ;; esac
                    fi
                    if dir=$(cd "${dir:-/}" 2>/dev/null && pwd); then
                        dir=${dir%/}
                        if [ -z "$any" ]; then top=$dir any=1; fi
                        while case $dir/ in "$top"/*) false ;; *) true ;; esac; do top=${top%/*}; done
                    fi
                fi ;;
        esac
    done
    here=${PWD%/}
    if [ -z "$any" ]; then top=$here; fi
    if [ -z "$own_import" ]; then  # tests in a folder the graded code writes: its modules after the system's
        case $top/ in
            "$home"/*|"$graded_home"/*) if [ -n "$home" ]; then pin_import=append; fi ;;
            *) if [ -n "$home" ] && graded_folder "$top"; then pin_import=append; fi ;;
        esac
    fi
    dir=$top  # the tests' packages: pytest imports the __init__.py of each folder up from them that has one
    while [ -n "$dir" ] && { [ -f "$dir/__init__.py" ] || [ -L "$dir/__init__.py" ]; }; do
        if [ "$dir" = "$home" ] || [ "$dir" = "$graded_home" ] || graded_folder "$dir"; then
            if ! made_by_the_check "$dir/__init__.py"; then
                echo "pytest: not run: $dir/__init__.py, a file the graded code could have written, would be imported as the package of the tests (write them to a folder of their own, d=\$(mktemp -d), and run pytest there)" >&2
                exit 126
            fi
        fi
        dir=${dir%/*}
    done
    if [ -n "$own_c" ]; then return; fi
    case $top/ in "${here:-/nowhere}"/*) base=$here ;; *) base=$top ;; esac  # never / itself
    if [ -n "$home" ] && { [ "$base" = "$home" ] || [ "$base" = "$graded_home" ]; }; then pytest_none_of_home; fi
    dir=$top setup=
    while :; do
        if pytest_ini_in "$dir"; then pin_c=$found; return; fi
        if [ -z "$setup" ] && [ -f "$dir/setup.py" ]; then setup=$dir; fi
        if [ "$dir" = "$base" ]; then break; fi
        dir=${dir%/*}
    done
    dir=$base
    while [ -n "$dir" ]; do
        dir=${dir%/*}
        if pytest_ini_in "$dir"; then
            echo "pytest: not run: $found, a file the graded code could have written, would be read as pytest's config (run pytest from the folder of its own config, or name it with -c)" >&2
            exit 126
        fi
    done
    if [ -z "$own_rootdir" ]; then pin_rootdir=${setup:-$base}; pin_rootdir=${pin_rootdir:-/}; fi
    if [ -z "$own_cut" ]; then pin_cut=${setup:-$base}; pin_cut=${pin_cut:-/}; fi
}
