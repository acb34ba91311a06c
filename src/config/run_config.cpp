// Validation of the run config across keys, batch and model resolution, file checks, and the Markdown reference.
// The per-key parts (types, ranges, names) live in the registry (config_registry.cpp); the checks here are
// those that relate several keys, each reported on the key to change first.
#include "config/run_config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>

#include "config/config_registry.h"
#include "config/hf_model_folder.h"
#include "core/check.h"
#include "core/nearest_word.h"

namespace t5scale {

namespace {

namespace fs = std::filesystem;

// Which eval.metrics family computes each early-stopping metric.
const std::map<std::string, std::string>& metric_family() {
  static const std::map<std::string, std::string> families = {
      {"eval_loss", "loss"},          {"rouge1", "rouge"},      {"rouge2", "rouge"}, {"rougeL", "rouge"},
      {"rougeLsum", "rouge"},         {"exact_match", "squad"}, {"f1", "squad"},     {"accuracy", "classification"},
      {"macro_f1", "classification"},
  };
  return families;
}

std::vector<std::string> metric_families(const std::string& metrics) {
  std::vector<std::string> out;
  std::stringstream items(metrics);
  for (std::string item; std::getline(items, item, ',');) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    out.push_back(item);
  }
  return out;
}

// Errors in the order of their keys in the schema (a section's problems together); stable within a key.
void sort_by_schema(std::vector<ConfigError>& errors) {
  auto position = [](const std::string& key) {
    const auto& keys = config_keys();
    for (size_t i = 0; i < keys.size(); ++i) {
      if (keys[i].key == key) return i;
    }
    return keys.size();
  };
  std::stable_sort(errors.begin(), errors.end(),
                   [&](const ConfigError& a, const ConfigError& b) { return position(a.key) < position(b.key); });
}

bool contains(const std::vector<std::string>& items, const std::string& item) {
  return std::find(items.begin(), items.end(), item) != items.end();
}

// The shape that validate() can know without files: nullopt when model.name is unknown or init_from is set.
// `vocab_known` is false for tiny on a dataset file (its vocabulary is read at start-up).
std::optional<ModelConfig> known_shape(const RunConfig& c, bool& vocab_known) {
  vocab_known = true;
  if (!c.model.init_from.empty()) return std::nullopt;
  std::optional<ModelConfig> shape;
  if (c.model.name == "tiny") {
    const bool synthetic = c.data.dataset == "synthetic";
    vocab_known = synthetic;
    shape = tiny_model_config(synthetic ? c.data.synthetic_vocab_size : 0);
  } else {
    try {
      shape = named_model_config(c.model.name);
    } catch (const Error&) {
      return std::nullopt;
    }
  }
  apply_model_settings(c, *shape);
  return shape;
}

// The model section's dimensions that are set (> 0), by their key's last part.
std::vector<std::pair<std::string, int64_t>> set_model_dimensions(const ModelSettings& m) {
  std::vector<std::pair<std::string, int64_t>> set;
  for (const auto& [name, value] : {std::pair<const char*, int64_t>{"d_model", m.d_model}, {"d_kv", m.d_kv},
                                    {"d_ff", m.d_ff}, {"num_heads", m.num_heads}, {"num_layers", m.num_layers},
                                    {"num_decoder_layers", m.num_decoder_layers}, {"vocab_size", m.vocab_size}}) {
    if (value > 0) set.emplace_back(name, value);
  }
  return set;
}

// The batch split for a world size; errors name the keys. `plan` is filled when there are none.
std::vector<ConfigError> batch_errors(const RunConfig& c, int64_t world_size, BatchPlan& plan) {
  std::vector<ConfigError> errors;
  const auto& t = c.train;
  if (world_size < 1) {
    errors.push_back({"parallel.tp", msg("the world size must be at least 1, got ", world_size)});
    return errors;
  }
  if (c.parallel.tp < 1 || t.grad_accumulation < 1 || t.global_batch < 1 || t.micro_batch < 0) {
    return errors;  // validate()'s range checks report these; nothing can be divided
  }
  if (world_size % c.parallel.tp != 0) {
    // The world is the number of processes started (one rank each), which a user may not think of as a setting.
    const int64_t tp = c.parallel.tp;
    errors.push_back({"parallel.tp", msg("world size ", world_size, " (", world_size,
                                         world_size == 1 ? " process was" : " processes were",
                                         " started) is not divisible by tp ", tp, ": start a multiple of ", tp,
                                         " processes, e.g. mpirun -np ", tp, " t5scale-train ... or srun --ntasks=", tp,
                                         " ...")});
    return errors;
  }
  plan.dp = world_size / c.parallel.tp;
  plan.grad_accumulation = t.grad_accumulation;
  const int64_t replicas_x_accumulation = plan.dp * t.grad_accumulation;
  if (t.batch_mode == TrainSettings::BatchMode::kFixedGlobal) {
    if (t.global_batch % replicas_x_accumulation != 0) {
      errors.push_back(
          {"train.global_batch",
           msg(t.global_batch, " is not divisible by dp ", plan.dp, " x train.grad_accumulation ", t.grad_accumulation,
               " = ", replicas_x_accumulation, " (batch_mode fixed_global splits the global batch evenly)")});
      return errors;
    }
    plan.global_batch = t.global_batch;
    plan.micro_batch = t.global_batch / replicas_x_accumulation;
    if (t.micro_batch > 0 && t.micro_batch != plan.micro_batch) {
      errors.push_back({"train.micro_batch",
                        msg(t.micro_batch,
                            " contradicts the micro-batch that batch_mode fixed_global derives: "
                            "train.global_batch ",
                            t.global_batch, " / (dp ", plan.dp, " x train.grad_accumulation ", t.grad_accumulation,
                            ") = ", plan.micro_batch, "; set 0, or batch_mode fixed_micro")});
    }
  } else {
    if (t.micro_batch < 1) {
      errors.push_back({"train.micro_batch",
                        "must be > 0 with batch_mode fixed_micro (global batch = micro_batch x dp x "
                        "grad_accumulation)"});
      return errors;
    }
    plan.micro_batch = t.micro_batch;
    plan.global_batch = t.micro_batch * replicas_x_accumulation;
  }
  return errors;
}

}  // namespace

