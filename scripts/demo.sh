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

cd "$ROOT"
RESULTS=${T5SCALE_DEMO_RESULTS:-results/demo}
mkdir -p "$RESULTS"
# Open MPI on a small machine: more ranks than cores, root allowed, shared memory.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl=self,vader OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1
for grid in "1 1" "2 1" "2 2" "4 2" "4 1"; do
  read -r world tp <<<"$grid"
  name="w${world}-tp${tp}-dp$((world / tp))"
  echo "==== demo run $name: $world rank(s), tp $tp x dp $((world / tp)) ===="
  rm -rf "$RESULTS/$name.h5" "$RESULTS/$name.ckpt" "$RESULTS/$name.eval.jsonl"
  mpirun -np "$world" "$BUILD_DIR/bin/t5scale-train" --config jobs/demo/run.yaml \
    --set parallel.tp="$tp" --set run.name="$name" --set run.output_dir="$RESULTS" "$@" | grep -v '^#\|^  \|^[a-z_]*:$'
done
echo "==== analysis ===="
"$ROOT/analysis/t5scale-analyze" "$RESULTS" --metric exact_match
