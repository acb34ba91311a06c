# Sets up this t5scale bundle in the current shell:
#   source <bundle>/env.sh [--python PY | --torch-lib DIR]
#     --python PY      a Python whose torch provides LibTorch, its NCCL and its CUDA runtime (default: python3)
#     --torch-lib DIR  LibTorch's lib folder itself (a torch wheel's torch/lib, or a libtorch download's lib); NCCL
#                      and the CUDA runtime are then taken from beside it (a wheel), $CUDA_HOME or the system
# Prepends the bundle's bin/ to PATH and LibTorch's, NCCL's and the CUDA runtime's folders (those of the torch the
# shell's Python uses as well) to LD_LIBRARY_PATH, and points Open MPI and PMIx at the bundle (OPAL_PREFIX, PMIX_PREFIX
# and their folders). The bundle's own lib/ is not on LD_LIBRARY_PATH: its programs and libraries find it through
# their RUNPATH ($ORIGIN/../lib), so that every other program of the shell (the machine's own Python, its h5py and
# MPI) keeps the system's libraries instead of the bundle's libstdc++, HDF5 or Open MPI. Refuses,
# with the reason, a torch of another version than the build's (BUNDLE_INFO), a glibc older than the bundle needs,
# and any library the programs would not find.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  echo "env.sh sets up the current shell: source it (source ${BASH_SOURCE[0]} [--python PY | --torch-lib DIR])" >&2
  exit 2
