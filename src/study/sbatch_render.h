// sbatch scripts for the runs of a planned study: one script per run (or one job array per launch shape), meant
// to be read and edited by a person. Each script asks for nodes x (one task per GPU), sends SIGUSR1 to the
// training processes `signal_s` seconds before the time limit (t5scale-train then checkpoints and exits 75), and
// requeues the job itself on exit code 75, so that a preempted or timed-out run resumes from its checkpoint in
// the same job id and log. No path is built in: the trainer's folder, the working directory and the output
// folders come from the command line and the spec.
//
// Only the spec's `slurm.setup` lines run as shell; every other value is quoted so that the job sees it as
// written, and a value that an #SBATCH line cannot hold is refused (an Error naming its key) rather than
// rendered. A script that a person edited after render wrote it is kept as it is unless asked otherwise.
#pragma once

#include <string>
#include <vector>

#include "study/study_plan.h"

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

// What write_rendered_study does with what is already there.
struct WritePolicy {
  // Overwrite files that a person edited since render wrote them (t5scale-study --rerender). Without it they are
  // kept as they are, and reported.
  bool replace_edited = false;
  bool dry_run = false;  // decide everything, write nothing (no file, no folder)
};

// What render wrote (or, in a dry run, would write).
struct RenderedStudy {
  std::vector<std::pair<std::string, std::string>> run_scripts;  // run name -> script path
  std::vector<std::pair<std::string, ArrayGroup>> array_scripts;  // script path -> its group
  std::string runs_csv;
  std::vector<std::string> edited_kept;      // edited files left as they are: the jobs use them as edited
  std::vector<std::string> edited_replaced;  // edited files overwritten (WritePolicy::replace_edited)
  std::vector<std::string> missing;          // files that were not there before (in a dry run: still are not)
  std::vector<std::string> log_dirs;         // the runs' output folders, where the #SBATCH --output logs go
};

// The file in `out_dir` that records what render last wrote there (one FNV-1a 64 checksum per file), so that a
// file that no longer matches it is known to be edited, and one that still matches can be brought up to date.
inline constexpr const char* kRenderedChecksumsFile = "rendered.sums";

// Writes <out_dir>/<run>.yaml (the resolved config, via to_yaml), <out_dir>/<run>.sbatch, <out_dir>/runs.csv,
// and with `array` also <out_dir>/<group>.sbatch and <group>.runs; creates every run's output folder (relative
// to options.workdir), since Slurm opens the job's log there before the script runs and a job whose log folder
// is missing fails without a word. A config, script or runs list that differs from what render wrote last
// (rendered.sums) was edited: it is kept unless `policy.replace_edited`. One that differs but is still as render
// wrote it (the spec or the options changed) is rewritten. Refuses (Error listing them) a plan with invalid runs,
// and (Error naming the key) values that an #SBATCH line or the job's environment cannot hold, before writing.
RenderedStudy write_rendered_study(const StudyPlan& plan, const RenderOptions& options, bool array,
                                   const WritePolicy& policy = {});

}  // namespace t5scale
