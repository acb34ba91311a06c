#!/usr/bin/env bash
# Runs inside an unpacked bundle with a cleared environment (check_relocated_bundle.sh starts it):
#   in_bundle.sh BUNDLE PYTHON WORK
# 1. env.sh refuses a Python without torch and a torch of another version; then, with PYTHON's torch, t5scale-train on the demo config, 1 rank and then 2 ranks (tp 2) under the
#    bundle's mpirun; both run files read with h5py: completed, the grid asked for, the same final loss.
# 2. Every object the dynamic loader mapped in those runs (LD_DEBUG=scopes, every process: mpirun, ranks, plugins)
#    lies in the bundle, in PYTHON's site-packages (LibTorch, NCCL, the CUDA runtime) or is glibc's; the bundle's
#    Open MPI, its plugins, PMIx, HDF5, yaml-cpp and SentencePiece and the wheel's CUDA runtime are among them.
# 3. Each test program of the bundle started, by tests/run-tests.sh, on entries of the bundle's test list chosen
#    to use its heavy libraries (LibTorch's operators, HDF5 written and read, SentencePiece, yaml-cpp, Open MPI's
#    mpirun) and the reference files the bundle carries (transformers' parity, ROUGE, LR schedule, Adafactor,
#    tokenizer): BUNDLE_ENTRIES below, with the programs they start checked against tests/bin (t5scale_gpu_tests is
#    check_relocated_bundle.sh's, through scripts/gpu-check.sh). The build tree's ctest runs every entry; here the
#    question is whether the moved programs load and work, which a missing or foreign library fails at start.
set -euo pipefail
BUNDLE=$1 PYTHON=$2 WORK=$3
cd "$WORK"

# env.sh refuses a Python without torch and a LibTorch of another version, saying why.
refused() {  # expected-message env.sh-arguments...
  local expected=$1
  shift
  # shellcheck source=/dev/null
  if (source "$BUNDLE/env.sh" "$@") 2>"$WORK/refusal"; then
    echo "[bundle test] env.sh $* was accepted" >&2
    exit 1
  fi
  grep -qF "$expected" "$WORK/refusal" || { echo "[bundle test] env.sh $*: expected '$expected', got:" >&2; cat "$WORK/refusal" >&2; exit 1; }
}
printf '#!/bin/sh\nexec python3 -S "$@"\n' >"$WORK/python_without_site_packages"
chmod +x "$WORK/python_without_site_packages"
refused "has no torch module" --python "$WORK/python_without_site_packages"
mkdir -p "$WORK/other_torch/torch/lib"
touch "$WORK/other_torch/torch/lib/libtorch.so"
echo "__version__ = '2.10.0+cu128'" >"$WORK/other_torch/torch/version.py"
refused "is torch 2.10.0+cu128" --torch-lib "$WORK/other_torch/torch/lib"

# shellcheck source=/dev/null
source "$BUNDLE/env.sh" --python "$PYTHON"
# The bundle's lib/ reaches its own programs through their RUNPATH only: every other program of the shell (the
# machine's Python, apt) keeps the system's libraries, not the bundle's libstdc++, HDF5 or Open MPI.
case ":$LD_LIBRARY_PATH:" in
  *":$BUNDLE/lib:"*) echo "[bundle test] env.sh put $BUNDLE/lib on LD_LIBRARY_PATH" >&2; exit 1 ;;
