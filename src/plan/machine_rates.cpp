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
};

const std::vector<GpuFigures>& gpu_figures() {
  static const std::vector<GpuFigures> table = {
      {{"H100", "H100-80GB", "H100-SXM"}, 989.4e12, 3.35e12, 450e9, 700.0, "ib-ndr-8x",
       "NVIDIA H100 Tensor Core GPU datasheet (SXM5: 989.4 TFLOP/s dense BF16, 3.35 TB/s HBM3, NVLink 900 GB/s "
       "both directions, 700 W)"},
      {{"H200", "GH200"}, 989.4e12, 4.8e12, 450e9, 700.0, "ib-ndr-8x",
       "NVIDIA H200 Tensor Core GPU datasheet (SXM: 989 TFLOP/s dense BF16, 4.8 TB/s HBM3e, NVLink 900 GB/s both "
       "directions, 700 W)"},
      {{"A100", "A100-80GB"}, 312e12, 2.039e12, 300e9, 400.0, "ib-hdr-8x",
       "NVIDIA A100 Tensor Core GPU datasheet (SXM 80GB: 312 TFLOP/s dense BF16, 2,039 GB/s HBM2e, NVLink 600 GB/s "
       "both directions, 400 W)"},
      {{"A100-40GB"}, 312e12, 1.555e12, 300e9, 400.0, "ib-hdr-8x",
       "NVIDIA A100 Tensor Core GPU datasheet (SXM 40GB: 312 TFLOP/s dense BF16, 1,555 GB/s HBM2, NVLink 600 GB/s "
       "both directions, 400 W)"},
      {{"V100", "V100-32GB", "V100-16GB"}, 125e12, 900e9, 150e9, 300.0, "ib-edr-4x",
       "NVIDIA V100 Tensor Core GPU datasheet (SXM2: 125 TFLOP/s FP16 tensor cores, no BF16; 900 GB/s HBM2, NVLink "
       "300 GB/s both directions, 300 W)"},
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

// What reaches the hardware's figures: large bf16 GEMMs with cuBLAS 55-72% of the dense peak and attention-shaped
// (64-wide) products 30-45% (the H100 step model's ranges, and on an H200 one TP=8 shard of T5-v1.1-XXL ran at 36.8%
// MFU inside its predicted 34-42%: docs/BENCHMARKS.md); bandwidth-bound kernels 80-90% of HBM; NCCL's bus bandwidth
// about 80% of a link's; a step of NCCL's tree 2 us on NVLink.
constexpr double kMatmulEfficiencyBySmallestDim[][2] = {{16, 0.05}, {64, 0.37}, {256, 0.50}, {1024, 0.65},
                                                        {4096, 0.72}};
constexpr double kBandwidthEfficiency = 0.85;
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
  if (!(op_latency_s >= 0)) out.push_back("op_latency_s: must be >= 0");
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
    r.name = g.names.front() + " + " + ic->name + " (published)";
    r.source = g.source + "; between nodes " + ic->what +
               "; at the efficiencies large GEMMs, attention-shaped products, HBM-bound kernels and NCCL reach "
               "(plan/machine_rates.cpp)";
    for (const auto& [dim, efficiency] : kMatmulEfficiencyBySmallestDim) {
      r.matmul.push_back({static_cast<int64_t>(dim), efficiency * g.dense_peak_flops});
    }
    r.memory_bandwidth_bytes_per_s = kBandwidthEfficiency * g.hbm_bytes_per_s;
    r.op_latency_s = kGpuHostOpLatencyS;
    r.asynchronous_device = true;
    r.power_w_per_device = g.power_w;
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
  j["op_latency_s"] = r.op_latency_s;
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
  check_keys(j, {"schema", "name", "source", "matmul", "memory_bandwidth_bytes_per_s", "op_latency_s", "compute_efficiency",
                 "asynchronous_device", "cores_per_node", "threads_per_rank", "nodes_per_host", "busy_host",
                 "power_w_per_device", "links"},
             where);
  if (!j.contains("schema") || j["schema"] != kSchema) {
    throw Error(msg(where, ": schema: expected \"", kSchema, "\", got ", j.contains("schema") ? j["schema"].dump() : "nothing"));
  }
  MachineRates r;
  r.name = j.value("name", path);
  r.source = j.value("source", std::string("calibrated (") + path + ")");
  if (!j.contains("matmul") || !j["matmul"].is_array()) throw Error(msg(where, ": matmul: expected a list of {min_dim, flops_per_s}"));
  for (size_t i = 0; i < j["matmul"].size(); ++i) {
    const std::string at = msg(where, ": matmul[", i, "]");
    check_keys(j["matmul"][i], {"min_dim", "flops_per_s"}, at);
    r.matmul.push_back({static_cast<int64_t>(number(j["matmul"][i], "min_dim", at)), number(j["matmul"][i], "flops_per_s", at)});
  }
  r.memory_bandwidth_bytes_per_s = number(j, "memory_bandwidth_bytes_per_s", where);
  r.op_latency_s = number(j, "op_latency_s", where);
  if (j.contains("compute_efficiency")) r.compute_efficiency = number(j, "compute_efficiency", where);
  if (j.contains("asynchronous_device")) {
    if (!j["asynchronous_device"].is_boolean()) throw Error(msg(where, ".asynchronous_device: expected true or false"));
    r.asynchronous_device = j["asynchronous_device"].get<bool>();
  }
  if (j.contains("cores_per_node")) r.cores_per_node = static_cast<int64_t>(number(j, "cores_per_node", where));
  if (j.contains("threads_per_rank")) r.threads_per_rank = static_cast<int64_t>(number(j, "threads_per_rank", where));
  if (j.contains("nodes_per_host")) r.nodes_per_host = static_cast<int64_t>(number(j, "nodes_per_host", where));
  if (j.contains("busy_host")) {
    if (!j["busy_host"].is_array()) throw Error(msg(where, ": busy_host: expected a list of {ranks_per_host, slowdown, source}"));
    for (size_t i = 0; i < j["busy_host"].size(); ++i) {
      const std::string at = msg(where, ": busy_host[", i, "]");
      const auto& o = j["busy_host"][i];
      check_keys(o, {"ranks_per_host", "slowdown", "source"}, at);
      r.busy_host.push_back({static_cast<int64_t>(number(o, "ranks_per_host", at)), number(o, "slowdown", at),
                             o.value("source", std::string())});
    }
  }
  if (j.contains("power_w_per_device")) r.power_w_per_device = number(j, "power_w_per_device", where);
  if (j.contains("links")) {
    if (!j["links"].is_array()) throw Error(msg(where, ": links: expected a list"));
    for (size_t i = 0; i < j["links"].size(); ++i) {
      const std::string at = msg(where, ": links[", i, "]");
      const auto& o = j["links"][i];
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
      r.links.push_back(l);
    }
  }
  const std::vector<std::string> problems = r.problems();
  if (!problems.empty()) throw Error(msg(where, ": ", join(problems, "; ")));
  return r;
}

}  // namespace t5scale
