# shellcheck shell=bash
# What the cluster tests share (sourced, not run): the prerequisites, a failure that names the step, the temporary
# folder, the cluster (the one ctest shares between the tests, or one of the test's own), deadlines per step and
# for the whole test, the one-node reference runs and the check of a run file against one.
# The sourcing script passes its arguments (SOURCE_DIR BIN_DIR PYTHON: `. common.sh "$@"`, which sets src, bin
# and python) and sets test_name before; it may set `step` to what it is doing (fail names it). The deadlines:
# T5SCALE_MULTINODE_STEP_TIMEOUT_S (the longest any one step may take, default 90) and
# T5SCALE_MULTINODE_TEST_TIMEOUT_S (the whole test's, default 200: below ctest's 240 s, which kills without a
# chance to clean up).
# The cluster: T5SCALE_LOCAL_CLUSTER names the state folder of a running 4-node cluster (ctest's fixture
# local_cluster: tests/multinode/local_cluster.sh start, in multinode.cluster_start); a test uses it and leaves
# it as it found it, no job of its own left. Unset, the test starts a 4-node cluster of its own in its temporary
# folder and removes it at exit. T5SCALE_MULTINODE_REFERENCES names the folder of the one-node reference runs
# (made once by local_cluster.sh references); unset, or where one is missing, the test runs what it needs.

# shellcheck source=tests/shell_test_start.sh
. "$(dirname "${BASH_SOURCE[0]}")/../shell_test_start.sh" "$@"
step_timeout_s=${T5SCALE_MULTINODE_STEP_TIMEOUT_S:-90}
test_timeout_s=${T5SCALE_MULTINODE_TEST_TIMEOUT_S:-200}
# The cluster's size, and the CPUs each node declares: 4, so that a one-node run of 4 ranks fits on any node.
cluster_nodes=4
export T5SCALE_SLURM_NODE_CPUS=${T5SCALE_SLURM_NODE_CPUS:-4}

# Open MPI as root, and ranks that yield the core when they wait (up to 13 ranks share 2 cores).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1

# The runs, as settings of the demo's tiny T5 on the synthetic task (jobs/demo/run.yaml):
# short: 24 steps, one evaluation at the end (the runs across nodes, the study across nodes; every step's loss is
# compared, and every step all-reduces across the nodes);
# shellcheck disable=SC2034  # read through a nameref
short_settings=(train.max_steps=24 train.log_every=8 eval.every_steps=0 eval.max_examples=32 checkpoint.every_steps=0)
# long: 300 steps with a checkpoint every 60, resumed when one is there, a collective waiting at most 5 s
# (preemption and node loss).
collective_timeout_s=5
# shellcheck disable=SC2034  # read through a nameref
long_settings=(train.max_steps=300 train.log_every=30 eval.every_steps=0 eval.at_end=false checkpoint.every_steps=60
               checkpoint.resume=auto "parallel.collective_timeout_s=$collective_timeout_s")

# Sets the array `train`: t5scale-train on the demo's config with the settings of kind $2 (short, long), run
# files into folder $1.
train_command() {
  local -n settings="$2_settings"
  local setting
  train=("$bin/t5scale-train" --config "$src/jobs/demo/run.yaml" --set run.output_dir="$1")
  for setting in "${settings[@]}"; do train+=(--set "$setting"); done
}

# The settings of kind $1 as the lines of a study spec's `base:` (dotted keys).
base_of_spec() {
  local -n settings="$1_settings"
  local setting
  for setting in "${settings[@]}"; do echo "  ${setting%%=*}: ${setting#*=}"; done
}

