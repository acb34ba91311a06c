#!/usr/bin/env bash
# The GPU evidence run: on a machine with an NVIDIA GPU and either a t5scale bundle or a build tree, one command
# that runs every GPU check and benchmark and leaves everything under one results folder, printing progress.
#
#   scripts/gpu-check.sh [--bundle DIR | --build-dir DIR] [--python PY] [--budget-min M] [--only STAGES]
#                        [--rows NAMES] [--stage-cap S] [--profile-row NAME] [--quick | --attention-ab]
#                        [--dry-run] [OUT_DIR]
#
#   --bundle DIR     a relocatable bundle (scripts/bundle.sh): DIR/env.sh is sourced with --python PY
#   --build-dir DIR  a build tree with the programs in DIR/bin and ctest's files (default: build, when no bundle)
#   --python PY      the interpreter with torch (and transformers, h5py) for the checks and the comparison
#                    (default: python3)
#   --budget-min M   wall-clock budget of the whole run in minutes (default 19); each stage gets what is left,
#                    up to its own limit, and a stage with less than 30 s left is skipped
#   --only STAGES    run only these stages (comma-separated names of the list below); the others are recorded as
#                    not selected
#   --rows NAMES     only these benchmark rows in the bench and compare stages (comma-separated MODEL-SOURCE-TARGET
#                    names of the list below, e.g. t5-3b-147-26,t5-v1_1-xxl-512-128; default: every row)
#   --stage-cap S    no stage runs longer than S seconds (default: each stage's own limit)
#   --profile-row NAME  the benchmark row that is also profiled (default t5-3b-147-26): its bench stage runs
#                    t5scale-bench --profile 2, whose table of kernels ends the row's log and JSON
#   --quick          the short plan for a brief GPU window (below): 7 minutes unless --budget-min says otherwise
#   --attention-ab   the plan that measures cuDNN's fused attention against the sdpa kernel (below): 7 minutes
#                    unless --budget-min says otherwise
#   --dry-run        print the stages and their commands without running anything (the planner's micro-batches
#                    are computed, on the CPU), and the bytes that travel to a GPU machine that is lent by the call
#                    (the clone's files and the bundle's tarball, against the 60 MiB they may take); nothing is
#                    written
#   OUT_DIR          default results/gpu/<GPU name>/<UTC date and time>
#
# Stages, in order; each runs under `timeout`, writes its log under OUT_DIR, and a failure is recorded before the
# next stage runs:
#   environment  nvidia-smi, the driver, CUDA, NCCL, torch, h5py and the programs            environment.txt
#   gpu-tests    the `gpu` ctest label; with a bundle, its tests/run-tests.sh -L gpu (every     gpu-tests.log
#                entry, the watchdog and the training program included)
#   train        a 50-step t5scale-train run on the GPU, its run file checked (h5py)         train/
#   plan         the micro-batch of every benchmark row from the planner (t5scale-study)      plan/
#   bench        t5scale-bench, bf16: T5-v1.1-base, -large, T5-3B (whole model), T5-v1.1-XXL (--tp-shard 8);
#                lengths 512/128 and SAMSum-like 147/26                                       bench/*.json
#                the --profile-row also profiled: device time per kernel and class      bench/<row>.log
#                T5-3B 147/26 again with --offload-optimizer (the optimizer's state on the host, the
#                update on the CPU cores: its step against the row without)             bench/*-offload.json
#   compare      bench/compare.sh (or compare.py): t5scale-bench against transformers         compare/
#   summary      one line per stage and the figures                                           summary.txt
#
# --quick, for a GPU lent for minutes (the clone and a bundle of scripts/bundle.sh --with-gpu-tests travel with
# the call): every stage above in a short form, the newest code paths first; a stage that the later ones stand on
# (the backend's load, its first step, the training run) stops the run when it fails, with the reason:
#   environment    as above
#   backend-load   t5scale_mpi_tests CudaBackend.*: the CUDA backend library found, checked and loaded   backend-load.log
#   backend-bench  a 10-step t5scale-bench of the tiny model on the GPU, as the programs load the backend
#   gpu-tests      the gpu label, the watchdog's stalled collective cut to 3 s (T5SCALE_TEST_STALL_S)
#   train          a 50-step t5scale-train run with 2 micro-batches per step (bf16 gradients accumulated in fp32)
#   plan           the planner's micro-batches of the rows below
#   bench          T5-3B 147/26 (profiled), with --selective-recomputation and with --offload-optimizer;
#                  T5-v1.1-XXL --tp-shard 8 512/128, and with --sequence-parallel
#   tp2            left out, with the reason: two ranks of tp 2 on one GPU (NCCL refuses two ranks on one device,
#                  and the MPI backend carries CPU tensors only)
#   attention      bench/attention_kernels.py on the model's own (1, H, S, S) bias, the two rows' shapes
#   compare        T5-v1.1-base 147/26 against transformers, eager and through torch.compile (2 alternated
#                  rounds; the attention each ran, from its profiler; compile time apart)
#   summary        as above
#
# --attention-ab, for a GPU lent for minutes: cuDNN's fused attention (model.attention: cudnn, t5scale-bench
# --attention cudnn; off by default until this plan's evidence is committed) against the sdpa kernel on the two rows
# it is for. A plan of its own: the quick plan fills its 7 minutes, and the A/B's two sides belong in one window on
# one machine. A stage the later ones stand on stops the run when it fails:
#   environment    as above
#   backend-load   as in --quick
#   cudnn-tests    t5scale_gpu_tests CudnnAttention.*: outputs and every gradient (the bias's included) against
#                  the memory-efficient kernel and fp64 on the CPU, fp32's fallback, dropout's rate, a recomputed
#                  block's masks bit for bit                                                   cudnn-tests.log
#   plan           the planner's micro-batches of the two rows
#   bench          T5-3B 147/26 and T5-v1.1-XXL --tp-shard 8 512/128, each with --attention sdpa and --attention
#                  cudnn (the same micro-batch and checkpointing); the cudnn side of T5-3B profiled (attention's
#                  share of the device time)                                          bench/<row>-{sdpa,cudnn}.json
#   summary        as above, and the A/B of each row: step time, MFU and peak memory, cudnn against sdpa
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUNDLE="" BUILD_DIR="" PYTHON=python3 BUDGET_MIN="" DRY_RUN=0 OUT_DIR="" ONLY="" ROWS="" STAGE_CAP=0 QUICK=0
ATTENTION_AB=0
PROFILE_ROW=t5-3b-147-26
usage() { sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "gpu-check: $*" >&2; exit 2; }
while (($#)); do
  case $1 in
    --bundle) (($# >= 2)) || die "--bundle needs a folder"; BUNDLE=$2; shift 2 ;;
    --build-dir) (($# >= 2)) || die "--build-dir needs a folder"; BUILD_DIR=$2; shift 2 ;;
    --python) (($# >= 2)) || die "--python needs an interpreter"; PYTHON=$2; shift 2 ;;
    --budget-min) (($# >= 2)) || die "--budget-min needs minutes"; BUDGET_MIN=$2; shift 2 ;;
    --only) (($# >= 2)) || die "--only needs stage names"; ONLY=",$2,"; shift 2 ;;
    --rows) (($# >= 2)) || die "--rows needs row names"; ROWS=",$2,"; shift 2 ;;
    --stage-cap) (($# >= 2)) || die "--stage-cap needs seconds"; STAGE_CAP=$2; shift 2 ;;
    --profile-row) (($# >= 2)) || die "--profile-row needs a row name"; PROFILE_ROW=$2; shift 2 ;;
    --dry-run) DRY_RUN=1; shift ;;
    --quick) QUICK=1; shift ;;
    --attention-ab) ATTENTION_AB=1; shift ;;
    -h | --help) usage; exit 0 ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) [[ -z $OUT_DIR ]] || die "one OUT_DIR only, got '$OUT_DIR' and '$1'"; OUT_DIR=$1; shift ;;
  esac
done
((QUICK && ATTENTION_AB)) && die "--quick and --attention-ab are two plans: give one"
[[ -n $BUDGET_MIN ]] || BUDGET_MIN=$( ((QUICK || ATTENTION_AB)) && echo 7 || echo 19)
[[ $BUDGET_MIN =~ ^[0-9]+$ ]] || die "--budget-min: a whole number of minutes, got '$BUDGET_MIN'"
[[ $STAGE_CAP =~ ^[0-9]+$ ]] || die "--stage-cap: a whole number of seconds, got '$STAGE_CAP'"
[[ -z $BUNDLE || -z $BUILD_DIR ]] || die "--bundle and --build-dir exclude each other"

# ---- where the programs are ----
if [[ -n $BUNDLE ]]; then
  [[ -f $BUNDLE/env.sh ]] || die "--bundle $BUNDLE: no env.sh there (a folder made by scripts/bundle.sh)"
  BUNDLE=$(cd "$BUNDLE" && pwd)
  # shellcheck disable=SC1091
  source "$BUNDLE/env.sh" --python "$PYTHON" || die "sourcing $BUNDLE/env.sh --python $PYTHON failed"
  SEARCH=("$BUNDLE/bin" "$BUNDLE/tests/bin" "$BUNDLE/tests" "$BUNDLE")
else
  BUILD_DIR=${BUILD_DIR:-build}
  [[ -d $BUILD_DIR ]] || die "--build-dir $BUILD_DIR: no such folder (build first, or give --bundle)"
  BUILD_DIR=$(cd "$BUILD_DIR" && pwd)
  SEARCH=("$BUILD_DIR/bin" "$BUILD_DIR/tests" "$BUILD_DIR")
fi
# The first of NAME on PATH or in the search folders; empty when there is none.
find_tool() {
  local dir
  for dir in "${SEARCH[@]}"; do
    [[ -x $dir/$1 && ! -d $dir/$1 ]] && { echo "$dir/$1"; return; }
  done
  command -v "$1" 2>/dev/null || true
}
find_file() {  # the first existing path among the arguments
  local path
  for path in "$@"; do [[ -f $path ]] && { echo "$path"; return; }; done
}
TRAIN=$(find_tool t5scale-train)
BENCH=$(find_tool t5scale-bench)
STUDY=$(find_tool t5scale-study)
GPU_TESTS=$(find_tool t5scale_gpu_tests)
CTEST_DIR=""
[[ -n $BUILD_DIR && -f $BUILD_DIR/CTestTestfile.cmake ]] && CTEST_DIR=$BUILD_DIR
RUN_TESTS=""
[[ -n $BUNDLE && -x $BUNDLE/tests/run-tests.sh ]] && RUN_TESTS=$BUNDLE/tests/run-tests.sh
CHECK_TRAIN=$(find_file "$ROOT/tests/gpu/check_train_on_gpu.py" "${BUNDLE:-/nonexistent}/tests/gpu/check_train_on_gpu.py")
COMPARE=$(find_file "$ROOT/bench/compare.sh" "${BUNDLE:-/nonexistent}/bench/compare.sh" "$ROOT/bench/compare.py" \
                    "${BUNDLE:-/nonexistent}/bench/compare.py")

GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
GPU_MIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1 | tr -dc '0-9')
if [[ -z $GPU_MIB ]]; then
  GPU_MIB=81559  # no nvidia-smi answer (a dry run on a CPU machine): plan for an H100 80GB
  GPU_NOTE="no GPU answered nvidia-smi: planned for an H100 80GB ($GPU_MIB MiB)"
else
  GPU_NOTE="$GPU_NAME, $GPU_MIB MiB"
fi
OUT_DIR=${OUT_DIR:-results/gpu/$(echo "${GPU_NAME:-unknown-gpu}" | tr -c 'A-Za-z0-9._\n-' '_')/$(date -u +%Y%m%dT%H%M%SZ)}

START=$(date +%s)
DEADLINE=$((START + BUDGET_MIN * 60))
declare -a SUMMARY=()
progress() { printf '[gpu-check %s] %s\n' "$(date -u +%H:%M:%S)" "$*" | tee -a "${LOG:-/dev/null}"; }
if ((DRY_RUN)); then
  LOG=""
else
  mkdir -p "$OUT_DIR" || die "cannot create $OUT_DIR"
  OUT_DIR=$(cd "$OUT_DIR" && pwd)
  LOG=$OUT_DIR/gpu-check.log
fi

# run_stage NAME LIMIT_S LOGFILE command...: runs under timeout within what is left of the budget, with its output
# on the console and in LOGFILE; records ok / FAILED / TIMED OUT / skipped in the summary. Returns the exit code.
run_stage() {
  local name=$1 limit=$2 logfile=$3
  shift 3
  if [[ -n $ONLY && $ONLY != *",${name%% *},"* ]]; then
    SUMMARY+=("$name: not selected (--only)")
    ((DRY_RUN)) || progress "${SUMMARY[-1]}"
    return 0
  fi
  ((STAGE_CAP > 0 && STAGE_CAP < limit)) && limit=$STAGE_CAP
  if ((DRY_RUN)); then
    printf '  %-12s [<= %4d s] %s\n' "$name" "$limit" "$*"
    return 0
  fi
  local left=$((DEADLINE - $(date +%s)))
  ((left < limit)) && limit=$left
  if ((limit < 30)); then
    progress "$name: skipped, ${left} s of the ${BUDGET_MIN}-minute budget left"
    SUMMARY+=("$name: skipped (budget spent)")
    return 0
  fi
  progress "$name: start (limit ${limit} s): $*"
  local began code
  began=$(date +%s)
  timeout --kill-after=15 "$limit" "$@" 2>&1 | tee "$logfile"
  code=${PIPESTATUS[0]}
  local took=$(($(date +%s) - began))
  case $code in
    0) SUMMARY+=("$name: ok (${took} s)") ;;
    77) SUMMARY+=("$name: SKIPPED by the check itself (${took} s): see $(basename "$logfile")") ;;
    124 | 137) SUMMARY+=("$name: TIMED OUT after ${limit} s") ;;
    *) SUMMARY+=("$name: FAILED (exit $code, ${took} s): see $(basename "$logfile")") ;;
  esac
  progress "${SUMMARY[-1]}"
  return "$code"
}
# A stage whose program is missing: recorded, not run.
missing() {
  [[ -n $ONLY && $ONLY != *",$1,"* ]] && return 0
  if ((DRY_RUN)); then printf '  %-12s MISSING: %s\n' "$1" "$2"; else SUMMARY+=("$1: not run: $2"); progress "$1: not run: $2"; fi
}

