// t5scale-bench's library on the tiny model on the CPU: the report's figures are present, finite and agree with
// each other and with the cost model; --tp-shard builds exactly rank 0's share of a TP model; collectives of the
// local shard group have the shapes of the real ones; bad input is refused by name. No timed assertions.
#include <gtest/gtest.h>

#include <cmath>

#include "bench/machine_calibration.h"
#include "bench/step_benchmark.h"
#include "dist/local_shard_communicator.h"
#include "model/parameter_layout.h"
#include "plan/cost_model.h"
#include "plan/machine_rates.h"
#include "plan/step_time_model.h"
#include "support/test_support.h"

namespace t5scale {
namespace {

using json = nlohmann::json;

StepBenchmarkOptions tiny_options() {
  StepBenchmarkOptions o;
  o.model = "tiny";
  o.micro_batch = 4;
  o.source_length = 12;
  o.target_length = 7;
  o.steps = 3;
  o.warmup_steps = 1;
  o.dropout_rate = 0.1;  // the dropout paths run too
  return o;
}

void expect_finite_number(const json& value, const std::string& name) {
  ASSERT_TRUE(value.is_number()) << name << " is " << value.dump();
  EXPECT_TRUE(std::isfinite(value.get<double>())) << name << " = " << value.dump();
}

TEST(Bench, ReportOnTinyIsConsistent) {
  const StepBenchmarkOptions o = tiny_options();
  StepBenchmark bench(o);
  const json r = bench.run();
  EXPECT_EQ(r["schema"], "t5scale-bench/1");
  EXPECT_EQ(r["implementation"], "t5scale");
  for (const char* key : {"device", "device_type", "torch_version", "threads", "host", "date"}) {
    EXPECT_TRUE(r["identity"].contains(key)) << key;
  }
  EXPECT_EQ(r["identity"]["device_type"], "cpu");

  const ModelConfig config = bench.model_config();
  EXPECT_EQ(r["config"]["parameters"].get<int64_t>(), parameter_count(config));
  EXPECT_EQ(r["config"]["model_config"]["d_model"].get<int64_t>(), config.d_model);
  EXPECT_EQ(r["config"]["dropout_rate"].get<double>(), 0.1);

  // Every timed step, and only those: finite phases that add up to no more than the step.
  ASSERT_EQ(r["steps"].size(), static_cast<size_t>(o.steps));
  for (const json& step : r["steps"]) {
    double phases = 0.0;
    for (const char* key : {"forward_s", "backward_s", "comm_exposed_s", "optimizer_s"}) {
      expect_finite_number(step[key], key);
      EXPECT_GE(step[key].get<double>(), 0.0) << key;
      phases += step[key].get<double>();
    }
    expect_finite_number(step["total_s"], "total_s");
    expect_finite_number(step["loss"], "loss");
    EXPECT_GT(step["forward_s"].get<double>(), 0.0);
    EXPECT_GT(step["backward_s"].get<double>(), 0.0);
    // The phases are lapped inside the bracket that times the step; 1 ns for the sum's rounding.
    EXPECT_LE(phases, step["total_s"].get<double>() + 1e-9);
    EXPECT_NEAR(step["other_s"].get<double>(), step["total_s"].get<double>() - phases, 1e-9);
  }
  double min_total = INFINITY;
  for (const json& step : r["steps"]) min_total = std::min(min_total, step["total_s"].get<double>());
  EXPECT_EQ(r["min"]["total_s"].get<double>(), min_total);
  EXPECT_LE(r["min"]["total_s"].get<double>(), r["median"]["total_s"].get<double>());

  // Throughput and FLOPs from the median step, tokens as the trainer counts them, FLOPs from the cost model.
  const double step_s = r["median"]["total_s"].get<double>();
  const int64_t tokens = o.micro_batch * (o.source_length + o.target_length);
  EXPECT_EQ(r["tokens_per_step"].get<int64_t>(), tokens);
  EXPECT_DOUBLE_EQ(r["tokens_per_s"].get<double>(), static_cast<double>(tokens) / step_s);
  EXPECT_DOUBLE_EQ(r["samples_per_s"].get<double>(), static_cast<double>(o.micro_batch) / step_s);
  const double flops = training_flops(config, BatchShape{o.micro_batch, o.source_length, o.target_length});
  EXPECT_DOUBLE_EQ(r["model_flops_per_step"].get<double>(), flops);
  EXPECT_DOUBLE_EQ(r["model_tflops_per_s"].get<double>(), flops / step_s / 1e12);
  // A CPU has no datasheet peak: MFU is not guessed.
  EXPECT_TRUE(r["peak_flops_per_device"].is_null());
  EXPECT_EQ(r["peak_flops_source"], "unknown");
  EXPECT_TRUE(r["mfu"].is_null());
  EXPECT_TRUE(r["matmul"].is_null());

  MemoryInputs memory;
  memory.micro_batch = BatchShape{o.micro_batch, o.source_length, o.target_length};
  memory.on_gpu = false;
  EXPECT_EQ(r["memory"]["measured"], "peak_rss");
  EXPECT_EQ(r["memory"]["predicted_bytes"].get<int64_t>(), predict_memory(config, memory).total_bytes());
  EXPECT_GE(r["memory"]["peak_bytes"].get<int64_t>(), r["memory"]["start_bytes"].get<int64_t>());
  EXPECT_GT(r["memory"]["start_bytes"].get<int64_t>(), 0);
}

TEST(Bench, GivenPeakGivesMfuAndMatmulIsMeasured) {
  StepBenchmarkOptions o = tiny_options();
  o.steps = 1;
  o.peak_flops_per_device = 1e12;
  o.measure_matmul = true;
  StepBenchmark bench(o);
  const json r = bench.run();
  EXPECT_EQ(r["peak_flops_source"], "--peak-flops");
  EXPECT_DOUBLE_EQ(r["mfu"].get<double>(),
                   r["model_flops_per_step"].get<double>() / (r["median"]["total_s"].get<double>() * 1e12));
  ASSERT_TRUE(r["matmul"].is_object());
  expect_finite_number(r["matmul"]["tflops_per_s"], "matmul tflops_per_s");
  EXPECT_GT(r["matmul"]["tflops_per_s"].get<double>(), 0.0);
}

// --checkpoint-every-blocks auto takes the cost model's choice for the given memory, runs with it and says so.
TEST(Bench, AutoCheckpointingTakesThePlannersChoice) {
  StepBenchmarkOptions o = tiny_options();
  o.steps = 1;
  o.checkpoint_every_blocks = -1;
  const ModelConfig model = benchmark_model_config("tiny", o.tiny_vocab_size, o.dropout_rate);
  MemoryInputs in;
  in.micro_batch = BatchShape{o.micro_batch, o.source_length, o.target_length};
  in.on_gpu = false;
  for (const double gib : {64.0, 1e-9}) {
    o.device_memory_gib = gib;
    const CheckpointingChoice expected = choose_activation_checkpointing(
        model, in, static_cast<int64_t>(gib * 1024.0 * 1024.0 * 1024.0));
    StepBenchmark bench(o);
    const json r = bench.run();
    EXPECT_EQ(r["config"]["activation_checkpointing"].get<int64_t>(), expected.checkpoint_every_blocks) << gib;
    EXPECT_EQ(r["config"]["activation_checkpointing"].get<int64_t>(), gib > 1.0 ? 0 : 1) << gib;
    bool said = false;
    for (const auto& note : r["notes"]) {
      said = said || note.get<std::string>().rfind("activation checkpointing chosen by the planner: " +
                                                       expected.describe(), 0) == 0;
    }
    EXPECT_TRUE(said) << r["notes"].dump();
  }
}

TEST(Bench, TpShardBuildsRankZerosShareOfTheTpModel) {
  StepBenchmarkOptions o = tiny_options();
  o.tp_shard = 2;
  StepBenchmark bench(o);
  const ModelConfig config = bench.model_config();
  T5Model& model = bench.trainer().model();

  int64_t parameters = 0;
  for (const auto& p : model->parameters()) parameters += p.numel();
  EXPECT_EQ(parameters, parameters_per_rank(config, 2));

  // Each parameter is rank 0's shard of the TP=1 model initialised from the same seed.
  T5Model full(config, std::make_shared<SoloCommunicator>("tp"));
  full->initialize_weights(o.seed);
  auto full_params = full->named_parameters();
  auto shard_params = model->named_parameters();
  for (const ParameterLayout& layout : model->parameter_layouts()) {
    const torch::Tensor expected = shard_of(full_params[layout.name], layout, 0, 2);
    EXPECT_TRUE(torch::equal(shard_params[layout.name], expected)) << layout.name;
  }

  // The forward pass gives this rank's slice of the logits: (B, T, V / 2).
  const Seq2SeqBatch& batch = bench.batch();
  const torch::Tensor logits =
      model->forward(batch.input_ids, batch.attention_mask, model->shift_right(batch.labels));
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{o.micro_batch, o.target_length, config.vocab_size / 2}));

