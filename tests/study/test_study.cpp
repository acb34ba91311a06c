// t5scale-study's library: spec loading and expansion (grid, list, linked axes, repeats, names), the refusal of
// bad specs with file, line and key, the plan's figures against the functions the trainer uses, the rendered
// sbatch text and its exit-code handling (run under bash with stand-ins for srun, mpirun and scontrol), what of a
// spec reaches the job's shell (env values literal unless asked to expand, setup lines as written, #SBATCH values
// refused when sbatch could not read them), what render keeps (edited scripts) and creates (log folders), and the
// run-file and Slurm status readers (on files written by the telemetry part's RunFile, one of them by a writer
// killed with SIGKILL).
#include <gtest/gtest.h>
#include <hdf5.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "config/model_config.h"
#include "config/run_config.h"
#include "core/check.h"
#include "core/hdf5_attributes.h"
#include "core/units.h"
#include "data/tokenized_dataset.h"
#include "plan/cost_model.h"
#include "study/sbatch_render.h"
#include "study/study_plan.h"
#include "study/study_spec.h"
#include "study/study_status.h"
#include "support/base_test_support.h"
#include "telemetry/run_file.h"

namespace t5scale {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::TempDir;

StudySpec spec_from(const std::string& yaml, const std::string& dir = "") {
  return parse_study_spec(yaml, "spec.yaml", dir);
}

std::vector<std::string> names_of(const std::vector<StudyRun>& runs) {
  std::vector<std::string> names;
  for (const auto& r : runs) names.push_back(r.name);
  return names;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// ---- Expansion ----

TEST(StudySpec, GridExpandsEveryCombinationFirstAxisSlowest) {
  const StudySpec spec = spec_from(R"(
study: demo
base: {train: {max_steps: 10, global_batch: 64}}
axes:
  nodes: [1, 2]
  lr_scaling.rule: [none, sqrt]
slurm: {gpus_per_node: 4}
)");
  const auto runs = expand_study(spec);
  ASSERT_EQ(runs.size(), 4u);
  EXPECT_EQ(names_of(runs), (std::vector<std::string>{"n1-none", "n1-sqrt", "n2-none", "n2-sqrt"}));
  EXPECT_EQ(runs[0].nodes, 1);
  EXPECT_EQ(runs[2].nodes, 2);
  EXPECT_EQ(runs[3].gpus_per_node, 4);  // slurm.gpus_per_node is the default of the launch key
  EXPECT_EQ(runs[3].world(), 8);
  EXPECT_EQ(runs[0].config.lr_scaling.rule, LrScalingSettings::Rule::kNone);
  EXPECT_EQ(runs[1].config.lr_scaling.rule, LrScalingSettings::Rule::kSqrt);
  for (const auto& run : runs) {
    EXPECT_TRUE(run.errors.empty()) << run.name << ": " << run.errors.front();
    EXPECT_EQ(run.config.run.name, run.name);
    EXPECT_EQ(run.config.run.study, "demo");
    EXPECT_EQ(run.config.run.output_dir, "results/demo");
    EXPECT_EQ(run.config.train.max_steps, 10);
    EXPECT_EQ(run.config.cost.gpus_per_node, 4);
    // The rendered config carries its grid; t5scale-train refuses another world (e2e.job_trust).
    EXPECT_EQ(run.config.run.planned_world_size, run.world());
  }
  EXPECT_EQ(runs[3].varied, (std::vector<std::pair<std::string, std::string>>{{"nodes", "2"},
                                                                              {"lr_scaling.rule", "sqrt"}}));
}

TEST(StudySpec, RepeatsAddSeedsAndSuffixes) {
  const StudySpec spec = spec_from(R"(
study: rep
base: {train.max_steps: 5, run.seed: 100}
axes: {parallel.tp: [1, 2]}
repeats: 3
)");
  const auto runs = expand_study(spec);
  EXPECT_EQ(names_of(runs),
            (std::vector<std::string>{"tp1-s0", "tp1-s1", "tp1-s2", "tp2-s0", "tp2-s1", "tp2-s2"}));
  EXPECT_EQ(runs[0].config.run.seed, 100);
  EXPECT_EQ(runs[2].config.run.seed, 102);
  EXPECT_EQ(runs[4].config.run.seed, 101);
  EXPECT_EQ(runs[4].repeat, 1);
}

TEST(StudySpec, ListRunsWithAndWithoutNamesAndTheirOwnAxes) {
  const StudySpec spec = spec_from(R"(
study: strategies
base: {train: {max_steps: 5}, precision: bf16}
mode: list
runs:
  - name: baseline
  - set: {precision: fp32}
  - set: {parallel.activation_checkpointing: true, data.sampling: sortish}
  - name: big
    set: {train.global_batch: 64}
    axes: {lr_scaling.rule: [linear, sqrt]}
)");
  const auto runs = expand_study(spec);
  EXPECT_EQ(names_of(runs),
            (std::vector<std::string>{"baseline", "fp32", "ac-sortish", "big-linear", "big-sqrt"}));
  EXPECT_EQ(runs[0].config.precision, RunConfig::Precision::kBf16);
  EXPECT_EQ(runs[1].config.precision, RunConfig::Precision::kFp32);
  EXPECT_EQ(runs[2].config.parallel.activation_checkpointing, ParallelSettings::ActivationCheckpointing::kOn);
  EXPECT_EQ(runs[2].config.data.sampling, DataSettings::Sampling::kSortish);
  EXPECT_EQ(runs[4].config.train.global_batch, 64);
  EXPECT_EQ(runs[4].config.lr_scaling.rule, LrScalingSettings::Rule::kSqrt);
  EXPECT_EQ(runs[0].config.train.global_batch, 16);  // the default, untouched
}

TEST(StudySpec, LinkedAxisSetsSeveralKeysTogether) {
  const StudySpec spec = spec_from(R"(
study: linked
base: {train.max_steps: 5}
axes:
  shape:
    - {label: small, gpus_per_node: 2, parallel: {tp: 2}}
    - {gpus_per_node: 4, parallel.tp: 2, cost.price_per_node_hour_usd: 9.5}
)");
  const auto runs = expand_study(spec);
  EXPECT_EQ(names_of(runs), (std::vector<std::string>{"small", "g4-tp2-price9.5"}));
  EXPECT_EQ(runs[0].gpus_per_node, 2);
  EXPECT_EQ(runs[0].config.parallel.tp, 2);
  EXPECT_EQ(runs[1].world(), 4);
  EXPECT_DOUBLE_EQ(runs[1].config.cost.price_per_node_hour_usd, 9.5);
}

TEST(StudySpec, GpusArePackedOntoWholeNodes) {
  const StudySpec spec = spec_from(R"(
study: gpus
base: {train: {max_steps: 5, batch_mode: fixed_micro, micro_batch: 2}}
axes: {gpus: [1, 4, 8, 16, 32, 12]}
slurm: {gpus_per_node: 8}
)");
  const auto runs = expand_study(spec);
  ASSERT_EQ(runs.size(), 6u);
  const std::vector<std::pair<int64_t, int64_t>> expected = {{1, 1}, {1, 4}, {1, 8}, {2, 8}, {4, 8}};
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(runs[i].nodes, expected[i].first) << runs[i].name;
    EXPECT_EQ(runs[i].gpus_per_node, expected[i].second) << runs[i].name;
    EXPECT_TRUE(runs[i].errors.empty()) << runs[i].name;
  }
  EXPECT_EQ(runs[3].name, "gpu16");
  ASSERT_EQ(runs[5].errors.size(), 1u);
  EXPECT_TRUE(contains(runs[5].errors[0], "gpus: 12 GPUs do not fill whole nodes of slurm.gpus_per_node 8"))
      << runs[5].errors[0];
}

TEST(StudySpec, OnlyVaryingValuesNameRunsAndNamesAreFilesystemSafe) {
  const StudySpec spec = spec_from(R"(
study: names
base: {train.max_steps: 5}
axes:
  precision: [bf16]
  optimizer.lr: [1.0e-4, 3e-4]
  data.dataset: [data/a b.h5, /x/samsum.h5]
  parallel.zero1: [true, false]
)");
  const auto runs = expand_study(spec);
  ASSERT_EQ(runs.size(), 8u);
  EXPECT_EQ(runs[0].name, "lr1.0e-4-a_b-zero1");
  EXPECT_EQ(runs[7].name, "lr3e-4-samsum-nozero1");
  for (const auto& run : runs) EXPECT_EQ(filesystem_safe(run.name), run.name);
  EXPECT_EQ(filesystem_safe("a/b c:d"), "a_b_c_d");
}

TEST(StudySpec, BaseConfigFileIsRelativeToTheSpecAndInlineKeysGoOverIt) {
  TempDir dir;
  fs::create_directories(dir.path() / "configs");
  write_text(dir / "configs/base.yaml", "train: {max_steps: 77, global_batch: 32}\nprecision: fp16\n");
  write_text(dir / "study.yaml", R"(
study: based
base_config: configs/base.yaml
base:
  precision: fp32
  train.log_every: 3
cost: {price_per_node_hour_usd: 12.5, low_priority_price_per_node_hour_usd: 4.0}
results_dir: out/based
)");
  const StudySpec spec = load_study_spec(dir / "study.yaml");
  const auto runs = expand_study(spec);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].name, "based");  // nothing varies: the study's name
  const RunConfig& c = runs[0].config;
  EXPECT_EQ(c.train.max_steps, 77);
  EXPECT_EQ(c.train.global_batch, 32);
  EXPECT_EQ(c.train.log_every, 3);
  EXPECT_EQ(c.precision, RunConfig::Precision::kFp32);
  EXPECT_DOUBLE_EQ(c.cost.price_per_node_hour_usd, 12.5);
  EXPECT_DOUBLE_EQ(c.cost.low_priority_price_per_node_hour_usd, 4.0);
  EXPECT_EQ(c.run.output_dir, "out/based");

  ExpandOptions options;
  options.results_dir = "/elsewhere";
  options.overrides = {"train.max_steps=3", "nodes=2"};
  const auto overridden = expand_study(spec, options);
  EXPECT_EQ(overridden[0].config.run.output_dir, "/elsewhere");
  EXPECT_EQ(overridden[0].config.train.max_steps, 3);
  EXPECT_EQ(overridden[0].nodes, 2);
  const std::string bad = error_of([&] {
    ExpandOptions o;
    o.overrides = {"train.max_step=3"};
    expand_study(spec, o);
  });
  EXPECT_TRUE(contains(bad, "unknown key 'train.max_step' (did you mean 'train.max_steps'?)")) << bad;
}

// A spec travels between users: its base_config names a file inside the spec's folder, never one elsewhere; the
// command line's --base-config is the user's own and names any file.
TEST(StudySpec, BaseConfigStaysInsideTheSpecsFolderUnlessGivenOnTheCommandLine) {
  TempDir dir;
  fs::create_directories(dir.path() / "specs/configs");
  write_text(dir / "outside.yaml", "train: {max_steps: 11}\n");
  write_text(dir / "specs/configs/inside.yaml", "train: {max_steps: 22}\n");
  const auto spec_with = [&](const std::string& base_config) {
    write_text(dir / "specs/study.yaml", "study: s\nbase_config: " + base_config + "\n");
    return (dir / "specs/study.yaml");
  };
  for (const std::string& escape : {std::string("../outside.yaml"), std::string("configs/../../outside.yaml"),
                                    (dir / "outside.yaml"), std::string("\"configs\\\\inside.yaml\"")}) {
    const std::string error = error_of([&] { load_study_spec(spec_with(escape)); });
    EXPECT_TRUE(contains(error, "study.yaml:2: base_config: '")) << escape << " -> " << error;
    EXPECT_TRUE(contains(error, "' is not a path inside the spec's folder (")) << escape << " -> " << error;
    EXPECT_TRUE(contains(error, "give t5scale-study --base-config FILE")) << escape << " -> " << error;
    EXPECT_FALSE(contains(error, "is not a file")) << escape << " -> " << error;  // nothing looked at outside
  }
  EXPECT_EQ(expand_study(load_study_spec(spec_with("./configs/inside.yaml")))[0].config.train.max_steps, 22);
  // On the command line, any file, instead of the spec's (even one the spec may not name).
  const std::string outside = (dir / "outside.yaml");
  EXPECT_EQ(expand_study(load_study_spec(spec_with("../outside.yaml"), outside))[0].config.train.max_steps, 11);
  EXPECT_EQ(load_study_spec(spec_with("configs/inside.yaml"), outside).base_config, outside);
  const std::string missing = error_of([&] { load_study_spec(spec_with("configs/inside.yaml"), outside + ".gone"); });
  EXPECT_TRUE(contains(missing, "--base-config: '" + outside + ".gone' is not a file")) << missing;
  const std::string inside_missing = error_of([&] { load_study_spec(spec_with("configs/none.yaml")); });
  EXPECT_TRUE(contains(inside_missing, "study.yaml:2: base_config: '" + (dir / "specs/configs/none.yaml") +
                                           "' is not a file"))
      << inside_missing;
}

TEST(StudySpec, CollidingNamesAreRefused) {
  const StudySpec spec = spec_from(R"(
study: clash
base: {train.max_steps: 5}
mode: list
runs:
  - name: same
  - name: same
)");
  const std::string e = error_of([&] { expand_study(spec); });
  EXPECT_TRUE(contains(e, "run names collide: 'same' (runs 1 and 2)")) << e;
}

// ---- Bad specs ----

TEST(StudySpec, UnknownKeysAreRefusedWithLineAndSuggestion) {
  const std::string e = error_of([] {
    spec_from(R"(study: bad
axis: {nodes: [1]}
base:
  train: {max_step: 10}
slurm: {partion: gpu}
)");
  });
  EXPECT_TRUE(contains(e, "spec.yaml:2: unknown key 'axis' (did you mean 'axes'?)")) << e;
  EXPECT_TRUE(contains(e, "spec.yaml:4: base: unknown key 'train.max_step' (did you mean 'train.max_steps'?)")) << e;
  EXPECT_TRUE(contains(e, "spec.yaml:5: unknown key 'slurm.partion' (did you mean 'partition'?)")) << e;
}