# Root, the programs, namespaces that can be made, and Debian's slurm-wlm and munge (installed when missing).
check_multinode_prerequisites() {
  [ "$(id -u)" -eq 0 ] ||
    fail "the local multi-node cluster needs root (network namespaces, slurmd, SlurmUser=root); run the test as root"
  [ -x "$bin/t5scale-train" ] || fail "$bin/t5scale-train is missing: build the target t5scale-train"
  "$bin/t5scale-train" --help >/dev/null 2>&1 ||
    fail "$bin/t5scale-train does not run (from a bundle: source <bundle>/env.sh first):" \
         "$("$bin/t5scale-train" --help 2>&1 | tail -n 3)"
  if [ -x "$bin/mpirun" ]; then
    mpirun=$bin/mpirun
  else
    mpirun=$(command -v mpirun) || fail "no mpirun on PATH (apt-get install openmpi-bin)"
  fi
  "$python" -c "import h5py" || fail "$python cannot import h5py"
  for program in ip unshare nsenter; do
    command -v "$program" >/dev/null || fail "'$program' is not installed (iproute2, util-linux)"
  done
  # A namespace made and removed: where this fails (a container without CAP_SYS_ADMIN, a kernel without netns),
  # no node can have its own network.
  local probe_ns="t5s-probe-$$" probe
  probe=$(ip netns add "$probe_ns" 2>&1) ||
    fail "ip netns add fails here, so nodes cannot have their own network: $probe"
  ip netns del "$probe_ns"
  unshare --uts --mount true 2>/dev/null || fail "unshare --uts --mount fails here: nodes cannot have their own hostname"
  # Debian's packages, when missing (about 10 s).
  "$src/slurm/local/install.sh" || fail "slurm-wlm and munge could not be installed"
}