RunConfig::Precision resolve_precision(RunConfig::Precision requested, bool on_gpu, bool gpu_has_bf16,
                                       std::string* why) {
  using P = RunConfig::Precision;
  if (requested != P::kAuto) return requested;
  // T5 was pre-trained in bf16; fp16 needs loss scaling and T5's clamping; on the CPU the low-precision kernels are
  // slower than fp32 and lose the agreement with transformers' fp32 reference.
  const P chosen = !on_gpu ? P::kFp32 : gpu_has_bf16 ? P::kBf16 : P::kFp16;
  if (why) {
    *why = !on_gpu      ? "fp32 (on the CPU)"
           : gpu_has_bf16 ? "bf16 (the GPU has bf16)"
                          : "fp16 with dynamic loss scaling (the GPU has no bf16)";
  }
  return chosen;
}

const std::vector<std::string>& known_eval_metric_names() {
  static const std::vector<std::string> names = {"eval_loss",   "rouge1", "rouge2",   "rougeL",  "rougeLsum",
                                                 "exact_match", "f1",     "accuracy", "macro_f1"};
  return names;
}

std::vector<ConfigError> check_tp_divides(const ModelConfig& model, int64_t tp) {
  std::vector<ConfigError> errors;
  if (tp < 1) return errors;
  const std::pair<const char*, int64_t> dimensions[] = {
      {"num_heads", model.num_heads}, {"d_ff", model.d_ff}, {"vocab_size", model.vocab_size}};
  for (const auto& [name, value] : dimensions) {
    if (value % tp != 0) {
      errors.push_back(
          {"parallel.tp", msg("model ", model.name, ": ", name, " ", value, " is not divisible by tp ", tp)});
    }
  }
  return errors;
}