fi
_t5scale_bundle_env() {
  local bundle python=python3 torch_lib="" info
  bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  info=$bundle/BUNDLE_INFO
  while (($#)); do
    case $1 in
      --python) python=${2:?--python needs a Python}; torch_lib=""; shift 2 ;;
      --torch-lib) torch_lib=${2:?--torch-lib needs a folder}; shift 2 ;;
      *) echo "t5scale env.sh: unknown argument '$1' (use --python PY or --torch-lib DIR)" >&2; return 2 ;;
    esac
  done
  local error="t5scale env.sh: error:"
  _t5scale_bundle_want() { sed -n "s/^$1: //p" "$info"; }

  local glibc_needed glibc
  glibc_needed=$(_t5scale_bundle_want glibc_needed)
  glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
  if [[ -n $glibc && $(printf '%s\n%s\n' "$glibc_needed" "$glibc" | sort -V | head -n 1) != "$glibc_needed" ]]; then
    echo "$error this system's glibc is $glibc; the bundle needs glibc $glibc_needed or newer (build t5scale" \
         "on this system instead, see README 'Building on a cluster')" >&2
    return 1
  fi

  # LibTorch: the torch of the given Python, found without importing it (no CUDA initialisation, no GPU needed).
  if [[ -z $torch_lib ]]; then
    if ! command -v "$python" >/dev/null; then
      echo "$error '$python' not found: name a Python with torch (--python PY) or LibTorch's lib folder (--torch-lib DIR)" >&2
      return 1
    fi
    local torch_dir
    torch_dir=$("$python" -c 'import importlib.util as u; s = u.find_spec("torch"); print(s.submodule_search_locations[0] if s else "")') || return 1
    if [[ -z $torch_dir ]]; then
      echo "$error '$python' has no torch module: install torch $(_t5scale_bundle_want torch_version) for it, or name" \
           "another Python (--python PY) or LibTorch's lib folder (--torch-lib DIR)" >&2
      return 1
    fi
    torch_lib=$torch_dir/lib
  fi
  if [[ ! -d $torch_lib ]]; then
    echo "$error LibTorch folder '$torch_lib' does not exist" >&2
    return 1
  fi
  torch_lib=$(cd "$torch_lib" && pwd)
  if [[ ! -e $torch_lib/libtorch.so ]]; then
    echo "$error '$torch_lib' holds no libtorch.so: it is not LibTorch's lib folder" >&2
    return 1
  fi
  # The version: a wheel's torch/version.py, or a libtorch download's build-version.
  local torch_version=""
  if [[ -f $torch_lib/../version.py ]]; then
    torch_version=$(sed -n "s/^__version__ = '\(.*\)'.*/\1/p" "$torch_lib/../version.py")
  elif [[ -f $torch_lib/../build-version ]]; then
    torch_version=$(<"$torch_lib/../build-version")
  fi
  local wanted_version install
  wanted_version=$(_t5scale_bundle_want torch_version)
  if [[ $torch_version != "$wanted_version" ]]; then
    install="pip install torch==${wanted_version%%+*}"
    [[ $wanted_version == *+* ]] && install+=" --index-url https://download.pytorch.org/whl/${wanted_version#*+}"
    echo "$error the bundle was built against torch $wanted_version; '$torch_lib' is torch" \
         "${torch_version:-of unknown version}. LibTorch's C++ ABI changes between versions: use torch" \
         "$wanted_version ($install) or make the bundle from a build against this torch" >&2
    return 1
  fi

  # NCCL and the CUDA runtime of that torch (the wheel's nvidia/* packages), so that one process never loads two.
  local site dirs=("$torch_lib") cudart found d
  site=$(cd "$torch_lib/../.." && pwd)
  [[ -e $site/nvidia/nccl/lib/libnccl.so.2 ]] && dirs+=("$site/nvidia/nccl/lib")
  cudart=$(_t5scale_bundle_want cudart)
  if [[ $cudart != none ]]; then
    found=""
    for d in "$site"/nvidia/*/lib ${CUDA_HOME:+"$CUDA_HOME/lib64"}; do
      if [[ -e $d/$cudart ]]; then found=$d; break; fi
    done
    [[ -n $found ]] && dirs+=("$found")
  fi

  # Every library the programs need must resolve before the shell is changed.
  local library_path missing
  library_path=$(IFS=:; echo "${dirs[*]}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  # The CUDA backend (lib/libt5scale_cuda.so, loaded where there is a GPU) is the one that needs NCCL and CUDA.
  local checked=("$bundle/bin/t5scale-train")
  [[ -e $bundle/lib/libt5scale_cuda.so ]] && checked+=("$bundle/lib/libt5scale_cuda.so")
  missing=$(for f in "${checked[@]}"; do LD_LIBRARY_PATH=$library_path ldd "$f"; done | awk '/not found/ {print $1}' |
    sort -u | tr '\n' ' ')
  if [[ -n $missing ]]; then
    echo "$error t5scale-train and its CUDA backend would not find: $missing(LibTorch at $torch_lib; NCCL and $cudart are looked" \
         "for in $site/nvidia/*/lib and \$CUDA_HOME/lib64, or on the system's library path)" >&2
    return 1
  fi
  export LD_LIBRARY_PATH=$library_path
  export PATH="$bundle/bin:$PATH"
  export T5SCALE_BUNDLE=$bundle
  # Open MPI and PMIx find their plugins, help files and parameter files through these (the build's paths are
  # compiled in; the bundle's etc/ replaces the system's /etc/openmpi).
  export OPAL_PREFIX=$bundle OPAL_EXEC_PREFIX=$bundle OPAL_BINDIR=$bundle/bin OPAL_LIBDIR=$bundle/lib
  export OPAL_PKGLIBDIR=$bundle/lib/openmpi3 OPAL_DATADIR=$bundle/share OPAL_PKGDATADIR=$bundle/share/openmpi
  export OPAL_SYSCONFDIR=$bundle/etc
  export PMIX_PREFIX=$bundle PMIX_EXEC_PREFIX=$bundle PMIX_LIBDIR=$bundle/lib PMIX_PKGLIBDIR=$bundle/lib/pmix
  export PMIX_DATADIR=$bundle/share PMIX_PKGDATADIR=$bundle/share/pmix PMIX_SYSCONFDIR=$bundle/etc
  export PMIX_MCA_mca_base_component_path=$bundle/lib/pmix
  # hwloc (Open MPI's topology) would load the system's plugins (OpenCL, X11, libxml2, PCI); the CPU topology it
  # needs is built in, so its plugin folder is the bundle's, which is empty.
  export HWLOC_PLUGINS_PATH=$bundle/lib/hwloc

  echo "[t5scale bundle $(_t5scale_bundle_want revision)] torch $torch_version at $torch_lib; libraries: ${dirs[*]:1}" >&2
}
if _t5scale_bundle_env "$@"; then
  unset -f _t5scale_bundle_env _t5scale_bundle_want
else
  unset -f _t5scale_bundle_env _t5scale_bundle_want
  return 1
fi