# The planner's memory model, against 90% of the GPU's memory (the CUDA context and the allocator's fragmentation
# take the rest): the largest power of two that fits, or 1 when none does (the row then shows what happens).
plan_micro_batch() {  # MODEL SOURCE TARGET TP FOLDER -> prints the micro-batch and the predicted GiB
  local model=$1 source=$2 target=$3 tp=$4 folder=$5
  mkdir -p "$folder"
  cat > "$folder/spec.yaml" <<EOF
study: gpu-check-plan
results_dir: $folder/runs
description: the micro-batch of the benchmark row $model $source/$target (tp $tp)
base:
  model: {name: $model}
  data: {dataset: synthetic, max_source_length: $source, max_target_length: $target}
  precision: bf16
  parallel: {tp: $tp, backend: nccl}
  train: {max_steps: 10, batch_mode: fixed_micro, micro_batch: 1, grad_accumulation: 1}
  gpus_per_node: $tp
axes:
  train.micro_batch: [1, 2, 4, 8, 16, 32, 64, 128, 256]
slurm:
  gpu_memory_gib: $(awk -v mib="$GPU_MIB" 'BEGIN { printf "%.1f", 0.9 * mib / 1024 }')
  time_limit: "00:10:00"
EOF
  # Every micro-batch is rendered, those that do not fit too: their "fits" column is what is read here.
  "$STUDY" render "$folder/spec.yaml" --out "$folder" --allow-over-memory > "$folder/planner.log" 2>&1 || return 1
  awk -F, 'NR == 1 { for (i = 1; i <= NF; ++i) col[$i] = i; next }
           $col["fits"] == "yes" && $col["micro_batch"] > best { best = $col["micro_batch"];
                                                                gib = $col["predicted_memory_bytes_per_device"] / 2^30 }
           END { if (best) printf "%d %.1f\n", best, gib; else print "1 -" }' "$folder/runs.csv"
}
row_selected() { [[ -z $ROWS || $ROWS == *",$1,"* ]]; }
# planned_row MODEL SOURCE TARGET TP FOLDER: the planner's micro-batch for the row into PLANNED (1 without the
# planner), and the plan's line for it.
planned_row() {
  local planned="" note
  [[ -n $STUDY ]] && planned=$(plan_micro_batch "$@")
  PLANNED=${planned%% *}
  [[ -n $PLANNED ]] || PLANNED=1
  note="planner: micro-batch $PLANNED (predicted ${planned##* } GiB per GPU)"
  [[ -n $planned ]] || note="planner unavailable (${STUDY:-t5scale-study missing}): micro-batch 1"
  if ((DRY_RUN)); then echo "  plan         $1 $2/$3 tp $4: $note"; else progress "plan $1 $2/$3 tp $4: $note"; fi
}
# bench_row NAME LIMIT_S MODEL SOURCE TARGET TP MICRO OPTION...: one benchmark row, bf16, 10 timed steps.
bench_row() {
  local name=$1 limit=$2 model=$3 source=$4 target=$5 tp=$6 micro=$7
  shift 7
  local shard=()
  ((tp > 1)) && shard=(--tp-shard "$tp")
  run_stage "bench $name" "$limit" "$OUT_DIR/bench/$name.log" "${BENCH:-t5scale-bench(MISSING)}" --model "$model" \
    --precision bf16 --micro-batch "$micro" --source-length "$source" --target-length "$target" --steps 10 \
    "${shard[@]}" "$@" --json "$OUT_DIR/bench/$name.json"
}
# compare_row MODEL SOURCE TARGET MICRO OPTION...: t5scale against transformers on one row, 2 alternated rounds.
compare_row() {
  local model=$1 source=$2 target=$3 micro=$4 runner=()
  shift 4
  [[ $COMPARE == *.py ]] && runner=("$PYTHON")
  run_stage "compare $model-$source-$target" 200 "$OUT_DIR/compare/$model-$source-$target.log" "${runner[@]}" \
    "${COMPARE:-bench/compare.sh(MISSING)}" --models "$model" --lengths "$source/$target" --precision bf16 \
    --micro-batch "$micro" --device cuda --rounds 2 --steps 10 --threads 0 "$@" \
    --bench-bin "${BENCH:-t5scale-bench(MISSING)}" --python "$PYTHON" --json "$OUT_DIR/compare/$model-$source-$target.json"
}