namespace {

// The length of the run and the model: steps or epochs; a known shape that tp divides.
void check_length_and_model(const RunConfig& c, std::vector<ConfigError>& errors) {
  auto add = [&](const std::string& key, const std::string& message) { errors.push_back({key, message}); };
  // Length of the run: steps or epochs, never both, never neither (the two were confused for weeks in one study).
  if (!c.eval.only) {
    if (c.train.max_steps > 0 && c.train.epochs > 0) {
      add("train.max_steps", msg("and train.epochs are both set (", c.train.max_steps, " steps, ", c.train.epochs,
                                 " epochs); set exactly one: max_steps counts optimizer steps, epochs counts passes "
                                 "over the training split"));
    } else if (c.train.max_steps <= 0 && c.train.epochs <= 0) {
      add("train.max_steps", "neither train.max_steps nor train.epochs is set; set exactly one (or eval.only: true)");
    }
  }

  // The model: a known shape that tp divides.
  if (c.model.init_from.empty() && c.model.name != "tiny") {
    try {
      named_model_config(c.model.name);
    } catch (const Error&) {
      const std::string suggestion = nearest_word(c.model.name, named_model_names(), 3);
      add("model.name", msg("'", c.model.name, "' is not tiny or a named shape (", join(named_model_names(), ", "), ")",
                            suggestion.empty() ? "" : "; did you mean '" + suggestion + "'?"));
    }
  }
  const auto dimensions = set_model_dimensions(c.model);
  if (!c.model.init_from.empty()) {
    for (const auto& [name, value] : dimensions) {
      add("model." + name, msg("is set (", value, ") with model.init_from, whose config.json gives the shape; "
                               "remove one of them"));
    }
  }
  bool vocab_known = true;
  if (const auto shape = known_shape(c, vocab_known)) {
    // The dimensions set in the model section, in the bounds every shape has.
    for (const std::string& error : validate(*shape)) {
      for (const auto& [name, value] : dimensions) {
        if (error.rfind(name + ":", 0) == 0) add("model." + name, error.substr(name.size() + 2));
      }
    }
    ModelConfig checked = *shape;
    if (!vocab_known) checked.vocab_size = c.parallel.tp;  // a dataset file's vocabulary is checked at start-up
    for (auto& e : check_tp_divides(checked, c.parallel.tp)) errors.push_back(e);
    if (c.model.name != "tiny" && c.data.dataset == "synthetic" && c.data.synthetic_vocab_size > shape->vocab_size) {
      add("data.synthetic_vocab_size", msg(c.data.synthetic_vocab_size, " exceeds the vocabulary of ", shape->name,
                                           " (", shape->vocab_size, " tokens)"));
    }
  }
}

// ZeRO, the optimizer and the learning-rate schedule.
void check_optimizer_and_schedule(const RunConfig& c, std::vector<ConfigError>& errors) {
  auto add = [&](const std::string& key, const std::string& message) { errors.push_back({key, message}); };
  if (c.parallel.zero2 && !c.parallel.zero1) {
    add("parallel.zero2", "needs parallel.zero1: true (ZeRO-2 shards the gradients on top of ZeRO-1's sharded "
                          "optimizer state, as DeepSpeed's stage 2 includes stage 1)");
  }

  // Optimizer.
  const auto& o = c.optimizer;
  if (o.name == OptimizerSettings::Name::kAdafactor) {
    if (c.parallel.zero1) {
      add("optimizer.name",
          "adafactor keeps factored second moments per matrix; ZeRO-1 (parallel.zero1) shards a "
          "flat buffer — use adamw with zero1");
    }
    if (o.adafactor_relative_step) {
      const char* why = " with optimizer.adafactor_relative_step (Adafactor computes its own step size)";
      if (c.lr_scaling.rule != LrScalingSettings::Rule::kNone) {
        add("lr_scaling.rule", msg("must be none", why));
      }
      if (c.lr_schedule.warmup_steps > 0 || c.lr_schedule.warmup_ratio > 0) {
        add("lr_schedule.warmup_steps",
            msg("must be 0 (and warmup_ratio 0)", why, "; optimizer.adafactor_warmup_init is its warmup"));
      }
      if (c.lr_schedule.decay != LrScheduleSettings::Decay::kConstant) {
        add("lr_schedule.decay", msg("must be constant", why));
      }
    } else if (o.adafactor_warmup_init) {
      add("optimizer.adafactor_warmup_init", "needs optimizer.adafactor_relative_step: true");
    }
  }

  // Learning-rate schedule.
  const auto& s = c.lr_schedule;
  if (s.warmup_steps > 0 && s.warmup_ratio > 0) {
    add("lr_schedule.warmup_ratio",
        msg("and lr_schedule.warmup_steps are both set (", s.warmup_ratio, ", ", s.warmup_steps, "); set one"));
  }
  if (c.lr_scaling.scale_warmup && s.warmup_ratio > 0) {
    add("lr_scaling.scale_warmup",
        "scales lr_schedule.warmup_steps; a warmup_ratio is a fraction of the run's "
        "steps instead: use warmup_steps with scale_warmup");
  }
  if (c.train.max_steps > 0 && !c.lr_scaling.scale_warmup && s.warmup_steps > c.train.max_steps) {
    add("lr_schedule.warmup_steps",
        msg(s.warmup_steps, " is longer than the run (train.max_steps ", c.train.max_steps, ")"));
  }
}

// The batch (as far as it can be checked before the world size is known) and the cost's basis.
void check_batch_and_cost(const RunConfig& c, std::vector<ConfigError>& errors) {
  auto add = [&](const std::string& key, const std::string& message) { errors.push_back({key, message}); };
  // Batch: what can be checked before the world size is known.
  if (c.train.batch_mode == TrainSettings::BatchMode::kFixedMicro && c.train.micro_batch == 0) {
    add("train.micro_batch",
        "must be > 0 with batch_mode fixed_micro (global batch = micro_batch x dp x "
        "grad_accumulation)");
  }
  if (c.train.batch_mode == TrainSettings::BatchMode::kFixedGlobal && c.train.grad_accumulation > 0 &&
      c.train.global_batch % c.train.grad_accumulation != 0) {
    add("train.global_batch",
        msg(c.train.global_batch, " is not divisible by train.grad_accumulation ", c.train.grad_accumulation));
  }

  // Cost: one basis of charging, so that the recorded cost says what it is.
  if (c.cost.price_per_gpu_hour_usd > 0 && c.cost.price_per_node_hour_usd > 0) {
    add("cost.price_per_gpu_hour_usd",
        msg("is set (", c.cost.price_per_gpu_hour_usd, ") with cost.price_per_node_hour_usd (",
            c.cost.price_per_node_hour_usd, "): set one of them (a job is charged its share of each node at a "
            "node price, or its GPUs at a GPU price)"));
  }
}

// Evaluation and early stopping.
void check_evaluation(const RunConfig& c, std::vector<ConfigError>& errors) {
  auto add = [&](const std::string& key, const std::string& message) { errors.push_back({key, message}); };
  const std::vector<std::string> families = metric_families(c.eval.metrics);
  if (!c.eval.generate) {
    for (const char* text_family : {"rouge", "squad", "classification"}) {
      if (contains(families, text_family)) {
        add("eval.generate", msg("is false, but eval.metrics asks for ", text_family, ", which scores generations"));
      }
    }
  }
  if (c.eval.every_steps > 0 && c.eval.every_epochs > 0.0) {
    add("eval.every_epochs", msg("is set (", c.eval.every_epochs, ") with eval.every_steps (",
                                 c.eval.every_steps, "): set one of them"));
  }
  const std::string& metric = c.early_stopping.metric;
  if (!metric.empty() && metric_family().count(metric) > 0) {
    if (c.eval.every_steps == 0 && c.eval.every_epochs <= 0.0) {
      add("early_stopping.metric", msg("'", metric, "' needs evaluations during training: set eval.every_steps or "
                                       "eval.every_epochs > 0"));
    }
    const std::string& family = metric_family().at(metric);
    if (!contains(families, family)) {
      add("early_stopping.metric",
          msg("'", metric, "' is computed only with '", family, "' in eval.metrics (now '", c.eval.metrics, "')"));
    }
  }
}

}  // namespace

