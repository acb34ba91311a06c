// docs/ARCHITECTURE.md, invariant 2: parallelism changes nothing but speed. Every grid this world size can form
// (tp x dp = world) trains a small T5 and is compared with one rank training on the same global batch: loss, gradient
// norm, the gathered fp32 gradients after one step, and the gathered weights after one step (T5 v1.0) and after three
// (v1.1); also with activation checkpointing, with 4 micro-batches of accumulation against one large batch, with ZeRO-1
// and ZeRO-2, and with Adafactor (fixed step size; and T5's relative step with the parameter scale and momentum), whose
// row/column means and RMS values span the TP-split dimensions; and with sequence parallelism (with checkpointing,
// accumulation and ZeRO-2, and with selective recomputation), its batches padded to lengths every TP size splits.
// Weight decay and gradient clipping are on, so both take part in what is compared. And a checkpoint written on any
// grid continues on any other grid (ZeRO-1 on or off on either side) exactly as on its own (GridResharding, at the
// end).
#include <gtest/gtest.h>

#include <ATen/Version.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <tuple>

#include "core/check.h"
#include "core/ignore_index.h"
#include "io/sharded_checkpoint.h"
#include "model/t5_model.h"
#include "mpi_test_support.h"
#include "support/synthetic_task.h"
#include "support/test_support.h"
#include "train/optimizer_resharding.h"
#include "train/parallel_trainer.h"

namespace t5scale {
namespace {

// Every comparison is run twice. In fp64 the grid must give the single-rank result to 1e-12: that is the claim
// that it computes the same function. In fp32 a grid changes the order of sums (row-parallel outputs, DP
// reductions, sharded norms) and the rounding with it, and how far that rounding carries depends on the quantity
// (gradients through the softmax's cancellations, Adam's normalisation of near-zero gradients) and on the CPU's
// kernels (AVX2 and AVX-512 sum in other orders): no fixed bound holds on every machine. So each fp32 quantity is
// bounded by the rounding measured on the reference itself: the single-rank fp32 run against its fp64 twin gives
// that quantity's fp32 noise on this CPU, and the grid's fp32 result must be as accurate against fp64 as that,
// within a factor of 4 (the grid is another sample of the same rounding), of that noise or of a floor of 2e-6,
// whichever is larger. The floor: one sample of the noise can be small by chance where the rounding is heavy-tailed,
// as in the weights after Adam's first step, which divides each gradient by its own size (an element whose
// gradient is near Adam's eps moves by up to the learning rate on a rounding change). Measured here (Xeon with
// AVX-512), over every grid of 4 ranks and ATEN_CPU_CAPABILITY avx512, avx2 and default: the worst grid error was
// 3.1e-6 against fp64 (v1.1 2x2, encoder.blocks.1.self_attn.q.weight) where the single rank's was 5.4e-7, 0.38 of
// its bound; the single rank's own errors reach 3.8e-6 (decoder.blocks.0.self_attn.k.weight). A real error is
// orders above this: GridCheck below feeds the check a dropped DP all-reduce and a gradient scaled by 1/dp, each
// caught at more than 10^4 times its bound.
constexpr double kFp32Floor = 2e-6;
constexpr double kFp64Tolerance = 1e-12;
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
  bool zero2 = false;
  bool sequence_parallel = false;  // batches padded to multiples of 4, which every tp of the world divides
  bool selective_recomputation = false;
  // Each step on the first half of the global batch only: what rank 0 of a dp 2 grid computes when its gradient
  // all-reduce is dropped (GridCheck's injected error; no grid trains this way).
  bool first_half_of_batch = false;
  bool offload_optimizer = false;  // master weights and moments in host memory (GridOffload)
  double max_grad_norm = 0.5;      // 0: no clipping
};

// The batch with its source and target lengths padded up to a multiple of `multiple`, as the trainer's collation pads
// them for sequence parallelism: pad ids under a zero attention mask, ignored labels.
Seq2SeqBatch padded_to_multiple(const Seq2SeqBatch& batch, int64_t multiple) {
  auto pad = [multiple](const torch::Tensor& t, int64_t value) {
    return torch::constant_pad_nd(t, {0, (multiple - t.size(1) % multiple) % multiple}, value);
  };
  return {pad(batch.input_ids, 0), pad(batch.attention_mask, 0), pad(batch.labels, kIgnoreIndex)};
}

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
  o.max_grad_norm = variant.max_grad_norm;
  o.zero1 = variant.zero1 || variant.zero2;
  o.zero2 = variant.zero2;
  o.offload_optimizer = variant.offload_optimizer;
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

// One model training on a grid, one global batch of the synthetic task per step.
class TrainingRun {
 public:
  TrainingRun(const ModelConfig& config, ProcessGrid grid, const Variant& variant, torch::ScalarType dtype,
              uint64_t init_seed = 31)
      : model_(config, grid.tp, dtype),
        task_(task_options(config)),
        micro_batches_(variant.micro_batches),
        sequence_parallel_(variant.sequence_parallel),
        first_half_of_batch_(variant.first_half_of_batch) {
    model_->initialize_weights(init_seed);
    model_->set_activation_checkpointing(variant.checkpoint_every);
    model_->set_sequence_parallel(variant.sequence_parallel);
    model_->set_selective_recomputation(variant.selective_recomputation);
    trainer_ = std::make_unique<ParallelTrainer>(model_, std::move(grid), training_options(variant));
  }

