// The step-time model's arithmetic and the machine rates it runs on: the alpha-beta collectives, the matmul rate by
// shape class, the rates file (every problem named with the file and the key), the published figures, and what the
// model must do whatever the rates: phases that add up, accumulation that multiplies, sequence parallelism's
// traffic, overlap only where the device is asynchronous, a node's NICs shared by its ranks. How close it comes to
// measured steps is in the README's table (bench: t5scale-bench --calibrate, then the demo).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "config/model_config.h"
#include "core/check.h"
#include "plan/machine_rates.h"
#include "plan/step_time_model.h"

namespace t5scale {
namespace {

MachineRates flat_rates() {
  MachineRates r;
  r.name = "test";
  r.matmul = {{16, 1e9}, {256, 16e9}};
  r.memory_bandwidth_bytes_per_s = 1e10;
  r.op_latency_s = 1e-6;
  r.links = {LinkRates{"intra_node", 0, 0, 1e-6, 1e9, false, "test"}};
  return r;
}

StepTimeInputs inputs(int tp, int dp, int64_t rows = 8) {
  StepTimeInputs in;
  in.memory.tp = tp;
  in.memory.dp = dp;
  in.memory.micro_batch = BatchShape{rows, 128, 32};
  in.memory.on_gpu = false;
  in.ranks_per_node = tp * dp;
  return in;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("t5scale-rates-" + std::to_string(::getpid()) + "-" + name)).string();
}

TEST(MachineRates, CollectiveSecondsIsTheAlphaBetaModel) {
  const LinkRates link{"intra_node", 0, 0, 1e-6, 1e9, false, ""};
  // 4 ranks: 2 ceil(log2 4) = 4 latency steps; a ring all-reduce moves 2 (p-1)/p of the bytes, the halves 1 (p-1)/p.
  EXPECT_DOUBLE_EQ(collective_seconds(link, "all_reduce", 1e6, 4), 4e-6 + 2.0 * 0.75 * 1e6 / 1e9);
  EXPECT_DOUBLE_EQ(collective_seconds(link, "reduce_scatter", 1e6, 4), 4e-6 + 0.75 * 1e6 / 1e9);
  EXPECT_DOUBLE_EQ(collective_seconds(link, "all_gather", 1e6, 3), 4e-6 + (2.0 / 3.0) * 1e6 / 1e9);
  EXPECT_EQ(collective_seconds(link, "all_reduce", 1e6, 1), 0.0);
  EXPECT_THROW(collective_seconds(link, "broadcast", 1e6, 2), Error);
}

TEST(MachineRates, MatmulRateFollowsTheSmallestDimensionInLogBetweenMeasuredClasses) {
  const MachineRates r = flat_rates();
  EXPECT_DOUBLE_EQ(r.matmul_rate(4), 1e9);     // below the first class: its rate
  EXPECT_DOUBLE_EQ(r.matmul_rate(4096), 16e9);  // above the last
  EXPECT_NEAR(r.matmul_rate(64), 4e9, 1e-3);    // halfway in log(16..256): the geometric mean
  // (1000 x 64) @ (64 x 2000): the 64-wide class.
  EXPECT_NEAR(r.matmul_seconds(1000, 2000, 64), 2.0 * 1000 * 2000 * 64 / 4e9, 1e-12);
}

TEST(MachineRates, FusedAttentionIsTimedOnItsPaddedTilesAndChosenByHeadDimension) {
  MachineRates r = flat_rates();
  r.fused_attention = {{"memory_efficient", 64, 64, 64, 64, 64, 1e12, 5e11, "d 64"},
                       {"memory_efficient", 128, 64, 128, 128, 128, 2e12, 1e12, "d 128"}};
  const FusedAttentionRate* d128 = r.fused_attention_rate("memory_efficient", 128);
  ASSERT_NE(d128, nullptr);
  EXPECT_EQ(r.fused_attention_rate("memory_efficient", 64)->source, "d 64");
  EXPECT_EQ(r.fused_attention_rate("memory_efficient", 96), d128);  // the smallest entry that holds it
  EXPECT_EQ(r.fused_attention_rate("memory_efficient", 256), nullptr);
  EXPECT_EQ(r.fused_attention_rate("flash", 64), nullptr);
  // 147 queries fill three forward tiles of 64 (192), 147 keys two of 128 (256): as long as 192 x 256.
  EXPECT_DOUBLE_EQ(d128->forward_seconds(10, 147, 147, 128), d128->forward_seconds(10, 192, 256, 128));
  EXPECT_DOUBLE_EQ(d128->forward_seconds(10, 192, 256, 128), 4.0 * 10 * 192 * 256 * 128 / 2e12);
  EXPECT_DOUBLE_EQ(d128->backward_seconds(10, 147, 147, 128), 10.0 * 10 * 256 * 256 * 128 / 1e12);
}

TEST(MachineRates, FileRoundTripsAndNamesTheFileAndTheKeyOfEveryProblem) {
  MachineRates r = flat_rates();
  r.optimizer_bandwidth_bytes_per_s = 3e10;
  r.strided_copy_bandwidth_bytes_per_s = 2e9;
  r.unaligned_matmul_efficiency = 0.25;
  r.device_idle_per_operator_s = 2e-7;
  r.fused_attention = {{"flash", 128, 128, 32, 64, 128, 1e12, 5e11, "measured"}};
  r.compute_efficiency = 0.8;
  r.cores_per_node = 2;
  r.nodes_per_host = 3;
  r.busy_host = {{2, 1.2, "two at once"}, {4, 1.5, "four at once"}};
  r.links.push_back(LinkRates{"inter_node", 4, 2, 5e-6, 2e9, true, "network"});
  const std::string path = temp_path("ok.json");
  write_machine_rates(r, path);
  const MachineRates back = read_machine_rates(path);
  EXPECT_EQ(back.matmul.size(), 2u);
  EXPECT_DOUBLE_EQ(back.matmul[1].flops_per_s, 16e9);
  EXPECT_DOUBLE_EQ(back.compute_efficiency, 0.8);
  EXPECT_DOUBLE_EQ(back.optimizer_bandwidth(), 3e10);
  EXPECT_DOUBLE_EQ(back.strided_copy_bandwidth(), 2e9);
  EXPECT_DOUBLE_EQ(back.unaligned_matmul_efficiency, 0.25);
  EXPECT_DOUBLE_EQ(back.device_idle_per_operator_s, 2e-7);
  ASSERT_EQ(back.fused_attention.size(), 1u);
  EXPECT_EQ(back.fused_attention[0].kernel, "flash");
  EXPECT_EQ(back.fused_attention[0].forward_key_tile, 32);
  EXPECT_DOUBLE_EQ(back.fused_attention[0].backward_flops_per_s, 5e11);
  EXPECT_EQ(back.cores_per_node, 2);
  EXPECT_EQ(back.nodes_per_host, 3);
  ASSERT_EQ(back.busy_host.size(), 2u);
  EXPECT_DOUBLE_EQ(back.busy_host_slowdown(4), 1.5);
  EXPECT_DOUBLE_EQ(back.busy_host_slowdown(3), 1.5);  // nearest in log2: 3 is 0.42 from 4, 0.58 from 2
  EXPECT_DOUBLE_EQ(back.busy_host_slowdown(8), 1.5);
  EXPECT_DOUBLE_EQ(back.busy_host_slowdown(1), 1.0);
  ASSERT_EQ(back.links.size(), 2u);
  EXPECT_TRUE(back.links[1].shared_by_node);
  EXPECT_EQ(back.links[1].ranks_per_node, 4);
  EXPECT_DOUBLE_EQ(back.link("inter_node", 4, 2).latency_s, 5e-6);

  auto expect_error = [&](const std::string& text, const std::string& wanted) {
    const std::string bad = temp_path("bad.json");
    std::ofstream(bad) << text;
    try {
      read_machine_rates(bad);
      ADD_FAILURE() << "no error for " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(wanted), std::string::npos) << e.what();
    }
    std::filesystem::remove(bad);
  };
  std::string json = machine_rates_json(r);
  expect_error("{", "not JSON");
  expect_error(std::string(json).replace(json.find("\"op_latency_s\""), 14, "\"op_latency_us\""), "op_latency_us");
  expect_error(std::string(json).replace(json.find("t5scale-machine-rates/1"), 23, "t5scale-machine-rates/9"), "schema");
  const std::string negative = "\"memory_bandwidth_bytes_per_s\": -1";
  std::string broken = json;
  broken.replace(broken.find("\"memory_bandwidth_bytes_per_s\""),
                 broken.find(',', broken.find("\"memory_bandwidth_bytes_per_s\"")) - broken.find("\"memory_bandwidth_bytes_per_s\""),
                 negative);
  expect_error(broken, "memory_bandwidth_bytes_per_s");
  expect_error(std::string(json).replace(json.find("\"flash\""), 7, "\"cudnn\""), "fused_attention[0].kernel");
  expect_error(std::string(json).replace(json.find("\"forward_key_tile\""), 18, "\"forward_keys_tile\""),
               "forward_keys_tile");
  EXPECT_THROW(read_machine_rates(temp_path("missing.json")), Error);
  std::filesystem::remove(path);
}

