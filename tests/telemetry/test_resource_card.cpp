// The resource card from figures worked out by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "telemetry/resource_card.h"

namespace t5scale {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

// Sets /summary's figure `name` (added when absent).
void set_figure(ResourceCardFigures& f, const std::string& name, const Hdf5Value& value) {
  for (auto& [key, v] : f.summary) {
    if (key == name) {
      v = value;
      return;
    }
  }
  f.summary.emplace_back(name, value);
}

ResourceCardFigures two_gpu_nodes() {
  ResourceCardFigures f;
  f.run_name = "xl-4n";
  f.world_size = 16;
  f.tp = 4;
  f.dp = 4;
  f.nodes = 2;
  f.on_gpu = true;
  f.device_names = "NVIDIA H100 80GB HBM3";
  f.charging.price_per_node_hour_usd = 2.5;
  f.charging.nodes = 2;
  f.charging.node_share_fraction = 1.0;
  f.charging.allocated_gpus_per_node = 8;
  f.node_share_basis = "8 of 8 GPUs (held: SLURM_GPUS_ON_NODE; the node's: NVML)";
  f.gpu_energy_source = "nvml_energy_counter";
  f.cpu_energy_source = "none";
  f.pue = 1.5;
  f.carbon_intensity_g_per_kwh = 400.0;
  f.peak_flops_per_device = 989e12;
  f.telemetry_time_s = 3.0;  // 30000 us per step, 0.1% of the step time
  f.run_file_path = "results/xl/xl-4n.h5";
  f.summary = {{"status", std::string("completed")},
               {"wall_time_s", 3600.0},
               {"train_time_s", 3000.0},  // 100 samples/s, 51200 tokens/s
               {"eval_time_s", 500.0},
               {"steps_completed", int64_t{100}},
               {"samples_total", int64_t{300000}},
               {"tokens_total", int64_t{153600000}},
               {"gpu_energy_kwh", 1.0},  // 3600 kJ
               {"cpu_energy_kwh", std::numeric_limits<double>::quiet_NaN()},
               {"energy_kwh", 1.5},  // x PUE 1.5, x 400 g/kWh: 0.6 kg
               {"cost_usd", 5.0},    // 2 nodes x 1 h at 2.5 USD: 2 node-hours
               {"co2_kg", 0.6},
               {"estimated_energy_kwh", std::numeric_limits<double>::quiet_NaN()},
               {"estimated_co2_kg", std::numeric_limits<double>::quiet_NaN()},
               {"energy_estimate_method", std::string("")},
               {"mean_step_time_s", 30.0},
               {"mean_mfu", 0.4},
               {"peak_memory_bytes", 60.5 * kGiB},
               {"mean_memory_allocated_bytes", 40.0 * kGiB},
               {"peak_host_memory_bytes", 3.0 * kGiB},
               {"total_flops", 1.5e15}};
  return f;
}

bool has_line(const std::string& card, const std::string& line) {
  return card.find(line + "\n") != std::string::npos;
}

TEST(ResourceCard, FiguresWorkedOutByHand) {
  const std::string card = resource_card(two_gpu_nodes());
  EXPECT_TRUE(has_line(card, "---- resource card: xl-4n (completed) ----")) << card;
  EXPECT_TRUE(has_line(card, "grid            16 GPU ranks = tp 4 x dp 4 on 2 node(s); NVIDIA H100 80GB HBM3")) << card;
  EXPECT_TRUE(has_line(card, "duration        3600.0 s wall (3000.0 s training, 500.0 s evaluation)")) << card;
  EXPECT_TRUE(has_line(card, "cost            5.0000 USD (2.50 USD per node-hour x 2.0000 node-hours: 2 node(s) x 8 "
                             "of 8 GPUs (held: SLURM_GPUS_ON_NODE; the node's: NVML))"))
      << card;
  EXPECT_TRUE(has_line(card, "cost low-prio   unknown (cost.low_priority_price_per_node_hour_usd not set)")) << card;
  EXPECT_TRUE(has_line(card, "memory          40.00 GiB mean allocated (over ranks), 60.50 GiB peak allocated (max "
                             "over GPUs); host peak resident set 3.00 GiB (max over ranks)"))
      << card;
  EXPECT_TRUE(has_line(card, "GPU energy      3600.000000 kJ (nvml_energy_counter)")) << card;
  EXPECT_TRUE(has_line(card, "CPU energy      not measured (RAPL not readable)")) << card;
  EXPECT_TRUE(has_line(card, "emissions       0.600000 kg CO2eq (1.000000 kWh x PUE 1.50 x 400 g/kWh; measured "
                             "sources only)"))
      << card;
  EXPECT_TRUE(has_line(card, "throughput      100.0 samples/s, 51200 tokens/s, 30.000 s per step (100 steps)")) << card;
  EXPECT_TRUE(has_line(card, "FLOPs           1.500e+15 model FLOPs in total, MFU 40.000000%")) << card;
  EXPECT_TRUE(has_line(card, "telemetry       30000 us per step, 0.100% of the step time")) << card;
  EXPECT_TRUE(has_line(card, "run file        results/xl/xl-4n.h5")) << card;
}

TEST(ResourceCard, CpuRanksWithoutMetersOrPrices) {
  ResourceCardFigures f = two_gpu_nodes();
  f.on_gpu = false;
  f.world_size = 4;
  f.charging.price_per_node_hour_usd = 0.0;
  f.charging.allocated_gpus_per_node = 0;
  f.node_share_basis = "the whole node (a CPU job outside a Slurm allocation: SLURM_CPUS_ON_NODE is not set)";
  f.gpu_energy_source = "none";
  f.peak_flops_per_device = 0.0;
  set_figure(f, "gpu_energy_kwh", std::numeric_limits<double>::quiet_NaN());
  set_figure(f, "energy_kwh", std::numeric_limits<double>::quiet_NaN());
  set_figure(f, "co2_kg", std::numeric_limits<double>::quiet_NaN());
  set_figure(f, "cost_usd", std::numeric_limits<double>::quiet_NaN());
  f.low_priority_price_per_node_hour_usd = 0.5;  // without the dedicated price: 2 whole nodes x the wall time of 1 h
  const std::string card = resource_card(f);
  EXPECT_TRUE(has_line(card, "cost            unknown (neither cost.price_per_node_hour_usd nor "
                             "cost.price_per_gpu_hour_usd set)"))
      << card;
  EXPECT_TRUE(has_line(card, "cost low-prio   1.0000 USD (0.50 USD per node-hour x 2.0000 node-hours)")) << card;
  EXPECT_TRUE(
      has_line(card, "memory          host peak resident set 3.00 GiB (max over 4 CPU ranks; no device memory)"))
      << card;
  EXPECT_TRUE(has_line(card, "GPU energy      none (CPU ranks)")) << card;
  // Nothing measured: unknown, with the estimate beside it as one (never "0.000000 kg").
  EXPECT_EQ(card.find("0.000000 kg"), std::string::npos) << card;
  EXPECT_TRUE(has_line(card, "emissions       unknown (no energy measured)")) << card;
  set_figure(f, "estimated_energy_kwh", 1.5);  // 1 kWh x PUE 1.5, x 400 g/kWh: 0.6 kg
  set_figure(f, "estimated_co2_kg", 0.6);
  set_figure(f, "energy_estimate_method", std::string("CodeCarbon constant mode, per node: ..."));
  const std::string estimated = resource_card(f);
  EXPECT_TRUE(has_line(estimated, "emissions       unknown (no energy measured); estimated 0.600000 kg CO2eq (1.000000 "
                                  "kWh x PUE 1.50 x 400 g/kWh)"))
      << estimated;
  EXPECT_TRUE(has_line(estimated, "energy estimate CodeCarbon constant mode, per node: ...")) << estimated;
  EXPECT_TRUE(has_line(card, "FLOPs           1.500e+15 model FLOPs in total, MFU n/a (no peak known for this device)"))
      << card;
  EXPECT_EQ(gib_text(std::numeric_limits<double>::quiet_NaN()), "n/a");
}

// An evaluation-only run: no steps and no training time. Its rates are unknown and say so; nothing prints NaN.
TEST(ResourceCard, NoTrainingStepsGivesNoRates) {
  ResourceCardFigures f = two_gpu_nodes();
  f.telemetry_time_s = 0.0;
  set_figure(f, "train_time_s", 0.0);
  set_figure(f, "steps_completed", int64_t{0});
  set_figure(f, "samples_total", int64_t{0});
  set_figure(f, "tokens_total", int64_t{0});
  set_figure(f, "mean_step_time_s", std::numeric_limits<double>::quiet_NaN());
  set_figure(f, "mean_mfu", std::numeric_limits<double>::quiet_NaN());
  set_figure(f, "total_flops", 0.0);
  const std::string card = resource_card(f);
  EXPECT_TRUE(has_line(card, "throughput      n/a (no training steps)")) << card;
  EXPECT_TRUE(has_line(card, "FLOPs           0.000e+00 model FLOPs in total, MFU n/a (no training steps)")) << card;
  EXPECT_TRUE(has_line(card, "telemetry       n/a (no training steps)")) << card;
  EXPECT_EQ(card.find("nan"), std::string::npos) << card;
  EXPECT_EQ(card.find("inf"), std::string::npos) << card;
}

// A job on 1 of a node's 4 GPUs is charged a quarter of the node's price; at a price per GPU-hour, its GPU; with the
// node's GPUs unknown, nothing.
TEST(ResourceCard, ASharedNodeIsChargedItsShare) {
  ResourceCardFigures f = two_gpu_nodes();
  f.world_size = 1;
  f.tp = 1;
  f.dp = 1;
  f.nodes = 1;
  f.charging.price_per_node_hour_usd = 16.0;
  f.charging.nodes = 1;
  f.charging.node_share_fraction = 0.25;
  f.charging.allocated_gpus_per_node = 1;
  f.node_share_basis = "1 of 4 GPUs (held: SLURM_GPUS_ON_NODE; the node's: NVML)";
  f.low_priority_price_per_node_hour_usd = 4.0;
  set_figure(f, "cost_usd", 4.0);  // 16 USD x 1/4 x 1 h, as /summary computes it
  const std::string card = resource_card(f);
  EXPECT_TRUE(has_line(card, "cost            4.0000 USD (16.00 USD per node-hour x 0.2500 node-hours: 1 node(s) x 1 "
                             "of 4 GPUs (held: SLURM_GPUS_ON_NODE; the node's: NVML))"))
      << card;
  EXPECT_TRUE(has_line(card, "cost low-prio   1.0000 USD (4.00 USD per node-hour x 0.2500 node-hours)")) << card;

  f.charging.price_per_node_hour_usd = 0.0;
  f.charging.price_per_gpu_hour_usd = 3.0;
  set_figure(f, "cost_usd", 3.0);
  EXPECT_TRUE(has_line(resource_card(f), "cost            3.0000 USD (3.00 USD per GPU-hour x 1.0000 GPU-hours)"))
      << resource_card(f);

  f.charging.price_per_gpu_hour_usd = 0.0;
  f.charging.price_per_node_hour_usd = 16.0;
  f.charging.node_share_fraction = std::numeric_limits<double>::quiet_NaN();
  f.node_share_basis = "unknown: 1 GPUs held (SLURM_GPUS_ON_NODE) of a node whose GPUs were not counted (set "
                       "cost.node_gpus)";
  set_figure(f, "cost_usd", std::numeric_limits<double>::quiet_NaN());
  const std::string unknown = resource_card(f);
  EXPECT_TRUE(has_line(unknown, "cost            unknown (node share unknown: 1 GPUs held (SLURM_GPUS_ON_NODE) of a "
                                "node whose GPUs were not counted (set cost.node_gpus))"))
      << unknown;
  EXPECT_TRUE(has_line(unknown, "cost low-prio   unknown (node share unknown: 1 GPUs held (SLURM_GPUS_ON_NODE) of a "
                                "node whose GPUs were not counted (set cost.node_gpus))"))
      << unknown;
}

}  // namespace
}  // namespace t5scale
