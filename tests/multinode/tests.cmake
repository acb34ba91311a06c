# Several nodes for real: the local Slurm cluster with 2 and 4 nodes, each in its own network namespace on a
# bridge (slurm/local/start.sh --nodes N), and t5scale-train across them over TCP (label multinode; needs root,
# ip netns, slurm-wlm and munge).

# Starts a 2-node and then a 4-node cluster in a temporary folder, runs t5scale-train one rank per node with
# `srun --mpi=pmix` and with mpirun inside an sbatch job, checks that the losses equal the same grid on one node
# over shared memory and that the run files name every node; on 4 nodes a study across 1, 2 and 4 nodes (and tp 2
# inside a node) submitted, tracked and analysed, with a fake energy meter per node whose readings each run sums;
# it always removes the cluster and its namespaces.
# Needs the target t5scale-train built. Fails (never skips) where the nodes cannot be made.
add_test(NAME multinode.train_across_local_nodes
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/run_multinode.sh ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}/bin
                 ${T5SCALE_PYTHON})
set_tests_properties(multinode.train_across_local_nodes PROPERTIES LABELS multinode TIMEOUT 240
                     RESOURCE_LOCK local_slurm PROCESSORS 2)

# On a 2-node cluster: a job preempted with USR1 across the nodes (the study's sbatch script) checkpoints once,
# requeues and resumes; a node killed mid-run ends the job naming the lost rank and host, and the job resubmitted
# on the node left resumes; both loss for loss equal to an uninterrupted run. Needs t5scale-train and
# t5scale-study built.
add_test(NAME multinode.node_loss_and_preemption
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/run_node_failures.sh ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}/bin
                 ${T5SCALE_PYTHON})
set_tests_properties(multinode.node_loss_and_preemption PROPERTIES LABELS multinode TIMEOUT 240
                     RESOURCE_LOCK local_slurm PROCESSORS 2)