# ---- the gpu label ----
# gpu_tests_stage LIMIT_S: the gpu label, by ctest in a build tree, the bundle's runner, or the GPU test program.
gpu_tests_stage() {
  if [[ -n $CTEST_DIR ]]; then
    run_stage gpu-tests "$1" "$OUT_DIR/gpu-tests.log" ctest --test-dir "$CTEST_DIR" -L gpu --output-on-failure \
      --output-junit "$OUT_DIR/gpu-tests.junit.xml"
    # ctest passes a run whose tests all skipped; on this machine a skip means LibTorch found no usable GPU.
    skipped=$( ((DRY_RUN)) || [[ ! -f $OUT_DIR/gpu-tests.log ]] || grep -c '\*\*\*Skipped' "$OUT_DIR/gpu-tests.log")
    if [[ -n $skipped && $skipped != 0 ]]; then
      SUMMARY+=("gpu-tests: FAILED: $skipped gpu tests were skipped, i.e. LibTorch saw no usable CUDA device (gpu-tests.log)")
      progress "${SUMMARY[-1]}"
    fi
  elif [[ -n $RUN_TESTS ]]; then
    # The bundle's own runner: every gpu entry of the build's ctest list, scripts included (tests/tests.list).
    run_stage gpu-tests "$1" "$OUT_DIR/gpu-tests.log" "$RUN_TESTS" --python "$PYTHON" -L gpu --logs "$OUT_DIR/gpu-tests"
    skipped=$( ((DRY_RUN)) || [[ ! -f $OUT_DIR/gpu-tests.log ]] || grep -c '^SKIP ' "$OUT_DIR/gpu-tests.log")
    if [[ -n $skipped && $skipped != 0 ]]; then
      SUMMARY+=("gpu-tests: FAILED: $skipped gpu tests were skipped, i.e. LibTorch saw no usable CUDA device (gpu-tests.log)")
      progress "${SUMMARY[-1]}"
    fi
  elif [[ -n $GPU_TESTS ]]; then
    run_stage gpu-tests "$1" "$OUT_DIR/gpu-tests.log" "$GPU_TESTS" --gtest_color=no \
      --gtest_output="json:$OUT_DIR/gpu-tests.json"
  else
    missing gpu-tests "neither ctest files nor t5scale_gpu_tests were found (${SEARCH[*]})"
  fi
}

