#!/usr/bin/env bash
# Runs a job every rank of which refuses the same input: passes when it exits non-zero within LIMIT seconds with
# LINE printed exactly once and no words of Open MPI's abort (its MPI_ABORT banner, or the ORTE_ERROR_LOG that
# replaces it when the banner races the ranks being killed). mpirun's note of a non-zero exit may follow.
# usage: expect_message_alone.sh LIMIT_SECONDS LINE command [args...]
set -uo pipefail
limit=$1 line=$2
shift 2
start=$(date +%s)
output=$(timeout $((limit + 60)) "$@" 2>&1)
code=$?
elapsed=$(($(date +%s) - start))
echo "$output"
fail() { echo "FAILED: $*"; exit 1; }
[[ $code -ne 0 ]] || fail "the job exited 0"
[[ $code -ne 124 ]] || fail "the job hung and was killed after $((limit + 60)) s"
count=$(grep -cxF -- "$line" <<<"$output")
[[ $count -eq 1 ]] || fail "'$line' printed $count times, not once"
for noise in "MPI_ABORT was invoked" "ORTE_ERROR_LOG" "PMIX_ERROR" "error:"; do
  others=$(grep -F -- "$noise" <<<"$output" | grep -vxF -- "$line")
  [[ -z $others ]] || fail "more than the one line: $others"
done
((elapsed <= limit)) || fail "the job took ${elapsed} s to fail, more than ${limit} s"
echo "job refused with its message alone: exit code $code after ${elapsed} s"
