#!/usr/bin/env bash
# Runs a GPU test that is not the GPU test binary itself, unless that binary (PROBE) skips: asked only to list its
# tests, it exits with the skip code 77 where LibTorch sees no CUDA device, and so does this script.
# usage: unless_skipped.sh PROBE -- command [args...]
set -uo pipefail
probe=$1
shift
[[ ${1:-} == -- ]] && shift
output=$("$probe" --gtest_list_tests 2>&1)
code=$?
if ((code == 77)); then
  echo "$output"
  exit 77
fi
((code == 0)) || { echo "$output"; echo "FAILED: $probe --gtest_list_tests exited $code"; exit 1; }
exec "$@"