TEST(MachineRates, PublishedFiguresByGpuNameWithTheirSources) {
  const auto a100 = published_machine_rates("A100-80GB");
  const auto h200 = published_machine_rates("H200");
  ASSERT_TRUE(a100.has_value() && h200.has_value());
  EXPECT_NE(a100->source.find("datasheet"), std::string::npos);
  // The H200's figures are measured; another GPU's are its datasheet's at the H200's measured shares, and say so.
  EXPECT_NE(h200->name.find("measured"), std::string::npos) << h200->name;
  EXPECT_NE(a100->name.find("scaled"), std::string::npos) << a100->name;
  EXPECT_NEAR(a100->matmul.back().flops_per_s / 312e12, h200->matmul.back().flops_per_s / 989.4e12, 1e-12);
  EXPECT_NEAR(a100->optimizer_bandwidth() / 2.039e12, h200->optimizer_bandwidth() / 4.8e12, 1e-12);
  ASSERT_NE(a100->fused_attention_rate("memory_efficient", 64), nullptr);
  EXPECT_NEAR(a100->fused_attention_rate("flash", 128)->forward_flops_per_s / 312e12,
              h200->fused_attention_rate("flash", 128)->forward_flops_per_s / 989.4e12, 1e-12);
  EXPECT_TRUE(a100->asynchronous_device);
  EXPECT_GT(a100->power_w_per_device, 0.0);
  EXPECT_TRUE(a100->link("inter_node", 8, 4).shared_by_node);
  // The driver's device names find their model; a GPU without figures has none, an unknown interconnect is an error.
  const auto h100 = machine_rates_for("", true, "NVIDIA H100 80GB HBM3");
  ASSERT_TRUE(h100.has_value());
  EXPECT_NE(h100->name.find("H100"), std::string::npos);
  EXPECT_FALSE(machine_rates_for("", true, "Tesla K80").has_value());
  EXPECT_THROW(published_machine_rates("A100", "ib-xdr"), Error);
  EXPECT_FALSE(machine_rates_for("", false, "cpu")->asynchronous_device);
}