  const json r = bench.run();
  EXPECT_EQ(r["config"]["parameters"].get<int64_t>(), parameters_per_rank(config, 2));
  EXPECT_DOUBLE_EQ(r["model_flops_per_step"].get<double>(),
                   training_flops(config, BatchShape{o.micro_batch, o.source_length, o.target_length}) / 2.0);
  bool says_excluded = false;
  for (const auto& note : r["notes"]) {
    says_excluded = says_excluded || note.get<std::string>().find("communication excluded (tp-shard 2)") == 0;
  }
  EXPECT_TRUE(says_excluded) << r["notes"].dump();
  for (const json& step : r["steps"]) expect_finite_number(step["loss"], "loss");
}

TEST(Bench, LocalShardCollectivesHaveTheShapesOfTheRealOnes) {
  LocalShardCommunicator group(4, "tp");
  EXPECT_EQ(group.size(), 4);
  EXPECT_EQ(group.rank(), 0);
  const torch::Tensor x = torch::arange(24, torch::kFloat32).reshape({2, 12});

  torch::Tensor reduced = x.clone();
  group.all_reduce_sum(reduced);
  group.all_reduce_max(reduced);
  group.all_reduce_sum_async(reduced)->wait();
  EXPECT_TRUE(torch::equal(reduced, x));

  const torch::Tensor gathered = group.all_gather(x);  // (4, 2, 12)
  EXPECT_EQ(gathered.sizes(), (std::vector<int64_t>{4, 2, 12}));
  EXPECT_TRUE(gathered.is_contiguous());
  for (int64_t r = 0; r < 4; ++r) EXPECT_TRUE(torch::equal(gathered[r], x));

  const torch::Tensor chunk = group.reduce_scatter_sum(x.reshape({-1}));  // (6)
  EXPECT_TRUE(torch::equal(chunk, torch::arange(6, torch::kFloat32)));
  torch::Tensor async_chunk = torch::zeros({6});
  group.reduce_scatter_sum_async(x.reshape({-1}), async_chunk)->wait();
  EXPECT_TRUE(torch::equal(async_chunk, chunk));

  torch::Tensor wrong = torch::zeros({5});
  EXPECT_NE(testing::error_of([&] { group.reduce_scatter_sum_async(x.reshape({-1}), wrong); }).find("chunk of 6"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { group.reduce_scatter_sum(torch::zeros({7})); }).find("not divisible"),
            std::string::npos);
}