std::vector<ConfigError> validate(const RunConfig& c) {
  // Per-key checks first, then the checks across keys; sorted by key at the end.
  std::vector<ConfigError> errors = check_key_ranges(c);
  check_length_and_model(c, errors);
  check_optimizer_and_schedule(c, errors);
  check_batch_and_cost(c, errors);
  check_evaluation(c, errors);
  sort_by_schema(errors);
  return errors;
}

std::vector<ConfigError> validate_for_world(const RunConfig& config, int64_t world_size) {
  std::vector<ConfigError> errors = validate(config);
  BatchPlan plan;
  for (auto& e : batch_errors(config, world_size, plan)) {
    // validate() already said that the accumulation does not divide the global batch
    const bool said =
        e.key == "train.global_batch" &&
        std::any_of(errors.begin(), errors.end(), [](const ConfigError& x) { return x.key == "train.global_batch"; });
    const bool said_micro =
        e.key == "train.micro_batch" &&
        std::any_of(errors.begin(), errors.end(), [](const ConfigError& x) { return x.key == "train.micro_batch"; });
    if (!said && !said_micro) errors.push_back(e);
  }
  sort_by_schema(errors);
  return errors;
}

std::vector<ConfigError> check_files(const RunConfig& c) {
  std::vector<ConfigError> errors;
  auto require_file = [&](const std::string& key, const std::string& path) {
    std::error_code ec;
    if (!fs::exists(path, ec)) {
      errors.push_back({key, msg("'", path, "' does not exist")});
    } else if (!fs::is_regular_file(path, ec)) {
      errors.push_back({key, msg("'", path, "' is not a file")});
    }
  };
  if (c.data.dataset != "synthetic") require_file("data.dataset", c.data.dataset);
  if (!c.data.tokenizer.empty()) require_file("data.tokenizer", c.data.tokenizer);
  if (!c.model.init_from.empty()) {
    std::error_code ec;
    const HfModelLookup lookup = find_hf_model_folder(c.model.init_from);
    if (lookup.folder.empty()) {
      errors.push_back({"model.init_from", hf_model_not_found(c.model.init_from, lookup)});
    } else if (!fs::is_regular_file(fs::path(lookup.folder) / "config.json", ec)) {
      const std::string where = lookup.folder == c.model.init_from ? "" : msg(" (found as ", lookup.folder, ")");
      errors.push_back({"model.init_from", msg("'", c.model.init_from, "'", where,
                                               " has no config.json (a Hugging Face T5 folder has config.json and "
                                               "model.safetensors or pytorch_model.bin)")});
    }
  }
  return errors;
}

