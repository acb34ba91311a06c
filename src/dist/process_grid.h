// The layout of ranks: world = TP x DP. TP groups are consecutive ranks (one node's NVLink domain), DP groups are
// strided; the formula, written once:  world_rank = tp_rank + dp_rank * tp.
// The grid owns the communicators every layer and the training step receive, and, on the NCCL backend, the one
// GPU this rank drives: chosen once from the rank's place on its node and made current before any CUDA
// allocation, so that the model, the grid's streams and the communicators all live on it. There is no global
// parallel state.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "config/model_config.h"
#include "config/run_config.h"
#include "dist/communicator.h"

namespace t5scale {

enum class CommBackend { kMpi, kNccl };  // MPI carries CPU tensors, NCCL CUDA tensors

struct GridOptions {
  int tp = 1;
  CommBackend backend = CommBackend::kMpi;
  double collective_timeout_s = 600.0;  // a collective pending longer than this aborts the job
  int cuda_device = -1;                 // NCCL: the GPU this rank drives (-1: the node-local choice, see below)
  MPI_Comm ranks = MPI_COMM_WORLD;      // the processes the grid is made of (tests form grids on fewer)
};

class ProcessGrid {
 public:
  // Every reason a grid cannot work for this model, each naming the numbers (empty when it can).
  static std::vector<std::string> validate(int world_size, int tp, const ModelConfig& model);
  // Splits options.ranks into TP and DP groups. Call validate() first; this throws on the first problem, and when
  // a TP group's ranks sit on more than one host (config/placement.h).
  // NCCL: makes options.cuda_device (or, when it is -1, select_node_local_cuda_device()) this thread's current
  // device before the communicators are built on it.
  static ProcessGrid create(const GridOptions& options);
  // One process, no MPI: both groups have one rank.
  static ProcessGrid solo();

  int world_size() const { return tp_size * dp_size; }
  int world_rank() const { return tp_rank + dp_rank * tp_size; }
  // Where this rank's tensors live: its GPU on the NCCL backend, the CPU on the MPI backend.
  torch::Device device() const;

  int tp_size = 1, dp_size = 1;
  int tp_rank = 0, dp_rank = 0;
  int cuda_device = -1;   // the GPU this rank drives; -1 on the CPU
  CommunicatorPtr tp;     // ranks with the same dp_rank
  CommunicatorPtr dp;     // ranks with the same tp_rank
  CommunicatorPtr world;  // every rank (for agreeing on overflow, timing, ...)
};

// The ranks of MPI_COMM_WORLD that share this rank's node (MPI_Comm_split_type SHARED), for the time it lives.
class NodeGroup {
 public:
  NodeGroup();
  ~NodeGroup();
  NodeGroup(const NodeGroup&) = delete;
  NodeGroup& operator=(const NodeGroup&) = delete;
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  // Every node-local rank's `mine`, in local rank order.
  std::vector<std::string> all_gather(const std::string& mine) const;

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int local_rank_ = 0, local_size_ = 1;
};

// Every rank's host name (MPI_Get_processor_name) in `comm`, in rank order, from world_hosts() (the one gather).
std::vector<std::string> hosts_of_ranks(MPI_Comm comm);

// The CUDA device index of the rank with this node-local rank: the local rank itself, one rank per visible GPU.
// With one visible device and several local ranks the device is 0 (Slurm's --gpus-per-task gives each rank its own
// GPU, seen as device 0); check_one_rank_per_gpu() then tells that apart from ranks sharing a GPU. Throws, with the
// numbers and CUDA_VISIBLE_DEVICES, when there is no device or fewer than the node's ranks (and more than one).
int cuda_device_index(int local_rank, int local_size, int device_count);

// Throws, naming both local ranks and the GPU, when two node-local ranks drive the same GPU (given by PCI bus id,
// in local rank order): NCCL refuses two ranks on one device, and they would share its memory.
void check_one_rank_per_gpu(const std::vector<std::string>& pci_bus_id_of_local_rank);

// Chooses this rank's GPU (cuda_device_index of its node-local rank, checked with check_one_rank_per_gpu over the
// node) and makes it the current CUDA device. Collective over MPI_COMM_WORLD; call it before any CUDA allocation.
int select_node_local_cuda_device();

// Signs that this node has NVIDIA GPUs, whatever LibTorch sees: "/dev/nvidia0 exists", "libnvidia-ml.so.1 loads",
// "CUDA_VISIBLE_DEVICES=0,1" (set by Slurm and by hand for GPU jobs), joined by "; "; "" when there are none.
std::string gpu_node_evidence();

// The backend `requested` (parallel.backend) resolves to: nccl where LibTorch can use CUDA and mpi on a node
// without GPUs for auto. Throws, naming parallel.backend, for nccl without CUDA and for auto on a node that has
// GPUs (gpu_node_evidence() not empty) LibTorch cannot use: a silent fall-back would train on the CPU.
CommBackend resolve_backend(ParallelSettings::Backend requested, bool cuda_usable, const std::string& gpu_node_evidence,
                            const std::string& cuda_unusable_reason);

}  // namespace t5scale
