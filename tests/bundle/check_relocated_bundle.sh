#!/usr/bin/env bash
# The bundle away from its build: scripts/bundle.sh --with-tests makes it in one temporary folder, it is unpacked
# in another, and with a cleared environment (env -i), the clone, the build tree, the system's Open MPI and PMIx
# folders and the CUDA toolkit hidden (an empty tmpfs over each, in a private mount namespace where the system
# allows one), tests/bundle/in_bundle.sh runs t5scale-train on 1 and 2 ranks, checks which files every process
# loaded, and starts each of the bundle's test programs on one entry of its tests (in_bundle.sh's
# BUNDLE_ENTRIES: those that use the program's heavy libraries, LibTorch, HDF5, SentencePiece, yaml-cpp, Open MPI,
# and the reference files the bundle carries; a test program that none of them starts fails the test). The point is
# that the moved programs and libraries load and work with the build machine hidden: every unit and parity entry
# again (about 30 CPU-seconds) would repeat what the build tree's ctest runs. t5scale_gpu_tests is started for
# every gpu entry by scripts/gpu-check.sh below.
#   check_relocated_bundle.sh SOURCE_DIR BUILD_DIR PYTHON
set -euo pipefail
SOURCE_DIR=$1 BUILD_DIR=$2 PYTHON=$3
WORK=$(mktemp -d "${TMPDIR:-/tmp}/t5scale-bundle-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
start=$(date +%s)

"$SOURCE_DIR/scripts/bundle.sh" --with-tests --build-dir "$BUILD_DIR" --out "$WORK/made"
tarballs=("$WORK"/made/t5scale-bundle-*.tar.gz)
((${#tarballs[@]} == 1)) || { echo "expected one tarball in $WORK/made, found: ${tarballs[*]}" >&2; exit 1; }
mkdir "$WORK/unpacked" "$WORK/run" "$WORK/home"
tar -xzf "${tarballs[0]}" -C "$WORK/unpacked"
rm -rf "$WORK/made"
bundles=("$WORK"/unpacked/t5scale-bundle-*/)
BUNDLE=${bundles[0]%/}
cp "$SOURCE_DIR/tests/bundle/in_bundle.sh" "$WORK/in_bundle.sh"
echo "[bundle test] made and unpacked in $(($(date +%s) - start)) s: $BUNDLE"

# What to hide: everything of the build machine that the bundle replaces. The Python that provides torch stays.
# A folder inside another hidden one is hidden with it.
python_prefix=$("$PYTHON" -c 'import sys; print(sys.prefix)')
candidates=()
for d in "$SOURCE_DIR" "$BUILD_DIR" /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 \
  /usr/share/openmpi /etc/openmpi /usr/local/cuda; do
  [[ -d $d ]] && candidates+=("$(readlink -f "$d")")
done
hide=()
for d in "${candidates[@]}"; do
  inside=0
  for other in "${candidates[@]}"; do [[ $d == "$other"/* ]] && inside=1; done
  [[ $inside == 0 && $python_prefix != "$d"/* ]] && hide+=("$d")
done
run=(env -i PATH=/usr/bin:/bin HOME="$WORK/home" bash "$WORK/in_bundle.sh" "$BUNDLE" "$PYTHON" "$WORK/run")
if unshare --mount --propagation private true 2>/dev/null; then
  echo "[bundle test] hidden: ${hide[*]}"
  # shellcheck disable=SC2016
  timeout 240 unshare --mount --propagation private sh -c \
    'n=$1; shift; for d in $(seq "$n"); do mount -t tmpfs -o ro,size=4k none "$1"; shift; done; exec "$@"' \
    hide "${#hide[@]}" "${hide[@]}" "${run[@]}"
else
  echo "[bundle test] no private mount namespace here (unshare needs CAP_SYS_ADMIN): the build machine's folders" \
       "stay visible; the loaded-files check still runs"
  timeout 240 "${run[@]}"
fi
# scripts/gpu-check.sh against this bundle runs every entry of the gpu label, the scripted ones (the watchdog, the
# training program) included; on a machine without a GPU each reports skipped, none is "not run".
"$SOURCE_DIR/scripts/gpu-check.sh" --bundle "$BUNDLE" --python "$PYTHON" --only gpu-tests --budget-min 5 \
  "$WORK/gpu-check" >"$WORK/gpu-check.out" 2>&1 || true
expected=$(cd "$BUILD_DIR" && ctest -N -L gpu | sed -n 's/^ *Test *#[0-9]*: \(gpu\.[^ ]*\)$/\1/p' | sort)
ran=$(sed -n 's/^\(SKIP\|PASS\|FAIL\) \(gpu\.[^ :]*\).*/\2/p' "$WORK/gpu-check/gpu-tests.log" 2>/dev/null | sort)
if [[ -z $expected || $expected != "$ran" ]]; then
  echo "[bundle test] gpu-check.sh --bundle ran [$(echo $ran)], the gpu label has [$(echo $expected)]:" >&2
  cat "$WORK/gpu-check.out" >&2
  exit 1
fi
if grep -q "not run" "$WORK/gpu-check/summary.txt"; then
  echo "[bundle test] gpu-check.sh --bundle left a stage not run:" >&2
  cat "$WORK/gpu-check/summary.txt" >&2
  exit 1
fi
echo "[bundle test] gpu-check.sh --bundle ran all $(wc -l <<<"$ran") gpu entries ($(grep -c '^SKIP ' \
  "$WORK/gpu-check/gpu-tests.log") skipped: no usable GPU here)"
echo "[bundle test] passed in $(($(date +%s) - start)) s"
