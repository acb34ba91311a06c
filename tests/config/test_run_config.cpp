// The run config: a full YAML file loads into the right members, defaults are the schema's, --set overrides,
// every kind of bad input is refused naming its key, validate() returns every error at once, to_yaml() round
// trips, the batch split and model shape resolve, and jobs/CONFIG_REFERENCE.md is what the registry generates.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "config/config_registry.h"
#include "config/run_config.h"
#include "core/check.h"
#include "support/base_test_support.h"

namespace t5scale {
namespace {

using testing::error_of;
using testing::TempDir;

// Every key of the schema with a value other than its default.
const char* kFullYaml = R"(# a full run config
run:
  name: scaling-k4
  study: lr_rules
  output_dir: /scratch/results
  seed: 7
  planned_world_size: 8
model:
  name: t5-v1_1-base
  init_from: /models/t5-v1_1-base
  dropout_rate: 0.05
  attention: cudnn
  d_model: 384
  d_kv: 48
  d_ff: 1536
  num_heads: 8
  num_layers: 6
  num_decoder_layers: 4
  vocab_size: 4096
data:
  dataset: /data/samsum.h5
  tokenizer: /data/spiece.model
  train_split: train_small
  eval_split: test
  max_source_length: 1024
  max_target_length: 256
  sampling: sortish
  sortish_factor: 20
  max_tokens_per_micro_batch: 8192
  pad_to_multiple_of: 64
  drop_last: false
  synthetic_vocab_size: 128
  synthetic_examples: 512
parallel:
  tp: 4
  zero1: true
  zero2: true
  offload_optimizer: true
  activation_checkpointing: true
  checkpoint_every_blocks: 2
  sequence_parallel: true
  device_memory_gib: 39.5
  bucket_mib: 50.5
  collective_timeout_s: 120
  backend: nccl
precision: fp16
train:
  max_steps: 0
  epochs: 2.5
  global_batch: 256
  micro_batch: 4
  grad_accumulation: 8
  batch_mode: fixed_micro
  max_grad_norm: 0.5
  log_every: 25
  log_every_s: 60.0
  freeze_embeddings: true
  freeze_encoder: true
  freeze_pattern: "decoder\\.block\\.0\\."
optimizer:
  name: adafactor
  lr: 1.0e-3
  weight_decay: 0.01
  beta1: 0.8
  beta2: 0.98
  eps: 1.0e-6
  fused: off
  adafactor_relative_step: true
  adafactor_scale_parameter: true
  adafactor_warmup_init: true
  adafactor_decay_rate: -0.5
  adafactor_clip_threshold: 2.0
  adafactor_beta1: 0.9
  adafactor_eps1: 1.0e-20
  adafactor_eps2: 2.0e-3
lr_schedule:
  warmup_steps: 100
  warmup_ratio: 0.1
  decay: inverse_sqrt
  min_lr_ratio: 0.05
lr_scaling:
  rule: sqrt
  reference_global_batch: 32
  scale_warmup: true
eval:
  every_steps: 500
  every_epochs: 0.25
  at_end: false
  max_examples: 1000
  batch_size: 64
  generate: false
  max_new_tokens: 128
  metrics: loss,rouge
  write_generations: false
  only: true
early_stopping:
  metric: rougeL
  mode: max
  patience: 5
  min_delta: 0.001
checkpoint:
  dir: /scratch/ckpt
  every_steps: 1000
  every_minutes: 30
  keep_last: 3
  resume: never
  at_end: false
  allow_config_change: true
export:
  hf_dir: /scratch/export
telemetry:
  flush_every_steps: 50
  gpu_energy: nvml
  cpu_energy: none
  powercap_root: /host/sys/class/powercap
  peak_flops_per_device: 3.12e14
  machine_rates: rates/cluster.json
cost:
  price_per_node_hour_usd: 32.77
  price_per_gpu_hour_usd: 4.1
  low_priority_price_per_node_hour_usd: 6.55
  carbon_intensity_g_per_kwh: 350
  pue: 1.2
  gpus_per_node: 8
  node_gpus: 8
)";

RunConfig valid_config() {
  RunConfig c;
  c.train.max_steps = 100;
  return c;
}

std::vector<std::string> keys_of(const std::vector<ConfigError>& errors) {
  std::vector<std::string> keys;
  for (const auto& e : errors) keys.push_back(e.key);
  return keys;
}

std::string all_text(const std::vector<ConfigError>& errors) {
  std::string out;
  for (const auto& e : errors) out += e.text() + "\n";
  return out;
}

// The one error of `errors` on `key`; fails if there is not exactly one.
std::string only_error_on(const std::vector<ConfigError>& errors, const std::string& key) {
  std::vector<std::string> messages;
  for (const auto& e : errors) {
    if (e.key == key) messages.push_back(e.message);
  }
  EXPECT_EQ(messages.size(), 1u) << "errors on " << key << " in:\n" << all_text(errors);
  return messages.empty() ? "" : messages[0];
}

std::vector<ConfigError> errors_after(const std::vector<std::string>& overrides) {
  RunConfig c = valid_config();
  apply_overrides(c, overrides);
  return validate(c);
}

// ---------------------------------------------------------------------------------------------------------------

TEST(RunConfigLoad, FullFileSetsEveryMember) {
  const RunConfig c = parse_run_config(kFullYaml, "full.yaml");
  EXPECT_EQ(c.run.name, "scaling-k4");
  EXPECT_EQ(c.run.study, "lr_rules");
  EXPECT_EQ(c.run.output_dir, "/scratch/results");
  EXPECT_EQ(c.run.seed, 7);
  EXPECT_EQ(c.run.planned_world_size, 8);
  EXPECT_EQ(c.model.name, "t5-v1_1-base");
  EXPECT_EQ(c.model.init_from, "/models/t5-v1_1-base");
  EXPECT_EQ(c.model.dropout_rate, 0.05);
  EXPECT_EQ(c.model.attention, ModelSettings::Attention::kCudnn);
  EXPECT_EQ(c.model.d_model, 384);
  EXPECT_EQ(c.model.d_kv, 48);
  EXPECT_EQ(c.model.d_ff, 1536);
  EXPECT_EQ(c.model.num_heads, 8);
  EXPECT_EQ(c.model.num_layers, 6);
  EXPECT_EQ(c.model.num_decoder_layers, 4);
  EXPECT_EQ(c.model.vocab_size, 4096);
  EXPECT_EQ(c.data.dataset, "/data/samsum.h5");
  EXPECT_EQ(c.data.tokenizer, "/data/spiece.model");
  EXPECT_EQ(c.data.train_split, "train_small");
  EXPECT_EQ(c.data.eval_split, "test");
  EXPECT_EQ(c.data.max_source_length, 1024);
  EXPECT_EQ(c.data.max_target_length, 256);
  EXPECT_EQ(c.data.sampling, DataSettings::Sampling::kSortish);
  EXPECT_EQ(c.data.sortish_factor, 20);
  EXPECT_EQ(c.data.max_tokens_per_micro_batch, 8192);
  EXPECT_EQ(c.data.pad_to_multiple_of, 64);
  EXPECT_FALSE(c.data.drop_last);
  EXPECT_EQ(c.data.synthetic_vocab_size, 128);
  EXPECT_EQ(c.data.synthetic_examples, 512);
  EXPECT_EQ(c.parallel.tp, 4);
  EXPECT_TRUE(c.parallel.zero2);
  EXPECT_TRUE(c.parallel.offload_optimizer);
  EXPECT_TRUE(c.parallel.zero1);
  EXPECT_EQ(c.parallel.activation_checkpointing, ParallelSettings::ActivationCheckpointing::kOn);
  EXPECT_EQ(c.parallel.checkpoint_every_blocks, 2);
  EXPECT_TRUE(c.parallel.sequence_parallel);
  EXPECT_EQ(c.parallel.device_memory_gib, 39.5);
  EXPECT_EQ(c.parallel.bucket_mib, 50.5);
  EXPECT_EQ(c.parallel.collective_timeout_s, 120.0);
  EXPECT_EQ(c.parallel.backend, ParallelSettings::Backend::kNccl);
  EXPECT_EQ(c.precision, RunConfig::Precision::kFp16);
  EXPECT_EQ(c.train.max_steps, 0);
  EXPECT_EQ(c.train.epochs, 2.5);
  EXPECT_EQ(c.train.global_batch, 256);
  EXPECT_EQ(c.train.micro_batch, 4);
  EXPECT_EQ(c.train.grad_accumulation, 8);
  EXPECT_EQ(c.train.batch_mode, TrainSettings::BatchMode::kFixedMicro);
  EXPECT_EQ(c.train.max_grad_norm, 0.5);
  EXPECT_EQ(c.train.log_every, 25);
  EXPECT_EQ(c.train.log_every_s, 60.0);
  EXPECT_TRUE(c.train.freeze_embeddings);
  EXPECT_TRUE(c.train.freeze_encoder);
  EXPECT_EQ(c.train.freeze_pattern, "decoder\\.block\\.0\\.");
  EXPECT_EQ(c.optimizer.name, OptimizerSettings::Name::kAdafactor);
  EXPECT_EQ(c.optimizer.lr, 1.0e-3);
  EXPECT_EQ(c.optimizer.weight_decay, 0.01);
  EXPECT_EQ(c.optimizer.beta1, 0.8);
  EXPECT_EQ(c.optimizer.beta2, 0.98);
  EXPECT_EQ(c.optimizer.eps, 1.0e-6);
  EXPECT_EQ(c.optimizer.fused, OptimizerSettings::Fused::kOff);
  EXPECT_TRUE(c.optimizer.adafactor_relative_step);
  EXPECT_TRUE(c.optimizer.adafactor_scale_parameter);
  EXPECT_TRUE(c.optimizer.adafactor_warmup_init);
  EXPECT_EQ(c.optimizer.adafactor_decay_rate, -0.5);
  EXPECT_EQ(c.optimizer.adafactor_clip_threshold, 2.0);
  EXPECT_EQ(c.optimizer.adafactor_beta1, 0.9);
  EXPECT_EQ(c.optimizer.adafactor_eps1, 1.0e-20);
  EXPECT_EQ(c.optimizer.adafactor_eps2, 2.0e-3);
  EXPECT_EQ(c.lr_schedule.warmup_steps, 100);
  EXPECT_EQ(c.lr_schedule.warmup_ratio, 0.1);
  EXPECT_EQ(c.lr_schedule.decay, LrScheduleSettings::Decay::kInverseSqrt);
  EXPECT_EQ(c.lr_schedule.min_lr_ratio, 0.05);
  EXPECT_EQ(c.lr_scaling.rule, LrScalingSettings::Rule::kSqrt);
  EXPECT_EQ(c.lr_scaling.reference_global_batch, 32);
  EXPECT_TRUE(c.lr_scaling.scale_warmup);
  EXPECT_EQ(c.eval.every_steps, 500);
  EXPECT_EQ(c.eval.every_epochs, 0.25);
  EXPECT_FALSE(c.eval.at_end);
  EXPECT_EQ(c.eval.max_examples, 1000);
  EXPECT_EQ(c.eval.batch_size, 64);
  EXPECT_FALSE(c.eval.generate);
  EXPECT_EQ(c.eval.max_new_tokens, 128);
  EXPECT_EQ(c.eval.metrics, "loss,rouge");
  EXPECT_FALSE(c.eval.write_generations);
  EXPECT_TRUE(c.eval.only);
  EXPECT_EQ(c.early_stopping.metric, "rougeL");
  EXPECT_EQ(c.early_stopping.mode, EarlyStoppingSettings::Mode::kMax);
  EXPECT_EQ(c.early_stopping.patience, 5);
  EXPECT_EQ(c.early_stopping.min_delta, 0.001);
  EXPECT_EQ(c.checkpoint.dir, "/scratch/ckpt");
  EXPECT_EQ(c.checkpoint.every_steps, 1000);
  EXPECT_EQ(c.checkpoint.every_minutes, 30.0);
  EXPECT_EQ(c.checkpoint.keep_last, 3);
  EXPECT_TRUE(c.checkpoint.allow_config_change);
  EXPECT_EQ(c.checkpoint.resume, CheckpointSettings::Resume::kNever);
  EXPECT_FALSE(c.checkpoint.at_end);
  EXPECT_EQ(c.export_.hf_dir, "/scratch/export");
  EXPECT_EQ(c.telemetry.flush_every_steps, 50);
  EXPECT_EQ(c.telemetry.gpu_energy, TelemetrySettings::GpuEnergy::kNvml);
  EXPECT_EQ(c.telemetry.cpu_energy, TelemetrySettings::CpuEnergy::kNone);
  EXPECT_EQ(c.telemetry.powercap_root, "/host/sys/class/powercap");
  EXPECT_EQ(c.telemetry.peak_flops_per_device, 3.12e14);
  EXPECT_EQ(c.telemetry.machine_rates, "rates/cluster.json");
  EXPECT_EQ(c.cost.price_per_node_hour_usd, 32.77);
  EXPECT_EQ(c.cost.low_priority_price_per_node_hour_usd, 6.55);
  EXPECT_EQ(c.cost.carbon_intensity_g_per_kwh, 350.0);
  EXPECT_EQ(c.cost.pue, 1.2);
  EXPECT_EQ(c.cost.gpus_per_node, 8);
  EXPECT_EQ(c.cost.price_per_gpu_hour_usd, 4.1);
  EXPECT_EQ(c.cost.node_gpus, 8);
}

TEST(RunConfigLoad, FullFileNamesEveryKeyOfTheRegistry) {
  // The file above sets every key away from its default, except train.max_steps (kept 0 beside epochs): so each
  // registry key is reached by the loader, and none is missing from the file.
  const RunConfig loaded = parse_run_config(kFullYaml, "full.yaml");
  const RunConfig defaults;
  for (const auto& key : config_keys()) {
    if (key.key == "train.max_steps") continue;
    EXPECT_NE(config_value_text(loaded, key.key), config_value_text(defaults, key.key)) << key.key;
  }
}

TEST(RunConfigLoad, DefaultsAreTheSchemas) {
  const RunConfig c = parse_run_config("", "empty.yaml");
  EXPECT_TRUE(c == RunConfig{});
  EXPECT_EQ(c.run.name, "run");
  EXPECT_EQ(c.run.output_dir, "results");
  EXPECT_EQ(c.run.seed, 1234);
  EXPECT_EQ(c.model.name, "tiny");
  EXPECT_EQ(c.model.dropout_rate, -1.0);
  EXPECT_EQ(c.model.attention, ModelSettings::Attention::kAuto);
  EXPECT_EQ(c.data.dataset, "synthetic");
  EXPECT_EQ(c.data.max_source_length, 512);
  EXPECT_EQ(c.data.max_target_length, 128);
  EXPECT_EQ(c.data.sortish_factor, 50);
  EXPECT_EQ(c.data.pad_to_multiple_of, 8);
  EXPECT_EQ(c.data.synthetic_vocab_size, 64);
  EXPECT_EQ(c.data.synthetic_examples, 4096);
  EXPECT_EQ(c.parallel.bucket_mib, 25.0);
  EXPECT_EQ(c.parallel.collective_timeout_s, 600.0);
  EXPECT_EQ(c.precision, RunConfig::Precision::kAuto);
  EXPECT_EQ(c.train.global_batch, 16);
  EXPECT_EQ(c.train.batch_mode, TrainSettings::BatchMode::kFixedGlobal);
  EXPECT_EQ(c.train.log_every, 10);
  EXPECT_EQ(c.optimizer.lr, 3.0e-4);
  EXPECT_EQ(c.optimizer.beta2, 0.999);
  EXPECT_EQ(c.optimizer.eps, 1.0e-8);
  EXPECT_EQ(c.optimizer.adafactor_decay_rate, -0.8);
  EXPECT_EQ(c.optimizer.adafactor_eps1, 1.0e-30);
  EXPECT_EQ(c.lr_scaling.reference_global_batch, 16);
  EXPECT_EQ(c.eval.batch_size, 16);
  EXPECT_EQ(c.eval.max_new_tokens, 64);
  EXPECT_EQ(c.eval.metrics, "loss");
  EXPECT_EQ(c.early_stopping.patience, 3);
  EXPECT_EQ(c.checkpoint.keep_last, 2);
  EXPECT_EQ(c.telemetry.flush_every_steps, 10);
  EXPECT_EQ(c.cost.carbon_intensity_g_per_kwh, 475.0);
  EXPECT_EQ(c.cost.pue, 1.0);
}

TEST(RunConfigLoad, KeysNotInTheFileKeepTheirDefaults) {
  const RunConfig c = parse_run_config("train:\n  max_steps: 50\nprecision: fp32\nlr_schedule:\n", "part.yaml");
  RunConfig expected;
  expected.train.max_steps = 50;
  expected.precision = RunConfig::Precision::kFp32;
  EXPECT_TRUE(c == expected);
}

TEST(RunConfigLoad, ReadsAFile) {
  TempDir dir;
  const std::string path = dir / "run.yaml";
  std::ofstream(path) << "run: {name: from_file, seed: 3}\ntrain: {max_steps: 9}\n";
  const RunConfig c = load_run_config(path);
  EXPECT_EQ(c.run.name, "from_file");
  EXPECT_EQ(c.run.seed, 3);
  EXPECT_EQ(c.train.max_steps, 9);
}

TEST(RunConfigLoad, UnknownKeyNamesTheNearestKey) {
  const std::string e = error_of([] { parse_run_config("run:\n  name: a\ntrain:\n  max_step: 10\n", "cfg.yaml"); });
  EXPECT_EQ(e, "cfg.yaml:4: unknown key 'train.max_step' (did you mean 'train.max_steps'?)");
}

TEST(RunConfigLoad, UnknownSectionNamesTheNearestSection) {
  const std::string e = error_of([] { parse_run_config("trian:\n  max_steps: 10\n", "cfg.yaml"); });
  EXPECT_EQ(e, "cfg.yaml:1: unknown key 'trian' (did you mean 'train'?)");
}

TEST(RunConfigLoad, KeyInTheWrongSectionNamesItsSection) {
  EXPECT_EQ(error_of([] { parse_run_config("optimizer:\n  warmup_steps: 10\n", "cfg.yaml"); }),
            "cfg.yaml:2: unknown key 'optimizer.warmup_steps' (did you mean 'lr_schedule.warmup_steps'?)");
  EXPECT_EQ(error_of([] { parse_run_config("max_steps: 10\n", "cfg.yaml"); }),
            "cfg.yaml:1: unknown key 'max_steps' (did you mean 'train.max_steps'?)");
}

TEST(RunConfigLoad, AKeyNamedAsOtherToolsNameItSuggestsOurs) {
  // The Hugging Face Trainer's and Megatron-LM's names for what a key here sets, in any section or none.
  EXPECT_EQ(error_of([] { parse_run_config("optimizer:\n  learning_rate: 0.001\n", "cfg.yaml"); }),
            "cfg.yaml:2: unknown key 'optimizer.learning_rate' (did you mean 'optimizer.lr'?)");
  EXPECT_EQ(error_of([] { parse_run_config("gradient_accumulation_steps: 4\n", "cfg.yaml"); }),
            "cfg.yaml:1: unknown key 'gradient_accumulation_steps' (did you mean 'train.grad_accumulation'?)");
  EXPECT_EQ(error_of([] { parse_run_config("train:\n  per_device_train_batch_size: 8\n", "cfg.yaml"); }),
            "cfg.yaml:2: unknown key 'train.per_device_train_batch_size' (did you mean 'train.micro_batch'?)");
  EXPECT_EQ(error_of([] { parse_run_config("tensor_model_parallel_size: 2\n", "cfg.yaml"); }),
            "cfg.yaml:1: unknown key 'tensor_model_parallel_size' (did you mean 'parallel.tp'?)");
  // Every name the table suggests is a key.
  for (const char* name : {"learning_rate", "num_train_epochs", "save_total_limit", "bf16", "model_name_or_path"}) {
    const std::string suggestion = suggest_config_key(name);
    EXPECT_NO_THROW(config_value_text(RunConfig{}, suggestion)) << name << " -> " << suggestion;
  }
}

TEST(RunConfigLoad, AProgramsOwnChecksAreListedWithTheConfigsInOnePass) {
  // A shape key beside init_from (the config's own check), and what t5scale-train adds: the world and the files.
  const std::string e = error_of([] {
    load_run_config("", {"model.init_from=/no/such/folder", "model.num_heads=7", "train.max_steps=1", "parallel.tp=2"},
                    {}, [](const RunConfig& c) {
                      std::vector<ConfigError> errors = validate_for_world(c, 1);
                      for (ConfigError& f : check_files(c)) errors.push_back(f);
                      return errors;
                    });
  });
  EXPECT_NE(e.find("model.num_heads: is set (7) with model.init_from"), std::string::npos) << e;
  EXPECT_NE(e.find("parallel.tp: world size 1"), std::string::npos) << e;
  EXPECT_NE(e.find("model.init_from: '/no/such/folder' is neither a folder"), std::string::npos) << e;
  // validate_for_world repeats validate()'s problems: each is listed once.
  EXPECT_EQ(e.find("model.num_heads"), e.rfind("model.num_heads")) << e;
}

TEST(RunConfigLoad, FarFromEveryKeyHasNoSuggestion) {
  EXPECT_EQ(error_of([] { parse_run_config("train:\n  completely_different: 1\n", "cfg.yaml"); }),
            "cfg.yaml:2: unknown key 'train.completely_different'");
}

TEST(RunConfigLoad, WrongTypesNameTheKeyTheValueAndTheType) {
  EXPECT_EQ(error_of([] { parse_run_config("train:\n  max_steps: ten\n", "c.yaml"); }),
            "c.yaml:2: train.max_steps: expected an integer (int), got 'ten'");
  EXPECT_EQ(error_of([] { parse_run_config("train:\n  max_steps: 1.5\n", "c.yaml"); }),
            "c.yaml:2: train.max_steps: expected an integer (int), got '1.5'");
  EXPECT_EQ(error_of([] { parse_run_config("optimizer:\n  lr: fast\n", "c.yaml"); }),
            "c.yaml:2: optimizer.lr: expected a finite number (float), got 'fast'");
  EXPECT_EQ(error_of([] { parse_run_config("optimizer:\n  lr: .nan\n", "c.yaml"); }),
            "c.yaml:2: optimizer.lr: expected a finite number (float), got '.nan'");
  EXPECT_EQ(error_of([] { parse_run_config("optimizer:\n  lr: inf\n", "c.yaml"); }),
            "c.yaml:2: optimizer.lr: expected a finite number (float), got 'inf'");
  EXPECT_EQ(error_of([] { parse_run_config("parallel:\n  zero1: maybe\n", "c.yaml"); }),
            "c.yaml:2: parallel.zero1: expected true or false (bool), got 'maybe'");
  EXPECT_EQ(error_of([] { parse_run_config("train:\n  global_batch: [16, 32]\n", "c.yaml"); }),
            "c.yaml:2: train.global_batch: expected a value of type int, got a list");
  EXPECT_EQ(error_of([] { parse_run_config("train:\n  global_batch:\n", "c.yaml"); }),
            "c.yaml:2: train.global_batch: expected a value of type int, got no value");
  EXPECT_EQ(error_of([] { parse_run_config("train: 5\n", "c.yaml"); }),
            "c.yaml:1: train: a section holds keys (train: {key: value, ...}), got a scalar");
  EXPECT_EQ(error_of([] { parse_run_config("- run\n- train\n", "c.yaml"); }),
            "c.yaml:1: a run config is a mapping of sections (run:, model:, train:, ...), got a list");
}

TEST(RunConfigLoad, NumbersInTheirYamlSpellings) {
  const RunConfig c = parse_run_config(
      "optimizer: {lr: 3e-4, eps: +1.0E-8, weight_decay: 1}\ntrain: {max_steps: +12, epochs: .5}\nrun: {seed: -0}\n",
      "c.yaml");
  EXPECT_EQ(c.optimizer.lr, 3e-4);
  EXPECT_EQ(c.optimizer.eps, 1e-8);
  EXPECT_EQ(c.optimizer.weight_decay, 1.0);
  EXPECT_EQ(c.train.max_steps, 12);
  EXPECT_EQ(c.train.epochs, 0.5);
  EXPECT_EQ(c.run.seed, 0);
  EXPECT_EQ(error_of([] { parse_run_config("train: {max_steps: 99999999999999999999}\n", "c.yaml"); }),
            "c.yaml:1: train.max_steps: expected an integer (int), got '99999999999999999999'");
}

TEST(RunConfigLoad, BadEnumListsTheNames) {
  EXPECT_EQ(error_of([] { parse_run_config("lr_schedule:\n  decay: cosin\n", "c.yaml"); }),
            "c.yaml:2: lr_schedule.decay: 'cosin' is not one of constant, linear, cosine, inverse_sqrt (did you "
            "mean 'cosine'?)");
  EXPECT_EQ(error_of([] { parse_run_config("precision: float16\n", "c.yaml"); }),
            "c.yaml:1: precision: 'float16' is not one of fp32, bf16, fp16, auto");
  EXPECT_EQ(error_of([] { parse_run_config("train: {batch_mode: [fixed_global]}\n", "c.yaml"); }),
            "c.yaml:1: train.batch_mode: expected one of fixed_global, fixed_micro, got a list");
}

TEST(RunConfigLoad, BooleansAndEnumsThatYamlReadsAsBooleans) {
  const RunConfig c =
      parse_run_config("parallel: {zero1: yes}\noptimizer: {fused: on}\ndata: {drop_last: False}\n", "c.yaml");
  EXPECT_TRUE(c.parallel.zero1);
  EXPECT_EQ(c.optimizer.fused, OptimizerSettings::Fused::kOn);
  EXPECT_FALSE(c.data.drop_last);
}

// activation_checkpointing was a bool and is now false, true, auto or selective: every spelling of a YAML boolean
// still reads, auto and selective read in any case, it writes back unquoted (a YAML boolean to Python's reader), and
// anything else names the four values.
TEST(RunConfigLoad, ActivationCheckpointingIsABooleanOrAuto) {
  using AC = ParallelSettings::ActivationCheckpointing;
  const std::vector<std::pair<std::string, AC>> spellings = {
      {"true", AC::kOn}, {"yes", AC::kOn},    {"True", AC::kOn},    {"on", AC::kOn},
      {"false", AC::kOff}, {"no", AC::kOff}, {"auto", AC::kAuto}, {"Auto", AC::kAuto},
      {"selective", AC::kSelective}, {"Selective", AC::kSelective}};
  for (const auto& [text, expected] : spellings) {
    const RunConfig c = parse_run_config("parallel: {activation_checkpointing: " + text + "}\n", "c.yaml");
    EXPECT_EQ(c.parallel.activation_checkpointing, expected) << text;
    const std::string yaml = to_yaml(c);
    const std::string written = expected == AC::kOn ? "true" : expected == AC::kOff ? "false"
                                : expected == AC::kAuto                             ? "auto"
                                                                                    : "selective";
    EXPECT_TRUE(yaml.find("  activation_checkpointing: " + written + "\n") != std::string::npos) << yaml;
    EXPECT_EQ(parse_run_config(yaml, "to_yaml").parallel.activation_checkpointing, expected) << text;
  }
  RunConfig c;
  apply_overrides(c, {"parallel.activation_checkpointing=auto"});
  EXPECT_EQ(c.parallel.activation_checkpointing, AC::kAuto);
  EXPECT_EQ(requested_checkpoint_every_blocks(c.parallel), -1);
  apply_overrides(c, {"parallel.activation_checkpointing=true", "parallel.checkpoint_every_blocks=3"});
  EXPECT_EQ(requested_checkpoint_every_blocks(c.parallel), 3);
  apply_overrides(c, {"parallel.activation_checkpointing=false"});
  EXPECT_EQ(requested_checkpoint_every_blocks(c.parallel), 0);
  EXPECT_FALSE(requested_selective_recomputation(c.parallel));
  apply_overrides(c, {"parallel.activation_checkpointing=selective"});
  EXPECT_EQ(requested_checkpoint_every_blocks(c.parallel), 0);
  EXPECT_TRUE(requested_selective_recomputation(c.parallel));
  EXPECT_EQ(error_of([] { parse_run_config("parallel:\n  activation_checkpointing: sometimes\n", "c.yaml"); }),
            "c.yaml:2: parallel.activation_checkpointing: 'sometimes' is not one of false, true, auto, selective");
}

TEST(RunConfigLoad, EmptyStringValues) {
  const RunConfig c = parse_run_config("run:\n  study:\n  name: \"\"\ndata: {tokenizer: ''}\n", "c.yaml");
  EXPECT_EQ(c.run.study, "");
  EXPECT_EQ(c.run.name, "");  // loads; validate() refuses it
  EXPECT_EQ(c.data.tokenizer, "");
}

TEST(RunConfigLoad, DuplicateKeysAreRefused) {
  EXPECT_EQ(error_of([] { parse_run_config("train:\n  max_steps: 1\n  max_steps: 2\n", "c.yaml"); }),
            "c.yaml:3: train.max_steps: duplicate key");
  EXPECT_EQ(error_of([] { parse_run_config("train: {max_steps: 1}\ntrain: {epochs: 2}\n", "c.yaml"); }),
            "c.yaml:2: train: duplicate key");
}

TEST(RunConfigLoad, EveryLoadErrorAtOnce) {
  const std::string e = error_of([] {
    parse_run_config("train:\n  max_step: 10\n  global_batch: big\nlr_schedule:\n  decay: cosin\nprecison: fp16\n",
                     "c.yaml");
  });
  EXPECT_NE(e.find("c.yaml: 4 problems in the run config:"), std::string::npos) << e;
  EXPECT_NE(e.find("c.yaml:2: unknown key 'train.max_step' (did you mean 'train.max_steps'?)"), std::string::npos) << e;
  EXPECT_NE(e.find("c.yaml:3: train.global_batch: expected an integer (int), got 'big'"), std::string::npos) << e;
  EXPECT_NE(e.find("c.yaml:5: lr_schedule.decay: 'cosin' is not one of"), std::string::npos) << e;
  EXPECT_NE(e.find("c.yaml:6: unknown key 'precison' (did you mean 'precision'?)"), std::string::npos) << e;
}

TEST(RunConfigValidate, PrecisionAutoIsFp32OnTheCpuBf16OnGpusWithItFp16OnOthers) {
  using P = RunConfig::Precision;
  std::string why;
  EXPECT_EQ(resolve_precision(P::kAuto, /*on_gpu=*/false, /*gpu_has_bf16=*/false, &why), P::kFp32);
  EXPECT_EQ(why, "fp32 (on the CPU)");
  EXPECT_EQ(resolve_precision(P::kAuto, true, true, &why), P::kBf16);
  EXPECT_EQ(why, "bf16 (the GPU has bf16)");
  EXPECT_EQ(resolve_precision(P::kAuto, true, false, &why), P::kFp16);
  EXPECT_EQ(why, "fp16 with dynamic loss scaling (the GPU has no bf16)");
  for (const P requested : {P::kFp32, P::kBf16, P::kFp16}) {
    EXPECT_EQ(resolve_precision(requested, false, false), requested);
    EXPECT_EQ(resolve_precision(requested, true, true), requested);
  }
}

TEST(RunConfigLoad, ATypeErrorDoesNotHideTheValidationErrors) {
  // One type error and two keys out of range: all three are reported.
  const std::string e = error_of([] {
    parse_run_config("train:\n  global_batch: big\n  max_steps: -5\noptimizer:\n  lr: -1.0\n", "c.yaml");
  });
  EXPECT_NE(e.find("c.yaml: 3 problems in the run config:"), std::string::npos) << e;
  EXPECT_NE(e.find("c.yaml:2: train.global_batch: expected an integer (int), got 'big'"), std::string::npos) << e;
  EXPECT_NE(e.find("c.yaml: train.max_steps:"), std::string::npos) << e;
  EXPECT_NE(e.find("c.yaml: optimizer.lr:"), std::string::npos) << e;
}

// A program's config (file, then --set, then validate()): with a value that does not load, the checks across keys
// are reported in the same pass, those that concern the key that did not load left out (it holds its default).
TEST(RunConfigLoad, ATypeErrorDoesNotHideTheChecksAcrossKeys) {
  TempDir dir;
  const std::string path = dir / "run.yaml";
  std::ofstream(path) << "train:\n  global_batch: banana\n  max_steps: 0\n  grad_accumulation: 5\n";
  const std::string e = error_of([&] { load_run_config(path, {}); });
  EXPECT_NE(e.find(path + ": 2 problems in the run config:"), std::string::npos) << e;
  EXPECT_NE(e.find(path + ":2: train.global_batch: expected an integer (int), got 'banana'"), std::string::npos) << e;
  EXPECT_NE(e.find(path + ": train.max_steps: neither train.max_steps nor train.epochs is set"), std::string::npos)
      << e;
  // global_batch's default (16) is not divisible by 5; but 16 is not what the file says, so that check is left out.
  EXPECT_EQ(e.find("grad_accumulation 5"), std::string::npos) << e;

  // An override that sets what the file lacks silences the check across keys; one that does not load is reported
  // beside the file's problems, and the key it names is left out of the checks in turn.
  const std::string fixed = error_of([&] { load_run_config(path, {"train.max_steps=10"}); });
  EXPECT_EQ(fixed, path + ":2: train.global_batch: expected an integer (int), got 'banana'");
  std::ofstream(path) << "train:\n  epochs: 2\n  max_steps: 5\n";
  const std::string both = error_of([&] { load_run_config(path, {"train.grad_accumulation=lots"}); });
  EXPECT_NE(both.find(path + ": 2 problems in the run config:"), std::string::npos) << both;
  EXPECT_NE(both.find("--set train.grad_accumulation=lots: train.grad_accumulation: expected an integer"),
            std::string::npos)
      << both;
  EXPECT_NE(both.find(path + ": train.max_steps: and train.epochs are both set"), std::string::npos) << both;
  // A good file and good overrides: validate()'s errors alone, as throw_if_errors writes them; none: the config.
  EXPECT_EQ(error_of([&] { load_run_config(path, {}); }).rfind(path + ": invalid run config (1 problem):", 0), 0u);
  EXPECT_EQ(load_run_config(path, {"train.max_steps=0"}).train.epochs, 2.0);
}

TEST(RunConfigLoad, AFolderAsTheConfigIsRefusedNamingIt) {
  testing::TempDir dir;
  const std::string folder = dir / "configs";
  std::filesystem::create_directories(folder);
  EXPECT_EQ(error_of([&] { load_run_config(folder); }),
            "cannot read the run config '" + folder + "': it is a folder, not a file");
}

TEST(RunConfigLoad, YamlSyntaxErrorNamesFileLineAndColumn) {
  const std::string e = error_of([] { parse_run_config("run:\n  name: a\ntrain:\n  max_steps: [1, 2\n", "bad.yaml"); });
  EXPECT_EQ(e.rfind("bad.yaml:", 0), 0u) << e;
  EXPECT_NE(e.find("YAML syntax error"), std::string::npos) << e;
  // The unclosed list opens on line 4; yaml-cpp reports where it noticed (the end of the text, line 5).
  const std::string e2 = error_of([] { parse_run_config("run:\n  name: a\n   seed: 3\n", "bad.yaml"); });
  EXPECT_EQ(e2.rfind("bad.yaml:3:", 0), 0u) << e2;
  EXPECT_NE(e2.find("YAML syntax error"), std::string::npos) << e2;
}

TEST(RunConfigLoad, MissingFileIsNamed) {
  EXPECT_EQ(error_of([] { load_run_config("/nonexistent/run.yaml"); }),
            "cannot read the run config '/nonexistent/run.yaml': No such file or directory");
}

// ---------------------------------------------------------------------------------------------------------------

TEST(RunConfigOverride, SetsEveryType) {
  RunConfig c;
  apply_overrides(c, {"train.max_steps=100", "optimizer.lr=1e-3", "parallel.zero1=true", "run.study=s1",
                      "lr_schedule.decay=cosine", "precision=fp16", "train.epochs=0.5"});
  EXPECT_EQ(c.train.max_steps, 100);
  EXPECT_EQ(c.optimizer.lr, 1e-3);
  EXPECT_TRUE(c.parallel.zero1);
  EXPECT_EQ(c.run.study, "s1");
  EXPECT_EQ(c.lr_schedule.decay, LrScheduleSettings::Decay::kCosine);
  EXPECT_EQ(c.precision, RunConfig::Precision::kFp16);
  EXPECT_EQ(c.train.epochs, 0.5);
}

TEST(RunConfigOverride, OverridesALoadedFileAndTheLastOneWins) {
  RunConfig c = parse_run_config("train: {max_steps: 10, global_batch: 32}\n", "c.yaml");
  apply_override(c, "train.max_steps=20");
  apply_override(c, "train.max_steps=30");
  EXPECT_EQ(c.train.max_steps, 30);
  EXPECT_EQ(c.train.global_batch, 32);
}

TEST(RunConfigOverride, QuotedAndEmptyValues) {
  RunConfig c;
  apply_overrides(c, {"run.name=\"my run\"", "data.tokenizer=", "run.study=''", "run.output_dir= /tmp/x ",
                      "train.freeze_pattern=a=b", "data.dataset='it''s.h5'"});
  EXPECT_EQ(c.run.name, "my run");
  EXPECT_EQ(c.data.tokenizer, "");
  EXPECT_EQ(c.run.study, "");
  EXPECT_EQ(c.run.output_dir, "/tmp/x");
  EXPECT_EQ(c.train.freeze_pattern, "a=b");  // the first '=' separates key and value
  EXPECT_EQ(c.data.dataset, "it's.h5");
}

TEST(RunConfigOverride, ErrorsNameTheAssignmentAndTheKey) {
  RunConfig c;
  EXPECT_EQ(error_of([&] { apply_override(c, "train.max_step=10"); }),
            "--set train.max_step=10: unknown key 'train.max_step' (did you mean 'train.max_steps'?)");
  EXPECT_EQ(error_of([&] { apply_override(c, "train.max_steps=ten"); }),
            "--set train.max_steps=ten: train.max_steps: expected an integer (int), got 'ten'");
  EXPECT_EQ(error_of([&] { apply_override(c, "lr_scaling.rule=squareroot"); }),
            "--set lr_scaling.rule=squareroot: lr_scaling.rule: 'squareroot' is not one of none, linear, sqrt");
  EXPECT_EQ(error_of([&] { apply_override(c, "train.max_steps"); }),
            "--set train.max_steps: expected section.key=value");
  EXPECT_EQ(error_of([&] { apply_override(c, "lr_scaling=sqrt"); }),
            "--set lr_scaling=sqrt: 'lr_scaling' is a section; set one of its keys: lr_scaling.rule, "
            "lr_scaling.reference_global_batch, lr_scaling.scale_warmup");
  EXPECT_TRUE(c == RunConfig{});  // nothing was changed by the failed assignments
}

TEST(RunConfigOverride, EveryBadAssignmentAtOnce) {
  RunConfig c;
  const std::string e = error_of([&] {
    apply_overrides(c, {"train.max_steps=5", "optimizer.lrr=1", "precision=fp8"});
  });
  EXPECT_NE(e.find("2 problems"), std::string::npos) << e;
  EXPECT_NE(e.find("--set optimizer.lrr=1: unknown key 'optimizer.lrr' (did you mean 'optimizer.lr'?)"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("--set precision=fp8: precision: 'fp8' is not one of fp32, bf16, fp16, auto"), std::string::npos)
      << e;
}

TEST(RunConfigOverride, KeysByName) {
  RunConfig c;
  set_config_value(c, "eval.every_steps", "250");
  EXPECT_EQ(c.eval.every_steps, 250);
  EXPECT_EQ(config_value_text(c, "eval.every_steps"), "250");
  EXPECT_EQ(config_value_text(c, "optimizer.lr"), "3.0e-04");
  EXPECT_EQ(config_value_text(c, "lr_scaling.rule"), "none");
  EXPECT_EQ(error_of([&] { config_value_text(c, "eval.every_step"); }),
            "unknown key 'eval.every_step' (did you mean 'eval.every_steps'?)");
  ASSERT_TRUE(find_config_key("lr_scaling.rule").has_value());
  EXPECT_EQ(find_config_key("lr_scaling.rule")->choices, (std::vector<std::string>{"none", "linear", "sqrt"}));
  EXPECT_FALSE(find_config_key("lr_scaling").has_value());
}

// ---------------------------------------------------------------------------------------------------------------

TEST(RunConfigValidate, AValidConfigHasNoErrors) {
  EXPECT_EQ(all_text(validate(valid_config())), "");
  EXPECT_EQ(all_text(errors_after({"model.name=t5-small", "parallel.tp=4", "train.max_steps=0", "train.epochs=3"})),
            "");
  EXPECT_EQ(all_text(errors_after({"model.name=google/t5-v1_1-xxl", "parallel.tp=8"})), "");
}

TEST(RunConfigValidate, StepsOrEpochsExactlyOne) {
  EXPECT_EQ(only_error_on(validate(RunConfig{}), "train.max_steps"),
            "neither train.max_steps nor train.epochs is set; set exactly one (or eval.only: true)");
  EXPECT_EQ(only_error_on(errors_after({"train.epochs=2"}), "train.max_steps"),
            "and train.epochs are both set (100 steps, 2 epochs); set exactly one: max_steps counts optimizer "
            "steps, epochs counts passes over the training split");
  RunConfig eval_only;
  eval_only.eval.only = true;
  EXPECT_EQ(all_text(validate(eval_only)), "");
}

TEST(RunConfigValidate, RangesAndAllowedValuesNameTheirKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"run.seed=-1", "must be >= 0, got -1"},
      {"optimizer.lr=0", "must be > 0, got 0"},
      {"optimizer.beta1=1", "must be [0, 1), got 1"},
      {"optimizer.adafactor_decay_rate=0", "must be [-1, 0), got 0"},
      {"lr_schedule.warmup_ratio=1.0", "must be [0, 1), got 1"},
      {"lr_schedule.min_lr_ratio=1.5", "must be [0, 1], got 1.5"},
      {"cost.pue=0.5", "must be >= 1, got 0.5"},
      {"model.dropout_rate=1", "must be -1 (the model's own) or in [0, 1), got 1"},
      {"model.dropout_rate=-0.5", "must be -1 (the model's own) or in [0, 1), got -0.5"},
      {"data.synthetic_vocab_size=4", "must be >= 5, got 4"},
      {"train.log_every=0", "must be >= 1, got 0"},
      {"parallel.bucket_mib=0", "must be > 0, got 0"},
      {"run.name=", "must not be empty"},
      {"run.name=a/b", "'a/b' is used as a file name: no '/', not '.' or '..'"},
      {"data.dataset=", "must not be empty"},
      {"train.freeze_pattern=decoder[", "'decoder[' is not a valid regular expression: "},
      {"eval.metrics=loss,bleu", "'bleu' not among loss, rouge, squad, classification"},
      {"early_stopping.metric=bleu",
       "'bleu' is not one of eval_loss, rouge1, rouge2, rougeL, rougeLsum, exact_match, f1, accuracy, macro_f1"},
  };
  for (const auto& [assignment, expected] : cases) {
    const std::string key = assignment.substr(0, assignment.find('='));
    const std::string message = only_error_on(errors_after({assignment}), key);
    EXPECT_EQ(message.substr(0, expected.size()), expected) << assignment;
  }
}

