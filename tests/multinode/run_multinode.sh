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

sizes=${T5SCALE_MULTINODE_NODES:-2 4}
test_name=multinode-test
# shellcheck source=tests/multinode/common.sh
. "$(dirname "$0")/common.sh" "$@"

for nodes in $sizes; do
  case $nodes in 2 | 4) ;; *) fail "T5SCALE_MULTINODE_NODES may list 2 and 4, not '$nodes'" ;; esac
done
check_multinode_prerequisites
make_test_folder

# Open MPI as root, and ranks that yield the core when they wait (2 or 4 ranks share 2 cores).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1
# The demo's tiny T5 on the synthetic task (jobs/demo/run.yaml), shortened: 48 steps, one evaluation at the end.
train=("$bin/t5scale-train" --config "$src/jobs/demo/run.yaml" --set train.max_steps=48 --set train.log_every=8
       --set eval.every_steps=0 --set eval.max_examples=32 --set checkpoint.every_steps=0
       --set run.output_dir="$work/runs")

for nodes in $sizes; do
  # On every cluster: one rank per node (dp over the nodes). On 2 nodes also: 2 ranks per node with tp 2 inside
  # each node (tp 2 x dp 2), and tp 2 with one rank per node, which the trainer must refuse (a TP group never
  # spans nodes).
  reference_run "$nodes" 1
  [ "$nodes" -eq 2 ] && reference_run 4 2

  start_cluster "$nodes"

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

  stop_cluster
done

status=0
echo "PASS: t5scale-train across $sizes nodes (srun --mpi=pmix and mpirun in sbatch, TCP) matched one node"