TEST(StudySpec, AnAxisOnAnUnknownConfigKeyIsRefused) {
  const std::string e = error_of([] {
    spec_from(R"(study: bad
axes:
  train.global_bach: [16, 32]
)");
  });
  EXPECT_TRUE(contains(e, "spec.yaml:3: axes: unknown key 'train.global_bach' (did you mean 'train.global_batch'?)"))
      << e;
}

TEST(StudySpec, ValuesOfTheWrongTypeAndOtherMistakesAreAllReported) {
  const std::string e = error_of([] {
    spec_from(R"(study: bad
axes:
  train.global_batch: [16, lots]
  nodes: [0]
  run.name: [a, b]
mode: grid
repeats: 0
slurm: {launcher: ssh, env: {"1BAD": x}}
)");
  });
  EXPECT_TRUE(contains(e, "spec.yaml:3: axes: train.global_batch:")) << e;
  EXPECT_TRUE(contains(e, "'lots'")) << e;
  EXPECT_TRUE(contains(e, "spec.yaml:4: axes: nodes: must be an integer >= 1, got '0'")) << e;
  EXPECT_TRUE(contains(e, "spec.yaml:5: axes: run.name: is set by the study")) << e;
  EXPECT_TRUE(contains(e, "repeats: must be an integer >= 1, got '0'")) << e;
  EXPECT_TRUE(contains(e, "slurm.launcher: must be srun or mpirun, got 'ssh'")) << e;
  EXPECT_TRUE(contains(e, "slurm.env: '1BAD' is not an environment variable name")) << e;
}

TEST(StudySpec, CommandLineSetsOfTheSpecsOwnKeysAreCheckedAsTheFilesAre) {
  EXPECT_TRUE(is_spec_key("slurm.gpu"));
  EXPECT_TRUE(is_spec_key("slurm.env.HF_HUB_CACHE"));
  EXPECT_TRUE(is_spec_key("repeats"));
  EXPECT_FALSE(is_spec_key("slurm"));
  EXPECT_FALSE(is_spec_key("train.global_batch"));
  EXPECT_FALSE(is_spec_key("cost.price_per_gpu_hour_usd"));  // every run's cost key, as the spec's cost: block
  EXPECT_FALSE(is_spec_key("nodes"));

  const std::string yaml = "study: s\nslurm: {gpu: A100-80GB, time_limit: \"01:00:00\"}\n";
  const StudySpec spec = parse_study_spec(yaml, "spec.yaml", "", "",
                                          {"slurm.gpu=H100", "slurm.modules=[gcc/12, openmpi/4.1]",
                                           "slurm.env.HF_HUB_CACHE=/shared/hf", "repeats=2"});
  EXPECT_EQ(spec.slurm.gpu, "H100");
  EXPECT_EQ(spec.slurm.time_limit, "01:00:00");  // the file's other keys stay
  EXPECT_EQ(spec.slurm.modules, (std::vector<std::string>{"gcc/12", "openmpi/4.1"}));
  ASSERT_EQ(spec.slurm.env.size(), 1u);
  EXPECT_EQ(spec.slurm.env[0].name, "HF_HUB_CACHE");
  EXPECT_EQ(spec.slurm.env[0].value, "/shared/hf");
  EXPECT_EQ(spec.repeats, 2);
  // A spec without a slurm: block gets one.
  EXPECT_EQ(parse_study_spec("study: s\n", "spec.yaml", "", "", {"slurm.gpu=V100"}).slurm.gpu, "V100");

  const std::string e = error_of([&] {
    parse_study_spec(yaml, "spec.yaml", "", "", {"slurm.gpux=H100", "slurm.launcher=ssh", "repeats=0"});
  });
  EXPECT_TRUE(contains(e, "unknown key 'slurm.gpux' (did you mean 'gpu'?)")) << e;
  EXPECT_TRUE(contains(e, "slurm.launcher: must be srun or mpirun, got 'ssh'")) << e;
  EXPECT_TRUE(contains(e, "repeats: must be an integer >= 1, got '0'")) << e;
  const std::string not_a_map = error_of([] {
    parse_study_spec("study: s\nslurm: {gpu: H100}\n", "spec.yaml", "", "", {"slurm.gpu.memory=80"});
  });
  EXPECT_TRUE(contains(not_a_map, "--set slurm.gpu.memory: 'gpu' holds a scalar, not a mapping")) << not_a_map;
}

TEST(StudySpec, MissingStudyNameAndBadModeAreRefused) {
  const std::string e = error_of([] { spec_from("mode: table\nruns: []\n"); });
  EXPECT_TRUE(contains(e, "study: missing")) << e;
  EXPECT_TRUE(contains(e, "mode: must be grid or list, got 'table'")) << e;
}

// What a spec says must reach the job as it says it: a value that the job's shell would run, or that would end an
// #SBATCH line early, is refused when the spec is loaded, with its key.
TEST(StudySpec, EnvValuesThatWouldRunOrBreakTheScriptAreRefusedNamingTheKey) {
  const std::string e = error_of([] {
    spec_from(R"spec(study: bad
slurm:
  env:
    TWO_LINES: "a\nb"
    COMMAND: {expand: "/scratch/$(whoami)"}
    BACKTICK: {expand: "/scratch/`whoami`"}
    DEFAULT: {expand: "${TMPDIR:-/tmp}/x"}
    MISSPELT: {expnd: "$HOME"}
    LITERAL: "$(whoami) `id` ${X:-y}"
)spec");
  });
  EXPECT_TRUE(contains(e, "spec.yaml:4: slurm.env.TWO_LINES: 'a\\nb' holds a newline")) << e;
  EXPECT_TRUE(contains(e, "spec.yaml:5: slurm.env.COMMAND: '/scratch/$(whoami)' holds '$(' (a command "
                          "substitution); commands go in slurm.setup"))
      << e;
  EXPECT_TRUE(contains(e, "spec.yaml:6: slurm.env.BACKTICK: '/scratch/`whoami`' holds a backtick")) << e;
  EXPECT_TRUE(contains(e, "spec.yaml:7: slurm.env.DEFAULT: '${TMPDIR:-/tmp}/x' holds a '${' that is not a plain "
                          "${NAME}"))
      << e;
  EXPECT_TRUE(contains(e, "spec.yaml:8: slurm.env.MISSPELT: unknown key 'expnd'")) << e;
  EXPECT_FALSE(contains(e, "LITERAL")) << e;  // taken literally, nothing in it runs
}

TEST(StudySpec, SbatchValuesThatSbatchWouldMisreadAreRefusedNamingTheKey) {
  const std::string e = error_of([] {
    spec_from(R"(study: bad
results_dir: "results/my study"
slurm:
  partition: "gpu\n#SBATCH --account=someone-else"
  account: "proj # the team's"
  qos: "high prio"
  gres_type: "a100:2"
  gpu_request: pcie
  extra_sbatch: ["--comment=run #3", "--mail-type=END"]
  mpi: "pmix; rm -rf ~"
  modules: ["cuda/12.4 nccl/2.18"]
)");
  });
  EXPECT_TRUE(contains(e, "spec.yaml:2: results_dir: 'results/my study' holds whitespace")) << e;
  EXPECT_TRUE(contains(e, "spec.yaml:4: slurm.partition: 'gpu\\n#SBATCH --account=someone-else' holds a newline, "
                          "which would end the #SBATCH line"))
      << e;
  EXPECT_TRUE(contains(e, "spec.yaml:5: slurm.account: 'proj # the team's' holds '#', which sbatch reads as the "
                          "start of a comment"))
      << e;
  EXPECT_TRUE(contains(e, "spec.yaml:6: slurm.qos: 'high prio' holds whitespace")) << e;
  EXPECT_TRUE(contains(e, "spec.yaml:7: slurm.gres_type: 'a100:2' must be one GPU type name")) << e;
  EXPECT_TRUE(contains(e, "spec.yaml:8: slurm.gpu_request: must be gpus-per-node or gres, got 'pcie'")) << e;
  EXPECT_TRUE(contains(e, "slurm.extra_sbatch: '--comment=run #3' holds '#'")) << e;
  EXPECT_FALSE(contains(e, "--mail-type")) << e;
  EXPECT_TRUE(contains(e, "slurm.mpi: 'pmix; rm -rf ~' must be an srun --mpi plugin name")) << e;
  EXPECT_TRUE(contains(e, "slurm.modules: 'cuda/12.4 nccl/2.18' must be one module name")) << e;

  const std::string cpu = error_of([] { spec_from("study: cpu\nslurm: {gpu: none, gres_type: a100}\n"); });
  EXPECT_TRUE(contains(cpu, "spec.yaml:2: slurm.gres_type: CPU-only jobs (slurm.gpu: none) ask for no GPUs")) << cpu;
}

TEST(StudySpec, ARunWhoseTpDoesNotDivideTheModelNamesTheRunAndTheKey) {
  const StudySpec spec = spec_from(R"(
study: tp
base: {model.name: t5-small, train.max_steps: 5, train.global_batch: 24}
axes: {gpus_per_node: [6], parallel.tp: [2, 3]}
)");
  const StudyPlan plan = plan_study(spec);
  ASSERT_EQ(plan.runs.size(), 2u);
  EXPECT_TRUE(plan.runs[0].valid());
  ASSERT_FALSE(plan.runs[1].valid());
  EXPECT_EQ(plan.runs[1].run.name, "tp3");
  bool heads = false;
  for (const auto& error : plan.runs[1].resolved.errors) {
    heads = heads || contains(error, "parallel.tp: model t5-small: num_heads 8 is not divisible by tp 3");
  }
  EXPECT_TRUE(heads);
  EXPECT_EQ(plan.invalid_count(), 1u);
  const std::string table = format_plan(plan);
  EXPECT_TRUE(contains(table, "tp3 (INVALID)")) << table;
  EXPECT_TRUE(contains(table, "invalid runs:\n  tp3:\n    parallel.tp: model t5-small: num_heads 8")) << table;
}

TEST(StudySpec, EveryErrorOfAnInvalidRunIsListed) {
  const StudySpec spec = spec_from(R"(
study: many
base: {train: {max_steps: 5, epochs: 2, global_batch: 10}, optimizer.name: adafactor, parallel.zero1: true}
axes: {gpus_per_node: [4]}
)");
  const StudyPlan plan = plan_study(spec);
  ASSERT_EQ(plan.runs.size(), 1u);
  std::string all;
  for (const auto& e : plan.runs[0].resolved.errors) all += e + "\n";
  EXPECT_TRUE(contains(all, "train.max_steps: and train.epochs are both set")) << all;
  EXPECT_TRUE(contains(all, "optimizer.name: adafactor keeps factored second moments")) << all;
  EXPECT_TRUE(contains(all, "train.global_batch: 10 is not divisible by dp 4")) << all;
}

TEST(StudySpec, AnInvalidSettingIsOneErrorNotAlsoTheCostModelsCheck) {
  const StudySpec spec = spec_from(R"(
study: zero
base: {train: {max_steps: 5, global_batch: 8}, parallel.zero2: true}
axes: {gpus_per_node: [2]}
)");
  const StudyPlan plan = plan_study(spec);
  ASSERT_EQ(plan.runs.size(), 1u);
  const std::vector<std::string>& errors = plan.runs[0].resolved.errors;
  ASSERT_EQ(errors.size(), 1u) << format_plan(plan);
  EXPECT_TRUE(contains(errors[0], "parallel.zero2: needs parallel.zero1: true")) << errors[0];
}

// ---- Plan figures ----

TEST(StudyPlan, EffectiveLrFollowsEachRule) {
  const StudySpec spec = spec_from(R"(
study: lr
base:
  train: {max_steps: 100, batch_mode: fixed_micro, micro_batch: 8}
  optimizer.lr: 1.0e-4
  lr_scaling: {reference_global_batch: 8}
  lr_schedule: {warmup_steps: 10}
axes:
  gpus_per_node: [1, 4]
  lr_scaling.rule: [none, linear, sqrt]
)");
  const StudyPlan plan = plan_study(spec);
  ASSERT_EQ(plan.runs.size(), 6u);
  const double expected[] = {1e-4, 1e-4, 1e-4, 1e-4, 4e-4, 2e-4};  // k = 1 for one GPU, 4 for four
  for (size_t i = 0; i < 6; ++i) {
    const RunPlan& p = plan.runs[i];
    ASSERT_TRUE(p.resolved.lr.has_value()) << p.run.name;
    EXPECT_DOUBLE_EQ(p.resolved.lr->effective_lr, expected[i]) << p.run.name;
    EXPECT_DOUBLE_EQ(p.resolved.lr->base_lr, 1e-4);
    EXPECT_EQ(p.resolved.lr->warmup_steps, 10);
    EXPECT_EQ(p.resolved.total_steps, 100);
  }
  EXPECT_EQ(plan.runs[4].resolved.batch->global_batch, 32);
  const std::string csv = plan_csv(plan);
  EXPECT_TRUE(contains(csv, "\ng4-linear,lr,1,4,4,1,4,8,1,32,0.0001,0.0004,linear,10,100,")) << csv;
}

