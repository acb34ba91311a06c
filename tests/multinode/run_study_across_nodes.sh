#!/bin/bash
# A study across nodes on the local 4-node Slurm cluster (slurm/local/start.sh --nodes 4): one rank per node on 1,
# 2 and 4 nodes, and tp 2 inside a node (2 ranks per node) on 1 and 2 nodes, planned, submitted and tracked with
# t5scale-study (plan, submit, status; srun --mpi=pmix in its sbatch scripts) and analysed with t5scale-analyze.
# Each node has a fake RAPL meter of its own power: every run reads each node's meter on that node's first rank
# and sums them. Each run must record its hosts and node count and the losses of its grid's one-node reference
# (shared memory, outside Slurm), bit for bit; the scaling table must have a row per node count and grid, with the
# nodes panels in the report.
# The cluster is ctest's shared one (T5SCALE_LOCAL_CLUSTER), or one this test starts and always removes (trap on
# EXIT); common.sh says which. Every step has a deadline; a failure names the step and prints the last lines of
# the job and daemon logs.
#   tests/multinode/run_study_across_nodes.sh SOURCE_DIR BIN_DIR PYTHON
# BIN_DIR holds t5scale-train and t5scale-study. PYTHON must import h5py and pandas. Environment: as
# tests/multinode/run_multinode.sh.
set -uo pipefail

test_name=study-across-nodes-test
# shellcheck source=tests/multinode/common.sh
. "$(dirname "$0")/common.sh" "$@"

check_multinode_prerequisites
[ -x "$bin/t5scale-study" ] || fail "$bin/t5scale-study is missing: build the target t5scale-study"
make_test_folder
for grid in "1 1" "2 1" "4 1" "2 2" "4 2"; do
  # shellcheck disable=SC2086  # ranks and tp
  reference_run $grid short
done
use_cluster
cluster=${state:-$shared_state}

# A fake RAPL package per node, counting as if node t5n<i> drew 10 x 4^(i-1) W (10, 40, 160, 640: a node read in
# place of another is off by 4x at least): its TmpFS (STATE_DIR/tmp.t5n<i>, which is STATE_DIR/tmp inside node
# i) holds powercap/intel-rapl:0, whose energy_uj this loop rewrites every 10 ms from the time since it started
# (written beside and renamed, so that a reader never sees half a number).
fake_power_meters() {
  exec "$python" - "$cluster" <<'EOF2'
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

step="study across nodes: the fake energy meters"
for i in 1 2 3 4; do
  mkdir -p "$cluster/tmp.t5n$i/powercap/intel-rapl:0"
  echo 0 >"$cluster/tmp.t5n$i/powercap/intel-rapl:0/energy_uj"
  echo 262143328850 >"$cluster/tmp.t5n$i/powercap/intel-rapl:0/max_energy_range_uj"
done
fake_power_meters &
meters=$!
background_pids+=("$meters")
step="study across nodes: plan"
{
  echo "study: nodes"
  echo "base:"
  base_of_spec short
  cat <<EOF2
  telemetry.cpu_energy: rapl
  telemetry.powercap_root: $cluster/tmp/powercap
  telemetry.flush_every_steps: 8
results_dir: $work/study
axes:
  grid:
    - {label: n1, nodes: 1, gpus_per_node: 1}
    - {label: n2, nodes: 2, gpus_per_node: 1}
    - {label: n4, nodes: 4, gpus_per_node: 1}
    - {label: n1-tp2, nodes: 1, gpus_per_node: 2, parallel.tp: 2}
    - {label: n2-tp2, nodes: 2, gpus_per_node: 2, parallel.tp: 2}
slurm: {gpu: none, cpus_per_task: 1, time_limit: "00:05:00", launcher: srun, mpi: pmix, extra_sbatch: [--exclusive]}
EOF2
} >nodes.yaml
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
background_pids=()
step="study across nodes: the run files"
for run in n1 n2 n4; do
  check_run "$work/study/$run.h5" "$refs/short${run#n}tp1.h5" "${run#n}" || fail "run $run"
done
check_run "$work/study/n1-tp2.h5" "$refs/short2tp2.h5" 1 || fail "run n1-tp2"
check_run "$work/study/n2-tp2.h5" "$refs/short4tp2.h5" 2 || fail "run n2-tp2"
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


[ -n "$state" ] && stop_cluster "$state" && state=""
status=0
echo "PASS: a study across 1, 2 and 4 nodes (and tp 2 inside a node) matched one node, each node's energy its own"
