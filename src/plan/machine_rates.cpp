#include "plan/machine_rates.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "core/check.h"

namespace t5scale {

namespace {

constexpr const char* kSchema = "t5scale-machine-rates/1";

// A GPU generation's datasheet figures.
struct GpuFigures {
  std::vector<std::string> names;   // as slurm.gpu takes them
  double dense_peak_flops;          // bf16 (V100: fp16) tensor cores, dense
  double hbm_bytes_per_s;
  double nvlink_bytes_per_s;        // per GPU, each direction
  double power_w;                   // board power (TDP)
  std::string default_interconnect;
  std::string source;
  // The GPU's usual node's host (its DGX): memory bandwidth (channels x rate), memory, cores, and the PCIe link.
  double host_memory_bytes_per_s = 0.0;
  double host_memory_bytes = 0.0;
  int64_t host_cores = 0;
  double pcie_bytes_per_s = 0.0;  // each direction, x16
  std::string host_source;
};

const std::vector<GpuFigures>& gpu_figures() {
  // The hosts: DGX datasheets (sockets x 8 memory channels x the DIMMs' rate; PCIe x16 to each GPU).
  const std::string dgx_h100 = "DGX H100 datasheet: 2x Xeon Platinum 8480C (112 cores), 2 TB DDR5-4800 (8 channels "
                               "per socket: 614.4 GB/s), PCIe 5.0 x16 to each GPU (64 GB/s each direction)";
  const std::string dgx_a100 = "DGX A100 datasheet: 2x AMD EPYC 7742 (128 cores), DDR4-3200 (8 channels per socket: "
                               "409.6 GB/s; 2 TB in the 640 GB system, 1 TB in the 320 GB one), PCIe 4.0 x16 to each "
                               "GPU (32 GB/s each direction)";
  const std::string dgx1 = "DGX-1 datasheet: 2x Xeon E5-2698 v4 (40 cores), 512 GB DDR4-2400 (4 channels per socket: "
                           "153.6 GB/s), PCIe 3.0 x16 to each GPU (16 GB/s each direction)";
  static const std::vector<GpuFigures> table = {
      {{"H100", "H100-80GB", "H100-SXM"}, 989.4e12, 3.35e12, 450e9, 700.0, "ib-ndr-8x",
       "NVIDIA H100 Tensor Core GPU datasheet (SXM5: 989.4 TFLOP/s dense BF16, 3.35 TB/s HBM3, NVLink 900 GB/s "
       "both directions, 700 W)",
       614.4e9, 2e12, 112, 64e9, dgx_h100},
      {{"H200", "GH200"}, 989.4e12, 4.8e12, 450e9, 700.0, "ib-ndr-8x",
       "NVIDIA H200 Tensor Core GPU datasheet (SXM: 989 TFLOP/s dense BF16, 4.8 TB/s HBM3e, NVLink 900 GB/s both "
       "directions, 700 W)",
       614.4e9, 2e12, 112, 64e9, dgx_h100 + " (the DGX H200's host is the same)"},
      {{"A100", "A100-80GB"}, 312e12, 2.039e12, 300e9, 400.0, "ib-hdr-8x",
       "NVIDIA A100 Tensor Core GPU datasheet (SXM 80GB: 312 TFLOP/s dense BF16, 2,039 GB/s HBM2e, NVLink 600 GB/s "
       "both directions, 400 W)",
       409.6e9, 2e12, 128, 32e9, dgx_a100},
      {{"A100-40GB"}, 312e12, 1.555e12, 300e9, 400.0, "ib-hdr-8x",
       "NVIDIA A100 Tensor Core GPU datasheet (SXM 40GB: 312 TFLOP/s dense BF16, 1,555 GB/s HBM2, NVLink 600 GB/s "
       "both directions, 400 W)",
       409.6e9, 1e12, 128, 32e9, dgx_a100},
      {{"V100", "V100-32GB", "V100-16GB"}, 125e12, 900e9, 150e9, 300.0, "ib-edr-4x",
       "NVIDIA V100 Tensor Core GPU datasheet (SXM2: 125 TFLOP/s FP16 tensor cores, no BF16; 900 GB/s HBM2, NVLink "
       "300 GB/s both directions, 300 W)",
       153.6e9, 512e9, 40, 16e9, dgx1},
  };
  return table;
}

// Between nodes: bandwidth per node (each direction), the NICs' count, a step's latency.
struct Interconnect {
  std::string name;
  std::string what;
  double node_bytes_per_s;
  double latency_s;
};

const std::vector<Interconnect>& interconnects() {
  static const std::vector<Interconnect> table = {
      {"ib-hdr-8x", "8 InfiniBand HDR 200 Gb/s NICs per node, one per GPU (DGX A100)", 8 * 25e9, 5e-6},
      {"ib-ndr-8x", "8 InfiniBand NDR 400 Gb/s NICs per node, one per GPU (DGX H100)", 8 * 50e9, 5e-6},
      {"ib-edr-4x", "4 InfiniBand EDR 100 Gb/s NICs per node (DGX-1)", 4 * 12.5e9, 5e-6},
      {"ib-hdr-1x", "1 InfiniBand HDR 200 Gb/s NIC per node", 25e9, 5e-6},
      {"eth-100g", "1 Ethernet 100 Gb/s (RoCE) NIC per node", 12.5e9, 15e-6},
  };
  return table;
}

// Of a host's nominal memory bandwidth, what a multi-threaded streaming kernel reaches (STREAM's triad on
// two-socket servers: 70 to 80%; the lower end, for an update that also reads and writes several streams); of a
// PCIe x16 link's nominal rate, what a copy from pinned memory reaches (about 80%: 25 of 32 GB/s on PCIe 4.0).
// Published shares, not measured here: the gpu-check row of T5-3B with offload measures the whole update.
constexpr double kHostStreamEfficiency = 0.7;
constexpr double kHostLinkEfficiency = 0.8;

// What t5scale's own step reached on one H200 (results/gpu/NVIDIA_H200/2026-11-26/, its README), per kernel class
// as a share of the H200's datasheet figures: the GPU whose figures are measured. Another GPU gets its own
// datasheet's figures at the same shares (scaled, not measured: its kernels may reach other shares).
constexpr const char* kMeasuredGpu = "H200";
constexpr const char* kMeasuredSource =
    "t5scale-bench on one H200, 2026-11-26 (results/gpu/NVIDIA_H200/2026-11-26/: the T5-3B 147/26 step's kernel "
    "profile by class, 2-bench-profile/bench/t5-3b-147-26.log and 5-attention-and-rows/t5-3b-147-26-explicit.log; "
    "the biased attention timed alone, attention_kernels.json; the optimizer phase of the eight rows)";
// Matrix products (cuBLAS's nvjet kernels) by their smallest dimension, of the dense peak: 76% for T5-3B's, whose
// smallest is 1024 (124.8 ms for 94 TFLOP; none wider was measured); 50% for the 512 of a T5-v1.1-XXL TP=8 shard's
// attention projections (its two rows' steps, the rest of them timed as above); the narrower classes, which the
// explicit path's per-head products fall in, as the explicit rows' steps hold them.
constexpr double kMatmulEfficiencyBySmallestDim[][2] = {{16, 0.05}, {64, 0.37}, {256, 0.45}, {512, 0.50},
                                                        {1024, 0.76}};
// Elementwise kernels, norms, dropout and copies of the step, of HBM: their bytes as the model counts them against
// the profile's 42.1 ms of them.
constexpr double kElementwiseBandwidthEfficiency = 0.75;
// The optimizer phase: 46 bytes per parameter (fp32 gradient, master, two moments, the bf16 copy back) at 12.7 ps
// per parameter in every row, 3.62 TB/s.
constexpr double kOptimizerBandwidthEfficiency = 0.755;
// The explicit path (t5-3b-147-26-explicit.log against the SDPA profile): its heads' strided copies (71 ms more of
// copies: the q, k, v views and their gradients), and its products over 147 keys on cuBLAS's align1 kernels (55 ms
// more of products, for 2 TFLOP).
constexpr double kStridedCopyBandwidthEfficiency = 0.2;
constexpr double kUnalignedMatmulEfficiency = 0.135;
// SDPA's fused kernels, of the dense peak, on the FLOPs of their padded tiles (the tiles are the kernels' own,
// PyTorch 2.11: memory-efficient forward 64 x 64 up to d 64, 64 x 128 up to 128; backward 64 x 64, 128 x 128; flash
// forward 128 x 64 or 128 x 32, backward 128 x 128 or 64 x 128). d 128: the profile's kernels (the memory-efficient
// forward 14.7 ms, backward 62.9 ms; flash 2.7 and 7.4 ms); d 64: the memory-efficient kernel timed alone at
// 64 x 8 x 512 x 64 and 256 x 12 x 512 x 64, at the share of the step's rate the kernel timed alone reached at d 128.
struct FusedAttentionShare {
  const char* kernel;
  int64_t max_head_dim, forward_query_tile, forward_key_tile, backward_query_tile, backward_key_tile;
  double forward_share, backward_share;
};
constexpr FusedAttentionShare kFusedAttentionShares[] = {
    {"memory_efficient", 64, 64, 64, 64, 64, 0.085, 0.070},
    {"memory_efficient", 128, 64, 128, 128, 128, 0.0996, 0.0828},
    {"flash", 64, 128, 64, 128, 128, 0.17, 0.12},
    {"flash", 128, 128, 32, 64, 128, 0.196, 0.141},
};
// The step's idle device time: the T5-3B step's kernels kept the H200 busy 286.0 of its 294.5 ms, over the 45,630
// operators the step dispatches (operators_per_step).
constexpr double kDeviceIdlePerOperatorS = 0.186e-6;
// Not measured here: NCCL's bus bandwidth about 80% of a link's, a step of NCCL's tree 2 us on NVLink.
constexpr double kLinkEfficiency = 0.80;
constexpr double kNvlinkLatencyS = 2e-6;
// LibTorch's host time per profiled operator (the dispatch of each ATen call, nested calls included), as
// --calibrate measured it on a 2-core EPYC (1.1 us); GPU hosts are not slower.
constexpr double kGpuHostOpLatencyS = 1.0e-6;

double number(const nlohmann::json& object, const std::string& key, const std::string& where) {
  if (!object.contains(key)) throw Error(msg(where, ": the key '", key, "' is missing"));
  const auto& value = object.at(key);
  if (!value.is_number()) throw Error(msg(where, ".", key, ": expected a number, got ", value.dump()));
  return value.get<double>();
}

void check_keys(const nlohmann::json& object, const std::set<std::string>& known, const std::string& where) {
  if (!object.is_object()) throw Error(msg(where, ": expected an object, got ", object.dump()));
  for (const auto& [key, value] : object.items()) {
    if (!known.count(key)) {
      throw Error(msg(where, ": unknown key '", key, "' (known: ", join(std::vector<std::string>(known.begin(), known.end()), ", "), ")"));
    }
  }
}

}  // namespace

std::string normalized_gpu_name(const std::string& name) {
  std::string out;
  for (char c : name) {
    if (c == ' ' || c == '_') c = '-';
    out += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  if (out.rfind("NVIDIA-", 0) == 0) out = out.substr(7);
  return out;
}

double MachineRates::matmul_rate(double min_dim) const {
  T5S_CHECK(!matmul.empty(), "machine rates '", name, "' have no matmul rates");
  if (min_dim <= static_cast<double>(matmul.front().min_dim)) return matmul.front().flops_per_s;
  for (size_t i = 1; i < matmul.size(); ++i) {
    const MatmulRate& lo = matmul[i - 1];
    const MatmulRate& hi = matmul[i];
    if (min_dim <= static_cast<double>(hi.min_dim)) {
      const double t = (std::log(min_dim) - std::log(static_cast<double>(lo.min_dim))) /
                       (std::log(static_cast<double>(hi.min_dim)) - std::log(static_cast<double>(lo.min_dim)));
      return std::exp(std::log(lo.flops_per_s) + t * (std::log(hi.flops_per_s) - std::log(lo.flops_per_s)));
    }
  }
  return matmul.back().flops_per_s;
}

namespace {

double padded(double length, int64_t tile) {
  const double t = static_cast<double>(std::max<int64_t>(tile, 1));
  return std::ceil(length / t) * t;
}

}  // namespace

double FusedAttentionRate::forward_seconds(double batched_heads, double queries, double keys, double head_dim) const {
  if (batched_heads <= 0 || queries <= 0 || keys <= 0) return 0.0;
  return 4.0 * batched_heads * padded(queries, forward_query_tile) * padded(keys, forward_key_tile) * head_dim /
         forward_flops_per_s;
}

double FusedAttentionRate::backward_seconds(double batched_heads, double queries, double keys, double head_dim) const {
  if (batched_heads <= 0 || queries <= 0 || keys <= 0) return 0.0;
  return 10.0 * batched_heads * padded(queries, backward_query_tile) * padded(keys, backward_key_tile) * head_dim /
         backward_flops_per_s;
}

const FusedAttentionRate* MachineRates::fused_attention_rate(const std::string& kernel, int64_t head_dim) const {
  const FusedAttentionRate* best = nullptr;
  for (const FusedAttentionRate& r : fused_attention) {
    if (r.kernel != kernel || r.max_head_dim < head_dim) continue;
    if (best == nullptr || r.max_head_dim < best->max_head_dim) best = &r;
  }
  return best;
}

double MachineRates::matmul_seconds(double m, double n, double k) const {
  if (m <= 0 || n <= 0 || k <= 0) return 0.0;
  return 2.0 * m * n * k / matmul_rate(std::min({m, n, k}));
}

double MachineRates::ranks_per_core(int64_t ranks_per_host) const {
  if (cores_per_node <= 0) return 1.0;
  return std::max(1.0, static_cast<double>(ranks_per_host * threads_per_rank) / static_cast<double>(cores_per_node));
}

double MachineRates::busy_host_slowdown(int64_t ranks_per_host) const {
  if (ranks_per_host <= 1) return 1.0;
  const BusyHostSlowdown* best = nullptr;
  auto distance = [ranks_per_host](const BusyHostSlowdown& b) {
    return std::abs(std::log2(static_cast<double>(b.ranks_per_host)) - std::log2(static_cast<double>(ranks_per_host)));
  };
  for (const BusyHostSlowdown& b : busy_host) {
    if (best == nullptr || distance(b) < distance(*best)) best = &b;
  }
  return best ? best->slowdown : 1.0;
}

bool MachineRates::has_link(const std::string& scope) const {
  return std::any_of(links.begin(), links.end(), [&](const LinkRates& l) { return l.scope == scope; });
}

const LinkRates& MachineRates::link(const std::string& scope, int64_t ranks_per_node, int64_t group_size) const {
  const LinkRates* best = nullptr;
  auto distance = [](int64_t measured, int64_t wanted) {
    return measured == 0 ? 0.5 : std::abs(std::log2(static_cast<double>(measured)) -
                                          std::log2(static_cast<double>(std::max<int64_t>(wanted, 1))));
  };
  for (const LinkRates& l : links) {
    if (l.scope != scope) continue;
    if (best == nullptr) {
      best = &l;
      continue;
    }
    const double a = distance(l.ranks_per_node, ranks_per_node), b = distance(best->ranks_per_node, ranks_per_node);
    if (a < b || (a == b && distance(l.group_size, group_size) < distance(best->group_size, group_size))) best = &l;
  }
  if (best == nullptr) {
    throw Error(msg("machine rates '", name, "' have no ", scope, " link: a collective ", scope == "inter_node" ? "between nodes" : "inside a node",
                    " cannot be timed (t5scale-bench --calibrate under mpirun measures it)"));
  }
  return *best;
}

std::vector<std::string> MachineRates::problems() const {
  std::vector<std::string> out;
  if (matmul.empty()) out.push_back("matmul: no rates");
  for (size_t i = 0; i < matmul.size(); ++i) {
    if (matmul[i].min_dim < 1 || !(matmul[i].flops_per_s > 0)) {
      out.push_back(msg("matmul[", i, "]: min_dim must be >= 1 and flops_per_s > 0"));
    } else if (i > 0 && matmul[i].min_dim <= matmul[i - 1].min_dim) {
      out.push_back(msg("matmul[", i, "].min_dim: ", matmul[i].min_dim, " is not above the entry before (", matmul[i - 1].min_dim, ")"));
    }
  }
  if (!(memory_bandwidth_bytes_per_s > 0)) out.push_back("memory_bandwidth_bytes_per_s: must be > 0");
  if (!(optimizer_bandwidth_bytes_per_s >= 0)) out.push_back("optimizer_bandwidth_bytes_per_s: must be >= 0");
  if (!(strided_copy_bandwidth_bytes_per_s >= 0)) out.push_back("strided_copy_bandwidth_bytes_per_s: must be >= 0");
  if (!(unaligned_matmul_efficiency > 0 && unaligned_matmul_efficiency <= 1)) {
    out.push_back("unaligned_matmul_efficiency: must be in (0, 1]");
  }
  for (size_t i = 0; i < fused_attention.size(); ++i) {
    const FusedAttentionRate& a = fused_attention[i];
    if (a.kernel != "memory_efficient" && a.kernel != "flash") {
      out.push_back(msg("fused_attention[", i, "].kernel: '", a.kernel, "' is not memory_efficient or flash"));
    }
    if (a.max_head_dim < 1) out.push_back(msg("fused_attention[", i, "].max_head_dim: must be >= 1"));
    if (a.forward_query_tile < 1 || a.forward_key_tile < 1 || a.backward_query_tile < 1 || a.backward_key_tile < 1) {
      out.push_back(msg("fused_attention[", i, "]: every tile must be >= 1"));
    }
    if (!(a.forward_flops_per_s > 0 && a.backward_flops_per_s > 0)) {
      out.push_back(msg("fused_attention[", i, "]: forward_flops_per_s and backward_flops_per_s must be > 0"));
    }
  }
  if (!(op_latency_s >= 0)) out.push_back("op_latency_s: must be >= 0");
  if (!(device_idle_per_operator_s >= 0)) out.push_back("device_idle_per_operator_s: must be >= 0");
  if (!(compute_efficiency > 0 && compute_efficiency <= 1.5)) out.push_back("compute_efficiency: must be in (0, 1.5]");
  if (cores_per_node < 0) out.push_back("cores_per_node: must be >= 0");
  if (threads_per_rank < 1) out.push_back("threads_per_rank: must be >= 1");
  if (nodes_per_host < 1) out.push_back("nodes_per_host: must be >= 1");
  for (size_t i = 0; i < busy_host.size(); ++i) {
    if (busy_host[i].ranks_per_host < 2) out.push_back(msg("busy_host[", i, "].ranks_per_host: must be >= 2"));
    if (!(busy_host[i].slowdown >= 0.5 && busy_host[i].slowdown <= 10.0)) {
      out.push_back(msg("busy_host[", i, "].slowdown: must be in [0.5, 10]"));
    }
  }
  if (!(power_w_per_device >= 0)) out.push_back("power_w_per_device: must be >= 0");
  if (!(peak_flops_per_device >= 0)) out.push_back("peak_flops_per_device: must be >= 0");
  if (!(host_memory_bandwidth_bytes_per_s >= 0 && host_memory_bytes_per_node >= 0 && host_link_bytes_per_s >= 0 &&
        host_cores_per_node >= 0)) {
    out.push_back("host_memory_bandwidth_bytes_per_s, host_memory_bytes_per_node, host_cores_per_node and "
                  "host_link_bytes_per_s: must be >= 0");
  }
  for (size_t i = 0; i < links.size(); ++i) {
    const LinkRates& l = links[i];
    if (l.scope != "intra_node" && l.scope != "inter_node") {
      out.push_back(msg("links[", i, "].scope: '", l.scope, "' is not intra_node or inter_node"));
    }
    if (!(l.latency_s >= 0)) out.push_back(msg("links[", i, "].latency_s: must be >= 0"));
    if (!(l.bandwidth_bytes_per_s > 0)) out.push_back(msg("links[", i, "].bandwidth_bytes_per_s: must be > 0"));
    if (l.ranks_per_node < 0 || l.group_size < 0) out.push_back(msg("links[", i, "]: ranks_per_node and group_size must be >= 0"));
  }
  return out;
}

double collective_seconds(const LinkRates& link, const std::string& kind, double bytes, int64_t group_size) {
  if (group_size <= 1) return 0.0;
  double traffic = 0.0;
  if (kind == "all_reduce") {
    traffic = 2.0;
  } else if (kind == "reduce_scatter" || kind == "all_gather") {
    traffic = 1.0;
  } else {
    throw Error(msg("collective_seconds: unknown collective '", kind, "'"));
  }
  const double p = static_cast<double>(group_size);
  const double steps = 2.0 * std::ceil(std::log2(p));
  return link.latency_s * steps + traffic * (p - 1.0) / p * bytes / link.bandwidth_bytes_per_s;
}

std::vector<std::pair<std::string, std::string>> published_interconnects() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const Interconnect& i : interconnects()) out.emplace_back(i.name, i.what);
  return out;
}