TEST(StudyPlan, ForecastsTimeAgainstTheLimitNodeHoursCostAndEnergy) {
  const StudySpec spec = spec_from(R"(
study: forecast
base:
  model: {name: t5-v1_1-xxl}
  data: {dataset: data/absent.h5, max_source_length: 512, max_target_length: 32}
  precision: bf16
  parallel: {tp: 8, activation_checkpointing: true, checkpoint_every_blocks: 1, backend: nccl, zero1: true}
  train: {max_steps: 2000, batch_mode: fixed_micro, micro_batch: 4, grad_accumulation: 4}
  eval: {every_steps: 500, max_examples: 2000, batch_size: 8, max_new_tokens: 32}
  cost: {price_per_node_hour_usd: 32.77}
axes:
  nodes: [1, 16]
slurm: {gpu: A100-80GB, gpus_per_node: 8, interconnect: ib-hdr-1x, time_limit: "30-00:00:00"}
)");
  const StudyPlan plan = plan_study(spec);
  ASSERT_EQ(plan.runs.size(), 2u);
  const RunForecast& one = plan.runs[0].forecast;
  const RunForecast& sixteen = plan.runs[1].forecast;
  ASSERT_TRUE(one.known && sixteen.known);
  EXPECT_EQ(one.evaluations, 4);  // steps 500, 1000, 1500, 2000 (the last is also the end)
  EXPECT_DOUBLE_EQ(one.tokens_per_step, 16.0 * (512 + 32));  // the maximum lengths until the data is here
  EXPECT_DOUBLE_EQ(one.train_time_s, 2000 * one.step_time_s);
  EXPECT_DOUBLE_EQ(one.run_time_s, one.train_time_s + one.eval_time_s);
  EXPECT_DOUBLE_EQ(one.node_hours, one.run_time_s / 3600.0);
  EXPECT_DOUBLE_EQ(sixteen.node_hours, 16.0 * sixteen.run_time_s / 3600.0);
  EXPECT_DOUBLE_EQ(one.reserved_node_hours, 30 * 24.0);
  EXPECT_DOUBLE_EQ(one.cost_usd, one.node_hours * 32.77);
  EXPECT_DOUBLE_EQ(one.energy_kwh, 400.0 * 8 * one.run_time_s / 3.6e6);  // 8 A100s at 400 W
  EXPECT_DOUBLE_EQ(one.checkpoint_bytes, 12.0 * static_cast<double>(plan.runs[0].parameter_count()));
  // One NIC per node: across 16 nodes the reduction grows, per-GPU throughput falls. The global batch grows with
  // the nodes (a fixed micro batch): no run is the other's on fewer devices, and neither has an efficiency.
  EXPECT_LT(sixteen.tokens_per_s / 128.0, one.tokens_per_s / 8.0);
  EXPECT_TRUE(std::isnan(one.scaling_efficiency) && std::isnan(sixteen.scaling_efficiency));
  EXPECT_EQ(sixteen.reference_run, "");
  // A month reserved for a few hours is said; so is a limit too short, in the printed plan too.
  ASSERT_FALSE(one.warnings.empty());
  EXPECT_TRUE(contains(one.warnings[0], "reserves")) << one.warnings[0];
  StudySpec short_limit = spec;
  short_limit.slurm.time_limit = "00:10:00";
  const StudyPlan tight = plan_study(short_limit);
  ASSERT_FALSE(tight.runs[0].forecast.warnings.empty());
  EXPECT_TRUE(contains(tight.runs[0].forecast.warnings[0], "does not fit slurm.time_limit 00:10:00"));
  const std::string text = format_plan(tight);
  EXPECT_TRUE(contains(text, "predicted time and cost")) << text;
  EXPECT_TRUE(contains(text, "does not fit slurm.time_limit")) << text;
  EXPECT_TRUE(contains(plan_csv(plan), "predicted_step_time_s,predicted_tokens_per_s")) << plan_csv(plan);
}

// A predicted MFU above what any run reaches is the step model's error, not a figure: no time, throughput or cost.
TEST(StudyPlan, APredictionAboveTheCredibleMfuIsRefusedAsAFigure) {
  const std::string yaml = R"(
study: mfu
base:
  model: {name: t5-v1_1-base}
  data: {dataset: data/absent.h5, max_source_length: 512, max_target_length: 128}
  precision: bf16
  parallel: {backend: nccl}
  train: {max_steps: 100, global_batch: 64}
  eval: {every_steps: 0, at_end: false}
  cost: {price_per_gpu_hour_usd: 2.0}
slurm: {gpu: H100, gpus_per_node: 1}
)";
  const RunForecast credible = plan_study(spec_from(yaml)).runs[0].forecast;
  ASSERT_TRUE(credible.known);
  EXPECT_GT(credible.mfu, 0.05);
  EXPECT_LE(credible.mfu, kHighestCredibleMfu);
  EXPECT_TRUE(std::isfinite(credible.cost_usd));
  // The same run against a device said to have a hundredth of an H100's peak: far above 70% MFU.
  StudySpec spec = spec_from(yaml);
  spec.base.push_back({"telemetry.peak_flops_per_device", "9.894e12", 0});
  const StudyPlan plan = plan_study(spec);
  const RunForecast& refused = plan.runs[0].forecast;
  EXPECT_TRUE(std::isnan(refused.step_time_s) && std::isnan(refused.tokens_per_s) && std::isnan(refused.mfu));
  EXPECT_TRUE(std::isnan(refused.cost_usd));
  ASSERT_FALSE(refused.warnings.empty());
  EXPECT_TRUE(contains(refused.warnings[0], "% MFU, above the 70% any run reaches")) << refused.warnings[0];
  EXPECT_TRUE(contains(format_plan(plan), "above the 70% any run reaches")) << format_plan(plan);
}

// Efficiency compares a run with the study's run of the same model, lengths, steps and global batch on the fewest
// devices, whatever splits the batch (micro batch, accumulation, TP): two GPUs doing what one does are compared with
// the one, and a run of another global batch or step count is no point of that series.
TEST(StudyPlan, EfficiencyIsAgainstTheSameGlobalBatchOnTheFewestDevices) {
  const StudyPlan plan = plan_study(spec_from(R"(
study: eff
base:
  model: {name: t5-small}
  data: {max_source_length: 256, max_target_length: 64}
  precision: bf16
  train: {max_steps: 100, batch_mode: fixed_global, global_batch: 32}
mode: list
runs:
  - {name: one, set: {gpus_per_node: 1, train.grad_accumulation: 1}}
  - {name: two, set: {gpus_per_node: 2, train.grad_accumulation: 1}}
  - {name: two-tp2, set: {gpus_per_node: 2, parallel.tp: 2, train.grad_accumulation: 2}}
  - {name: four-gb64, set: {gpus_per_node: 4, train.global_batch: 64}}
  - {name: two-short, set: {gpus_per_node: 2, train.max_steps: 30}}
slurm: {gpu: H100, gpus_per_node: 4}
)"));
  ASSERT_EQ(plan.runs.size(), 5u);
  std::map<std::string, const RunForecast*> f;
  for (const auto& p : plan.runs) {
    ASSERT_TRUE(p.valid()) << p.run.name << ": " << join(p.resolved.errors, "; ");
    ASSERT_TRUE(p.forecast.known) << p.run.name;
    f[p.run.name] = &p.forecast;
  }
  // Not micro batch by micro batch (32 rows on one GPU, 16 on each of two): both against the one GPU.
  EXPECT_DOUBLE_EQ(f["one"]->scaling_efficiency, 1.0);
  EXPECT_EQ(f["one"]->reference_run, "one");
  for (const char* name : {"two", "two-tp2"}) {
    EXPECT_EQ(f[name]->reference_run, "one") << name;
    EXPECT_DOUBLE_EQ(f[name]->scaling_efficiency, (f[name]->tokens_per_s / 2.0) / f["one"]->tokens_per_s) << name;
    EXPECT_LT(f[name]->scaling_efficiency, 1.0) << name;
  }
  // Another global batch, or another step count, run on one number of devices only: nothing to scale against.
  for (const char* name : {"four-gb64", "two-short"}) {
    EXPECT_TRUE(std::isnan(f[name]->scaling_efficiency)) << name;
    EXPECT_EQ(f[name]->reference_run, "") << name;
  }
  const std::string text = format_plan(plan);
  const std::string row = text.substr(text.find("\nfour-gb64 ", text.find("predicted time and cost")));
  EXPECT_TRUE(contains(row.substr(0, row.find('\n', 1)), " - ")) << text;
}

// A run on part of a node is charged its share of the node's price, as the job will charge it; a price per
// GPU-hour charges its GPUs; no price leaves the cost unknown, never $0.
TEST(StudyPlan, CostIsTheShareOfTheNodeTheRunHolds) {
  const char* spec_text = R"(
study: share
base:
  model: {name: t5-small}
  data: {max_source_length: 256, max_target_length: 64}
  precision: bf16
  train: {max_steps: 100, batch_mode: fixed_global, global_batch: 32}
axes:
  gpus_per_node: [1, 4]
slurm: {gpu: A100-80GB, gpus_per_node: 4}
)";
  StudySpec spec = spec_from(std::string(spec_text) + "cost: {price_per_node_hour_usd: 16.39}\n");
  const StudyPlan plan = plan_study(spec);
  ASSERT_EQ(plan.runs.size(), 2u);
  for (const RunPlan& p : plan.runs) {
    ASSERT_TRUE(p.forecast.known) << p.run.name;
    EXPECT_EQ(p.run.config.cost.node_gpus, 4) << p.run.name;  // slurm.gpus_per_node, in the rendered config too
    const double share = static_cast<double>(p.run.gpus_per_node) / 4.0;
    EXPECT_DOUBLE_EQ(p.forecast.charging.node_share_fraction, share) << p.run.name;
    EXPECT_DOUBLE_EQ(p.forecast.cost_usd, 16.39 * share * p.forecast.run_time_s / 3600.0) << p.run.name;
  }
  const StudyPlan per_gpu = plan_study(spec_from(std::string(spec_text) + "cost: {price_per_gpu_hour_usd: 4.1}\n"));
  for (const RunPlan& p : per_gpu.runs) {
    const double gpus = static_cast<double>(p.run.gpus_per_node);
    EXPECT_DOUBLE_EQ(p.forecast.cost_usd, 4.1 * gpus * p.forecast.run_time_s / 3600.0) << p.run.name;
  }
  const StudyPlan unpriced = plan_study(spec_from(spec_text));
  for (const RunPlan& p : unpriced.runs) EXPECT_TRUE(std::isnan(p.forecast.cost_usd)) << p.run.name;
  const std::string text = format_forecast(unpriced);
  EXPECT_FALSE(contains(text, "$0")) << text;
  EXPECT_TRUE(contains(text, ", cost ?")) << text;
  // Both prices: the config's own check, on the key.
  const StudyPlan both = plan_study(
      spec_from(std::string(spec_text) + "cost: {price_per_gpu_hour_usd: 4.1, price_per_node_hour_usd: 16.39}\n"));
  ASSERT_FALSE(both.runs[0].valid());
  EXPECT_TRUE(contains(join(both.runs[0].resolved.errors, "\n"), "cost.price_per_gpu_hour_usd: is set (4.1) with "
                                                         "cost.price_per_node_hour_usd (16.39)"))
      << join(both.runs[0].resolved.errors, "\n");
}

TEST(StudyPlan, SlurmTimesAndUnknownInterconnects) {
  EXPECT_DOUBLE_EQ(slurm_time_seconds("90"), 5400);
  EXPECT_DOUBLE_EQ(slurm_time_seconds("10:30"), 630);
  EXPECT_DOUBLE_EQ(slurm_time_seconds("01:00:05"), 3605);
  EXPECT_DOUBLE_EQ(slurm_time_seconds("2-03"), (2 * 24 + 3) * 3600.0);
  EXPECT_DOUBLE_EQ(slurm_time_seconds("1-00:30"), 24 * 3600.0 + 1800);
  EXPECT_DOUBLE_EQ(slurm_time_seconds("1-00:00:10"), 24 * 3600.0 + 10);
  EXPECT_TRUE(std::isnan(slurm_time_seconds("soon")));
  try {
    spec_from("study: s\nslurm: {interconnect: ib-xdr}\n");
    ADD_FAILURE() << "an unknown interconnect was accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "slurm.interconnect")) << e.what();
    EXPECT_TRUE(contains(e.what(), "ib-hdr-8x")) << e.what();
  }
}

TEST(StudyPlan, StepsAndEpochsComeFromTheTrainingSplit) {
  const StudySpec spec = spec_from(R"(
study: epochs
base: {data.synthetic_examples: 1000, train: {global_batch: 100}}
mode: list
runs:
  - name: by-epochs
    set: {train.epochs: 2}
  - name: by-steps
    set: {train.max_steps: 25}
  - name: by-epochs-keep-last
    set: {train.epochs: 1, data.drop_last: false, train.global_batch: 300}
)");
  const StudyPlan plan = plan_study(spec);
  ASSERT_EQ(plan.runs.size(), 3u);
  EXPECT_EQ(plan.runs[0].resolved.train_examples, 1000);
  EXPECT_EQ(plan.runs[0].resolved.steps_per_epoch, 10);
  EXPECT_EQ(plan.runs[0].resolved.total_steps, 20);
  EXPECT_DOUBLE_EQ(plan.runs[0].resolved.epochs, 2.0);
  EXPECT_EQ(plan.runs[1].resolved.total_steps, 25);
  EXPECT_DOUBLE_EQ(plan.runs[1].resolved.epochs, 2.5);
  EXPECT_EQ(plan.runs[2].resolved.steps_per_epoch, 4);  // 1000 / 300 without drop_last: 4 steps
  EXPECT_EQ(plan.runs[2].resolved.total_steps, 4);
}