TEST(RunConfigValidate, ModelNameIsTinyOrANamedShape) {
  EXPECT_EQ(only_error_on(errors_after({"model.name=t5-smal"}), "model.name"),
            "'t5-smal' is not tiny or a named shape (t5-11b, t5-3b, t5-base, t5-large, t5-small, t5-v1_1-base, "
            "t5-v1_1-large, t5-v1_1-small, t5-v1_1-xl, t5-v1_1-xxl); did you mean 't5-small'?");
  // With init_from the shape is the checkpoint's config.json and the name only a label.
  EXPECT_EQ(all_text(errors_after({"model.name=my-finetuned-t5", "model.init_from=/models/x"})), "");
}

TEST(RunConfigValidate, TpMustDivideTheModel) {
  const auto small = errors_after({"model.name=t5-small", "parallel.tp=3"});
  EXPECT_EQ(all_text(small),
            "parallel.tp: model t5-small: num_heads 8 is not divisible by tp 3\n"
            "parallel.tp: model t5-small: d_ff 2048 is not divisible by tp 3\n"
            "parallel.tp: model t5-small: vocab_size 32128 is not divisible by tp 3\n");
  // tiny on the synthetic task: the vocabulary is data.synthetic_vocab_size
  EXPECT_EQ(all_text(errors_after({"parallel.tp=2", "data.synthetic_vocab_size=63"})),
            "parallel.tp: model tiny: vocab_size 63 is not divisible by tp 2\n");
  EXPECT_EQ(all_text(errors_after({"parallel.tp=8"})),
            "parallel.tp: model tiny: num_heads 4 is not divisible by tp 8\n");
  // tiny on a dataset file: its vocabulary is known at start-up only, heads and d_ff are checked now
  EXPECT_EQ(all_text(errors_after({"parallel.tp=2", "data.synthetic_vocab_size=63", "data.dataset=/data/x.h5"})), "");
  // a named shape keeps its vocabulary, which must hold the synthetic task's
  EXPECT_EQ(only_error_on(errors_after({"model.name=t5-small", "data.synthetic_vocab_size=40000"}),
                          "data.synthetic_vocab_size"),
            "40000 exceeds the vocabulary of t5-small (32128 tokens)");
}

