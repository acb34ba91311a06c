#!/bin/bash
# Starts a local Slurm cluster on this machine, for the `slurm` and `multinode` tests and for trying a study:
#   slurm/local/start.sh [--nodes N] STATE_DIR     then   export SLURM_CONF=STATE_DIR/slurm.conf
#   slurm/local/stop.sh STATE_DIR
#   slurm/local/start.sh --restart NODE STATE_DIR  starts node NODE (t5n<i>) of a running multi-node cluster again
#                                                  after it was killed, and returns it to service
# munged (as its own user, if no munged answers yet), slurmctld and slurmd (as root), with slurm.conf generated
# from slurm.conf.in into STATE_DIR; state, pid and log files live under STATE_DIR, and what holds Unix sockets
# (slurmd's spool, the nodes' TmpFS) in a short folder of its own, /tmp/t5s-<hash of STATE_DIR>, which
# STATE_DIR/sockets (a symlink) names and stop.sh removes: a socket's path may have at most 107 bytes, and slurmd's
# step sockets under a deep STATE_DIR (a build tree in a long clone path) would not fit. Needs root and
# Debian's slurm-wlm and munge packages (scripts/setup.sh installs them). Start the daemons only after Open MPI
# (and with it libpmix2) is installed: a slurmd started before cannot load PMIx, and `srun --mpi=pmix` fails.
# --nodes N (1 to 4, default 1): with 1, one slurmd in this machine's own network (the node is this host); with
# 2 to 4, N nodes t5n1..t5nN, each a slurmd in its own network and UTS namespace (its own hostname and address on a
# Linux bridge, /etc/hosts replaced by STATE_DIR/hosts in its own mount namespace), slurmctld in this machine's
# namespace on the bridge's address. slurm/README.md, "The local multi-node cluster", describes it.
# Environment: T5SCALE_SLURM_PORT (slurmctld's port; slurmd uses the next one; default: the first free pair from
# 6817 on, so that a cluster left running, or another one started beside it, is never the one answering),
# T5SCALE_SLURM_TIMEOUT_S (how long to wait for the nodes to be idle, default 120), T5SCALE_SLURM_SOCKET_ROOT
# (the folder the short folder is made in, default /tmp); with several nodes also
# T5SCALE_SLURM_SUBNET (the bridge's /24 as A.B.C.0/24; default: the first 10.231.X.0/24 that no address or
# route of this machine uses) and T5SCALE_SLURM_NODE_CPUS (CPUs declared per node, default 2).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
usage() {
  echo "usage: $0 [--nodes N] STATE_DIR   (N from 1 to 4, default 1)" >&2
  echo "       $0 --restart NODE STATE_DIR" >&2
  exit 1
}
nodes=1
restart=""
state_arg=""
while [ $# -gt 0 ]; do
  case $1 in
    --nodes) [ $# -ge 2 ] || usage; nodes=$2; shift 2 ;;
    --nodes=*) nodes=${1#--nodes=}; shift ;;
    --restart) [ $# -ge 2 ] || usage; restart=$2; shift 2 ;;
    -*) usage ;;
    *) [ -z "$state_arg" ] || usage; state_arg=$1; shift ;;
  esac
done
[ -n "$state_arg" ] || usage
case $nodes in 1 | 2 | 3 | 4) ;; *) echo "$0: --nodes must be 1, 2, 3 or 4, not '$nodes'" >&2; exit 1 ;; esac
state=$(realpath -m "$state_arg")
timeout_s=${T5SCALE_SLURM_TIMEOUT_S:-120}

fail() {
  echo "slurm/local/start.sh: $*" >&2
  exit 1
}

# The short folder of this state folder: named from a hash of STATE_DIR's real path, so that the same state folder
# always gets the same one and two clusters never share one. slurmd makes its step sockets in its spool folder
# (<spool>/<node>_<job>.<step>, and the PMIx plugin's <spool>/stepd.slurm.pmix.<job>.<step>); under a build tree
# in a long clone path those pass the 107 bytes a Unix socket path may have, and every job then sits in "launch
# failed requeued held". The nodes' TmpFS (PMIx's client folders) goes there too.
socket_root=$(realpath -m "${T5SCALE_SLURM_SOCKET_ROOT:-/tmp}")
short="$socket_root/t5s-$(printf '%s' "$state" | sha256sum | cut -c 1-12)"
# The longest path a Unix socket may have: sun_path holds 108 bytes with the closing NUL.
max_socket_path=107