TEST(StudyPlan, ADatasetFileIsCountedAndAMissingOneIsUnknown) {
  TempDir dir;
  const std::string path = dir / "data.h5";
  {
    TokenizedDatasetInfo info;
    info.tokenizer_sha256 = "synthetic-vocab100";
    info.vocab_size = 100;
    info.created_by = "test";
    TokenizedDatasetWriter writer(path, info);
    for (int i = 0; i < 50; ++i) writer.append("train", {5, 6, 1}, {7, 1});
    for (int i = 0; i < 5; ++i) writer.append("validation", {5, 1}, {7, 1});
    writer.finish();
  }
  const StudySpec spec = spec_from(msg(R"(
study: files
base: {train: {epochs: 3, global_batch: 8}}
axes:
  data.dataset: [")", path, R"(", )", (dir / "missing.h5"), R"(]
)"));
  const StudyPlan plan = plan_study(spec);
  ASSERT_EQ(plan.runs.size(), 2u);
  EXPECT_EQ(plan.runs[0].resolved.train_examples, 50);
  EXPECT_EQ(plan.runs[0].resolved.steps_per_epoch, 6);
  EXPECT_EQ(plan.runs[0].resolved.total_steps, 18);
  ASSERT_TRUE(plan.runs[0].resolved.model.has_value());  // tiny, with the file's vocabulary
  EXPECT_EQ(plan.runs[0].parameter_count(), parameter_count(tiny_model_config(100)));
  EXPECT_TRUE(plan.runs[1].valid());
  EXPECT_EQ(plan.runs[1].resolved.train_examples, -1);
  EXPECT_FALSE(plan.runs[1].resolved.steps_known);
  EXPECT_TRUE(std::isnan(plan.runs[1].resolved.epochs) || plan.runs[1].resolved.epochs == 3.0);
  const std::string table = format_plan(plan);
  EXPECT_TRUE(contains(table, "missing.h5' does not exist here yet")) << table;
}

TEST(StudyPlan, MemoryAndFlopsAreTheCostModelsWithTheTrainersInputs) {
  const StudySpec spec = spec_from(R"(
study: xxl
base:
  model.name: t5-v1_1-xxl
  data: {max_source_length: 512, max_target_length: 32}
  precision: bf16
  train: {max_steps: 10, batch_mode: fixed_micro, micro_batch: 4, grad_accumulation: 2}
mode: list
runs:
  - name: tp1
    set: {parallel.tp: 1, gpus_per_node: 1}
  - name: tp8-ac-zero1
    set: {parallel.tp: 8, gpus_per_node: 8, nodes: 2, parallel.activation_checkpointing: true, parallel.zero1: true}
slurm: {gpu: A100-80GB}
)");
  const StudyPlan plan = plan_study(spec);
  ASSERT_EQ(plan.runs.size(), 2u);
  EXPECT_DOUBLE_EQ(plan.device_memory_gib, 80.0);
  const ModelConfig xxl = named_model_config("t5-v1_1-xxl");
  for (const RunPlan& p : plan.runs) {
    ASSERT_TRUE(p.resolved.memory_inputs.has_value()) << p.run.name;
    MemoryInputs in;
    in.tp = static_cast<int>(p.run.config.parallel.tp);
    in.dp = static_cast<int>(p.resolved.batch->dp);
    in.compute_bytes_per_element = 2;
    in.zero1 = p.run.config.parallel.zero1;
    in.checkpoint_every_blocks = requested_checkpoint_every_blocks(p.run.config.parallel);
    in.micro_batch = BatchShape{4, 512, 32};
    EXPECT_EQ(p.resolved.checkpointing.memory.total_bytes(), predict_memory(xxl, in).total_bytes()) << p.run.name;
    // The FLOPs of the step the time is for, on its examples' own lengths (the synthetic task's are short): never
    // above a global batch at the maximum lengths.
    EXPECT_GT(p.resolved.flops_per_step, 0.0) << p.run.name;
    EXPECT_LT(p.resolved.flops_per_step, training_flops(xxl, BatchShape{4, 512, 32}) * 2.0 * p.resolved.batch->dp);
    const double gib = static_cast<double>(p.resolved.checkpointing.memory.total_bytes()) / (1024.0 * 1024.0 * 1024.0);
    EXPECT_EQ(p.fits, gib <= 0.95 * 80.0 ? "yes" : "NO") << p.run.name;  // 5% left to the allocator
  }
  // 11B parameters on one GPU with AdamW: far beyond 80 GiB; TP 8 with checkpointing and ZeRO-1 fits.
  EXPECT_EQ(plan.runs[0].fits, "NO");
  EXPECT_EQ(plan.runs[1].fits, "yes");
  EXPECT_EQ(plan.runs[1].resolved.batch->dp, 2);
}

// A run that does not fit is told the least activation checkpointing that would, by the cost model's choice.
TEST(StudyPlan, RunThatDoesNotFitIsToldTheCheckpointingThatWould) {
  const StudySpec spec = spec_from(R"(
study: t5-3b
base:
  model.name: t5-3b
  data: {max_source_length: 512, max_target_length: 128}
  precision: bf16
  train: {max_steps: 10, batch_mode: fixed_micro, micro_batch: 48, grad_accumulation: 1}
mode: list
runs:
  - name: plain
    set: {gpus_per_node: 1}
slurm: {gpu: H100-80GB}
)");
  const StudyPlan plan = plan_study(spec);
  ASSERT_EQ(plan.runs.size(), 1u);
  const RunPlan& p = plan.runs[0];
  ASSERT_EQ(p.fits, "NO") << p.resolved.checkpointing.memory.describe();
  MemoryInputs in;
  in.compute_bytes_per_element = 2;
  in.micro_batch = BatchShape{48, 512, 128};
  const CheckpointingChoice choice =
      choose_activation_checkpointing(named_model_config("t5-3b"), in, int64_t{80} * 1024 * 1024 * 1024);
  ASSERT_TRUE(choice.fits);
  ASSERT_GT(choice.checkpoint_every_blocks, 0);
  // The run is invalid, with what would make it fit.
  EXPECT_FALSE(p.valid());
  EXPECT_EQ(plan.invalid_count(), 1u);
  std::string notes;
  for (const auto& error : p.resolved.errors) notes += error + "\n";
  EXPECT_TRUE(contains(notes, "predicted with each change: parallel.activation_checkpointing=true with "
                              "parallel.checkpoint_every_blocks=" + std::to_string(choice.checkpoint_every_blocks) +
                              ": " + gib_text(static_cast<double>(choice.memory.total_bytes())) + ", fits"))
      << notes;
  // The memory by what holds it is printed for every run, fitting or not.
  const std::string printed = format_plan(plan);
  EXPECT_TRUE(contains(printed, "predicted memory per GPU, by what holds it:")) << printed;
  for (const char* column : {"weights", "gradients", "optimizer", "activations", "workspace", "total", "checkpointing"}) {
    EXPECT_TRUE(contains(printed.substr(printed.find("by what holds it:")), column)) << column << "\n" << printed;
  }
}

// activation_checkpointing: auto is planned as the trainer resolves it: the cost model's choice for the GPU's memory,
// named in the run's notes and in its name; on CPU, where the plan knows no memory, none.
TEST(StudyPlan, AutoCheckpointingIsPlannedAsTheChoiceForTheGpu) {
  // The smallest micro-batch of T5-3B at which an H100 needs some checkpointing, but not every block's.
  const int64_t h100_bytes = int64_t{80} * 1024 * 1024 * 1024;
  MemoryInputs in;
  in.compute_bytes_per_element = 2;
  CheckpointingChoice choice;
  for (int64_t rows = 8; rows <= 64 && choice.checkpoint_every_blocks <= 1; rows += 4) {
    in.micro_batch = BatchShape{rows, 512, 128};
    choice = choose_activation_checkpointing(named_model_config("t5-3b"), in, h100_bytes);
  }
  ASSERT_TRUE(choice.fits);
  ASSERT_GT(choice.checkpoint_every_blocks, 1);  // neither none nor every block: a choice that means something
  const StudySpec spec = spec_from(msg(R"(
study: t5-3b
base:
  model.name: t5-3b
  data: {max_source_length: 512, max_target_length: 128}
  precision: bf16
  train: {max_steps: 10, batch_mode: fixed_micro, micro_batch: )", in.micro_batch.rows, R"(, grad_accumulation: 1}
mode: list
runs:
  - set: {parallel.activation_checkpointing: auto}
  - set: {parallel.activation_checkpointing: false}
slurm: {gpu: H100-80GB, gpus_per_node: 1}
)"));
  const StudyPlan plan = plan_study(spec);
  ASSERT_EQ(plan.runs.size(), 2u);
  EXPECT_EQ(plan.runs[0].run.name, "acauto");
  EXPECT_EQ(plan.runs[1].run.name, "noac");
  const RunPlan& chosen = plan.runs[0];
  EXPECT_EQ(chosen.fits, "yes");
  EXPECT_EQ(chosen.resolved.checkpointing.memory.total_bytes(), choice.memory.total_bytes());
  std::string notes;
  for (const auto& note : chosen.resolved.notes) notes += note + "\n";
  EXPECT_TRUE(contains(notes, "activation checkpointing auto: " + choice.describe_against(h100_bytes))) << notes;
  EXPECT_EQ(plan.runs[1].fits, "NO");  // the same run without checkpointing does not fit

  const StudyPlan cpu = plan_study(spec_from(
      "study: cpu\nbase: {train.max_steps: 3, parallel.activation_checkpointing: auto}\nslurm: {gpu: none}\n"));
  ASSERT_TRUE(cpu.runs[0].resolved.memory_inputs.has_value());
  std::string cpu_notes;
  for (const auto& note : cpu.runs[0].resolved.notes) cpu_notes += note + "\n";
  EXPECT_TRUE(contains(cpu_notes, "activation checkpointing auto: none predicted")) << cpu_notes;
}

// A TP group must stay inside a node: the plan refuses a tp larger than, or not dividing, the GPUs per node,
// naming the first group that would span two.
TEST(StudyPlan, ATpGroupSpanningNodesIsAnErrorNamingTheGroup) {
  const StudyPlan plan = plan_study(spec_from(R"(
study: placement
base: {train: {max_steps: 3, global_batch: 24}}
mode: list
runs:
  - name: inside
    set: {parallel.tp: 2, gpus_per_node: 4, nodes: 2}
  - name: wider
    set: {parallel.tp: 8, gpus_per_node: 4, nodes: 2}
  - name: straddles
    set: {parallel.tp: 2, gpus_per_node: 3, nodes: 2}
slurm: {gpu: none}
)"));
  ASSERT_EQ(plan.runs.size(), 3u);
  auto errors_of = [](const RunPlan& p) {
    std::string text;
    for (const auto& e : p.resolved.errors) text += e + "\n";
    return text;
  };
  EXPECT_FALSE(contains(errors_of(plan.runs[0]), "spans hosts")) << errors_of(plan.runs[0]);
  EXPECT_TRUE(contains(errors_of(plan.runs[1]), "parallel.tp 8 with 4 GPUs per node: TP group 0 (ranks 0-7) spans "
                                                "hosts node 0, node 1"))
      << errors_of(plan.runs[1]);
  EXPECT_TRUE(contains(errors_of(plan.runs[2]), "TP group 1 (ranks 2-3) spans hosts node 0, node 1"))
      << errors_of(plan.runs[2]);
}

// Freezing shows in the plan's memory: the frozen parameters' gradients and optimizer state are not predicted.
TEST(StudyPlan, FrozenParametersLowerThePredictedMemory) {
  const StudyPlan plan = plan_study(spec_from(R"(
study: freezing
base:
  model.name: t5-v1_1-base
  precision: bf16
  train: {max_steps: 3, batch_mode: fixed_micro, micro_batch: 4}
mode: list
runs:
  - name: all
  - name: encoder
    set: {train.freeze_encoder: true}
slurm: {gpu: H100-80GB, gpus_per_node: 1}
)"));
  ASSERT_EQ(plan.runs.size(), 2u);
  ASSERT_TRUE(plan.runs[0].resolved.memory_inputs.has_value() && plan.runs[1].resolved.memory_inputs.has_value());
  FreezeOptions encoder;
  encoder.encoder = true;
  const int64_t frozen = frozen_parameters_per_rank(named_model_config("t5-v1_1-base"), 1, encoder);
  // No fp32 gradient and no AdamW state (masters, moments, decay mask) for a frozen parameter.
  EXPECT_EQ(plan.runs[0].resolved.checkpointing.memory.total_bytes() - plan.runs[1].resolved.checkpointing.memory.total_bytes(), frozen * (4 + 13));
}

TEST(StudyPlan, GpuMemoryComesFromTheTableTheOverrideOrNothingOnCpu) {
  SlurmSpec s;
  EXPECT_DOUBLE_EQ(gpu_memory_gib(s), 80.0);
  s.gpu = "A100-40GB";
  EXPECT_DOUBLE_EQ(gpu_memory_gib(s), 40.0);
  s.gpu = "nvidia h100";
  EXPECT_DOUBLE_EQ(gpu_memory_gib(s), 80.0);
  s.gpu = "H200";
  EXPECT_DOUBLE_EQ(gpu_memory_gib(s), 141.0);
  s.gpu_memory_gib = 24;
  EXPECT_DOUBLE_EQ(gpu_memory_gib(s), 24.0);
  s.gpu_memory_gib = 0;
  s.gpu = "none";
  EXPECT_DOUBLE_EQ(gpu_memory_gib(s), 0.0);
  s.gpu = "X9000";
  const std::string e = error_of([&] { gpu_memory_gib(s); });
  EXPECT_TRUE(contains(e, "slurm.gpu: no memory size known for GPU 'X9000'")) << e;
  EXPECT_TRUE(contains(e, "slurm.gpu_memory_gib")) << e;

  const StudyPlan cpu = plan_study(spec_from("study: cpu\nbase: {train.max_steps: 3}\nslurm: {gpu: none}\n"));
  EXPECT_EQ(cpu.runs[0].fits, "-");
  EXPECT_FALSE(cpu.runs[0].resolved.checkpointing.memory.workspace_bytes > 0);  // no CUDA context on CPU
}

// ---- Rendering ----

const char* kRenderSpec = R"(
study: demo
base: {train: {max_steps: 10, batch_mode: fixed_micro, micro_batch: 2}}
axes:
  nodes: [1, 2]
  lr_scaling.rule: [none, sqrt]
slurm:
  partition: gpu
  account: proj42
  qos: normal
  constraint: a100
  time_limit: "02:00:00"
  gpus_per_node: 8
  gpu: A100-80GB
  cpus_per_task: 12
  signal_s: 120
  extra_sbatch: [--exclusive]
  env: {NCCL_DEBUG: WARN, NCCL_IB_TIMEOUT: "22"}
  modules: [cuda/12.4]
)";

// `workdir`: where the jobs run; render creates the runs' log folders there.
RenderOptions render_options(const std::string& out, const std::string& workdir = "/scratch/project") {
  RenderOptions o;
  o.out_dir = out;
  o.bin_dir = "/opt/t5scale/bin";
  o.workdir = workdir;
  o.spec_path = "jobs/demo.yaml";
  return o;
}

TEST(StudyRender, TheSbatchScriptHasTheKeyLines) {
  const StudyPlan plan = plan_study(spec_from(kRenderSpec));
  ASSERT_EQ(plan.runs.size(), 4u);
  const RunPlan& run = plan.runs[3];
  ASSERT_EQ(run.run.name, "n2-sqrt");
  const std::string text = render_run_sbatch(plan, run, "/cfg/n2-sqrt.yaml", render_options("/cfg"));
  const std::vector<std::string> lines = {
      "#!/bin/bash\n",
      "\n#SBATCH --job-name=demo.n2-sqrt\n",
      "\n#SBATCH --nodes=2\n",
      "\n#SBATCH --ntasks-per-node=8\n",
      "\n#SBATCH --gpus-per-node=8\n",
      "\n#SBATCH --cpus-per-task=12\n",
      "\n#SBATCH --time=02:00:00\n",
      "\n#SBATCH --partition=gpu\n",
      "\n#SBATCH --account=proj42\n",
      "\n#SBATCH --qos=normal\n",
      "\n#SBATCH --constraint=a100\n",
      "\n#SBATCH --signal=USR1@120\n",
      "\n#SBATCH --requeue\n",
      "\n#SBATCH --open-mode=append\n",
      "\n#SBATCH --chdir=/scratch/project\n",
      "\n#SBATCH --exclusive\n",
      "\n#SBATCH --output=results/demo/n2-sqrt.%j.log\n",
      "\n#SBATCH --error=results/demo/n2-sqrt.%j.log\n",
      "\nT5SCALE_BIN=\"/opt/t5scale/bin\"\n",
      "\nRUN_CONFIG=\"/cfg/n2-sqrt.yaml\"",
      "\nmodule load cuda/12.4\n",
      "\nexport OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}\n",
      "\nexport NCCL_DEBUG='WARN'\n",
      "\nexport NCCL_IB_TIMEOUT='22'\n",
      "\n  srun --mpi=pmix --kill-on-bad-exit=1 --cpus-per-task=\"$SLURM_CPUS_PER_TASK\" "
      "\"$T5SCALE_BIN/t5scale-train\" --config \"$RUN_CONFIG\" &\n",
      "\nif [ \"$rc\" -eq 75 ]; then\n",
      "\n  scontrol requeue \"$SLURM_JOB_ID\"\n  exit 0\nfi\n",
      "\nexit \"$rc\"\n",
  };
  for (const auto& line : lines) EXPECT_TRUE(contains(text, line)) << "missing " << line << " in\n" << text;
  // A summary of the run for the reader.
  EXPECT_TRUE(contains(text, "# 2 node(s) x 8 task(s) = world 16: tp 1 x dp 16; micro batch 2 x accumulation 1 -> "
                             "global batch 32\n"))
      << text;
  EXPECT_TRUE(contains(text, "lr 0.0003 -> 0.000424 (lr_scaling sqrt), 10 steps")) << text;
  // #SBATCH lines must come before the first command, or sbatch ignores them.
  const size_t last_directive = text.rfind("#SBATCH");
  const size_t first_command = text.find("\nT5SCALE_BIN=");
  EXPECT_LT(last_directive, first_command);
  // No user's home or network interface built in.
  EXPECT_FALSE(contains(text, "/home/"));
  EXPECT_FALSE(contains(text, "SOCKET_IFNAME"));
}

TEST(StudyRender, OptionalLinesAreLeftOutAndCpuJobsAskForNoGpus) {
  const StudyPlan plan = plan_study(spec_from(R"(
study: cpu
base: {train.max_steps: 4}
slurm: {gpu: none, signal_s: 0, launcher: mpirun}
)"));
  const std::string text = render_run_sbatch(plan, plan.runs[0], "/c/cpu.yaml", render_options("/c"));
  for (const char* absent : {"#SBATCH --partition", "#SBATCH --account", "#SBATCH --qos", "#SBATCH --constraint",
                             "#SBATCH --mem", "#SBATCH --gpus-per-node", "#SBATCH --signal", "#SBATCH --cpus-per-task",
                             "module load"}) {
    EXPECT_FALSE(contains(text, absent)) << absent << " in\n" << text;
  }
  EXPECT_TRUE(contains(text, "mpirun -np \"$SLURM_NTASKS\" --bind-to none \"$T5SCALE_BIN/t5scale-train\"")) << text;

  const StudyPlan mpirun = plan_study(spec_from("study: m\nbase: {train.max_steps: 4}\nslurm: {launcher: mpirun}\n"));
  const std::string with_signal = render_run_sbatch(mpirun, mpirun.runs[0], "/c/m.yaml", render_options("/c"));
  EXPECT_TRUE(contains(with_signal, "#SBATCH --signal=B:USR1@120\n")) << with_signal;  // to the batch shell
}

// Runs a rendered script under bash with stand-ins for the launcher and scontrol; returns bash's exit status.
// The stand-in launcher logs its arguments, then behaves as `launcher_body` says.
struct ScriptRun {
  int exit_code = -1;
  std::string launcher_log;
  std::string scontrol_log;
  std::string output;
};

ScriptRun run_script(const TempDir& dir, const std::string& script, const std::string& launcher,
                     const std::string& launcher_body, bool send_usr1 = false) {
  const fs::path bin = dir.path() / "fakebin";
  fs::create_directories(bin);
  write_text((bin / launcher).string(),
             "#!/bin/bash\necho \"$*\" >> " + (dir / "launcher.log") + "\n" + launcher_body + "\n");
  write_text((bin / "scontrol").string(), "#!/bin/bash\necho \"$*\" >> " + (dir / "scontrol.log") + "\n");
  fs::permissions(bin / launcher, fs::perms::owner_all);
  fs::permissions(bin / "scontrol", fs::perms::owner_all);
  write_text(dir / "job.sbatch", script);
  const std::string environment =
      "PATH=" + bin.string() + ":/usr/bin:/bin SLURM_JOB_ID=4242 SLURM_NTASKS=4 SLURM_CPUS_PER_TASK=12 ";
  std::string command;
  if (send_usr1) {
    // The job shell gets SIGUSR1 (as from --signal=B:...) once the launcher has started.
    command = "env " + environment + "bash " + (dir / "job.sbatch") + " > " + (dir / "out.txt") + " 2>&1 & job=$!; " +
              "for i in $(seq 100); do [ -e " + (dir / "started") + " ] && break; sleep 0.05; done; " +
              "kill -USR1 $job; wait $job";
  } else {
    command = "env " + environment + "bash " + (dir / "job.sbatch") + " > " + (dir / "out.txt") + " 2>&1";
  }
  const int status = std::system(("bash -c '" + command + "'").c_str());
  ScriptRun r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.launcher_log = read_text(dir / "launcher.log");
  r.scontrol_log = read_text(dir / "scontrol.log");
  r.output = read_text(dir / "out.txt");
  return r;
}

TEST(StudyRender, ExitCode75RequeuesTheJobAndOtherCodesPassThrough) {
  const StudyPlan plan = plan_study(spec_from(kRenderSpec));
  const std::string script = render_run_sbatch(plan, plan.runs[0], "/cfg/n1-none.yaml", render_options("/cfg"));
  {
    TempDir dir;
    const ScriptRun r = run_script(dir, script, "srun", "exit 75");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.scontrol_log, "requeue 4242\n");
    EXPECT_EQ(r.launcher_log, "--mpi=pmix --kill-on-bad-exit=1 --cpus-per-task=12 /opt/t5scale/bin/t5scale-train "
                              "--config /cfg/n1-none.yaml\n");
  }
  for (int code : {0, 2, 3}) {
    TempDir dir;
    const ScriptRun r = run_script(dir, script, "srun", msg("exit ", code));
    EXPECT_EQ(r.exit_code, code) << r.output;
    EXPECT_EQ(r.scontrol_log, "");  // no requeue
  }
}

TEST(StudyRender, TheMpirunScriptPassesSigusr1OnAndRequeues) {
  const StudyPlan plan =
      plan_study(spec_from("study: m\nbase: {train.max_steps: 4}\nslurm: {launcher: mpirun, gpus_per_node: 4}\n"));
  const std::string script = render_run_sbatch(plan, plan.runs[0], "/cfg/m.yaml", render_options("/cfg"));
  TempDir dir;
  // The stand-in for mpirun: exits 75 when SIGUSR1 reaches it (as the trainer does), 1 if it never comes.
  const std::string body = "trap 'exit 75' USR1\ntouch " + (dir / "started") +
                           "\nfor i in $(seq 200); do sleep 0.05; done\nexit 1";
  const ScriptRun r = run_script(dir, script, "mpirun", body, /*send_usr1=*/true);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.scontrol_log, "requeue 4242\n") << r.output;
  EXPECT_EQ(r.launcher_log, "-np 4 --bind-to none /opt/t5scale/bin/t5scale-train --config /cfg/m.yaml\n");
}

// A one-run study (4 steps) with its results in `results` and the given slurm block: the run's name, its exit code
// file and its rendered run script.
struct OneRunScript {
  std::string run, exit_code_file, script;
};

OneRunScript one_run_script(const std::string& results, const std::string& slurm) {
  const StudyPlan plan = plan_study(
      spec_from("study: m\nresults_dir: " + results + "\nbase: {train.max_steps: 4}\nslurm: " + slurm + "\n"));
  const std::string run = plan.runs[0].run.name;
  return {run, results + "/" + run + ".exit_code",
          render_run_sbatch(plan, plan.runs[0], "/cfg/m.yaml", render_options("/cfg"))};
}

TEST(StudyRender, AJobWhoseMpirunWasEndedBySigtermIsRequeuedFromItsExitCodeFile) {
  // mpirun sent SIGTERM itself exits 1 however its ranks ended; rank 0 left the job's own code (75 after the
  // preemption checkpoint) in <results>/<run>.exit_code, and the script goes by it.
  TempDir dir;
  const std::string results = dir / "res";
  const auto [run, exit_code_file, script] = one_run_script(results, "{launcher: mpirun, gpus_per_node: 4}");
  EXPECT_TRUE(contains(script, "EXIT_CODE_FILE=\"" + exit_code_file + "\"\n")) << script;
  for (const auto& [written, expected_exit, requeued] :
       std::vector<std::tuple<std::string, int, bool>>{{"75", 0, true}, {"2", 1, false}, {"", 1, false}}) {
    TempDir job;
    const std::string body = "mkdir -p " + results + "; rm -f " + exit_code_file + "; " +
                             (written.empty() ? "" : "echo " + written + " > " + exit_code_file + "; ") + "exit 1";
    const ScriptRun r = run_script(job, script, "mpirun", body);
    EXPECT_EQ(r.exit_code, expected_exit) << written << ": " << r.output;
    EXPECT_EQ(r.scontrol_log, requeued ? "requeue 4242\n" : "") << written << ": " << r.output;
  }
}

// Open MPI 4.1 can crash a rank inside MPI_Init under srun --mpi=pmix: a launch whose ranks died by a signal
// before rank 0 wrote "started" to <run>.exit_code (every rank past MPI_Init) is made again, 3 launches in all,
// and the log says so; a launch that had started, or that ended by its own exit code (srun's 255 among them), is not.
TEST(StudyRender, ALaunchThatDiedBeforeItsRanksStartedIsMadeAgain) {
  TempDir dir;
  const std::string results = dir / "res";
  const auto [run, exit_code_file, script] = one_run_script(results, "{gpus_per_node: 4}");
  const std::string launch_line =
      "--mpi=pmix --kill-on-bad-exit=1 /opt/t5scale/bin/t5scale-train --config /cfg/m.yaml\n";
  // The stand-in for srun: the first `crashes` launches die by SIGSEGV (139) at start-up, then it runs `then`.
  auto crashing_first = [&](const TempDir& job, int crashes, const std::string& then) {
    const std::string count = job / "launches";
    return "mkdir -p " + results + "; n=$(( $(cat " + count + " 2>/dev/null || echo 0) + 1 )); echo $n > " + count +
           "\n[ $n -le " + std::to_string(crashes) + " ] && { echo 'Signal: Segmentation fault (11)'; exit 139; }\n" +
           then;
  };
  {  // one crash, then the job: completed
    TempDir job;
    const ScriptRun r = run_script(job, script, "srun",
                                   crashing_first(job, 1, "echo started > " + exit_code_file + "; echo 0 > " +
                                                              exit_code_file + "; exit 0"));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.launcher_log, launch_line + launch_line);
    EXPECT_TRUE(contains(r.output, "[t5scale] run " + run + ": the launch ended with 139 (signal 11) before its ranks "
                                   "had all started; launching again (attempt 2 of 3)\n")) << r.output;
    EXPECT_TRUE(contains(r.output, "t5scale-train exited with 0")) << r.output;
  }
  {  // crashes every time: 3 launches, then the crash's code
    TempDir job;
    const ScriptRun r = run_script(job, script, "srun", crashing_first(job, 10, "exit 0"));
    EXPECT_EQ(r.exit_code, 139) << r.output;
    EXPECT_EQ(r.launcher_log, launch_line + launch_line + launch_line);
    EXPECT_TRUE(contains(r.output, "launching again (attempt 3 of 3)")) << r.output;
  }
  {  // a rank that died by a signal after every rank had started (the file says "started"): not made again
    TempDir job;
    const ScriptRun r = run_script(job, script, "srun", "mkdir -p " + results + "; echo started > " + exit_code_file +
                                                            "; exit 139");
    EXPECT_EQ(r.exit_code, 139) << r.output;
    EXPECT_EQ(r.launcher_log, launch_line);
  }
  // Refused before the world formed (exit 2, no file), and srun's own failure to launch the tasks at all (255, a
  // node's slurmd refused the step: above 128 + 64, the highest signal): its own exit code, not made again.
  for (const int code : {2, 255}) {
    TempDir job;
    const std::string said =
        code == 255 ? "srun: error: Application launch failed: Unspecified error" : "t5scale-train: error: refused";
    const ScriptRun r = run_script(job, script, "srun", "echo '" + said + "'; exit " + std::to_string(code));
    EXPECT_EQ(r.exit_code, code) << r.output;
    EXPECT_EQ(r.launcher_log, launch_line) << code;
    EXPECT_FALSE(contains(r.output, "launching again")) << r.output;
  }
  {  // an earlier attempt's ending left in the file (75, preempted) does not make a start-up crash a preemption
    TempDir job;
    fs::create_directories(results);
    write_text(exit_code_file, "75\n");
    const ScriptRun r = run_script(job, script, "srun", crashing_first(job, 10, "exit 0"));
    EXPECT_EQ(r.exit_code, 139) << r.output;
    EXPECT_EQ(r.scontrol_log, "") << r.output;
    EXPECT_EQ(r.launcher_log, launch_line + launch_line + launch_line);
  }
}

TEST(StudyRender, WritesConfigsThatLoadBackScriptsAndTheRunsTable) {
  TempDir dir;
  const StudyPlan plan = plan_study(spec_from(kRenderSpec));
  const RenderedStudy rendered =
      write_rendered_study(plan, render_options(dir / "out", dir / "work"), /*array=*/true);
  ASSERT_EQ(rendered.run_scripts.size(), 4u);
  for (const auto& p : plan.runs) {
    const RunConfig loaded = load_run_config(dir / ("out/" + p.run.name + ".yaml"));
    EXPECT_TRUE(loaded == p.run.config) << p.run.name;
    const fs::path script = dir.path() / "out" / (p.run.name + ".sbatch");
    ASSERT_TRUE(fs::exists(script));
    EXPECT_NE(fs::status(script).permissions() & fs::perms::owner_exec, fs::perms::none);
    EXPECT_EQ(std::system(("bash -n " + script.string()).c_str()), 0) << script;
  }
  const std::string csv = read_text(rendered.runs_csv);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 5);
  EXPECT_EQ(csv.rfind("run,study,nodes,gpus_per_node,world,tp,dp,micro_batch,grad_accumulation,global_batch,", 0),
            0u);
  // One array per launch shape: 1 node and 2 nodes, two runs each.
  ASSERT_EQ(rendered.array_scripts.size(), 2u);
  EXPECT_EQ(read_text(dir / "out/array-n2x8.runs"), "n2-none\nn2-sqrt\n");
  const std::string array = read_text(dir / "out/array-n2x8.sbatch");
  EXPECT_TRUE(contains(array, "\n#SBATCH --array=0-1\n")) << array;
  EXPECT_TRUE(contains(array, "\n#SBATCH --nodes=2\n")) << array;
  EXPECT_TRUE(contains(array, "\n#SBATCH --output=results/demo/array-n2x8.%A_%a.log\n")) << array;
  EXPECT_EQ(std::system(("bash -n " + (dir / "out/array-n2x8.sbatch")).c_str()), 0);
}