std::optional<MachineRates> published_machine_rates(const std::string& gpu, const std::string& interconnect) {
  const std::string wanted = normalized_gpu_name(gpu);
  for (const GpuFigures& g : gpu_figures()) {
    if (std::none_of(g.names.begin(), g.names.end(), [&](const std::string& n) { return normalized_gpu_name(n) == wanted; })) {
      continue;
    }
    const std::string link_name = interconnect.empty() ? g.default_interconnect : interconnect;
    const auto ic = std::find_if(interconnects().begin(), interconnects().end(),
                                 [&](const Interconnect& i) { return i.name == link_name; });
    if (ic == interconnects().end()) {
      std::vector<std::string> names;
      for (const Interconnect& i : interconnects()) names.push_back(i.name);
      throw Error(msg("interconnect '", link_name, "' has no published figures (known: ", join(names, ", "), ")"));
    }
    MachineRates r;
    const bool measured = std::find(g.names.begin(), g.names.end(), kMeasuredGpu) != g.names.end();
    r.name = g.names.front() + " + " + ic->name +
             (measured ? std::string(" (measured on an H200)") : " (scaled from the H200's measurements)");
    r.source = g.source + "; between nodes " + ic->what + "; kernel classes at the shares of the datasheet figures " +
               (measured ? std::string("measured: ") : "measured on an H200 and scaled by the datasheets: ") +
               kMeasuredSource + " (plan/machine_rates.cpp)";
    for (const auto& [dim, efficiency] : kMatmulEfficiencyBySmallestDim) {
      r.matmul.push_back({static_cast<int64_t>(dim), efficiency * g.dense_peak_flops});
    }
    r.memory_bandwidth_bytes_per_s = kElementwiseBandwidthEfficiency * g.hbm_bytes_per_s;
    r.optimizer_bandwidth_bytes_per_s = kOptimizerBandwidthEfficiency * g.hbm_bytes_per_s;
    r.strided_copy_bandwidth_bytes_per_s = kStridedCopyBandwidthEfficiency * g.hbm_bytes_per_s;
    r.unaligned_matmul_efficiency = kUnalignedMatmulEfficiency;
    for (const FusedAttentionShare& a : kFusedAttentionShares) {
      r.fused_attention.push_back({a.kernel, a.max_head_dim, a.forward_query_tile, a.forward_key_tile,
                                   a.backward_query_tile, a.backward_key_tile, a.forward_share * g.dense_peak_flops,
                                   a.backward_share * g.dense_peak_flops,
                                   measured ? "measured" : "scaled from the H200's by the dense peak"});
    }
    r.op_latency_s = kGpuHostOpLatencyS;
    r.device_idle_per_operator_s = kDeviceIdlePerOperatorS;
    r.asynchronous_device = true;
    r.power_w_per_device = g.power_w;
    r.peak_flops_per_device = g.dense_peak_flops;
    // The host at the shares a streaming kernel (STREAM's triad) and a pinned copy reach of the nominal figures.
    r.host_memory_bandwidth_bytes_per_s = kHostStreamEfficiency * g.host_memory_bytes_per_s;
    r.host_memory_bytes_per_node = g.host_memory_bytes;
    r.host_cores_per_node = g.host_cores;
    r.host_link_bytes_per_s = kHostLinkEfficiency * g.pcie_bytes_per_s;
    r.source += "; the host: " + g.host_source;
    LinkRates nvlink;
    nvlink.scope = "intra_node";
    nvlink.latency_s = kNvlinkLatencyS;
    nvlink.bandwidth_bytes_per_s = kLinkEfficiency * g.nvlink_bytes_per_s;
    nvlink.source = "NVLink, " + g.names.front() + " datasheet";
    LinkRates network;
    network.scope = "inter_node";
    network.latency_s = ic->latency_s;
    network.bandwidth_bytes_per_s = kLinkEfficiency * ic->node_bytes_per_s;
    network.shared_by_node = true;
    network.source = ic->what;
    r.links = {nvlink, network};
    return r;
  }
  return std::nullopt;
}