[ "$(id -u)" -eq 0 ] || fail "needs root: slurmd starts jobs as their users, and this cluster runs as SlurmUser=root"
for program in munged munge unmunge slurmctld slurmd sinfo scontrol; do
  command -v "$program" >/dev/null 2>&1 ||
    fail "'$program' is not installed: apt-get install slurm-wlm munge (scripts/setup.sh does it)"
done
if [ "$nodes" -gt 1 ] || [ -n "$restart" ]; then
  for program in ip unshare nsenter; do
    command -v "$program" >/dev/null 2>&1 ||
      fail "'$program' is not installed: several nodes need iproute2 and util-linux (apt-get install iproute2)"
  done
fi

# Starts the slurmd of node $2 (t5n<i>) in network namespace $1: in a new UTS namespace (its hostname) and mount
# namespace (its /etc/hosts; unshare makes the mounts private, so the bind mount stays inside). slurmd forks into
# the background and keeps the namespaces; its job steps (slurmstepd, srun, orted, the ranks) inherit them.
# nsenter, not `ip netns exec`: that one mounts a fresh /sys, without the cgroup mounts slurmd's cgroup plugin needs.
start_node_slurmd() {
  # shellcheck disable=SC2016  # the inner shell expands its own arguments
  nsenter --net="/run/netns/$1" -- unshare --uts --mount -- /bin/sh -c \
    'hostname "$1" && mount --bind "$2" /etc/hosts && mount --bind "$3.$1" "$3" && exec slurmd -f "$4" -N "$1"' \
    sh "$2" "$state/hosts" "$short/tmp" "$state/slurm.conf" ||
    fail "slurmd of $2 did not start: $(tail -n 20 "$state/log/slurmd.$2.log" 2>/dev/null)"
}

# --restart: the node's network namespace is still there (STATE_DIR/network); its slurmd starts again, and the
# node, down since it was lost, is returned to service and waited for (idle).
if [ -n "$restart" ]; then
  export SLURM_CONF="$state/slurm.conf"
  if [ ! -s "$state/slurmctld.pid" ] || ! kill -0 "$(cat "$state/slurmctld.pid")" 2>/dev/null; then
    fail "no cluster runs from $state"
  fi
  short=$(readlink "$state/sockets") || fail "$state/sockets does not name the cluster's short folder"
  netns=$(sed -n "s/^netns \(.*-$restart\)$/\1/p" "$state/network" 2>/dev/null)
  [ -n "$netns" ] || fail "$state/network lists no node $restart"
  if [ -s "$state/slurmd.$restart.pid" ] && kill -0 "$(cat "$state/slurmd.$restart.pid")" 2>/dev/null; then
    fail "the slurmd of $restart still runs"
  fi
  start_node_slurmd "$netns" "$restart"
  scontrol update nodename="$restart" state=resume 2>/dev/null || true  # not down (yet): nothing to resume
  deadline=$((SECONDS + timeout_s))
  until [ "$(sinfo -h -n "$restart" -o %T 2>/dev/null)" = idle ]; do
    [ $SECONDS -lt $deadline ] ||
      fail "$restart is '$(sinfo -h -n "$restart" -o %T 2>&1)' after ${timeout_s} s, not idle"
    sleep 0.5
  done
  echo "slurm: node $restart idle again"
  exit 0
fi

if [ -e "$state/slurmctld.pid" ] && kill -0 "$(cat "$state/slurmctld.pid")" 2>/dev/null; then
  fail "a cluster is already running from $state (slurm/local/stop.sh $state first)"
fi

# The nodes' names: this machine's (one node), or t5n1..t5nN. Their spool folders and step sockets are named by them.
if [ "$nodes" -eq 1 ]; then
  node_names=$(slurmd -C | sed -n '1s/^NodeName=\([^ ]*\).*/\1/p')
  [ -n "$node_names" ] || fail "slurmd -C printed no NodeName: $(slurmd -C 2>&1 | head -n 1)"
else
  node_names=$(seq -f 't5n%g' "$nodes")