TEST(StepTimeModel, PhasesAddUpAndAccumulationMultipliesTheMicroBatches) {
  const ModelConfig model = named_model_config("t5-small");
  const MachineRates rates = flat_rates();
  StepTimeInputs one = inputs(1, 1);
  StepTimeInputs four = one;
  four.grad_accumulation = 4;
  const StepTimePrediction a = predict_step_time(model, one, rates), b = predict_step_time(model, four, rates);
  EXPECT_DOUBLE_EQ(a.total_s, a.forward_s + a.backward_s + a.comm_exposed_s + a.optimizer_s);
  EXPECT_NEAR(b.forward_s, 4.0 * a.forward_s, 1e-12);
  EXPECT_NEAR(b.backward_s, 4.0 * a.backward_s, 1e-12);
  EXPECT_DOUBLE_EQ(b.optimizer_s, a.optimizer_s);  // once a step
  // Backward does twice the forward's products.
  EXPECT_GT(a.backward_s, 1.5 * a.forward_s);
  // The same micro-batches given one by one.
  const StepTimePrediction c = predict_step_time(model, one, rates, std::vector<BatchShape>(4, one.memory.micro_batch));
  EXPECT_NEAR(c.total_s, b.total_s, 1e-12);
  EXPECT_EQ(c.operators, b.operators);
}

TEST(StepTimeModel, FusedAttentionRunsTheKernelSdpaPicksOnTheGpu) {
  // A padded batch gives the cross-attention a mask: the memory-efficient kernel for every attention. Unpadded, the
  // cross-attention has none and runs flash, here timed slower to tell them apart.
  const ModelConfig model = named_model_config("t5-v1_1-base");
  MachineRates rates = *published_machine_rates("H200");
  for (FusedAttentionRate& a : rates.fused_attention) {
    if (a.kernel == "flash") a.forward_flops_per_s /= 10.0, a.backward_flops_per_s /= 10.0;
  }
  StepTimeInputs padded = inputs(1, 1, 16);
  padded.memory.compute_bytes_per_element = 2;
  padded.memory.on_gpu = true;
  StepTimeInputs unpadded = padded;
  unpadded.memory.padded = false;
  const StepTimePrediction p = predict_step_time(model, padded, rates), u = predict_step_time(model, unpadded, rates);
  EXPECT_GT(u.attention_s, p.attention_s);
  EXPECT_EQ(u.matmul_s, p.matmul_s);  // the cores' products are the kernels' own, not products at GEMM rates
  // Without fused kernels in the rates (a rates file of an earlier version) the cores are products again.
  MachineRates bare = rates;
  bare.fused_attention.clear();
  const StepTimePrediction b = predict_step_time(model, padded, bare);
  EXPECT_EQ(b.attention_s, 0.0);
  EXPECT_GT(b.matmul_s, p.matmul_s);
  // The explicit path: the cores' products, and the heads' copies on the GPU's strided bandwidth.
  StepTimeInputs explicit_path = padded;
  explicit_path.memory.fused_attention = false;
  const StepTimePrediction e = predict_step_time(model, explicit_path, rates);
  EXPECT_GT(e.matmul_s, p.matmul_s);
  EXPECT_GT(e.attention_s, 0.0);
  EXPECT_GT(e.elementwise_s, p.elementwise_s);
}

