#!/bin/bash
# Several nodes for real: on the local 4-node Slurm cluster, each node a slurmd in its own network, UTS and mount
# namespace on a bridge (slurm/local/start.sh --nodes 4), runs t5scale-train across the nodes with Open MPI over
# TCP on the bridge, case by case:
#   srun on 2 nodes     one rank per node (dp) with `srun --mpi=pmix`, and two ranks per node with tp 2 inside each
#                       node (tp 2 x dp 2)
#   tp across nodes     tp 2 with one rank per node on 2 nodes is refused (exit 2, the group and its hosts named,
#                       no run file): a TP group never spans nodes
#   mpirun in sbatch    `mpirun` inside an sbatch allocation of 2 and then 4 nodes, one rank per node (mpirun starts
#                       its orted on the other nodes through srun); the batch script runs on the first node
# Every run must give the same per-step losses, bit for bit, as the same grid on one node over shared memory
# (mpirun outside Slurm, btl vader), and its run file must record every node's hostname (`hosts`) and the node
# count (`nodes`). The 2-node cases run on t5n1 and t5n2. (srun on 4 nodes: the study across nodes,
# tests/multinode/run_study_across_nodes.sh.)
# The cluster is ctest's shared one (T5SCALE_LOCAL_CLUSTER), or one this test starts and always removes (trap on
# EXIT); common.sh says which. Every step has a deadline; a failure names the step and prints the last lines of
# the job and daemon logs. Where a prerequisite is missing (root, `ip netns`, namespaces), the test fails with the
# reason; it never skips.
#   tests/multinode/run_multinode.sh SOURCE_DIR BIN_DIR PYTHON
# BIN_DIR holds t5scale-train (a build's bin/, or a bundle's bin/ after `source <bundle>/env.sh`); mpirun is
# BIN_DIR/mpirun where there is one (a bundle), else the one on PATH. PYTHON must import h5py.
# Environment: T5SCALE_MULTINODE_STEP_TIMEOUT_S (the longest any one step may take, default 90),
# T5SCALE_MULTINODE_TEST_TIMEOUT_S (the whole test's deadline, default 200: below ctest's 240 s, which kills
# without a chance to clean up), T5SCALE_KEEP_MULTINODE_TEST=1 keeps the temporary folder; common.sh's
# T5SCALE_LOCAL_CLUSTER and T5SCALE_MULTINODE_REFERENCES.
set -uo pipefail

test_name=multinode-test
# shellcheck source=tests/multinode/common.sh
. "$(dirname "$0")/common.sh" "$@"

check_multinode_prerequisites
make_test_folder
train_command "$work/runs" short
reference_run 2 1 short
reference_run 4 2 short
reference_run 4 1 short
use_cluster

# srun on 2 nodes: one rank per node (dp 2), and 2 ranks per node with tp 2 inside each node (tp 2 x dp 2).
for grid in "1 1" "2 2"; do
  read -r per_node tp <<<"$grid"
  ranks=$((2 * per_node))
  name="srun2x${per_node}tp${tp}"
  step="srun on 2 nodes: srun --mpi=pmix, $per_node rank(s) per node, tp $tp"
  limit=$(step_limit) || exit 1
  launch_as_the_scripts_do "$work/$name.log" "$work/runs/$name.exit_code" \
    timeout "$limit" srun --nodelist=t5n1,t5n2 --nodes=2 --ntasks="$ranks" --ntasks-per-node="$per_node" --mpi=pmix \
    "${train[@]}" --set parallel.tp="$tp" --set run.name="$name" ||
    fail "srun --mpi=pmix across 2 nodes failed or timed out (exit $?): $(tail -n 5 "$work/$name.log")"
  check_run "$work/runs/$name.h5" "$refs/short${ranks}tp${tp}.h5" 2 ||
    fail "the srun run across 2 nodes does not match the one-node run"
done

step="tp across nodes: tp 2 with one rank per node is refused"
limit=$(step_limit) || exit 1
launch_as_the_scripts_do "$work/spanning.log" "$work/runs/spanning.exit_code" \
  timeout "$limit" srun --nodelist=t5n1,t5n2 --nodes=2 --ntasks=2 --ntasks-per-node=1 --mpi=pmix \
  "${train[@]}" --set parallel.tp=2 --set run.name=spanning
code=$?
[ "$code" -eq 2 ] || fail "a TP group across two nodes ended with exit $code, not 2 (refused)"
grep -q "parallel.tp 2: TP group 0 (ranks 0-1) spans hosts t5n1, t5n2" "$work/spanning.log" ||
  fail "the refusal does not name the group and its hosts: $(grep -m 3 error "$work/spanning.log")"
[ -e "$work/runs/spanning.h5" ] && fail "a refused run wrote a run file"

# mpirun inside an sbatch allocation of 2 nodes (t5n1 and t5n2), then of all 4.
for nodes in 2 4; do
  step="mpirun in sbatch: $nodes nodes, one rank per node"
  printf '#!/bin/bash\nhostname\nexec %q -np %d' "$mpirun" "$nodes" >"$work/mpirun$nodes.sbatch"
  printf ' %q' "${train[@]}" --set run.name="mpirun$nodes" >>"$work/mpirun$nodes.sbatch"
  echo >>"$work/mpirun$nodes.sbatch"
  job=$(sbatch --parsable --nodelist="t5n[1-$nodes]" --nodes="$nodes" --ntasks="$nodes" --ntasks-per-node=1 \
          --time=5 --output="$work/mpirun$nodes.log" "$work/mpirun$nodes.sbatch") || fail "sbatch failed"
  wait_for_job "$job"
  job_state=$(scontrol -o show job "$job" 2>/dev/null |
                sed -n 's/.* JobState=\([A-Z_]*\) .* ExitCode=\([0-9:]*\) .*/\1 \2/p')
  [ "$job_state" = "COMPLETED 0:0" ] ||
    fail "job $job ended ${job_state:-in an unknown state}: $(tail -n 5 "$work/mpirun$nodes.log")"
  [ "$(head -n 1 "$work/mpirun$nodes.log")" = t5n1 ] ||
    fail "the batch script ran on '$(head -n 1 "$work/mpirun$nodes.log")', not on t5n1"
  check_run "$work/runs/mpirun$nodes.h5" "$refs/short${nodes}tp1.h5" "$nodes" ||
    fail "the mpirun run across $nodes nodes does not match the one-node run"
done

[ -n "$state" ] && stop_cluster "$state" && state=""
status=0
echo "PASS: t5scale-train across 2 and 4 nodes (srun --mpi=pmix and mpirun in sbatch, TCP) matched one node;" \
     "tp across nodes refused"
