#include "dist/mpi_runtime.h"

#include <cstdio>
#include <exception>
#include <memory>

namespace t5scale {

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int provided = MPI_THREAD_SINGLE;
  MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
  // Gradient hooks may issue collectives from autograd's worker threads, one at a time.
  T5S_CHECK(provided >= MPI_THREAD_SERIALIZED, "the MPI library offers thread level ", provided,
            "; t5scale needs at least MPI_THREAD_SERIALIZED");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size_));
}

MpiRuntime::~MpiRuntime() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

int world_rank() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return 0;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

void abort_job(const std::string& program, const std::string& message, int exit_code) {
  std::fprintf(stderr, "[rank %d] %s: error: %s\n", world_rank(), program.c_str(), message.c_str());
  std::fflush(stderr);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

int run_mpi_program(int argc, char** argv, const std::string& program, const std::function<int(int, char**)>& body) {
  // The handler must run while MPI is still initialised: unwinding through the runtime's destructor would call
  // MPI_Finalize, which waits for the other ranks, and the abort would never come.
  std::unique_ptr<MpiRuntime> mpi;
  int code = 0;
  try {
    mpi = std::make_unique<MpiRuntime>(&argc, &argv);
    code = body(argc, argv);  // the same on every rank: an agreed ending (e.g. preempted), not a failure
  } catch (const std::exception& e) {
    abort_job(program, e.what());
  }
  mpi.reset();
  return code;
}

}  // namespace t5scale
