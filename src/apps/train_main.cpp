// t5scale-train: trains a T5 model. With no arguments it trains a tiny T5 on the built-in synthetic task and
// prints a falling loss (the demo). Run with --help for the options.
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>

#include "config/model_config.h"
#include "core/check.h"
#include "data/synthetic_task.h"
#include "io/hf_checkpoint.h"
#include "model/t5_model.h"
#include "train/training_loop.h"

namespace {

const char* kUsage = R"(usage: t5scale-train [options]

Trains a T5 model on the built-in synthetic task (each token shifted by one; a tiny T5 learns it in a minute).

  --model NAME          tiny (default), or a named shape: t5-small ... t5-11b, t5-v1_1-small ... t5-v1_1-xxl
  --init-from DIR       start from a Hugging Face T5 checkpoint folder (config.json + safetensors)
  --export-to DIR       write the trained model as a Hugging Face checkpoint folder
  --steps N             optimizer steps (default 600)
  --batch-size N        sequences per step (default 16)
  --lr X                peak learning rate, AdamW (default 3e-3)
  --warmup-steps N      linear warmup (default 20)
  --log-every N         print a line every N steps (default 20)
  --seed N              seed for initialisation and data (default 1234)
  --threads N           CPU threads for LibTorch (default: LibTorch's choice)
  --help                this text
)";

struct Arguments {
  std::string model = "tiny";
  std::string init_from, export_to;
  t5scale::TrainingOptions training;
  uint64_t seed = 1234;
  int threads = 0;
};

Arguments parse(int argc, char** argv) {
  Arguments args;
  auto value = [&](int& i, const std::string& flag) -> std::string {
    if (i + 1 >= argc) throw t5scale::Error(t5scale::msg(flag, ": needs a value"));
    return argv[++i];
  };
  auto integer = [&](int& i, const std::string& flag) -> int64_t {
    const std::string text = value(i, flag);
    try {
      size_t used = 0;
      const long long v = std::stoll(text, &used);
      if (used == text.size()) return v;
    } catch (const std::exception&) {
    }
    throw t5scale::Error(t5scale::msg(flag, ": '", text, "' is not an integer"));
  };
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::cout << kUsage;
      std::exit(0);
    } else if (flag == "--model") {
      args.model = value(i, flag);
    } else if (flag == "--init-from") {
      args.init_from = value(i, flag);
    } else if (flag == "--export-to") {
      args.export_to = value(i, flag);
    } else if (flag == "--steps") {
      args.training.steps = integer(i, flag);
    } else if (flag == "--batch-size") {
      args.training.batch_size = integer(i, flag);
    } else if (flag == "--warmup-steps") {
      args.training.warmup_steps = integer(i, flag);
    } else if (flag == "--log-every") {
      args.training.log_every = integer(i, flag);
    } else if (flag == "--seed") {
      args.seed = static_cast<uint64_t>(integer(i, flag));
    } else if (flag == "--threads") {
      args.threads = static_cast<int>(integer(i, flag));
    } else if (flag == "--lr") {
      const std::string text = value(i, flag);
      char* end = nullptr;
      args.training.learning_rate = std::strtod(text.c_str(), &end);
      if (end == text.c_str() || *end != '\0' || !(args.training.learning_rate > 0)) {
        throw t5scale::Error(t5scale::msg("--lr: '", text, "' is not a positive number"));
      }
    } else {
      throw t5scale::Error(t5scale::msg("unknown option '", flag, "' (see --help)"));
    }
  }
  if (args.training.steps < 1) throw t5scale::Error("--steps: must be at least 1");
  if (args.training.batch_size < 1) throw t5scale::Error("--batch-size: must be at least 1");
  if (args.training.log_every < 1) throw t5scale::Error("--log-every: must be at least 1");
  return args;
}

int run(const Arguments& args) {
  using namespace t5scale;
  if (args.threads > 0) torch::set_num_threads(args.threads);
  torch::manual_seed(args.seed);
  auto tp = std::make_shared<SoloCommunicator>("tp");

  T5Model model{nullptr};
  if (!args.init_from.empty()) {
    model = load_hf_model(args.init_from, tp);
  } else {
    const ModelConfig config = args.model == "tiny" ? tiny_model_config(64) : named_model_config(args.model);
    model = T5Model(config, tp);
    model->initialize_weights(args.seed);
  }
  const ModelConfig& config = model->config();
  std::printf("t5scale-train: model %s (%s, %s embeddings), %lld parameters; d_model %lld, heads %lld, layers %lld+%lld\n",
              config.name.c_str(), feed_forward_name(config.feed_forward).c_str(),
              config.tie_word_embeddings ? "tied" : "untied", static_cast<long long>(parameter_count(config)),
              static_cast<long long>(config.d_model), static_cast<long long>(config.num_heads),
              static_cast<long long>(config.num_layers), static_cast<long long>(config.num_decoder_layers));

  SyntheticTaskOptions task_options;
  task_options.vocab_size = std::min<int64_t>(config.vocab_size, 32);
  task_options.seed = args.seed;
  SyntheticTask task(task_options);
  std::printf("t5scale-train: synthetic task (shift each token by one), %lld steps of %lld sequences, lr %.3g\n",
              static_cast<long long>(args.training.steps), static_cast<long long>(args.training.batch_size),
              args.training.learning_rate);
  std::fflush(stdout);

  double tokens_since_log = 0.0, time_since_log_s = 0.0;
  const int64_t width = static_cast<int64_t>(std::to_string(args.training.steps).size());
  train(*model, [&] { return task.next_batch(args.training.batch_size); }, args.training,
        [&](const StepRecord& r) {
          tokens_since_log += static_cast<double>(r.target_tokens);
          time_since_log_s += r.step_time_s;
          if (r.step % args.training.log_every == 0 || r.step == args.training.steps) {
            std::printf("step %*lld/%lld  loss %.4f  lr %.2e  grad_norm %.3f  target_tokens/s %.0f\n",
                        static_cast<int>(width), static_cast<long long>(r.step),
                        static_cast<long long>(args.training.steps), r.loss, r.learning_rate, r.grad_norm,
                        tokens_since_log / std::max(time_since_log_s, 1e-9));
            std::fflush(stdout);
            tokens_since_log = time_since_log_s = 0.0;
          }
        });

  model->eval();
  const Seq2SeqBatch sample = task.next_batch(1);
  const torch::Tensor generated = model->generate_greedy(sample.input_ids, sample.attention_mask, 16);
  std::cout << "example  source " << sample.input_ids[0] .unsqueeze(0) << "\n         greedy " << generated[0].unsqueeze(0)
            << std::endl;

  if (!args.export_to.empty()) {
    export_hf_checkpoint(*model, args.export_to);
    std::printf("t5scale-train: exported to %s\n", args.export_to.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const t5scale::Error& e) {
    std::fprintf(stderr, "t5scale-train: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "t5scale-train: unexpected error: %s\n", e.what());
    return 3;
  }
}