# The temporary folder ($work, the current directory from here on) and the trap that cleans up at exit: the
# cluster of this test stopped (or, on the shared cluster, this test's jobs cancelled), the logs printed after a
# failure, $work removed after a success.
work=""
state=""         # the cluster of this test's own, stopped at exit
shared_state=""  # the shared cluster (T5SCALE_LOCAL_CLUSTER), left running
status=1
make_test_folder() {
  # shellcheck disable=SC2154  # the sourcing script sets test_name
  work=$(mktemp -d "${TMPDIR:-/tmp}/t5scale-$test_name.XXXXXX")
  trap multinode_cleanup EXIT
  trap 'exit 130' INT TERM
  cd "$work" || fail "cannot enter $work"
}
background_pids=()  # helpers and cases the test started in the background, ended first
multinode_cleanup() {
  local pid log
  for pid in "${background_pids[@]}"; do kill "$pid" 2>/dev/null; done
  [ -n "$shared_state" ] && cancel_all_jobs
  [ -n "$state" ] && "$src/slurm/local/stop.sh" "$state"
  if [ "$status" -ne 0 ]; then
    echo "--- failed at: $step" >&2
    for log in "$work"/*.log "$work"/*/*.log "${state:-$shared_state}"/log/*.log; do
      [ -e "$log" ] && { echo "== $log" >&2; tail -n 25 "$log" >&2; }
    done
  fi
  if [ "${T5SCALE_KEEP_MULTINODE_TEST:-0}" = 1 ] || [ "$status" -ne 0 ]; then
    echo "kept $work" >&2
  else
    rm -rf "$work"
  fi
  echo "$test_name: $((SECONDS - test_start)) s"
}

# The time the next step may take: step_timeout_s, or less where the whole test's deadline is nearer.
step_limit() {
  local left=$((test_start + test_timeout_s - SECONDS))
  [ "$left" -gt 5 ] || fail "the test's deadline of ${test_timeout_s} s has passed"
  echo $((left < step_timeout_s ? left : step_timeout_s))
}

# Points Slurm's commands and Open MPI at the cluster in state folder $1: TCP between the nodes, on the bridge's
# subnet only (Open MPI would otherwise try every interface it sees), for the MPI traffic (btl) and Open MPI's own
# wire-up between mpirun and its orted (oob) alike. Sets $subnet.
point_at_cluster() {
  export SLURM_CONF="$1/slurm.conf"
  subnet=$(sed -n 's/^subnet //p' "$1/network" 2>/dev/null)
  [ -n "$subnet" ] || fail "$1/network names no subnet: no multi-node cluster was started there"
  export OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=$subnet OMPI_MCA_oob_tcp_if_include=$subnet
}

# Starts the 4-node cluster in folder $1 (slurm/local/start.sh) and points at it.
start_cluster() {
  local limit
  step="starting a $cluster_nodes-node cluster"
  limit=$(step_limit) || exit 1
  T5SCALE_SLURM_TIMEOUT_S=$limit timeout "$((limit + 20))" \
    "$src/slurm/local/start.sh" --nodes "$cluster_nodes" "$1" ||
    fail "slurm/local/start.sh --nodes $cluster_nodes did not start the cluster (the reason is above)"
  point_at_cluster "$1"
}

# Stops the cluster of state folder $1 and checks that no namespace, veth or bridge it made is left.
stop_cluster() {
  local made name
  step="stopping the cluster in $1"
  unset OMPI_MCA_btl OMPI_MCA_btl_tcp_if_include OMPI_MCA_oob_tcp_if_include
  made=$(sed -n 's/^\(netns\|veth\|bridge\) //p' "$1/network" 2>/dev/null)
  "$src/slurm/local/stop.sh" "$1" >/dev/null || fail "slurm/local/stop.sh failed"
  [ -e "$1/network" ] && fail "stop.sh could not remove: $(cat "$1/network")"
  for name in $made; do
    if ip netns list | grep -qw "^$name" || ip link show "$name" >/dev/null 2>&1; then
      fail "stop.sh left $name"
    fi
  done
}

# The cluster this test runs on: the shared one of T5SCALE_LOCAL_CLUSTER, with every node idle and no job queued
# (a test that was killed may have left some: they are cancelled), or a new one in $work/slurm.
use_cluster() {
  if [ -z "${T5SCALE_LOCAL_CLUSTER:-}" ]; then
    state="$work/slurm"
    start_cluster "$state"
    return
  fi
  step="the shared cluster in $T5SCALE_LOCAL_CLUSTER"
  if [ ! -s "$T5SCALE_LOCAL_CLUSTER/slurm.conf" ] || [ ! -s "$T5SCALE_LOCAL_CLUSTER/slurmctld.pid" ]; then
    fail "no cluster runs in $T5SCALE_LOCAL_CLUSTER (ctest's multinode.cluster_start starts it)"
  fi
  shared_state=$T5SCALE_LOCAL_CLUSTER
  point_at_cluster "$shared_state"
  cancel_all_jobs
  # Nodes still completing a cancelled job become idle; one that is down or drained stays so.
  local limit deadline nodes
  limit=$(step_limit) || exit 1
  deadline=$((SECONDS + limit))
  until nodes=$(sinfo -h -N -o '%N %T' 2>&1) && [ "$(grep -c ' idle$' <<<"$nodes")" -eq "$cluster_nodes" ]; do
    if grep -Eq ' (down|drain|fail)' <<<"$nodes" || [ $SECONDS -ge $deadline ]; then
      fail "the nodes are not all idle: $(tr '\n' ' ' <<<"$nodes")"
    fi
    sleep 0.5
  done
}

# Cancels every job of the shared cluster and waits, at most 30 s, until none is left: only one test at a time
# uses the cluster (ctest's RESOURCE_LOCK local_slurm), so every job there is this test's.
cancel_all_jobs() {
  local jobs
  jobs=$(squeue -h -o %i 2>/dev/null | tr '\n' ' ')
  [ -n "${jobs// /}" ] || return 0
  echo "cancelling jobs left on the cluster: $jobs"
  # shellcheck disable=SC2086
  scancel $jobs 2>/dev/null
  for _ in $(seq 150); do
    [ -z "$(squeue -h -o %i 2>/dev/null)" ] && return 0
    sleep 0.2
  done
  echo "jobs still queued after 30 s: $(squeue -h -o '%i %T' 2>&1 | tr '\n' ' ')" >&2
}

# Fails the test when one of the Slurm jobs given (ids; an array job's id covers its tasks) can never start, so
# that no test waits out its deadline on a cluster that cannot run anything: a job whose launch failed on its node
# is requeued and held by slurmctld ("launch failed requeued held": slurmd could not start its slurmstepd, e.g. a
# socket path too long, a spool folder that cannot be written), and a held job, or one whose dependency can never
# be met, stays pending for ever. The FAIL line names the job, its state and reason and slurmd's error about it;
# the lines of slurmctld's and the slurmd logs about the job are printed before. Every loop that waits for a job
# calls it on each turn; it asks squeue at most every 2 s (a squeue that fails says nothing: asked again later).
jobs_checked_at=-100
check_jobs_can_start() {
  [ $# -gt 0 ] || return 0
  [ $((SECONDS - jobs_checked_at)) -ge 2 ] || return 0
  jobs_checked_at=$SECONDS
  local queue job job_state reason
  queue=$(squeue -h -r -j "$(IFS=,; echo "$*")" -o '%i %T %r' 2>/dev/null) || return 0
  while read -r job job_state reason; do
    case $reason in
      *"launch failed"* | *[Hh]eld* | DependencyNeverSatisfied)
        report_job_that_cannot_start "$job" "$job_state" "$reason" ;;
    esac
  done <<<"$queue"
}

# Prints what the cluster's daemons logged about job $1 (state $2, reason $3), and fails naming the first error
# slurmd gave for it.
report_job_that_cannot_start() {
  local job=$1 logs error log lines details id pattern
  logs="$(dirname "${SLURM_CONF:-.}")/log"
  details=$(scontrol -o show job "$job" 2>/dev/null)
  # An array task (<array job>_<task>) has a job id of its own, which the daemons' logs use.
  id=$(sed -n '1s/^JobId=\([0-9]*\) .*/\1/p' <<<"$details")
  id=${id:-${job%%_*}}
  # slurmd: "[<id>.batch] error: ...", "Launching batch job <id> ..."; slurmctld: "JobId=<id> ...".
  pattern="\\[$id\\.|job $id( |$)|JobId=$id( |$)"
  {
    echo "--- job $job can never start: $2 ($3)"
    tr ' ' '\n' <<<"$details" | grep -E '^(JobState|Reason|Restarts|BatchHost|NodeList|SchedNodeList|Command)=' |
      tr '\n' ' '
    echo
    for log in "$logs"/slurmctld.log "$logs"/slurmd*.log; do
      [ -e "$log" ] || continue
      lines=$(grep -E -- "$pattern" "$log" | tail -n 6)
      [ -n "$lines" ] && printf '== %s\n%s\n' "$log" "$lines"
    done
  } >&2
  error=$(cat "$logs"/slurmd*.log 2>/dev/null | grep -E -- "$pattern" | grep -E -m 1 'error|fatal' |
            sed 's/^\[[^]]*\] *//')
  fail "Slurm job $job can never start: $2, reason '$3'; ${error:-slurmd logged no error about it (see the logs above)}"
}

