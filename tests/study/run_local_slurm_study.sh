#!/bin/bash
# The study on a real Slurm: on the local Slurm cluster (ctest's shared 4-node one, or one this test starts), each
# run of the studies below a job on one node. Three cases, the third at the same time as the first two (its
# requeue waits while they run):
#   the demo study   jobs/cpu-demo.yaml submitted with `t5scale-study submit`; every run file checked (h5py:
#                    status completed, attempt 0, the expected grid and every step once), the job logs and
#                    `t5scale-study status`; submitting again leaves the completed runs alone
#   job arrays       the demo once more as job arrays (`submit --array`, 16 steps a run), every run completed
#   preemption       a longer run gets SIGUSR1 (what --signal sends before the time limit) while it trains; the
#                    trainer checkpoints and exits 75, the sbatch script requeues the job, and the second attempt
#                    resumes from the checkpoint and completes; that run's script is edited by hand before submit,
#                    which must submit it as edited, and its spec's setup line and env values (one literal, one
#                    expanded) must reach the job as written
# The cluster is ctest's shared one (T5SCALE_LOCAL_CLUSTER), or one this test starts and always removes (trap on
# EXIT; tests/multinode/common.sh). Where Slurm cannot start, the test fails with the reason; it never skips.
#   tests/study/run_local_slurm_study.sh SOURCE_DIR BIN_DIR PYTHON
# Environment: T5SCALE_SLURM_TEST_TIMEOUT_S (the wait for the jobs, default 600), T5SCALE_KEEP_SLURM_TEST=1 keeps
# the temporary folder.
set -uo pipefail

test_name=slurm-test
# shellcheck source=tests/multinode/common.sh
. "$(dirname "$0")/../multinode/common.sh" "$@"
timeout_s=${T5SCALE_SLURM_TEST_TIMEOUT_S:-600}
# The cluster's start and the nodes' wait for idle: within the test's own deadline, under ctest's 1200 s.
test_timeout_s=$((timeout_s + 300))
[ "${T5SCALE_KEEP_SLURM_TEST:-0}" = 1 ] && export T5SCALE_KEEP_MULTINODE_TEST=1

check_multinode_prerequisites
[ -x "$bin/t5scale-study" ] || fail "$bin/t5scale-study is missing: build the target t5scale-study"
make_test_folder
use_cluster
study() { "$bin/t5scale-study" "$@"; }

# Waits until none of the job ids given is pending or running (squeue), or fails after timeout_s; a job that can
# never start (held after its launch failed) fails at once (check_jobs_can_start, tests/multinode/common.sh). A
# squeue that fails (a busy slurmctld answers late on a loaded machine) says nothing about the jobs: it is asked
# again.
wait_for_jobs() {
  local deadline=$((SECONDS + timeout_s)) active queue
  while :; do
    if queue=$(squeue -h -r -o %i 2>"$work/squeue.$BASHPID.err"); then
      active=$(grep -xF -f <(printf '%s\n' "$@") <<<"$queue" | tr '\n' ' ')
      [ -z "$active" ] && return 0
    else
      active="unknown (squeue failed: $(cat "$work/squeue.$BASHPID.err"))"
    fi
    check_jobs_can_start "$@"
    [ $SECONDS -ge $deadline ] && fail "jobs still queued or running after ${timeout_s} s: $active ($(squeue 2>&1))"
    sleep 0.5
  done
}

# ---- The demo study: submitted first, its run configs are the preemption run's base ----
step="the demo study: submit"
submit_start=$SECONDS
study submit "$src/jobs/cpu-demo.yaml" --out "$work/jobs" --results-dir "$work/results" --bin "$bin" ||
  fail "t5scale-study submit failed"
[ -s "$work/jobs/jobs.csv" ] || fail "submit wrote no jobs.csv"
mapfile -t job_ids < <(tail -n +2 "$work/jobs/jobs.csv" | cut -d, -f2)
[ "${#job_ids[@]}" -eq 4 ] || fail "expected 4 jobs in jobs.csv, found ${#job_ids[@]}"