std::string init_from_folder(const RunConfig& config) {
  if (config.model.init_from.empty()) return "";
  const HfModelLookup lookup = find_hf_model_folder(config.model.init_from);
  return lookup.folder.empty() ? config.model.init_from : lookup.folder;
}

void throw_if_errors(const std::vector<ConfigError>& errors, const std::string& source) {
  if (errors.empty()) return;
  std::string message =
      msg(source, ": invalid run config (", errors.size(), errors.size() == 1 ? " problem" : " problems", "):");
  for (const auto& e : errors) message += "\n  " + e.text();
  throw Error(message);
}

BatchPlan resolve_batch(const RunConfig& config, int64_t world_size) {
  BatchPlan plan;
  std::vector<ConfigError> errors = batch_errors(config, world_size, plan);
  if (errors.empty() && plan.global_batch == 0) {
    // a range error that batch_errors leaves to validate(): report it here too, since nothing was resolved
    for (const auto& e : check_key_ranges(config)) {
      if (e.key == "parallel.tp" || e.key.rfind("train.", 0) == 0) errors.push_back(e);
    }
  }
  throw_if_errors(errors, msg("batch split for world size ", world_size));
  return plan;
}

void apply_model_settings(const RunConfig& config, ModelConfig& model) {
  const ModelSettings& m = config.model;
  if (m.dropout_rate >= 0.0) model.dropout_rate = m.dropout_rate;
  if (m.d_model > 0) model.d_model = m.d_model;
  if (m.d_kv > 0) model.d_kv = m.d_kv;
  if (m.d_ff > 0) model.d_ff = m.d_ff;
  if (m.num_heads > 0) model.num_heads = m.num_heads;
  if (m.num_layers > 0) model.num_layers = model.num_decoder_layers = m.num_layers;
  if (m.num_decoder_layers > 0) model.num_decoder_layers = m.num_decoder_layers;
  if (m.vocab_size > 0) model.vocab_size = m.vocab_size;
}

int64_t evaluation_interval_steps(const EvalSettings& eval, int64_t steps_per_epoch) {
  if (eval.every_steps > 0) return eval.every_steps;
  if (eval.every_epochs <= 0.0 || steps_per_epoch <= 0) return 0;
  return std::max<int64_t>(1, std::llround(eval.every_epochs * static_cast<double>(steps_per_epoch)));
}

