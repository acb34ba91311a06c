# What the multinode tests share (sourced, not run): the prerequisites, a failure that names the step, the
# temporary folder and the cluster always removed (trap on EXIT), deadlines per step and for the whole test, the
# local cluster started and stopped, and the check of a run file against a reference run.
# The sourcing script passes its arguments (SOURCE_DIR BIN_DIR PYTHON: `. common.sh "$@"`, which sets src, bin
# and python) and sets test_name before; it may set `step` to what it is doing (fail names it). The deadlines:
# T5SCALE_MULTINODE_STEP_TIMEOUT_S (the longest any one step may take, default 90) and
# T5SCALE_MULTINODE_TEST_TIMEOUT_S (the whole test's, default 200: below ctest's 240 s, which kills without a
# chance to clean up).

# shellcheck source=tests/shell_test_start.sh
. "$(dirname "${BASH_SOURCE[0]}")/../shell_test_start.sh" "$@"
step_timeout_s=${T5SCALE_MULTINODE_STEP_TIMEOUT_S:-90}
test_timeout_s=${T5SCALE_MULTINODE_TEST_TIMEOUT_S:-200}

# Root, the programs, namespaces that can be made, and Debian's slurm-wlm and munge (installed when missing).
check_multinode_prerequisites() {
  [ "$(id -u)" -eq 0 ] ||
    fail "the local multi-node cluster needs root (network namespaces, slurmd, SlurmUser=root); run the test as root"
  [ -x "$bin/t5scale-train" ] || fail "$bin/t5scale-train is missing: build the target t5scale-train"
  "$bin/t5scale-train" --help >/dev/null 2>&1 ||
    fail "$bin/t5scale-train does not run (from a bundle: source <bundle>/env.sh first):" \
         "$("$bin/t5scale-train" --help 2>&1 | tail -n 3)"
  if [ -x "$bin/mpirun" ]; then
    mpirun=$bin/mpirun
  else
    mpirun=$(command -v mpirun) || fail "no mpirun on PATH (apt-get install openmpi-bin)"
  fi
  "$python" -c "import h5py" || fail "$python cannot import h5py"
  for program in ip unshare nsenter; do
    command -v "$program" >/dev/null || fail "'$program' is not installed (iproute2, util-linux)"
  done
  # A namespace made and removed: where this fails (a container without CAP_SYS_ADMIN, a kernel without netns),
  # no node can have its own network.
  local probe_ns="t5s-probe-$$" probe
  probe=$(ip netns add "$probe_ns" 2>&1) ||
    fail "ip netns add fails here, so nodes cannot have their own network: $probe"
  ip netns del "$probe_ns"
  unshare --uts --mount true 2>/dev/null || fail "unshare --uts --mount fails here: nodes cannot have their own hostname"
  # Debian's packages, when missing (about 10 s).
  "$src/slurm/local/install.sh" || fail "slurm-wlm and munge could not be installed"
}