TEST(RunConfigValidate, AdafactorWithZero1IsRefused) {
  EXPECT_EQ(only_error_on(errors_after({"optimizer.name=adafactor", "parallel.zero1=true"}), "optimizer.name"),
            "adafactor keeps factored second moments per matrix; ZeRO-1 (parallel.zero1) shards a flat buffer — use "
            "adamw with zero1");
  EXPECT_EQ(all_text(errors_after({"optimizer.name=adafactor", "precision=fp16"})), "");
  EXPECT_EQ(all_text(errors_after({"optimizer.name=adamw", "parallel.zero1=true"})), "");
}

TEST(RunConfigValidate, Zero2NeedsZero1) {
  EXPECT_EQ(only_error_on(errors_after({"parallel.zero2=true"}), "parallel.zero2"),
            "needs parallel.zero1: true (ZeRO-2 shards the gradients on top of ZeRO-1's sharded optimizer state, as "
            "DeepSpeed's stage 2 includes stage 1)");
  EXPECT_EQ(all_text(errors_after({"parallel.zero1=true", "parallel.zero2=true"})), "");
}

TEST(RunConfigValidate, APriceIsPerNodeHourOrPerGpuHourNotBoth) {
  EXPECT_EQ(only_error_on(errors_after({"cost.price_per_node_hour_usd=16", "cost.price_per_gpu_hour_usd=4"}),
                          "cost.price_per_gpu_hour_usd"),
            "is set (4) with cost.price_per_node_hour_usd (16): set one of them (a job is charged its share of each "
            "node at a node price, or its GPUs at a GPU price)");
  EXPECT_EQ(all_text(errors_after({"cost.price_per_gpu_hour_usd=4"})), "");
  EXPECT_EQ(all_text(errors_after({"cost.price_per_node_hour_usd=16", "cost.node_gpus=4"})), "");
}

