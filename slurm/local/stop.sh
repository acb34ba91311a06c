#!/bin/bash
# Stops the cluster that slurm/local/start.sh [--nodes N] STATE_DIR started: cancels its jobs, then stops every
# slurmd, slurmctld and (if start.sh started it) munged, each by the pid in its pid file. With several nodes it
# then ends whatever still runs in the nodes' network namespaces (job steps, orted, ranks) and removes the
# namespaces, veth pairs and the bridge that STATE_DIR/network lists. Last it removes the cluster's short folder
# (STATE_DIR/sockets: the spool and the nodes' TmpFS) and the symlinks to it. Safe to call twice, or after a start
# that failed half way.
set -uo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 STATE_DIR" >&2
  exit 1
fi
state=$(realpath -m "$1")
export SLURM_CONF="$state/slurm.conf"

# Stops the processes of the pid files given: SIGTERM to all at once (a daemon takes about 2 s to stop), SIGKILL
# to any left after 15 s; removes the pid files. A daemon is named by its file: slurmd.t5n1.pid is "slurmd of t5n1".
stop_by_pid_files() {
  local file pid name running
  local -A pids=()
  for file in "$@"; do
    [ -s "$file" ] || continue
    pid=$(cat "$file")
    pids[$file]=$pid
    kill -TERM "$pid" 2>/dev/null
  done
  for _ in $(seq 150); do
    running=""
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && running=1; done
    [ -z "$running" ] && break
    sleep 0.1
  done
  for file in "$@"; do
    [ -n "${pids[$file]:-}" ] || continue
    pid=${pids[$file]}
    name=$(basename "$file" .pid)
    name=${name/./ of }
    if kill -0 "$pid" 2>/dev/null; then
      echo "$name (pid $pid) did not stop on SIGTERM: SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null
    fi
    rm -f "$file"
    echo "$name: stopped"
  done
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
# One slurmd (slurmd.pid), or one per node of a multi-node cluster (slurmd.<node>.pid), all at once; then slurmctld.
stop_by_pid_files "$state"/slurmd.pid "$state"/slurmd.*.pid
stop_by_pid_files "$state/slurmctld.pid"

# The network of a multi-node cluster, as start.sh listed it (each thing before it made it). Processes left in a
# namespace (a job step that outlived its slurmd) are ended first: a namespace is only gone when nothing uses it.
network="$state/network"
if [ -f "$network" ]; then
  while read -r kind name; do
    [ "$kind" = netns ] || continue
    ip netns list 2>/dev/null | grep -qw "^$name" || continue
    pids=$(ip netns pids "$name" 2>/dev/null | tr '\n' ' ')
    if [ -n "${pids// /}" ]; then
      echo "netns $name: ending processes $pids"
      # shellcheck disable=SC2086
      kill -TERM $pids 2>/dev/null
      for _ in $(seq 50); do
        [ -z "$(ip netns pids "$name" 2>/dev/null)" ] && break
        sleep 0.1
      done
      pids=$(ip netns pids "$name" 2>/dev/null | tr '\n' ' ')
      # shellcheck disable=SC2086
      [ -n "${pids// /}" ] && kill -KILL $pids 2>/dev/null
    fi
  done <"$network"
  left=""
  while read -r kind name; do
    case $kind in
      netns)
        if ip netns list 2>/dev/null | grep -qw "^$name"; then
          ip netns del "$name" && echo "netns $name: removed" || left+=" $name"
        fi
        ;;
      veth | bridge)
        # Removing a namespace may leave its veth pair for a moment: removing it again is harmless.
        if ip link show "$name" >/dev/null 2>&1; then
          ip link del "$name" 2>/dev/null && echo "$kind $name: removed"
          ip link show "$name" >/dev/null 2>&1 && left+=" $name"
        fi
        ;;
    esac
  done < <(grep '^netns ' "$network"; grep '^veth ' "$network"; grep '^bridge ' "$network")
  # The list stays while something on it could not be removed, so that another stop.sh can try again.
  if [ -z "$left" ]; then
    rm -f "$network"
  else
    echo "could not remove:$left (listed in $network)" >&2
  fi
fi

# The short folder (after every process that could use it has ended), if it is this cluster's: its owner file
# names this state folder. The symlinks into it go with it.
short=$(readlink "$state/sockets" 2>/dev/null)
if [ -n "$short" ]; then
  if [ "$(cat "$short/owner" 2>/dev/null)" = "$state" ]; then
    rm -rf "$short" || echo "could not remove the cluster's short folder $short" >&2
  elif [ -e "$short" ]; then
    echo "left $short: its owner file does not name $state" >&2
  fi
fi
for link in "$state/sockets" "$state/spool" "$state/tmp" "$state"/tmp.*; do
  [ -L "$link" ] && rm -f "$link"
done

# munged serves every cluster of this machine: another one started beside this (which reused it) still needs it.
if pgrep -x slurmctld >/dev/null 2>&1; then
  [ -s "$state/munged.pid" ] && echo "munged: left running for the other Slurm cluster of this machine"
  rm -f "$state/munged.pid"
fi
stop_by_pid_files "$state/munged.pid"
exit 0
