#!/usr/bin/env bash
# A study on the Linux manual pages, run on this machine the way a user runs one on a cluster: installs what is
# missing and builds; makes the corpus (data_prep/manpages/make_corpus.py) and its two datasets with a tokenizer
# trained on it (data/manpages/: summary.h5, section.h5, spiece.model; kept when there); starts a local Slurm
# cluster of 4 nodes (slurm/local/start.sh, one network namespace per node) and submits the study to it with
# `t5scale-study submit`; follows it with `t5scale-study status` until every job has ended; writes the analysis
# (`t5scale-analyze`) into the study's results folder; stops the cluster.
#   scripts/study_manpages.sh [SPEC] [-- extra arguments of t5scale-analyze]
# SPEC defaults to jobs/lr-scaling-manpages.yaml; its results go to results/<study>/ (run files, job logs,
# status.txt and report/ with the tables, figures and report.html). Runs that completed before are kept (submit
# skips them), so an interrupted study goes on where it stopped. Needs root (the cluster's namespaces). Environment:
# T5SCALE_BUILD_DIR (default build/), T5SCALE_STUDY_TIMEOUT_S (the wait for the jobs, default 7200).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SPEC=jobs/lr-scaling-manpages.yaml
if [ $# -gt 0 ] && [ "$1" != "--" ]; then SPEC=$1; shift; fi
[ "${1:-}" = "--" ] && shift
CACHE=${T5SCALE_CACHE:-$HOME/.cache/t5scale}
timeout_s=${T5SCALE_STUDY_TIMEOUT_S:-7200}

"$ROOT/scripts/setup.sh"
VENV=$(cat "$CACHE/venv-path")
BUILD_DIR=${T5SCALE_BUILD_DIR:-$ROOT/build}
cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DT5SCALE_PYTHON="$VENV/bin/python" >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" --target t5scale-train t5scale-prep t5scale-study
state=$(mktemp -d /tmp/t5scale-study.XXXXXX)
trap '"$ROOT/slurm/local/stop.sh" "$state/slurm" >/dev/null 2>&1 || true; rm -rf "$state"' EXIT
# The jobs run a copy of the programs: a rebuild while the study runs does not change its later runs.
cp -a "$BUILD_DIR/bin" "$state/bin"
bin=$state/bin

cd "$ROOT"  # the spec names its data and results relative to the clone, and the jobs start here
[ -s "$SPEC" ] || { echo "study_manpages.sh: no study spec '$SPEC'" >&2; exit 1; }
study=$(sed -n 's/^study: *//p' "$SPEC" | head -n 1)
[ -n "$study" ] || { echo "study_manpages.sh: $SPEC has no 'study:' line" >&2; exit 1; }

echo "==== the data: data/manpages ===="
data=data/manpages
if [ ! -s "$data/section.h5" ] || [ ! -s "$data/summary.h5" ]; then
  "$VENV/bin/python" data_prep/manpages/make_corpus.py --out "$data"
  "$bin/t5scale-prep" --recipe data_prep/recipes/manpages_summary.yaml --input "$data/corpus.jsonl" \
    --out "$data/summary.h5" --train-tokenizer --tokenizer-out "$data/spiece.model" --vocab-size 4000
  "$bin/t5scale-prep" --recipe data_prep/recipes/manpages_section.yaml --input "$data/corpus.jsonl" \
    --out "$data/section.h5" --tokenizer "$data/spiece.model"
else
  echo "kept: $(ls "$data")"
fi

echo "==== a local Slurm cluster of 4 nodes ===="
"$ROOT/slurm/local/start.sh" --nodes 4 "$state/slurm"
export SLURM_CONF=$state/slurm/slurm.conf
# The jobs inherit this environment (sbatch's --export=ALL): Open MPI between the nodes over the cluster's bridge,
# as root, with ranks that yield the core while they wait.
subnet=$(sed -n 's/^subnet //p' "$state/slurm/network")
export OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=$subnet OMPI_MCA_oob_tcp_if_include=$subnet
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1

echo "==== t5scale-study plan and submit: $SPEC ===="
jobs_dir=$state/jobs
"$bin/t5scale-study" submit "$SPEC" --out "$jobs_dir" --bin "$bin"
mapfile -t job_ids < <(tail -n +2 "$jobs_dir/jobs.csv" | cut -d, -f2 | grep -v '^$' || true)

echo "==== waiting for ${#job_ids[@]} job(s) ===="
deadline=$((SECONDS + timeout_s))
while [ "${#job_ids[@]}" -gt 0 ]; do
  # A squeue that fails (a busy slurmctld) says nothing about the jobs: asked again.
  if queue=$(squeue -h -r -o %i 2>/dev/null); then
    active=$(grep -cxF -f <(printf '%s\n' "${job_ids[@]}") <<<"$queue" || true)
  else
    active="unknown (squeue failed)"
  fi
  [ "$active" = 0 ] && break
  if [ $SECONDS -ge $deadline ]; then
    echo "study_manpages.sh: $active job(s) still queued or running after ${timeout_s} s" >&2
    "$bin/t5scale-study" status "$SPEC" --out "$jobs_dir" || true
    exit 1
  fi
  echo "[$(date -u +%H:%M:%S)] $active job(s) queued or running"
  sleep 30
done
"$bin/t5scale-study" status "$SPEC" --out "$jobs_dir" | tee "results/$study/status.txt"

echo "==== t5scale-analyze results/$study ===="
"$ROOT/analysis/t5scale-analyze" "results/$study" "$@"