TEST(RunConfigValidate, AdafactorRelativeStepOwnsTheLearningRate) {
  const auto errors = errors_after({"optimizer.name=adafactor", "optimizer.adafactor_relative_step=true",
                                    "lr_scaling.rule=sqrt", "lr_schedule.warmup_steps=10", "lr_schedule.decay=linear"});
  EXPECT_EQ(keys_of(errors),
            (std::vector<std::string>{"lr_schedule.warmup_steps", "lr_schedule.decay", "lr_scaling.rule"}))
      << all_text(errors);
  EXPECT_EQ(only_error_on(errors_after({"optimizer.name=adafactor", "optimizer.adafactor_warmup_init=true"}),
                          "optimizer.adafactor_warmup_init"),
            "needs optimizer.adafactor_relative_step: true");
  EXPECT_EQ(all_text(errors_after({"optimizer.name=adafactor", "optimizer.adafactor_relative_step=true",
                                   "optimizer.adafactor_warmup_init=true"})),
            "");
}

TEST(RunConfigValidate, Warmup) {
  EXPECT_EQ(only_error_on(errors_after({"lr_schedule.warmup_steps=10", "lr_schedule.warmup_ratio=0.1"}),
                          "lr_schedule.warmup_ratio"),
            "and lr_schedule.warmup_steps are both set (0.1, 10); set one");
  EXPECT_EQ(only_error_on(errors_after({"lr_scaling.scale_warmup=true", "lr_schedule.warmup_ratio=0.1"}),
                          "lr_scaling.scale_warmup"),
            "scales lr_schedule.warmup_steps; a warmup_ratio is a fraction of the run's steps instead: use "
            "warmup_steps with scale_warmup");
  EXPECT_EQ(only_error_on(errors_after({"lr_schedule.warmup_steps=101"}), "lr_schedule.warmup_steps"),
            "101 is longer than the run (train.max_steps 100)");
  EXPECT_EQ(all_text(errors_after({"lr_schedule.warmup_steps=100"})), "");
}

