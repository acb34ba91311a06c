// Which ranks are still there when a collective times out. A collective that never completes says only that some
// peer stalled or died; on a cluster the usual cause is a node lost with every rank on it. So every rank answers
// liveness pings while it waits (in a collective's wait loop, and while the job is being taken down), and the rank
// whose collective timed out pings every other rank and names those that do not answer within a few seconds, with
// their hosts: "world ranks 2, 3 on t5n2 do not answer". A rank alive but busy outside any wait (hung in a kernel)
// does not answer either; the message says so. Pings travel on their own duplicate of MPI_COMM_WORLD, so they
// never match a job's messages.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

namespace t5scale {

// Collective over MPI_COMM_WORLD, once at start (MpiRuntime): the ping communicator. The hosts the messages name are
// world_hosts() (dist/mpi_runtime.h).
void start_peer_liveness();
void stop_peer_liveness();  // before MPI_Finalize

// Answers the pings that have arrived; returns at once when none has. Cheap enough for every wait loop's poll.
void answer_liveness_pings();

// Pings every other rank and waits up to `limit_s` for the answers (answering pings meanwhile). Returns the ranks
// that did not answer, in order.
std::vector<int> unresponsive_ranks(double limit_s);

// The sentence a timeout message ends with: the ranks that do not answer, grouped by host, or that all answer.
std::string describe_unresponsive(const std::vector<int>& ranks);

}  // namespace t5scale
