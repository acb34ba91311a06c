#!/usr/bin/env bash
# Installs what is missing (scripts/setup.sh), builds everything in build/ (or $T5SCALE_BUILD_DIR) and runs every
# test with ctest, ending with its label summary. Arguments go to ctest: scripts/test.sh -L parity
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$ROOT/scripts/setup.sh"
VENV=$(cat "${T5SCALE_CACHE:-$HOME/.cache/t5scale}/venv-path")
BUILD_DIR=${T5SCALE_BUILD_DIR:-$ROOT/build}

start=$(date +%s)
cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DT5SCALE_PYTHON="$VENV/bin/python" -DT5SCALE_BUILD_TESTS=ON >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)"
built=$(date +%s)
echo "[test] build: $((built - start)) s"

cd "$BUILD_DIR"
# LibTorch and OpenMP on one thread in every test process (unless the caller sets OMP_NUM_THREADS): ctest runs more
# tests than there are cores, so a second intra-op thread per process only spins; unit.memory_model takes 136
# core-seconds on LibTorch's default two threads and 90 on one. A test that needs more passes --threads itself.
# (nproc reads OMP_NUM_THREADS: the cores are counted without it.)
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# Two slots per core and three more: a test's PROCESSORS counts half cores (tests/CMakeLists.txt, t5scale_test_cores),
# and the slots beyond the cores let tests that partly wait (on a collective's timeout, a requeue, the disk, a
# process starting) run beside those that fill them. On 2 cores the suite kept them 88% busy with one slot more
# (781 CPU seconds in 445 s) and 95% with three (804 in 422 s).
ctest --output-on-failure --timeout 600 -j "$((2 * cores + 3))" "$@"
echo "[test] tests: $(($(date +%s) - built)) s"