TEST(RunConfigValidate, EvaluationAndEarlyStopping) {
  EXPECT_EQ(only_error_on(errors_after({"early_stopping.metric=eval_loss"}), "early_stopping.metric"),
            "'eval_loss' needs evaluations during training: set eval.every_steps or eval.every_epochs > 0");
  EXPECT_EQ(all_text(errors_after({"early_stopping.metric=eval_loss", "eval.every_epochs=0.5"})), "");
  EXPECT_EQ(only_error_on(errors_after({"eval.every_steps=100", "eval.every_epochs=0.5"}), "eval.every_epochs"),
            "is set (0.5) with eval.every_steps (100): set one of them");
  EXPECT_EQ(only_error_on(errors_after({"eval.every_epochs=-1"}), "eval.every_epochs"), "must be >= 0, got -1");
  EXPECT_EQ(
      only_error_on(errors_after({"early_stopping.metric=rougeL", "eval.every_steps=100"}), "early_stopping.metric"),
      "'rougeL' is computed only with 'rouge' in eval.metrics (now 'loss')");
  EXPECT_EQ(all_text(errors_after({"early_stopping.metric=f1", "eval.every_steps=100", "eval.metrics=loss, squad"})),
            "");
  EXPECT_EQ(only_error_on(errors_after({"eval.metrics=loss,rouge", "eval.generate=false"}), "eval.generate"),
            "is false, but eval.metrics asks for rouge, which scores generations");
}