# The temporary folder ($work, the current directory from here on) and the trap that removes the cluster in
# $state (when one runs), prints the logs after a failure and removes $work after a success.
work=""
state=""
status=1
make_test_folder() {
  work=$(mktemp -d "${TMPDIR:-/tmp}/t5scale-$test_name.XXXXXX")
  trap multinode_cleanup EXIT
  trap 'exit 130' INT TERM
  cd "$work" || fail "cannot enter $work"
}
background_pids=()  # helpers the test started in the background, ended first
multinode_cleanup() {
  local pid
  for pid in "${background_pids[@]}"; do kill "$pid" 2>/dev/null; done
  [ -n "$state" ] && "$src/slurm/local/stop.sh" "$state"
  if [ "$status" -ne 0 ]; then
    echo "--- failed at: $step" >&2
    for log in "$work"/*.log "$state"/log/*.log; do
      [ -e "$log" ] && { echo "== $log" >&2; tail -n 25 "$log" >&2; }
    done
  fi
  if [ "${T5SCALE_KEEP_MULTINODE_TEST:-0}" = 1 ] || [ "$status" -ne 0 ]; then
    echo "kept $work" >&2
  else
    rm -rf "$work"
  fi
  echo "$test_name: $((SECONDS - test_start)) s"
}

# The time the next step may take: step_timeout_s, or less where the whole test's deadline is nearer.
step_limit() {
  local left=$((test_start + test_timeout_s - SECONDS))
  [ "$left" -gt 5 ] || fail "the test's deadline of ${test_timeout_s} s has passed"
  echo $((left < step_timeout_s ? left : step_timeout_s))
}

# Starts an $1-node cluster in $work/slurm$1 and points Slurm's commands and Open MPI at it: TCP between the
# nodes, on the bridge's subnet only (Open MPI would otherwise try every interface it sees), for the MPI traffic
# (btl) and Open MPI's own wire-up between mpirun and its orted (oob) alike. Sets $state and $subnet.
start_cluster() {
  local nodes=$1 limit
  step="starting a $nodes-node cluster"
  state="$work/slurm$nodes"
  limit=$(step_limit) || exit 1
  T5SCALE_SLURM_TIMEOUT_S=$limit timeout "$((limit + 20))" \
    "$src/slurm/local/start.sh" --nodes "$nodes" "$state" ||
    fail "slurm/local/start.sh --nodes $nodes did not start the cluster (the reason is above)"
  export SLURM_CONF="$state/slurm.conf"
  subnet=$(sed -n 's/^subnet //p' "$state/network")
  [ -n "$subnet" ] || fail "start.sh wrote no subnet into $state/network"
  export OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=$subnet OMPI_MCA_oob_tcp_if_include=$subnet
}

# Stops the cluster of $state and checks that no namespace, veth or bridge it made is left.
stop_cluster() {
  local made name
  step="stopping the cluster in $state"
  unset OMPI_MCA_btl OMPI_MCA_btl_tcp_if_include OMPI_MCA_oob_tcp_if_include
  made=$(sed -n 's/^\(netns\|veth\|bridge\) //p' "$state/network")
  "$src/slurm/local/stop.sh" "$state" >/dev/null || fail "slurm/local/stop.sh failed"
  [ -e "$state/network" ] && fail "stop.sh could not remove: $(cat "$state/network")"
  for name in $made; do
    if ip netns list | grep -qw "^$name" || ip link show "$name" >/dev/null 2>&1; then
      fail "stop.sh left $name"
    fi
  done
  state=""
}

# Waits for sbatch job $1 to leave the queue (or, with $2 = any state name, to reach it), at most step_limit; a
# squeue that fails is asked again.
wait_for_job() {
  local limit deadline queue
  limit=$(step_limit) || exit 1
  deadline=$((SECONDS + limit))
  while :; do
    if queue=$(squeue -h -j "$1" -o %T 2>/dev/null); then
      [ -z "$queue" ] && [ -z "${2:-}" ] && return 0
      [ -n "${2:-}" ] && [ "$queue" = "$2" ] && return 0
    fi
    [ $SECONDS -ge $deadline ] && fail "job $1 still ${queue:-queued} after $limit s"
    sleep 1
  done
}

# Waits until file $1 holds the text $2, at most step_limit.
wait_for_text() {
  local limit deadline
  limit=$(step_limit) || exit 1
  deadline=$((SECONDS + limit))
  until [ -e "$1" ] && grep -q -- "$2" "$1"; do
    [ $SECONDS -ge $deadline ] && fail "'$2' did not appear in $1 within $limit s: $(tail -n 3 "$1" 2>/dev/null)"
    sleep 0.5
  done
}

# The one-node reference of a grid: $1 ranks, tp $2, shared memory, outside Slurm; the command is the sourcing
# script's array `train`, the run file $work/runs/ref<ranks>tp<tp>.h5.
reference_run() {
  local ranks=$1 tp=$2 name="ref${1}tp${2}"
  [ -e "$work/runs/$name.h5" ] && return 0
  step="the one-node reference: $ranks ranks, tp $tp, shared memory"
  local limit
  limit=$(step_limit) || exit 1
  timeout "$limit" "$mpirun" -np "$ranks" --oversubscribe --mca btl vader,self \
    "${train[@]}" --set parallel.tp="$tp" --set run.name="$name" >"$work/$name.log" 2>&1 ||
    fail "mpirun -np $ranks on this host failed or timed out (exit $?): $(tail -n 5 "$work/$name.log")"
  check_run "$work/runs/$name.h5" "$work/runs/$name.h5" 1 || fail "the one-node run did not complete"
}

# Checks run file $1 against the reference $2: completed, every step once, losses equal bit for bit, `nodes` $3
# and `hosts` $3 different node names (with $3 = 1, left unchecked: a one-node run may be this machine). Prints a line about the run.
check_run() {
  "$python" - "$@" <<'EOF'
import sys
import h5py
import numpy as np

path, ref_path, nodes = sys.argv[1], sys.argv[2], int(sys.argv[3])
text = lambda v: v.decode() if isinstance(v, bytes) else str(v)
problems = []
with h5py.File(path, "r", swmr=True) as f, h5py.File(ref_path, "r", swmr=True) as r:
    a = f.attrs
    if text(a["status"]) != "completed":
        problems.append(f"status is {text(a['status'])!r}, not 'completed'")
    steps, loss, ref_loss = f["steps/step"][:], f["steps/loss"][:], r["steps/loss"][:]
    if not np.array_equal(steps, r["steps/step"][:]):
        problems.append(f"steps {steps.tolist()} differ from the reference's")
    elif not np.array_equal(loss, ref_loss):
        diff = np.abs(loss.astype(np.float64) - ref_loss)
        first = int(np.argmax(diff > 0))
        problems.append(f"losses differ from the one-node run: first at step {steps[first]} "
                        f"({loss[first]!r} vs {ref_loss[first]!r}), largest difference {diff.max():.3g}")
    hosts = text(a["hosts"])
    if nodes > 1:
        if int(a["nodes"]) != nodes:
            problems.append(f"nodes is {int(a['nodes'])}, expected {nodes}")
        names = hosts.split(",")
        if len(set(names)) != nodes or not all(n in {f"t5n{i}" for i in range(1, 5)} for n in names):
            problems.append(f"hosts is {hosts!r}, expected {nodes} different names among t5n1..t5n4")
    print(f"{path.rsplit('/', 1)[-1]}: {len(steps)} steps, final loss {loss[-1]:.6f}, hosts {hosts}, "
          f"median step {np.median(f['steps/step_time_s'][:]) * 1e3:.1f} ms")
for p in problems:
    print(f"{path}: {p}")
sys.exit(1 if problems else 0)
EOF
}