# ---- summary ----
# write_summary: summary.txt, one line per stage and the figures of every JSON; exits 1 if a stage failed.
write_summary() {
  if ((DRY_RUN)); then
    echo "  summary      summary.txt: one line per stage, the training run's figures (train.json), bench/*.json"
    (((QUICK || ATTENTION_AB) && TRAVEL_OVER)) && { echo "gpu-check: what travels is over $MAX_TRAVEL_MIB MiB (see 'travels' above)" >&2; exit 1; }
    exit 0
  fi
  {
  echo "gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ), $GPU_NOTE, $(($(date +%s) - START)) s"
  printf '%s\n' "${SUMMARY[@]}"
  echo "--- figures"
  "$PYTHON" - "$OUT_DIR" <<'EOF' 2>&1
import glob, json, os, sys
out = sys.argv[1]
def scalars(d):
    return {k: v for k, v in d.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)}
for path in [os.path.join(out, name) for name in ("backend-bench.json", "train.json", "attention.json")] + sorted(glob.glob(os.path.join(out, "bench", "*.json"))) + \
        sorted(glob.glob(os.path.join(out, "compare", "*.json"))):
    if not os.path.exists(path):
        continue
    try:
        with open(path) as f:
            report = json.load(f)
        figures = scalars(report)
        print(os.path.relpath(path, out) + ": " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                                        for k, v in list(figures.items())[:14]))
        if isinstance(report.get("profile"), dict):
            p = report["profile"]
            print("  profile: device busy %.1f%% of %.1f ms; " % (100 * p["device_busy_fraction"], 1e3 * p["wall_s_per_step"])
                  + ", ".join("%s %.1f%%" % (c["class"], 100 * c["fraction"]) for c in p["classes"]))
    except Exception as e:
        print(os.path.relpath(path, out) + f": unreadable ({e})")
