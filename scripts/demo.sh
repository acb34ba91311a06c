#!/usr/bin/env bash
# The demo: installs what is missing, builds, and runs a small scaling study of the tiny T5 on the built-in
# synthetic task on this machine's CPU cores: 1 rank, 2 ranks (tp 2 / dp 2) and 4 ranks (tp 2 x dp 2, dp 4), each a
# t5scale-train job under mpirun writing results/demo/<run>.h5 and printing its resource card. It ends with
# t5scale-analyze's report in results/demo/report/. Arguments are extra --set overrides for every run, e.g.
#   scripts/demo.sh --set train.max_steps=40
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$ROOT/scripts/setup.sh"
VENV=$(cat "${T5SCALE_CACHE:-$HOME/.cache/t5scale}/venv-path")
BUILD_DIR=${T5SCALE_BUILD_DIR:-$ROOT/build}
cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DT5SCALE_PYTHON="$VENV/bin/python" >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" --target t5scale-train

cd "$ROOT"  # run files and the report name results/demo relative to the clone
exec "$ROOT/scripts/demo_study.sh" "$BUILD_DIR" "${T5SCALE_DEMO_RESULTS:-results/demo}" "$@"
