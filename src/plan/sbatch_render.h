// sbatch scripts for the runs of a planned study: one script per run (or one job array per launch shape), meant
// to be read and edited by a person. Each script asks for nodes x (one task per GPU), sends SIGUSR1 to the
// training processes `signal_s` seconds before the time limit (t5scale-train then checkpoints and exits 75), and
// requeues the job itself on exit code 75, so that a preempted or timed-out run resumes from its checkpoint in
// the same job id and log. No path is built in: the trainer's folder, the working directory and the output
// folders come from the command line and the spec.
#pragma once

#include <string>
#include <vector>

#include "plan/study_plan.h"

namespace t5scale {

struct RenderOptions {
  std::string out_dir;    // where the scripts and configs go (slurm/<study>/ by default)
  std::string bin_dir;    // the folder of t5scale-train
  std::string workdir;    // the jobs' working directory (sbatch --chdir): relative paths in the configs start here
  std::string spec_path;  // named in the scripts' header
};

// The text of `<run>.sbatch`; `config_path` is the run's YAML config as the job will read it.
std::string render_run_sbatch(const StudyPlan& plan, const RunPlan& run, const std::string& config_path,
                              const RenderOptions& options);

// Runs that share a launch shape (nodes x gpus_per_node) can share one job array.
struct ArrayGroup {
  std::string name;  // "array-n1x4"
  std::vector<const RunPlan*> runs;
};
std::vector<ArrayGroup> array_groups(const StudyPlan& plan);
// The text of a job array script over `runs_file` (one run name per line; task i runs line i + 1, whose config
// is <config_dir>/<run>.yaml).
std::string render_array_sbatch(const StudyPlan& plan, const ArrayGroup& group, const std::string& runs_file,
                                const std::string& config_dir, const RenderOptions& options);

// What render wrote.
struct RenderedStudy {
  std::vector<std::pair<std::string, std::string>> run_scripts;  // run name -> script path
  std::vector<std::pair<std::string, ArrayGroup>> array_scripts;  // script path -> its group
  std::string runs_csv;
};

// Writes <out_dir>/<run>.yaml (the resolved config, via to_yaml), <out_dir>/<run>.sbatch, <out_dir>/runs.csv,
// and with `array` also <out_dir>/<group>.sbatch and <group>.runs. Refuses (Error listing them) a plan with
// invalid runs.
RenderedStudy write_rendered_study(const StudyPlan& plan, const RenderOptions& options, bool array);

}  // namespace t5scale