# Waits for sbatch job $1 to leave the queue (or, with $2 = any state name, to reach it), at most step_limit; a
# squeue that fails is asked again. A job that can never start fails the test at once (check_jobs_can_start).
wait_for_job() {
  local limit deadline queue
  limit=$(step_limit) || exit 1
  deadline=$((SECONDS + limit))
  while :; do
    if queue=$(squeue -h -j "$1" -o %T 2>/dev/null); then
      [ -z "$queue" ] && [ -z "${2:-}" ] && return 0
      [ -n "${2:-}" ] && [ "$queue" = "$2" ] && return 0
    fi
    check_jobs_can_start "$1"
    [ $SECONDS -ge $deadline ] && fail "job $1 still ${queue:-queued} after $limit s"
    sleep 0.25
  done
}

# Waits until file $1 holds the text $2, at most step_limit. $3, where given, is what writes the file: a Slurm job
# id (a job that can never start fails the test at once) or pid:<pid> of a launcher such as srun (its end before
# the text appeared fails the test at once).
wait_for_text() {
  local limit deadline
  limit=$(step_limit) || exit 1
  deadline=$((SECONDS + limit))
  until [ -e "$1" ] && grep -q -- "$2" "$1"; do
    case ${3:-} in
      pid:*)
        if ! kill -0 "${3#pid:}" 2>/dev/null; then
          grep -q -- "$2" "$1" 2>/dev/null && return 0
          fail "the launcher of $1 (pid ${3#pid:}) ended before '$2' appeared: $(tail -n 5 "$1" 2>/dev/null)"
        fi
        ;;
      ?*) check_jobs_can_start "$3" ;;
    esac
    [ $SECONDS -ge $deadline ] && fail "'$2' did not appear in $1 within $limit s: $(tail -n 3 "$1" 2>/dev/null)"
    sleep 0.25
  done
}

