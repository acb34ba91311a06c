#!/bin/bash
# Several nodes for real: starts the local Slurm cluster with 2 nodes (then 4), each node a slurmd in its own
# network, UTS and mount namespace on a bridge (slurm/local/start.sh --nodes N), and runs t5scale-train across
# the nodes with Open MPI over TCP on the bridge: one rank per node (dp), launched two ways, `srun --mpi=pmix` and
# `mpirun` inside an sbatch allocation (mpirun starts its orted on the other nodes through srun); on 2 nodes also
# two ranks per node with tp 2 inside each node, and tp 2 across the nodes, which must be refused (exit 2, the
# group and its hosts named). Every run must
# give the same per-step losses, bit for bit, as the same grid on one node over shared memory (mpirun outside
# Slurm, btl vader), and its run file must record every node's hostname (`hosts`) and the node count (`nodes`).
# On 4 nodes a study (t5scale-study plan, submit, status; then t5scale-analyze) runs one rank per node on 1, 2 and
# 4 nodes and tp 2 inside a node on 1 and 2 nodes, each node with a fake RAPL meter of its own power: every run
# reads each node's meter on that node's first rank and sums them, and the scaling table has a row per node count
# and grid, with the nodes panels in the report.
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

# A fake RAPL package per node, counting as if node t5n<i> drew 10 x 4^(i-1) W (10, 40, 160, 640: a node read in
# place of another is off by 4x at least): its TmpFS (STATE_DIR/tmp.t5n<i>, which is STATE_DIR/tmp inside node
# i) holds powercap/intel-rapl:0, whose energy_uj this loop rewrites every 10 ms from the time since it started
# (written beside and renamed, so that a reader never sees half a number).
fake_power_meters() {
  "$python" - "$state" <<'EOF2'
import os
import sys
import time

folders = [(os.path.join(sys.argv[1], f"tmp.t5n{i}", "powercap", "intel-rapl:0"), 10 * 4 ** (i - 1))
           for i in range(1, 5)]
start = time.monotonic()
while True:
    elapsed_s = time.monotonic() - start
    for folder, watts in folders:
        with open(os.path.join(folder, "energy_uj.new"), "w") as f:
            f.write(f"{int(elapsed_s * watts * 1e6)}\n")
        os.replace(os.path.join(folder, "energy_uj.new"), os.path.join(folder, "energy_uj"))
    time.sleep(0.01)
EOF2
}

