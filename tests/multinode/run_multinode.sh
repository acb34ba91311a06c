#!/bin/bash
# Several nodes for real: starts the local Slurm cluster with 2 nodes (then 4), each node a slurmd in its own
# network, UTS and mount namespace on a bridge (slurm/local/start.sh --nodes N), and runs t5scale-train across
# the nodes with Open MPI over TCP on the bridge: one rank per node (dp), launched two ways, `srun --mpi=pmix` and
# `mpirun` inside an sbatch allocation (mpirun starts its orted on the other nodes through srun); on 2 nodes also
# two ranks per node with tp 2 inside each node, and tp 2 across the nodes, which must be refused (exit 2, the
# group and its hosts named). Every run must
# give the same per-step losses, bit for bit, as the same grid on one node over shared memory (mpirun outside
# Slurm, btl vader), and its run file must record every node's hostname (`hosts`) and the node count (`nodes`).
# The cluster, its namespaces and whatever runs in them are always removed (trap on EXIT: slurm/local/stop.sh).
# Every step has a deadline; a failure names the step and prints the last lines of the job and daemon logs.
# Where a prerequisite is missing (root, `ip netns`, namespaces), the test fails with the reason; it never skips.
#   tests/multinode/run_multinode.sh SOURCE_DIR BIN_DIR PYTHON
# BIN_DIR holds t5scale-train (a build's bin/, or a bundle's bin/ after `source <bundle>/env.sh`); mpirun is
# BIN_DIR/mpirun where there is one (a bundle), else the one on PATH. PYTHON must import h5py.
# Environment: T5SCALE_MULTINODE_NODES (the cluster sizes to try, default "2 4"), T5SCALE_MULTINODE_STEP_TIMEOUT_S
# (the longest any one step may take, default 90), T5SCALE_MULTINODE_TEST_TIMEOUT_S (the whole test's deadline,
# default 200: below ctest's 240 s, which kills without a chance to clean up), T5SCALE_KEEP_MULTINODE_TEST=1
# keeps the temporary folder.
set -uo pipefail

if [ $# -ne 3 ]; then
  echo "usage: $0 SOURCE_DIR BIN_DIR PYTHON" >&2
  exit 2
fi
src=$(realpath "$1")
bin=$(realpath "$2")
python=$3
sizes=${T5SCALE_MULTINODE_NODES:-2 4}
step_timeout_s=${T5SCALE_MULTINODE_STEP_TIMEOUT_S:-90}
test_timeout_s=${T5SCALE_MULTINODE_TEST_TIMEOUT_S:-200}
test_start=$SECONDS

# The step the test is at, named in a failure.
step="checking the prerequisites"
fail() {
  echo "FAIL ($step): $*" >&2
  exit 1
}

for nodes in $sizes; do
  case $nodes in 2 | 4) ;; *) fail "T5SCALE_MULTINODE_NODES may list 2 and 4, not '$nodes'" ;; esac
done
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
probe_ns="t5s-probe-$$"
probe=$(ip netns add "$probe_ns" 2>&1) || fail "ip netns add fails here, so nodes cannot have their own network: $probe"
ip netns del "$probe_ns"
unshare --uts --mount true 2>/dev/null || fail "unshare --uts --mount fails here: nodes cannot have their own hostname"

# Debian's packages, as the slurm test installs them (about 10 s when missing).
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null ||
   ! command -v sbatch >/dev/null; then
  echo "installing slurm-wlm and munge"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y slurm-wlm munge >/dev/null ||
    { apt-get update >/dev/null && apt-get install -y slurm-wlm munge >/dev/null; } ||
    fail "apt-get install slurm-wlm munge failed"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/t5scale-multinode-test.XXXXXX")
state=""
status=1
cleanup() {
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
  echo "multinode test: $((SECONDS - test_start)) s"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
cd "$work" || fail "cannot enter $work"

# Open MPI as root, and ranks that yield the core when they wait (2 or 4 ranks share 2 cores).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1
# The demo's tiny T5 on the synthetic task (jobs/demo/run.yaml), shortened: 48 steps, one evaluation at the end.
train=("$bin/t5scale-train" --config "$src/jobs/demo/run.yaml" --set train.max_steps=48 --set train.log_every=8
       --set eval.every_steps=0 --set eval.max_examples=32 --set checkpoint.every_steps=0
       --set run.output_dir="$work/runs")

# Checks run file $1 against the reference $2: completed, every step once, losses equal bit for bit, `nodes` $3
# and `hosts` the names t5n1..t5n<$3> (or, with $3 = 1, left unchecked).
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
        want = {f"t5n{i}" for i in range(1, nodes + 1)}
        if set(hosts.split(",")) != want:
            problems.append(f"hosts is {hosts!r}, expected the names {sorted(want)}")
    print(f"{path.rsplit('/', 1)[-1]}: {len(steps)} steps, final loss {loss[-1]:.6f}, hosts {hosts}, "
          f"median step {np.median(f['steps/step_time_s'][:]) * 1e3:.1f} ms")
for p in problems:
    print(f"{path}: {p}")
sys.exit(1 if problems else 0)
EOF
}

# The time the next step may take: step_timeout_s, or less where the whole test's deadline is nearer.
step_limit() {
  local left=$((test_start + test_timeout_s - SECONDS))
  [ "$left" -gt 5 ] || fail "the test's deadline of ${test_timeout_s} s has passed"
  echo $((left < step_timeout_s ? left : step_timeout_s))
}

