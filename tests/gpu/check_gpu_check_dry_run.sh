#!/usr/bin/env bash
# scripts/gpu-check.sh --dry-run on this machine: it lists every stage with its command (the gpu label, the 50-step
# training run, the eight benchmark rows with the planner's micro-batches, the comparison with transformers),
# writes nothing, and refuses bad arguments with a message; --quick --dry-run lists the short plan in its order and
# states the bytes that travel with a call to a lent GPU machine, refusing a plan over 60 MiB; --attention-ab
# --dry-run lists the attention A/B plan (cuDNN's fused attention against the sdpa kernel on the two rows).
# usage: check_gpu_check_dry_run.sh GPU_CHECK_SCRIPT BUILD_DIR WORK_DIR
set -uo pipefail
script=$1 build=$2 work=$3
fail() { echo "FAILED: $*"; exit 1; }
rm -rf "$work"
mkdir -p "$work"
cd "$work" || fail "cannot enter $work"  # a fresh working folder: whatever the dry run writes would show here
out_dir=$work/results
output=$("$script" --dry-run --build-dir "$build" "$out_dir" 2>&1)
code=$?
echo "$output"
((code == 0)) || fail "the dry run exited $code"
[[ ! -e $out_dir ]] || fail "the dry run created $out_dir"
leftovers=$(find "$work" -mindepth 1 | head -5)
[[ -z $leftovers ]] || fail "the dry run wrote into its working folder: $leftovers"
expect() { grep -qE -- "$1" <<<"$output" || fail "no line matching '$1' in the dry run"; }
expect "^  environment .*nvidia-smi"
expect "^  gpu-tests .*ctest --test-dir $build -L gpu"
expect "^  train .*check_train_on_gpu.py --bin $build/bin .*--steps 50 .*--json $out_dir/train.json"
for model in t5-v1_1-base t5-v1_1-large t5-3b t5-v1_1-xxl; do
  for lengths in "512 128" "147 26"; do
    read -r source target <<<"$lengths"
    # The planner's choice is a power of two; the bench row uses it.
    planned=$(grep -E "^  plan +$model $source/$target tp [18]: planner: micro-batch [0-9]+ " <<<"$output" |
              sed -E 's/.*micro-batch ([0-9]+) .*/\1/')
    [[ $planned =~ ^(1|2|4|8|16|32|64|128|256)$ ]] || fail "no planner micro-batch for $model $source/$target"
    shard="" profile=""
    [[ $model == t5-v1_1-xxl ]] && shard=" --tp-shard 8"
    [[ $model-$source-$target == t5-3b-147-26 ]] && profile=" --profile 2"  # the default --profile-row
    expect "^  bench $model-$source-$target .*t5scale-bench.* --model $model --precision bf16 --micro-batch $planned --source-length $source --target-length $target --steps [0-9]+$shard --checkpoint-every-blocks auto$profile --json $out_dir/bench/$model-$source-$target.json"
  done
done
# T5-3B 147/26 with the optimizer's state on the host, beside the same row without.
planned_3b=$(grep -E "^  plan +t5-3b 147/26 tp 1: planner: micro-batch [0-9]+ " <<<"$output" | sed -E 's/.*micro-batch ([0-9]+) .*/\1/')
expect "^  bench t5-3b-147-26-offload .* --model t5-3b --precision bf16 --micro-batch $planned_3b .* --checkpoint-every-blocks auto --offload-optimizer --json $out_dir/bench/t5-3b-147-26-offload.json"
expect "^  compare t5-v1_1-base-512-128 .*--models t5-v1_1-base --lengths 512/128 --precision bf16"
expect "^  summary "
# The larger model gets the smaller micro-batch at the same lengths.
micro() { grep -E "^  plan +$1 512/128" <<<"$output" | sed -E 's/.*micro-batch ([0-9]+) .*/\1/'; }
(($(micro t5-v1_1-base) >= $(micro t5-v1_1-large) && $(micro t5-v1_1-large) >= $(micro t5-3b))) ||
  fail "planner micro-batches do not fall with the model's size: $(micro t5-v1_1-base) $(micro t5-v1_1-large) $(micro t5-3b)"

