#include "dist/peer_liveness.h"

#include <chrono>
#include <thread>

#include "core/check.h"
#include "dist/mpi_runtime.h"

namespace t5scale {
namespace {

MPI_Comm liveness_comm = MPI_COMM_NULL;

constexpr int kPingTag = 11;
constexpr int kPongTag = 12;

bool usable() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized && liveness_comm != MPI_COMM_NULL;
}

}  // namespace

void start_peer_liveness() {
  if (liveness_comm != MPI_COMM_NULL) return;
  if (MPI_Comm_dup(MPI_COMM_WORLD, &liveness_comm) != MPI_SUCCESS) {
    liveness_comm = MPI_COMM_NULL;
    return;  // the timeout messages then say only that a peer stalled or died
  }
  MPI_Comm_set_errhandler(liveness_comm, MPI_ERRORS_RETURN);
}

void stop_peer_liveness() {
  if (usable()) MPI_Comm_free(&liveness_comm);
  liveness_comm = MPI_COMM_NULL;
}

void answer_liveness_pings() {
  if (!usable()) return;
  for (;;) {
    int arrived = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kPingTag, liveness_comm, &arrived, &status) != MPI_SUCCESS || !arrived) return;
    char ping = 0;
    MPI_Recv(&ping, 1, MPI_CHAR, status.MPI_SOURCE, kPingTag, liveness_comm, MPI_STATUS_IGNORE);
    // One byte goes eagerly: the request is freed, never waited for (the pinging rank may be gone by then).
    MPI_Request pong;
    if (MPI_Isend(&ping, 1, MPI_CHAR, status.MPI_SOURCE, kPongTag, liveness_comm, &pong) == MPI_SUCCESS) {
      MPI_Request_free(&pong);
    }
  }
}

std::vector<int> unresponsive_ranks(double limit_s) {
  if (!usable()) return {};
  int rank = 0, size = 1;
  MPI_Comm_rank(liveness_comm, &rank);
  MPI_Comm_size(liveness_comm, &size);
  static const char ping = 1;
  std::vector<char> answered(static_cast<size_t>(size), 0), pongs(static_cast<size_t>(size), 0);
  std::vector<MPI_Request> receives;
  std::vector<int> peers;
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    MPI_Request send;
    // A send to a lost rank never completes: freed, not waited for; MPI_Abort follows soon.
    if (MPI_Isend(&ping, 1, MPI_CHAR, r, kPingTag, liveness_comm, &send) == MPI_SUCCESS) MPI_Request_free(&send);
    receives.emplace_back();
    MPI_Irecv(&pongs[static_cast<size_t>(r)], 1, MPI_CHAR, r, kPongTag, liveness_comm, &receives.back());
    peers.push_back(r);
  }
  const auto start = std::chrono::steady_clock::now();
  size_t outstanding = receives.size();
  while (outstanding > 0 &&
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < limit_s) {
    answer_liveness_pings();  // the others may be asking the same question of this rank
    for (size_t i = 0; i < receives.size(); ++i) {
      if (answered[static_cast<size_t>(peers[i])]) continue;
      int done = 0;
      if (MPI_Test(&receives[i], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done) {
        answered[static_cast<size_t>(peers[i])] = 1;
        --outstanding;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::vector<int> silent;
  for (int r : peers) {
    if (!answered[static_cast<size_t>(r)]) silent.push_back(r);
  }
  // The receives of silent ranks stay posted: cancelling one towards a lost peer can block in some MPI libraries,
  // and the job is about to be aborted.
  return silent;
}

std::string describe_unresponsive(const std::vector<int>& ranks) {
  if (!usable()) return "a peer rank has stalled or died";
  if (ranks.empty()) {
    return "every other rank answers, so none was lost: one is waiting in another collective (ranks that took "
           "different paths) or this collective is slower than parallel.collective_timeout_s";
  }
  // By host, in rank order: a node lost shows as all of its ranks.
  std::vector<std::pair<std::string, std::vector<int>>> by_host;
  for (int r : ranks) {
    const std::string host = host_of_world_rank(r);
    if (by_host.empty() || by_host.back().first != host) by_host.push_back({host, {}});
    by_host.back().second.push_back(r);
  }
  std::vector<std::string> per_host;
  for (const auto& [host, host_ranks] : by_host) {
    per_host.push_back(msg(host_ranks.size() == 1 ? "world rank " : "world ranks ", join(host_ranks, ", "), " on ",
                           host));
  }
  return join(per_host, "; ") + (ranks.size() == 1 ? " does" : " do") +
         " not answer: lost (a node down, a process killed) or hung outside any collective";
}

}  // namespace t5scale
