#!/usr/bin/env bash
# Start or stop a Docker daemon for the docker provider's tests and benchmarks.
#
#   scripts/dockerd.sh start    if no daemon answers, start one and wait until it does;
#                               prints "started PID" (ours) or "running" (someone else's)
#   scripts/dockerd.sh stop     stop the daemon this script started (by its recorded pid)
#   scripts/dockerd.sh status   "running", "ours PID" or "stopped"
#
# The daemon is started exactly as `dockerd --bridge=none --iptables=false`: containers of the
# docker provider run with --network none, so no bridge, no NAT rule, nothing on the host's
# network changes. Its pid and log live in $PARALLEL_ROLLOUT_DOCKERD_DIR (default
# /tmp/parallel-rollout-dockerd); `stop` only ever signals that recorded pid, and only while
# it is still a dockerd (a pid may be reused).
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"  # dockerd lives in sbin, which a plain user's PATH lacks

state_dir="${PARALLEL_ROLLOUT_DOCKERD_DIR:-/tmp/parallel-rollout-dockerd}"
pid_file="$state_dir/dockerd.pid"
log_file="$state_dir/dockerd.log"
wait_s="${PARALLEL_ROLLOUT_DOCKERD_WAIT_S:-60}"
# Where dockerd keeps its pid file and, under its exec root, its containerd's: a daemon killed
# by SIGKILL (a session torn down with everything in it) leaves both behind, and neither
# starts again while its file names a process that exists, a zombie too
run_dir="${PARALLEL_ROLLOUT_DOCKERD_RUN_DIR:-/var/run}"
daemon_pid_file="$run_dir/docker.pid"
containerd_pid_file="$run_dir/docker/containerd/containerd.pid"

alive() {
  # running, not a zombie (a test session that adopts orphans reaps it only later)
  local state
  state="$(sed -n 's/^[0-9]* (.*) \([A-Z]\).*/\1/p' "/proc/$1/stat" 2>/dev/null)" || return 1
  [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

answers() { timeout 10 docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

is_a() {
  # is_a PID NAME: PID's command is NAME (a zombie's is empty)
  [ -n "$1" ] && [ -r "/proc/$1/cmdline" ] || return 1
  tr '\0' ' ' < "/proc/$1/cmdline" | grep -q "^[^ ]*$2 "
}

running() { alive "$1" && is_a "$1" "$2"; }  # running PID NAME

recorded_pid() {
  # the recorded pid, if it is still a dockerd process
  [ -f "$pid_file" ] || return 1
  local pid
  pid="$(cat "$pid_file")"
  is_a "$pid" dockerd || return 1
  echo "$pid"
}

clear_stale_pid_files() {
  # A daemon still going down (signalled by someone else) gets the time a stop gives it; a
  # pid file whose process is gone, a zombie or another program is removed, as dockerd's own
  # "pid file found, ... delete /var/run/docker.pid" asks. A live containerd is left: the
  # new daemon takes it over.
  local pid
  pid="$(cat "$daemon_pid_file" 2>/dev/null || true)"
  for _ in $(seq 150); do
    running "$pid" dockerd || break
    sleep 0.2
  done
  if running "$pid" dockerd; then
    echo "dockerd $pid (of $daemon_pid_file) runs but does not answer; stop it or see its log" >&2
    return 1
  fi
  if [ -f "$daemon_pid_file" ]; then
    echo "removing $daemon_pid_file: it names no running dockerd (pid $pid)" >&2
    rm -f "$daemon_pid_file"
  fi
  pid="$(cat "$containerd_pid_file" 2>/dev/null || true)"
  if [ -f "$containerd_pid_file" ] && ! running "$pid" containerd; then
    echo "removing $containerd_pid_file: it names no running containerd (pid $pid)" >&2
    rm -f "$containerd_pid_file"
  fi
}

start() {
  if answers; then
    echo running
    return 0
  fi
  if ! command -v dockerd >/dev/null 2>&1; then
    echo "dockerd is not installed; install it with: apt-get install docker.io" >&2
    return 1
  fi
  if [ "$(id -u)" -ne 0 ]; then
    echo "starting dockerd needs root; start it with: sudo dockerd --bridge=none --iptables=false" >&2
    return 1
  fi
  if pid="$(recorded_pid)"; then
    echo "dockerd $pid (started earlier by this script) does not answer; see $log_file" >&2
    return 1
  fi
  clear_stale_pid_files || return 1
  mkdir -p "$state_dir"
  # setsid: the daemon must not die with the shell or the test session's process group
  setsid dockerd --bridge=none --iptables=false >>"$log_file" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$pid_file"
  deadline=$((SECONDS + wait_s))
  until answers; do
    if ! alive "$pid"; then
      echo "dockerd exited at start; its log ($log_file) ends with:" >&2
      tail -n 15 "$log_file" >&2
      rm -f "$pid_file"
      return 1
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "dockerd $pid did not answer within ${wait_s}s; see $log_file" >&2
      return 1
    fi
    sleep 0.2
  done
  echo "started $pid"
}

stop() {
  local pid
  if ! pid="$(recorded_pid)"; then
    rm -f "$pid_file"
    echo "not ours"
    return 0
  fi
  kill -TERM "$pid"
  # dockerd stops its containers and its containerd first; give it the time it needs
  for _ in $(seq 150); do
    alive "$pid" || break
    sleep 0.2
  done
  if alive "$pid"; then
    echo "dockerd $pid ignored SIGTERM for 30s; killing it" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pid_file"
  echo "stopped $pid"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status)
    if pid="$(recorded_pid)"; then echo "ours $pid"
    elif answers; then echo running
    else echo stopped; fi ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