# --rows keeps the named rows of the bench and compare stages; --stage-cap bounds every stage; --profile-row moves
# the profile.
output=$("$script" --dry-run --build-dir "$build" --rows t5-v1_1-base-512-128,t5-v1_1-xxl-147-26 --stage-cap 45 \
         --profile-row t5-v1_1-xxl-147-26 "$out_dir" 2>&1) || fail "the dry run with --rows exited $?: $output"
(($(grep -cE '^  (bench|compare) ' <<<"$output") == 3)) || fail "--rows: not three bench and compare lines: $output"
expect "^  bench t5-v1_1-base-512-128 \[<=   45 s\] .* --checkpoint-every-blocks auto --json "
expect "^  bench t5-v1_1-xxl-147-26 \[<=   45 s\] .* --tp-shard 8 --checkpoint-every-blocks auto --profile 2 --json "
expect "^  compare t5-v1_1-base-512-128 \[<=   45 s\] "
expect "^  gpu-tests +\[<=   45 s\] "

# --quick: the short plan for a GPU lent for minutes, in its order, within 7 minutes, and what travels with the call.
output=$("$script" --quick --dry-run --build-dir "$build" "$out_dir" 2>&1) || fail "the quick dry run exited $?: $output"
echo "$output"
[[ ! -e $out_dir ]] || fail "the quick dry run created $out_dir"
expect "budget 7 min; .*; the quick plan$"
expect "^travels: the clone [0-9.]+ MiB \+ .* = [0-9.]+ MiB of the 60 MiB a call may carry$"
stages=$(sed -nE 's/^  (environment|backend-load|backend-bench|gpu-tests|train|plan|bench|tp2|attention|compare|summary) .*/\1/p' \
         <<<"$output" | uniq | tr '\n' ' ')
[[ $stages == "environment backend-load backend-bench gpu-tests train plan bench tp2 attention compare summary " ]] ||
  fail "the quick plan's stages, in order: $stages"
expect "^  backend-load .*t5scale_mpi_tests --gtest_color=no --gtest_filter=CudaBackend\.\*$"
expect "^  backend-bench .*t5scale-bench --device cuda --model tiny .*--steps 10 "
expect "^  train .*check_train_on_gpu.py .*--steps 50 .*--grad-accumulation 2 "
for row in "t5-3b 147 26 1" "t5-v1_1-xxl 512 128 8"; do
  read -r model source target tp <<<"$row"
  planned=$(grep -E "^  plan +$model $source/$target tp $tp: planner: micro-batch [0-9]+ " <<<"$output" |
            sed -E 's/.*micro-batch ([0-9]+) .*/\1/')
  [[ $planned =~ ^(1|2|4|8|16|32|64|128|256)$ ]] || fail "quick: no planner micro-batch for $model $source/$target"
  eval "planned_${model//[-.]/_}=$planned"
done
expect "^  bench t5-3b-147-26 .* --micro-batch $planned_t5_3b .* --checkpoint-every-blocks auto --profile 2 --json "
expect "^  bench t5-3b-147-26-selective .* --micro-batch $planned_t5_3b .* --checkpoint-every-blocks 0 --selective-recomputation --json "
expect "^  bench t5-3b-147-26-offload \[<=  120 s\] .* --micro-batch $planned_t5_3b .* --checkpoint-every-blocks auto --offload-optimizer --json "
expect "^  bench t5-v1_1-xxl-512-128 .* --micro-batch $planned_t5_v1_1_xxl .* --tp-shard 8 --checkpoint-every-blocks auto --json "
expect "^  bench t5-v1_1-xxl-512-128-sequence-parallel .* --tp-shard 8 --checkpoint-every-blocks auto --sequence-parallel --json "
expect "^  tp2 +left out: NCCL refuses two ranks on one device"
expect "^  attention .*attention_kernels.py --bias model --shapes ${planned_t5_3b}x32x147x128,${planned_t5_v1_1_xxl}x8x512x64 "
expect "^  compare t5-v1_1-base-147-26 .*--models t5-v1_1-base --lengths 147/26 .*--rounds 2 .*--hf-compile "
# A bundle's tarball beside its folder is counted; one that would not fit beside the clone stops the quick plan.
mkdir -p "$work/fat/t5scale-bundle-x" && printf 'source /dev/null\n' >"$work/fat/t5scale-bundle-x/env.sh"
head -c $((40 * 1048576)) /dev/zero >"$work/fat/t5scale-bundle-x.tar.gz"
bad=$("$script" --quick --dry-run --bundle "$work/fat/t5scale-bundle-x" "$out_dir" 2>&1)
(($? == 1)) && grep -qE "the bundle .*t5scale-bundle-x.tar.gz 40.0 MiB = [0-9.]+ MiB of the 60 MiB a call may carry: OVER" \
  <<<"$bad" || fail "a quick plan over 60 MiB was not refused: $bad"