# --attention-ab: each row's two sides side by side.
for sdpa_path in sorted(glob.glob(os.path.join(out, "bench", "*-sdpa.json"))):
    cudnn_path = sdpa_path[: -len("-sdpa.json")] + "-cudnn.json"
    if not os.path.exists(cudnn_path):
        continue
    try:
        sides = [json.load(open(p)) for p in (sdpa_path, cudnn_path)]
        step = [s["median"]["total_s"] for s in sides]
        mfu = [s.get("mfu") for s in sides]
        peak = [(s.get("memory") or {}).get("measured_peak_bytes") for s in sides]
        kernels = [n for n in sides[1].get("notes", []) if n.startswith("attention: ")]
        fmt = lambda v, f: "?" if not isinstance(v, (int, float)) else f % v
        print("attention A/B %s: step %.1f -> %.1f ms (x%.2f), MFU %s -> %s, peak %s -> %s GiB; %s" % (
            os.path.basename(sdpa_path)[: -len("-sdpa.json")], 1e3 * step[0], 1e3 * step[1], step[0] / step[1],
            fmt(mfu[0], "%.3f"), fmt(mfu[1], "%.3f"), fmt(peak[0] and peak[0] / 2**30, "%.2f"),
            fmt(peak[1] and peak[1] / 2**30, "%.2f"), kernels[0] if kernels else "cudnn side: no attention note"))
    except Exception as e:
        print("attention A/B " + os.path.basename(sdpa_path) + f": unreadable ({e})")
EOF
  } > "$OUT_DIR/summary.txt"
  echo
  cat "$OUT_DIR/summary.txt"
  grep -q 'FAILED\|TIMED OUT\|not run\|stopped' "$OUT_DIR/summary.txt" && exit 1
  exit 0
}

# What travels to a GPU machine lent by the call: the clone's files (tracked, and untracked ones git does not ignore)
# and the bundle's tarball (the --bundle folder's, or the newest under the build folder's bundle/), against the 60
# MiB a call may carry (64 MiB, less room for the results that come back). Prints one line; 1 when over.
MAX_TRAVEL_MIB=60
travel_line() {
  local tree_bytes=0 tarball="" bundle_bytes=0
  if git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
    tree_bytes=$(cd "$ROOT" && git ls-files -co --exclude-standard -z | xargs -0 stat -c %s 2>/dev/null |
                 awk '{ s += $1 } END { print s + 0 }')
  fi
  if [[ -n $BUNDLE ]]; then
    tarball=$(find_file "$BUNDLE.tar.gz")
  elif [[ -n $BUILD_DIR ]]; then
    tarball=$(ls -t "$BUILD_DIR"/bundle/t5scale-bundle-*.tar.gz 2>/dev/null | head -1)
  fi
  [[ -n $tarball ]] && bundle_bytes=$(stat -c %s "$tarball")
  awk -v tree="$tree_bytes" -v bundle="$bundle_bytes" -v tarball="${tarball:-}" -v max="$MAX_TRAVEL_MIB" 'BEGIN {
    mib = 1048576; total = (tree + bundle) / mib
    what = tarball == "" ? "no bundle tarball made yet (scripts/bundle.sh --with-gpu-tests makes one)" \
                         : sprintf("the bundle %s %.1f MiB", tarball, bundle / mib)
    over = (total > max)
    printf "travels: the clone %.1f MiB + %s = %.1f MiB of the %d MiB a call may carry%s\n", tree / mib, what, total,
           max, (over ? ": OVER" : "")
    exit over }'
}