# ---- Preemption: SIGUSR1, checkpoint, exit 75, requeue, resume (submitted now, checked beside the demo) ----
# The run's script is rendered, edited by hand, and submitted: submit must use the edit. Its spec has a setup line
# (shell, run as written), a literal env value that would run a command if the job's shell read it as code, and
# one that asks for the job id to be expanded.
step="the preemption run's edited script"
cat >"$work/preempt.yaml" <<EOF
study: preempt
base_config: jobs/w1-tp1.yaml
base: {train.max_steps: 400, checkpoint.every_steps: 0, eval.every_steps: 0, telemetry.flush_every_steps: 1}
slurm:
  gpu: none
  time_limit: "00:15:00"
  cpus_per_task: 1
  launcher: srun
  mpi: pmix
  setup: ['echo "[t5scale-test] setup ran in job \$SLURM_JOB_ID"']
  env:
    T5SCALE_TEST_LITERAL: '\$(touch $work/injected)'
    T5SCALE_TEST_EXPANDED: {expand: "job-\$SLURM_JOB_ID"}
EOF
preempt_args=(--out "$work/preempt-jobs" --results-dir "$work/results" --bin "$bin")
study render "$work/preempt.yaml" "${preempt_args[@]}" || fail "render of the preemption run failed"
script="$work/preempt-jobs/preempt.sbatch"
# shellcheck disable=SC2016  # the line is for the job's shell
edit='echo "[t5scale-test] edited script: $T5SCALE_TEST_LITERAL, $T5SCALE_TEST_EXPANDED"'
sed -i "/^echo \"\\[t5scale\\] run preempt: job /i $edit" "$script" || fail "cannot edit $script"
study submit "$work/preempt.yaml" "${preempt_args[@]}" >"$work/preempt-submit.txt" ||
  fail "submit of the preemption run failed: $(cat "$work/preempt-submit.txt")"
grep -q "^using $script as edited" "$work/preempt-submit.txt" ||
  fail "submit did not say it used the edited script: $(cat "$work/preempt-submit.txt")"
grep -qF "[t5scale-test] edited script" "$script" || fail "submit overwrote the edited $script"
job=$(tail -n 1 "$work/preempt-jobs/jobs.csv" | cut -d, -f2)
run_file="$work/results/preempt.h5"

