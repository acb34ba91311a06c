#!/usr/bin/env bash
# The second device call of 2026-11-26 (H200): SDPA's kernels against the explicit path, t5scale against
# transformers, and the planner's remaining rows. Run from the repository root with the bundle's tarball:
#   results/gpu/NVIDIA_H200/2026-11-26/5-attention-and-rows/run.sh BUNDLE.tar.gz OUT_DIR
set -uo pipefail
TARBALL=$1 R=$2
mkdir -p /tmp/b "$R" && tar xzf "$TARBALL" -C /tmp/b || exit 9
B=$(ls -d /tmp/b/t5scale-bundle-*/ | head -1)
# shellcheck disable=SC1091
source "$B/env.sh" --python python3 || exit 9
export PYTHONUNBUFFERED=1
BENCH=$B/bin/t5scale-bench
say() { printf '\n=== %s %s\n' "$(date -u +%H:%M:%S)" "$*"; }
bench() {  # NAME LIMIT_S ARGS...
  local name=$1 limit=$2; shift 2
  say "bench $name: $*"
  timeout --kill-after=5 "$limit" "$BENCH" --precision bf16 --steps 10 "$@" --json "$R/$name.json" 2>&1 |
    tee "$R/$name.log" | grep -v '^  t5scale .*: \(inputs\|tokens =\)'
  echo "exit ${PIPESTATUS[0]}"
}
say "attention kernels"
timeout 90 python3 bench/attention_kernels.py --json "$R/attention_kernels.json" 2>&1 | tee "$R/attention_kernels.log"
for att in sdpa explicit; do
  prof=(); [[ $att == explicit ]] && prof=(--profile 2)
  bench "t5-3b-147-26-$att" 90 --model t5-3b --micro-batch 64 --source-length 147 --target-length 26 --attention $att "${prof[@]}"
  bench "t5-v1_1-xxl-512-128-$att" 60 --model t5-v1_1-xxl --tp-shard 8 --micro-batch 64 --source-length 512 --target-length 128 --attention $att
  bench "t5-v1_1-base-512-128-$att" 60 --model t5-v1_1-base --micro-batch 256 --source-length 512 --target-length 128 --attention $att
done
for model in t5-v1_1-base t5-v1_1-large; do
  say "compare $model 512/128, micro-batch 64"
  timeout --kill-after=5 120 python3 bench/compare.py --models $model --lengths 512/128 --precision bf16 --micro-batch 64 \
    --device cuda --rounds 2 --steps 10 --threads 0 --bench-bin "$BENCH" --python python3 \
    --json "$R/compare-$model-512-128.json" 2>&1 | tee "$R/compare-$model-512-128.log" | grep -v '^\$ '
done
# The planner's micro-batches for an H200 (plan stage of the first call), rows not run there.
bench t5-3b-512-128 70 --model t5-3b --micro-batch 16 --source-length 512 --target-length 128 --checkpoint-every-blocks auto
bench t5-v1_1-xxl-147-26 60 --model t5-v1_1-xxl --tp-shard 8 --micro-batch 256 --source-length 147 --target-length 26 --checkpoint-every-blocks auto
bench t5-v1_1-large-512-128 60 --model t5-v1_1-large --micro-batch 128 --source-length 512 --target-length 128 --checkpoint-every-blocks auto
bench t5-v1_1-large-147-26 60 --model t5-v1_1-large --micro-batch 256 --source-length 147 --target-length 26 --checkpoint-every-blocks auto
bench t5-v1_1-base-147-26 60 --model t5-v1_1-base --micro-batch 256 --source-length 147 --target-length 26 --checkpoint-every-blocks auto
say done