std::optional<MachineRates> machine_rates_for(const std::string& rates_file, bool on_gpu, const std::string& device_name,
                                              const std::string& interconnect) {
  if (!rates_file.empty()) return read_machine_rates(rates_file);
  if (!on_gpu) return uncalibrated_cpu_rates();
  if (auto exact = published_machine_rates(device_name, interconnect)) return exact;
  // A device name as the driver gives it: the longest known model name inside it ("A100-SXM4-80GB" -> A100).
  const std::string name = normalized_gpu_name(device_name);
  std::string best;
  for (const GpuFigures& g : gpu_figures()) {
    for (const std::string& n : g.names) {
      const std::string known = normalized_gpu_name(n);
      if (name.find(known) != std::string::npos && known.size() > best.size()) best = n;
    }
  }
  if (best.empty()) return std::nullopt;
  return published_machine_rates(best, interconnect);
}

MachineRates uncalibrated_cpu_rates() {
  // results/bench/rates/cpu-dev-2core.json, rounded: what --calibrate measured there.
  MachineRates r;
  r.name = "CPU core (uncalibrated)";
  r.source =
      "t5scale-bench --calibrate on the 2-core development machine (AMD EPYC, 1 thread per rank), 2026-11-26 "
      "(results/bench/rates/cpu-dev-2core.json): any other CPU differs; run t5scale-bench --calibrate there and set "
      "telemetry.machine_rates";
  r.matmul = {{4, 37e9}, {16, 82e9}, {64, 99e9}, {256, 102e9}, {1024, 83e9}};
  r.memory_bandwidth_bytes_per_s = 19.5e9;
  r.op_latency_s = 0.85e-6;
  r.compute_efficiency = 0.66;
  r.asynchronous_device = false;
  r.cores_per_node = 2;
  r.threads_per_rank = 1;
  r.power_w_per_device = 0.0;
  LinkRates shm;
  shm.scope = "intra_node";
  shm.ranks_per_node = 2;
  shm.group_size = 2;
  shm.latency_s = 87e-6;
  shm.bandwidth_bytes_per_s = 1.3e9;
  shm.source = "Open MPI shared memory (vader), 2 ranks, compute between collectives";
  r.links = {shm};
  return r;
}