if ((DRY_RUN)); then
  echo "gpu-check dry run: results would go to $OUT_DIR; budget $BUDGET_MIN min; $GPU_NOTE$( ((QUICK)) && echo "; the quick plan")$( ((ATTENTION_AB)) && echo "; the attention A/B plan")"
  echo "programs: train=${TRAIN:-MISSING} bench=${BENCH:-MISSING} study=${STUDY:-MISSING} gpu-tests=${GPU_TESTS:-MISSING}"
  TRAVEL_OVER=0
  travel_line || TRAVEL_OVER=1
else
  progress "results in $OUT_DIR; budget $BUDGET_MIN min; $GPU_NOTE"
fi

# ---- environment ----
environment() {
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  host: $(hostname)  kernel: $(uname -r)"
  echo "bundle: ${BUNDLE:-none}  build dir: ${BUILD_DIR:-none}  python: $PYTHON"
  echo "programs: train=${TRAIN:-MISSING} bench=${BENCH:-MISSING} study=${STUDY:-MISSING} gpu-tests=${GPU_TESTS:-MISSING}"
  echo "--- nvidia-smi"; nvidia-smi || echo "nvidia-smi failed (exit $?)"
  echo "--- nvidia-smi -q (clocks, power, ECC)"; nvidia-smi -q -d CLOCK,POWER,ECC,PERFORMANCE 2>&1 | head -120
  echo "--- CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-(unset)}"; ls -l /dev/nvidia* 2>&1 | head
  echo "--- $PYTHON"
  "$PYTHON" - <<'EOF' 2>&1
import importlib, sys
print("python", sys.version.split()[0])
for name in ["torch", "transformers", "h5py", "numpy"]:
    try:
        module = importlib.import_module(name)
        print(name, getattr(module, "__version__", "?"))
    except Exception as e:  # report, do not stop
        print(name, "NOT IMPORTABLE:", e)
try:
    import torch
    print("torch cuda", torch.version.cuda, "available", torch.cuda.is_available(), "nccl",
          torch.cuda.nccl.version() if torch.cuda.is_available() else "-")
    if torch.cuda.is_available():
        print("device", torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))
except Exception as e:
    print("torch cuda query failed:", e)
EOF
  if [[ -n $TRAIN ]]; then
    echo "--- libraries of $TRAIN"; ldd "$TRAIN" | grep -Ei 'torch|cuda|nccl|mpi|hdf5|not found'
    # The CUDA side the programs load on a GPU (src/dist/cuda_backend.h), beside bin/.
    local backend; backend=$(dirname "$TRAIN")/../lib/libt5scale_cuda.so
    echo "--- libraries of $backend"; ldd "$backend" 2>&1 | grep -Ei 'torch|cuda|nccl|not found|cannot'
  fi
}
if ((DRY_RUN)); then
  echo "stages:"
  printf '  %-12s [<= %4d s] %s\n' environment 60 "nvidia-smi, nvidia-smi -q, $PYTHON (torch, transformers, h5py), ldd t5scale-train and its CUDA backend"
else
  environment > "$OUT_DIR/environment.txt" 2>&1
  head -25 "$OUT_DIR/environment.txt"
  SUMMARY+=("environment: recorded (environment.txt)")
fi

