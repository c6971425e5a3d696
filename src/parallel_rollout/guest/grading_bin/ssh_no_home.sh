# Sourced by the wrappers ./ssh, ./scp and ./sftp: runs the program of the wrapper's name (see
# ./curl) with -F the machine's ssh_config (/dev/null without one), so that it reads no
# ~/.ssh/config of the graded code's, whose `Match exec` runs a command of its choosing even
# under `ssh -G` (it wrote the file a check read next), and whose ProxyCommand, LocalCommand
# or KnownHostsCommand run others on a connection. A check's own -F, given later, wins (and
# with ~/.ssh/config runs what it names); ~/.ssh's keys and known_hosts are still read.
. "${0%/*}/wrap.sh" || exit
config=/etc/ssh/ssh_config
[ -f "$config" ] || config=/dev/null
exec "${0##*/}" -F "$config" "$@"