TEST(Bench, BadInputIsRefusedByName) {
  const std::string unknown = testing::error_of([] { benchmark_model_config("t5-smal", 32, -1.0); });
  EXPECT_NE(unknown.find("--model: unknown model 't5-smal'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("did you mean 't5-small'"), std::string::npos) << unknown;

  StepBenchmarkOptions o = tiny_options();
  o.tp_shard = 3;  // tiny has 4 heads
  const std::string grid = testing::error_of([&] { StepBenchmark bench(o); });
  EXPECT_NE(grid.find("--tp-shard 3"), std::string::npos) << grid;
  EXPECT_NE(grid.find("not divisible by tp 3"), std::string::npos) << grid;

  o = tiny_options();
  o.source_length = 0;
  EXPECT_NE(testing::error_of([&] { StepBenchmark bench(o); }).find("--source-length"), std::string::npos);
  EXPECT_NE(testing::error_of([] { parse_precision("fp8"); }).find("'fp8'"), std::string::npos);
}

// --profile: more steps after the timed ones, under the profiler; its report holds the optimizer's kernels.
TEST(Bench, ProfileRunsAfterTheTimedSteps) {
  StepBenchmarkOptions o = tiny_options();
  o.steps = 1;
  o.warmup_steps = 0;
  o.profile_steps = 1;
  StepBenchmark bench(o);
  const json report = bench.run();
  ASSERT_TRUE(report["profile"].is_object()) << report.dump(1);
  EXPECT_EQ(report["profile"]["steps"], 1);
  bool optimizer = false;
  for (const auto& c : report["profile"]["classes"]) optimizer = optimizer || c["class"] == "optimizer";
  EXPECT_TRUE(optimizer) << "a training step's profile holds its optimizer: " << report["profile"].dump(1);
  EXPECT_EQ(report["steps"].size(), 1u) << "the profiled step is not one of the timed ones";
}

// --calibrate's host memory bandwidth: a figure a memory system can have (above 100 MB/s, below 10 TB/s: a DDR
// channel gives about 20 GB/s, a whole node under 2 TB/s), kept by the rates file, and what the planner's offloaded
// update then runs at: twice the bandwidth, half the host update (the A100's published rates otherwise).
TEST(Bench, HostMemoryBandwidthGoesIntoTheRatesFileAndThePlan) {
  const double measured = measure_host_memory_bandwidth(int64_t{16} << 20, 3);
  EXPECT_GT(measured, 1e8);
  EXPECT_LT(measured, 1e13);
  MachineRates rates = *published_machine_rates("A100-80GB");
  rates.host_memory_bandwidth_bytes_per_s = measured;
  rates.host_cores_per_node = 0;  // the bandwidth alone bounds the update
  testing::TempDir dir;
  const std::string path = (dir.path() / "rates.json").string();
  write_machine_rates(rates, path);
  const MachineRates read = read_machine_rates(path);
  EXPECT_EQ(read.host_memory_bandwidth_bytes_per_s, measured);
  StepTimeInputs in;
  in.memory.on_gpu = true;
  in.memory.offload_optimizer = true;
  in.memory.adafactor = true;
  in.memory.compute_bytes_per_element = 2;
  in.memory.micro_batch = {1, 64, 16};
  const ModelConfig model = tiny_model_config(64);
  const double once = predict_step_time(model, in, read).host_update_s;
  MachineRates doubled = read;
  doubled.host_memory_bandwidth_bytes_per_s *= 2;
  EXPECT_GT(once, 0.0);
  EXPECT_DOUBLE_EQ(predict_step_time(model, in, doubled).host_update_s, once / 2);
  EXPECT_THROW(measure_host_memory_bandwidth(16, 1), Error);
}

}  // namespace
}  // namespace t5scale