TEST(StepTimeModel, RecomputationCostsTheRecomputedForward) {
  const ModelConfig model = named_model_config("t5-small");
  const MachineRates rates = flat_rates();
  StepTimeInputs none = inputs(1, 1), every = none, selective = none;
  every.memory.checkpoint_every_blocks = 1;
  selective.memory.selective_recomputation = true;
  const StepTimePrediction n = predict_step_time(model, none, rates), e = predict_step_time(model, every, rates),
                           s = predict_step_time(model, selective, rates);
  EXPECT_EQ(n.recompute_s, 0.0);
  EXPECT_GT(e.recompute_s, s.recompute_s);  // every block's forward against the attention cores alone
  EXPECT_GT(s.recompute_s, 0.0);
  EXPECT_NEAR(e.backward_s - n.backward_s, e.recompute_s +
              static_cast<double>(e.operators - n.operators) * rates.op_latency_s, 1e-9);
}

TEST(StepTimeModel, SequenceParallelismMovesTheSameBytesAndSplitsTheResidualStream) {
  const ModelConfig model = named_model_config("t5-v1_1-base");
  MachineRates rates = flat_rates();
  rates.links[0].latency_s = 0.0;  // bandwidth alone: reduce-scatter + all-gather = all-reduce
  StepTimeInputs plain = inputs(4, 1), split = plain;
  split.memory.sequence_parallel = true;
  const StepTimePrediction p = predict_step_time(model, plain, rates), s = predict_step_time(model, split, rates);
  EXPECT_NEAR(s.tp_collectives_s, p.tp_collectives_s, 0.02 * p.tp_collectives_s);
  EXPECT_LT(s.elementwise_s, p.elementwise_s);
  EXPECT_DOUBLE_EQ(s.matmul_s, p.matmul_s);
  // After the step's backward, the norms' gradient parts (12 + 12 blocks: 2 x 12 + 1 + 3 x 12 + 1 = 62 norms of 768)
  // summed over TP in one all-reduce of fp32: exposed, as the trainer runs it after the DP reduction.
  const double norm_sum_s = collective_seconds(rates.links[0], "all_reduce", 4.0 * 62 * 768, 4);
  EXPECT_GT(norm_sum_s, 0.0);
  EXPECT_DOUBLE_EQ(s.comm_exposed_s, p.comm_exposed_s + norm_sum_s);
  // With latency, twice the collectives cost more.
  rates.links[0].latency_s = 1e-5;
  EXPECT_GT(predict_step_time(model, split, rates).tp_collectives_s, predict_step_time(model, plain, rates).tp_collectives_s);
}

TEST(StepTimeModel, DataParallelReductionIsHiddenOnlyBehindAnAsynchronousDevicesBackward) {
  const ModelConfig model = named_model_config("t5-base");
  MachineRates cpu = flat_rates();
  MachineRates gpu = cpu;
  gpu.asynchronous_device = true;
  const StepTimeInputs in = inputs(1, 4, 32);
  const StepTimePrediction on_cpu = predict_step_time(model, in, cpu), on_gpu = predict_step_time(model, in, gpu);
  EXPECT_DOUBLE_EQ(on_cpu.comm_exposed_s, on_cpu.dp_collectives_s);
  EXPECT_GT(on_gpu.dp_collectives_s, 0.0);
  EXPECT_LT(on_gpu.comm_exposed_s, on_gpu.dp_collectives_s);
  // ZeRO-1: a reduce-scatter and an all-gather instead, and a quarter of the optimizer's work.
  StepTimeInputs zero = in;
  zero.memory.zero1 = true;
  const StepTimePrediction z = predict_step_time(model, zero, cpu);
  EXPECT_NEAR(z.optimizer_s - cpu.op_latency_s * kOperatorsPerStepOptimizer,
              (on_cpu.optimizer_s - cpu.op_latency_s * kOperatorsPerStepOptimizer) / 4.0, 1e-9);
}

