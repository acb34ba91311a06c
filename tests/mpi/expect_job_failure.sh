#!/usr/bin/env bash
# Runs a job that must fail: passes when it exits non-zero within LIMIT seconds and its output holds PATTERN.
# usage: expect_job_failure.sh LIMIT_SECONDS PATTERN command [args...]
set -uo pipefail
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
grep -qF -- "$pattern" <<<"$output" || fail "no '$pattern' in the job's output"
((elapsed <= limit)) || fail "the job took ${elapsed} s to fail, more than ${limit} s"
echo "job failed as expected: exit code $code after ${elapsed} s"