ModelConfig resolve_model_config(const RunConfig& config, int64_t vocab_size) {
  T5S_CHECK(config.model.init_from.empty(), "model.init_from is set ('", config.model.init_from,
            "'): the shape is that folder's config.json, not model.name");
  T5S_CHECK(vocab_size > 0, "the data's vocabulary size must be positive, got ", vocab_size);
  ModelConfig model;
  if (config.model.name == "tiny") {
    model = tiny_model_config(vocab_size);
  } else {
    try {
      model = named_model_config(config.model.name);
    } catch (const Error& e) {
      throw Error(msg("model.name: ", e.what()));
    }
  }
  apply_model_settings(config, model);
  T5S_CHECK(vocab_size <= model.vocab_size, "the data's vocabulary of ", vocab_size, " tokens does not fit ",
            model.name, "'s vocab_size ", model.vocab_size,
            config.model.vocab_size > 0 ? " (model.vocab_size)" : " (model.name)");
  return model;
}

std::string unused_embedding_rows_note(const RunConfig& config, const ModelConfig& model, int64_t data_vocab_size) {
  if (!config.model.init_from.empty() || config.model.name == "tiny" || config.model.vocab_size > 0 ||
      data_vocab_size <= 0) {
    return "";
  }
  const int64_t multiple = 128 % std::max<int64_t>(config.parallel.tp, 1) == 0 ? 128 : 128 * config.parallel.tp;
  const int64_t rows = (data_vocab_size + multiple - 1) / multiple * multiple;
  if (2 * rows > model.vocab_size) return "";
  const int64_t unused = (model.vocab_size - rows) * model.d_model * (model.tie_word_embeddings ? 1 : 2);
  char millions[32];
  std::snprintf(millions, sizeof(millions), "%.1fM", static_cast<double>(unused) / 1e6);
  return msg("the data's vocabulary has ", data_vocab_size, " ids and ", model.name, " keeps its ", model.vocab_size,
             " embedding rows: ", millions, " parameters",
             model.tie_word_embeddings ? "" : " (embedding and LM head)",
             " that no id reaches, trained and stepped all the same; model.vocab_size=", rows,
             " holds the data's ids (a multiple of 128)");
}

namespace {

std::string cell(const std::string& text) {
  std::string out;
  for (const char ch : text) {
    if (ch == '|')
      out += "\\|";
    else
      out += ch;
  }
  return out;
}

std::string code(const std::string& text) { return "`" + (text.empty() ? std::string("\"\"") : text) + "`"; }

const char* kIntroduction = R"(# Run configuration reference

Generated from the key registry (`src/config/config_registry.cpp`) by `t5scale-generated-file config-reference`;
`t5scale-train --config-reference` prints the same text. Do not edit by hand: the unit test
`unit.config_reference` fails when this file and the registry differ (`cmake --build <build folder> --target
update_config_reference` rewrites it).

A run config is a YAML file of sections. Every key is optional and takes the default below. On the command line,
`--set section.key=value` overrides one key (`--set precision=fp16` for the top-level key) with the same parsing
and errors as the file. An unknown key is an error that names the nearest known key; a value of the wrong type
names the key, the value and the type. Validation reports every problem at once, each starting with its key.
`t5scale-train` prints the resolved config (every key) at start and stores it in the run file (`config_yaml`).

Types: `int` (64-bit integer), `float`, `bool` (`true`/`false`, also `yes`/`no`/`on`/`off`), `string`, `enum`
(one of the names listed).
)";

const char* kCrossChecks = R"(## Checks across keys

Each is reported on the key named first.

- `train.max_steps` / `train.epochs`: exactly one is > 0 (neither is needed with `eval.only`).
- `model.name` is `tiny` or a named shape, unless `model.init_from` is set (then the shape is its `config.json`).
- `parallel.tp` divides the model's `num_heads`, `d_ff` and `vocab_size`. The vocabulary of `tiny` is the data's:
  `data.synthetic_vocab_size` for the synthetic dataset, the dataset file's `vocab_size` (checked at start-up)
  otherwise. A named shape keeps its 32128-token vocabulary, which must hold the data's ids.
- `optimizer.name`: adafactor keeps factored second moments per matrix; ZeRO-1 (`parallel.zero1`) shards a flat
  buffer — use adamw with zero1. fp16 with adafactor is allowed.
