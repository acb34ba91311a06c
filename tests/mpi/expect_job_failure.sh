#!/usr/bin/env bash
# Runs a job that must fail: passes when it exits non-zero within LIMIT seconds and its output holds PATTERN.
# With --alone, PATTERN is a whole line that must be printed exactly once, with no words of Open MPI's abort beside
# it (its MPI_ABORT banner, or the ORTE_ERROR_LOG that replaces it when the banner races the ranks being killed):
# a job every rank of which refuses the same input. mpirun's note of a non-zero exit may follow.
# usage: expect_job_failure.sh [--alone] LIMIT_SECONDS PATTERN command [args...]
set -uo pipefail
alone=0
[[ ${1:-} == --alone ]] && alone=1 && shift
limit=$1 pattern=$2
shift 2
start=$(date +%s)
output=$(timeout $((limit + 60)) "$@" 2>&1)
code=$?
elapsed=$(($(date +%s) - start))
echo "$output"
fail() { echo "FAILED: $*"; exit 1; }
[[ $code -ne 0 ]] || fail "the job exited 0"
[[ $code -ne 124 ]] || fail "the job hung and was killed after $((limit + 60)) s"
if ((alone)); then
  count=$(grep -cxF -- "$pattern" <<<"$output")
  [[ $count -eq 1 ]] || fail "'$pattern' printed $count times, not once"
  for noise in "MPI_ABORT was invoked" "ORTE_ERROR_LOG" "PMIX_ERROR" "error:"; do
    others=$(grep -F -- "$noise" <<<"$output" | grep -vxF -- "$pattern")
    [[ -z $others ]] || fail "more than the one line: $others"
  done
else
  grep -qF -- "$pattern" <<<"$output" || fail "no '$pattern' in the job's output"
fi
((elapsed <= limit)) || fail "the job took ${elapsed} s to fail, more than ${limit} s"
echo "job failed as expected: exit code $code after ${elapsed} s"
