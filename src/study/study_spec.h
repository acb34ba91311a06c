// A study spec: one YAML file in jobs/ that names a base run config, the axes to vary and the Slurm resources,
// and its expansion into runs, each with its own resolved RunConfig and launch shape (nodes x ranks per node).
//
//   study: lr-scaling                         # the study's name: run.study, results/<study>, slurm/<study>
//   base_config: ../configs/t5-base.yaml      # a run config, relative to this file (optional)
//   base: {train: {max_steps: 1000}, precision: bf16}   # run-config keys over it (nested or dotted)
//   axes:                                     # grid: every combination, in this order
//     gpus: [1, 4, 8, 16, 32]                 # launch keys: nodes, gpus_per_node, or gpus (packed onto nodes)
//     lr_scaling.rule: [none, sqrt]           # any run-config key
//   mode: grid                                # or list: runs: [{name?, set: {key: value}, axes?: {...}}]
//   repeats: 1                                # seeds run.seed + i
//   slurm: {partition: gpu, time_limit: "04:00:00", gpus_per_node: 8, gpu: A100-80GB, launcher: srun, ...}
//   slurm.env: {NCCL_DEBUG: WARN, SCRATCH: {expand: "/scratch/$USER/$SLURM_JOB_ID"}}
//   slurm.setup: ["source /shared/t5scale/env.sh"]  # shell lines, verbatim, before the launch
//   cost: {price_per_node_hour_usd: 32.77}    # copied into every run's cost.* keys
//   results_dir: results/lr-scaling           # default results/<study>
//
// An axis value may also be a mapping of several keys that change together (a linked axis), for example
// `scale: [{nodes: 1, gpus_per_node: 4}, {nodes: 2, gpus_per_node: 8}]`; an optional `label` names the value in
// run names. Everything a spec can hold is checked when it is loaded (unknown keys with the nearest known one,
// values of the wrong type, each with file and line); what only a whole run can show (TP not dividing the model,
// a batch that does not split) is found by expansion with the trainer's own validation.
//
// What reaches the job's shell: `slurm.setup` lines are shell, run as written (the one place for commands:
// `source <bundle>/env.sh`, `module load`, a venv's activate). Everything else is data. `slurm.env` values are
// exported literally (single-quoted): `$(...)`, backticks and `$X` in them are text. A value written as
// `{expand: "..."}` has its `$NAME` and `${NAME}` references expanded by the job's shell and nothing else; a
// command substitution or a `${...}` with operators in it is refused (that is setup's work). No env value may hold
// a newline. Values that go into `#SBATCH` lines (partition, account, time_limit, constraint, qos, mem, gres_type,
// extra_sbatch, results_dir, the study's name) are refused when they hold a newline or `#` (sbatch reads the rest
// of the line as a comment), and the one-word options also when they hold whitespace or quotes.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "config/run_config.h"

namespace t5scale {

// One `key: value` of a spec, the value as the text of a YAML scalar.
struct SpecAssignment {
  std::string key;    // "train.global_batch", or a launch key (nodes, gpus_per_node, gpus)
  std::string value;  // "256"
  int line = 0;       // in the spec file, 1-based (0 = not from a file)
};

// The launch keys: not run-config keys, but what the job is launched on.
bool is_launch_key(const std::string& key);  // nodes, gpus_per_node, gpus

struct AxisValue {
  std::string label;  // "" = derived from the assignments
  std::vector<SpecAssignment> assignments;  // one for a plain axis, several for a linked one
};

struct StudyAxis {
  std::string name;  // the key for a plain axis; any name for a linked one
  std::vector<AxisValue> values;
  int line = 0;
};

// One entry of `runs:` (list mode). In grid mode the study has one implicit entry with no name and no settings.
struct StudyEntry {
  std::string name;  // "" = derived
  std::vector<SpecAssignment> set;
  std::vector<StudyAxis> axes;  // this entry's own grid, crossed with the study's axes
  int line = 0;
};

// One variable of `slurm.env`, exported in the job before the launch.
struct SlurmEnvVar {
  std::string name;
  std::string value;
  bool expand = false;  // false: the value is taken literally; true: its $NAME and ${NAME} are expanded
};

struct SlurmSpec {
  // How the job asks for its GPUs: `#SBATCH --gpus-per-node=[type:]N`, or `--gres=gpu:[type:]N` for sites that
  // count GPUs only as generic resources (older Slurm, some site policies).
  enum class GpuRequest { kGpusPerNode, kGres };