# The folder of the one-node reference runs.
refs=${T5SCALE_MULTINODE_REFERENCES:-}
# The one-node reference of a grid: $1 ranks, tp $2, runs of kind $3 (short, long), shared memory, outside Slurm;
# the run file $refs/<kind><ranks>tp<tp>.h5 (made here when it is not there yet).
reference_run() {
  local ranks=$1 tp=$2 kind=$3 name="$3$1tp$2" limit train
  [ -n "$refs" ] || refs="$work/references"
  [ -e "$refs/$name.h5" ] && return 0
  step="the one-node reference: $kind run, $ranks ranks, tp $tp, shared memory"
  mkdir -p "$refs"
  train_command "$refs" "$kind"
  limit=$(step_limit) || exit 1
  timeout "$limit" "$mpirun" -np "$ranks" --oversubscribe --mca btl vader,self \
    "${train[@]}" --set parallel.tp="$tp" --set run.name="$name" >"$refs/$name.log" 2>&1 ||
    fail "mpirun -np $ranks on this host failed or timed out (exit $?): $(tail -n 5 "$refs/$name.log")"
  check_run "$refs/$name.h5" "$refs/$name.h5" 1 || fail "the one-node run did not complete"
}

# Checks run file $1 against the reference $2: completed, every step once, losses equal bit for bit, `nodes` $3
# and `hosts` $3 different node names (with $3 = 1, left unchecked: a one-node run may be this machine). Prints a line about the run.
check_run() {
  "$python" - "$@" <<'EOF'
import sys
import h5py
import numpy as np

path, ref_path, nodes = sys.argv[1], sys.argv[2], int(sys.argv[3])
text = lambda v: v.decode() if isinstance(v, bytes) else str(v)
problems = []
with h5py.File(path, "r", swmr=True) as f, h5py.File(ref_path, "r", swmr=True) as r:
    a = f.attrs
    if text(a["status"]) != "completed":
        problems.append(f"status is {text(a['status'])!r}, not 'completed'")
    steps, loss, ref_loss = f["steps/step"][:], f["steps/loss"][:], r["steps/loss"][:]
    if not np.array_equal(steps, r["steps/step"][:]):
        problems.append(f"steps {steps.tolist()} differ from the reference's")
    elif not np.array_equal(loss, ref_loss):
        diff = np.abs(loss.astype(np.float64) - ref_loss)
        first = int(np.argmax(diff > 0))
        problems.append(f"losses differ from the one-node run: first at step {steps[first]} "
                        f"({loss[first]!r} vs {ref_loss[first]!r}), largest difference {diff.max():.3g}")
    hosts = text(a["hosts"])
    if nodes > 1:
        if int(a["nodes"]) != nodes:
            problems.append(f"nodes is {int(a['nodes'])}, expected {nodes}")
        names = hosts.split(",")
        if len(set(names)) != nodes or not all(n in {f"t5n{i}" for i in range(1, 5)} for n in names):
            problems.append(f"hosts is {hosts!r}, expected {nodes} different names among t5n1..t5n4")
    print(f"{path.rsplit('/', 1)[-1]}: {len(steps)} steps, final loss {loss[-1]:.6f}, hosts {hosts}, "
          f"median step {np.median(f['steps/step_time_s'][:]) * 1e3:.1f} ms")
for p in problems:
    print(f"{path}: {p}")
sys.exit(1 if problems else 0)
EOF
}

