// t5scale-train: the training job. One process per rank (mpirun / srun); with no arguments, one rank trains a
// tiny T5 on the built-in synthetic task and prints a falling loss (the demo). --help lists the options.
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "config/model_config.h"
#include "core/check.h"
#include "data/synthetic_task.h"
#include "dist/mpi_runtime.h"
#include "dist/process_grid.h"
#include "io/hf_checkpoint.h"
#include "model/t5_model.h"
#include "train/parallel_trainer.h"

namespace {

using namespace t5scale;

const char* kUsage = R"(usage: [mpirun -np N] t5scale-train [options]

Trains a T5 model on the built-in synthetic task (each token shifted by one; a tiny T5 learns it in a minute),
over a grid of N = tp x dp ranks.

model
  --model NAME            tiny (default), or a named shape: t5-small ... t5-11b, t5-v1_1-small ... t5-v1_1-xxl
  --init-from DIR         start from a Hugging Face T5 checkpoint folder (config.json + safetensors)
  --export-to DIR         write the trained model as a Hugging Face checkpoint folder
parallelism and memory
  --tp N                  tensor-parallel size (default 1); data-parallel size = ranks / tp
  --micro-batches N       gradient accumulation: micro-batches per step and replica (default 1)
  --zero1                 shard the optimizer state over data-parallel ranks
  --checkpoint-every K    activation checkpointing every K-th block (0: off, the default)
  --precision P           fp32 (default), bf16, or fp16 (with dynamic loss scaling)
optimisation
  --steps N               optimizer steps (default 600)
  --global-batch N        sequences per step over all replicas (default 16)
  --lr X                  peak learning rate, AdamW (default 3e-3), linear warmup then constant
  --warmup-steps N        (default 20)
  --weight-decay X        decoupled, not on norms and biases (default 0)
  --max-grad-norm X       global gradient clipping, 0 for none (default 1)
  --seed N                initialisation and data (default 1234)
output
  --log-every N           a line every N steps (default 20)
  --threads N             CPU threads per rank for LibTorch
  --help                  this text
)";

struct Arguments {
  std::string model = "tiny", init_from, export_to;
  int tp = 1;
  int64_t micro_batches = 1, checkpoint_every = 0, steps = 600, global_batch = 16, warmup_steps = 20, log_every = 20;
  bool zero1 = false;
  Precision precision = Precision::kFp32;
  double lr = 3e-3, weight_decay = 0.0, max_grad_norm = 1.0;
  uint64_t seed = 1234;
  int threads = 0;
};

Arguments parse(int argc, char** argv) {
  Arguments a;
  auto value = [&](int& i, const std::string& flag) -> std::string {
    if (i + 1 >= argc) throw Error(msg(flag, ": needs a value"));
    return argv[++i];
  };
  auto integer = [&](int& i, const std::string& flag, int64_t minimum) -> int64_t {
    const std::string text = value(i, flag);
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != text.size() || text.empty()) throw Error(msg(flag, ": '", text, "' is not an integer"));
    if (v < minimum) throw Error(msg(flag, ": must be at least ", minimum, ", got ", v));
    return v;
  };
  auto number = [&](int& i, const std::string& flag) -> double {
    const std::string text = value(i, flag);
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (end == text.c_str() || *end != '\0' || !(v >= 0)) throw Error(msg(flag, ": '", text, "' is not a number >= 0"));
    return v;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::cout << kUsage;
      std::exit(0);
    } else if (flag == "--model") { a.model = value(i, flag);
    } else if (flag == "--init-from") { a.init_from = value(i, flag);
    } else if (flag == "--export-to") { a.export_to = value(i, flag);
    } else if (flag == "--tp") { a.tp = static_cast<int>(integer(i, flag, 1));
    } else if (flag == "--micro-batches") { a.micro_batches = integer(i, flag, 1);
    } else if (flag == "--zero1") { a.zero1 = true;
    } else if (flag == "--checkpoint-every") { a.checkpoint_every = integer(i, flag, 0);
    } else if (flag == "--precision") {
      const std::string p = value(i, flag);
      if (p == "fp32") a.precision = Precision::kFp32;
      else if (p == "bf16") a.precision = Precision::kBf16;
      else if (p == "fp16") a.precision = Precision::kFp16;
      else throw Error(msg("--precision: '", p, "' is not one of fp32, bf16, fp16"));
    } else if (flag == "--steps") { a.steps = integer(i, flag, 1);
    } else if (flag == "--global-batch") { a.global_batch = integer(i, flag, 1);
    } else if (flag == "--lr") { a.lr = number(i, flag);
    } else if (flag == "--warmup-steps") { a.warmup_steps = integer(i, flag, 0);
    } else if (flag == "--weight-decay") { a.weight_decay = number(i, flag);
    } else if (flag == "--max-grad-norm") { a.max_grad_norm = number(i, flag);
    } else if (flag == "--seed") { a.seed = static_cast<uint64_t>(integer(i, flag, 0));
    } else if (flag == "--log-every") { a.log_every = integer(i, flag, 1);
    } else if (flag == "--threads") { a.threads = static_cast<int>(integer(i, flag, 1));
    } else {
      throw Error(msg("unknown option '", flag, "' (see --help)"));
    }
  }
  return a;
}