rm -rf "$work/fat"

# --attention-ab: the cuDNN tests, then each row with --attention sdpa and --attention cudnn on the planner's
# micro-batch, within 7 minutes; the cudnn side of T5-3B profiled.
output=$("$script" --attention-ab --dry-run --build-dir "$build" "$out_dir" 2>&1) ||
  fail "the attention A/B dry run exited $?: $output"
echo "$output"
[[ ! -e $out_dir ]] || fail "the attention A/B dry run created $out_dir"
expect "budget 7 min; .*; the attention A/B plan$"
expect "^travels: the clone [0-9.]+ MiB \+ .* = [0-9.]+ MiB of the 60 MiB a call may carry$"
stages=$(sed -nE 's/^  (environment|backend-load|cudnn-tests|plan|bench|summary) .*/\1/p' <<<"$output" | uniq | tr '\n' ' ')
[[ $stages == "environment backend-load cudnn-tests plan bench summary " ]] ||
  fail "the attention A/B plan's stages, in order: $stages"
expect "^  backend-load .*t5scale_mpi_tests --gtest_color=no --gtest_filter=CudaBackend\.\*$"
expect "^  cudnn-tests +\[<=   75 s\] .*t5scale_gpu_tests --gtest_color=no --gtest_filter=CudnnAttention\.\* "
(($(grep -cE '^  bench ' <<<"$output") == 4)) || fail "--attention-ab: not four bench lines: $output"
for row in "t5-3b 147 26 1" "t5-v1_1-xxl 512 128 8"; do
  read -r model source target tp <<<"$row"
  planned=$(grep -E "^  plan +$model $source/$target tp $tp: planner: micro-batch [0-9]+ " <<<"$output" |
            sed -E 's/.*micro-batch ([0-9]+) .*/\1/')
  [[ $planned =~ ^(1|2|4|8|16|32|64|128|256)$ ]] || fail "attention A/B: no planner micro-batch for $model $source/$target"
  shard=""
  ((tp > 1)) && shard=" --tp-shard $tp"
  for side in sdpa cudnn; do
    profile=""
    [[ $model == t5-3b && $side == cudnn ]] && profile=" --profile 2"
    name=$model-$source-$target-$side
    expect "^  bench $name \[<=   60 s\] .*t5scale-bench --model $model --precision bf16 --micro-batch $planned --source-length $source --target-length $target --steps 10$shard --checkpoint-every-blocks auto --attention $side$profile --json $out_dir/bench/$name.json$"
  done
done
bad=$("$script" --dry-run --quick --attention-ab 2>&1)
(($? == 2)) && grep -q "two plans: give one" <<<"$bad" || fail "--quick with --attention-ab was not refused: $bad"

bad=$("$script" --dry-run --no-such-option 2>&1)
(($? == 2)) && grep -q "unknown option '--no-such-option'" <<<"$bad" || fail "an unknown option was not refused: $bad"
bad=$("$script" --dry-run --bundle "$work/none" 2>&1)
(($? == 2)) && grep -q "no env.sh there" <<<"$bad" || fail "a bundle without env.sh was not refused: $bad"
rm -rf "$work"
echo "gpu-check dry run ok"
