// t5scale-study: from one study spec to Slurm jobs — plan the runs, render their sbatch scripts, submit them,
// and follow them. No LibTorch: it runs on a login node with only the library of configs, data and plans.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/command_line.h"
#include "core/program_folder.h"
#include "core/text_table.h"
#include "core/utc_time.h"
#include "study/sbatch_render.h"
#include "study/study_plan.h"
#include "study/study_spec.h"
#include "study/study_status.h"

namespace {

namespace fs = std::filesystem;
using namespace t5scale;

const char* kUsage = R"(usage: t5scale-study COMMAND SPEC [options]

Expands a study spec (jobs/*.yaml: a base run config, axes to vary, Slurm resources) into runs, checks every
run with the trainer's own validation, and turns them into Slurm jobs. The spec keys: jobs/README.md.

commands
  plan SPEC      one row per run: nodes, world, TP, DP, batch split, LR after scaling, warmup, steps, epochs,
                 predicted memory per GPU and whether it fits, FLOPs per step; every error of every invalid run
  render SPEC    write <out>/<run>.yaml (the resolved config), <out>/<run>.sbatch and <out>/runs.csv, and
                 create each run's results folder (its logs go there); a config or script edited since render
                 wrote it is kept as it is (and named) unless --rerender
  submit SPEC    render as above, then sbatch every run's script (or array) as it is on disk, edited or not,
                 recording job ids in <out>/jobs.csv; runs that completed or are still queued are left alone
                 unless --force
  status SPEC    one row per run: its Slurm job (squeue, sacct or scontrol) and its run file (status, last step)

options
  --out DIR          scripts and configs (default slurm/<study>)
  --results-dir DIR  run files and logs, i.e. run.output_dir of every run (default: the spec's results_dir,
                     or results/<study>)
  --set KEY=VALUE    override a run-config or launch key in every run, or one of the spec's own keys
                     (slurm.gpu=H100, slurm.modules="[gcc, openmpi]", repeats=3, results_dir=...; its value
                     read as YAML), repeatable
  --base-config FILE the run config every run starts from, instead of the spec's base_config (which names a
                     file inside the spec's folder, since a spec travels between users)
  --bin DIR          the folder of t5scale-train (default: the folder of this program)
  --workdir DIR      the jobs' working directory, where relative paths of the configs start (default: here)
  --array            render (and submit) one job array per launch shape instead of one job per run
  --rerender         render, submit: overwrite configs and scripts that were edited since render wrote them
  --dry-run          submit: print what would be rendered and the sbatch commands; writes nothing
  --allow-over-memory  plan, render, submit: a run predicted not to fit its GPU's memory (fits NO) is planned
                     and rendered (its script says so) instead of invalid
  --force            submit: submit every run, completed or queued ones too
  --help             this text

Exit codes: 0 done, 1 a command or file failed, 2 the spec or a run is invalid (nothing rendered or submitted).
)";

struct Arguments {
  std::string command;
  std::string spec;
  std::string out_dir;
  std::string results_dir;
  std::vector<std::string> overrides;
  std::string bin_dir;
  std::string workdir;
  std::string base_config;
  bool array = false;
  bool dry_run = false;
  bool force = false;
  bool rerender = false;
  bool allow_over_memory = false;
};

Arguments parse(int argc, char** argv) {
  Arguments a;
  std::vector<std::string> positional;
  CommandLine line(argc, argv, kUsage);
  while (line.next()) {
    const std::string& flag = line.word();
    if (flag == "--out") {
      a.out_dir = line.value();
    } else if (flag == "--results-dir") {
      a.results_dir = line.value();
    } else if (flag == "--set") {
      a.overrides.push_back(line.value());
    } else if (flag == "--bin") {
      a.bin_dir = line.value();
    } else if (flag == "--workdir") {
      a.workdir = line.value();
    } else if (flag == "--base-config") {
      a.base_config = line.value();
    } else if (flag == "--array") {
      a.array = true;
    } else if (flag == "--dry-run") {
      a.dry_run = true;
    } else if (flag == "--force") {
      a.force = true;
    } else if (flag == "--rerender") {
      a.rerender = true;
    } else if (flag == "--allow-over-memory") {
      a.allow_over_memory = true;
    } else if (flag.rfind("-", 0) == 0) {
      throw UsageError(msg("unknown option '", flag, "' (see --help)"));
    } else {
      positional.push_back(flag);
    }
  }
  if (positional.size() != 2) throw UsageError("expected COMMAND SPEC (see --help)");
  a.command = positional[0];
  a.spec = positional[1];
  if (a.command != "plan" && a.command != "render" && a.command != "submit" && a.command != "status") {
    throw UsageError(msg("unknown command '", a.command, "': plan, render, submit or status"));
  }
  return a;
}

struct Context {
  Arguments args;
  StudyPlan plan;
  RenderOptions render;
  fs::path out_dir;
  // A run's file, as the jobs see it (run.output_dir relative to the working directory).
  fs::path run_file(const RunPlan& p) const {
    const fs::path dir(p.run.config.run.output_dir);
    return (dir.is_absolute() ? dir : fs::path(render.workdir) / dir) / (p.run.name + ".h5");
  }
};

Context prepare(const Arguments& args) {
  Context c;
  c.args = args;
  // --set of the spec's own keys (slurm.gpu=H100) goes into the spec; the others into every run.
  std::vector<std::string> spec_overrides, run_overrides;
  for (const std::string& o : args.overrides) {
    (is_spec_key(o.substr(0, o.find('='))) && o.find('=') != std::string::npos ? spec_overrides : run_overrides)
        .push_back(o);
  }
  const StudySpec spec = load_study_spec(args.spec, args.base_config, spec_overrides);
  PlanOptions options;
  options.expand.results_dir = args.results_dir;
  options.expand.overrides = run_overrides;
  options.allow_over_memory = args.allow_over_memory;
  c.plan = plan_study(spec, options);
  c.out_dir = fs::absolute(args.out_dir.empty() ? fs::path("slurm") / spec.name : fs::path(args.out_dir));
  c.render.out_dir = c.out_dir.string();
  c.render.bin_dir = fs::absolute(args.bin_dir.empty() ? program_folder() : fs::path(args.bin_dir)).lexically_normal().string();
  c.render.workdir = fs::absolute(args.workdir.empty() ? fs::current_path() : fs::path(args.workdir))
                         .lexically_normal()
                         .string();
  c.render.spec_path = args.spec;
  return c;
}

int command_plan(const Context& c) {
  std::cout << format_plan(c.plan);
  return c.plan.invalid_count() > 0 ? 2 : 0;
}

// Renders (in a dry run: decides what it would write); returns false (after printing the plan) when runs are
// invalid. Says which files it kept or replaced because a person had edited them.
bool render(const Context& c, RenderedStudy& rendered) {
  if (c.plan.invalid_count() > 0) {
    std::cout << format_plan(c.plan);
    std::cerr << "t5scale-study: " << c.plan.invalid_count() << " invalid run(s): nothing rendered";
    const bool over_memory = std::any_of(c.plan.runs.begin(), c.plan.runs.end(),
                                         [](const RunPlan& p) { return p.fits == "NO"; });
    if (over_memory) std::cerr << " (--allow-over-memory renders the runs predicted not to fit their GPU's memory)";
    std::cerr << "\n";
    return false;
  }
  WritePolicy policy;
  policy.replace_edited = c.args.rerender;
  policy.dry_run = c.args.command == "submit" && c.args.dry_run;
  rendered = write_rendered_study(c.plan, c.render, c.args.array, policy);
  for (const auto& file : rendered.edited_kept) {
    std::cout << "using " << file << " as edited (it differs from what render wrote; --rerender replaces it)\n";
  }
  for (const auto& file : rendered.edited_replaced) {
    std::cout << "replaced the edited " << file << " (--rerender)\n";
  }
  const fs::path trainer = fs::path(c.render.bin_dir) / "t5scale-train";
  if (find_on_path(trainer.string()).empty()) {
    std::cerr << "t5scale-study: note: " << trainer.string()
              << " does not exist (yet); the scripts run it from there (--bin DIR)\n";
  }
  return true;
}

int command_render(const Context& c) {
  RenderedStudy rendered;
  if (!render(c, rendered)) return 2;
  std::cout << "rendered " << rendered.run_scripts.size() << " run(s) of study " << c.plan.spec.name << " into "
            << c.out_dir.string() << " (runs.csv, <run>.yaml, <run>.sbatch";
  if (!rendered.array_scripts.empty()) std::cout << ", " << rendered.array_scripts.size() << " job array(s)";
  std::cout << ")\n";
  return 0;
}

int command_submit(const Context& c) {
  RenderedStudy rendered;
  if (!render(c, rendered)) return 2;
  const std::string jobs_csv = (c.out_dir / "jobs.csv").string();
  if (!c.args.dry_run) {
    require_slurm_command("sbatch", "t5scale-study submit");
    require_slurm_command("squeue", "t5scale-study submit");
    const fs::path trainer = fs::path(c.render.bin_dir) / "t5scale-train";
    T5S_CHECK(!find_on_path(trainer.string()).empty(), trainer.string(),
              " is not there: build it (cmake --build <build> --target t5scale-train) or pass --bin DIR");
  }

  // Which runs to leave alone (study_status.h): completed, or with a job Slurm still holds (a dry run asks no Slurm).
  std::map<std::string, std::string> skip;  // run -> reason
  if (!c.args.force) {
    const std::vector<JobRecord> jobs = read_job_records(jobs_csv);
    std::map<std::string, SlurmJobState> slurm;
    if (!jobs.empty() && !c.args.dry_run) {
      std::map<std::string, std::string> latest_job;  // run -> its last job: the one Slurm is asked about
      for (const JobRecord& r : jobs) latest_job[r.run] = r.job_id;
      std::vector<std::string> ids, notes;
      for (const auto& [run, id] : latest_job) ids.push_back(id);
      slurm = query_slurm_jobs(ids, notes);
    }
    std::vector<std::pair<std::string, std::string>> run_files;
    for (const auto& p : c.plan.runs) run_files.push_back({p.run.name, c.run_file(p).string()});
    skip = runs_to_leave_alone(run_files, jobs, slurm);
  }

  std::vector<JobRecord> records;
  auto submit_script = [&](const std::string& script) -> std::string {
    if (c.args.dry_run) {
      std::cout << "sbatch --parsable " << script << "\n";
      return "";
    }
    const CommandResult result = run_command({"sbatch", "--parsable", script});
    T5S_CHECK(result.exit_code == 0, "sbatch ", script, " failed (exit ", result.exit_code, "): ", result.errors,
              result.output);
    return parse_sbatch_job_id(result.output);
  };
  size_t submitted = 0;
  if (c.args.array) {
    for (const auto& [script, group] : rendered.array_scripts) {
      std::vector<std::string> skipped;
      for (const RunPlan* p : group.runs) {
        if (skip.count(p->run.name)) skipped.push_back(p->run.name);
      }
      if (skipped.size() == group.runs.size()) {
        std::cout << "skipped " << script << ": all its runs are completed or queued\n";
        continue;
      }
      // An array covers all of its runs; a run that completed is resumed by the trainer and ends at once.
      const std::string id = submit_script(script);
      for (size_t i = 0; i < group.runs.size(); ++i) {
        records.push_back({group.runs[i]->run.name, msg(id, "_", i), utc_iso_time(), script});
      }
      ++submitted;
    }
  } else {
    for (const auto& [run, script] : rendered.run_scripts) {
      if (auto s = skip.find(run); s != skip.end()) {
        std::cout << "skipped " << run << ": " << s->second << " (--force submits it again)\n";
        continue;
      }
      const std::string id = submit_script(script);
      if (!c.args.dry_run) std::cout << "submitted " << run << " as job " << id << "\n";
      records.push_back({run, id, utc_iso_time(), script});
      ++submitted;
    }
  }
  if (c.args.dry_run) {
    std::cout << "dry run: nothing written; " << submitted << " job(s) would be submitted; scripts in "
              << c.out_dir.string();
    if (!rendered.missing.empty()) std::cout << " (" << rendered.missing.size() << " file(s) not rendered yet)";
    std::cout << "\n";
    return 0;
  }
  append_job_records(jobs_csv, records);
  std::cout << "submitted " << submitted << " job(s); job ids in " << jobs_csv << "\n";
  return 0;
}

int command_status(const Context& c) {
  require_slurm_command("squeue", "t5scale-study status");
  require_slurm_command("sacct", "t5scale-study status");
  const std::string jobs_csv = (c.out_dir / "jobs.csv").string();
  std::map<std::string, JobRecord> latest;
  for (const auto& r : read_job_records(jobs_csv)) latest[r.run] = r;
  std::vector<std::string> ids;
  for (const auto& [run, r] : latest) ids.push_back(r.job_id);
  std::vector<std::string> notes;
  const auto slurm = query_slurm_jobs(ids, notes);

  const std::vector<std::string> header = {"run", "job", "slurm", "elapsed", "run file", "attempt", "step", "state"};
  std::vector<std::vector<std::string>> rows;
  std::map<std::string, int> counts;
  for (const auto& p : c.plan.runs) {
    const JobRecord* job = latest.count(p.run.name) ? &latest.at(p.run.name) : nullptr;
    const SlurmJobState* s = job && slurm.count(job->job_id) ? &slurm.at(job->job_id) : nullptr;
    const RunFileState file = read_run_file_state(c.run_file(p).string());
    const std::string state = run_state(job, s, file);
    counts[state.substr(0, state.find(" ("))] += 1;
    std::string file_text = !file.exists ? "-" : !file.error.empty() ? "unreadable" : run_status_name(*file.status);
    std::string step = file.exists && file.error.empty()
                           ? msg(file.last_step >= 0 ? msg(file.last_step) : std::string("-"), "/", file.max_steps)
                           : "-";
    rows.push_back({p.run.name, job ? job->job_id : "-", s ? s->state : (job ? "?" : "-"),
                    s && !s->elapsed.empty() ? s->elapsed : "-", file_text,
                    file.exists && file.error.empty() ? msg(file.attempt) : "-", step, state});
    if (file.exists && !file.error.empty()) notes.push_back(msg(p.run.name, ": ", file.error));
  }
  std::cout << "study " << c.plan.spec.name << ": " << c.plan.runs.size() << " run(s); jobs from " << jobs_csv
            << "\n\n";
  std::set<size_t> all_left;
  for (size_t i = 0; i < header.size(); ++i) all_left.insert(i);
  std::cout << text_table(header, rows, all_left);
  std::cout << "\n";
  std::vector<std::string> summary;
  for (const auto& [state, n] : counts) summary.push_back(msg(n, " ", state));
  std::cout << "summary: " << join(summary, ", ") << "\n";
  for (const auto& note : notes) std::cout << "note: " << note << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Exit codes as the usage text gives them: 2 for a command line or a spec that cannot be used (nothing done), 1
  // for a command that failed on its way; the message as every program prints it (command_line.h).
  auto fail = [](const std::exception& e, int code) {
    std::cerr << "t5scale-study: error: " << user_message(e) << "\n";
    print_debug_text("t5scale-study", e);
    return code;
  };
  Arguments args;
  try {
    args = parse(argc, argv);
  } catch (const UsageError& e) {
    fail(e, 2);
    std::cerr << kUsage;
    return 2;
  }
  Context context;
  try {
    context = prepare(args);
  } catch (const Error& e) {
    return fail(e, 2);
  }
  try {
    if (args.command == "plan") return command_plan(context);
    if (args.command == "render") return command_render(context);
    if (args.command == "submit") return command_submit(context);
    return command_status(context);
  } catch (const std::exception& e) {
    return fail(e, 1);
  }
}
