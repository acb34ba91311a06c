#!/bin/bash
# Stops the cluster that slurm/local/start.sh STATE_DIR started: cancels its jobs, then stops slurmd, slurmctld
# and (if start.sh started it) munged, each by the pid in its pid file. Safe to call twice, or after a start that
# failed half way.
set -uo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 STATE_DIR" >&2
  exit 1
fi
state=$(realpath -m "$1")
export SLURM_CONF="$state/slurm.conf"

# Stops the process in pid file $1 (TERM, then KILL after 15 s).
stop_by_pid_file() {
  local file=$1 name=$2 pid
  [ -s "$file" ] || return 0
  pid=$(cat "$file")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 150); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "$name (pid $pid) did not stop on SIGTERM: SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null
    fi
  fi
  rm -f "$file"
  echo "$name: stopped"
}

if [ -f "$SLURM_CONF" ] && [ -s "$state/slurmctld.pid" ] && kill -0 "$(cat "$state/slurmctld.pid")" 2>/dev/null; then
  jobs=$(squeue -h -o %i 2>/dev/null | tr '\n' ' ')
  if [ -n "${jobs// /}" ]; then
    echo "cancelling jobs: $jobs"
    # shellcheck disable=SC2086
    scancel $jobs 2>/dev/null
    for _ in $(seq 100); do
      [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break
      sleep 0.2
    done
  fi
fi
stop_by_pid_file "$state/slurmd.pid" slurmd
stop_by_pid_file "$state/slurmctld.pid" slurmctld
# munged serves every cluster of this machine: another one started beside this (which reused it) still needs it.
if pgrep -x slurmctld >/dev/null 2>&1; then
  [ -s "$state/munged.pid" ] && echo "munged: left running for the other Slurm cluster of this machine"
  rm -f "$state/munged.pid"
fi
stop_by_pid_file "$state/munged.pid" munged
exit 0
