// The key registry of the run config and everything driven by it: YAML loading, --set overrides, to_yaml, the
// per-key checks and key lookup. The table in registry() is the one place where a key is declared; the order of
// its entries is the schema's order (jobs/CONFIG_REFERENCE.md), which to_yaml and the reference follow.
#include "config/config_registry.h"
#include "config/yaml_node.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <regex>
#include <set>
#include <sstream>
#include <type_traits>
#include <utility>

#include "core/check.h"
#include "core/nearest_word.h"
#include "core/number_text.h"
#include "core/text_file.h"
#include "config/config_registry_internal.h"

namespace t5scale {

using namespace config_internal;

// ---- Enum names ----

namespace {

template <typename E>
using EnumNames = std::vector<std::pair<E, std::string>>;

template <typename E>
const EnumNames<E>& enum_names();

template <typename E>
std::string lookup_enum_name(E value) {
  for (const auto& [v, name] : enum_names<E>()) {
    if (v == value) return name;
  }
  throw Error(msg("enum value ", static_cast<int>(value), " has no name"));
}

}  // namespace

#define T5S_ENUM_NAMES(E, ...)                       \
  namespace {                                        \
  template <>                                        \
  const EnumNames<E>& enum_names<E>() {              \
    static const EnumNames<E> names = {__VA_ARGS__}; \
    return names;                                    \
  }                                                  \
  }                                                  \
  std::string enum_name(E value) { return lookup_enum_name(value); }

T5S_ENUM_NAMES(ModelSettings::Attention, {ModelSettings::Attention::kAuto, "auto"},
               {ModelSettings::Attention::kSdpa, "sdpa"}, {ModelSettings::Attention::kExplicit, "explicit"},
               {ModelSettings::Attention::kCudnn, "cudnn"})
T5S_ENUM_NAMES(DataSettings::Sampling, {DataSettings::Sampling::kRandom, "random"},
               {DataSettings::Sampling::kSortish, "sortish"}, {DataSettings::Sampling::kSequential, "sequential"})
T5S_ENUM_NAMES(ParallelSettings::Backend, {ParallelSettings::Backend::kAuto, "auto"},
               {ParallelSettings::Backend::kMpi, "mpi"}, {ParallelSettings::Backend::kNccl, "nccl"})
T5S_ENUM_NAMES(ParallelSettings::ActivationCheckpointing, {ParallelSettings::ActivationCheckpointing::kOff, "false"},
               {ParallelSettings::ActivationCheckpointing::kOn, "true"},
               {ParallelSettings::ActivationCheckpointing::kAuto, "auto"},
               {ParallelSettings::ActivationCheckpointing::kSelective, "selective"})
T5S_ENUM_NAMES(RunConfig::Precision, {RunConfig::Precision::kFp32, "fp32"}, {RunConfig::Precision::kBf16, "bf16"},
               {RunConfig::Precision::kFp16, "fp16"}, {RunConfig::Precision::kAuto, "auto"})
T5S_ENUM_NAMES(TrainSettings::BatchMode, {TrainSettings::BatchMode::kFixedGlobal, "fixed_global"},
               {TrainSettings::BatchMode::kFixedMicro, "fixed_micro"})
T5S_ENUM_NAMES(OptimizerSettings::Name, {OptimizerSettings::Name::kAdamw, "adamw"},
               {OptimizerSettings::Name::kAdafactor, "adafactor"})
T5S_ENUM_NAMES(OptimizerSettings::Fused, {OptimizerSettings::Fused::kAuto, "auto"},
               {OptimizerSettings::Fused::kOn, "on"}, {OptimizerSettings::Fused::kOff, "off"})
T5S_ENUM_NAMES(LrScheduleSettings::Decay, {LrScheduleSettings::Decay::kConstant, "constant"},
               {LrScheduleSettings::Decay::kLinear, "linear"}, {LrScheduleSettings::Decay::kCosine, "cosine"},
               {LrScheduleSettings::Decay::kInverseSqrt, "inverse_sqrt"})
T5S_ENUM_NAMES(LrScalingSettings::Rule, {LrScalingSettings::Rule::kNone, "none"},
               {LrScalingSettings::Rule::kLinear, "linear"}, {LrScalingSettings::Rule::kSqrt, "sqrt"})
T5S_ENUM_NAMES(EarlyStoppingSettings::Mode, {EarlyStoppingSettings::Mode::kAuto, "auto"},
               {EarlyStoppingSettings::Mode::kMin, "min"}, {EarlyStoppingSettings::Mode::kMax, "max"})
T5S_ENUM_NAMES(CheckpointSettings::Resume, {CheckpointSettings::Resume::kAuto, "auto"},
               {CheckpointSettings::Resume::kNever, "never"})
T5S_ENUM_NAMES(TelemetrySettings::GpuEnergy, {TelemetrySettings::GpuEnergy::kAuto, "auto"},
               {TelemetrySettings::GpuEnergy::kNvml, "nvml"}, {TelemetrySettings::GpuEnergy::kNone, "none"})
T5S_ENUM_NAMES(TelemetrySettings::CpuEnergy, {TelemetrySettings::CpuEnergy::kAuto, "auto"},
               {TelemetrySettings::CpuEnergy::kRapl, "rapl"}, {TelemetrySettings::CpuEnergy::kNone, "none"})

#undef T5S_ENUM_NAMES

std::string type_name(ConfigValueType type) {
  switch (type) {
    case ConfigValueType::kInt: return "int";
    case ConfigValueType::kFloat: return "float";
    case ConfigValueType::kBool: return "bool";
    case ConfigValueType::kString: return "string";
    case ConfigValueType::kEnum: return "enum";
  }
  return "?";
}


namespace {

// ---- Scalars: reading YAML text as a key's type, and writing values back ----

std::string lower(std::string text) {
  for (char& ch : text) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return text;
}

std::optional<bool> parse_bool(const std::string& text) {
  const std::string t = lower(text);
  if (t == "true" || t == "yes" || t == "on") return true;
  if (t == "false" || t == "no" || t == "off") return false;
  return std::nullopt;
}

// The shortest text that reads back to the same double, spelled so that YAML 1.1 readers (PyYAML) see a float:
// a '.' in the mantissa and a signed exponent ("3.0e-04", "475.0").
std::string format_float(double value) {
  char buffer[64];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  std::string text(buffer, end);
  const size_t e = text.find('e');
  const std::string mantissa = text.substr(0, e);
  if (mantissa.find('.') == std::string::npos) {
    text = mantissa + ".0" + (e == std::string::npos ? "" : text.substr(e));
  }
  return text;
}

// A number for the docs: shortest form, no forced ".0".
std::string format_number(double value) {
  char buffer[64];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, end);
}

std::string quote(const std::string& text) {
  std::string out = "\"";
  for (const char ch : text) {
    const auto byte = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (byte < 0x20 || byte == 0x7f) {
      char escape[8];
      std::snprintf(escape, sizeof(escape), "\\x%02x", byte);
      out += escape;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// ---- Registry entries ----

struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;

  bool contains(double v) const { return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi); }
  std::string text() const {
    const bool has_lo = std::isfinite(lo), has_hi = std::isfinite(hi);
    if (has_lo && has_hi) {
      return msg(lo_open ? "(" : "[", format_number(lo), ", ", format_number(hi), hi_open ? ")" : "]");
    }
    if (has_lo) return msg(lo_open ? "> " : ">= ", format_number(lo));
    if (has_hi) return msg(hi_open ? "< " : "<= ", format_number(hi));
    return "";
  }
};

Range at_least(double lo) { return Range{lo, std::numeric_limits<double>::infinity(), false, false}; }
Range above(double lo) { return Range{lo, std::numeric_limits<double>::infinity(), true, false}; }
Range closed_open(double lo, double hi) { return Range{lo, hi, false, true}; }
Range closed(double lo, double hi) { return Range{lo, hi, false, false}; }



template <typename T>
using Accessor = T& (*)(RunConfig&);

template <typename T>
const T& read(Accessor<T> access, const RunConfig& config) {
  return access(const_cast<RunConfig&>(config));  // the accessor only forms a reference; nothing is written
}


template <typename T>
Entry base_entry(const std::string& key, ConfigValueType type, Accessor<T> access, const std::string& doc) {
  Entry e;
  e.info.key = key;
  e.info.section = split_key(key).first;
  e.info.type = type;
  e.info.doc = doc;
  e.equal = [access](const RunConfig& a, const RunConfig& b) { return read(access, a) == read(access, b); };
  return e;
}

Entry int_key(const std::string& key, Accessor<int64_t> access, Range range, const std::string& doc) {
  Entry e = base_entry(key, ConfigValueType::kInt, access, doc);
  e.info.allowed = range.text();
  e.text = [access](const RunConfig& c) { return std::to_string(read(access, c)); };
  e.yaml = e.text;
  e.set = [access](RunConfig& c, const std::string& text) -> Reason {
    const auto v = parse_integer(text);
    if (!v) return msg("expected an integer (int), got '", text, "'");
    access(c) = *v;
    return std::nullopt;
  };
  e.check = [access, range](const RunConfig& c) -> Reason {
    const int64_t v = read(access, c);
    if (!range.contains(static_cast<double>(v))) return msg("must be ", range.text(), ", got ", v);
    return std::nullopt;
  };
  return e;
}

Entry float_key(const std::string& key, Accessor<double> access, Range range, const std::string& doc) {
  Entry e = base_entry(key, ConfigValueType::kFloat, access, doc);
  e.info.allowed = range.text();
  e.text = [access](const RunConfig& c) { return format_float(read(access, c)); };
  e.yaml = e.text;
  e.set = [access](RunConfig& c, const std::string& text) -> Reason {
    const auto v = parse_finite_number(text);
    if (!v) return msg("expected a finite number (float), got '", text, "'");
    access(c) = *v;
    return std::nullopt;
  };
  e.check = [access, range](const RunConfig& c) -> Reason {
    const double v = read(access, c);
    if (!range.contains(v)) return msg("must be ", range.text(), ", got ", format_number(v));
    return std::nullopt;
  };
  return e;
}

Entry bool_key(const std::string& key, Accessor<bool> access, const std::string& doc) {
  Entry e = base_entry(key, ConfigValueType::kBool, access, doc);
  e.info.allowed = "true, false";
  e.text = [access](const RunConfig& c) -> std::string { return read(access, c) ? "true" : "false"; };
  e.yaml = e.text;
  e.set = [access](RunConfig& c, const std::string& text) -> Reason {
    const auto v = parse_bool(text);
    if (!v) return msg("expected true or false (bool), got '", text, "'");
    access(c) = *v;
    return std::nullopt;
  };
  e.check = [](const RunConfig&) -> Reason { return std::nullopt; };
  return e;
}

// `check` adds a rule of the key's own (non-empty, a pattern that compiles); `allowed` documents it.
Entry string_key(const std::string& key, Accessor<std::string> access, const std::string& allowed,
                 std::function<Reason(const std::string&)> check, const std::string& doc) {
  Entry e = base_entry(key, ConfigValueType::kString, access, doc);
  e.info.allowed = allowed;
  e.text = [access](const RunConfig& c) { return read(access, c); };
  e.yaml = [access](const RunConfig& c) { return quote(read(access, c)); };
  e.set = [access](RunConfig& c, const std::string& text) -> Reason {
    access(c) = text;
    return std::nullopt;
  };
  e.check = [access, check](const RunConfig& c) -> Reason { return check ? check(read(access, c)) : std::nullopt; };
  return e;
}

Entry string_key(const std::string& key, Accessor<std::string> access, const std::string& doc) {
  return string_key(key, access, "", nullptr, doc);
}

Reason non_empty(const std::string& value) {
  if (value.empty()) return std::string("must not be empty");
  return std::nullopt;
}

// YAML 1.1 readers (PyYAML) would read these plain scalars as booleans or null.
bool ambiguous_in_yaml_1_1(const std::string& text) {
  static const std::set<std::string> words = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~", ""};
  return words.count(lower(text)) > 0;
}

// The enum type comes from the accessor's return type (a lambda does not deduce as a function pointer).
template <typename F>
Entry enum_key(const std::string& key, F lambda, const std::string& doc) {
  using E = std::remove_reference_t<decltype(lambda(std::declval<RunConfig&>()))>;
  const Accessor<E> access = lambda;
  Entry e = base_entry(key, ConfigValueType::kEnum, access, doc);
  std::vector<std::string> names;
  for (const auto& [v, name] : enum_names<E>()) names.push_back(name);
  e.info.choices = names;
  e.info.allowed = join(names, ", ");
  e.text = [access](const RunConfig& c) { return lookup_enum_name(read(access, c)); };
  e.yaml = [access](const RunConfig& c) {
    const std::string name = lookup_enum_name(read(access, c));
    return ambiguous_in_yaml_1_1(name) ? quote(name) : name;
  };
  e.set = [access, names](RunConfig& c, const std::string& text) -> Reason {
    for (const auto& [v, name] : enum_names<E>()) {
      if (name == text) {
        access(c) = v;
        return std::nullopt;
      }
    }
    const std::string nearest = nearest_word(lower(text), names, 2);  // suggest only close spellings
    return msg("'", text, "' is not one of ", join(names, ", "),
               nearest.empty() ? "" : " (did you mean '" + nearest + "'?)");
  };
  e.check = [](const RunConfig&) -> Reason { return std::nullopt; };
  return e;
}

// false, true or auto: an enum whose first two values are YAML's booleans, read in any of their spellings and
// written unquoted, so that a config with true/false reads as it did when the key was a bool.
template <typename F>
Entry bool_or_auto_key(const std::string& key, F lambda, const std::string& doc) {
  using E = std::remove_reference_t<decltype(lambda(std::declval<RunConfig&>()))>;
  const Accessor<E> access = lambda;
  Entry e = enum_key(key, lambda, doc);
  e.yaml = e.text;
  const auto set_enum = e.set;
  e.set = [access, set_enum](RunConfig& c, const std::string& text) -> Reason {
    if (const auto v = parse_bool(text)) {
      access(c) = *v ? E::kOn : E::kOff;
      return std::nullopt;
    }
    return set_enum(c, lower(text));
  };
  return e;
}

// Member access with the key spelled once: T5S_KEY(train, max_steps) -> "train.max_steps", &c.train.max_steps.
#define T5S_KEY(section, member) \
  #section "." #member, [](RunConfig& c) -> decltype(c.section.member)& { return c.section.member; }

Reason valid_metric_list(const std::string& value) {
  static const std::vector<std::string> families = {"loss", "rouge", "squad", "classification"};
  std::stringstream items(value);
  std::vector<std::string> bad;
  int count = 0;
  for (std::string item; std::getline(items, item, ',');) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    ++count;
    if (std::find(families.begin(), families.end(), item) == families.end()) bad.push_back("'" + item + "'");
  }
  if (count == 0) return std::string("must name at least one of loss, rouge, squad, classification");
  if (!bad.empty()) return msg(join(bad, ", "), " not among loss, rouge, squad, classification");
  return std::nullopt;
}

}  // namespace