TEST(StudyRender, TheArrayScriptPicksItsTasksRun) {
  TempDir dir;
  const StudyPlan plan = plan_study(spec_from(kRenderSpec));
  write_rendered_study(plan, render_options(dir / "out", dir / "work"), /*array=*/true);
  TempDir run_dir;
  const std::string script = read_text(dir / "out/array-n2x8.sbatch");
  setenv("SLURM_ARRAY_TASK_ID", "1", 1);
  const ScriptRun r = run_script(run_dir, script, "srun", "exit 0");
  unsetenv("SLURM_ARRAY_TASK_ID");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.launcher_log, "--config " + (dir / "out") + "/n2-sqrt.yaml")) << r.launcher_log;
}

// A run the plan predicts not to fit its GPU is invalid, counted, and not rendered, unless --allow-over-memory asks
// for it: then it is a note, and its script says how it was rendered.
TEST(StudyRender, ARunThatDoesNotFitIsInvalidAndNotRenderedUnlessAllowed) {
  // jobs/forecasts/t5-xxl-1-vs-4-a100.yaml, written out here so that the test needs no file of the clone (the
  // bundle runs it without the source tree).
  const StudySpec spec = spec_from(R"(
study: t5-xxl-1-vs-4-a100
base:
  model: {name: t5-v1_1-xxl}
  data: {dataset: data/natural_questions.h5, max_source_length: 512, max_target_length: 32}
  precision: bf16
  parallel: {activation_checkpointing: true, checkpoint_every_blocks: 1, backend: nccl}
  optimizer: {name: adafactor, lr: 1.0e-3}
  train: {max_steps: 5000, global_batch: 16}
  eval: {every_steps: 1000, max_examples: 2000, metrics: squad, max_new_tokens: 32, batch_size: 8}
axes:
  grid:
    - {label: 1-gpu, gpus_per_node: 1, parallel.tp: 1, train.grad_accumulation: 4}
    - {label: 1-gpu-offload, gpus_per_node: 1, parallel.tp: 1, train.grad_accumulation: 4, parallel.offload_optimizer: true}
    - {label: 4-gpus-tp4, gpus_per_node: 4, parallel.tp: 4, train.grad_accumulation: 4}
    - {label: 4-gpus-tp2-dp2, gpus_per_node: 4, parallel.tp: 2, train.grad_accumulation: 2}
slurm:
  gpu: A100-80GB
  gpus_per_node: 4
  time_limit: "2-00:00:00"
cost:
  price_per_node_hour_usd: 16.39
)");
  const StudyPlan plan = plan_study(spec);
  ASSERT_EQ(plan.runs.size(), 4u);
  const RunPlan& one = plan.runs[0];
  ASSERT_EQ(one.run.name, "1-gpu");
  EXPECT_EQ(one.fits, "NO");
  EXPECT_FALSE(one.valid());
  EXPECT_EQ(plan.invalid_count(), 1u);
  ASSERT_EQ(one.resolved.errors.size(), 1u);
  EXPECT_TRUE(contains(one.resolved.errors[0], "memory: predicted ")) << one.resolved.errors[0];
  EXPECT_TRUE(contains(one.resolved.errors[0], " per GPU does not fit 80 GiB per GPU (slurm.gpu A100-80GB) with 5% to spare"))
      << one.resolved.errors[0];
  EXPECT_TRUE(contains(one.resolved.errors[0], "t5scale-study --allow-over-memory renders it all the same")) << one.resolved.errors[0];
  // The advice offers the optimizer's state on the host, which fits with its host memory beside it.
  EXPECT_TRUE(contains(one.resolved.errors[0], "parallel.offload_optimizer=true: ")) << one.resolved.errors[0];
  EXPECT_TRUE(contains(one.resolved.errors[0], "(host ")) << one.resolved.errors[0];
  // With it, one A100-80GB holds the step: the device's memory, the host's per rank and node, and the step's time.
  const RunPlan& offloaded = plan.runs[1];
  ASSERT_EQ(offloaded.run.name, "1-gpu-offload");
  EXPECT_EQ(offloaded.fits, "yes");
  EXPECT_TRUE(offloaded.valid()) << join(offloaded.resolved.errors, "; ");
  const MemoryPrediction& memory = offloaded.resolved.checkpointing.memory;
  EXPECT_EQ(memory.optimizer_bytes, 0);
  EXPECT_GT(memory.host_bytes, one.resolved.checkpointing.memory.optimizer_bytes);
  EXPECT_LT(memory.total_bytes(), one.resolved.checkpointing.memory.total_bytes());
  EXPECT_TRUE(std::any_of(offloaded.resolved.notes.begin(), offloaded.resolved.notes.end(), [](const std::string& n) {
    return contains(n, "parallel.offload_optimizer: ") && contains(n, " of host memory per rank") &&
           contains(n, "(the node has 1862.65 GiB)");
  })) << join(offloaded.resolved.notes, "; ");
  ASSERT_TRUE(offloaded.resolved.step_time.has_value());
  EXPECT_GT(offloaded.resolved.step_time->host_update_s, 0.0);
  EXPECT_GT(offloaded.resolved.step_time->offload_copies_s, 0.0);
  EXPECT_GT(offloaded.resolved.step_time->total_s, one.resolved.step_time->total_s);
  std::printf("T5-v1.1-XXL on one A100-80GB with offload: device %s; host %s per rank; step %s\n",
              memory.describe().c_str(), gib_text(static_cast<double>(memory.host_bytes)).c_str(),
              offloaded.resolved.step_time->describe().c_str());
  const std::string text = format_plan(plan);
  EXPECT_TRUE(contains(text, "4 run(s), 1 invalid;")) << text;
  EXPECT_TRUE(contains(text, "1-gpu (INVALID)")) << text;
  TempDir dir;
  const std::string refused =
      error_of([&] { write_rendered_study(plan, render_options(dir / "out", dir / "work"), false); });
  EXPECT_TRUE(contains(refused, "1 invalid run(s), nothing rendered: 1-gpu")) << refused;
  EXPECT_FALSE(fs::exists(dir / "out/1-gpu.sbatch"));

  PlanOptions allow;
  allow.allow_over_memory = true;
  const StudyPlan allowed = plan_study(spec, allow);
  EXPECT_EQ(allowed.invalid_count(), 0u);
  EXPECT_TRUE(allowed.runs[0].over_memory_allowed);
  EXPECT_FALSE(allowed.runs[1].over_memory_allowed);
  write_rendered_study(allowed, render_options(dir / "out", dir / "work"), /*array=*/true);
  const std::string marker = "# RENDERED WITH --allow-over-memory";
  EXPECT_TRUE(contains(read_text(dir / "out/1-gpu.sbatch"), marker));
  EXPECT_FALSE(contains(read_text(dir / "out/4-gpus-tp4.sbatch"), marker));
  EXPECT_TRUE(contains(read_text(dir / "out/array-n1x1.sbatch"),
                       "#   task 0: 1-gpu (RENDERED WITH --allow-over-memory"));
}

