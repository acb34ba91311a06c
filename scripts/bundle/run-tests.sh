#!/usr/bin/env bash
# Runs the bundle's tests without ctest and without the build tree:
#   tests/run-tests.sh [--python PY | --torch-lib DIR] [-L LABEL_REGEX] [-R NAME_REGEX] [-E NAME_REGEX] [--logs DIR]
# Each line of tests.list (made by scripts/bundle.sh from the build's ctest entries) runs a gtest program of
# tests/bin with its filter and environment, under the bundle's mpirun where the entry has ranks, or (program
# @COMMAND@) a whole command, its words separated by 0x1f, with scripts of tests/scripts and @PYTHON@ for the
# interpreter of --python (python3 without it). The torch option
# goes to ../env.sh. -L and -R select entries by label and name, and -E leaves out names, as ctest does. Entries that compare with reference
# files made by Python (transformers, rouge-score, ...) use the copies the bundle took from the build tree
# (references/). Entries the bundle cannot run (their references were not made before bundling, or they read the
# clone) are listed with the reason. Exits non-zero if any entry fails; an entry whose filter selects no test
# fails, and one that exits with its SKIP_RETURN_CODE is skipped, as under ctest. A failure prints the end of its
# output; --logs DIR keeps every entry's whole output there as NAME.log.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
env_args=()
python=python3
label_regex=""
name_regex=""
exclude_regex=""
logs_dir=""
while (($#)); do
  case $1 in
    --python) python=${2:?--python needs a value}; env_args+=("$1" "$2"); shift 2 ;;
    --torch-lib) env_args+=("$1" "${2:?$1 needs a value}"); shift 2 ;;
    -L) label_regex=${2:?-L needs a regex}; shift 2 ;;
    -R) name_regex=${2:?-R needs a regex}; shift 2 ;;
    -E) exclude_regex=${2:?-E needs a regex}; shift 2 ;;
    --logs) logs_dir=${2:?--logs needs a folder}; shift 2 ;;
    *) echo "run-tests.sh: unknown argument '$1'" >&2; sed -n '3p' "${BASH_SOURCE[0]}" >&2; exit 2 ;;
  esac
done
if [[ -n $logs_dir ]]; then
  mkdir -p "$logs_dir" || { echo "run-tests.sh: --logs: cannot create '$logs_dir'" >&2; exit 2; }
fi
# shellcheck source=/dev/null
source "$HERE/../env.sh" "${env_args[@]}"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# The reference files the build machine's Python made, where the entries' environments point (@WORK@).
[[ -d $HERE/references ]] && cp -r "$HERE/references/." "$WORK/"

passed=0
failed=()
not_run=0
skipped=0
while IFS=$'\t' read -r name labels ranks skip_code program arguments environment; do
  left_out=0
  if [[ $name == "# "* ]]; then  # a left-out entry: name, labels, reason
    left_out=1
    name=${name#\# }
  fi
  [[ -n $label_regex && ! $labels =~ $label_regex ]] && continue
  [[ -n $name_regex && ! $name =~ $name_regex ]] && continue
  [[ -n $exclude_regex && $name =~ $exclude_regex ]] && continue
  if ((left_out)); then
    echo "not run: $name ($ranks)"
    not_run=$((not_run + 1))
    continue
  fi
  environment=${environment//@BUNDLE@/$T5SCALE_BUNDLE}
  environment=${environment//@WORK@/$WORK}
  environment=${environment//@PYTHON@/$python}
  read -ra assignments <<<"$environment"
  if [[ $program == @COMMAND@ ]]; then
    IFS=$'\x1f' read -ra command <<<"$arguments"
    for i in "${!command[@]}"; do
      word=${command[$i]//@BUNDLE@/$T5SCALE_BUNDLE}
      word=${word//@WORK@/$WORK}
      command[$i]=${word//@PYTHON@/$python}
    done
  else
    read -ra args <<<"$arguments"
    command=("$HERE/bin/$program" "${args[@]}")
  fi
  ((ranks > 0)) && command=(mpirun -np "$ranks" "${command[@]}")
  log=$WORK/$name.log
  start=$(date +%s)
  status=0
  # </dev/null: the loop reads tests.list on its standard input, and a command that reads its own (mpirun does) would
  # take the rest of the list
  (cd "$WORK" && env "${assignments[@]}" timeout 600 "${command[@]}") </dev/null >"$log" 2>&1 || status=$?
  [[ -z $logs_dir ]] || cp "$log" "$logs_dir/"
  if [[ $skip_code != - && $status == "$skip_code" ]]; then
    echo "SKIP $name: $(tail -n 1 "$log")"
    skipped=$((skipped + 1))
  elif ((status == 0)) && ! grep -q "0 tests from 0 test suites ran" "$log"; then
    echo "PASS $name ($(($(date +%s) - start)) s)"
    passed=$((passed + 1))
  else
    echo "FAIL $name ($(($(date +%s) - start)) s): ${command[*]}"
    tail -n 40 "$log" | sed 's/^/    /'
    failed+=("$name")
  fi
done <"$HERE/tests.list"

echo "[run-tests] $passed passed, ${#failed[@]} failed, $skipped skipped, $not_run not run in the bundle"
if ((${#failed[@]})); then
  echo "[run-tests] failed: ${failed[*]}"
  exit 1
fi
((passed > 0)) || { echo "[run-tests] no entry selected" >&2; exit 1; }
