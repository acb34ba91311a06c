// MPI for the whole process: initialisation, the job-wide abort, and the check macro for MPI calls.
// A fatal error on any rank ends every rank (MPI_Abort, or MPI_Finalize where every rank fails), never a hang.
#pragma once

#include <mpi.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "core/check.h"

namespace t5scale {

class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv);  // MPI_Init_thread; requires at least MPI_THREAD_SERIALIZED
  ~MpiRuntime();                        // MPI_Finalize
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;
  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }

 private:
  int world_rank_ = 0, world_size_ = 1;
};

int world_rank();  // MPI_COMM_WORLD rank, or 0 before MPI is initialised
// This process's rank in `comm`, and the number of ranks of `comm`.
int rank_in(MPI_Comm comm);
int size_of(MPI_Comm comm);

// MPI_Barrier over `comm` that waits asleep, polling every `poll`: Open MPI's blocking calls poll (and yield) the
// core until the others arrive, so a rank that waits while others of its machine work (a rank outside a smaller
// grid, every rank but one timing alone) would take a core from them for as long as they work.
void sleeping_barrier(MPI_Comm comm, std::chrono::microseconds poll = std::chrono::microseconds(200));

// Every rank's string of `comm`, in rank order (collective).
std::vector<std::string> all_gather_strings(MPI_Comm comm, const std::string& mine);

// The host (MPI processor name) of every world rank, gathered once: at MpiRuntime's start, or collectively on the
// first call where no MpiRuntime started. The placement check, the run file and the timeout messages all read it.
const std::vector<std::string>& world_hosts();
// A world rank's host as gathered, "?" before the gather: never collective, so failure paths may call it.
std::string host_of_world_rank(int rank);

// Ends the whole job after running the failure recorder (if one is set) and printing
// "[rank R] program: error: message" to stderr once: rank 0 prints and tells the other ranks its message; another
// rank waits a few seconds for rank 0's and prints its own only when rank 0's differs or does not come, so that an
// error every rank meets (a bad config) is printed once, not once per rank. When every rank is failing, each ends
// with MPI_Finalize and `exit_code`, so the launcher adds nothing of its own to the message (at most mpirun's note
// of a non-zero exit); otherwise rank 0 (or, should it not answer, this rank) calls MPI_Abort on MPI_COMM_WORLD.
[[noreturn]] void abort_job(const std::string& program, const std::string& message, int exit_code = 2);

// What this rank does with the message before abort_job takes the job down (the training job records the
// failure in its run file). It must not run a collective: the other ranks may be anywhere. One per process
// (MPI is); an empty function removes it.
void set_failure_recorder(std::function<void(const std::string& message)> recorder);

// Runs `body` under MPI; any exception on any rank goes to abort_job with its message, so a failure on one rank
// never leaves the others waiting in a collective. Returns body's exit code, which every rank must agree on (the
// training job's preempted and diverged codes are decided collectively).
int run_mpi_program(int argc, char** argv, const std::string& program, const std::function<int(int, char**)>& body);

}  // namespace t5scale

// MPI_CHECK(MPI_Allreduce(...)) -> "[rank 3] MPI_Allreduce(...) failed: <MPI's error string>"
#define MPI_CHECK(expression)                                                                                \
  do {                                                                                                       \
    const int mpi_check_status_ = (expression);                                                              \
    if (mpi_check_status_ != MPI_SUCCESS) {                                                                  \
      char mpi_check_text_[MPI_MAX_ERROR_STRING];                                                            \
      int mpi_check_length_ = 0;                                                                             \
      MPI_Error_string(mpi_check_status_, mpi_check_text_, &mpi_check_length_);                              \
      throw ::t5scale::Error(::t5scale::msg("[rank ", ::t5scale::world_rank(), "] ", #expression, " failed: ", \
                                            std::string(mpi_check_text_, mpi_check_length_), " at ", __FILE__,  \
                                            ":", __LINE__));                                                 \
    }                                                                                                        \
  } while (0)