  std::string partition;
  std::string account;
  std::string time_limit = "01:00:00";  // sbatch --time
  std::string constraint;
  std::string qos;
  std::string mem;  // sbatch --mem, e.g. "0" (all of the node) or "480G"; "" = the site's default
  int64_t gpus_per_node = 1;  // the default of the launch key gpus_per_node (ranks per node, one per GPU)
  std::string gpu;            // GPU model for the memory check ("A100-80GB", "H100"); "none" = CPU-only jobs
  double gpu_memory_gib = 0.0;  // > 0 overrides the table of GPU memory by model
  std::string interconnect;     // between nodes, for the step-time model ("ib-hdr-8x", ...); "" = the GPU's usual
  GpuRequest gpu_request = GpuRequest::kGpusPerNode;
  std::string gres_type;  // the site's name for the GPU type in Slurm (gres.conf Type, "a100"); "" = any GPU
  int64_t cpus_per_task = 0;    // 0 = not set (the site's default)
  std::string launcher = "srun";  // srun | mpirun
  std::string mpi = "pmix";       // srun --mpi=<mpi>
  int64_t signal_s = 120;         // sbatch --signal=USR1@<signal_s>: seconds of warning before the time limit
  std::vector<std::string> extra_sbatch;  // more #SBATCH options, as written ("--exclusive")
  std::vector<SlurmEnvVar> env;      // exported in the job, in order, after modules and setup
  std::vector<std::string> modules;  // `module load` in the job, in order, first
  std::vector<std::string> setup;    // shell lines run as written, after the modules, before env and the launch

  bool cpu_only() const;
};

struct StudySpec {
  enum class Mode { kGrid, kList };
  std::string source;       // the spec file as given, for messages
  std::string name;         // `study:`
  std::string description;  // optional one paragraph
  std::string base_config;  // a run config: a path inside the spec's folder, resolved against it, or the command
                            // line's --base-config as given; "" = the defaults
  std::vector<SpecAssignment> base;  // inline run-config (and launch) keys over base_config
  std::vector<StudyAxis> axes;
  Mode mode = Mode::kGrid;
  std::vector<StudyEntry> entries;  // list mode: `runs:`; grid mode: one empty entry
  int64_t repeats = 1;
  SlurmSpec slurm;
  std::vector<SpecAssignment> cost;  // cost.<key> for every run
  std::string results_dir;           // run.output_dir of every run; default results/<study>
};

// A shell variable's name: [A-Za-z_][A-Za-z0-9_]*.
bool is_env_name(const std::string& name);
// Why `value` cannot be written into an `#SBATCH` line ("" when it can). sbatch reads a directive up to the end of
// its line and an unquoted `#` as the start of a comment; a one-word option (`token`) also ends at whitespace, and
// quotes or backslashes in it would be read as quoting.
std::string sbatch_value_problem(const std::string& value, bool token);
// Why `value` cannot be exported as a `slurm.env` value ("" when it can): a newline anywhere; in an `expand`
// value, a command substitution (`$(...)`, backticks) or a `${...}` that is more than a variable's name.
std::string env_value_problem(const std::string& value, bool expand);

// Whether a `--set KEY=VALUE` of t5scale-study names one of the spec's own keys (slurm.gpu, slurm.modules,
// slurm.env.NAME, repeats, results_dir, study, description) rather than a run-config or launch key, which it sets
// in every run. cost.* stays a run-config key: every run's cost keys, as the spec's cost: block sets them.
bool is_spec_key(const std::string& key);

// Loads and checks a spec; a t5scale::Error lists every problem as "<file>:<line>: <key>: <reason>". The spec's
// base_config names a file inside the spec's folder; `base_config_override` (t5scale-study --base-config), when
// not "", is used instead, as given. `spec_overrides` ("slurm.gpu=H100", keys for which is_spec_key holds) replace
// or add those keys of the file before it is checked, each value read as YAML ("[a, b]" is a list), so that what
// the command line sets is checked as the file's own keys are; a problem with one names it as --set KEY.
StudySpec load_study_spec(const std::string& path, const std::string& base_config_override = "",
                          const std::vector<std::string>& spec_overrides = {});
// The same from text; `base_dir` is the folder that base_config is relative to.
StudySpec parse_study_spec(const std::string& yaml_text, const std::string& source, const std::string& base_dir,
                           const std::string& base_config_override = "",
                           const std::vector<std::string>& spec_overrides = {});

// One run of an expanded study.
struct StudyRun {
  std::string name;       // unique within the study, characters [A-Za-z0-9._-]
  int64_t nodes = 1;
  int64_t gpus_per_node = 1;  // ranks per node (one per GPU)
  int64_t world() const { return nodes * gpus_per_node; }
  int64_t repeat = 0;  // 0 .. repeats-1; run.seed is the base seed + repeat
  RunConfig config;    // resolved: base config, spec settings, run.name/study/output_dir, cost keys
  std::vector<std::pair<std::string, std::string>> varied;  // the spec's assignments for this run, key -> value
  // Every problem with the run, each "<key>: <reason>": launch keys, validate() and validate_for_world().
  std::vector<std::string> errors;
};

struct ExpandOptions {
  std::string results_dir;             // "" = the spec's (results_dir, or results/<study>)
  std::vector<std::string> overrides;  // "key=value" applied to every run last (run-config or launch keys)
};

// The runs, in grid order (the first axis slowest; repeats innermost). Throws an Error for what makes the study
// itself unusable (a base_config that does not load, names that collide); problems of single runs go to
// StudyRun::errors.
std::vector<StudyRun> expand_study(const StudySpec& spec, const ExpandOptions& options = {});

// The run name label of one assignment: "n4", "tp8", "gb256", "sqrt", "bf16", "ac" / "noac".
std::string run_name_label(const std::string& key, const std::string& value);
// Keeps [A-Za-z0-9._-], replaces anything else with '_'.
std::string filesystem_safe(const std::string& text);

}  // namespace t5scale
