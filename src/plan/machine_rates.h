// What a machine does per second, as the step-time model (plan/step_time_model.h) needs it: matrix products by
// shape class, memory bandwidth, the host's time per dispatched operator, and each link's latency and bandwidth for
// collectives. Two origins: `t5scale-bench --calibrate` measures the machine at hand into a rates file (JSON, schema
// t5scale-machine-rates/1), and figures for H100, H200, A100 and V100 with NVLink and InfiniBand ship as defaults for
// planning machines that are not at hand: the kernel classes t5scale's step reached on an H200 (measured there),
// as shares of the datasheet figures that scale them to the other GPUs (scaled, and named so).
//
//   MachineRates rates = read_machine_rates("rates.json");           // or published_machine_rates("A100-80GB")
//   double s = rates.matmul_seconds(m, n, k);                        // one product, at its shape class's rate
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace t5scale {

// A matrix product's rate, by its smallest dimension: products whose smallest of m, n, k is min_dim run at
// flops_per_s (between two entries the rate is interpolated in log(min_dim); outside, the nearest entry's).
struct MatmulRate {
  int64_t min_dim = 0;
  double flops_per_s = 0.0;
};

// One link's collectives under an alpha-beta model: a collective among p ranks of n bytes takes
//   latency_s x 2 ceil(log2 p)  +  f x (p - 1) / p x n / bandwidth_bytes_per_s
// with f = 2 for an all-reduce and 1 for a reduce-scatter or all-gather (a ring's traffic; a tree's latency).
struct LinkRates {
  std::string scope = "intra_node";  // "intra_node" (TP; DP inside a node) or "inter_node" (a group across nodes)
  int64_t ranks_per_node = 0;        // measured with this many busy ranks per node (0: any)
  int64_t group_size = 0;            // measured on groups of this size (0: any)
  double latency_s = 0.0;            // per step of the tree
  double bandwidth_bytes_per_s = 0.0;  // each direction: per rank, or per node when shared_by_node
  bool shared_by_node = false;         // the node's NICs: the ranks of a node crossing at once share the bandwidth
  std::string source;
};

// CPU: how much slower each rank's step runs while `ranks_per_host` ranks compute at once on one machine than the
// model gives for one rank with its share of the cores: the slowest of them, which a synchronous step waits for (a
// core whose sibling another machine's work keeps busy, the all-core clock, the shared memory bandwidth).
struct BusyHostSlowdown {
  int64_t ranks_per_host = 2;
  double slowdown = 1.0;
  std::string source;
};

// A fused attention kernel's rate (SDPA's on a GPU): the FLOPs of the tiles it computes, queries and keys each
// padded up to the kernel's tile, per second; forward (4 q k d per row and head: scores and weighted values) and
// backward (10 q k d: the scores made again and four products) apart. Padding matters at T5's lengths: 147 keys
// fill two tiles of 128. Of a kernel's entries the one for the smallest max_head_dim at or above d_kv serves.
struct FusedAttentionRate {
  std::string kernel;        // "memory_efficient" (a bias with its gradient: T5's self-attention) or "flash" (none)
  int64_t max_head_dim = 0;  // d_kv this entry serves up to
  int64_t forward_query_tile = 1, forward_key_tile = 1;
  int64_t backward_query_tile = 1, backward_key_tile = 1;
  double forward_flops_per_s = 0.0;
  double backward_flops_per_s = 0.0;
  std::string source;

  double forward_seconds(double batched_heads, double queries, double keys, double head_dim) const;
  double backward_seconds(double batched_heads, double queries, double keys, double head_dim) const;
};

struct MachineRates {
  std::string name;    // "A100-80GB (published)", "calibrated on host x"
  std::string source;  // where the figures come from
  std::vector<MatmulRate> matmul;      // in the compute dtype, ascending min_dim
  double memory_bandwidth_bytes_per_s = 0.0;  // elementwise kernels and the optimizer: bytes read + written
  // The optimizer's one fused pass over the parameters' streams, where it was measured apart (0: the memory bandwidth).
  double optimizer_bandwidth_bytes_per_s = 0.0;
  // The explicit attention path's head-layout copies (a strided read, 0: the memory bandwidth).
  double strided_copy_bandwidth_bytes_per_s = 0.0;
  // The share of its shape class's rate a product reaches when a dimension is not a multiple of 8 elements (cuBLAS
  // falls back to its unaligned kernels; 1: no difference, as on a CPU).
  double unaligned_matmul_efficiency = 1.0;
  // A GPU's fused attention kernels (empty: the attention core is timed as its two products).
  std::vector<FusedAttentionRate> fused_attention;
  double op_latency_s = 0.0;           // host time per dispatched operator (LibTorch's dispatch, a kernel launch)
  // A GPU's idle time per dispatched operator while the host keeps ahead: the gaps between the step's kernels and
  // their tails, which no kernel class holds (0: none counted, as on a CPU, whose rates hold them).
  double device_idle_per_operator_s = 0.0;
  // The share of the matmul and bandwidth rates above that a training step's own kernels reach (their shapes,
  // transposed operands, cache misses; not the optimizer's one fused pass): 1 for published figures, whose
  // efficiencies are in the rates; --calibrate measures it on the tiny T5's step (machine_calibration.h).
  double compute_efficiency = 1.0;
  bool asynchronous_device = false;    // a GPU: the host queues ahead, so a phase takes max(device, host) and DP
                                       // reductions overlap backward; a CPU: host and compute add, no overlap
  int64_t cores_per_node = 0;          // CPU: ranks beyond the cores share them (0: one device per rank)
  int64_t threads_per_rank = 1;        // CPU: the threads each rank's compute was measured with
  // CPU: nodes that are one machine's namespaces and share its cores_per_node (a local test cluster, where
  // --calibrate across nodes finds one boot id); 1 on a real cluster.
  int64_t nodes_per_host = 1;
  std::vector<BusyHostSlowdown> busy_host;  // CPU, by ranks per host: --calibrate under mpirun measures them
  double power_w_per_device = 0.0;     // for energy: the device's power under training load (0: unknown)
  // The datasheet's dense peak in the half-precision compute dtype (bf16; V100 fp16), which a planned MFU is taken
  // against as t5scale-bench's is (0: unknown, as for a CPU).
  double peak_flops_per_device = 0.0;
  std::vector<LinkRates> links;
  // A GPU node's host, for host-resident optimizer state (parallel.offload_optimizer): its memory's bandwidth (the
  // update's bytes at the share a streaming kernel reaches) and size, its cores, and each device's link to it, each
  // direction. 0: unknown (on a CPU machine the host is the device: memory_bandwidth_bytes_per_s serves).
  double host_memory_bandwidth_bytes_per_s = 0.0;  // per node
  double host_memory_bytes_per_node = 0.0;
  int64_t host_cores_per_node = 0;
  double host_link_bytes_per_s = 0.0;  // per device (PCIe), each direction

  // Seconds of one (m x k) @ (k x n) product at its shape class's rate (2 m n k FLOPs).
  double matmul_seconds(double m, double n, double k) const;
  double matmul_rate(double min_dim) const;
  // The entry of `kernel` serving heads of head_dim; nullptr when there is none.
  const FusedAttentionRate* fused_attention_rate(const std::string& kernel, int64_t head_dim) const;
  double optimizer_bandwidth() const {
    return optimizer_bandwidth_bytes_per_s > 0 ? optimizer_bandwidth_bytes_per_s : memory_bandwidth_bytes_per_s;
  }
  double strided_copy_bandwidth() const {
    return strided_copy_bandwidth_bytes_per_s > 0 ? strided_copy_bandwidth_bytes_per_s : memory_bandwidth_bytes_per_s;
  }
  // The link entry for a collective: the scope's entry measured with the nearest ranks per node, then the nearest
  // group size. Throws an Error naming the scope when the rates have none.
  const LinkRates& link(const std::string& scope, int64_t ranks_per_node, int64_t group_size) const;
  bool has_link(const std::string& scope) const;
  // CPU: ranks per core with `ranks_per_host` ranks on one machine (at least 1; 1 without cores_per_node).
  double ranks_per_core(int64_t ranks_per_host) const;
  // The busy-host slowdown measured with the nearest number of ranks per host (in log2); 1 for one rank, or none.
  double busy_host_slowdown(int64_t ranks_per_host) const;
  // Every problem with the figures ("matmul: ...", "links[1].bandwidth_bytes_per_s: ..."); empty when usable.
  std::vector<std::string> problems() const;
};

// Seconds of a collective of `bytes` among `group_size` ranks on `link`; kind: "all_reduce", "reduce_scatter",
// "all_gather". 0 for a group of one.
double collective_seconds(const LinkRates& link, const std::string& kind, double bytes, int64_t group_size);

// A GPU model's name as the tables compare it: upper case, '-' for blanks and '_', without "NVIDIA-"
// ("nvidia a100_80gb" -> "A100-80GB").
std::string normalized_gpu_name(const std::string& name);

// Published figures for a GPU model (names as slurm.gpu takes them: "H100", "H100-SXM", "A100-80GB", "V100",
// ...): the datasheet's dense peak and HBM bandwidth at the efficiencies large products and bandwidth-bound kernels
// reach, NVLink inside the node and `interconnect` between nodes. std::nullopt for a GPU without figures.
std::optional<MachineRates> published_machine_rates(const std::string& gpu, const std::string& interconnect = "");
// The interconnects published_machine_rates knows ("ib-hdr-8x", "ib-ndr-8x", "ib-hdr-1x", "eth-100g"), with what
// each is; the first is the default for a GPU generation when interconnect is "".
std::vector<std::pair<std::string, std::string>> published_interconnects();
// What the step-time model uses on a CPU no calibration has measured: one core of the development machine
// (t5scale-bench --calibrate there), marked uncalibrated in its name.
MachineRates uncalibrated_cpu_rates();

// The rates a run is predicted with: the file `rates_file` when set; else on a GPU the published figures of the
// model its name contains ("NVIDIA H100 80GB HBM3" -> H100; std::nullopt when none), on a CPU
// uncalibrated_cpu_rates().
std::optional<MachineRates> machine_rates_for(const std::string& rates_file, bool on_gpu, const std::string& device_name,
                                              const std::string& interconnect = "");

// The rates file: read (every key checked; an unknown or missing key, or a value out of range, is an Error naming
// the file and the key) and written (JSON).
MachineRates read_machine_rates(const std::string& path);
std::string machine_rates_json(const MachineRates& rates);
void write_machine_rates(const MachineRates& rates, const std::string& path);

}  // namespace t5scale