TEST(StudyRender, AStudyWithInvalidRunsIsNotRendered) {
  TempDir dir;
  const StudyPlan plan = plan_study(spec_from(R"(
study: bad
base: {model.name: t5-small, train.max_steps: 3}
axes: {parallel.tp: [3]}
)"));
  const std::string e =
      error_of([&] { write_rendered_study(plan, render_options(dir / "out", dir / "work"), false); });
  EXPECT_TRUE(contains(e, "1 invalid run(s), nothing rendered: bad (see t5scale-study plan)")) << e;
  EXPECT_FALSE(fs::exists(dir.path() / "out"));
  EXPECT_FALSE(fs::exists(dir.path() / "work"));
}

// Every file under `dir` with its text: what a dry run must leave as it was.
std::map<std::string, std::string> files_under(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    files[entry.path().string()] = entry.is_regular_file() ? read_text(entry.path().string()) : "(folder)";
  }
  return files;
}

TEST(StudyRender, EnvValuesAreLiteralAndExpandValuesExpandOnlyVariables) {
  TempDir dir;
  const std::string injected = dir / "injected";
  const StudyPlan plan = plan_study(spec_from(std::string(R"(
study: env
base: {train.max_steps: 4}
slurm:
  env:
    LITERAL: '$(touch )") + injected + "1) `touch " + injected + R"(2` $SLURM_JOB_ID it''s "q" \ end'
    EXPANDED: {expand: '/scratch/$SLURM_JOB_ID/${SLURM_NTASKS}x $5 $$ "q" \ it''s end$'}
)"));
  const std::string script = render_run_sbatch(plan, plan.runs[0], "/cfg/env.yaml", render_options("/cfg"));
  const ScriptRun r =
      run_script(dir, script, "srun", "printf '%s\\n' \"$LITERAL\" \"$EXPANDED\" > " + (dir / "values.txt"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_text(dir / "values.txt"), "$(touch " + injected + "1) `touch " + injected +
                                               "2` $SLURM_JOB_ID it's \"q\" \\ end\n"
                                               "/scratch/4242/4x $5 $$ \"q\" \\ it's end$\n")
      << script;
  EXPECT_FALSE(fs::exists(injected + "1")) << "a literal value ran $(...)";
  EXPECT_FALSE(fs::exists(injected + "2")) << "a literal value ran `...`";
}

TEST(StudyRender, SetupLinesRunAsWrittenAfterTheModulesAndBeforeTheEnvironment) {
  TempDir dir;
  const StudyPlan plan = plan_study(spec_from(std::string(R"(
study: setup
base: {train.max_steps: 4}
slurm:
  modules: [cuda/12.4]
  setup:
    - echo "setup in job $SLURM_JOB_ID" > )") + (dir / "setup.txt") + R"(
    - export FROM_SETUP=yes
  env: {AFTER_SETUP: {expand: "$FROM_SETUP-too"}}
)"));
  const std::string script = render_run_sbatch(plan, plan.runs[0], "/cfg/setup.yaml", render_options("/cfg"));
  const size_t modules = script.find("\nmodule load cuda/12.4\n");
  const size_t setup = script.find("\nexport FROM_SETUP=yes\n");
  const size_t environment = script.find("\nexport AFTER_SETUP=");
  const size_t launch = script.find("\nsrun ");
  ASSERT_NE(setup, std::string::npos) << script;
  EXPECT_LT(modules, setup) << script;
  EXPECT_LT(setup, environment) << script;
  EXPECT_LT(environment, launch) << script;
  const ScriptRun r =
      run_script(dir, script, "srun", "printf '%s\\n' \"$FROM_SETUP\" \"$AFTER_SETUP\" > " + (dir / "values.txt"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_text(dir / "setup.txt"), "setup in job 4242\n") << r.output;
  EXPECT_EQ(read_text(dir / "values.txt"), "yes\nyes-too\n") << r.output;
}

TEST(StudyRender, SrunIsGivenTheCpusPerTaskOfTheAllocation) {
  // Since Slurm 22.05 srun does not inherit --cpus-per-task from sbatch: without it, each rank gets one core.
  const StudyPlan plan = plan_study(spec_from(kRenderSpec));
  {
    TempDir dir;
    const std::string script = render_run_sbatch(plan, plan.runs[0], "/cfg/n1-none.yaml", render_options("/cfg"));
    const ScriptRun r = run_script(dir, script, "srun", "exit 0");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(contains(r.launcher_log, " --cpus-per-task=12 ")) << r.launcher_log;
  }
  {
    TempDir dir;
    const StudyPlan unset = plan_study(spec_from("study: c\nbase: {train.max_steps: 4}\n"));
    const std::string script = render_run_sbatch(unset, unset.runs[0], "/cfg/c.yaml", render_options("/cfg"));
    const ScriptRun r = run_script(dir, script, "srun", "exit 0");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_FALSE(contains(r.launcher_log, "--cpus-per-task")) << r.launcher_log;  // the site's default
  }
}

TEST(StudyRender, GpusAreAskedPerNodeOrAsGresWithTheSitesType) {
  auto script_for = [](const std::string& slurm) {
    const StudyPlan plan =
        plan_study(spec_from("study: g\nbase: {train.max_steps: 4}\nslurm: {gpus_per_node: 8, " + slurm + "}\n"));
    return render_run_sbatch(plan, plan.runs[0], "/cfg/g.yaml", render_options("/cfg"));
  };
  const std::string per_node = script_for("gpu: A100-80GB");
  EXPECT_TRUE(contains(per_node, "\n#SBATCH --gpus-per-node=8\n")) << per_node;
  EXPECT_FALSE(contains(per_node, "--gres")) << per_node;
  const std::string typed = script_for("gres_type: h100");
  EXPECT_TRUE(contains(typed, "\n#SBATCH --gpus-per-node=h100:8\n")) << typed;
  const std::string gres = script_for("gpu_request: gres");
  EXPECT_TRUE(contains(gres, "\n#SBATCH --gres=gpu:8\n")) << gres;
  EXPECT_FALSE(contains(gres, "--gpus-per-node")) << gres;
  const std::string gres_typed = script_for("gpu_request: gres, gres_type: a100");
  EXPECT_TRUE(contains(gres_typed, "\n#SBATCH --gres=gpu:a100:8\n")) << gres_typed;
}

TEST(StudyRender, APathThatAnSbatchLineCannotHoldIsRefusedBeforeAnythingIsWritten) {
  TempDir dir;
  const StudyPlan plan = plan_study(spec_from(kRenderSpec));
  const std::string workdir = error_of([&] {
    write_rendered_study(plan, render_options(dir / "out", dir / "my project"), false);
  });
  EXPECT_TRUE(contains(workdir, "the jobs' working directory (--workdir, or the current folder): '" +
                                    (dir / "my project") + "' holds whitespace"))
      << workdir;
  ExpandOptions hash;
  hash.results_dir = "results/#1";
  const StudyPlan logs = plan_study(spec_from(kRenderSpec), PlanOptions{hash});
  const std::string results_dir =
      error_of([&] { write_rendered_study(logs, render_options(dir / "out", dir / "work"), false); });
  EXPECT_TRUE(contains(results_dir, "results_dir (or --results-dir): the jobs' log path: 'results/#1/n1-none.%j.log' "
                                    "holds '#'"))
      << results_dir;
  EXPECT_FALSE(fs::exists(dir.path() / "out"));
  EXPECT_FALSE(fs::exists(dir.path() / "work"));
}

TEST(StudyRender, RenderCreatesTheFoldersTheLogsGoTo) {
  // Slurm opens #SBATCH --output before the script runs: in a missing folder the job fails without a log.
  TempDir dir;
  const RenderedStudy relative =
      write_rendered_study(plan_study(spec_from(kRenderSpec)), render_options(dir / "out", dir / "work"), false);
  EXPECT_EQ(relative.log_dirs, std::vector<std::string>{dir / "work/results/demo"});
  EXPECT_TRUE(fs::is_directory(dir.path() / "work/results/demo"));
  ExpandOptions absolute;
  absolute.results_dir = dir / "elsewhere/logs";
  write_rendered_study(plan_study(spec_from(kRenderSpec), PlanOptions{absolute}),
                       render_options(dir / "out2", dir / "work"),
                       false);
  EXPECT_TRUE(fs::is_directory(dir.path() / "elsewhere/logs"));
}

TEST(StudyRender, AScriptEditedAfterRenderIsKeptAndOneThatIsNotFollowsTheSpec) {
  TempDir dir;
  const RenderOptions options = render_options(dir / "out", dir / "work");
  const StudyPlan plan = plan_study(spec_from(kRenderSpec));
  const RenderedStudy first = write_rendered_study(plan, options, false);
  EXPECT_EQ(first.missing.size(), 8u);  // 4 configs, 4 scripts
  const std::string edited_path = dir / "out/n1-none.sbatch";
  const std::string edited = read_text(edited_path) + "# a person's edit\n";
  write_text(edited_path, edited);

  const RenderedStudy again = write_rendered_study(plan, options, false);
  EXPECT_EQ(again.edited_kept, std::vector<std::string>{edited_path});
  EXPECT_EQ(read_text(edited_path), edited);

  // The spec changes (here through --set): what nobody edited follows it; the edited script stays.
  ExpandOptions longer;
  longer.overrides = {"train.max_steps=20"};
  const StudyPlan changed = plan_study(spec_from(kRenderSpec), PlanOptions{longer});
  const RenderedStudy updated = write_rendered_study(changed, options, false);
  EXPECT_EQ(updated.edited_kept, std::vector<std::string>{edited_path});
  EXPECT_TRUE(updated.edited_replaced.empty());
  EXPECT_EQ(read_text(edited_path), edited);
  EXPECT_EQ(load_run_config(dir / "out/n1-none.yaml").train.max_steps, 20);
  EXPECT_TRUE(contains(read_text(dir / "out/n2-sqrt.sbatch"), ", 20 steps"));

  // --rerender replaces the edit with what the spec renders.
  WritePolicy rerender;
  rerender.replace_edited = true;
  const RenderedStudy replaced = write_rendered_study(changed, options, false, rerender);
  EXPECT_EQ(replaced.edited_replaced, std::vector<std::string>{edited_path});
  EXPECT_EQ(read_text(edited_path), render_run_sbatch(changed, changed.runs[0], dir / "out/n1-none.yaml", options));

  // Scripts from before render kept a record, or whose record is lost, may hold edits: they are kept.
  fs::remove(dir.path() / "out" / kRenderedChecksumsFile);
  const RenderedStudy unknown = write_rendered_study(plan, options, false);
  EXPECT_EQ(unknown.edited_kept.size(), 8u);
}

TEST(StudyRender, ADryRunWritesNothing) {
  TempDir dir;
  const RenderOptions options = render_options(dir / "out", dir / "work");
  const StudyPlan plan = plan_study(spec_from(kRenderSpec));
  WritePolicy dry_run;
  dry_run.dry_run = true;
  const RenderedStudy fresh = write_rendered_study(plan, options, /*array=*/true, dry_run);
  EXPECT_EQ(fresh.missing.size(), 12u);  // 4 configs, 4 scripts, and per launch shape a runs list and a script
  EXPECT_TRUE(fs::is_empty(dir.path()));

  write_rendered_study(plan, options, false);
  const std::string edited_path = dir / "out/n2-none.sbatch";
  write_text(edited_path, read_text(edited_path) + "# a person's edit\n");
  const auto before = files_under(dir.path());
  ExpandOptions longer;
  longer.overrides = {"train.max_steps=20"};
  const RenderedStudy over =
      write_rendered_study(plan_study(spec_from(kRenderSpec), PlanOptions{longer}), options, false, dry_run);
  EXPECT_EQ(over.edited_kept, std::vector<std::string>{edited_path});
  EXPECT_EQ(files_under(dir.path()), before);
}

// ---- Status ----

RunDescription run_attributes(int64_t max_steps) {
  RunDescription d;
  d.run_id = "x";
  d.nodes = d.gpus_per_node = d.world_size = d.tp = d.dp = 1;
  d.max_steps = max_steps;
  d.energy_source_gpu = d.energy_source_cpu = "none";
  return d;
}

StepRecord step_record(int64_t step) {
  StepRecord r;
  r.step = step;
  r.loss = 1.0;
  for (auto* column : {&r.memory_allocated_bytes, &r.memory_reserved_bytes, &r.memory_peak_bytes,
                       &r.host_memory_bytes, &r.gpu_power_w, &r.gpu_energy_j, &r.cpu_energy_j}) {
    column->assign(1, 0.0);
  }
  return r;
}

TEST(StudyStatus, ReadsStatusAndLastStepOfFinishedAndUnfinishedRunFiles) {
  TempDir dir;
  EXPECT_FALSE(read_run_file_state(dir / "none.h5").exists);
  {
    RunFile file = RunFile::create(dir / "done.h5", run_attributes(3));
    for (int64_t s = 1; s <= 3; ++s) file.append_step(step_record(s));
    file.finish({}, "completed");
  }
  const RunFileState done = read_run_file_state(dir / "done.h5");
  EXPECT_TRUE(done.exists);
  EXPECT_EQ(done.error, "");
  EXPECT_EQ(done.status, RunStatus::kCompleted);
  EXPECT_EQ(done.attempt, 0);
  EXPECT_EQ(done.max_steps, 3);
  EXPECT_EQ(done.steps_rows, 3);
  EXPECT_EQ(done.last_step, 3);

  {
    RunFile file = RunFile::create(dir / "open.h5", run_attributes(10), RunFileOptions{2});
    for (int64_t s = 1; s <= 4; ++s) file.append_step(step_record(s));
  }  // closed without finish(): still "running"
  const RunFileState open = read_run_file_state(dir / "open.h5");
  EXPECT_EQ(open.status, RunStatus::kRunning);
  EXPECT_EQ(open.last_step, 4);

  // A status that is none of a run's (another tool's file, a later format): an error that names it, not a state.
  std::filesystem::copy_file(dir / "done.h5", dir / "paused.h5");
  {
    const hid_t file = H5Fopen((dir / "paused.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    ASSERT_GE(H5Adelete(file, "status"), 0);
    write_attribute(file, "status", std::string("paused"), dir / "paused.h5");
    H5Fclose(file);
  }
  const RunFileState paused = read_run_file_state(dir / "paused.h5");
  EXPECT_FALSE(paused.status.has_value());
  EXPECT_TRUE(contains(paused.error, "status 'paused' is none of running, completed, preempted, diverged, failed"))
      << paused.error;

  write_text(dir / "garbage.h5", "not hdf5");
  const RunFileState garbage = read_run_file_state(dir / "garbage.h5");
  EXPECT_TRUE(garbage.exists);
  EXPECT_TRUE(contains(garbage.error, "garbage.h5")) << garbage.error;

  // Cut short (a copy interrupted, a full disk): said at once from the superblock, for a closed file and for one
  // that a writer left open in SWMR mode (HDF5's own SWMR read would retry for minutes).
  for (const std::string name : {"done.h5", "open.h5"}) {
    const std::string cut = dir / ("cut_" + name);
    std::filesystem::copy_file(dir / name, cut);
    const auto size = std::filesystem::file_size(cut);
    std::filesystem::resize_file(cut, size - 100);
    const auto start = std::chrono::steady_clock::now();
    const RunFileState truncated = read_run_file_state(cut);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
    EXPECT_TRUE(truncated.exists);
    EXPECT_EQ(truncated.error, msg(cut, ": truncated: ", size - 100, " bytes, but its superblock says the file ends at "
                                   "byte ", size));
  }
}

TEST(StudyStatus, ReadsTheFileOfAWriterKilledWithSigkill) {
  TempDir dir;
  const std::string path = dir / "killed.h5";
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      RunFile file = RunFile::create(path, run_attributes(100), RunFileOptions{5});
      for (int64_t s = 1; s <= 7; ++s) file.append_step(step_record(s));  // rows 1-5 flushed, 6-7 buffered
      raise(SIGKILL);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "writer: %s\n", e.what());
    }
    _exit(1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  const RunFileState state = read_run_file_state(path);
  EXPECT_EQ(state.error, "");
  EXPECT_EQ(state.status, RunStatus::kRunning);
  EXPECT_EQ(state.last_step, 5);
  EXPECT_EQ(state.max_steps, 100);
}

TEST(StudyStatus, RunStatesJoinSlurmAndTheRunFile) {
  const JobRecord job{"r", "7", "", ""};
  RunFileState none;
  RunFileState running;
  running.exists = true;
  running.status = RunStatus::kRunning;
  RunFileState preempted = running;
  preempted.status = RunStatus::kPreempted;
  RunFileState completed = running;
  completed.status = RunStatus::kCompleted;
  RunFileState diverged = running;
  diverged.status = RunStatus::kDiverged;
  const SlurmJobState pending{"PENDING", "0:00", "", "squeue"};
  const SlurmJobState active{"RUNNING", "1:00", "", "squeue"};
  const SlurmJobState done{"COMPLETED", "2:00", "0:0", "scontrol"};
  const SlurmJobState failed{"FAILED", "0:05", "2:0", "sacct"};

  EXPECT_EQ(run_state(nullptr, nullptr, none), "not submitted");
  EXPECT_EQ(run_state(&job, &pending, none), "pending");
  EXPECT_EQ(run_state(&job, &pending, preempted), "preempted (requeued)");
  EXPECT_EQ(run_state(&job, &active, running), "running");
  EXPECT_EQ(run_state(&job, &done, completed), "completed");
  EXPECT_EQ(run_state(&job, &done, diverged), "diverged");
  EXPECT_EQ(run_state(&job, &done, preempted), "preempted (not requeued)");
  EXPECT_EQ(run_state(&job, &failed, none), "failed (job FAILED, no run file: see the job's log)");
  EXPECT_EQ(run_state(&job, &failed, running), "failed (killed: job FAILED, run file still says running)");
  EXPECT_EQ(run_state(&job, nullptr, completed), "completed");
  EXPECT_EQ(run_state(nullptr, nullptr, completed), "completed");
}

// What submit leaves alone: a completed run whatever its jobs, and a run whose latest job Slurm still holds in any
// waiting or running state (a held or requeued job too: submitting again would run it twice); a run whose latest job
// has ended, whose earlier job is still listed, or that was never submitted, goes.
TEST(StudyStatus, SubmitLeavesAloneCompletedRunsAndJobsSlurmStillHolds) {
  TempDir dir;
  {
    RunFile file = RunFile::create(dir / "done.h5", run_attributes(2));
    for (int64_t s = 1; s <= 2; ++s) file.append_step(step_record(s));
    file.finish({}, "completed");
  }
  {
    RunFile file = RunFile::create(dir / "killed.h5", run_attributes(10));
    file.append_step(step_record(1));
  }  // still "running": a job killed
  const std::vector<std::string> held = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "CONFIGURING", "SUSPENDED",
                                         "RUNNING", "COMPLETING", "SIGNALING", "STAGE_OUT"};
  std::vector<std::pair<std::string, std::string>> runs = {{"done", dir / "done.h5"},
                                                           {"killed", dir / "killed.h5"},
                                                           {"ended", dir / "none.h5"},
                                                           {"never", dir / "never.h5"},
                                                           {"relaunched", dir / "none.h5"}};
  std::vector<JobRecord> jobs = {{"done", "1", "", ""}, {"killed", "2", "", ""}, {"ended", "3", "", ""},
                                 {"relaunched", "4", "", ""}, {"relaunched", "5", "", ""}};
  std::map<std::string, SlurmJobState> slurm = {{"1", {"RUNNING", "", "", "squeue"}},
                                                {"2", {"TIMEOUT", "", "", "sacct"}},
                                                {"3", {"COMPLETED", "", "", "sacct"}},
                                                {"4", {"PENDING", "", "", "squeue"}},
                                                {"5", {"FAILED", "", "", "sacct"}}};
  EXPECT_EQ(runs_to_leave_alone(runs, jobs, slurm), (std::map<std::string, std::string>{{"done", "completed"}}));
  for (const std::string& state : held) {
    slurm["2"].state = state;
    const auto leave = runs_to_leave_alone(runs, jobs, slurm);
    EXPECT_EQ(leave.size(), 2u) << state;
    EXPECT_EQ(leave.count("killed") ? leave.at("killed") : "", "job 2 is " + state);
    EXPECT_TRUE(slurm_job_waits(state) != slurm_job_runs(state)) << state;
  }
  for (const std::string ended : {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", ""}) {
    EXPECT_FALSE(slurm_job_waits(ended) || slurm_job_runs(ended)) << ended;
  }
}

TEST(StudyStatus, JobRecordsAndSbatchOutput) {
  EXPECT_EQ(parse_sbatch_job_id("1234\n"), "1234");
  EXPECT_EQ(parse_sbatch_job_id("99;cluster\n"), "99");
  const std::string e = error_of([] { parse_sbatch_job_id("sbatch: error: invalid partition"); });
  EXPECT_TRUE(contains(e, "not a job id")) << e;

  TempDir dir;
  EXPECT_TRUE(read_job_records(dir / "jobs.csv").empty());
  append_job_records(dir / "jobs.csv", {{"a", "1", "2026-01-01T00:00:00Z", "/s/a.sbatch"}});
  append_job_records(dir / "jobs.csv", {{"a", "5", "2026-01-02T00:00:00Z", "/s/a.sbatch"}, {"b", "6_1", "", ""}});
  const auto records = read_job_records(dir / "jobs.csv");
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[1].job_id, "5");
  EXPECT_EQ(records[2].job_id, "6_1");
  EXPECT_EQ(read_text(dir / "jobs.csv").rfind("run,job_id,submit_time_utc,script\na,1,", 0), 0u);
}

TEST(StudyStatus, CommandsAndMissingSlurmTools) {
  const CommandResult r = run_command({"bash", "-c", "echo out; echo err >&2; exit 3"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.output, "out\n");
  EXPECT_EQ(r.errors, "err\n");
  EXPECT_EQ(run_command({"no-such-program-t5scale"}).exit_code, 127);

  TempDir empty;
  const std::string saved = std::getenv("PATH") ? std::getenv("PATH") : "";
  setenv("PATH", empty.path().c_str(), 1);
  const std::string e = error_of([] { require_slurm_command("sbatch", "t5scale-study submit"); });
  setenv("PATH", saved.c_str(), 1);
  EXPECT_TRUE(contains(e, "sbatch is not on PATH: t5scale-study submit needs Slurm's client commands")) << e;
}

// ---- The example specs in jobs/ ----

TEST(StudyExamples, EverySpecInJobsPlansWithoutInvalidRuns) {
  const fs::path jobs = fs::path(T5SCALE_SOURCE_DIR) / "jobs";
  std::map<std::string, size_t> runs;
  for (const auto& entry : fs::directory_iterator(jobs)) {
    if (entry.path().extension() != ".yaml") continue;
    const StudyPlan plan = plan_study(load_study_spec(entry.path().string()));
    EXPECT_EQ(plan.invalid_count(), 0u) << entry.path() << "\n" << format_plan(plan);
    for (const auto& p : plan.runs) EXPECT_NE(p.fits, "NO") << entry.path() << ": " << p.run.name;
    runs[entry.path().filename().string()] = plan.runs.size();
  }
  EXPECT_EQ(runs["cpu-demo.yaml"], 4u);
  EXPECT_EQ(runs["lr-scaling-seed002.yaml"], 15u);
  EXPECT_EQ(runs["lr-scaling-manpages.yaml"], 32u);
  EXPECT_EQ(runs["t5-xxl-scaling.yaml"], 10u);
  EXPECT_EQ(runs["strategies-seed000.yaml"], 16u);
  EXPECT_EQ(runs["strategies-manpages.yaml"], 14u);
  EXPECT_EQ(runs["zero2-seed003.yaml"], 3u);
}

// The quickstart study's commented-out site lines are keys a spec takes: uncommented as a site would, they load and
// plan, and say what they were written to say.
TEST(StudyExamples, TheQuickstartStudysSiteLinesAreValidKeysWhenUncommented) {
  const fs::path spec_path = fs::path(T5SCALE_SOURCE_DIR) / "jobs" / "quickstart" / "study.yaml";
  std::istringstream lines(read_text(spec_path.string()));
  std::string uncommented;
  int changed = 0;
  for (std::string line; std::getline(lines, line);) {
    const size_t body = line.find_first_not_of(' ', 4);
    const bool site_line = line.rfind("  # ", 0) == 0 && body != std::string::npos &&
                           std::regex_search(line.substr(body), std::regex("^(gpu|partition|account|modules|setup|"
                                                                           "launcher|env|HF_HUB_CACHE):|^- "));
    if (site_line) {
      line.erase(2, 2);  // "  # modules: ..." -> "  modules: ...", "  #   - source ..." -> "    - source ..."
      ++changed;
    }
    uncommented += line + "\n";
  }
  EXPECT_EQ(changed, 9) << uncommented;
  const StudySpec spec = spec_from(uncommented, spec_path.parent_path().string());
  EXPECT_EQ(spec.slurm.gpu, "A100-80GB");
  EXPECT_FALSE(spec.slurm.modules.empty());
  ASSERT_EQ(spec.slurm.setup.size(), 1u);
  EXPECT_TRUE(contains(spec.slurm.setup[0], "env.sh")) << spec.slurm.setup[0];
  EXPECT_EQ(spec.slurm.launcher, "mpirun");
  ASSERT_EQ(spec.slurm.env.size(), 1u);
  EXPECT_EQ(spec.slurm.env[0].name, "HF_HUB_CACHE");
  EXPECT_EQ(plan_study(spec).invalid_count(), 0u);
}

TEST(StudyExamples, EverySpecRendersScriptsThatBashReads) {
  TempDir dir;
  for (const auto& entry : fs::directory_iterator(fs::path(T5SCALE_SOURCE_DIR) / "jobs")) {
    if (entry.path().extension() != ".yaml") continue;
    const StudyPlan plan = plan_study(load_study_spec(entry.path().string()));
    const std::string name = entry.path().stem().string();
    const RenderedStudy rendered =
        write_rendered_study(plan, render_options(dir / ("out/" + name), dir / "work"), /*array=*/true);
    for (const auto& [run, script] : rendered.run_scripts) {
      EXPECT_EQ(std::system(("bash -n " + script).c_str()), 0) << script;
    }
  }
}

TEST(StudyExamples, NoSpecSetsAVariableThatOnlyPyTorchReads) {
  // PyTorch's ProcessGroupNCCL reads these; NCCL does not, and t5scale has its own watchdog
  // (parallel.collective_timeout_s): in a spec they only suggest a protection the job does not get from them.
  const std::set<std::string> pytorch_only = {"NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
                                              "NCCL_BLOCKING_WAIT", "TORCH_NCCL_BLOCKING_WAIT"};
  for (const auto& entry : fs::directory_iterator(fs::path(T5SCALE_SOURCE_DIR) / "jobs")) {
    if (entry.path().extension() != ".yaml") continue;
    for (const auto& var : load_study_spec(entry.path().string()).slurm.env) {
      EXPECT_FALSE(pytorch_only.count(var.name)) << entry.path() << ": slurm.env." << var.name;
    }
  }
}

TEST(StudyExamples, TheSeed003StudyShardsTheGradientsOverTheEightV100s) {
  // ZeRO-2 keeps 1/8 of T5-3B's fp32 gradients (plus the buckets in flight) where ZeRO-1 keeps them whole: about
  // 10 GiB less per GPU, so the planner needs no recomputation for ZeRO-2 and some for ZeRO-1 on 32 GiB.
  const StudyPlan plan =
      plan_study(load_study_spec((fs::path(T5SCALE_SOURCE_DIR) / "jobs/zero2-seed003.yaml").string()));
  std::map<std::string, const RunPlan*> by_name;
  for (const auto& p : plan.runs) {
    by_name[p.run.name] = &p;
    EXPECT_EQ(p.run.config.model.name, "t5-3b");
    EXPECT_EQ(p.run.world(), 8);
    EXPECT_EQ(p.resolved.batch->global_batch, 16);
    EXPECT_EQ(p.run.config.precision, RunConfig::Precision::kFp16);
    EXPECT_EQ(p.device_memory_gib, 32.0);
  }
  ASSERT_EQ(by_name.size(), 3u);
  const RunPlan& zero2 = *by_name.at("zero2");
  const RunPlan& zero1 = *by_name.at("zero1");
  EXPECT_TRUE(zero2.run.config.parallel.zero2);
  EXPECT_FALSE(zero1.run.config.parallel.zero2);
  const int64_t n = zero2.resolved.checkpointing.memory.parameters_per_rank;
  const int64_t bucket_bytes = 25 * 1024 * 1024;  // parallel.bucket_mib's default
  // ZeRO-1 keeps the whole buckets and its reduced chunk; ZeRO-2 the chunk and the buckets in flight.
  EXPECT_EQ(zero1.resolved.checkpointing.memory.gradients_bytes - zero2.resolved.checkpointing.memory.gradients_bytes,
            n * 4 + (n + 7) / 8 * 4 - ((n + 7) / 8 * 4 + kZero2BucketsHeld * bucket_bytes));
  EXPECT_EQ(zero1.resolved.checkpointing.memory.optimizer_bytes, zero2.resolved.checkpointing.memory.optimizer_bytes);
  EXPECT_EQ(zero2.resolved.checkpointing.memory.activations_bytes, plan.runs[0].resolved.checkpointing.memory.activations_bytes);
  EXPECT_LT(zero2.resolved.checkpointing.memory.total_bytes(), zero1.resolved.checkpointing.memory.total_bytes());
}

TEST(StudyExamples, TheXxlStudyIsTp8InsideANodeAndDpOverNodes) {
  const StudyPlan plan = plan_study(load_study_spec((fs::path(T5SCALE_SOURCE_DIR) / "jobs/t5-xxl-scaling.yaml").string()));
  std::vector<int64_t> nodes;
  for (const auto& p : plan.runs) {
    EXPECT_EQ(p.run.config.model.name, "t5-v1_1-xxl");
    EXPECT_EQ(p.run.config.parallel.tp, 8);
    EXPECT_EQ(p.run.gpus_per_node, 8);
    EXPECT_EQ(p.resolved.batch->dp, p.run.nodes);
    EXPECT_EQ(p.run.config.parallel.activation_checkpointing, ParallelSettings::ActivationCheckpointing::kOn);
    EXPECT_EQ(p.run.config.precision, RunConfig::Precision::kBf16);
    nodes.push_back(p.run.nodes);
  }
  EXPECT_EQ(nodes, (std::vector<int64_t>{1, 1, 2, 2, 4, 4, 8, 8, 16, 16}));
}

}  // namespace
}  // namespace t5scale