# Waits for sbatch job $1 to leave the queue, at most step_timeout_s; a squeue that fails is asked again.
wait_for_job() {
  local limit deadline queue
  limit=$(step_limit) || exit 1
  deadline=$((SECONDS + limit))
  while :; do
    if queue=$(squeue -h -j "$1" -o %T 2>/dev/null); then
      [ -z "$queue" ] && return 0
    fi
    [ $SECONDS -ge $deadline ] && fail "job $1 still ${queue:-queued} after $limit s"
    sleep 1
  done
}

# The one-node reference of a grid: $1 ranks, tp $2, shared memory, outside Slurm.
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

for nodes in $sizes; do
  # On every cluster: one rank per node (dp over the nodes). On 2 nodes also: 2 ranks per node with tp 2 inside
  # each node (tp 2 x dp 2), and tp 2 with one rank per node, which the trainer must refuse (a TP group never
  # spans nodes).
  reference_run "$nodes" 1
  [ "$nodes" -eq 2 ] && reference_run 4 2

  step="starting a $nodes-node cluster"
  state="$work/slurm$nodes"
  limit=$(step_limit) || exit 1
  T5SCALE_SLURM_TIMEOUT_S=$limit timeout "$((limit + 20))" \
    "$src/slurm/local/start.sh" --nodes "$nodes" "$state" ||
    fail "slurm/local/start.sh --nodes $nodes did not start the cluster (the reason is above)"
  export SLURM_CONF="$state/slurm.conf"
  subnet=$(sed -n 's/^subnet //p' "$state/network")
  [ -n "$subnet" ] || fail "start.sh wrote no subnet into $state/network"
  # TCP between the nodes, on the bridge's subnet only: Open MPI would otherwise try every interface it sees.
  # The MPI traffic (btl) and Open MPI's own wire-up between mpirun and its orted (oob) alike.
  export OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=$subnet OMPI_MCA_oob_tcp_if_include=$subnet

  grids=("1 1")
  [ "$nodes" -eq 2 ] && grids+=("2 2")
  for grid in "${grids[@]}"; do
    read -r per_node tp <<<"$grid"
    ranks=$((nodes * per_node))
    name="srun${nodes}x${per_node}tp${tp}"
    step="$nodes nodes: srun --mpi=pmix, $per_node rank(s) per node, tp $tp"
    limit=$(step_limit) || exit 1
    timeout "$limit" srun --nodes="$nodes" --ntasks="$ranks" --ntasks-per-node="$per_node" --mpi=pmix \
      "${train[@]}" --set parallel.tp="$tp" --set run.name="$name" >"$work/$name.log" 2>&1 ||
      fail "srun --mpi=pmix across $nodes nodes failed or timed out (exit $?): $(tail -n 5 "$work/$name.log")"
    check_run "$work/runs/$name.h5" "$work/runs/ref${ranks}tp${tp}.h5" "$nodes" ||
      fail "the srun run across $nodes nodes does not match the one-node run"
  done

  if [ "$nodes" -eq 2 ]; then
    step="2 nodes: tp 2 with one rank per node is refused"
    limit=$(step_limit) || exit 1
    timeout "$limit" srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --mpi=pmix \
      "${train[@]}" --set parallel.tp=2 --set run.name=spanning >"$work/spanning.log" 2>&1
    code=$?
    [ "$code" -eq 2 ] || fail "a TP group across two nodes ended with exit $code, not 2 (refused)"
    grep -q "parallel.tp 2: TP group 0 (ranks 0-1) spans hosts t5n1, t5n2" "$work/spanning.log" ||
      fail "the refusal does not name the group and its hosts: $(grep -m 3 error "$work/spanning.log")"
    [ -e "$work/runs/spanning.h5" ] && fail "a refused run wrote a run file"
  fi

  step="$nodes nodes: mpirun inside an sbatch allocation, one rank per node"
  printf '#!/bin/bash\nhostname\nexec %q -np %d' "$mpirun" "$nodes" >"$work/mpirun$nodes.sbatch"
  printf ' %q' "${train[@]}" --set run.name="mpirun$nodes" >>"$work/mpirun$nodes.sbatch"
  echo >>"$work/mpirun$nodes.sbatch"
  job=$(sbatch --parsable --nodes="$nodes" --ntasks="$nodes" --ntasks-per-node=1 --time=5 \
          --output="$work/mpirun$nodes.log" "$work/mpirun$nodes.sbatch") || fail "sbatch failed"
  wait_for_job "$job"
  job_state=$(scontrol -o show job "$job" 2>/dev/null |
                sed -n 's/.* JobState=\([A-Z_]*\) .* ExitCode=\([0-9:]*\) .*/\1 \2/p')
  [ "$job_state" = "COMPLETED 0:0" ] ||
    fail "job $job ended ${job_state:-in an unknown state}: $(tail -n 5 "$work/mpirun$nodes.log")"
  [ "$(head -n 1 "$work/mpirun$nodes.log")" = t5n1 ] ||
    fail "the batch script ran on '$(head -n 1 "$work/mpirun$nodes.log")', not on t5n1"
  check_run "$work/runs/mpirun$nodes.h5" "$work/runs/ref${nodes}tp1.h5" "$nodes" ||
    fail "the mpirun run across $nodes nodes does not match the one-node run"

  step="stopping the $nodes-node cluster"
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
done

status=0
echo "PASS: t5scale-train across $sizes nodes (srun --mpi=pmix and mpirun in sbatch, TCP) matched one node"