# ---- the quick plan (--quick) ----
# stop_unless_passed CODE STAGE: what follows stands on STAGE; if it did not pass, the summary says why and the run ends.
stop_unless_passed() {
  (($1 == 0)) && return 0
  SUMMARY+=("stopped: $2 did not pass (exit $1), and the stages after it stand on it: see its log")
  progress "${SUMMARY[-1]}"
  write_summary
}
# The CUDA backend as every program loads it: found beside bin/, its build id checked, loaded. What follows stands on it.
backend_load_stage() {
  local mpi_tests; mpi_tests=$(find_tool t5scale_mpi_tests)
  if [[ -n $mpi_tests ]]; then
    run_stage backend-load 60 "$OUT_DIR/backend-load.log" "$mpi_tests" --gtest_color=no --gtest_filter='CudaBackend.*'
    stop_unless_passed $? backend-load
  else
    missing backend-load "t5scale_mpi_tests was not found (${SEARCH[*]}; a bundle made with --with-gpu-tests has it)"
  fi
}
quick_plan() {
  local code
  backend_load_stage
  run_stage backend-bench 60 "$OUT_DIR/backend-bench.log" "${BENCH:-t5scale-bench(MISSING)}" --device cuda --model tiny \
    --precision bf16 --steps 10 --json "$OUT_DIR/backend-bench.json"
  stop_unless_passed $? backend-bench
  # The watchdog's probe stalls its stream 3 s instead of 30 (past the collective's 1 s timeout either way).
  export T5SCALE_TEST_STALL_S=3
  gpu_tests_stage 150
  if [[ -n $TRAIN && -n $CHECK_TRAIN ]]; then
    run_stage train 120 "$OUT_DIR/train.log" "$PYTHON" "$CHECK_TRAIN" --bin "$(dirname "$TRAIN")" \
      --work "$OUT_DIR/train" --model t5-v1_1-base --steps 50 --global-batch 32 --grad-accumulation 2 \
      --timeout-s 110 --json "$OUT_DIR/train.json"
    stop_unless_passed $? train
  else
    missing train "t5scale-train (${TRAIN:-missing}) or tests/gpu/check_train_on_gpu.py (${CHECK_TRAIN:-missing})"
  fi

  # The rows: name, model, lengths, tp shard, options beyond the planner's micro-batch.
  local -a rows=("t5-3b-147-26|t5-3b 147 26 1|--profile 2"
                 "t5-v1_1-xxl-512-128|t5-v1_1-xxl 512 128 8|"
                 "t5-v1_1-xxl-512-128-sequence-parallel|t5-v1_1-xxl 512 128 8|--sequence-parallel"
                 "t5-3b-147-26-selective|t5-3b 147 26 1|--selective-recomputation"
                 "t5-3b-147-26-offload|t5-3b 147 26 1|--offload-optimizer")
  local -A micro=()
  local plan_dir=$OUT_DIR/plan
  ((DRY_RUN)) && QUICK_PLAN_DIR=$(mktemp -d) && plan_dir=$QUICK_PLAN_DIR && trap 'rm -rf "$QUICK_PLAN_DIR"' EXIT
  local shape model source target tp
  for shape in "t5-3b 147 26 1" "t5-v1_1-xxl 512 128 8" "t5-v1_1-base 147 26 1"; do
    read -r model source target tp <<<"$shape"
    planned_row "$model" "$source" "$target" "$tp" "$plan_dir/$model-$source-$target"
    micro[$shape]=$PLANNED
  done
  ((DRY_RUN)) || { mkdir -p "$OUT_DIR/bench"; SUMMARY+=("plan: micro-batches ${micro[*]} (plan/)"); }
  local row name options checkpointing limit
  for row in "${rows[@]}"; do
    IFS='|' read -r name shape options <<<"$row"
    read -r model source target tp <<<"$shape"
    checkpointing=(--checkpoint-every-blocks auto)
    # Selective recomputation is the alternative to checkpointing whole blocks: the planner's auto would choose.
    [[ $options == *--selective-recomputation* ]] && checkpointing=(--checkpoint-every-blocks 0)
    # The update on the host's cores: some seconds a step for T5-3B, so a longer limit.
    limit=75
    [[ $options == *--offload-optimizer* ]] && limit=120
    # shellcheck disable=SC2086  # the row's options, words
    bench_row "$name" "$limit" "$model" "$source" "$target" "$tp" "${micro[$shape]}" "${checkpointing[@]}" $options
  done

  local why="NCCL refuses two ranks on one device, and the MPI backend carries CPU tensors only (dist/mpi_communicator.cpp)"
  if ((DRY_RUN)); then printf '  %-12s left out: %s\n' tp2 "$why"; else SUMMARY+=("tp2: left out: $why"); fi

  local attention=""
  attention=$(find_file "$ROOT/bench/attention_kernels.py" "${BUNDLE:-/nonexistent}/bench/attention_kernels.py")
  # (B, H per rank, S, head size) of the two rows: T5-3B 32 heads of 128, the XXL shard 64 / 8 heads of 64.
  local xxl="t5-v1_1-xxl 512 128 8" t5_3b="t5-3b 147 26 1"
  run_stage attention 60 "$OUT_DIR/attention.log" "$PYTHON" "${attention:-bench/attention_kernels.py(MISSING)}" \
    --bias model --shapes "${micro[$t5_3b]}x32x147x128,${micro[$xxl]}x8x512x64" --repeats 5 \
    --json "$OUT_DIR/attention.json"

  local base="t5-v1_1-base 147 26 1"
  if [[ -n $COMPARE && -n $BENCH ]] || ((DRY_RUN)); then
    ((DRY_RUN)) || mkdir -p "$OUT_DIR/compare"
    compare_row t5-v1_1-base 147 26 "${micro[$base]}" --hf-compile
  else
    missing compare "bench/compare.sh or compare.py (${COMPARE:-missing}) and t5scale-bench (${BENCH:-missing})"
  fi
}
if ((QUICK)); then
  quick_plan
  write_summary
fi

