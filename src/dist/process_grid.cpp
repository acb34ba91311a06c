#include "dist/process_grid.h"

#include "dist/mpi_communicator.h"
#include "dist/mpi_runtime.h"
#ifdef T5SCALE_WITH_NCCL
#include "dist/nccl_communicator.h"
#endif

namespace t5scale {

std::vector<std::string> ProcessGrid::validate(int world_size, int tp, const ModelConfig& model) {
  std::vector<std::string> errors;
  if (tp < 1) {
    errors.push_back(msg("tp: must be at least 1, got ", tp));
    return errors;
  }
  if (world_size % tp != 0) {
    errors.push_back(msg("world size ", world_size, " is not divisible by tp ", tp, " (world = tp x dp)"));
  }
  if (model.num_heads % tp != 0) errors.push_back(msg("num_heads ", model.num_heads, " is not divisible by tp ", tp));
  if (model.d_ff % tp != 0) errors.push_back(msg("d_ff ", model.d_ff, " is not divisible by tp ", tp));
  if (model.vocab_size % tp != 0) {
    errors.push_back(msg("vocab_size ", model.vocab_size, " is not divisible by tp ", tp));
  }
  return errors;
}

ProcessGrid ProcessGrid::solo() {
  ProcessGrid grid;
  grid.tp = std::make_shared<SoloCommunicator>("tp");
  grid.dp = std::make_shared<SoloCommunicator>("dp");
  grid.world = std::make_shared<SoloCommunicator>("world");
  return grid;
}

ProcessGrid ProcessGrid::create(const GridOptions& options) {
  int world_rank = 0, world_size = 1;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size));
  T5S_CHECK(options.tp >= 1 && world_size % options.tp == 0, "world size ", world_size, " is not divisible by tp ",
            options.tp, " (world = tp x dp)");
  ProcessGrid grid;
  grid.tp_size = options.tp;
  grid.dp_size = world_size / options.tp;
  grid.tp_rank = world_rank % options.tp;
  grid.dp_rank = world_rank / options.tp;

  // Colour = the group, key = the rank inside it.
  MPI_Comm tp_comm, dp_comm, world_comm;
  MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, grid.dp_rank, grid.tp_rank, &tp_comm));
  MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, grid.tp_rank, grid.dp_rank, &dp_comm));
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &world_comm));
  if (options.backend == CommBackend::kMpi) {
    grid.tp = std::make_shared<MpiCommunicator>(tp_comm, "tp", options.collective_timeout_s);
    grid.dp = std::make_shared<MpiCommunicator>(dp_comm, "dp", options.collective_timeout_s);
    grid.world = std::make_shared<MpiCommunicator>(world_comm, "world", options.collective_timeout_s);
  } else {
#ifdef T5SCALE_WITH_NCCL
    const int device = options.cuda_device;
    grid.tp = std::make_shared<NcclCommunicator>(tp_comm, "tp", device, options.collective_timeout_s);
    grid.dp = std::make_shared<NcclCommunicator>(dp_comm, "dp", device, options.collective_timeout_s);
    grid.world = std::make_shared<NcclCommunicator>(world_comm, "world", device, options.collective_timeout_s);
#else
    throw Error("the NCCL backend was requested, but this build's LibTorch has no CUDA");
#endif
  }
  T5S_CHECK(grid.world_rank() == world_rank, "rank layout mismatch: ", grid.world_rank(), " vs ", world_rank);
  return grid;
}

}  // namespace t5scale