TEST(StepTimeModel, AGroupAcrossNodesSharesTheNodesNetwork) {
  const ModelConfig model = named_model_config("t5-v1_1-xxl");
  const MachineRates rates = *published_machine_rates("A100-80GB", "ib-hdr-1x");
  StepTimeInputs in = inputs(8, 2, 4);
  in.memory.compute_bytes_per_element = 2;
  in.memory.on_gpu = true;
  in.ranks_per_node = 8;
  in.nodes = 2;
  const StepTimePrediction across = predict_step_time(model, in, rates);
  // One 200 Gb/s NIC (80% of 25 GB/s) shared by 8 ranks: each rank's gradients (fp32) at 2.5 GB/s, a ring of 2.
  const double gradient_bytes = 4.0 * static_cast<double>(parameters_per_rank(model, 8));
  EXPECT_NEAR(across.dp_collectives_s, 2 * 5e-6 + gradient_bytes / (0.8 * 25e9 / 8.0), 1e-6 * across.dp_collectives_s);
  // More NICs, less time.
  const StepTimePrediction eight = predict_step_time(model, in, *published_machine_rates("A100-80GB", "ib-hdr-8x"));
  EXPECT_NEAR(eight.dp_collectives_s * 8.0, across.dp_collectives_s, 0.01 * across.dp_collectives_s);
}

TEST(StepTimeModel, RanksBeyondACpuNodesCoresShareThem) {
  const ModelConfig model = named_model_config("t5-small");
  MachineRates rates = flat_rates();
  rates.cores_per_node = 2;
  StepTimeInputs two = inputs(1, 1), four = two;
  two.ranks_per_node = 2;
  four.ranks_per_node = 4;
  const StepTimePrediction a = predict_step_time(model, two, rates), b = predict_step_time(model, four, rates);
  EXPECT_DOUBLE_EQ(a.compute_share_factor, 1.0);
  EXPECT_DOUBLE_EQ(b.compute_share_factor, 2.0);
  EXPECT_NEAR(b.forward_s, 2.0 * a.forward_s, 1e-12);
}

TEST(StepTimeModel, NodesOfOneHostShareItsCores) {
  // A local cluster: 4 nodes that are namespaces of one 2-core machine. One rank per node on 4 nodes shares the
  // cores as 4 ranks on one node do; on 4 machines of their own, each rank has a core.
  const ModelConfig model = named_model_config("t5-small");
  MachineRates shared = flat_rates();
  shared.cores_per_node = 2;
  shared.nodes_per_host = 4;
  shared.links.push_back(LinkRates{"inter_node", 1, 4, 1e-4, 1e9, false, "test"});
  MachineRates own = shared;
  own.nodes_per_host = 1;
  StepTimeInputs across = inputs(1, 4), one_node = inputs(1, 4), two_nodes = inputs(1, 4);
  across.nodes = 4;
  across.ranks_per_node = 1;
  one_node.ranks_per_node = 4;
  two_nodes.nodes = 2;
  two_nodes.ranks_per_node = 2;
  EXPECT_DOUBLE_EQ(predict_step_time(model, across, shared).compute_share_factor, 2.0);
  EXPECT_DOUBLE_EQ(predict_step_time(model, one_node, shared).compute_share_factor, 2.0);
  EXPECT_DOUBLE_EQ(predict_step_time(model, two_nodes, shared).compute_share_factor, 2.0);
  EXPECT_DOUBLE_EQ(predict_step_time(model, across, own).compute_share_factor, 1.0);
  EXPECT_NEAR(predict_step_time(model, across, shared).forward_s, 2.0 * predict_step_time(model, across, own).forward_s,
              1e-12);
  // The busy host's slowdown with the ranks of the whole machine: 4 here, whichever way they are spread.
  shared.busy_host = {{2, 1.1, "two"}, {4, 1.3, "four"}};
  EXPECT_DOUBLE_EQ(predict_step_time(model, across, shared).compute_share_factor, 2.0 * 1.3);
  EXPECT_DOUBLE_EQ(predict_step_time(model, two_nodes, shared).compute_share_factor, 2.0 * 1.3);
  StepTimeInputs alone = inputs(1, 1);
  alone.ranks_per_node = 1;
  EXPECT_DOUBLE_EQ(predict_step_time(model, alone, shared).compute_share_factor, 1.0);
}

}  // namespace
}  // namespace t5scale