# The demo study's jobs, run files, logs and status; then the same study as job arrays.
demo_and_arrays() {
  local job log run
  step="the demo study: its 4 jobs"
  wait_for_jobs "${job_ids[@]}"
  echo "the 4 demo jobs ran in $((SECONDS - submit_start)) s"

  "$python" - "$work/results" "$work/jobs/jobs.csv" <<'EOF' || fail "the demo's run files are not as expected"
import csv, math, sys
import h5py
import numpy as np

results, jobs_csv = sys.argv[1], sys.argv[2]
jobs = {row["run"]: row["job_id"] for row in csv.DictReader(open(jobs_csv))}
expected = {"w1-tp1": (1, 1, 1), "w2-dp2": (2, 1, 2), "w2-tp2": (2, 2, 1), "w4-tp2-dp2": (4, 2, 2)}
assert sorted(jobs) == sorted(expected), jobs
problems = []
for run, (world, tp, dp) in expected.items():
    path = f"{results}/{run}.h5"
    with h5py.File(path, "r", swmr=True) as f:
        a = f.attrs
        text = lambda k: a[k].decode() if isinstance(a[k], bytes) else str(a[k])
        checks = {
            "status": (text("status"), "completed"),
            "study": (text("study"), "cpu-demo"),
            "attempt": (int(a["attempt"]), 0),
            "world_size": (int(a["world_size"]), world),
            "tp": (int(a["tp"]), tp),
            "dp": (int(a["dp"]), dp),
            "nodes": (int(a["nodes"]), 1),
            "max_steps": (int(a["max_steps"]), 48),
            "global_batch": (int(a["global_batch"]), 16),
            "slurm_job_id": (text("slurm_job_id"), jobs[run]),
        }
        for key, (got, want) in checks.items():
            if got != want:
                problems.append(f"{run}: {key} is {got!r}, expected {want!r}")
        steps = f["steps/step"][:]
        if not np.array_equal(steps, np.arange(1, 49)):
            problems.append(f"{run}: /steps/step is {steps.tolist()}, expected 1..48 once each")
        loss = f["steps/loss"][:]
        if not np.all(np.isfinite(loss)):
            problems.append(f"{run}: non-finite losses {loss.tolist()}")
        if int(f["summary"].attrs["steps_completed"]) != 48:
            problems.append(f"{run}: /summary steps_completed is {f['summary'].attrs['steps_completed']}")
        if f["steps/memory_allocated_bytes"].shape != (48, world):
            problems.append(f"{run}: per-rank columns have shape {f['steps/memory_allocated_bytes'].shape}")
for p in problems:
    print(p)
sys.exit(1 if problems else 0)
EOF

  for run in w1-tp1 w2-dp2 w2-tp2 w4-tp2-dp2; do
    job=$(grep "^$run," "$work/jobs/jobs.csv" | cut -d, -f2)
    log="$work/results/$run.$job.log"
    grep -q "\[t5scale\] run $run: t5scale-train exited with 0" "$log" || fail "$log does not end with exit 0"
  done

  study status "$src/jobs/cpu-demo.yaml" --out "$work/jobs" --results-dir "$work/results" >"$work/status.txt" ||
    fail "t5scale-study status failed"
  cat "$work/status.txt"
  for run in w1-tp1 w2-dp2 w2-tp2 w4-tp2-dp2; do
    grep -Eq "^$run +[0-9]+ +COMPLETED +.* completed +0 +48/48 +completed$" "$work/status.txt" ||
      fail "t5scale-study status does not show $run completed at 48/48"
  done
  grep -q "^summary: 4 completed$" "$work/status.txt" || fail "status summary is not '4 completed'"

  # Submitting again leaves completed runs alone.
  study submit "$src/jobs/cpu-demo.yaml" --out "$work/jobs" --results-dir "$work/results" --bin "$bin" \
    >"$work/resubmit.txt" || fail "the second submit failed"
  [ "$(grep -c "^skipped .*: completed" "$work/resubmit.txt")" -eq 4 ] || fail "resubmit: $(cat "$work/resubmit.txt")"

  # The same study as job arrays (one per launch shape), its runs shortened to 16 steps (one evaluation, one
  # checkpoint): what is checked here is that every array task runs its run to completion.
  step="job arrays: submit --array"
  study submit "$src/jobs/cpu-demo.yaml" --array --set train.max_steps=16 --out "$work/array-jobs" \
    --results-dir "$work/array-results" --bin "$bin" || fail "t5scale-study submit --array failed"
  mapfile -t array_jobs < <(tail -n +2 "$work/array-jobs/jobs.csv" | cut -d, -f2)
  [ "${#array_jobs[@]}" -eq 4 ] || fail "expected 4 array tasks in jobs.csv, found ${#array_jobs[@]}"
  wait_for_jobs "${array_jobs[@]}"
  study status "$src/jobs/cpu-demo.yaml" --out "$work/array-jobs" --results-dir "$work/array-results" \
    >"$work/array-status.txt" || fail "t5scale-study status (arrays) failed"
  grep -q "^summary: 4 completed$" "$work/array-status.txt" ||
    fail "the job arrays did not complete the 4 runs: $(cat "$work/array-status.txt")"
}

