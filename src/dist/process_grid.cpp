#include "dist/process_grid.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <regex>

#include "config/placement.h"
#include "core/check.h"
#include "dist/cuda_backend.h"
#include "dist/mpi_communicator.h"
#include "dist/mpi_runtime.h"

namespace t5scale {

namespace {

// CUDA_VISIBLE_DEVICES as set, or "(unset)", for messages.
std::string visible_devices_setting() {
  const char* value = std::getenv("CUDA_VISIBLE_DEVICES");
  return value == nullptr ? "(unset)" : value;
}

}  // namespace

std::vector<std::string> ProcessGrid::validate(int world_size, int tp, const ModelConfig& model) {
  std::vector<std::string> errors;
  if (tp < 1) {
    errors.push_back(msg("tp: must be at least 1, got ", tp));
    return errors;
  }
  if (world_size % tp != 0) {
    errors.push_back(msg("world size ", world_size, " is not divisible by tp ", tp, " (world = tp x dp)"));
  }
  for (const auto& e : check_tp_divides(model, tp)) errors.push_back(e.text());  // the one check of the shape
  return errors;
}

ProcessGrid ProcessGrid::solo() {
  ProcessGrid grid;
  grid.tp = std::make_shared<SoloCommunicator>("tp");
  grid.dp = std::make_shared<SoloCommunicator>("dp");
  grid.world = std::make_shared<SoloCommunicator>("world");
  return grid;
}

torch::Device ProcessGrid::device() const {
  return cuda_device >= 0 ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(cuda_device))
                          : torch::Device(torch::kCPU);
}

ProcessGrid ProcessGrid::create(const GridOptions& options) {
  int world_rank = 0, world_size = 1;
  MPI_CHECK(MPI_Comm_rank(options.ranks, &world_rank));
  MPI_CHECK(MPI_Comm_size(options.ranks, &world_size));
  T5S_CHECK(options.tp >= 1 && world_size % options.tp == 0, "world size ", world_size, " is not divisible by tp ",
            options.tp, " (world = tp x dp)");
  ProcessGrid grid;
  grid.tp_size = options.tp;
  grid.dp_size = world_size / options.tp;
  grid.tp_rank = world_rank % options.tp;
  grid.dp_rank = world_rank / options.tp;

  // Colour = the group, key = the rank inside it.
  MPI_Comm tp_comm, dp_comm, world_comm;
  MPI_CHECK(MPI_Comm_split(options.ranks, grid.dp_rank, grid.tp_rank, &tp_comm));
  MPI_CHECK(MPI_Comm_split(options.ranks, grid.tp_rank, grid.dp_rank, &dp_comm));
  MPI_CHECK(MPI_Comm_dup(options.ranks, &world_comm));
  // Checked again here, against the hosts the launch gave (the planner checked the layout it expected).
  if (const auto spanning = tp_group_spanning_hosts(hosts_of_ranks(options.ranks), options.tp)) {
    throw Error(msg("parallel.tp ", options.tp, ": ", *spanning, "; a TP group must stay inside a node (its "
                    "all-reduces need the node's NVLink): start a multiple of tp ranks per node, filled node by "
                    "node (srun --ntasks-per-node, mpirun --map-by slot), or make parallel.tp divide the ranks "
                    "per node"));
  }
  if (options.backend == CommBackend::kMpi) {
    grid.tp = std::make_shared<MpiCommunicator>(tp_comm, "tp", options.collective_timeout_s);
    grid.dp = std::make_shared<MpiCommunicator>(dp_comm, "dp", options.collective_timeout_s);
    grid.world = std::make_shared<MpiCommunicator>(world_comm, "world", options.collective_timeout_s);
  } else {
    const CudaBackend& cuda = required_cuda_backend("the NCCL backend");
    if (options.cuda_device >= 0) {
      cuda.set_device(options.cuda_device);
      grid.cuda_device = options.cuda_device;
    } else {
      grid.cuda_device = select_node_local_cuda_device();
    }
    const int device = grid.cuda_device;
    grid.tp = cuda.nccl_communicator(tp_comm, "tp", device, options.collective_timeout_s);
    grid.dp = cuda.nccl_communicator(dp_comm, "dp", device, options.collective_timeout_s);
    grid.world = cuda.nccl_communicator(world_comm, "world", device, options.collective_timeout_s);
  }
  T5S_CHECK(grid.world_rank() == world_rank, "rank layout mismatch: ", grid.world_rank(), " vs ", world_rank);
  return grid;
}

NodeGroup::NodeGroup() {
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &comm_));
  MPI_CHECK(MPI_Comm_rank(comm_, &local_rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &local_size_));
}

NodeGroup::~NodeGroup() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

std::vector<std::string> NodeGroup::all_gather(const std::string& mine) const { return all_gather_strings(comm_, mine); }