TEST(RunConfigValidate, BatchChecksWithoutAWorld) {
  EXPECT_EQ(only_error_on(errors_after({"train.batch_mode=fixed_micro"}), "train.micro_batch"),
            "must be > 0 with batch_mode fixed_micro (global batch = micro_batch x dp x grad_accumulation)");
  EXPECT_EQ(only_error_on(errors_after({"train.global_batch=16", "train.grad_accumulation=3"}), "train.global_batch"),
            "16 is not divisible by train.grad_accumulation 3");
}

TEST(RunConfigValidate, ErrorsComeInSchemaOrder) {
  const auto errors = errors_after({"cost.pue=0", "optimizer.lr=0", "run.seed=-1", "train.epochs=1"});
  EXPECT_EQ(keys_of(errors), (std::vector<std::string>{"run.seed", "train.max_steps", "optimizer.lr", "cost.pue"}));
}

TEST(RunConfigValidate, ReturnsEveryErrorAtOnce) {
  RunConfig c;
  apply_overrides(c, {"train.epochs=0", "run.name=", "optimizer.lr=-1", "model.name=t5-huge",
                      "optimizer.name=adafactor", "parallel.zero1=true", "early_stopping.metric=rouge1",
                      "lr_schedule.warmup_ratio=2", "cost.pue=0", "parallel.tp=3"});
  const auto errors = validate(c);
  const std::vector<std::string> error_keys = keys_of(errors);
  const std::set<std::string> keys(error_keys.begin(), error_keys.end());
  EXPECT_EQ(keys, (std::set<std::string>{"run.name", "optimizer.lr", "lr_schedule.warmup_ratio", "cost.pue",
                                         "train.max_steps", "model.name", "optimizer.name", "early_stopping.metric"}))
      << all_text(errors);
  // Thrown, they come one per line, each starting with its key.
  const std::string e = error_of([&] { throw_if_errors(errors, "run.yaml"); });
  EXPECT_EQ(e.rfind(msg("run.yaml: invalid run config (", errors.size(), " problems):\n  "), 0), 0u) << e;
  for (const auto& error : errors) EXPECT_NE(e.find("\n  " + error.key + ": " + error.message), std::string::npos);
}

