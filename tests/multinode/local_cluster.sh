#!/bin/bash
# The local 4-node Slurm cluster that the multinode and slurm tests share (ctest's fixtures local_cluster and
# multinode_references), started once, used by one test at a time and always removed:
#   tests/multinode/local_cluster.sh start|references|stop SOURCE_DIR BIN_DIR PYTHON
# start       checks the prerequisites (root, ip netns, unshare, h5py, slurm-wlm and munge) and starts the cluster
#             (slurm/local/start.sh --nodes 4, 4 CPUs per node) in T5SCALE_LOCAL_CLUSTER, after stopping one a
#             killed run may have left there (multinode.cluster_start).
# references  runs the one-node references of every grid the tests compare with (shared memory, outside Slurm)
#             into T5SCALE_MULTINODE_REFERENCES, made afresh (multinode.references).
# stop        stops the cluster and checks that no namespace, veth or bridge of it is left (multinode.cluster_stop,
#             which ctest runs after the tests that use the cluster, also when one of them failed).
set -uo pipefail

action=${1:-}
case $action in
  start | references | stop) shift ;;
  *) echo "usage: $0 start|references|stop SOURCE_DIR BIN_DIR PYTHON" >&2; exit 2 ;;
esac
test_name=local-cluster-$action
# shellcheck source=tests/multinode/common.sh
. "$(dirname "$0")/common.sh" "$@"

case $action in
  start)
    [ -n "${T5SCALE_LOCAL_CLUSTER:-}" ] || fail "T5SCALE_LOCAL_CLUSTER must name the cluster's state folder"
    check_multinode_prerequisites
    step="removing a cluster left in $T5SCALE_LOCAL_CLUSTER"
    if [ -e "$T5SCALE_LOCAL_CLUSTER" ]; then
      "$src/slurm/local/stop.sh" "$T5SCALE_LOCAL_CLUSTER" >/dev/null 2>&1
      [ -e "$T5SCALE_LOCAL_CLUSTER/network" ] &&
        fail "stop.sh could not remove what the cluster left: $(cat "$T5SCALE_LOCAL_CLUSTER/network")"
      rm -rf "$T5SCALE_LOCAL_CLUSTER"
    fi
    start_cluster "$T5SCALE_LOCAL_CLUSTER"
    ;;
  references)
    [ -n "$refs" ] || fail "T5SCALE_MULTINODE_REFERENCES must name the folder of the references"
    check_multinode_prerequisites
    # Afresh: a run of the long kind resumes from a checkpoint of an earlier one, and the programs may have changed.
    rm -rf "$refs"
    for grid in "1 1" "2 1" "4 1" "2 2" "4 2"; do
      # shellcheck disable=SC2086  # ranks and tp
      reference_run $grid short
    done
    reference_run 2 1 long
    ;;
  stop)
    [ -n "${T5SCALE_LOCAL_CLUSTER:-}" ] || fail "T5SCALE_LOCAL_CLUSTER must name the cluster's state folder"
    if [ -e "$T5SCALE_LOCAL_CLUSTER" ]; then
      stop_cluster "$T5SCALE_LOCAL_CLUSTER"
      rm -rf "$T5SCALE_LOCAL_CLUSTER"
    fi
    ;;
esac
status=0
echo "PASS: $action ($((SECONDS - test_start)) s)"