  StepResult step() {
    Seq2SeqBatch global = sequence_parallel_ ? padded_to_multiple(task_.next_batch(kGlobalBatch), 4)
                                             : task_.next_batch(kGlobalBatch);
    if (first_half_of_batch_) {
      const int64_t half = kGlobalBatch / 2;
      global = {global.input_ids.slice(0, 0, half), global.attention_mask.slice(0, 0, half),
                global.labels.slice(0, 0, half)};
    }
    return trainer_->step(replica_micro_batches(global, trainer_->grid(), micro_batches_), kLearningRate);
  }
  void skip_batches(int count) {
    for (int i = 0; i < count; ++i) task_.next_batch(kGlobalBatch);
  }
  // Full tensors, gathered over TP.
  std::map<std::string, torch::Tensor> gradients() {
    std::map<std::string, torch::Tensor> out;
    const auto& slots = trainer_->gradients().slots();
    for (size_t k = 0; k < slots.size(); ++k) {
      out[slots[k].name] =
          testing::gather_shards(trainer_->gradients().gathered_grad(k), slots[k].layout, *trainer_->grid().tp);
    }
    return out;
  }
  std::map<std::string, torch::Tensor> weights() {
    std::map<std::string, torch::Tensor> out;
    auto params = model_->named_parameters();
    for (const ParameterLayout& layout : model_->parameter_layouts()) {
      out[layout.name] = testing::gather_shards(params[layout.name], layout, *trainer_->grid().tp);
    }
    return out;
  }
  ParallelTrainer& trainer() { return *trainer_; }

 private:
  static SyntheticTaskOptions task_options(const ModelConfig& config) {
    SyntheticTaskOptions options;
    options.vocab_size = config.vocab_size;
    return options;
  }