# ---- the attention A/B plan (--attention-ab) ----
# Caps: 60 + 75 + 4 x 60 = 375 s of the 420, the rest for the environment and the planner.
attention_plan() {
  backend_load_stage
  if [[ -n $GPU_TESTS ]] || ((DRY_RUN)); then
    run_stage cudnn-tests 75 "$OUT_DIR/cudnn-tests.log" "${GPU_TESTS:-t5scale_gpu_tests(MISSING)}" --gtest_color=no \
      --gtest_filter='CudnnAttention.*' --gtest_output="json:$OUT_DIR/cudnn-tests.json"
    stop_unless_passed $? cudnn-tests
  else
    missing cudnn-tests "t5scale_gpu_tests was not found (${SEARCH[*]}; a bundle made with --with-gpu-tests has it)"
  fi
  local -A micro=()
  local plan_dir=$OUT_DIR/plan
  ((DRY_RUN)) && AB_PLAN_DIR=$(mktemp -d) && plan_dir=$AB_PLAN_DIR && trap 'rm -rf "$AB_PLAN_DIR"' EXIT
  local shape model source target tp
  for shape in "t5-3b 147 26 1" "t5-v1_1-xxl 512 128 8"; do
    read -r model source target tp <<<"$shape"
    planned_row "$model" "$source" "$target" "$tp" "$plan_dir/$model-$source-$target"
    micro[$shape]=$PLANNED
  done
  ((DRY_RUN)) || { mkdir -p "$OUT_DIR/bench"; SUMMARY+=("plan: micro-batches ${micro[*]} (plan/)"); }
  local side profile
  for shape in "t5-3b 147 26 1" "t5-v1_1-xxl 512 128 8"; do
    read -r model source target tp <<<"$shape"
    for side in sdpa cudnn; do
      profile=()
      [[ $model == t5-3b && $side == cudnn ]] && profile=(--profile 2)
      bench_row "$model-$source-$target-$side" 60 "$model" "$source" "$target" "$tp" "${micro[$shape]}" \
        --checkpoint-every-blocks auto --attention "$side" "${profile[@]}"
    done
  done
}
if ((ATTENTION_AB)); then
  attention_plan
  write_summary
fi

gpu_tests_stage 480

# ---- a 50-step training run ----
if [[ -n $TRAIN && -n $CHECK_TRAIN ]]; then
  run_stage train 300 "$OUT_DIR/train.log" "$PYTHON" "$CHECK_TRAIN" --bin "$(dirname "$TRAIN")" \
    --work "$OUT_DIR/train" --model t5-v1_1-base --steps 50 --global-batch 32 --timeout-s 280 \
    --json "$OUT_DIR/train.json"
else
  missing train "t5scale-train (${TRAIN:-missing}) or tests/gpu/check_train_on_gpu.py (${CHECK_TRAIN:-missing})"
fi

# ---- the benchmark table, its micro-batches from the planner ----
BENCH_ROWS=("t5-v1_1-base 512 128 1" "t5-v1_1-base 147 26 1" "t5-v1_1-large 512 128 1" "t5-v1_1-large 147 26 1"
            "t5-3b 512 128 1" "t5-3b 147 26 1" "t5-v1_1-xxl 512 128 8" "t5-v1_1-xxl 147 26 8")
PLAN_DIR=${OUT_DIR}/plan
((DRY_RUN)) && PLAN_DIR=$(mktemp -d) && trap 'rm -rf "$PLAN_DIR"' EXIT
declare -a MICRO=()
for row in "${BENCH_ROWS[@]}"; do
  read -r model source target tp <<<"$row"
  planned_row "$model" "$source" "$target" "$tp" "$PLAN_DIR/$model-$source-$target"
  MICRO+=("$PLANNED")
done
((DRY_RUN)) || SUMMARY+=("plan: micro-batches ${MICRO[*]} (plan/)")

# A dry run shows every command, with a missing program marked where it would be.
if [[ -n $BENCH ]] || ((DRY_RUN)); then
  ((DRY_RUN)) || mkdir -p "$OUT_DIR/bench"
  for i in "${!BENCH_ROWS[@]}"; do
    read -r model source target tp <<<"${BENCH_ROWS[$i]}"
    name=$model-$source-$target
    row_selected "$name" || { SUMMARY+=("bench $name: not selected (--rows)"); continue; }
    profile=()
    # The profiled row runs its profile in the same process, after its timed steps (the profile's table ends its log).
    [[ $name == "$PROFILE_ROW" ]] && profile=(--profile 2)
    bench_row "$name" 150 "$model" "$source" "$target" "$tp" "${MICRO[$i]}" --checkpoint-every-blocks auto "${profile[@]}"
  done
  # T5-3B 147/26 with the optimizer's state on the host (parallel.offload_optimizer), against the row above.
  if row_selected t5-3b-147-26-offload; then
    bench_row t5-3b-147-26-offload 200 t5-3b 147 26 1 "${MICRO[5]}" --checkpoint-every-blocks auto --offload-optimizer
  else
    SUMMARY+=("bench t5-3b-147-26-offload: not selected (--rows)")
  fi
else
  missing bench "t5scale-bench was not found (${SEARCH[*]}, PATH)"
fi

# ---- t5scale against transformers, on the models transformers can hold whole ----
if [[ -n $COMPARE && -n $BENCH ]] || ((DRY_RUN)); then
  ((DRY_RUN)) || mkdir -p "$OUT_DIR/compare"
  for i in 0 1 2 3; do
    read -r model source target tp <<<"${BENCH_ROWS[$i]}"
    row_selected "$model-$source-$target" || { SUMMARY+=("compare $model-$source-$target: not selected (--rows)"); continue; }
    compare_row "$model" "$source" "$target" "${MICRO[$i]}"
  done
else
  missing compare "bench/compare.sh or compare.py (${COMPARE:-missing}) and t5scale-bench (${BENCH:-missing})"
fi

write_summary