TEST(RunConfigValidate, FilesThatMustExist) {
  TempDir dir;
  std::ofstream(dir / "data.h5") << "x";
  std::ofstream(dir / "spiece.model") << "x";
  std::filesystem::create_directories(dir / "hf");
  std::filesystem::create_directories(dir / "not_hf");
  std::ofstream(dir / "hf/config.json") << "{}";

  RunConfig c = valid_config();
  EXPECT_EQ(all_text(check_files(c)), "");  // synthetic: no files
  c.data.dataset = dir / "data.h5";
  c.data.tokenizer = dir / "spiece.model";
  c.model.init_from = dir / "hf";
  EXPECT_EQ(all_text(check_files(c)), "");
  c.data.dataset = dir / "missing.h5";
  c.data.tokenizer = dir.path().string();
  c.model.init_from = dir / "not_hf";
  EXPECT_EQ(all_text(check_files(c)), "data.dataset: '" + (dir / "missing.h5") +
                                          "' does not exist\n"
                                          "data.tokenizer: '" +
                                          dir.path().string() +
                                          "' is not a file\n"
                                          "model.init_from: '" +
                                          (dir / "not_hf") +
                                          "' has no config.json (a Hugging Face T5 folder has config.json "
                                          "and model.safetensors or pytorch_model.bin)\n");
  EXPECT_EQ(all_text(validate(c)), "");  // validate() touches no file
}

// ---------------------------------------------------------------------------------------------------------------

TEST(RunConfigYaml, DefaultsRoundTrip) {
  const RunConfig defaults;
  EXPECT_TRUE(parse_run_config(to_yaml(defaults), "to_yaml") == defaults);
}

TEST(RunConfigYaml, EveryKeyRoundTrips) {
  RunConfig c = parse_run_config(kFullYaml, "full.yaml");
  // values that need quoting or every digit
  apply_overrides(
      c, {"run.study=a \"quoted\": #not a comment, back\\slash", "run.name=on", "data.tokenizer=null",
          "export.hf_dir=ünïcode/路径", "optimizer.fused=on", "optimizer.lr=0.1", "optimizer.eps=5e-324",
          "train.epochs=0.30000000000000004", "telemetry.peak_flops_per_device=6.02214076e23",
          "cost.price_per_node_hour_usd=0.3333333333333333", "run.seed=9223372036854775807", "parallel.tp=-7"});
  c.run.output_dir = "tab\there\nnewline";
  c.checkpoint.dir = "  leading spaces";
  const std::string yaml = to_yaml(c);
  const RunConfig back = parse_run_config(yaml, "to_yaml");
  EXPECT_TRUE(back == c) << yaml;
  EXPECT_EQ(back.run.study, c.run.study);
  EXPECT_EQ(back.run.output_dir, c.run.output_dir);
  EXPECT_EQ(back.optimizer.eps, 5e-324);
  EXPECT_EQ(to_yaml(back), yaml);
  // Unequal configs compare unequal, key by key.
  RunConfig other = c;
  other.cost.pue = std::nextafter(c.cost.pue, 2.0);
  EXPECT_FALSE(other == c);
}

// The keys of a YAML text in the order they appear: "section.key" for indented lines under "section:", and
// top-level "key: value" lines as "key".
std::vector<std::string> keys_in_order(const std::string& yaml) {
  std::vector<std::string> keys;
  std::istringstream lines(yaml);
  std::string section;
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    const std::string name = line.substr(line.find_first_not_of(' '), line.find(':') - line.find_first_not_of(' '));
    if (line[0] != ' ') {
      section = name;
      if (line.back() != ':') keys.push_back(name);  // a top-level key with its value
    } else {
      keys.push_back(section + "." + name);
    }
  }
  return keys;
}

TEST(RunConfigYaml, EveryKeyInSchemaOrder) {
  // kFullYaml is written in the schema's order (jobs/CONFIG_REFERENCE.md); the registry and to_yaml follow it.
  std::vector<std::string> registry_keys;
  for (const auto& key : config_keys()) registry_keys.push_back(key.key);
  EXPECT_EQ(registry_keys, keys_in_order(kFullYaml));
  EXPECT_EQ(keys_in_order(to_yaml(RunConfig{})), registry_keys);
}

