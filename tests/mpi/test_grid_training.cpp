// DESIGN.md invariant 2: parallelism changes nothing but speed. Every grid this world size can form
// (tp x dp = world) trains a small T5 and is compared with one rank training on the same global batch: loss,
// gradient norm, the gathered fp32 gradients after one step, and the gathered weights after one and three
// optimizer steps; also with activation checkpointing, with 4 micro-batches of accumulation against one large
// batch, with ZeRO-1, and with Adafactor (fixed step size; and T5's relative step with the parameter scale and
// momentum), whose row/column means and RMS values span the TP-split dimensions. Weight decay and gradient
// clipping are on, so both take part in what is compared.
#include <gtest/gtest.h>

#include <map>

#include "data/synthetic_task.h"
#include "model/t5_model.h"
#include "mpi_test_support.h"
#include "test_support.h"
#include "core/check.h"
#include "train/parallel_trainer.h"

namespace t5scale {
namespace {

// Every comparison is run twice. In fp64 the grid must give the single-rank result to 1e-12: that is the claim
// that it computes the same function. In fp32 (DESIGN.md's bound: 1e-6, norm-wise per tensor) a grid changes the
// order of sums (row-parallel outputs, DP reductions, sharded norms) and the rounding with it; gradients that pass
// through the softmax's cancellations (attention queries and keys, the position bias) amplify that rounding to
// about 1e-6 in any fp32 run, the single-rank one included. Where the fp32 comparison fails and the single-rank
// fp32 result is itself further than half the bound from its fp64 value, the grid's fp32 result must instead be
// as accurate as the single-rank one (within a factor of 4) against fp64. Each such case is printed.
constexpr double kTolerance = 1e-6;
constexpr double kFp64Tolerance = 1e-12;
constexpr double kReferenceResolves = 0.5 * kTolerance;
constexpr double kRoundingNoiseFactor = 4.0;
constexpr int64_t kGlobalBatch = 16;  // divisible by every dp (1, 2, 4) times 4 micro-batches
constexpr double kLearningRate = 1e-3;

enum class Optimizer { kAdamW, kAdafactor, kAdafactorRelativeStep };

struct Variant {
  std::string name;
  int64_t checkpoint_every = 0;
  int64_t micro_batches = 1;
  bool zero1 = false;
  Optimizer optimizer = Optimizer::kAdamW;
};

ModelConfig grid_model(bool v1_1) {
  ModelConfig c = tiny_model_config(64);
  c.d_model = 32;
  c.d_kv = 8;
  c.num_heads = 4;
  c.d_ff = 64;
  c.num_layers = 2;
  c.num_decoder_layers = 2;
  c.relative_attention_num_buckets = 8;
  c.relative_attention_max_distance = 16;
  c.dropout_rate = 0.0;  // dropout masks differ between grids by design (per-TP-rank streams)
  c.feed_forward = v1_1 ? FeedForwardKind::kGatedGelu : FeedForwardKind::kRelu;
  c.tie_word_embeddings = !v1_1;
  return c;
}

ParallelTrainingOptions training_options(const Variant& variant) {
  ParallelTrainingOptions o;
  o.adamw.weight_decay = 0.01;
  o.max_grad_norm = 0.5;
  o.zero1 = variant.zero1;
  o.bucket_bytes = 8 * 1024;  // several buckets, so reductions overlap backward
  if (variant.optimizer != Optimizer::kAdamW) {
    o.optimizer = OptimizerKind::kAdafactor;
    o.adafactor.weight_decay = 0.01;
  }
  if (variant.optimizer == Optimizer::kAdafactorRelativeStep) {
    o.adafactor.relative_step = true;
    o.adafactor.scale_parameter = true;
    o.adafactor.beta1 = 0.9;
  }
  return o;
}

struct Snapshot {
  std::vector<StepResult> steps;
  std::map<std::string, torch::Tensor> gradients;  // after the first step, full tensors
  std::map<std::string, torch::Tensor> weights;    // after the last step, full tensors
};

Snapshot train_run(const ModelConfig& config, ProcessGrid grid, const Variant& variant, int steps,
                   torch::ScalarType dtype) {
  T5Model model(config, grid.tp, dtype);
  model->initialize_weights(31);
  model->set_activation_checkpointing(variant.checkpoint_every);
  ParallelTrainer trainer(model, grid, training_options(variant));
  SyntheticTaskOptions task_options;
  task_options.vocab_size = config.vocab_size;
  SyntheticTask task(task_options);
  Snapshot snapshot;
  for (int s = 0; s < steps; ++s) {
    const Seq2SeqBatch global = task.next_batch(kGlobalBatch);
    snapshot.steps.push_back(trainer.step(replica_micro_batches(global, trainer.grid(), variant.micro_batches), kLearningRate));
    if (s == 0) {
      const auto& slots = trainer.gradients().slots();
      for (size_t k = 0; k < slots.size(); ++k) {
        snapshot.gradients[slots[k].name] =
            testing::gather_shards(trainer.gradients().gathered_grad(k), slots[k].layout, *trainer.grid().tp);
      }
    }
  }
  auto params = model->named_parameters();
  for (const ParameterLayout& layout : model->parameter_layouts()) {
    snapshot.weights[layout.name] = testing::gather_shards(params[layout.name], layout, *trainer.grid().tp);
  }
  return snapshot;
}

struct Reference {
  Snapshot fp32, fp64;
};

Reference single_rank_run(const ModelConfig& config, int steps, Optimizer optimizer) {
  const Variant one_batch{"single rank", 0, 1, false, optimizer};
  return {train_run(config, ProcessGrid::solo(), one_batch, steps, torch::kFloat32),
          train_run(config, ProcessGrid::solo(), one_batch, steps, torch::kFloat64)};
}

// Every quantity a snapshot holds, by name, as tensors.
std::map<std::string, torch::Tensor> quantities(const Snapshot& s, bool with_gradients) {
  std::map<std::string, torch::Tensor> out;
  for (size_t i = 0; i < s.steps.size(); ++i) {
    const std::string step = "step " + std::to_string(i + 1);
    out[step + " loss"] = torch::tensor({s.steps[i].loss}, torch::kFloat64);
    out[step + " grad norm"] = torch::tensor({s.steps[i].grad_norm}, torch::kFloat64);
  }
  if (with_gradients) {
    for (const auto& [name, grad] : s.gradients) out["grad " + name] = grad;
  }
  for (const auto& [name, weight] : s.weights) out["weight " + name] = weight;
  return out;
}

void print_on_rank0(const std::string& line) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) std::printf("%s\n", line.c_str());
}