esac
if system_stdcxx=$(ldd /usr/bin/apt 2>/dev/null | awk '/libstdc\+\+/ {print $3}') && [[ $system_stdcxx == "$BUNDLE"/* ]]; then
  echo "[bundle test] /usr/bin/apt loads the bundle's $system_stdcxx" >&2
  exit 1
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl=self,vader OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1

short=(--config "$BUNDLE/jobs/demo/run.yaml" --set train.max_steps=20 --set train.log_every=10
  --set eval.every_steps=20 --set eval.max_examples=16 --set checkpoint.every_steps=0
  --set run.output_dir="$WORK/runs")
mkdir -p "$WORK/loader"
# The one-rank run also loads the CUDA backend (lib/libt5scale_cuda.so), as a GPU node would, with LibTorch's CUDA
# side, NCCL and the CUDA runtime from the wheel; without a GPU it then trains on the CPU.
T5SCALE_CUDA_BACKEND=load LD_DEBUG=scopes LD_DEBUG_OUTPUT="$WORK/loader/one" t5scale-train "${short[@]}" --set run.name=one
LD_DEBUG=scopes LD_DEBUG_OUTPUT="$WORK/loader/two" mpirun -np 2 t5scale-train "${short[@]}" --set run.name=two \
  --set parallel.tp=2

"$PYTHON" - "$WORK/runs" <<'PY'
import sys
import h5py

runs = sys.argv[1]
final = {}
for name, world, tp in (("one", 1, 1), ("two", 2, 2)):
    with h5py.File(f"{runs}/{name}.h5", "r") as f:
        status = f.attrs["status"].decode()
        assert status == "completed", f"{name}.h5: status {status}"
        assert (f.attrs["world_size"], f.attrs["tp"]) == (world, tp), \
            f"{name}.h5: world_size {f.attrs['world_size']}, tp {f.attrs['tp']}; expected {world}, {tp}"
        assert f["summary"].attrs["steps_completed"] == 20, f"{name}.h5: {f['summary'].attrs['steps_completed']} steps"
        final[name] = float(f["summary"].attrs["final_loss"])
# tp 2 computes the same function as one rank; fp32 sums in another order move the loss by ~1e-7 relative in 20
# steps (the demo's 400-step runs agree to 1e-4).
assert abs(final["two"] - final["one"]) <= 1e-5 * abs(final["one"]), f"final losses differ: {final}"
print(f"[bundle test] run files completed; final loss 1 rank {final['one']:.6f}, tp 2 {final['two']:.6f}")
PY

# Each object the loader maps appears in its trace as "object=PATH [namespace]"; the programs themselves by the name
# they were started with (found on PATH, so in the bundle's bin/).
for program in mpirun t5scale-train; do
  [[ $(command -v "$program") == "$BUNDLE/bin/$program" ]] || { echo "[bundle test] $program is not the bundle's" >&2; exit 1; }
done
site=$("$PYTHON" -c 'import importlib.util as u, os; print(os.path.dirname(u.find_spec("torch").submodule_search_locations[0]))')
glibc='^/(usr/)?lib(64|/x86_64-linux-gnu)/(ld-linux-x86-64\.so\.2|lib(c|m|mvec|dl|pthread|rt|resolv|util|anl|nss_[a-z]+)\.so\.[0-9.]+)$'
# Objects found through a RUNPATH of $ORIGIN/../lib appear as <bundle>/bin/../lib/NAME: compared as normalised paths.
loaded=$(cat "$WORK"/loader/* | sed -n 's/^ *[0-9]*:[[:space:]]*object=\(\/.*\) \[[0-9]*\]$/\1/p' | sort -u |
  xargs -r realpath -ms | sort -u)
foreign=$(grep -v -e "^$BUNDLE/" -e "^$site/" <<<"$loaded" | grep -Ev "$glibc" || true)
if [[ -n $foreign ]]; then
  echo "[bundle test] files loaded from outside the bundle, the torch wheel and glibc:" >&2
  echo "$foreign" >&2
  exit 1
fi
for expected in "$BUNDLE/lib/libmpi.so.40" "$BUNDLE/lib/libopen-pal.so.40" "$BUNDLE/lib/libpmix.so.2" \
  "$BUNDLE/lib/openmpi3/mca_btl_vader.so" "$BUNDLE/lib/openmpi3/mca_pmix_ext3x.so" "$BUNDLE/lib/libhdf5_serial.so.103" \
  "$BUNDLE/lib/libyaml-cpp.so.0.7" "$BUNDLE/lib/libsentencepiece.so.0" "$BUNDLE/lib/libstdc++.so.6" \
  "$BUNDLE/lib/libt5scale_cuda.so"; do
  grep -qx "$expected" <<<"$loaded" || { echo "[bundle test] $expected was not loaded" >&2; exit 1; }
done
grep -q "^$site/nvidia/.*/libcudart\.so\.[0-9]*$" <<<"$loaded" ||
  { echo "[bundle test] the CUDA runtime was not loaded from the wheel under $site" >&2; exit 1; }
echo "[bundle test] $(wc -l <<<"$loaded") files loaded by $(ls "$WORK/loader" | wc -l) processes, all from the" \
     "bundle, the torch wheel or glibc"

# One entry a test program (about 8 CPU-seconds; the 60 unit and parity entries took about 30).
BUNDLE_ENTRIES=(
  unit.core_hdf5_superblock          # t5scale_core_tests: HDF5 files written and read
  unit.config_yaml                   # t5scale_config_tests: yaml-cpp
  unit.fused_attention               # t5scale_model_tests: LibTorch's attention operators
  parity.t5_vs_transformers          # t5scale_io_tests: the parity references, forward and backward in LibTorch
  unit.prep_tokenizer_parity         # t5scale_data_tests: SentencePiece against T5Tokenizer's references
  unit.prep_templates                # t5scale_data_prep_tests
  unit.eval_rouge                    # t5scale_eval_tests: rouge-score's references
  unit.telemetry_run_file            # t5scale_telemetry_tests: the run file through HDF5
  unit.lr_schedule_vs_transformers   # t5scale_plan_tests: transformers' LR schedules
  unit.optim_adafactor_vs_transformers  # t5scale_train_tests: transformers' Adafactor, LibTorch's operators
  unit.failure_note                  # t5scale_job_tests
  unit.kernel_profile                # t5scale_bench_tests: LibTorch's profiler
  unit.study_spec                    # t5scale_study_tests: yaml-cpp
  unit.cuda_backend_loads            # t5scale_mpi_tests: the CUDA backend with the wheel's CUDA runtime
  mpi.mpi_data_tests_ranks_1         # t5scale_mpi_data_tests: under the bundle's mpirun
)
list=$BUNDLE/tests/tests.list
started=()
for entry in "${BUNDLE_ENTRIES[@]}"; do
  program=$(awk -F'\t' -v name="$entry" '$1 == name {print $5}' "$list")
  [[ -n $program ]] || { echo "[bundle test] $entry is not an entry of the bundle's $list" >&2; exit 1; }
  started+=("$program")
done
for program in "$BUNDLE"/tests/bin/*; do
  program=${program##*/}
  [[ $program == t5scale_gpu_tests || " ${started[*]} " == *" $program "* ]] ||
    { echo "[bundle test] no entry of BUNDLE_ENTRIES starts the bundle's test program $program" >&2; exit 1; }
done
names=$(IFS='|'; echo "${BUNDLE_ENTRIES[*]//./\\.}")
"$BUNDLE/tests/run-tests.sh" --python "$PYTHON" -R "^($names)\$" | tee "$WORK/run-tests.out"
for entry in "${BUNDLE_ENTRIES[@]}"; do
  grep -q "^PASS $entry " "$WORK/run-tests.out" || { echo "[bundle test] $entry did not pass" >&2; exit 1; }
done

