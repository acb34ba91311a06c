#!/usr/bin/env bash
# The demo's scaling study, on an existing build: the tiny T5 on the synthetic task (jobs/demo/run.yaml) on 1, 2
# and 4 ranks of this machine with different TP x DP grids, one t5scale-train job under mpirun each, then
# t5scale-analyze over the run files. scripts/demo.sh builds and calls this; the analysis tests call it with
# fewer steps.
#   scripts/demo_study.sh BUILD_DIR RESULTS_DIR [--set key=value ...]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=$1
RESULTS=$2
shift 2
mkdir -p "$RESULTS"
# Open MPI on a small machine: more ranks than cores, root allowed, shared memory, idle ranks yield.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl=self,vader OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1
for grid in "1 1" "2 1" "2 2" "4 2" "4 1"; do
  read -r world tp <<<"$grid"
  name="w${world}-tp${tp}-dp$((world / tp))"
  echo "==== demo run $name: $world rank(s), tp $tp x dp $((world / tp)) ===="
  rm -rf "$RESULTS/$name.h5" "$RESULTS/$name.ckpt" "$RESULTS/$name.eval.jsonl"
  # The resolved config (printed first by every job) is in the run file; the demo shows the rest.
  mpirun -np "$world" "$BUILD_DIR/bin/t5scale-train" --config "$ROOT/jobs/demo/run.yaml" \
    --set parallel.tp="$tp" --set run.name="$name" --set run.output_dir="$RESULTS" "$@" |
    sed '/^# t5scale-train: resolved config/,/^[^ #a-z_]\|^\[/{/^\[/!d}'
done
echo "==== analysis ===="
"$ROOT/analysis/t5scale-analyze" "$RESULTS" --metric exact_match