- `parallel.zero2` (gradients sharded as well) needs `parallel.zero1`.
- `optimizer.adafactor_relative_step` (Adafactor's own step size) wants `lr_scaling.rule: none`, no warmup and
  `lr_schedule.decay: constant`; `optimizer.adafactor_warmup_init` needs `adafactor_relative_step`.
- `lr_schedule.warmup_steps` and `lr_schedule.warmup_ratio` are not both set; `lr_scaling.scale_warmup` scales
  `warmup_steps` (not a ratio); the warmup is no longer than the run.
- `train.batch_mode: fixed_micro` needs `train.micro_batch` > 0. `fixed_global` needs `train.global_batch`
  divisible by `train.grad_accumulation`, and at start-up by dp x `grad_accumulation`; `train.micro_batch` is then
  0 or the derived value.
- `eval.metrics` other than `loss` score generations and need `eval.generate: true`.
- `eval.every_steps` and `eval.every_epochs` are not both set.
- `cost.price_per_gpu_hour_usd` and `cost.price_per_node_hour_usd` are not both set.
- `model.d_model`, `d_kv`, `d_ff`, `num_heads`, `num_layers`, `num_decoder_layers` are not set with
  `model.init_from` (its config.json gives the shape).
- `early_stopping.metric` needs `eval.every_steps` or `eval.every_epochs` > 0 and its family in `eval.metrics`
  (eval_loss: loss; rouge1, rouge2, rougeL, rougeLsum: rouge; exact_match, f1: squad; accuracy, macro_f1:
  classification).
- At start-up, with the world size known: the world size is divisible by `parallel.tp` (dp = world / tp), and the
  batch splits as `train.batch_mode` says.
- Files, checked at start-up (not when a study is planned, before its data exists): `data.dataset` unless
  `synthetic`, `data.tokenizer` if set, `model.init_from` if set (a folder with `config.json`, or a model name
  found in the Hugging Face cache as `models--<org>--<name>/snapshots/<commit>/`, the commit that `refs/main` names
  or else the newest; the error lists every place looked).

## Learning rate, steps and epochs

- Peak LR = `optimizer.lr` x k (`linear`), x sqrt(k) (`sqrt`) or x 1 (`none`), k = global batch /
  `lr_scaling.reference_global_batch`.
- Warmup steps = `lr_schedule.warmup_steps`, or ceil(`warmup_ratio` x total steps). With `lr_scaling.scale_warmup`
  the warmup keeps its number of samples: ceil(`warmup_steps` x `reference_global_batch` / global batch) (Goyal et
  al. 2017 warm up over a fixed number of epochs, which in steps shrinks as the batch grows).
- Total steps = `train.max_steps`, or ceil(`train.epochs` x steps per epoch), where an epoch is the training
  split in global batches (the sampler counts them; the last incomplete one is dropped with `data.drop_last`).
  The log and the run file always give both steps and epochs.
- The LR of update n (n = 0 for the first, as Hugging Face's `LambdaLR` counts) with warmup W and total T:
  peak x n / W for n < W, then `constant`: peak; `linear`: peak x (r + (1 - r) x (T - n) / (T - W));
  `cosine`: peak x (r + (1 - r) x (1 + cos(pi x (n - W) / (T - W))) / 2); `inverse_sqrt`:
  peak x max(r, 1 / sqrt((n + s - W) / s)) with timescale s = W, or 10000 when W = 0 (Hugging Face's
  `get_inverse_sqrt_schedule`); r = `lr_schedule.min_lr_ratio`. With r = 0 these are `transformers`'
  `get_constant_schedule_with_warmup`, `get_linear_schedule_with_warmup`, `get_cosine_schedule_with_warmup`
  (with r > 0: `get_cosine_with_min_lr_schedule_with_warmup`) and `get_inverse_sqrt_schedule`, value for value.
)";

}  // namespace

std::string config_reference_markdown() {
  std::string out = kIntroduction;
  out += "\nSections:";
  for (const auto& section : config_sections()) out += " [" + section.name + "](#" + section.name + ")";
  out += ".\n";
  for (const auto& section : config_sections()) {
    out += "\n## " + section.name + "\n\n" + section.doc + "\n\n";
    out += "| key | type | default | allowed | meaning |\n| --- | --- | --- | --- | --- |\n";
    for (const auto& key : config_keys()) {
      if (key.key != section.name && key.section != section.name) continue;
      out += "| `" + key.key + "` | " + type_name(key.type) + " | " + code(key.default_text) + " | " +
             cell(key.allowed) + " | " + cell(key.doc) + " |\n";
    }
  }
  out += "\n";
  out += kCrossChecks;
  return out;
}

}  // namespace t5scale
