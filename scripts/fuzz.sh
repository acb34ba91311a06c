#!/usr/bin/env bash
# Builds every libFuzzer harness tests/fuzz/fuzz_*.cpp with clang (-fsanitize=fuzzer,address,undefined) and runs
# each for a while.
#
#   scripts/fuzz.sh [seconds-per-target] [harness-name ...]      e.g. scripts/fuzz.sh 180 fuzz_csv_reader
#
# A harness names the project sources it needs in its own comments, so that nothing else (no LibTorch, no MPI)
# is compiled into it:
#   // fuzz-sources: src/data_prep/text_records.cpp src/data_prep/recipe.cpp
#   // fuzz-libs: -lyaml-cpp
# Seeds are read from tests/fuzz/corpus/<harness>/ and crash reproducers from tests/fuzz/regressions/<harness>/;
# what the fuzzer finds goes under the work folder ($T5SCALE_FUZZ_DIR, default <repo>/build-fuzz): corpus/<harness>/
# (new inputs), artifacts/<harness>/ (crashes, leaks, timeouts), logs/<harness>.log. To keep a crash as a test, fix
# it and copy the artifact into tests/fuzz/regressions/<harness>/: unit.fuzz_corpus_replay replays it in CI.
# Environment: CXX_FUZZ (default clang++), T5SCALE_FUZZ_ARGS (extra libFuzzer flags), T5SCALE_FUZZ_NICE (default 10).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seconds=${1:-60}
shift || true
work=${T5SCALE_FUZZ_DIR:-$root/build-fuzz}
cxx=${CXX_FUZZ:-clang++}
niceness=${T5SCALE_FUZZ_NICE:-10}

if ! command -v "$cxx" >/dev/null; then
  echo "fuzz.sh: $cxx not found (libFuzzer needs clang; set CXX_FUZZ)" >&2
  exit 2
fi

sanitizers="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
common_flags="-std=c++17 -O1 -g -fno-omit-frame-pointer $sanitizers -I$root/src -I$root/tests/fuzz
  -I/usr/include/hdf5/serial $(pkg-config --cflags sentencepiece 2>/dev/null || true)"

if [[ $# -gt 0 ]]; then
  harnesses=()
  for name in "$@"; do harnesses+=("$root/tests/fuzz/$name.cpp"); done
else
  harnesses=("$root"/tests/fuzz/fuzz_*.cpp)
fi

# An object is rebuilt when it is missing or older than its source or any header it included (from -MMD).
out_of_date() {
  local object=$1 dependency
  [[ -f $object && -f $object.d ]] || return 0
  # shellcheck disable=SC2013  # the dependency list is words, not lines
  for dependency in $(sed -e 's/^[^:]*://' -e 's/\\$//' "$object.d"); do
    [[ $dependency -nt $object ]] && return 0
  done
  return 1
}

mkdir -p "$work/obj" "$work/bin" "$work/logs"
status=0
summary=()
for harness in "${harnesses[@]}"; do
  name=$(basename "$harness" .cpp)
  [[ -f $harness ]] || { echo "fuzz.sh: no harness $harness" >&2; exit 2; }
  sources=$(sed -n 's#^// fuzz-sources:##p' "$harness")
  libs=$(sed -n 's#^// fuzz-libs:##p' "$harness")

  # Build: the project sources with coverage instrumentation (fuzzer-no-link), the harness with libFuzzer's main.
  objects=()
  for source in $sources; do
    object="$work/obj/${source//\//_}.o"  # the same flags for every harness: compiled once
    mkdir -p "$(dirname "$object")"
    if out_of_date "$object"; then
      echo "fuzz.sh: compiling $source for $name"
      # shellcheck disable=SC2086
      $cxx $common_flags -fsanitize=fuzzer-no-link -MMD -MF "$object.d" -c "$root/$source" -o "$object"
    fi
    objects+=("$object")
  done
  echo "fuzz.sh: building $name"
  # shellcheck disable=SC2086
  $cxx $common_flags -fsanitize=fuzzer "$harness" "${objects[@]}" $libs -o "$work/bin/$name"

  # Run: new inputs go to the first corpus folder (the work copy); seeds and regressions are read only.
  corpus="$work/corpus/$name"
  artifacts="$work/artifacts/$name"
  mkdir -p "$corpus" "$artifacts"
  inputs=("$corpus")
  [[ -d $root/tests/fuzz/corpus/$name ]] && inputs+=("$root/tests/fuzz/corpus/$name")
  [[ -d $root/tests/fuzz/regressions/$name ]] && inputs+=("$root/tests/fuzz/regressions/$name")
  log="$work/logs/$name.log"
  echo "fuzz.sh: running $name for ${seconds}s (log: $log)"
  set +e
  # shellcheck disable=SC2086
  nice -n "$niceness" "$work/bin/$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" ${T5SCALE_FUZZ_ARGS:-} "${inputs[@]}" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[0-9]+[a-zA-Z]*' "$log" | tail -1)
  if [[ $rc -eq 0 ]]; then
    result="no findings"
  else
    result="FINDING (exit $rc): $(grep -m1 -E 'ERROR: |runtime error|invariant broken|uncaught|deadly signal' "$log" || echo see log)"
    status=1
  fi
  summary+=("$name: ${seconds}s, ${execs:-?} execs, ${cov:-?}; $result")
done

echo
echo "fuzz.sh summary (work folder $work):"
for line in "${summary[@]}"; do echo "  $line"; done
if [[ $status -ne 0 ]]; then
  echo "  reproducers: $work/artifacts/<harness>/ — rerun one with $work/bin/<harness> <file>"
fi
exit $status