int run(const Arguments& args, int world_size) {
  if (args.threads > 0) torch::set_num_threads(args.threads);
  torch::manual_seed(args.seed);  // the replicated dropout stream: alike on every rank

  // Everything that can be refused is refused here, before any tensor is allocated.
  const ModelConfig config = !args.init_from.empty() ? read_hf_config(args.init_from + "/config.json")
                             : args.model == "tiny"  ? tiny_model_config(64)
                                                     : named_model_config(args.model);
  std::vector<std::string> errors = ProcessGrid::validate(world_size, args.tp, config);
  const int64_t dp = world_size / std::max(args.tp, 1);
  if (errors.empty() && args.global_batch % (dp * args.micro_batches) != 0) {
    errors.push_back(msg("--global-batch ", args.global_batch, " is not divisible by dp ", dp, " x --micro-batches ",
                         args.micro_batches));
  }
  if (!errors.empty()) {
    std::string message = "this grid cannot run:";
    for (const auto& e : errors) message += "\n  " + e;
    throw Error(message);
  }
  GridOptions grid_options;
  grid_options.tp = args.tp;
  ProcessGrid grid = ProcessGrid::create(grid_options);
  const bool rank0 = grid.world_rank() == 0;

  auto rng = std::make_shared<ParallelRng>(args.seed, grid.tp_rank);
  T5Model model(config, grid.tp, compute_dtype(args.precision), rng);
  if (!args.init_from.empty()) {
    load_hf_checkpoint(*model, args.init_from);
  } else {
    model->initialize_weights(args.seed);
  }
  model->set_activation_checkpointing(args.checkpoint_every);

  ParallelTrainingOptions options;
  options.adamw.weight_decay = args.weight_decay;
  options.max_grad_norm = args.max_grad_norm;
  options.zero1 = args.zero1;
  options.precision = args.precision;
  ParallelTrainer trainer(model, grid, options);

  SyntheticTaskOptions task_options;
  task_options.vocab_size = std::min<int64_t>(config.vocab_size, 32);
  task_options.seed = args.seed;  // every rank draws the same global batch and keeps its replica's rows
  SyntheticTask task(task_options);
  const int64_t per_micro = args.global_batch / grid.dp_size / args.micro_batches;
  if (rank0) {
    std::printf("t5scale-train: model %s (%s, %s embeddings), %lld parameters; grid %d ranks = tp %d x dp %d\n",
                config.name.c_str(), feed_forward_name(config.feed_forward).c_str(),
                config.tie_word_embeddings ? "tied" : "untied", static_cast<long long>(parameter_count(config)),
                grid.world_size(), grid.tp_size, grid.dp_size);
    std::printf("t5scale-train: synthetic task (shift each token by one), %lld steps of %lld sequences "
                "(%lld micro-batches of %lld per replica), lr %.3g\n",
                static_cast<long long>(args.steps), static_cast<long long>(args.global_batch),
                static_cast<long long>(args.micro_batches), static_cast<long long>(per_micro), args.lr);
    std::fflush(stdout);
  }

  double tokens_since_log = 0.0, time_since_log_s = 0.0;
  const int width = static_cast<int>(std::to_string(args.steps).size());
  for (int64_t step = 1; step <= args.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    const std::vector<Seq2SeqBatch> micro_batches =
        replica_micro_batches(task.next_batch(args.global_batch), grid, args.micro_batches);
    const double warmup =
        args.warmup_steps > 0 ? std::min(1.0, static_cast<double>(step) / static_cast<double>(args.warmup_steps)) : 1.0;
    const StepResult r = trainer.step(micro_batches, args.lr * warmup);
    tokens_since_log += static_cast<double>(r.target_tokens);
    time_since_log_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (rank0 && (step % args.log_every == 0 || step == args.steps)) {
      std::printf("step %*lld/%lld  loss %.4f  lr %.2e  grad_norm %.3f%s  target_tokens/s %.0f\n", width,
                  static_cast<long long>(step), static_cast<long long>(args.steps), r.loss, args.lr * warmup,
                  r.grad_norm, r.skipped ? "  (skipped: fp16 overflow)" : "",
                  tokens_since_log / std::max(time_since_log_s, 1e-9));
      std::fflush(stdout);
      tokens_since_log = time_since_log_s = 0.0;
    }
  }

  model->eval();
  const Seq2SeqBatch sample = task.next_batch(1);
  const torch::Tensor generated = model->generate_greedy(sample.input_ids, sample.attention_mask, 16);
  if (rank0) {
    auto line = [](const torch::Tensor& ids) {
      std::string out;
      for (int64_t i = 0; i < ids.numel(); ++i) out += " " + std::to_string(ids[i].item<int64_t>());
      return out;
    };
    std::printf("example  source %s\n         greedy %s\n", line(sample.input_ids[0]).c_str(),
                line(generated[0]).c_str());
  }
  if (!args.export_to.empty() && grid.dp_rank == 0) {
    export_hf_checkpoint(*model, args.export_to);  // every TP rank of replica 0 takes part in the gather
    if (rank0) std::printf("t5scale-train: exported to %s\n", args.export_to.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return run_mpi_program(argc, argv, "t5scale-train", [](int argc_, char** argv_) {
    int world_size = 1;
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size));
    return run(parse(argc_, argv_), world_size);
  });
}
