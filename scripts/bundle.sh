#!/usr/bin/env bash
# Makes a relocatable bundle of the built programs for machines that lack the build's libraries (GPU nodes without
# network, cluster nodes without the build's modules):
#   scripts/bundle.sh [--with-tests | --with-gpu-tests] [--build-dir DIR] [--out DIR]
# writes OUT/t5scale-bundle-<revision>/ and OUT/t5scale-bundle-<revision>.tar.gz (OUT defaults to BUILD/bundle):
#   bin/          every program of BUILD/bin, Open MPI's mpirun (orterun), orted and ompi_info
#   lib/          every shared library they need that is not glibc, LibTorch or CUDA/NVIDIA (Open MPI, PMIx, HDF5,
#                 yaml-cpp, SentencePiece and their dependencies, libstdc++ and libgcc_s), openmpi3/ and pmix/ plugins
#   share/, etc/  Open MPI's and PMIx's help files and the bundle's MCA parameters
#   jobs/         the run configs and study specs of the clone (jobs/demo/run.yaml)
#   env.sh        `source env.sh [--python PY | --torch-lib DIR]`: LibTorch, NCCL and the CUDA runtime of that torch
#   BUNDLE_INFO   revision, torch and CUDA versions, compiler, glibc needed, libraries bundled and left out
#   tests/        with --with-tests: the gtest programs, run-tests.sh, the list of ctest entries it runs and the
#                 reference files the build tree's Python fixtures made (see scripts/bundle/test_list.py);
#                 with --with-gpu-tests only the programs of the gpu label and of the CUDA backend's load test
#                 (t5scale_gpu_tests, t5scale_mpi_tests) and their entries: a bundle small enough to travel with the
#                 clone to a GPU machine that takes 64 MiB a call (scripts/gpu-check.sh --quick)
# Binaries and libraries carry the RUNPATH $ORIGIN/../lib, so the bundle's libraries are found wherever it is
# unpacked; LibTorch, NCCL and the CUDA runtime come from the target's torch through env.sh. Copies lose their
# debug sections (the build's files are untouched). Fails if the tarball exceeds 60 MiB.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TEMPLATES=$ROOT/scripts/bundle
MAX_COMPRESSED_MIB=60

usage() { sed -n '2,4p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
die() { echo "bundle.sh: error: $*" >&2; exit 1; }
log() { echo "[bundle] $*"; }

BUILD_DIR=$ROOT/build
OUT_DIR=""
WITH_TESTS=0
GPU_TESTS_ONLY=0
while (($#)); do
  case $1 in
    --with-tests) WITH_TESTS=1; shift ;;
    --with-gpu-tests) WITH_TESTS=1; GPU_TESTS_ONLY=1; shift ;;
    --build-dir) BUILD_DIR=${2:?--build-dir needs a folder}; shift 2 ;;
    --out) OUT_DIR=${2:?--out needs a folder}; shift 2 ;;
    -h | --help) usage 0 ;;
    *) echo "bundle.sh: unknown argument '$1'" >&2; usage 2 ;;
  esac
done
BUILD_DIR=$(cd "$BUILD_DIR" 2>/dev/null && pwd) || die "build folder '$BUILD_DIR' does not exist (build first: scripts/test.sh or cmake --build build)"
OUT_DIR=${OUT_DIR:-$BUILD_DIR/bundle}
CACHE=$BUILD_DIR/CMakeCache.txt
[[ -f $CACHE ]] || die "$CACHE not found: '$BUILD_DIR' is not a configured build folder"
[[ -x $BUILD_DIR/bin/t5scale-train ]] || die "$BUILD_DIR/bin/t5scale-train is missing: build the programs first"
command -v patchelf >/dev/null || die "patchelf is not installed (scripts/setup.sh installs it; or apt-get install patchelf)"

cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$CACHE" | head -n 1; }

