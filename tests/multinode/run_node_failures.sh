#!/bin/bash
# What a cluster does to a job across nodes, on the local 4-node Slurm cluster (slurm/local/start.sh --nodes 4),
# one rank per node over TCP, each run checked loss for loss, bit for bit, against the same 2-rank grid run
# without interruption on one host over shared memory. Two cases, at the same time on two nodes each (their
# waits overlap):
#   preemption  the study's own sbatch script (t5scale-study render) across t5n1 and t5n2; `scancel
#               --signal=USR1` reaches the ranks on both nodes, which agree on one step, write one checkpoint and
#               exit 75; the script requeues the job, which resumes on the same nodes and completes.
#   node loss   a run across t5n3 and t5n4; every process of node t5n4 (its slurmd and its rank) killed with
#               SIGKILL in the middle of the run, as a crashed node: the job ends within the collective timeout
#               plus the teardown, rank 0 naming the lost rank and its host; the run file keeps what was flushed
#               and says failed with that error; once Slurm marks the node down (scontrol, as slurmctld would
#               after SlurmdTimeout), the job resubmitted on the node that is left (2 ranks on t5n3) resumes from
#               the last checkpoint and completes; then t5n4 is started again and returns to service.
# The cluster is ctest's shared one (T5SCALE_LOCAL_CLUSTER), or one this test starts and always removes (trap on
# EXIT).
#   tests/multinode/run_node_failures.sh SOURCE_DIR BIN_DIR PYTHON
# BIN_DIR holds t5scale-train and t5scale-study (a build's bin/). PYTHON must import h5py. Environment:
# T5SCALE_MULTINODE_STEP_TIMEOUT_S (default 90), T5SCALE_MULTINODE_TEST_TIMEOUT_S (default 200),
# T5SCALE_KEEP_MULTINODE_TEST=1 keeps the temporary folder; common.sh's T5SCALE_LOCAL_CLUSTER and
# T5SCALE_MULTINODE_REFERENCES.
set -uo pipefail

test_name=node-failures-test
# shellcheck source=tests/multinode/common.sh
. "$(dirname "$0")/common.sh" "$@"

check_multinode_prerequisites
[ -x "$bin/t5scale-study" ] || fail "$bin/t5scale-study is missing: build the target t5scale-study"
make_test_folder
train_command "$work/runs" long
reference_run 2 1 long
reference="$refs/long2tp1.h5"
use_cluster
cluster=${state:-$shared_state}

# --- Preemption on t5n1 and t5n2: the study's sbatch script, USR1 to every node's rank, requeue, resume.
preemption() {
  local job job_log preempted_at
  step="preemption: rendering the study"
  {
    echo "study: preempt"
    echo "base:"
    base_of_spec long
    echo "results_dir: $work/runs"
    echo "mode: list"
    echo "runs:"
    echo "  - {name: across2, set: {nodes: 2}}"
    echo "slurm: {gpu: none, gpus_per_node: 1, cpus_per_task: 1, time_limit: \"00:10:00\", launcher: srun, mpi: pmix}"
  } >preempt.yaml
  "$bin/t5scale-study" render preempt.yaml --base-config "$src/jobs/demo/run.yaml" >render.log 2>&1 ||
    fail "t5scale-study render failed: $(tail -n 5 render.log)"
  step="preemption: the job across t5n1 and t5n2"
  # The nodes given on the command line hold for the requeued job too.
  job=$(sbatch --parsable --nodelist=t5n1,t5n2 slurm/preempt/across2.sbatch) || fail "sbatch failed"
  job_log="$work/runs/across2.$job.log"
  wait_for_text "$job_log" "step 120/" "$job"
  step="preemption: scancel --signal=USR1 $job"
  scancel --signal=USR1 "$job" || fail "scancel --signal=USR1 failed"
  wait_for_text "$job_log" "preempted, checkpoint written; requeueing job $job" "$job"
  preempted_at=$(sed -n 's/.*preemption signal: checkpoint at step \([0-9]*\),.*/\1/p' "$job_log" | sort -u)
  if [ "$(echo "$preempted_at" | wc -l)" -ne 1 ] || [ -z "$preempted_at" ]; then
    fail "the ranks did not agree on one step to checkpoint: '$preempted_at'"
  fi
  [ -d "$work/runs/across2.ckpt/$(printf 'step_%08d' "$preempted_at")" ] ||
    fail "no checkpoint at the preemption's step $preempted_at: $(ls "$work/runs/across2.ckpt")"
  step="preemption: the requeued job"
  wait_for_text "$job_log" "restart 1" "$job"
  wait_for_job "$job"
  grep -q "t5scale-train exited with 0" "$job_log" || fail "the requeued job did not complete: $(tail -n 5 "$job_log")"
  check_run "$work/runs/across2.h5" "$reference" 2 ||
    fail "the preempted and requeued run does not match the uninterrupted one"
  echo "preemption: USR1 at about step 120 reached both nodes; one checkpoint at step $preempted_at, exit 75," \
       "requeued, resumed and completed"
}

