#!/bin/bash
# Starts a one-node Slurm cluster on this machine, for the `slurm` tests and for trying a study locally:
#   slurm/local/start.sh STATE_DIR     then   export SLURM_CONF=STATE_DIR/slurm.conf
#   slurm/local/stop.sh STATE_DIR
# munged (as its own user, if no munged answers yet), slurmctld and slurmd (as root), with slurm.conf generated
# from slurm.conf.in into STATE_DIR; state, spool, pid and log files all live under STATE_DIR. Needs root and
# Debian's slurm-wlm and munge packages (scripts/setup.sh installs them). Start the daemons only after Open MPI
# (and with it libpmix2) is installed: a slurmd started before cannot load PMIx, and `srun --mpi=pmix` fails.
# Environment: T5SCALE_SLURM_PORT (slurmctld's port; slurmd uses the next one; default: the first free pair from
# 6817 on, so that a cluster left running, or another one started beside it, is never the one answering),
# T5SCALE_SLURM_TIMEOUT_S (how long to wait for the node to be idle, default 120).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
if [ $# -ne 1 ]; then
  echo "usage: $0 STATE_DIR" >&2
  exit 1
fi
state=$(realpath -m "$1")
timeout_s=${T5SCALE_SLURM_TIMEOUT_S:-120}

fail() {
  echo "slurm/local/start.sh: $*" >&2
  exit 1
}

[ "$(id -u)" -eq 0 ] || fail "needs root: slurmd starts jobs as their users, and this cluster runs as SlurmUser=root"
for program in munged munge unmunge slurmctld slurmd sinfo scontrol; do
  command -v "$program" >/dev/null 2>&1 ||
    fail "'$program' is not installed: apt-get install slurm-wlm munge (scripts/setup.sh does it)"
done
if [ -e "$state/slurmctld.pid" ] && kill -0 "$(cat "$state/slurmctld.pid")" 2>/dev/null; then
  fail "a cluster is already running from $state (slurm/local/stop.sh $state first)"
fi
mkdir -p "$state/state" "$state/spool" "$state/log"

# Whether a process listens on TCP port $1 of this host.
port_in_use() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}
if [ -n "${T5SCALE_SLURM_PORT:-}" ]; then
  port=$T5SCALE_SLURM_PORT
else
  port=6817
  while port_in_use "$port" || port_in_use $((port + 1)); do
    port=$((port + 2))
    [ "$port" -lt 6917 ] || fail "no free pair of ports in 6817-6916 for slurmctld and slurmd"
  done
fi
for p in "$port" $((port + 1)); do
  port_in_use "$p" && fail "port $p is in use (a Slurm daemon left running? see ss -ltnp); set T5SCALE_SLURM_PORT"
done

# munge: the authentication of every Slurm message. Reuse a running munged, else start one as user munge.
if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  echo "munged: already running"
else
  if [ ! -s /etc/munge/munge.key ]; then
    mungekey --create --keyfile=/etc/munge/munge.key
    chown munge:munge /etc/munge/munge.key
    chmod 600 /etc/munge/munge.key
  fi
  mkdir -p /run/munge
  chown munge:munge /run/munge
  chmod 755 /run/munge
  su -s /bin/sh munge -c /usr/sbin/munged ||
    fail "munged did not start (see /var/log/munge/munged.log)"
  for _ in $(seq 50); do
    munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break
    sleep 0.1
  done
  munge -n | unmunge >/dev/null || fail "munged does not answer"
  # stop.sh stops munged only if this script started it.
  cp /run/munge/munged.pid "$state/munged.pid"
  echo "munged: started (pid $(cat "$state/munged.pid"))"
fi

# slurm.conf: this node as `slurmd -C` describes it, with a little less memory than it has (Slurm drains a
# node that reports less memory than configured). A job with more tasks per node than the node has CPUs is
# refused ("Requested node configuration is not available", even with --overcommit), so a node with fewer than
# T5SCALE_SLURM_MIN_CPUS (default 4) CPUs is declared with that many (SlurmdParameters=config_overrides makes
# slurmd report the configured counts): the demo's 4-rank run then fits on a 2-core machine.
node_line=$(slurmd -C | head -n 1)
real_memory=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$node_line")
cpus=$(sed -n 's/.* CPUs=\([0-9]*\).*/\1/p' <<<"$node_line")
[ -n "$real_memory" ] && [ -n "$cpus" ] || fail "slurmd -C printed no CPUs or RealMemory: $node_line"
node_name=$(sed -n 's/^NodeName=\([^ ]*\).*/\1/p' <<<"$node_line")
min_cpus=${T5SCALE_SLURM_MIN_CPUS:-4}
if [ "$cpus" -lt "$min_cpus" ]; then
  echo "slurm: node $node_name has $cpus CPUs; declared with $min_cpus (config_overrides)"
  node_line="NodeName=$node_name CPUs=$min_cpus Boards=1 SocketsPerBoard=1 CoresPerSocket=$min_cpus ThreadsPerCore=1"
  node_line+=" RealMemory=$real_memory"
fi
node_line=$(sed "s/RealMemory=[0-9]*/RealMemory=$((real_memory * 95 / 100))/" <<<"$node_line")
sed -e "s|@CLUSTER_NAME@|t5scale-local|" \
    -e "s|@HOSTNAME@|$(hostname)|" \
    -e "s|@SLURMCTLD_PORT@|$port|" \
    -e "s|@SLURMD_PORT@|$((port + 1))|" \
    -e "s|@STATE_DIR@|$state|g" \
    -e "s|@NODE_LINE@|$node_line|" \
    -e "s|@NODE_NAME@|$node_name|" \
    -e "s|@PARTITION@|local|" \
    "$here/slurm.conf.in" >"$state/slurm.conf"
export SLURM_CONF="$state/slurm.conf"

slurmctld -f "$SLURM_CONF" || fail "slurmctld did not start: $(tail -n 20 "$state/log/slurmctld.log" 2>/dev/null)"
slurmd -f "$SLURM_CONF" || fail "slurmd did not start: $(tail -n 20 "$state/log/slurmd.log" 2>/dev/null)"

# Wait for the node to be idle.
deadline=$((SECONDS + timeout_s))
node_state=""
problem=""
while [ $SECONDS -lt $deadline ]; do
  node_state=$(sinfo -h -N -o %T 2>/dev/null | head -n 1 || true)
  [ "$node_state" = "idle" ] && break
  for daemon in slurmctld slurmd; do
    if [ -s "$state/$daemon.pid" ] && ! kill -0 "$(cat "$state/$daemon.pid")" 2>/dev/null; then
      problem="$daemon exited"
    fi
  done
  [ -n "$problem" ] && break
  sleep 0.5
done
if [ "$node_state" != "idle" ]; then
  [ -n "$problem" ] || problem="node $node_name is '${node_state:-not reported}' after ${timeout_s} s, not idle"
  echo "slurm/local/start.sh: $problem" >&2
  echo "--- slurmctld.log" >&2
  tail -n 30 "$state/log/slurmctld.log" >&2 || true
  echo "--- slurmd.log" >&2
  tail -n 30 "$state/log/slurmd.log" >&2 || true
  exit 1
fi
echo "slurm: node $node_name idle (cluster t5scale-local, partition local); export SLURM_CONF=$SLURM_CONF"