fi
# A path that cannot work is refused here, not found by slurmd at the first job: the longest socket path a step
# can have on any node, with a job id and a step id of 10 digits each (the most a 32-bit id has; the batch step
# is 4294967291).
longest=""
for node in $node_names; do
  spool="$short/spool"
  [ "$nodes" -gt 1 ] && spool+="/$node"
  for socket in "$spool/${node}_4294967295.4294967295" "$spool/stepd.slurm.pmix.4294967295.4294967295"; do
    [ ${#socket} -gt ${#longest} ] && longest=$socket
  done
done
if [ ${#longest} -gt $max_socket_path ]; then
  fail "slurmd's step sockets would not fit: $longest has ${#longest} bytes, over the $max_socket_path a Unix" \
       "socket path may have; set T5SCALE_SLURM_SOCKET_ROOT to a folder with a shorter path than $socket_root"
fi

# The short folder, made afresh (one left by a cluster that was killed holds nothing of use), with a file naming
# its state folder (so that a folder of another cluster is never taken), and STATE_DIR/sockets pointing at it.
# STATE_DIR/spool, tmp and tmp.<node> point into it too: where these were before, for a person looking, for the
# tests and for the nodes' processes (STATE_DIR/tmp inside node i is its own TmpFS).
if [ -e "$short" ] || [ -L "$short" ]; then
  owner=$(cat "$short/owner" 2>/dev/null)
  [ "$owner" = "$state" ] ||
    fail "$short is not this cluster's folder (its owner file names '${owner:-nothing}', not $state):" \
         "remove it, or set T5SCALE_SLURM_SOCKET_ROOT"
  rm -rf "$short"
fi
mkdir -p "$short/spool" || fail "cannot make the cluster's short folder $short"
echo "$state" >"$short/owner"
mkdir -p "$state/state" "$state/log"
# (A folder of the layout before the short folder, from an older start, is replaced by the symlink.)
link_into_short() {
  if [ -e "$state/$1" ] && [ ! -L "$state/$1" ]; then rm -rf "${state:?}/$1"; fi
  ln -sfn "$short/$1" "$state/$1" || fail "cannot make the symlink $state/$1"
}
ln -sfn "$short" "$state/sockets" || fail "cannot make the symlink $state/sockets"
link_into_short spool

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

# ---- Several nodes: one network namespace each, on a bridge ----
# Node i is t5n<i>: a network namespace with the address .1<i> of the bridge's /24 (veth pair, one end on the
# bridge), and, once slurmd starts, its own UTS namespace (hostname t5n<i>) and mount namespace, in which
# STATE_DIR/hosts replaces /etc/hosts (every node resolves every other by name, and nothing of this machine's
# /etc changes) and STATE_DIR/tmp.t5n<i> replaces STATE_DIR/tmp (the node's TmpFS). slurmctld stays in this
# machine's namespace and is reached at the bridge's .1. Every thing made is first written to
# STATE_DIR/network, which stop.sh reads to remove it, also after a start that failed half way.
if [ "$nodes" -gt 1 ]; then
  network="$state/network"
  [ -s "$network" ] &&
    fail "$state holds the network of an earlier start ($network): slurm/local/stop.sh $state first"
  : >"$network"
  # Whether this machine has an address or a route in the /24 of prefix $1 (A.B.C).
  subnet_in_use() {
    ip -4 -o addr show | grep -qF " $1." || ip -4 route show | grep -q "^${1//./\\.}\."
  }
  # The bridge's name is made from the subnet's third number: making it claims the subnet, so that two clusters
  # started at the same time never share one.
  bridge=""
  if [ -n "${T5SCALE_SLURM_SUBNET:-}" ]; then
    [[ $T5SCALE_SLURM_SUBNET =~ ^([0-9]+\.[0-9]+\.([0-9]+))\.0/24$ ]] ||
      fail "T5SCALE_SLURM_SUBNET must be a /24 written A.B.C.0/24, not '$T5SCALE_SLURM_SUBNET'"
    prefix=${BASH_REMATCH[1]}
    tag=${BASH_REMATCH[2]}
    subnet_in_use "$prefix" && fail "T5SCALE_SLURM_SUBNET $T5SCALE_SLURM_SUBNET is already used on this machine"
    ip link add "t5sbr$tag" type bridge || fail "cannot make the bridge t5sbr$tag (another cluster's?)"
    bridge=t5sbr$tag
  else
    for tag in $(seq 0 255); do
      prefix=10.231.$tag
      subnet_in_use "$prefix" && continue
      ip link show "t5sbr$tag" >/dev/null 2>&1 && continue
      if ip link add "t5sbr$tag" type bridge 2>/dev/null; then
        bridge=t5sbr$tag
        break
      fi
    done
    [ -n "$bridge" ] || fail "no free subnet 10.231.X.0/24 (or ip link add type bridge fails: is this root?)"
  fi
  echo "bridge $bridge" >>"$network"
  echo "subnet $prefix.0/24" >>"$network"
  ip addr add "$prefix.1/24" dev "$bridge" || fail "cannot give the bridge $bridge the address $prefix.1/24"
  ip link set "$bridge" up || fail "cannot bring the bridge $bridge up"

  {
    echo "# /etc/hosts of the nodes of the local Slurm cluster in $state (slurm/local/start.sh)"
    echo "127.0.0.1 localhost"
    echo "$prefix.1 $(hostname) t5ctl"
    for i in $(seq "$nodes"); do
      echo "$prefix.$((10 + i)) t5n$i"
    done
  } >"$state/hosts"

  for i in $(seq "$nodes"); do
    ns=t5s$tag-t5n$i
    veth=t5s${tag}v$i
    echo "netns $ns" >>"$network"
    ip netns add "$ns" || fail "ip netns add $ns failed (is 'ip netns' available here?)"
    echo "veth $veth" >>"$network"
    ip link add "$veth" type veth peer name "t5s${tag}p$i" || fail "cannot make the veth pair $veth"
    ip link set "t5s${tag}p$i" netns "$ns" || fail "cannot move t5s${tag}p$i into $ns"
    ip link set "$veth" master "$bridge" || fail "cannot attach $veth to $bridge"
    ip link set "$veth" up || fail "cannot bring $veth up"
    ip netns exec "$ns" ip link set "t5s${tag}p$i" name eth0 || fail "cannot rename the veth in $ns"
    ip netns exec "$ns" ip addr add "$prefix.$((10 + i))/24" dev eth0 || fail "cannot address eth0 in $ns"
    ip netns exec "$ns" ip link set eth0 up || fail "cannot bring eth0 up in $ns"
    # Open MPI and PMIx talk to themselves over loopback too.
    ip netns exec "$ns" ip link set lo up || fail "cannot bring lo up in $ns"
  done
  echo "network: bridge $bridge $prefix.1/24; nodes t5n1..t5n$nodes at $prefix.11..$prefix.$((10 + nodes))"
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
if [ "$nodes" -eq 1 ]; then
  node_name=$(sed -n 's/^NodeName=\([^ ]*\).*/\1/p' <<<"$node_line")
  min_cpus=${T5SCALE_SLURM_MIN_CPUS:-4}
  if [ "$cpus" -lt "$min_cpus" ]; then
    echo "slurm: node $node_name has $cpus CPUs; declared with $min_cpus (config_overrides)"
    node_line="NodeName=$node_name CPUs=$min_cpus Boards=1 SocketsPerBoard=1 CoresPerSocket=$min_cpus ThreadsPerCore=1"
    node_line+=" RealMemory=$real_memory"
  fi
  node_line=$(sed "s/RealMemory=[0-9]*/RealMemory=$((real_memory * 95 / 100))/" <<<"$node_line")
  controller=$(hostname)
  slurmd_files=("$short/spool" slurmd.pid slurmd.log)
  tmp_fs=/tmp
else
  # Several nodes share this machine's cores and memory: each is declared with T5SCALE_SLURM_NODE_CPUS CPUs
  # (default 2: one or two ranks per node; config_overrides again) and its share of the memory. NodeAddr is
  # where slurmctld and the other nodes reach a node; NodeHostname is the hostname it has in its namespace.
  node_cpus=${T5SCALE_SLURM_NODE_CPUS:-2}
  node_name="t5n[1-$nodes]"
  addresses=$(for i in $(seq "$nodes"); do printf '%s.%d,' "$prefix" $((10 + i)); done)
  node_line="NodeName=$node_name NodeHostname=$node_name NodeAddr=${addresses%,} CPUs=$node_cpus Boards=1"
  node_line+=" SocketsPerBoard=1 CoresPerSocket=$node_cpus ThreadsPerCore=1"
  node_line+=" RealMemory=$((real_memory * 95 / 100 / nodes))"
  # The nodes reach slurmctld at the bridge's address; the name must still be this machine's hostname, which
  # slurmctld checks against its own.
  controller="$(hostname)($prefix.1)"
  # One spool folder, pid file and log per node (%n: the node's name).
  slurmd_files=("$short/spool/%n" slurmd.%n.pid slurmd.%n.log)
  # Each node's own temporary folder: SHORT/tmp (STATE_DIR/tmp), which in the node's mount namespace is
  # SHORT/tmp.<node>. The PMIx plugin makes its client folder TmpFS/spmix_appdir_<uid>_<job>.<step> on every node
  # of a step; on a shared /tmp the second node finds it made ("File exists") and the step fails to launch.
  tmp_fs=$short/tmp
  mkdir -p "$tmp_fs"
  link_into_short tmp
  for i in $(seq "$nodes"); do
    mkdir -p "$short/spool/t5n$i" "$short/tmp.t5n$i"
    link_into_short "tmp.t5n$i"
  done
fi
sed -e "s|@CLUSTER_NAME@|t5scale-local|" \
    -e "s|@HOSTNAME@|$controller|" \
    -e "s|@SLURMCTLD_PORT@|$port|" \
    -e "s|@SLURMD_PORT@|$((port + 1))|" \
    -e "s|@STATE_DIR@|$state|g" \
    -e "s|@SLURMD_SPOOL@|${slurmd_files[0]}|" \
    -e "s|@SLURMD_PID@|${slurmd_files[1]}|" \
    -e "s|@SLURMD_LOG@|${slurmd_files[2]}|" \
    -e "s|@TMP_FS@|$tmp_fs|" \
    -e "s|@NODE_LINE@|$node_line|" \
    -e "s|@NODE_NAME@|$node_name|" \
    -e "s|@PARTITION@|local|" \
    "$here/slurm.conf.in" >"$state/slurm.conf"
# mpi.conf: Slurm's daemons read it from beside slurm.conf (the folder of SLURM_CONF).
cp "$here/mpi.conf" "$state/mpi.conf"
export SLURM_CONF="$state/slurm.conf"

slurmctld -f "$SLURM_CONF" || fail "slurmctld did not start: $(tail -n 20 "$state/log/slurmctld.log" 2>/dev/null)"
if [ "$nodes" -eq 1 ]; then
  slurmd -f "$SLURM_CONF" || fail "slurmd did not start: $(tail -n 20 "$state/log/slurmd.log" 2>/dev/null)"
  pid_files=("$state/slurmctld.pid" "$state/slurmd.pid")
else
  pid_files=("$state/slurmctld.pid")
  for i in $(seq "$nodes"); do
    start_node_slurmd "t5s$tag-t5n$i" "t5n$i"
    pid_files+=("$state/slurmd.t5n$i.pid")
  done
fi

# Wait for the nodes to be idle.
deadline=$((SECONDS + timeout_s))
node_state=""
problem=""
while [ $SECONDS -lt $deadline ]; do
  node_state=$(sinfo -h -N -o %T 2>/dev/null | sort | uniq -c | sed 's/^ *//' | tr '\n' ' ' | sed 's/ $//' || true)
  [ "$node_state" = "$nodes idle" ] && break
  for pid_file in "${pid_files[@]}"; do
    if [ -s "$pid_file" ] && ! kill -0 "$(cat "$pid_file")" 2>/dev/null; then
      problem="$(basename "$pid_file" .pid) exited"
    fi
  done
  [ -n "$problem" ] && break
  sleep 0.5
done
if [ "$node_state" != "$nodes idle" ]; then
  [ -n "$problem" ] ||
    problem="node(s) $node_name are '${node_state:-not reported}' after ${timeout_s} s, not all idle"
  echo "slurm/local/start.sh: $problem" >&2
  echo "--- slurmctld.log" >&2
  tail -n 30 "$state/log/slurmctld.log" >&2 || true
  for log in "$state"/log/slurmd*.log; do
    [ -e "$log" ] || continue
    echo "--- $(basename "$log")" >&2
    tail -n 30 "$log" >&2 || true
  done
  exit 1
fi
if [ "$nodes" -eq 1 ]; then
  echo "slurm: node $node_name idle (cluster t5scale-local, partition local); export SLURM_CONF=$SLURM_CONF"
else
  echo "slurm: nodes $node_name idle (cluster t5scale-local, partition local); export SLURM_CONF=$SLURM_CONF"
fi