# --- Node loss: t5n4 killed mid-run; the job ends naming it; resubmitted on t5n3, it resumes.
node_loss() {
  local limit lost_start launcher netns victims killed_at code ended_s resumed_from
  step="node loss: the job across t5n3 and t5n4"
  limit=$(step_limit) || exit 1
  lost_start=$SECONDS
  launch_in_background_as_the_scripts_do "$work/lost.log" "$work/runs/lost.exit_code" "step 150/" \
    timeout "$limit" srun --nodelist=t5n3,t5n4 --nodes=2 --ntasks=2 --ntasks-per-node=1 --mpi=pmix \
    --kill-on-bad-exit=1 "${train[@]}" --set run.name=lost
  step="node loss: killing every process of t5n4"
  netns=$(sed -n 's/^netns \(.*-t5n4\)$/\1/p' "$cluster/network")
  [ -n "$netns" ] || fail "no namespace of t5n4 in $cluster/network"
  victims=$(ip netns pids "$netns")
  echo "$victims" | xargs -r ps -o comm= -p | grep -q t5scale-train || fail "no t5scale-train runs on t5n4"
  killed_at=$SECONDS
  echo "$victims" | xargs -r kill -9
  wait "$launcher"
  code=$?
  ended_s=$((SECONDS - killed_at))
  if [ "$code" -eq 0 ] || [ "$code" -eq 124 ]; then fail "the job with a lost node ended with exit $code"; fi
  grep -q "timed out after $collective_timeout_s s; world rank 1 on t5n4 does not answer" "$work/lost.log" ||
    fail "rank 0 did not name the lost rank and host: $(grep -m 2 error "$work/lost.log")"
  "$python" - "$work/runs/lost.h5" <<'EOF' || fail "the run file of the failed job"
import sys
import h5py
with h5py.File(sys.argv[1], "r", swmr=True) as f:
    status, error = f.attrs["status"].decode(), f.attrs["error"].decode()
    steps = f["steps/step"][:]
    if status != "failed" or "world rank 1 on t5n4 does not answer" not in error:
        sys.exit(f"status {status!r}, error {error!r}")
    if len(steps) < 150 or list(steps) != list(range(1, len(steps) + 1)):
        sys.exit(f"the flushed steps are not 1..{len(steps)} with at least 150: {steps[:3]} ... {steps[-3:]}")
    print(f"lost.h5: failed after {len(steps)} flushed steps: {error}")
EOF
  # slurmctld would mark the node down after SlurmdTimeout (300 s by default) and release the job's other node.
  step="node loss: t5n4 marked down"
  scontrol update nodename=t5n4 state=down reason="node lost in the test" || fail "scontrol update failed"
  step="node loss: resubmitted on t5n3 with 2 ranks"
  limit=$(step_limit) || exit 1
  launch_as_the_scripts_do "$work/resumed.log" "$work/runs/lost.exit_code" \
    timeout "$limit" srun --nodelist=t5n3 --nodes=1 --ntasks=2 --mpi=pmix --kill-on-bad-exit=1 \
    "${train[@]}" --set run.name=lost ||
    fail "the resubmitted job failed (exit $?): $(tail -n 5 "$work/resumed.log")"
  resumed_from=$(sed -n 's/.*resum[a-z]* .*step \([0-9]*\).*/\1/p' "$work/resumed.log" | head -n 1)
  check_run "$work/runs/lost.h5" "$reference" 1 ||
    fail "the run resumed after the node loss does not match the uninterrupted one"
  echo "node loss: killed after step 150; the job ended $ended_s s later (collective timeout" \
       "$collective_timeout_s s), naming world rank 1 on t5n4; resubmitted on t5n3, resumed (${resumed_from:-?})" \
       "and completed"
  echo "node loss: $((SECONDS - lost_start)) s from submission to the completed resumption"
  # The node comes back (its slurmd started again in its namespaces, returned to service): the cluster is whole.
  step="node loss: t5n4 started again"
  limit=$(step_limit) || exit 1
  T5SCALE_SLURM_TIMEOUT_S=$limit "$src/slurm/local/start.sh" --restart t5n4 "$cluster" ||
    fail "slurm/local/start.sh --restart t5n4 did not bring the node back (the reason is above)"
}

run_cases_together preemption node_loss

[ -n "$state" ] && stop_cluster "$state" && state=""
status=0
echo "PASS: preemption across 2 nodes requeued and resumed; a lost node named, the job resumed bit for bit"
