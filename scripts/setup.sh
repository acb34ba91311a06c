#!/usr/bin/env bash
# Installs everything t5scale needs on a Debian 12 machine; safe to run again.
#   - Debian packages: compilers, CMake, Open MPI, HDF5, yaml-cpp, SentencePiece, GoogleTest, ccache
#   - a Python virtual environment outside the clone, keyed by the pinned versions, holding the
#     PyPI torch wheel (LibTorch + NCCL), the references the tests compare against (transformers, rouge-score)
#     and the analysis packages (scripts/requirements-venv.txt, pinned; installed again when that file changes)
#   - the analysis package itself (analysis/), whose t5scale-analyze command is then on the venv's PATH
#   - cuDNN's header-only frontend (PyPI nvidia-cudnn-frontend, pinned) outside the clone, for the CUDA backend's
#     fused attention; its folder is written to $T5SCALE_CACHE/cudnn-frontend-path for CMake
# Prints nothing but progress; the venv path is written to $T5SCALE_CACHE/venv-path for the other scripts.
set -euo pipefail

TORCH_VERSION=2.11.0
TRANSFORMERS_VERSION=4.57.1
CUDNN_FRONTEND_VERSION=1.32.0
PYTHON_BIN=${T5SCALE_PYTHON:-python3}
CACHE_DIR=${T5SCALE_CACHE:-$HOME/.cache/t5scale}
PY_TAG=$("$PYTHON_BIN" -c 'import sys; print(f"py{sys.version_info[0]}.{sys.version_info[1]}")')
VENV_DIR=${T5SCALE_VENV:-$CACHE_DIR/venv-torch$TORCH_VERSION-tf$TRANSFORMERS_VERSION-$PY_TAG}

APT_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git python3-venv procps  # procps: pgrep/pkill in tests
  time                     # /usr/bin/time: the ZeRO-2 memory measurement in docs/BENCHMARKS.md (run by docs.runnable_commands)
  libopenmpi-dev openmpi-bin
  libhdf5-dev hdf5-tools
  libyaml-cpp-dev
  libsentencepiece-dev sentencepiece
  libgtest-dev googletest
  nlohmann-json3-dev
  slurm-wlm munge          # the local one-node cluster of the slurm tests
  clang libclang-rt-14-dev # libFuzzer for scripts/fuzz.sh
  patchelf                 # scripts/bundle.sh sets the bundle's RUNPATH
)

log() { echo "[setup] $*"; }

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

stamp="$VENV_DIR/.t5scale-complete"
if [[ ! -f $stamp ]]; then
  log "creating the Python environment $VENV_DIR (torch $TORCH_VERSION; this takes a while once)"
  mkdir -p "$CACHE_DIR"
  "$PYTHON_BIN" -m venv "$VENV_DIR"
  "$VENV_DIR/bin/pip" install -q --upgrade pip
  "$VENV_DIR/bin/pip" install -q "torch==$TORCH_VERSION" "transformers==$TRANSFORMERS_VERSION"
  "$VENV_DIR/bin/python" - <<'PY'