  T5Model model_;
  SyntheticTask task_;
  int64_t micro_batches_;
  bool sequence_parallel_;
  bool first_half_of_batch_;
  std::unique_ptr<ParallelTrainer> trainer_;
};

Snapshot train_run(const ModelConfig& config, ProcessGrid grid, const Variant& variant, int steps,
                   torch::ScalarType dtype) {
  TrainingRun run(config, std::move(grid), variant, dtype);
  Snapshot snapshot;
  for (int s = 0; s < steps; ++s) {
    snapshot.steps.push_back(run.step());
    if (s == 0) snapshot.gradients = run.gradients();
  }
  snapshot.weights = run.weights();
  return snapshot;
}

struct Reference {
  Snapshot fp32, fp64;
};

// padded: on the batches a sequence-parallel variant trains on (at tp 1 sequence parallelism itself does nothing), so
// that its fp32 comparison sees the grid's rounding, not that of other shapes. The variants that share an optimizer
// and batches share this run (checkpointing, accumulation and ZeRO change how a grid trains, not what it must
// equal), so each is computed once per process and kept. This process alone: GridCheck calls it on rank 0 only.
Reference single_rank_run_here(bool v1_1, int steps, Optimizer optimizer, bool padded = false) {
  static std::map<std::tuple<bool, int, Optimizer, bool>, Reference> computed;
  const auto key = std::make_tuple(v1_1, steps, optimizer, padded);
  auto found = computed.find(key);
  if (found == computed.end()) {
    const ModelConfig config = grid_model(v1_1);
    const Variant one_batch{"single rank", 0, 1, false, optimizer, false, padded};
    found = computed
                .emplace(key, Reference{train_run(config, ProcessGrid::solo(), one_batch, steps, torch::kFloat32),
                                        train_run(config, ProcessGrid::solo(), one_batch, steps, torch::kFloat64)})
                .first;
  }
  return found->second;
}

// A snapshot as bytes (what the comparisons read of its steps: loss, gradient norm, target tokens), and back.
std::vector<char> snapshot_bytes(const Snapshot& s) {
  std::vector<double> steps;
  for (const StepResult& step : s.steps) {
    steps.insert(steps.end(), {step.loss, step.grad_norm, static_cast<double>(step.target_tokens)});
  }
  c10::Dict<std::string, torch::Tensor> gradients, weights;
  for (const auto& [name, tensor] : s.gradients) gradients.insert(name, tensor);
  for (const auto& [name, tensor] : s.weights) weights.insert(name, tensor);
  return torch::pickle_save(c10::ivalue::Tuple::create(
      {torch::tensor(steps, torch::kFloat64), c10::IValue(gradients), c10::IValue(weights)}));
}

Snapshot snapshot_from_bytes(const std::vector<char>& bytes) {
  const auto parts = torch::pickle_load(bytes).toTuple()->elements();
  Snapshot s;
  const torch::Tensor steps = parts[0].toTensor();
  for (int64_t i = 0; i + 2 < steps.numel(); i += 3) {
    StepResult step;
    step.loss = steps[i].item<double>();
    step.grad_norm = steps[i + 1].item<double>();
    step.target_tokens = static_cast<int64_t>(steps[i + 2].item<double>());
    s.steps.push_back(step);
  }
  for (const auto& item : parts[1].toGenericDict()) s.gradients[item.key().toStringRef()] = item.value().toTensor();
  for (const auto& item : parts[2].toGenericDict()) s.weights[item.key().toStringRef()] = item.value().toTensor();
  return s;
}

// The same reference on every rank of the world (collective): world rank 0 computes it once and sends it, while the
// others wait asleep. Computed on every rank, it cost the 4-rank grid tests four times its work on the 2 cores they
// share; every rank still compares its own grid's result with it.
Reference single_rank_run(bool v1_1, int steps, Optimizer optimizer, bool padded = false) {
  static std::map<std::tuple<bool, int, Optimizer, bool>, Reference> received;
  const auto key = std::make_tuple(v1_1, steps, optimizer, padded);
  if (auto found = received.find(key); found != received.end()) return found->second;
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  std::vector<char> bytes[2];
  if (world_rank == 0) {
    const Reference here = single_rank_run_here(v1_1, steps, optimizer, padded);
    bytes[0] = snapshot_bytes(here.fp32);
    bytes[1] = snapshot_bytes(here.fp64);
  }
  testing::sleeping_barrier();
  for (std::vector<char>& b : bytes) {
    int64_t size = static_cast<int64_t>(b.size());
    MPI_Bcast(&size, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    b.resize(static_cast<size_t>(size));
    MPI_Bcast(b.data(), static_cast<int>(size), MPI_CHAR, 0, MPI_COMM_WORLD);
  }
  return received.emplace(key, Reference{snapshot_from_bytes(bytes[0]), snapshot_from_bytes(bytes[1])}).first->second;
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

// What a grid's fp32 and fp64 snapshots show against the single-rank ones, by the rule stated at the top of the
// file: every quantity that fails, each as one line, fp32 and fp64 apart; and the worst errors.
struct GridComparison {
  std::vector<std::string> fp32_failures, fp64_failures;
  double worst32 = 0.0, worst64 = 0.0;  // fp32: the grid's error against fp64 over its bound
  std::string worst32_name;
};

GridComparison compare_with_single_rank(const Snapshot& got32, const Snapshot& got64, const Reference& want,
                                        const std::string& what, bool compare_gradients) {
  GridComparison result;
  for (size_t s = 0; s < want.fp32.steps.size() && s < got32.steps.size(); ++s) {
    if (got32.steps[s].target_tokens != want.fp32.steps[s].target_tokens) {
      result.fp32_failures.push_back(msg(what, ": step ", s + 1, " trained on ", got32.steps[s].target_tokens,
                                         " target tokens, the single rank on ", want.fp32.steps[s].target_tokens));
    }
  }
  const auto a32 = quantities(got32, compare_gradients), a64 = quantities(got64, compare_gradients);
  const auto r32 = quantities(want.fp32, compare_gradients), r64 = quantities(want.fp64, compare_gradients);
  if (a32.size() != r32.size() || a64.size() != r64.size()) {
    result.fp32_failures.push_back(msg(what, ": ", a32.size(), " quantities, the single rank has ", r32.size()));
    return result;
  }
  for (const auto& [name, truth] : r64) {
    const auto fp64_check = testing::tensors_close(what + " fp64: " + name, a64.at(name), truth, kFp64Tolerance);
    if (!fp64_check) result.fp64_failures.push_back(fp64_check.message());
    result.worst64 = std::max(result.worst64, testing::compare(a64.at(name), truth).norm_rel_error);

    const double noise = testing::compare(r32.at(name), truth).norm_rel_error;  // the single rank's fp32 rounding
    const double bound = kRoundingNoiseFactor * std::max(noise, kFp32Floor);
    const auto fp32_check = testing::tensors_close(what + " fp32 vs fp64: " + name, a32.at(name), truth, bound);
    const double error = testing::compare(a32.at(name), truth).norm_rel_error;
    if (!fp32_check) {
      result.fp32_failures.push_back(msg(fp32_check.message(), " (the bound: ", kRoundingNoiseFactor, " x max(",
                                         noise, ", the single rank's fp32 vs fp64, ", kFp32Floor, "))"));
    }
    if (error / bound >= result.worst32) {
      result.worst32 = error / bound;
      result.worst32_name = msg(name, ": ", error, " against fp64, single rank ", noise);
    }
  }
  return result;
}

void expect_same(const Snapshot& got32, const Snapshot& got64, const Reference& want, const std::string& what,
                 bool compare_gradients) {
  const GridComparison c = compare_with_single_rank(got32, got64, want, what, compare_gradients);
  for (const std::string& failure : c.fp64_failures) ADD_FAILURE() << failure;
  for (const std::string& failure : c.fp32_failures) ADD_FAILURE() << failure;
  print_on_rank0(msg(what, ": fp32 worst ", c.worst32, " of its bound (", c.worst32_name, "); fp64 worst ", c.worst64));
}

// The padding itself changes nothing: fp64 on one rank, padded for sequence parallelism or not, every quantity.
void expect_padding_changes_nothing(bool v1_1, int steps, Optimizer optimizer) {
  const auto got = quantities(single_rank_run(v1_1, steps, optimizer, /*padded=*/true).fp64, true);
  const auto want = quantities(single_rank_run(v1_1, steps, optimizer).fp64, true);
  for (const auto& [name, value] : want) {
    EXPECT_TRUE(testing::tensors_close("padded fp64: " + name, got.at(name), value, kFp64Tolerance));
  }
}

// Each grid of this world against the single rank, `steps` steps of the v1.0 or v1.1 model: step 1's gradients, every
// step's loss and gradient norm, and the weights after the last step.
void expect_every_grid_equals_one_rank(bool v1_1, int steps, const Variant& variant) {
  const ModelConfig config = grid_model(v1_1);
  const Reference reference = single_rank_run(v1_1, steps, variant.optimizer, variant.sequence_parallel);
  if (variant.sequence_parallel) expect_padding_changes_nothing(v1_1, steps, variant.optimizer);
  EXPECT_GT(reference.fp32.steps[0].grad_norm, training_options(variant).max_grad_norm) << "clipping should be active";
  for (int tp : testing::tp_sizes_for_world()) {
    const ProcessGrid grid = testing::make_grid(tp);
    const std::string what = msg(v1_1 ? "v1.1 " : "v1.0 ", grid.tp_size, "x", grid.dp_size, " ", variant.name, ", ",
                                 steps, steps == 1 ? " step" : " steps");
    expect_same(train_run(config, grid, variant, steps, torch::kFloat32),
                train_run(config, grid, variant, steps, torch::kFloat64), reference, what, /*compare_gradients=*/true);
  }
}

class GridTraining : public ::testing::TestWithParam<Variant> {};

// T5 v1.0 (ReLU, tied embeddings): one step. The weights after it are where Adam's first step makes the fp32
// rounding heaviest (the bound's floor, above).
TEST_P(GridTraining, OneStepEqualsOneRank) { expect_every_grid_equals_one_rank(false, 1, GetParam()); }

// T5 v1.1 (gated GELU, untied embeddings): three steps, so that the optimizer's state carries from step to step;
// step 1's gradients are compared as in one step, and a wrong update at any step shows in the weights at the end
// and in the losses after it.
TEST_P(GridTraining, ThreeStepsEqualOneRank) { expect_every_grid_equals_one_rank(true, 3, GetParam()); }

// One step of v1.1, which the three steps above contain: for the entries that run the first step only, under
// another set of LibTorch's CPU kernels (tests/mpi/CMakeLists.txt); the entries that run the three steps leave it out.
TEST_P(GridTraining, OneStepOfV1_1EqualsOneRank) { expect_every_grid_equals_one_rank(true, 1, GetParam()); }

INSTANTIATE_TEST_SUITE_P(Variants, GridTraining,
                         ::testing::Values(Variant{"plain", 0, 1, false},
                                           Variant{"checkpointing", 1, 1, false},
                                           Variant{"accumulation", 0, 4, false},
                                           Variant{"zero1", 0, 1, true},
                                           Variant{"all", 1, 4, true},
                                           // ZeRO-2 alone equals ZeRO-1 bit for bit (GridZero2 below)
                                           Variant{"zero2_all", 1, 4, true, Optimizer::kAdamW, true},
                                           Variant{"adafactor", 0, 1, false, Optimizer::kAdafactor},
                                           Variant{"adafactor_relative_step", 1, 4, false,
                                                   Optimizer::kAdafactorRelativeStep},
                                           // the norms' gradient parts summed over TP once per step, after
                                           // 4 micro-batches and the ZeRO-2 reduce-scatter of each
                                           Variant{"sequence_parallel_all", 1, 4, true, Optimizer::kAdamW, true,
                                                   true},
                                           Variant{"selective_sequence_parallel", 0, 1, false, Optimizer::kAdamW,
                                                   false, true, true}),
                         [](const auto& info) { return info.param.name; });

// The fp32 check still catches real errors, on the single-rank reference itself (rank 0 alone; the grid cases above
// run the same check). Each injected error stands for a bug of the grid: a dropped DP all-reduce (rank 0 of a dp 2
// grid steps on the gradient of its half of the batch) and a gradient averaged twice (scaled by 1/dp, dp 2). The
// reference itself passes, and each injected error fails in fp32 alone, by orders of magnitude.
TEST(GridCheck, CatchesADroppedAllReduceAndAWrongScale) {
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  if (world_rank != 0) return;
  // The kernels this process runs (tests/mpi/CMakeLists.txt runs the grid tests under several): as asked.
  const std::string capability = at::get_cpu_capability();
  print_on_rank0("ATen CPU kernels: " + capability);
  if (const char* asked = std::getenv("ATEN_CPU_CAPABILITY")) {
    std::string upper = asked;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    EXPECT_EQ(capability, upper) << "ATEN_CPU_CAPABILITY=" << asked << " is not in effect";
  }
  const ModelConfig config = grid_model(true);
  const Reference reference = single_rank_run_here(true, 1, Optimizer::kAdamW);
  const GridComparison itself = compare_with_single_rank(reference.fp32, reference.fp64, reference, "itself", true);
  EXPECT_TRUE(itself.fp32_failures.empty() && itself.fp64_failures.empty()) << itself.fp32_failures.size();

  Variant dropped{"dropped all-reduce"};
  dropped.first_half_of_batch = true;
  const Snapshot half32 = train_run(config, ProcessGrid::solo(), dropped, 1, torch::kFloat32);
  const GridComparison no_all_reduce = compare_with_single_rank(half32, reference.fp64, reference, "dropped", true);
  EXPECT_GT(no_all_reduce.fp32_failures.size(), 10u);
  EXPECT_GT(no_all_reduce.worst32, 100.0) << no_all_reduce.worst32_name;

  Snapshot halved = reference.fp32;
  for (auto& [name, grad] : halved.gradients) grad = grad * 0.5;
  const GridComparison wrong_scale = compare_with_single_rank(halved, reference.fp64, reference, "1/dp", true);
  EXPECT_EQ(wrong_scale.fp32_failures.size(), halved.gradients.size());  // every gradient, nothing else
  EXPECT_GT(wrong_scale.worst32, 100.0) << wrong_scale.worst32_name;
  print_on_rank0(msg("dropped all-reduce: ", no_all_reduce.fp32_failures.size(), " quantities fail, worst ",
                     no_all_reduce.worst32, " of its bound; gradients scaled by 1/2: ",
                     wrong_scale.fp32_failures.size(), " fail, worst ", wrong_scale.worst32, " of its bound"));
}

// ---- A checkpoint continues on any grid ----
// ZeRO-2 against ZeRO-1 on the same grid, 3 steps: with one micro-batch per step both reduce-scatter the same
// buffers once, so every loss, gradient norm and weight is equal bit for bit; with 4 micro-batches ZeRO-2 sums the
// reduced chunks instead of reducing the sum, equal up to rounding (fp64 1e-12).
TEST(GridZero2, EqualsZero1OnItsGrid) {
  const ModelConfig config = grid_model(true);
  for (int micro_batches : {1, 4}) {
    for (int tp : testing::tp_sizes_for_world()) {
      const ProcessGrid grid = testing::make_grid(tp);
      const Variant zero1{"zero1", 1, micro_batches, true};
      const Variant zero2{"zero2", 1, micro_batches, true, Optimizer::kAdamW, true};
      const std::string what = msg(grid.tp_size, "x", grid.dp_size, ", ", micro_batches, " micro-batch(es)");
      const auto want = quantities(train_run(config, grid, zero1, 3, torch::kFloat64), /*with_gradients=*/true);
      const auto got = quantities(train_run(config, grid, zero2, 3, torch::kFloat64), /*with_gradients=*/true);
      ASSERT_EQ(got.size(), want.size()) << what;
      for (const auto& [name, tensor] : want) {
        if (micro_batches == 1) {
          EXPECT_TRUE(torch::equal(got.at(name), tensor)) << what << ": " << name << " differs";
        } else {
          EXPECT_LE(testing::compare(got.at(name), tensor).norm_rel_error, 1e-12) << what << ": " << name;
        }
      }
    }
  }
}

// Host-resident optimizer state (parallel.offload_optimizer) against the same run without it, on every grid of the
// world, 2 steps in fp32: the same update code on host copies of the same tensors, so every loss, gradient norm and
// weight is equal bit for bit. AdamW with ZeRO-1 and accumulation (each rank offloads its shard), and Adafactor
// (its TP sums made on the gradients' device) with checkpointing. (The reduced gradients themselves are not compared:
// the step clips the update's copy of them in place, which with offload is the host copy, not the buckets.)
TEST(GridOffload, EqualsTheStepWithoutIt) {
  const ModelConfig config = grid_model(true);
  for (int tp : testing::tp_sizes_for_world()) {
    const ProcessGrid grid = testing::make_grid(tp);
    for (Variant plain : {Variant{"zero1", 0, 2, true}, Variant{"adafactor", 1, 1, false, Optimizer::kAdafactor}}) {
      Variant offloaded = plain;
      offloaded.offload_optimizer = true;
      const std::string what = msg(grid.tp_size, "x", grid.dp_size, " ", plain.name);
      const auto want = quantities(train_run(config, grid, plain, 2, torch::kFloat32), /*with_gradients=*/false);
      const auto got = quantities(train_run(config, grid, offloaded, 2, torch::kFloat32), /*with_gradients=*/false);
      ASSERT_EQ(got.size(), want.size()) << what;
      for (const auto& [name, tensor] : want) {
        EXPECT_TRUE(torch::equal(got.at(name), tensor)) << what << ": " << name << " differs with offload";
      }
    }
  }
}

// The host copy the offloaded update reads is, per bucket, the reduced gradient at the end of the step, bit for bit:
// not a bucket copied before its reduction (with DP the local gradient or a partly reduced one), not an earlier
// micro-batch's (accumulation of 2; under ZeRO-2 the owned chunk before the last micro-batch's is added), not the
// norms' gradients before their TP sum (sequence parallelism). Without clipping and loss scale (fp32) the update
// leaves the host copies as they came, so they are compared after the step. (By hand, on 2 ranks: a copy made at the
// launch of an MPI reduction, before its wait, fails here in every bucket of both steps of the all-reduce, ZeRO-1
// and sequence-parallel variants, and fails GridOffload.EqualsTheStepWithoutIt; a dropped copy (bucket 0's never
// made, its host copy left as it was) fails GridOffload.EqualsTheStepWithoutIt on 1 rank already, in 108 of its
// quantities.)
TEST(GridOffload, HostCopiesAreTheReducedGradients) {
  const ModelConfig config = grid_model(true);
  for (int tp : testing::tp_sizes_for_world()) {
    const ProcessGrid grid = testing::make_grid(tp);
    std::vector<Variant> variants = {Variant{"all-reduce", 0, 2}, Variant{"zero1", 0, 2, true},
                                     Variant{"zero2", 0, 2, true, Optimizer::kAdamW, true},
                                     Variant{"sequence parallel", 0, 1, false, Optimizer::kAdamW, false, true}};
    for (Variant variant : variants) {
      variant.offload_optimizer = true;
      variant.max_grad_norm = 0.0;
      const std::string what = msg(grid.tp_size, "x", grid.dp_size, " ", variant.name);
      TrainingRun run(config, grid, variant, torch::kFloat32);
      for (int step = 1; step <= 2; ++step) {
        run.step();
        GradientBuckets& gradients = run.trainer().gradients();
        for (size_t b = 0; b < gradients.buckets().size(); ++b) {
          EXPECT_TRUE(torch::equal(gradients.host_grad(b), gradients.owned_grad(b).cpu()))
              << what << ", step " << step << ": the host copy of bucket " << b << " is not its reduced gradient";
        }
      }
    }
  }
}

// Every grid of 1, 2 or 4 ranks that fits this world (1x1, 2x1, 1x2, 2x2, 4x1, 1x4 under 4 ranks; with DP, ZeRO-1
// off and on), formed on the first ranks of the world, trains kStepsBeforeCheckpoint steps, writes a checkpoint and
// continues kStepsAfterCheckpoint steps: the reference. Every grid then loads that checkpoint into a model initialised
// from another seed (so that nothing but what was loaded can carry over) and continues the same global batches: the
// loss and gradient norm of each step and the gathered weights at the end must equal the reference's, by the rule of
// expect_same (fp64 to 1e-12, fp32 as accurate as the single rank's fp32). World rank 0 is in every grid and compares. A pair whose grids both fit
// in half this world is left to the run on that half (mpi.mpi_tests_ranks_2 for those of mpi.mpi_tests_ranks_4): the
// same grids on the same first ranks, the same computation.
constexpr int kStepsBeforeCheckpoint = 2;
constexpr int kStepsAfterCheckpoint = 2;

struct GridShape {
  int tp = 1, dp = 1;
  bool zero1 = false;
  std::string name() const { return msg(tp, "x", dp, zero1 ? " zero1" : ""); }
};

std::vector<GridShape> grid_shapes_within_world(bool with_zero1) {
  std::vector<GridShape> shapes;
  for (const auto& [tp, dp] : std::vector<std::pair<int, int>>{{1, 1}, {2, 1}, {1, 2}, {2, 2}, {4, 1}, {1, 4}}) {
    if (tp * dp > testing::world_size()) continue;
    shapes.push_back({tp, dp, false});
    if (with_zero1 && dp > 1) shapes.push_back({tp, dp, true});
  }
  return shapes;
}

// The grid on the first tp x dp ranks of the world; std::nullopt on the others. Collective over the world.
std::optional<ProcessGrid> grid_on_first_ranks(int tp, int dp) {
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm ranks = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank < tp * dp ? 0 : MPI_UNDEFINED, world_rank, &ranks);
  if (ranks == MPI_COMM_NULL) return std::nullopt;
  GridOptions options;
  options.tp = tp;
  options.collective_timeout_s = 300.0;
  options.ranks = ranks;
  ProcessGrid grid = ProcessGrid::create(options);
  MPI_Comm_free(&ranks);
  return grid;
}

CheckpointIdentity identity_of(const ProcessGrid& grid) {
  CheckpointIdentity identity;
  identity.tp = grid.tp_size;
  identity.dp = grid.dp_size;
  identity.model_name = "grid test model";
  return identity;
}

// The steps after the checkpoint and the gathered weights at their end.
Snapshot continuation(TrainingRun& run) {
  Snapshot snapshot;
  for (int s = 0; s < kStepsAfterCheckpoint; ++s) snapshot.steps.push_back(run.step());
  snapshot.weights = run.weights();
  return snapshot;
}

class GridResharding : public ::testing::TestWithParam<Variant> {};

// In fp64 alone: resharding moves the optimizer's state between layouts, with no arithmetic and nothing that depends
// on the dtype (train/optimizer_resharding.cpp, io/sharded_checkpoint.cpp), so a continuation equal to the source
// grid's own to 1e-12 shows it moved every element to its place; a grid's fp32 rounding against one rank is
// GridTraining's. (An fp32 twin of every pair was half of this test's time: 65 pairs under 4 ranks.)
TEST_P(GridResharding, ACheckpointContinuesOnEveryGridAsOnItsOwn) {
  const Variant base = GetParam();
  const bool adamw = base.optimizer == Optimizer::kAdamW;  // Adafactor has no ZeRO-1
  const ModelConfig config = grid_model(/*v1_1=*/adamw);     // and runs the tied-embedding model
  const std::vector<GridShape> shapes = grid_shapes_within_world(adamw);
  const std::filesystem::path root = msg("grid_resharding.w", testing::world_size(), ".", base.name);
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  int pairs = 0;
  double worst = 0.0;
  for (const GridShape& source : shapes) {
    const std::string dir = (root / msg(source.tp, "x", source.dp, source.zero1 ? "_zero1" : "")).string();
    Snapshot own;  // the source grid's own continuation
    if (auto grid = grid_on_first_ranks(source.tp, source.dp)) {
      Variant variant = base;
      variant.zero1 = source.zero1;
      TrainingRun run(config, *grid, variant, torch::kFloat64);
      for (int s = 0; s < kStepsBeforeCheckpoint; ++s) run.step();
      ShardedCheckpointStore store(dir, 1, grid->world, grid->tp_rank, grid->dp_rank);
      store.save(kStepsBeforeCheckpoint, optimizer_checkpoint_tensors(run.trainer().optimizer()),
                 identity_of(*grid), {}, optimizer_layout(run.trainer().optimizer()));
      own = continuation(run);
    }
    testing::sleeping_barrier();
    for (const GridShape& target : shapes) {
      if (2 * std::max(source.tp * source.dp, target.tp * target.dp) <= testing::world_size()) continue;
      Snapshot got;
      if (auto grid = grid_on_first_ranks(target.tp, target.dp)) {
        Variant variant = base;
        variant.zero1 = target.zero1;
        TrainingRun run(config, *grid, variant, torch::kFloat64, /*init_seed=*/97);
        run.skip_batches(kStepsBeforeCheckpoint);
        ShardedCheckpointStore store(dir, 1, grid->world, grid->tp_rank, grid->dp_rank);
        const auto loaded = store.load_latest(identity_of(*grid), nullptr);
        T5S_CHECK(loaded.has_value(), "no checkpoint in ", dir);
        const std::string how = load_optimizer_state(*loaded, run.trainer().optimizer());
        const bool same_layout = source.tp == target.tp && source.dp == target.dp && source.zero1 == target.zero1;
        EXPECT_EQ(how.find("resharded") == std::string::npos, same_layout) << how;
        EXPECT_EQ(run.trainer().optimizer().step_count(), kStepsBeforeCheckpoint);
        got = continuation(run);
      }
      testing::sleeping_barrier();
      if (world_rank == 0) {  // world rank 0 is on every grid: the source's and the target's
        const std::string what = msg(base.name, " ", source.name(), " -> ", target.name(), " fp64: ");
        const auto want = quantities(own, /*with_gradients=*/false), have = quantities(got, false);
        EXPECT_EQ(have.size(), want.size()) << what << "quantities";
        for (const auto& [name, truth] : want) {
          if (!have.count(name)) continue;
          EXPECT_TRUE(testing::tensors_close(what + name, have.at(name), truth, kFp64Tolerance));
          worst = std::max(worst, testing::compare(have.at(name), truth).norm_rel_error);
        }
      }
      ++pairs;
    }
  }
  print_on_rank0(msg(base.name, ": ", pairs, " pairs of grids, fp64 worst ", worst));
  testing::sleeping_barrier();
  if (world_rank == 0) std::filesystem::remove_all(root);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, GridResharding,
                         ::testing::Values(Variant{"adamw", 0, 1, false},
                                           Variant{"adafactor_relative_step", 0, 1, false,
                                                   Optimizer::kAdafactorRelativeStep}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace t5scale