# The study across nodes on the 4-node cluster: one rank per node on 1, 2 and 4 nodes, and tp 2 inside a node
# (2 ranks per node) on 1 and 2 nodes; planned, submitted and tracked with t5scale-study, analysed with
# t5scale-analyze. Each run must record its hosts and node count, the losses of its grid's one-node reference,
# and the CPU energy of each of its nodes from that node's own meter (the per-node powers differ), summed.
study_across_nodes() {
  local i meters job_count
  step="study across nodes: the fake energy meters"
  for i in 1 2 3 4; do
    mkdir -p "$state/tmp.t5n$i/powercap/intel-rapl:0"
    echo 0 >"$state/tmp.t5n$i/powercap/intel-rapl:0/energy_uj"
    echo 262143328850 >"$state/tmp.t5n$i/powercap/intel-rapl:0/max_energy_range_uj"
  done
  fake_power_meters &
  meters=$!
  background_pids+=("$meters")
  for grid in "1 1" "2 1" "4 1" "2 2" "4 2"; do reference_run $grid; done
  step="study across nodes: plan"
  cat >nodes.yaml <<EOF2
study: nodes
base:
  train: {max_steps: 48, log_every: 8}
  eval: {every_steps: 0, max_examples: 32}
  checkpoint: {every_steps: 0}
  telemetry: {cpu_energy: rapl, powercap_root: $state/tmp/powercap, flush_every_steps: 8}
results_dir: $work/study
axes:
  grid:
    - {label: n1, nodes: 1, gpus_per_node: 1}
    - {label: n2, nodes: 2, gpus_per_node: 1}
    - {label: n4, nodes: 4, gpus_per_node: 1}
    - {label: n1-tp2, nodes: 1, gpus_per_node: 2, parallel.tp: 2}
    - {label: n2-tp2, nodes: 2, gpus_per_node: 2, parallel.tp: 2}
slurm: {gpu: none, cpus_per_task: 1, time_limit: "00:05:00", launcher: srun, mpi: pmix}
EOF2
  # The demo's config is outside the spec's folder: named on the command line, as a spec may not name it.
  study_args=(--base-config "$src/jobs/demo/run.yaml")
  "$bin/t5scale-study" plan nodes.yaml "${study_args[@]}" >plan.log 2>&1 || fail "t5scale-study plan: $(tail -n 5 plan.log)"
  step="study across nodes: submit"
  "$bin/t5scale-study" submit nodes.yaml "${study_args[@]}" >submit.log 2>&1 || fail "t5scale-study submit: $(tail -n 5 submit.log)"
  job_count=$(($(wc -l <slurm/nodes/jobs.csv) - 1))
  [ "$job_count" -eq 5 ] || fail "submit recorded $job_count jobs, not 5: $(cat slurm/nodes/jobs.csv)"
  step="study across nodes: the jobs"
  while read -r job; do wait_for_job "$job"; done < <(tail -n +2 slurm/nodes/jobs.csv | cut -d, -f2)
  "$bin/t5scale-study" status nodes.yaml "${study_args[@]}" >status.log 2>&1 || fail "t5scale-study status: $(tail -n 8 status.log)"
  [ "$(grep -c completed status.log)" -ge 5 ] || fail "not every run completed: $(cat status.log)"
  kill "$meters" 2>/dev/null
  step="study across nodes: the run files"
  for run in n1 n2 n4; do
    check_run "$work/study/$run.h5" "$work/runs/ref${run#n}tp1.h5" "${run#n}" || fail "run $run"
  done
  check_run "$work/study/n1-tp2.h5" "$work/runs/ref2tp2.h5" 1 || fail "run n1-tp2"
  check_run "$work/study/n2-tp2.h5" "$work/runs/ref4tp2.h5" 2 || fail "run n2-tp2"
  "$python" - "$work/study" <<'EOF2' || fail "the per-node energy"
import sys
import h5py
import numpy as np

# Ranks are placed node by node (world_size / nodes each, `hosts` in rank order): each node's first rank reads
# its node's meter, the others none (NaN). Node t5n<i> draws 10 x 4^(i-1) W, so its energy over the run's wall
# time is about that power (readings lag the meter by up to its 50 ms period on a loaded machine); the run's CPU
# energy (the summary's, to the end of the run) is the sum over its nodes.
problems = []
for run in ("n1", "n2", "n4", "n1-tp2", "n2-tp2"):
    with h5py.File(f"{sys.argv[1]}/{run}.h5", "r") as f:
        hosts = f.attrs["hosts"].decode().split(",")
        world, nodes = int(f.attrs["world_size"]), int(f.attrs["nodes"])
        energy_j = f["steps/cpu_energy_j"][-1]
        wall_s = float(f["steps/wall_time_s"][-1])
        total_kwh = float(f["summary"].attrs["cpu_energy_kwh"])
        total_wall_s = float(f["summary"].attrs["wall_time_s"])
    per_node = world // nodes
    readings, total_watts = [], 0
    for r in range(world):
        host = hosts[r // per_node]
        if r % per_node != 0:
            if not np.isnan(energy_j[r]):
                problems.append(f"{run}: rank {r} (not its node's first) has CPU energy {energy_j[r]}")
            continue
        watts = 10 * 4 ** (int(host.removeprefix("t5n")) - 1)
        total_watts += watts
        ratio = energy_j[r] / (watts * wall_s)
        readings.append(f"{host} {energy_j[r]:.1f} J ({ratio:.2f} x {watts} W x {wall_s:.1f} s)")
        if not 0.6 <= ratio <= 1.6:
            problems.append(f"{run}: rank {r} on {host} read {energy_j[r]:.1f} J in {wall_s:.1f} s, "
                            f"{ratio:.2f} x its node's {watts} W")
    # The summary counts to the end of the run (after the last row): the nodes' powers summed over its wall time.
    ratio = total_kwh * 3.6e6 / (total_watts * total_wall_s)
    if not 0.7 <= ratio <= 1.3:
        problems.append(f"{run}: cpu_energy_kwh {total_kwh:.4g} is {ratio:.2f} x its nodes' {total_watts} W "
                        f"over {total_wall_s:.1f} s")
    print(f"{run}: " + "; ".join(readings) + f"; cpu_energy_kwh {total_kwh:.3g}")
for p in problems:
    print(p)
sys.exit(1 if problems else 0)
EOF2
  step="study across nodes: t5scale-analyze"
  T5SCALE_PYTHON=$python "$src/analysis/t5scale-analyze" "$work/study" >analyze.log 2>&1 ||
    fail "t5scale-analyze: $(tail -n 5 analyze.log)"
  "$python" - "$work/study/report" <<'EOF2' || fail "the analysis"
import os
import sys
import pandas as pd

report = sys.argv[1]
table = pd.read_csv(os.path.join(report, "scaling.csv"))
rows = sorted(zip(table["nodes"], table["tp"], table["world_size"]))
want = sorted([(1, 1, 1), (2, 1, 2), (4, 1, 4), (1, 2, 2), (2, 2, 4)])
if rows != want:
    sys.exit(f"scaling.csv rows (nodes, tp, world): {rows}, expected {want}")
if not (table["energy_kwh"] > 0).all():
    sys.exit(f"scaling.csv energy_kwh: {table['energy_kwh'].tolist()}")
plots = os.listdir(os.path.join(report, "plots"))
if not any("nodes" in name for name in plots):
    sys.exit(f"no plot against nodes among {plots}")
with open(os.path.join(report, "report.html")) as f:
    html = f.read()
# The figures are embedded (data URIs): one image per PNG, the nodes panels among them.
pngs = [name for name in plots if name.endswith(".png")]
if html.count("<img") != len(pngs) or "against nodes" not in html:
    sys.exit(f"report.html shows {html.count('<img')} images for {len(pngs)} plots, nodes panels: "
             f"{'against nodes' in html}")
print(f"scaling.csv: a row per node count and grid {rows}; plots {sorted(plots)}")
EOF2
}

for nodes in $sizes; do
  # On every cluster: one rank per node (dp over the nodes). On 2 nodes also: 2 ranks per node with tp 2 inside
  # each node (tp 2 x dp 2), and tp 2 with one rank per node, which the trainer must refuse (a TP group never
  # spans nodes).
  reference_run "$nodes" 1
  [ "$nodes" -eq 2 ] && reference_run 4 2

  start_cluster "$nodes"

  # On 4 nodes the study below runs one rank per node through srun (in its sbatch scripts).
  grids=()
  [ "$nodes" -eq 2 ] && grids+=("1 1" "2 2")
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

  [ "$nodes" -eq 4 ] && study_across_nodes
  stop_cluster
done

status=0
echo "PASS: t5scale-train across $sizes nodes (srun --mpi=pmix and mpirun in sbatch, TCP) matched one node"