import torch, transformers, safetensors
import nvidia.nccl, os
print("[setup] torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)
PY
  touch "$stamp"
fi
requirements="$(dirname "${BASH_SOURCE[0]}")/requirements-venv.txt"
extras_stamp="$VENV_DIR/.t5scale-extras-$(sha256sum "$requirements" | cut -c1-16)"
if [[ ! -f $extras_stamp ]]; then
  log "installing the pinned Python packages of $requirements"
  "$VENV_DIR/bin/pip" install -q -r "$requirements"
  "$VENV_DIR/bin/python" -c "import rouge_score, h5py, pandas, pyarrow, matplotlib, pytest, yaml, setuptools, google.protobuf, tensorboard"
  rm -f "$VENV_DIR"/.t5scale-extras-*
  touch "$extras_stamp"
fi

# The analysis package (analysis/pyproject.toml), which puts the t5scale-analyze command in $VENV_DIR/bin. It is
# installed as a copy, not editable: the venv is shared by every clone on the machine (CI clones main into a
# temporary folder, runs this script there and deletes the clone), and an editable install would tie the venv to
# whichever clone ran setup last, its command broken once that clone is gone. The copy is built from the package's
# files alone, in a temporary folder (no build/ or egg-info left in the clone, no stale build/lib), and installed
# again whenever those files differ from the ones installed (a stamp keyed by their hash), so a run with nothing
# changed costs one hash. analysis/t5scale-analyze runs the clone's own code as it is, installed or not.
analysis_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/../analysis" && pwd)"
analysis_files=(pyproject.toml README.md t5scale_analyze)
analysis_hash=$(cd "$analysis_dir" &&
  find "${analysis_files[@]}" -type f ! -path '*/__pycache__/*' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum |
  sha256sum | cut -c1-16)
analysis_stamp="$VENV_DIR/.t5scale-analyze-$analysis_hash"
if [[ ! -f $analysis_stamp || ! -x $VENV_DIR/bin/t5scale-analyze ]]; then
  log "installing the analysis package ($analysis_dir) and its command t5scale-analyze"
  build_dir=$(mktemp -d)
  tar -C "$analysis_dir" --exclude=__pycache__ -cf - "${analysis_files[@]}" | tar -C "$build_dir" -xf -
  "$VENV_DIR/bin/pip" install -q --no-deps --no-build-isolation --force-reinstall "$build_dir" ||
    { rm -rf "$build_dir"; exit 1; }
  rm -rf "$build_dir"
  "$VENV_DIR/bin/t5scale-analyze" --help >/dev/null
  rm -f "$VENV_DIR"/.t5scale-analyze-*
  touch "$analysis_stamp"
fi
mkdir -p "$CACHE_DIR"
echo "$VENV_DIR" > "$CACHE_DIR/venv-path"

# cuDNN's frontend: header-only C++ (include/cudnn_frontend.h), compiled into the CUDA backend against the cuDNN that
# the torch wheel ships; nothing of it is loaded at run time. Kept beside the venv, keyed by its version.
FRONTEND_DIR=$CACHE_DIR/cudnn-frontend-$CUDNN_FRONTEND_VERSION
if [[ ! -f $FRONTEND_DIR/.t5scale-complete ]]; then
  log "installing cuDNN's frontend $CUDNN_FRONTEND_VERSION (headers) in $FRONTEND_DIR"
  rm -rf "$FRONTEND_DIR"
  "$VENV_DIR/bin/pip" install -q --no-deps --target "$FRONTEND_DIR" "nvidia-cudnn-frontend==$CUDNN_FRONTEND_VERSION"
  [[ -f $FRONTEND_DIR/include/cudnn_frontend.h ]] ||
    { echo "[setup] error: $FRONTEND_DIR/include/cudnn_frontend.h is missing after the install" >&2; exit 1; }
  touch "$FRONTEND_DIR/.t5scale-complete"
fi
echo "$FRONTEND_DIR" > "$CACHE_DIR/cudnn-frontend-path"

# A CUDA torch wheel's CMake package (Caffe2Config) needs the CUDA toolkit of the wheel's CUDA version at configure
# time, although nothing of it is linked (LibTorch, NCCL and the CUDA runtime come from the wheel): without nvcc,
# configuring stops with "uses CUDA but I cannot find the CUDA libraries". There is no CPU fallback for such a
# wheel. The toolkit is looked for where CMake looks: $CUDA_HOME, nvcc on PATH, /usr/local/cuda.
TORCH_CUDA=$("$VENV_DIR/bin/python" -c 'import torch; print(torch.version.cuda or "")')
if [[ -n $TORCH_CUDA ]]; then
  nvcc=""
  for candidate in ${CUDA_HOME:+"$CUDA_HOME/bin/nvcc"} "$(command -v nvcc || true)" /usr/local/cuda/bin/nvcc; do
    if [[ -n $candidate && -x $candidate ]]; then nvcc=$candidate; break; fi
  done
  nvcc_version=""
  [[ -n $nvcc ]] && nvcc_version=$("$nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\),.*/\1/p')
  if [[ ${nvcc_version%%.*} != "${TORCH_CUDA%%.*}" ]]; then
    found="no nvcc (looked in \$CUDA_HOME/bin, PATH and /usr/local/cuda/bin)"
    [[ -n $nvcc ]] && found="nvcc ${nvcc_version:-of unknown version} at $nvcc"
    echo "[setup] error: torch $TORCH_VERSION is built for CUDA $TORCH_CUDA, and configuring t5scale against it" \
         "needs the CUDA $TORCH_CUDA toolkit (nvcc); found $found." >&2
    echo "[setup] Install the CUDA $TORCH_CUDA toolkit (NVIDIA's apt repository for Debian 12, package" \
         "cuda-toolkit-${TORCH_CUDA/./-}, or the runfile from developer.nvidia.com), then put its bin/ on PATH or" \
         "set CUDA_HOME (for example export CUDA_HOME=/usr/local/cuda-$TORCH_CUDA)." >&2
    exit 1
  fi
  log "CUDA toolkit: nvcc $nvcc_version ($nvcc) for torch's CUDA $TORCH_CUDA"
fi
log "ready: venv $VENV_DIR"