// The grid's fp32 and fp64 snapshots against the single-rank ones, by the rule stated at the top of the file.
void expect_same(const Snapshot& got32, const Snapshot& got64, const Reference& want, const std::string& what,
                 bool compare_gradients) {
  ASSERT_EQ(got32.steps.size(), want.fp32.steps.size());
  for (size_t s = 0; s < want.fp32.steps.size(); ++s) {
    EXPECT_EQ(got32.steps[s].target_tokens, want.fp32.steps[s].target_tokens);
  }
  const auto a32 = quantities(got32, compare_gradients), a64 = quantities(got64, compare_gradients);
  const auto r32 = quantities(want.fp32, compare_gradients), r64 = quantities(want.fp64, compare_gradients);
  ASSERT_EQ(a32.size(), r32.size());
  double worst32 = 0.0, worst64 = 0.0;
  std::string worst32_name;
  int ill_conditioned = 0;
  for (const auto& [name, reference] : r32) {
    const auto fp64_check = testing::tensors_close(what + " fp64: " + name, a64.at(name), r64.at(name), kFp64Tolerance);
    EXPECT_TRUE(fp64_check);
    worst64 = std::max(worst64, testing::compare(a64.at(name), r64.at(name)).norm_rel_error);

    const auto direct = testing::tensors_close(what + " fp32: " + name, a32.at(name), reference, kTolerance);
    const double error = testing::compare(a32.at(name), reference).norm_rel_error;
    if (error >= worst32) {
      worst32 = error;
      worst32_name = name;
    }
    const double reference_error = testing::compare(reference, r64.at(name)).norm_rel_error;
    if (direct || reference_error <= kReferenceResolves) {
      EXPECT_TRUE(direct);
      continue;
    }
    const double our_error = testing::compare(a32.at(name), r64.at(name)).norm_rel_error;
    ++ill_conditioned;
    print_on_rank0(msg("  ", what, ": ", name, " ill-conditioned in fp32: single rank fp32 vs fp64 ", reference_error,
                       ", grid fp32 vs fp64 ", our_error, ", grid vs single rank fp32 ", error));
    EXPECT_LE(our_error, kRoundingNoiseFactor * reference_error) << what << ": " << name;
  }
  print_on_rank0(msg(what, ": fp32 worst norm rel error ", worst32, " (", worst32_name, "), ", ill_conditioned,
                     " ill-conditioned; fp64 worst ", worst64));
}

class GridTraining : public ::testing::TestWithParam<Variant> {};

TEST_P(GridTraining, OneStepEqualsOneRank) {
  for (bool v1_1 : {false, true}) {
    const ModelConfig config = grid_model(v1_1);
    const Reference reference = single_rank_run(config, 1, GetParam().optimizer);
    EXPECT_GT(reference.fp32.steps[0].grad_norm, training_options(GetParam()).max_grad_norm)
        << "clipping should be active";
    for (int tp : testing::tp_sizes_for_world()) {
      const ProcessGrid grid = testing::make_grid(tp);
      const std::string what = std::string(v1_1 ? "v1.1 " : "v1.0 ") + std::to_string(grid.tp_size) + "x" +
                               std::to_string(grid.dp_size) + " " + GetParam().name + ", 1 step";
      expect_same(train_run(config, grid, GetParam(), 1, torch::kFloat32),
                  train_run(config, grid, GetParam(), 1, torch::kFloat64), reference, what, /*compare_gradients=*/true);
    }
  }
}

TEST_P(GridTraining, ThreeStepsEqualOneRank) {
  const ModelConfig config = grid_model(true);
  const Reference reference = single_rank_run(config, 3, GetParam().optimizer);
  for (int tp : testing::tp_sizes_for_world()) {
    const ProcessGrid grid = testing::make_grid(tp);
    const std::string what = "v1.1 " + std::to_string(grid.tp_size) + "x" + std::to_string(grid.dp_size) + " " +
                             GetParam().name + ", 3 steps";
    expect_same(train_run(config, grid, GetParam(), 3, torch::kFloat32),
                train_run(config, grid, GetParam(), 3, torch::kFloat64), reference, what, /*compare_gradients=*/false);
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, GridTraining,
                         ::testing::Values(Variant{"plain", 0, 1, false},
                                           Variant{"checkpointing", 1, 1, false},
                                           Variant{"accumulation", 0, 4, false},
                                           Variant{"zero1", 0, 1, true},
                                           Variant{"all", 1, 4, true},
                                           Variant{"adafactor", 0, 1, false, Optimizer::kAdafactor},
                                           Variant{"adafactor_relative_step", 1, 4, false,
                                                   Optimizer::kAdafactorRelativeStep}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace t5scale