std::string machine_rates_json(const MachineRates& r) {
  nlohmann::ordered_json j;
  j["schema"] = kSchema;
  j["name"] = r.name;
  j["source"] = r.source;
  j["matmul"] = nlohmann::ordered_json::array();
  for (const MatmulRate& m : r.matmul) j["matmul"].push_back({{"min_dim", m.min_dim}, {"flops_per_s", m.flops_per_s}});
  j["memory_bandwidth_bytes_per_s"] = r.memory_bandwidth_bytes_per_s;
  j["optimizer_bandwidth_bytes_per_s"] = r.optimizer_bandwidth_bytes_per_s;
  j["strided_copy_bandwidth_bytes_per_s"] = r.strided_copy_bandwidth_bytes_per_s;
  j["unaligned_matmul_efficiency"] = r.unaligned_matmul_efficiency;
  j["fused_attention"] = nlohmann::ordered_json::array();
  for (const FusedAttentionRate& a : r.fused_attention) {
    j["fused_attention"].push_back({{"kernel", a.kernel},
                                    {"max_head_dim", a.max_head_dim},
                                    {"forward_query_tile", a.forward_query_tile},
                                    {"forward_key_tile", a.forward_key_tile},
                                    {"backward_query_tile", a.backward_query_tile},
                                    {"backward_key_tile", a.backward_key_tile},
                                    {"forward_flops_per_s", a.forward_flops_per_s},
                                    {"backward_flops_per_s", a.backward_flops_per_s},
                                    {"source", a.source}});
  }
  j["op_latency_s"] = r.op_latency_s;
  j["device_idle_per_operator_s"] = r.device_idle_per_operator_s;
  j["compute_efficiency"] = r.compute_efficiency;
  j["asynchronous_device"] = r.asynchronous_device;
  j["cores_per_node"] = r.cores_per_node;
  j["threads_per_rank"] = r.threads_per_rank;
  j["nodes_per_host"] = r.nodes_per_host;
  j["busy_host"] = nlohmann::ordered_json::array();
  for (const BusyHostSlowdown& b : r.busy_host) {
    j["busy_host"].push_back({{"ranks_per_host", b.ranks_per_host}, {"slowdown", b.slowdown}, {"source", b.source}});
  }
  j["power_w_per_device"] = r.power_w_per_device;
  j["peak_flops_per_device"] = r.peak_flops_per_device;
  j["host_memory_bandwidth_bytes_per_s"] = r.host_memory_bandwidth_bytes_per_s;
  j["host_memory_bytes_per_node"] = r.host_memory_bytes_per_node;
  j["host_cores_per_node"] = r.host_cores_per_node;
  j["host_link_bytes_per_s"] = r.host_link_bytes_per_s;
  j["links"] = nlohmann::ordered_json::array();
  for (const LinkRates& l : r.links) {
    j["links"].push_back({{"scope", l.scope},
                          {"ranks_per_node", l.ranks_per_node},
                          {"group_size", l.group_size},
                          {"latency_s", l.latency_s},
                          {"bandwidth_bytes_per_s", l.bandwidth_bytes_per_s},
                          {"shared_by_node", l.shared_by_node},
                          {"source", l.source}});
  }
  return j.dump(2) + "\n";
}