# ---- what the build used ----
PYTHON=$(cache_value T5SCALE_PYTHON)
read -r TORCH_VERSION TORCH_CUDA TORCH_LIB < <("$PYTHON" -c '
import os, torch
print(torch.__version__, torch.version.cuda or "none", os.path.join(os.path.dirname(torch.__file__), "lib"))') ||
  die "the build's Python '$PYTHON' (T5SCALE_PYTHON in $CACHE) cannot import torch"
SITE_PACKAGES=$(dirname "$(dirname "$TORCH_LIB")")
MPIRUN=$(readlink -f "$(cache_value MPIEXEC_EXECUTABLE)")
MPI_BIN=$(dirname "$MPIRUN")
[[ -x $MPI_BIN/ompi_info ]] || die "the build's MPI ($MPIRUN) is not Open MPI: ompi_info is missing beside it"
ompi_path() { "$MPI_BIN/ompi_info" --parsable --path "$1" | sed -n "s/^path:$1://p"; }
OMPI_PKGLIBDIR=$(ompi_path pkglibdir)
OMPI_PKGDATADIR=$(ompi_path pkgdatadir)
OMPI_VERSION=$("$MPI_BIN/ompi_info" --version | head -n 1)
SOURCE_DIR=$(cache_value CMAKE_HOME_DIRECTORY)  # the clone the build was made from
REVISION=$(git -C "$SOURCE_DIR" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
git -C "$SOURCE_DIR" diff --quiet HEAD 2>/dev/null || REVISION="$REVISION-dirty"
NAME=t5scale-bundle-$REVISION
STAGE=$OUT_DIR/$NAME.tmp
rm -rf "$STAGE"
mkdir -p "$STAGE"/{bin,lib,share,etc}

# ---- the files to bundle ----
elf() { [[ -f $1 && ! -L $1 ]] && [[ $(head -c 4 "$1" | od -An -c | tr -d ' ') == '177ELF' ]]; }
programs=()
for f in "$BUILD_DIR"/bin/*; do
  if [[ -x $f ]] && elf "$f"; then programs+=("$f"); fi
done
test_programs=()
if ((WITH_TESTS)); then
  for f in "$BUILD_DIR"/tests/t5scale*_tests; do
    ((GPU_TESTS_ONLY)) && [[ ${f##*/} != t5scale_gpu_tests && ${f##*/} != t5scale_mpi_tests ]] && continue
    if [[ -x $f ]] && elf "$f"; then test_programs+=("$f"); fi
  done
  ((${#test_programs[@]})) || die "--with-tests: no test programs in $BUILD_DIR/tests (build with -DT5SCALE_BUILD_TESTS=ON)"
fi
mpi_programs=("$MPI_BIN/orterun" "$MPI_BIN/orted" "$MPI_BIN/ompi_info")
# The CUDA backend the programs load where there is a GPU (src/dist/cuda_backend.h), in lib/ beside bin/ as in the
# build; absent from a build whose LibTorch has no CUDA.
cuda_backend=()
[[ -f $BUILD_DIR/lib/libt5scale_cuda.so ]] && cuda_backend=("$BUILD_DIR/lib/libt5scale_cuda.so")

# Which of the needed libraries the target provides itself: glibc (its loader decides which one runs), LibTorch
# (from the target's torch, through env.sh) and CUDA/NVIDIA (the driver; the runtime, NCCL and the math libraries
# of that torch). Everything else, libstdc++ and libgcc_s included, is bundled: the target's C++ runtime may be
# older than the GCC 12 one the build and Debian's libraries need (GLIBCXX_3.4.30).
provided_by_target() {  # name path
  case $1 in
    ld-linux*.so.* | linux-vdso.so.* | libc.so.* | libm.so.* | libmvec.so.* | libdl.so.* | libpthread.so.* | \
      librt.so.* | libresolv.so.* | libutil.so.* | libanl.so.* | libnss_*.so.* | libBrokenLocale.so.*)
      echo glibc ;;
    libtorch*.so* | libc10*.so* | libshm.so* | libcaffe2*.so* | libgomp*.so*)
      echo libtorch ;;
    libcuda.so* | libcudart.so* | libnccl.so* | libcublas*.so* | libcufft*.so* | libcurand.so* | libcusparse*.so* | \
      libcusolver*.so* | libcudnn*.so* | libnvrtc*.so* | libnvJitLink.so* | libnvidia-*.so* | libnvToolsExt.so* | \
      libnvtx*.so* | libcupti.so* | libcufile*.so* | libnvshmem*.so* | libnvperf*.so*)
      echo cuda ;;
    *)
      case $2 in "$SITE_PACKAGES"/* | /usr/local/cuda*) echo cuda ;; *) echo "" ;; esac ;;
  esac
}

# Open MPI plugins for fabrics (libfabric, verbs, UCX, PSM) are left out: their libraries must match the target's
# network drivers, and Debian's own MCA parameters switch them off. NCCL carries the GPU traffic; MPI runs over
# shared memory and TCP.
FABRIC_LIBS='^lib(fabric|ibverbs|rdmacm|ucp|ucs|uct|ucm|psm_infinipath|psm2)\.so'

declare -A needed=()  # soname -> path
declare -A excluded=()  # soname -> glibc | libtorch | cuda
collect_needs() {  # file: adds what ldd resolves for it to needed/excluded; fails on a library ldd cannot find
  local line name path kind
  while read -r line; do
    [[ $line == *"=>"* ]] || continue
    name=${line%% =>*}
    path=${line#*=> }
    path=${path%% (*}
    kind=$(provided_by_target "$name" "$path")
    if [[ -n $kind ]]; then
      excluded[$name]=$kind
    elif [[ $path == "not found" ]]; then
      die "$1 needs $name, which the loader does not find"
    else
      needed[$name]=$path
    fi
  done < <(ldd "$1")
}

for f in "${programs[@]}" "${test_programs[@]}" "${mpi_programs[@]}" "${cuda_backend[@]}"; do collect_needs "$f"; done

plugins=()
left_out_plugins=()
for f in "$OMPI_PKGLIBDIR"/*.so; do
  if ldd "$f" | awk '{print $1}' | grep -Eq "$FABRIC_LIBS"; then
    left_out_plugins+=("$(basename "$f")")
  else
    plugins+=("$f")
    collect_needs "$f"
  fi
done
# Debian builds Open MPI on an external PMIx whose own plugins sit beside libpmix.
pmix_plugins=()
PMIX_LIB=${needed[libpmix.so.2]:-}
if [[ -n $PMIX_LIB ]]; then
  PMIX_LIB=$(readlink -f "$PMIX_LIB")
  for f in "$(dirname "$PMIX_LIB")"/pmix/*.so; do
    [[ -e $f ]] || continue
    pmix_plugins+=("$f")
    collect_needs "$f"
  done
fi

# ---- copy, strip debug sections, set the RUNPATH ----
install_elf() {  # source destination runpath
  cp -L "$1" "$2"
  chmod u+w "$2"
  strip --strip-debug "$2"
  patchelf --set-rpath "$3" "$2"
}
for f in "${programs[@]}"; do install_elf "$f" "$STAGE/bin/$(basename "$f")" '$ORIGIN/../lib'; done
for f in "${mpi_programs[@]}"; do install_elf "$f" "$STAGE/bin/$(basename "$f")" '$ORIGIN/../lib'; done
ln -s orterun "$STAGE/bin/mpirun"
ln -s orterun "$STAGE/bin/mpiexec"
for name in "${!needed[@]}"; do install_elf "${needed[$name]}" "$STAGE/lib/$name" '$ORIGIN'; done
for f in "${cuda_backend[@]}"; do install_elf "$f" "$STAGE/lib/$(basename "$f")" '$ORIGIN'; done
mkdir -p "$STAGE/lib/openmpi3" "$STAGE/lib/pmix" "$STAGE/lib/hwloc"
for f in "${plugins[@]}"; do install_elf "$f" "$STAGE/lib/openmpi3/$(basename "$f")" '$ORIGIN/..'; done
for f in "${pmix_plugins[@]}"; do install_elf "$f" "$STAGE/lib/pmix/$(basename "$f")" '$ORIGIN/..'; done

cp -r "$OMPI_PKGDATADIR" "$STAGE/share/openmpi"
if [[ -n $PMIX_LIB && -d $(dirname "$PMIX_LIB")/../share/pmix ]]; then
  cp -r "$(dirname "$PMIX_LIB")/../share/pmix" "$STAGE/share/pmix"
fi
cp "$TEMPLATES/openmpi-mca-params.conf" "$STAGE/etc/openmpi-mca-params.conf"
cp "$TEMPLATES/env.sh" "$STAGE/env.sh"
cp -r "$SOURCE_DIR/jobs" "$STAGE/jobs"

if ((WITH_TESTS)); then
  mkdir -p "$STAGE/tests/bin"
  for f in "${test_programs[@]}"; do install_elf "$f" "$STAGE/tests/bin/$(basename "$f")" '$ORIGIN/../../lib'; done
  cp "$TEMPLATES/run-tests.sh" "$STAGE/tests/run-tests.sh"
  (cd "$BUILD_DIR" && ctest --show-only=json-v1) >"$STAGE/tests/ctest.json"
  python3 "$TEMPLATES/test_list.py" "$STAGE/tests/ctest.json" "$STAGE/tests/bin" "$TEMPLATES/relocation-excluded-tests.txt" \
    "$STAGE/tests/references" "$SOURCE_DIR" "$STAGE/tests/scripts" >"$STAGE/tests/tests.list"
  rm "$STAGE/tests/ctest.json"
fi

# ---- BUNDLE_INFO ----
glibc_needed=$(find "$STAGE" -type f -print0 | while IFS= read -r -d '' f; do elf "$f" && objdump -T "$f"; done |
  grep -oE 'GLIBC_[0-9]+\.[0-9]+' | sed 's/GLIBC_//' | sort -uV | tail -n 1)
cudart=""
((${#cuda_backend[@]})) && cudart=$(readelf -d "${cuda_backend[0]}" | sed -n 's/.*Shared library: \[\(libcudart\.so\.[0-9]*\)\]/\1/p')
sorted() { printf '%s\n' "$@" | sort | tr '\n' ' ' | sed 's/ $//'; }
by_kind() { local n; for n in "${!excluded[@]}"; do [[ ${excluded[$n]} == "$1" ]] && echo "$n"; done | sort | tr '\n' ' ' | sed 's/ $//'; }
{
  echo "revision: $REVISION"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "torch_version: $TORCH_VERSION"
  echo "torch_cuda: $TORCH_CUDA"
  echo "cudart: ${cudart:-none}"
  echo "compiler: $(cache_value CMAKE_CXX_COMPILER) $("$(cache_value CMAKE_CXX_COMPILER)" -dumpfullversion)"
  echo "build_type: $(cache_value CMAKE_BUILD_TYPE)"
  echo "glibc_needed: $glibc_needed"
  echo "open_mpi: $OMPI_VERSION"
  echo "programs: $(sorted "${programs[@]##*/}")"
  echo "cuda_backend: $( ((${#cuda_backend[@]})) && echo "lib/libt5scale_cuda.so" || echo none)"
  echo "test_programs: $(sorted "${test_programs[@]##*/}")"
  echo "bundled_libraries: $(sorted "${!needed[@]}")"
  echo "openmpi_plugins_left_out: $(sorted "${left_out_plugins[@]}")"
  echo "from_glibc: $(by_kind glibc)"
  echo "from_libtorch: $(by_kind libtorch)"
  echo "from_cuda: $(by_kind cuda)"
} >"$STAGE/BUNDLE_INFO"

# ---- publish: the folder and the tarball replace older ones only once complete ----
rm -rf "$OUT_DIR/$NAME"
mv "$STAGE" "$OUT_DIR/$NAME"
# gzip's fastest level: 3 s instead of 6 for the 92 MiB bundle with the test programs, the tarball 9% larger (41.2
# MiB against 37.9), well inside the limit above.
tar -C "$OUT_DIR" -cf - "$NAME" | gzip -1 >"$OUT_DIR/$NAME.tar.gz.tmp"
mv "$OUT_DIR/$NAME.tar.gz.tmp" "$OUT_DIR/$NAME.tar.gz"
compressed=$(stat -c %s "$OUT_DIR/$NAME.tar.gz")
uncompressed=$(du -sb "$OUT_DIR/$NAME" | cut -f1)
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
log "$OUT_DIR/$NAME.tar.gz: $(mib "$compressed") compressed, $(mib "$uncompressed") unpacked, ${#needed[@]} libraries," \
    "${#plugins[@]} Open MPI plugins, LibTorch $TORCH_VERSION excluded"
((compressed <= MAX_COMPRESSED_MIB * 1048576)) || die "the tarball exceeds $MAX_COMPRESSED_MIB MiB"
