# Sourced by the wrappers ./vim, ./vi, ./view, ./ex, ./vimdiff, ./rvim, ./rview and ./vim.basic
# (Debian's real file of vim, which its front at /usr/bin/vim and /usr/bin/vi leads to): runs the program of the
# wrapper's name (see ./curl), when it is Vim (or Neovim), with --clean, so that it reads no
# ~/.vimrc, ~/.vim (its plugins, its after/ folder, its packages) or ~/.viminfo of the graded
# code's: an `autocmd BufWritePre` there rewrote the answer's file as a check of
# `vim -c '%s/\s\+$//e' -c wq ~/answer.py` saved it, and the check then ran what the answer
# had put there. --clean skips the machine's /etc/vim/vimrc too (no option skips the home's
# alone): the check's vim is Vim's defaults. A check's own -u, given later, wins. A vi or ex
# that is no Vim (nvi, busybox) runs as it is. It runs with PATH as it was (see ./wrap.sh): a
# filter or a shell command of its (`:%!jq .`, `:!make`) runs through the wrappers: it ran the
# system's jq, which read the graded code's ~/.jq.
. "${0%/*}/wrap.sh" || exit
program=$(command -v "${0##*/}") || exec "${0##*/}" "$@"
PATH=$path_as_it_was
case $(readlink -f "$program") in
    *vim*) exec "$program" --clean "$@" ;;
esac
exec "$program" "$@"