void write_machine_rates(const MachineRates& rates, const std::string& path) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    if (!out) throw Error(msg("cannot write the machine rates file ", tmp));
    out << machine_rates_json(rates);
    if (!out) throw Error(msg("cannot write the machine rates file ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw Error(msg("cannot move ", tmp, " to ", path));
}

namespace {

// Each entry of the list j[key], read by `entry` (the entry's JSON and where it is, for the errors); none when absent.
template <typename T, typename Read>
std::vector<T> read_list(const nlohmann::json& j, const std::string& key, const std::string& where,
                         const std::string& expected, Read entry) {
  std::vector<T> out;
  if (!j.contains(key)) return out;
  if (!j[key].is_array()) throw Error(msg(where, ": ", key, ": expected ", expected));
  for (size_t i = 0; i < j[key].size(); ++i) out.push_back(entry(j[key][i], msg(where, ": ", key, "[", i, "]")));
  return out;
}

MatmulRate read_matmul_rate(const nlohmann::json& o, const std::string& at) {
  check_keys(o, {"min_dim", "flops_per_s"}, at);
  return {static_cast<int64_t>(number(o, "min_dim", at)), number(o, "flops_per_s", at)};
}

FusedAttentionRate read_fused_attention_rate(const nlohmann::json& o, const std::string& at) {
  check_keys(o, {"kernel", "max_head_dim", "forward_query_tile", "forward_key_tile", "backward_query_tile",
                 "backward_key_tile", "forward_flops_per_s", "backward_flops_per_s", "source"}, at);
  if (!o.contains("kernel") || !o["kernel"].is_string()) throw Error(msg(at, ": kernel: expected a name"));
  FusedAttentionRate a;
  a.kernel = o["kernel"].get<std::string>();
  a.max_head_dim = static_cast<int64_t>(number(o, "max_head_dim", at));
  a.forward_query_tile = static_cast<int64_t>(number(o, "forward_query_tile", at));
  a.forward_key_tile = static_cast<int64_t>(number(o, "forward_key_tile", at));
  a.backward_query_tile = static_cast<int64_t>(number(o, "backward_query_tile", at));
  a.backward_key_tile = static_cast<int64_t>(number(o, "backward_key_tile", at));
  a.forward_flops_per_s = number(o, "forward_flops_per_s", at);
  a.backward_flops_per_s = number(o, "backward_flops_per_s", at);
  a.source = o.value("source", std::string());
  return a;
}

BusyHostSlowdown read_busy_host_slowdown(const nlohmann::json& o, const std::string& at) {
  check_keys(o, {"ranks_per_host", "slowdown", "source"}, at);
  return {static_cast<int64_t>(number(o, "ranks_per_host", at)), number(o, "slowdown", at),
          o.value("source", std::string())};
}

LinkRates read_link_rates(const nlohmann::json& o, const std::string& at) {
  check_keys(o, {"scope", "ranks_per_node", "group_size", "latency_s", "bandwidth_bytes_per_s", "shared_by_node",
                 "source"}, at);
  LinkRates l;
  l.scope = o.value("scope", std::string("intra_node"));
  if (o.contains("ranks_per_node")) l.ranks_per_node = static_cast<int64_t>(number(o, "ranks_per_node", at));
  if (o.contains("group_size")) l.group_size = static_cast<int64_t>(number(o, "group_size", at));
  l.latency_s = number(o, "latency_s", at);
  l.bandwidth_bytes_per_s = number(o, "bandwidth_bytes_per_s", at);
  if (o.contains("shared_by_node")) {
    if (!o["shared_by_node"].is_boolean()) throw Error(msg(at, ".shared_by_node: expected true or false"));
    l.shared_by_node = o["shared_by_node"].get<bool>();
  }
  l.source = o.value("source", std::string());
  return l;
}

}  // namespace

MachineRates read_machine_rates(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(msg("machine rates file ", path, ": cannot be read"));
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    throw Error(msg("machine rates file ", path, ": not JSON (", e.what(), ")"));
  }
  const std::string where = "machine rates file " + path;
  check_keys(j, {"schema", "name", "source", "matmul", "memory_bandwidth_bytes_per_s", "optimizer_bandwidth_bytes_per_s",
                 "strided_copy_bandwidth_bytes_per_s", "unaligned_matmul_efficiency", "fused_attention", "op_latency_s",
                 "device_idle_per_operator_s",
                 "compute_efficiency",
                 "asynchronous_device", "cores_per_node", "threads_per_rank", "nodes_per_host", "busy_host",
                 "power_w_per_device", "peak_flops_per_device", "host_memory_bandwidth_bytes_per_s",
                 "host_memory_bytes_per_node", "host_cores_per_node", "host_link_bytes_per_s", "links"},
             where);
  if (!j.contains("schema") || j["schema"] != kSchema) {
    throw Error(msg(where, ": schema: expected \"", kSchema, "\", got ", j.contains("schema") ? j["schema"].dump() : "nothing"));
  }
  MachineRates r;
  r.name = j.value("name", path);
  r.source = j.value("source", std::string("calibrated (") + path + ")");
  if (!j.contains("matmul")) throw Error(msg(where, ": matmul: expected a list of {min_dim, flops_per_s}"));
  r.matmul = read_list<MatmulRate>(j, "matmul", where, "a list of {min_dim, flops_per_s}", read_matmul_rate);
  r.memory_bandwidth_bytes_per_s = number(j, "memory_bandwidth_bytes_per_s", where);
  // Keys a rates file of an earlier version lacks keep their defaults: the model as it timed such a machine.
  if (j.contains("optimizer_bandwidth_bytes_per_s")) {
    r.optimizer_bandwidth_bytes_per_s = number(j, "optimizer_bandwidth_bytes_per_s", where);
  }
  if (j.contains("strided_copy_bandwidth_bytes_per_s")) {
    r.strided_copy_bandwidth_bytes_per_s = number(j, "strided_copy_bandwidth_bytes_per_s", where);
  }
  if (j.contains("unaligned_matmul_efficiency")) {
    r.unaligned_matmul_efficiency = number(j, "unaligned_matmul_efficiency", where);
  }
  r.fused_attention = read_list<FusedAttentionRate>(j, "fused_attention", where, "a list", read_fused_attention_rate);
  r.op_latency_s = number(j, "op_latency_s", where);
  if (j.contains("device_idle_per_operator_s")) {
    r.device_idle_per_operator_s = number(j, "device_idle_per_operator_s", where);
  }
  if (j.contains("compute_efficiency")) r.compute_efficiency = number(j, "compute_efficiency", where);
  if (j.contains("asynchronous_device")) {
    if (!j["asynchronous_device"].is_boolean()) throw Error(msg(where, ".asynchronous_device: expected true or false"));
    r.asynchronous_device = j["asynchronous_device"].get<bool>();
  }
  if (j.contains("cores_per_node")) r.cores_per_node = static_cast<int64_t>(number(j, "cores_per_node", where));
  if (j.contains("threads_per_rank")) r.threads_per_rank = static_cast<int64_t>(number(j, "threads_per_rank", where));
  if (j.contains("nodes_per_host")) r.nodes_per_host = static_cast<int64_t>(number(j, "nodes_per_host", where));
  r.busy_host = read_list<BusyHostSlowdown>(j, "busy_host", where, "a list of {ranks_per_host, slowdown, source}",
                                       read_busy_host_slowdown);
  if (j.contains("power_w_per_device")) r.power_w_per_device = number(j, "power_w_per_device", where);
  if (j.contains("peak_flops_per_device")) r.peak_flops_per_device = number(j, "peak_flops_per_device", where);
  for (const auto& [key, field] : {std::pair<const char*, double*>{"host_memory_bandwidth_bytes_per_s",
                                                                   &r.host_memory_bandwidth_bytes_per_s},
                                   {"host_memory_bytes_per_node", &r.host_memory_bytes_per_node},
                                   {"host_link_bytes_per_s", &r.host_link_bytes_per_s}}) {
    if (j.contains(key)) *field = number(j, key, where);
  }
  if (j.contains("host_cores_per_node")) {
    r.host_cores_per_node = static_cast<int64_t>(number(j, "host_cores_per_node", where));
  }
  r.links = read_list<LinkRates>(j, "links", where, "a list", read_link_rates);
  const std::vector<std::string> problems = r.problems();
  if (!problems.empty()) throw Error(msg(where, ": ", join(problems, "; ")));
  return r;
}

}  // namespace t5scale