namespace config_internal {

const std::vector<Entry>& registry() {
  static const std::vector<Entry> entries = [] {
    std::vector<Entry> k;
    // run
    k.push_back(string_key(
        T5S_KEY(run, name), "non-empty, no '/'",
        [](const std::string& v) -> Reason {
          if (v.empty()) return std::string("must not be empty");
          if (v.find('/') != std::string::npos || v == "." || v == "..") {
            return msg("'", v, "' is used as a file name: no '/', not '.' or '..'");
          }
          return std::nullopt;
        },
        "Run name: run file `<output_dir>/<name>.h5`, checkpoints `<output_dir>/<name>.ckpt/`, "
        "generations `<output_dir>/<name>.eval.jsonl`."));
    k.push_back(
        string_key(T5S_KEY(run, study), "Study the run belongs to, recorded in the run file (t5scale-study sets it)."));
    k.push_back(string_key(T5S_KEY(run, output_dir), "non-empty", non_empty,
                           "Folder of the run file, checkpoints and generations (created if missing)."));
    k.push_back(int_key(T5S_KEY(run, seed), at_least(0), "Seed of the initialisation, dropout and data order."));
    k.push_back(int_key(T5S_KEY(run, planned_world_size), at_least(0),
                        "The world size (processes) the run was planned for; 0 = any. t5scale-study sets it in the "
                        "configs it renders, and the job refuses to run on another number of processes."));
    // model
    k.push_back(string_key(T5S_KEY(model, name), "tiny, " + join(named_model_names(), ", "), nullptr,
                           "Model shape: tiny (a small model for demos and tests, vocabulary from the data) or a "
                           "named shape (also with a google/ prefix)."));
    k.push_back(string_key(T5S_KEY(model, init_from),
                           "Hugging Face T5 model to start from: a folder (config.json + model.safetensors, "
                           "sharded safetensors or pytorch_model.bin) or a model name (google/t5-v1_1-base, "
                           "t5-small) found in the local Hugging Face cache ($HF_HUB_CACHE, else $HF_HOME/hub, else "
                           "$XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub; nothing is downloaded). "
                           "Its config.json gives the shape and model.name is only a label. \"\" = initialise from "
                           "run.seed."));
    k.push_back([] {
      Entry e = float_key(T5S_KEY(model, dropout_rate), Range{},
                          "Dropout probability; -1 = the shape's own (tiny 0, named shapes 0.1, init_from its "
                          "config.json).");
      e.info.allowed = "-1, or [0, 1)";
      e.check = [](const RunConfig& c) -> Reason {
        const double v = c.model.dropout_rate;
        if (v == -1.0 || (v >= 0.0 && v < 1.0)) return std::nullopt;
        return msg("must be -1 (the model's own) or in [0, 1), got ", format_number(v));
      };
      return e;
    }());
    k.push_back(enum_key(
        T5S_KEY(model, attention),
        "Attention kernel: auto (sdpa on GPUs, explicit on CPUs), sdpa (scaled_dot_product_attention: the "
        "memory-efficient kernel where the position bias needs its gradient), explicit (matmuls around an fp32 "
        "softmax, bit-equal to transformers), or cudnn (cuDNN's fused flash attention through its graph API, with the "
        "position bias and its gradient, the causal mask, padding as key lengths and dropout drawn by cuDNN from the "
        "TP stream's seed and offset; sdpa runs a call cuDNN does not take: fp32, a head dim not a multiple of 8 or "
        "over 128, no GPU). The run file's attention_kernels says what ran. cudnn is off by default until a GPU has "
        "measured it."));
    auto dimension = [&k](const std::string& key, Accessor<int64_t> access, const std::string& what) {
      k.push_back(int_key(key, std::move(access), at_least(0),
                          what + "; 0 = the shape's own. For a model trained from scratch (not with init_from); "
                                 "named as in Hugging Face's T5Config."));
    };
    dimension(T5S_KEY(model, d_model), "Width of the model (hidden size)");
    dimension(T5S_KEY(model, d_kv), "Width of each attention head");
    dimension(T5S_KEY(model, d_ff), "Width of the feed-forward layer");
    dimension(T5S_KEY(model, num_heads), "Attention heads per layer");
    dimension(T5S_KEY(model, num_layers),
              "Encoder blocks, and decoder blocks unless num_decoder_layers is set (as T5Config does)");
    dimension(T5S_KEY(model, num_decoder_layers), "Decoder blocks");
    dimension(T5S_KEY(model, vocab_size),
              "Embedding rows, and the LM head's: at least the data's vocabulary (a tokenizer trained on the data "
              "needs far fewer than a named shape's 32,128; a multiple of 128 keeps the products aligned)");
    // data
    k.push_back(string_key(T5S_KEY(data, dataset), "non-empty", non_empty,
                           "Training data: a tokenized dataset file written by t5scale-prep (HDF5), or synthetic "
                           "(the built-in shift-by-one task)."));
    k.push_back(string_key(T5S_KEY(data, tokenizer),
                           "SentencePiece .model file that made the dataset, to decode generations for the text "
                           "metrics; \"\" = none."));
    k.push_back(string_key(T5S_KEY(data, train_split), "non-empty", non_empty, "Split (HDF5 group) to train on."));
    k.push_back(string_key(T5S_KEY(data, eval_split), "non-empty", non_empty, "Split (HDF5 group) to evaluate on."));
    k.push_back(int_key(T5S_KEY(data, max_source_length), at_least(0),
                        "Source tokens kept per example (a cut keeps the final eos); 0 = as stored."));
    k.push_back(int_key(T5S_KEY(data, max_target_length), at_least(0),
                        "Target tokens kept per example (a cut keeps the final eos); 0 = as stored."));
    k.push_back(enum_key(T5S_KEY(data, sampling),
                         "Order of the training examples: random (reshuffled every epoch), sortish (batches of "
                         "similar length, in random order), sequential (file order)."));
    k.push_back(int_key(T5S_KEY(data, sortish_factor), at_least(1),
                        "sortish: pools of sortish_factor x global batch examples are sorted by length and cut into "
                        "batches."));
    k.push_back(int_key(T5S_KEY(data, max_tokens_per_micro_batch), at_least(0),
                        "Cap on the padded tokens (source + target) of one micro-batch; 0 = no cap."));
    k.push_back(int_key(T5S_KEY(data, pad_to_multiple_of), at_least(1),
                        "Pad batch lengths up to a multiple of this (tensor-core friendly shapes); 1 = no rounding."));
    k.push_back(bool_key(T5S_KEY(data, drop_last), "Drop the last incomplete global batch of each epoch."));
    k.push_back(int_key(T5S_KEY(data, synthetic_vocab_size), at_least(5),
                        "synthetic: vocabulary size (ids 0, 1, 2 are pad, eos, unk; the alphabet is the rest)."));
    k.push_back(int_key(T5S_KEY(data, synthetic_examples), at_least(1), "synthetic: examples per epoch."));
    // parallel
    k.push_back(int_key(T5S_KEY(parallel, tp), at_least(1),
                        "Tensor-parallel size (consecutive ranks); divides the model's heads, d_ff and vocabulary "
                        "and the world size; dp = world / tp."));
    k.push_back(bool_key(T5S_KEY(parallel, zero1), "Shard the optimizer state over the data-parallel ranks (ZeRO-1)."));
    k.push_back(bool_key(T5S_KEY(parallel, zero2),
                         "Shard the fp32 gradients too (ZeRO-2): reduce-scattered every micro-batch, each rank keeping "
                         "its chunk; needs parallel.zero1."));
    k.push_back(bool_key(T5S_KEY(parallel, offload_optimizer),
                         "Keep the fp32 master weights, the optimizer's moments (AdamW, Adafactor) and a copy of the "
                         "reduced fp32 gradients in host memory (pinned on CUDA) and run the update on the CPU cores "
                         "(DeepSpeed's ZeRO-Offload): the device holds the model's weights, gradient buckets and "
                         "activations only. Each bucket's gradients go to the host as soon as the bucket is reduced, "
                         "while backward goes on; the new weights come back one copy per bucket. The same update as "
                         "without it; with parallel.zero1 each rank offloads its shard; checkpoints are the same "
                         "files."));
    k.push_back(bool_or_auto_key(
        T5S_KEY(parallel, activation_checkpointing),
        "Recompute activations in backward instead of keeping them: true (every checkpoint_every_blocks-th T5 block), "
        "selective (every attention core: scores, softmax, dropout and weighted values, Megatron-LM's selective mode), "
        "false, or auto (of none, selective, every k-th block and every block, the one recomputing the fewest FLOPs "
        "whose predicted memory fits the device; chosen at start, logged, and recorded in the run file as "
        "checkpoint_every_blocks and recomputation)."));
    k.push_back(int_key(T5S_KEY(parallel, checkpoint_every_blocks), at_least(1),
                        "With activation_checkpointing: true, checkpoint every k-th block."));
    k.push_back(bool_key(
        T5S_KEY(parallel, sequence_parallel),
        "Sequence parallelism (Megatron-LM's): the norms, dropouts and residual adds between the tensor-parallel "
        "regions run on 1 / tp of each micro-batch's tokens, all-gathered on entry to attention and feed-forward and "
        "reduce-scattered on exit, so their activations take 1 / tp of the memory at the same traffic; batch lengths "
        "are padded to a multiple of tp as well. No effect at tp 1. Generation keeps whole sequences."));
    k.push_back(float_key(T5S_KEY(parallel, device_memory_gib), at_least(0),
                          "The memory one rank may use, in GiB (a GPU shared with other work, a MIG slice); 0 = "
                          "what the device has: its GPU's memory, or on CPUs the host's memory over the node's "
                          "ranks. activation_checkpointing: auto plans for it, and a run whose predicted memory "
                          "does not fit it (with 5% to spare) is refused before anything is allocated."));
    k.push_back(float_key(T5S_KEY(parallel, bucket_mib), above(0),
                          "Size of the gradient buckets of the data-parallel reduction, in MiB."));
    k.push_back(float_key(T5S_KEY(parallel, collective_timeout_s), above(0),
                          "A collective still waiting after this many seconds aborts the job, naming the operation "
                          "and (MPI backend) the ranks that no longer answer, with their hosts."));
    k.push_back(enum_key(T5S_KEY(parallel, backend), "Collectives: auto (nccl on GPUs, mpi on CPUs), mpi, nccl."));
    // precision (a top-level key)
    k.push_back(enum_key(
        "precision", [](RunConfig& c) -> RunConfig::Precision& { return c.precision; },
        "Compute precision: auto (bf16 on GPUs that have it, fp16 on those that have not, fp32 on CPUs; the job "
        "records what it chose), fp32, bf16, or fp16 with dynamic loss scaling; master weights, gradient "
        "accumulation and optimizer state are fp32 always."));
    // train
    k.push_back(int_key(T5S_KEY(train, max_steps), at_least(0),
                        "Optimizer steps to train; exactly one of max_steps and epochs is > 0."));
    k.push_back(float_key(T5S_KEY(train, epochs), at_least(0),
                          "Passes over the training split, may be fractional (steps = epochs x steps per epoch, "
                          "rounded up); exactly one of max_steps and epochs is > 0."));
    k.push_back(int_key(T5S_KEY(train, global_batch), at_least(1),
                        "Sequences per optimizer step over all replicas (batch_mode fixed_global)."));
    k.push_back(int_key(T5S_KEY(train, micro_batch), at_least(0),
                        "Sequences per micro-batch and replica: required in fixed_micro; in fixed_global 0 = "
                        "derived (any other value must equal the derived one)."));
    k.push_back(int_key(T5S_KEY(train, grad_accumulation), at_least(1),
                        "Micro-batches per optimizer step and replica (gradient accumulation)."));
    k.push_back(enum_key(T5S_KEY(train, batch_mode),
                         "fixed_global: micro_batch = global_batch / (dp x grad_accumulation), which must divide; "
                         "fixed_micro: global batch = micro_batch x dp x grad_accumulation (global_batch unused)."));
    k.push_back(float_key(T5S_KEY(train, max_grad_norm), at_least(0),
                          "Clip the global gradient norm to this; 0 = no clipping."));
    k.push_back(int_key(T5S_KEY(train, log_every), at_least(1), "A log line every this many steps."));
    k.push_back(float_key(T5S_KEY(train, log_every_s), at_least(0),
                          "Also a step line, with the time left, when this many seconds have passed since the last "
                          "one (and after the first step): slow steps show that the job lives. 0: only every "
                          "log_every steps."));
    k.push_back(bool_key(T5S_KEY(train, freeze_embeddings), "Do not train the token embeddings."));
    k.push_back(bool_key(T5S_KEY(train, freeze_encoder), "Do not train the encoder stack."));
    k.push_back(string_key(
        T5S_KEY(train, freeze_pattern), "ECMAScript regular expression",
        [](const std::string& v) -> Reason {
          try {
            std::regex compiled(v, std::regex::ECMAScript);
          } catch (const std::regex_error& e) {
            return msg("'", v, "' is not a valid regular expression: ", e.what());
          }
          return std::nullopt;
        },
        "Do not train the parameters whose Hugging Face name contains a match of this "
        "regular expression; \"\" = none."));
    // optimizer
    k.push_back(enum_key(T5S_KEY(optimizer, name),
                         "adamw (decoupled weight decay) or adafactor (factored second moments, T5's optimizer)."));
    k.push_back(float_key(T5S_KEY(optimizer, lr), above(0),
                          "Base learning rate, before lr_scaling: the peak of the schedule at the reference batch."));
    k.push_back(
        float_key(T5S_KEY(optimizer, weight_decay), at_least(0), "Decoupled weight decay (not on norms and biases)."));
    k.push_back(float_key(T5S_KEY(optimizer, beta1), closed_open(0, 1), "AdamW: first-moment decay."));
    k.push_back(float_key(T5S_KEY(optimizer, beta2), closed_open(0, 1), "AdamW: second-moment decay."));
    k.push_back(float_key(T5S_KEY(optimizer, eps), above(0), "AdamW: epsilon added to the root of the second moment."));
    k.push_back(enum_key(T5S_KEY(optimizer, fused),
                         "AdamW: the fused ATen kernel: auto (where the device has one), on (required), off."));
    k.push_back(bool_key(T5S_KEY(optimizer, adafactor_relative_step),
                         "Adafactor: its own step size min(1e-2, 1/sqrt(step)) instead of optimizer.lr and the "
                         "schedule."));
    k.push_back(bool_key(T5S_KEY(optimizer, adafactor_scale_parameter),
                         "Adafactor: scale the step by the root mean square of each weight."));
    k.push_back(bool_key(T5S_KEY(optimizer, adafactor_warmup_init),
                         "Adafactor with adafactor_relative_step: start the step size at 1e-6 x step."));
    k.push_back(float_key(T5S_KEY(optimizer, adafactor_decay_rate), closed_open(-1, 0),
                          "Adafactor: second-moment decay 1 - step^decay_rate."));
    k.push_back(float_key(T5S_KEY(optimizer, adafactor_clip_threshold), above(0),
                          "Adafactor: clip the root mean square of the update to this."));
    k.push_back(float_key(T5S_KEY(optimizer, adafactor_beta1), closed_open(0, 1),
                          "Adafactor: first-moment decay; 0 = no first moment (saves its memory)."));
    k.push_back(float_key(T5S_KEY(optimizer, adafactor_eps1), above(0),
                          "Adafactor: regulariser added to the squared gradients."));
    k.push_back(float_key(T5S_KEY(optimizer, adafactor_eps2), above(0),
                          "Adafactor: floor of the parameter scale (with adafactor_scale_parameter)."));
    // lr_schedule
    k.push_back(int_key(T5S_KEY(lr_schedule, warmup_steps), at_least(0),
                        "Linear warmup from 0 to the peak over this many steps (the first update has LR 0, as in "
                        "Hugging Face's schedules)."));
    k.push_back(float_key(T5S_KEY(lr_schedule, warmup_ratio), closed_open(0, 1),
                          "Warmup as a fraction of the total steps, rounded up; set warmup_steps or warmup_ratio, "
                          "not both."));
    k.push_back(enum_key(T5S_KEY(lr_schedule, decay),
                         "After warmup: constant; linear or cosine, reaching min_lr_ratio x peak at the total "
                         "step count; inverse_sqrt: peak x sqrt(warmup / step) (no warmup: timescale 10000)."));
    k.push_back(float_key(T5S_KEY(lr_schedule, min_lr_ratio), closed(0, 1),
                          "linear, cosine: the final LR as a fraction of the peak; inverse_sqrt: a floor; constant: "
                          "unused."));
    // lr_scaling
    k.push_back(enum_key(T5S_KEY(lr_scaling, rule),
                         "Peak LR = optimizer.lr x k (linear), x sqrt(k) (sqrt) or x 1 (none), with k = global "
                         "batch / reference_global_batch."));
    k.push_back(int_key(T5S_KEY(lr_scaling, reference_global_batch), at_least(1),
                        "The global batch at which optimizer.lr was tuned."));
    k.push_back(bool_key(T5S_KEY(lr_scaling, scale_warmup),
                         "Keep the warmup's samples: warmup_steps x reference_global_batch / global batch, rounded "
                         "up (Goyal et al. 2017 warm up for a fixed number of epochs)."));
    // eval
    k.push_back(
        int_key(T5S_KEY(eval, every_steps), at_least(0), "Evaluate every this many steps; 0 = not during training."));
    k.push_back(float_key(T5S_KEY(eval, every_epochs), at_least(0),
                          "Evaluate every this many epochs, may be fractional (rounded to the nearest step, at least "
                          "1), so that runs of different batch sizes evaluate at the same points of the data; 0 = "
                          "off. Not with every_steps."));
    k.push_back(bool_key(T5S_KEY(eval, at_end), "Evaluate after the last step."));
    k.push_back(int_key(T5S_KEY(eval, max_examples), at_least(0),
                        "Evaluate on the first this many examples of eval_split; 0 = all."));
    k.push_back(int_key(T5S_KEY(eval, batch_size), at_least(1), "Sequences per evaluation batch and replica."));
    k.push_back(bool_key(T5S_KEY(eval, generate), "Generate (greedy) for the text metrics; false = loss only."));
    k.push_back(int_key(T5S_KEY(eval, max_new_tokens), at_least(1), "Most tokens generated per example."));
    k.push_back(string_key(T5S_KEY(eval, metrics), "comma list of loss, rouge, squad, classification",
                           valid_metric_list,
                           "Metric families: loss (eval_loss), rouge (rouge1, rouge2, rougeL, rougeLsum), squad "
                           "(exact_match, f1), classification (accuracy, macro_f1)."));
    k.push_back(
        bool_key(T5S_KEY(eval, write_generations), "Write the generations to `<output_dir>/<name>.eval.jsonl`."));
    k.push_back(bool_key(T5S_KEY(eval, only),
                         "Evaluation-only mode: evaluate the starting model (model.init_from or the latest "
                         "checkpoint) and stop; no max_steps or epochs needed."));
    // early_stopping
    k.push_back(string_key(
        T5S_KEY(early_stopping, metric), "\"\", " + join(known_eval_metric_names(), ", "),
        [](const std::string& v) -> Reason {
          const auto& names = known_eval_metric_names();
          if (v.empty() || std::find(names.begin(), names.end(), v) != names.end()) {
            return std::nullopt;
          }
          return msg("'", v, "' is not one of ", join(names, ", "));
        },
        "Stop when this evaluation metric stops improving; \"\" = off. Needs eval.every_steps or every_epochs > "
        "0 and the metric's family in eval.metrics."));
    k.push_back(enum_key(T5S_KEY(early_stopping, mode),
                         "The better direction: min, max, or auto (min for eval_loss, max for the others)."));
    k.push_back(
        int_key(T5S_KEY(early_stopping, patience), at_least(1), "Evaluations without improvement before stopping."));
    k.push_back(float_key(T5S_KEY(early_stopping, min_delta), at_least(0),
                          "Smallest change of the metric that counts as an improvement."));
    // checkpoint
    k.push_back(string_key(T5S_KEY(checkpoint, dir), "Checkpoint folder; \"\" = `<output_dir>/<name>.ckpt`."));
    k.push_back(int_key(T5S_KEY(checkpoint, every_steps), at_least(0), "Checkpoint every this many steps; 0 = off."));
    k.push_back(float_key(T5S_KEY(checkpoint, every_minutes), at_least(0),
                          "Checkpoint when this many minutes have passed since the last one; 0 = off."));
    k.push_back(int_key(T5S_KEY(checkpoint, keep_last), at_least(1),
                        "Checkpoints kept; older ones are deleted once a newer one is complete."));
    k.push_back(enum_key(T5S_KEY(checkpoint, resume),
                         "auto: resume from the latest valid checkpoint in the folder, if any; never: start fresh."));
    k.push_back(bool_key(T5S_KEY(checkpoint, at_end), "Checkpoint after the last step."));
    k.push_back(bool_key(T5S_KEY(checkpoint, allow_config_change),
                         "Resume although the config differs from the checkpoint's in a key that changes the data "
                         "order or the meaning of the record (model, data, train, optimizer, lr_schedule, "
                         "lr_scaling, precision, run.seed); false refuses such a resume. Every change is recorded in "
                         "the run file (config_changes)."));
    // export
    k.push_back(string_key(
        "export.hf_dir", [](RunConfig& c) -> std::string& { return c.export_.hf_dir; },
        "Write the final model as a Hugging Face T5 folder (config.json + model.safetensors); "
        "\"\" = no export."));
    // telemetry
    k.push_back(int_key(T5S_KEY(telemetry, flush_every_steps), at_least(1),
                        "Flush the run file every this many steps (and at exit)."));
    k.push_back(enum_key(T5S_KEY(telemetry, gpu_energy),
                         "GPU energy: auto (NVML's energy counter, else integrated power, else none), nvml "
                         "(required), none."));
    k.push_back(enum_key(T5S_KEY(telemetry, cpu_energy),
                         "CPU package energy: auto (RAPL where readable, else none), rapl (required), none."));
    k.push_back(string_key(T5S_KEY(telemetry, powercap_root), "non-empty", non_empty,
                           "Where RAPL's counters are read (intel-rapl:<N>/energy_uj): a container may mount the "
                           "host's powercap folder elsewhere."));
    k.push_back(float_key(T5S_KEY(telemetry, peak_flops_per_device), at_least(0),
                          "Peak FLOP/s of one device, for MFU; 0 = from the table of peaks by device name."));
    k.push_back(string_key(T5S_KEY(telemetry, machine_rates),
                           "The rates file (t5scale-bench --calibrate) the step-time model predicts "
                           "predicted_step_time_s with; empty = the published figures of the run's GPU, or on a "
                           "CPU the uncalibrated figures of one development core."));
    // cost
    k.push_back(float_key(T5S_KEY(cost, price_per_node_hour_usd), at_least(0),
                          "Price of one node-hour in USD: cost = price x nodes x the share of each node the job "
                          "holds x wall time, the share being GPUs held / cost.node_gpus (CPUs held / the node's "
                          "CPUs on a CPU job; recorded as node_share_fraction); 0 = not set (cost unknown, NaN, "
                          "unless price_per_gpu_hour_usd is set)."));
    k.push_back(float_key(T5S_KEY(cost, price_per_gpu_hour_usd), at_least(0),
                          "Price of one GPU-hour in USD: cost = price x GPUs held (allocated_gpus_per_node x "
                          "nodes) x wall time; a CPU job's cost stays unknown; 0 = not set. Not with "
                          "price_per_node_hour_usd."));
    k.push_back(float_key(T5S_KEY(cost, low_priority_price_per_node_hour_usd), at_least(0),
                          "Price of one low-priority (preemptible) node-hour in USD, for comparison, charged by the "
                          "same node share; 0 = unknown."));
    k.push_back(float_key(T5S_KEY(cost, carbon_intensity_g_per_kwh), at_least(0),
                          "Carbon intensity of the electricity, g CO2eq per kWh (475: world average, as CodeCarbon "
                          "uses)."));
    k.push_back(float_key(T5S_KEY(cost, pue), at_least(1),
                          "Power usage effectiveness of the data centre: energy = (GPU + CPU) x pue; 1 = hardware "
                          "only."));
    k.push_back(int_key(T5S_KEY(cost, gpus_per_node), at_least(0),
                        "GPUs per node, for nodes = world / gpus_per_node; 0 = from the launch (Slurm)."));
    k.push_back(int_key(T5S_KEY(cost, node_gpus), at_least(0),
                        "GPUs one node has, for the share of price_per_node_hour_usd that a job holding fewer of "
                        "them is charged (1 of 4: a quarter); 0 = counted on the node (NVML). t5scale-study sets it "
                        "to slurm.gpus_per_node."));

    const RunConfig defaults;
    for (Entry& e : k) e.info.default_text = e.text(defaults);
    return k;
  }();
  return entries;
}

#undef T5S_KEY

}  // namespace config_internal

}  // namespace t5scale