# Whether a launch of t5scale-train that ended with exit code $1 died at start-up and is to be made again, as the
# rendered sbatch scripts decide: by a signal (exit 129 to 192, 128 + signal; srun exits 255 when it could not
# launch the tasks at all, which a second launch does not mend), before its ranks had all started (no exit code file
# $2: t5scale-train's rank 0 writes "started" there once every rank is past MPI_Init), at attempt $3 of 3. Open MPI
# 4.1 can crash a rank inside MPI_Init under srun --mpi=pmix (slurm/README.md); nothing of the run is written by
# then. If so, says it (also into log $4).
relaunch_after_start_crash() {
  [ "$1" -gt 128 ] && [ "$1" -le 192 ] && [ ! -e "$2" ] && [ "$3" -lt 3 ] || return 1
  echo "[test] the launch ended with $1 (signal $(($1 - 128))) before its ranks had all started; launching again" \
       "(attempt $(($3 + 1)) of 3): $(grep -m 1 -i 'signal:' "$4")" | tee -a "$4"
}

# Runs command $3... (t5scale-train under srun) into log $1, made again after a start-up crash as above (exit code
# file $2). Returns the last launch's exit code.
launch_as_the_scripts_do() {
  local log=$1 exit_code_file=$2 attempt=1 code
  shift 2
  : >"$log"
  while :; do
    rm -f "$exit_code_file"
    "$@" >>"$log" 2>&1
    code=$?
    relaunch_after_start_crash "$code" "$exit_code_file" "$attempt" "$log" || return "$code"
    attempt=$((attempt + 1))
  done
}

# The same in the background, for a run the test acts on while it trains: returns once text $3 is in log $1, the
# launcher's pid in $launcher; a launch that ended before that is made again as above, or fails the test.
launch_in_background_as_the_scripts_do() {
  local log=$1 exit_code_file=$2 text=$3 attempt=1 code
  shift 3
  : >"$log"
  while :; do
    rm -f "$exit_code_file"
    "$@" >>"$log" 2>&1 &
    launcher=$!
    while kill -0 "$launcher" 2>/dev/null && ! grep -q -- "$text" "$log"; do sleep 0.25; done
    grep -q -- "$text" "$log" && return 0
    wait "$launcher"
    code=$?
    relaunch_after_start_crash "$code" "$exit_code_file" "$attempt" "$log" ||
      fail "the launcher (pid $launcher) ended with exit $code before '$text' appeared in $log: $(tail -n 5 "$log")"
    attempt=$((attempt + 1))
  done
}

# Runs the cases named (shell functions) at the same time, each in the background with its own log lines and
# failure message (fail names the case's step); fails after all have ended when any failed, naming them.
run_cases_together() {
  local names=("$@") pids=() failed=() i
  for i in "${!names[@]}"; do
    "${names[$i]}" &
    pids[i]=$!
    background_pids+=($!)
  done
  for i in "${!names[@]}"; do
    wait "${pids[$i]}" || failed+=("${names[$i]}")
  done
  background_pids=("${background_pids[@]:0:${#background_pids[@]}-${#names[@]}}")
  step="the cases run together: ${names[*]}"
  [ ${#failed[@]} -eq 0 ] || fail "failed: ${failed[*]} (each one's FAIL line is above)"
}