std::vector<std::string> hosts_of_ranks(MPI_Comm comm) {
  // The ranks of `comm` as world ranks, looked up in the one gather of the hosts.
  MPI_Group group, world_group;
  MPI_CHECK(MPI_Comm_group(comm, &group));
  MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world_group));
  int size = 0;
  MPI_CHECK(MPI_Group_size(group, &size));
  std::vector<int> ranks(static_cast<size_t>(size)), world_ranks(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) ranks[static_cast<size_t>(r)] = r;
  MPI_CHECK(MPI_Group_translate_ranks(group, size, ranks.data(), world_group, world_ranks.data()));
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  const std::vector<std::string>& hosts = world_hosts();
  std::vector<std::string> out;
  for (int w : world_ranks) out.push_back(hosts.at(static_cast<size_t>(w)));
  return out;
}

int cuda_device_index(int local_rank, int local_size, int device_count) {
  T5S_CHECK(device_count > 0, "the NCCL backend needs a CUDA device, and none is visible to this rank "
            "(CUDA_VISIBLE_DEVICES=", visible_devices_setting(), ")");
  T5S_CHECK(local_rank >= 0 && local_rank < local_size, "node-local rank ", local_rank, " is outside 0..",
            local_size - 1);
  if (device_count >= local_size) return local_rank;
  T5S_CHECK(device_count == 1, "this node runs ", local_size, " ranks but only ", device_count,
            " CUDA devices are visible (CUDA_VISIBLE_DEVICES=", visible_devices_setting(),
            "): each rank needs a GPU of its own; start at most ", device_count, " ranks per node");
  return 0;
}

void check_one_rank_per_gpu(const std::vector<std::string>& pci_bus_id_of_local_rank) {
  const auto& ids = pci_bus_id_of_local_rank;
  for (size_t a = 0; a < ids.size(); ++a) {
    for (size_t b = a + 1; b < ids.size(); ++b) {
      T5S_CHECK(ids[a] != ids[b], "node-local ranks ", a, " and ", b, " would both drive the GPU at PCI bus id ",
                ids[a], " (", ids.size(), " ranks on this node, CUDA_VISIBLE_DEVICES=", visible_devices_setting(),
                "): each rank needs a GPU of its own");
    }
  }
}

int select_node_local_cuda_device() {
  const CudaBackend& cuda = required_cuda_backend("a CUDA device");
  const NodeGroup node;
  const int device = cuda_device_index(node.local_rank(), node.local_size(), torch::cuda::device_count());
  // The bus id is a property of the device: reading it creates no CUDA context, so no rank touches a GPU that is
  // not its own before the check has passed.
  check_one_rank_per_gpu(node.all_gather(cuda.device_bus_id(device)));
  cuda.set_device(device);
  return device;
}

std::string gpu_node_evidence() {
  std::vector<std::string> signs;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/dev", error)) {
    if (std::regex_match(entry.path().filename().string(), std::regex("nvidia[0-9]+"))) {
      signs.push_back(entry.path().string() + " exists");
      break;
    }
  }
  // The driver installs NVML; a CUDA toolkit alone has only a stub under another name.
  if (void* nvml = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL)) {
    dlclose(nvml);
    signs.push_back("libnvidia-ml.so.1 loads");
  }
  const std::string visible = visible_devices_setting();
  // Empty, "NoDevFiles" (Slurm without GPUs) and "-1" hide every device: no sign of a GPU.
  if (visible != "(unset)" && !visible.empty() && visible != "NoDevFiles" && visible.rfind("-1", 0) != 0) {
    signs.push_back("CUDA_VISIBLE_DEVICES=" + visible);
  }
  return join(signs, "; ");
}

CommBackend resolve_backend(ParallelSettings::Backend requested, bool cuda_usable, const std::string& gpu_node_evidence,
                            const std::string& cuda_unusable_reason) {
  switch (requested) {
    case ParallelSettings::Backend::kMpi: return CommBackend::kMpi;
    case ParallelSettings::Backend::kNccl:
      T5S_CHECK(cuda_usable, "parallel.backend: nccl needs a GPU that LibTorch can use, and there is none on this "
                "node (", cuda_unusable_reason, ")");
      return CommBackend::kNccl;
    case ParallelSettings::Backend::kAuto: break;
  }
  if (cuda_usable) return CommBackend::kNccl;
  T5S_CHECK(gpu_node_evidence.empty(), "parallel.backend: auto: this node has NVIDIA GPUs (", gpu_node_evidence,
            ") but LibTorch cannot use them (", cuda_unusable_reason, "), and auto does not fall back to the CPU "
            "there. Repair the CUDA setup (a driver that supports this LibTorch's CUDA version, a CUDA build of "
            "LibTorch), or set parallel.backend: mpi (--set parallel.backend=mpi) to train on the CPU on purpose");
  return CommBackend::kMpi;
}

}  // namespace t5scale