TEST(RunConfigYaml, ReadableByYaml11Readers) {
  RunConfig c = valid_config();
  c.optimizer.fused = OptimizerSettings::Fused::kOff;
  const std::string yaml = to_yaml(c);
  // PyYAML reads a float only with a '.' and a signed exponent, and "on"/"off" as booleans.
  EXPECT_NE(yaml.find("  lr: 3.0e-04\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("  eps: 1.0e-08\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("  pue: 1.0\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("  fused: \"off\"\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("  name: \"run\"\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("\nprecision: auto\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("  max_steps: 100\n"), std::string::npos) << yaml;
}

// ---------------------------------------------------------------------------------------------------------------

TEST(RunConfigBatch, FixedGlobalDerivesTheMicroBatch) {
  RunConfig c = valid_config();
  apply_overrides(c, {"train.global_batch=64", "train.grad_accumulation=2", "parallel.tp=2"});
  const BatchPlan b = resolve_batch(c, 8);
  EXPECT_EQ(b.dp, 4);
  EXPECT_EQ(b.micro_batch, 8);
  EXPECT_EQ(b.grad_accumulation, 2);
  EXPECT_EQ(b.global_batch, 64);
  c.train.micro_batch = 8;  // the derived value may be written out
  EXPECT_EQ(resolve_batch(c, 8).micro_batch, 8);
}

TEST(RunConfigBatch, FixedMicroDerivesTheGlobalBatch) {
  RunConfig c = valid_config();
  apply_overrides(c, {"train.batch_mode=fixed_micro", "train.micro_batch=4", "train.grad_accumulation=3",
                      "parallel.tp=2", "train.global_batch=5"});
  const BatchPlan b = resolve_batch(c, 4);
  EXPECT_EQ(b.dp, 2);
  EXPECT_EQ(b.micro_batch, 4);
  EXPECT_EQ(b.global_batch, 24);
  EXPECT_EQ(resolve_batch(c, 16).global_batch, 96);
}

TEST(RunConfigBatch, ImpossibleSplitsNameKeysAndNumbers) {
  RunConfig c = valid_config();
  EXPECT_EQ(error_of([&] { resolve_batch(c, 6); }),
            "batch split for world size 6: invalid run config (1 problem):\n  train.global_batch: 16 is not divisible "
            "by dp 6 x train.grad_accumulation 1 = 6 (batch_mode fixed_global splits the global batch evenly)");
  c.parallel.tp = 2;
  EXPECT_EQ(error_of([&] { resolve_batch(c, 3); }),
            "batch split for world size 3: invalid run config (1 problem):\n  parallel.tp: world size 3 (3 processes "
            "were started) is not divisible by tp 2: start a multiple of 2 processes, e.g. mpirun -np 2 t5scale-train "
            "... or srun --ntasks=2 ...");
  c.parallel.tp = 1;
  c.train.micro_batch = 4;
  EXPECT_EQ(error_of([&] { resolve_batch(c, 2); }),
            "batch split for world size 2: invalid run config (1 problem):\n  train.micro_batch: 4 contradicts the "
            "micro-batch that batch_mode fixed_global derives: train.global_batch 16 / (dp 2 x "
            "train.grad_accumulation 1) = 8; set 0, or batch_mode fixed_micro");
  c.train.micro_batch = 0;
  c.train.batch_mode = TrainSettings::BatchMode::kFixedMicro;
  EXPECT_NE(error_of([&] { resolve_batch(c, 2); }).find("train.micro_batch: must be > 0 with batch_mode fixed_micro"),
            std::string::npos);
  EXPECT_NE(error_of([&] { resolve_batch(valid_config(), 0); }).find("the world size must be at least 1, got 0"),
            std::string::npos);
}

TEST(RunConfigBatch, ValidateForWorldAddsTheGridChecks) {
  RunConfig c = valid_config();
  apply_overrides(c, {"parallel.tp=2", "optimizer.lr=0"});
  const auto errors = validate_for_world(c, 6);
  EXPECT_EQ(all_text(errors),
            "train.global_batch: 16 is not divisible by dp 3 x train.grad_accumulation 1 = 3 (batch_mode fixed_global "
            "splits the global batch evenly)\n"
            "optimizer.lr: must be > 0, got 0\n");
  EXPECT_EQ(keys_of(validate_for_world(c, 5)), (std::vector<std::string>{"parallel.tp", "optimizer.lr"}));
  c.optimizer.lr = 1e-3;
  EXPECT_EQ(all_text(validate_for_world(c, 8)), "");
  // said once, not twice, when validate() already knows
  c.train.grad_accumulation = 3;
  EXPECT_EQ(keys_of(validate_for_world(c, 8)), (std::vector<std::string>{"train.global_batch"}));
}

TEST(RunConfigBatch, ResolveModelConfig) {
  RunConfig c = valid_config();
  const ModelConfig tiny = resolve_model_config(c, 100);
  EXPECT_EQ(tiny.name, "tiny");
  EXPECT_EQ(tiny.vocab_size, 100);
  EXPECT_EQ(tiny.dropout_rate, 0.0);
  c.model.name = "t5-small";
  c.model.dropout_rate = 0.25;
  const ModelConfig small = resolve_model_config(c, 32100);
  EXPECT_EQ(small.vocab_size, 32128);
  EXPECT_EQ(small.d_ff, 2048);
  EXPECT_EQ(small.dropout_rate, 0.25);
  EXPECT_NE(error_of([&] {
              resolve_model_config(c, 40000);
            }).find("the data's vocabulary of 40000 tokens does not fit t5-small's vocab_size 32128"),
            std::string::npos);
  c.model.name = "t5-tiny";
  EXPECT_EQ(error_of([&] { resolve_model_config(c, 64); }).rfind("model.name: unknown model name 't5-tiny'", 0), 0u);
  c.model.init_from = "/models/x";
  EXPECT_NE(error_of([&] { resolve_model_config(c, 64); }).find("model.init_from is set"), std::string::npos);
  EXPECT_EQ(all_text(check_tp_divides(tiny_model_config(64), 4)), "");
}

TEST(RunConfigBatch, EvaluationIntervalInSteps) {
  EvalSettings eval;
  EXPECT_EQ(evaluation_interval_steps(eval, 10), 0);  // only at the end
  eval.every_steps = 7;
  EXPECT_EQ(evaluation_interval_steps(eval, 10), 7);
  EXPECT_EQ(evaluation_interval_steps(eval, 0), 7);
  eval = EvalSettings{};
  eval.every_epochs = 0.5;
  EXPECT_EQ(evaluation_interval_steps(eval, 10), 5);
  EXPECT_EQ(evaluation_interval_steps(eval, 7), 4);    // 3.5 steps: to the nearest
  EXPECT_EQ(evaluation_interval_steps(eval, 0), 0);    // steps per epoch not known yet
  eval.every_epochs = 0.01;
  EXPECT_EQ(evaluation_interval_steps(eval, 7), 1);    // at least every step
  eval.every_epochs = 2;
  EXPECT_EQ(evaluation_interval_steps(eval, 118), 236);
}

TEST(RunConfigBatch, ModelDimensionsOverTheShape) {
  RunConfig c = valid_config();
  apply_overrides(c, {"model.d_model=128", "model.d_kv=32", "model.d_ff=512", "model.num_heads=2",
                      "model.num_layers=3"});
  const ModelConfig tiny = resolve_model_config(c, 4000);
  EXPECT_EQ(tiny.vocab_size, 4000);
  EXPECT_EQ(tiny.d_model, 128);
  EXPECT_EQ(tiny.d_kv, 32);
  EXPECT_EQ(tiny.d_ff, 512);
  EXPECT_EQ(tiny.num_heads, 2);
  EXPECT_EQ(tiny.num_layers, 3);
  EXPECT_EQ(tiny.num_decoder_layers, 3);  // num_layers sets both stacks, as T5Config does
  EXPECT_EQ(tiny.feed_forward, tiny_model_config(4000).feed_forward);
  apply_overrides(c, {"model.num_decoder_layers=1", "model.name=t5-small"});
  const ModelConfig small = resolve_model_config(c, 32100);
  EXPECT_EQ(small.num_layers, 3);
  EXPECT_EQ(small.num_decoder_layers, 1);
  EXPECT_EQ(small.vocab_size, 32128);
  EXPECT_EQ(small.d_model, 128);
}

TEST(RunConfigResolve, EmbeddingRowsNoIdReachesAreNamedAndModelVocabSizeSetsThem) {
  RunConfig c;
  apply_overrides(c, {"model.name=t5-small"});
  // A 300-piece tokenizer on t5-small's 32,128 rows (tied): the rows beyond 384 are counted once.
  const ModelConfig shape = resolve_model_config(c, 300);
  EXPECT_EQ(shape.vocab_size, 32128);
  EXPECT_EQ(unused_embedding_rows_note(c, shape, 300),
            "the data's vocabulary has 300 ids and t5-small keeps its 32128 embedding rows: 16.3M parameters that no "
            "id reaches, trained and stepped all the same; model.vocab_size=384 holds the data's ids (a multiple of "
            "128)");
  // Untied (v1.1): the LM head's rows too. Half the rows or more reached: no note.
  apply_overrides(c, {"model.name=t5-v1_1-small"});
  const ModelConfig untied = resolve_model_config(c, 300);
  EXPECT_NE(unused_embedding_rows_note(c, untied, 300).find("32.5M parameters (embedding and LM head)"),
            std::string::npos) << unused_embedding_rows_note(c, untied, 300);
  EXPECT_EQ(unused_embedding_rows_note(c, untied, 20000), "");
  // Set, the rows are the key's; fewer than the data's ids is refused, naming the key.
  apply_overrides(c, {"model.vocab_size=384"});
  EXPECT_EQ(resolve_model_config(c, 300).vocab_size, 384);
  EXPECT_EQ(unused_embedding_rows_note(c, resolve_model_config(c, 300), 300), "");
  const std::string e = error_of([&] { resolve_model_config(c, 500); });
  EXPECT_NE(e.find("the data's vocabulary of 500 tokens does not fit t5-v1_1-small's vocab_size 384 (model.vocab_size)"),
            std::string::npos) << e;
  // tp must divide the rows; with init_from the folder's config.json gives them.
  EXPECT_EQ(all_text(errors_after({"model.name=t5-small", "model.vocab_size=385", "parallel.tp=2"})),
            "parallel.tp: model t5-small: vocab_size 385 is not divisible by tp 2\n");
  EXPECT_NE(all_text(errors_after({"model.init_from=/m", "model.vocab_size=384"})).find(
                "model.vocab_size: is set (384) with model.init_from"),
            std::string::npos);
}

TEST(RunConfigValidate, ModelDimensions) {
  EXPECT_EQ(all_text(errors_after({"model.d_model=128", "model.num_layers=3", "model.num_heads=2"})), "");
  EXPECT_EQ(only_error_on(errors_after({"model.d_model=-1"}), "model.d_model"), "must be >= 0, got -1");
  EXPECT_EQ(only_error_on(errors_after({"model.num_heads=5000"}), "model.num_heads"),
            "5000 is beyond any T5 (at most " + std::to_string(kMaxHeads) + ")");
  // the dimensions set are the shape that tp must divide
  EXPECT_EQ(all_text(errors_after({"model.num_heads=3", "parallel.tp=2"})),
            "parallel.tp: model tiny: num_heads 3 is not divisible by tp 2\n");
  EXPECT_EQ(keys_of(errors_after({"model.init_from=/models/x", "model.d_ff=256", "model.num_layers=2"})),
            (std::vector<std::string>{"model.d_ff", "model.num_layers"}));
  EXPECT_EQ(only_error_on(errors_after({"model.init_from=/models/x", "model.d_ff=256"}), "model.d_ff"),
            "is set (256) with model.init_from, whose config.json gives the shape; remove one of them");
}

// ---------------------------------------------------------------------------------------------------------------

TEST(ConfigReference, CheckedInFileIsCurrent) {
  testing::expect_checked_in_file_current("jobs/CONFIG_REFERENCE.md", config_reference_markdown(),
                                          "update_config_reference");
}

TEST(ConfigReference, EveryKeyHasARowWithItsDefaultAndDoc) {
  const std::string markdown = config_reference_markdown();
  std::set<std::string> seen;
  for (const auto& key : config_keys()) {
    EXPECT_TRUE(seen.insert(key.key).second) << "declared twice: " << key.key;
    EXPECT_FALSE(key.doc.empty()) << key.key;
    EXPECT_EQ(key.doc.find('\n'), std::string::npos) << key.key;
    const std::string row = "| `" + key.key + "` | " + type_name(key.type) + " | `" +
                            (key.default_text.empty() ? "\"\"" : key.default_text) + "` |";
    EXPECT_NE(markdown.find(row), std::string::npos) << row;
  }
  for (const auto& section : config_sections()) {
    EXPECT_NE(markdown.find("\n## " + section.name + "\n\n" + section.doc + "\n"), std::string::npos) << section.name;
  }
  EXPECT_EQ(config_keys().size(), 110u);  // the schema's keys; a new key changes this and the reference
}

}  // namespace
}  // namespace t5scale