# The preemption run: SIGUSR1 while it trains, requeued and resumed.
preemption() {
  step="preemption: the run reaching step 20"
  # Wait until the run has flushed 20 steps, then signal its tasks as --signal would. The reader looks for 10 s at
  # a time; between, a job that can never start fails the test at once.
  local reach_deadline=$((SECONDS + timeout_s))
  until "$python" - "$run_file" 10 <<'EOF'; do
import os, sys, time
import h5py
path, deadline = sys.argv[1], time.time() + float(sys.argv[2])
while time.time() < deadline:
    try:
        with h5py.File(path, "r", swmr=True) as f:
            if f["steps/step"].shape[0] >= 20:
                sys.exit(0)
    except (OSError, KeyError):
        pass
    time.sleep(0.2)
sys.exit(1)
EOF
    jobs_checked_at=-100  # asked now, however recently it was asked before
    check_jobs_can_start "$job"
    [ $SECONDS -lt $reach_deadline ] || fail "the preemption run did not reach step 20 in ${timeout_s} s"
  done
  preempt_status() {
    study status "$work/preempt.yaml" --out "$work/preempt-jobs" --results-dir "$work/results"
  }
  preempt_status >"$work/status-running.txt" || fail "t5scale-study status failed"
  grep -Eq "^preempt +$job +RUNNING +.* running +0 +[0-9]+/400 +running$" "$work/status-running.txt" ||
    fail "status does not show the preemption run running: $(cat "$work/status-running.txt")"
  step="preemption: the run's checkpoint and requeue"
  scancel --signal=USR1 "$job" || fail "scancel --signal=USR1 $job failed"
  # The requeued job waits about 20 s before it starts again: status shows it as preempted and requeued. On a
  # loaded machine the checkpoint and the exit take a while: the deadline is the test's, not a count of polls.
  local seen_requeued=0 requeue_deadline log
  requeue_deadline=$((SECONDS + timeout_s))
  while [ $SECONDS -lt $requeue_deadline ]; do
    preempt_status >"$work/status-requeued.txt" || fail "t5scale-study status failed"
    if grep -Eq "^preempt +$job +PENDING +.* preempted +0 +[0-9]+/400 +preempted \(requeued\)$" \
       "$work/status-requeued.txt"; then
      seen_requeued=1
      break
    fi
    check_jobs_can_start "$job"
    sleep 0.5
  done
  [ "$seen_requeued" -eq 1 ] ||
    fail "status never showed the run preempted (requeued) in ${timeout_s} s: $(cat "$work/status-requeued.txt")"
  cat "$work/status-requeued.txt"
  step="preemption: the requeued run"
  wait_for_jobs "$job"
  "$python" - "$run_file" <<'EOF' || fail "the preempted run did not resume and complete"
import sys
import h5py
import numpy as np
with h5py.File(sys.argv[1], "r", swmr=True) as f:
    a = f.attrs
    status = a["status"].decode() if isinstance(a["status"], bytes) else str(a["status"])
    steps = f["steps/step"][:]
    print(f"preempt: status {status}, attempt {a['attempt']}, resumed from step {a['resumed_from_step']}, "
          f"{len(steps)} step rows")
    ok = (status == "completed" and int(a["attempt"]) == 1 and 20 <= int(a["resumed_from_step"]) < 400
          and np.array_equal(steps, np.arange(1, 401)))
    sys.exit(0 if ok else 1)
EOF
  log="$work/results/preempt.$job.log"
  grep -q "\[t5scale\] run preempt: preempted, checkpoint written; requeueing job $job" "$log" ||
    fail "$log does not show the requeue"
  grep -q "restart 1," "$log" || fail "$log does not show the restarted job"
  grep -qF "[t5scale-test] setup ran in job $job" "$log" || fail "$log does not show the spec's setup line"
  grep -qF "[t5scale-test] edited script: \$(touch $work/injected), job-$job" "$log" ||
    fail "$log does not show the edited script's line with the env values as written (literal) and expanded"
  [ ! -e "$work/injected" ] || fail "a literal slurm.env value ran as a command in the job"
}

run_cases_together demo_and_arrays preemption

[ -n "$state" ] && stop_cluster "$state" && state=""
status=0
echo "PASS: the demo study ran on the local Slurm cluster (also as job arrays), and a preempted run resumed after its requeue"
