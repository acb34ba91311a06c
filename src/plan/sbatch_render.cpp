#include "plan/sbatch_render.h"

#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/check.h"

namespace t5scale {

namespace {

namespace fs = std::filesystem;

// "text" for bash, with $ left alone (environment values may refer to Slurm's variables).
std::string double_quoted(const std::string& text, bool allow_expansion) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\' || c == '`' || (c == '$' && !allow_expansion)) out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string quoted_path(const std::string& path) { return double_quoted(path, false); }

std::string number(double value) {
  if (!std::isfinite(value)) return "?";
  char text[32];
  std::snprintf(text, sizeof(text), "%.3g", value);
  return text;
}

// The run's figures as comment lines, so that a reader of the script sees what it will do.
std::string summary_comment(const StudyPlan& plan, const RunPlan& p) {
  const auto& c = p.run.config;
  std::string out;
  out += msg("# ", p.run.nodes, " node(s) x ", p.run.gpus_per_node, " task(s) = world ", p.run.world(), ": tp ",
             c.parallel.tp, " x dp ", p.batch.dp, "; micro batch ", p.batch.micro_batch, " x accumulation ",
             p.batch.grad_accumulation, " -> global batch ", p.batch.global_batch, "\n");
  std::string lr = p.lr_known ? msg("lr ", number(p.lr.base_lr)) : "lr ?";
  if (p.lr_known && p.lr.rule != LrScalingSettings::Rule::kNone) lr += " -> " + number(p.lr.effective_lr);
  lr += " (lr_scaling " + enum_name(c.lr_scaling.rule) + ")";
  const std::string steps = p.steps_known ? msg(p.total_steps, " steps") : "steps ?";
  const std::string epochs = std::isfinite(p.epochs) ? msg(" (", number(p.epochs), " epochs)") : "";
  out += msg("# ", lr, ", ", steps, epochs, "; ", c.model.name, ", ", enum_name(c.precision), "\n");
  if (p.memory_known) {
    out += msg("# predicted memory per ", plan.spec.slurm.cpu_only() ? "rank " : "GPU ",
               format_memory(p.memory.total_bytes()),
               plan.device_memory_gib > 0 ? msg(" of ", plan.device_memory_gib, " GiB (fits: ", p.fits, ")") : "",
               "; ", format_flops(p.flops_per_step), " per step\n");
  }
  return out;
}

// The #SBATCH lines every script of the study shares, after the job name and shape.
std::string common_sbatch(const SlurmSpec& s, const RenderOptions& options) {
  std::string out;
  if (s.cpus_per_task > 0) out += msg("#SBATCH --cpus-per-task=", s.cpus_per_task, "\n");
  if (!s.time_limit.empty()) out += "#SBATCH --time=" + s.time_limit + "\n";
  if (!s.partition.empty()) out += "#SBATCH --partition=" + s.partition + "\n";
  if (!s.account.empty()) out += "#SBATCH --account=" + s.account + "\n";
  if (!s.qos.empty()) out += "#SBATCH --qos=" + s.qos + "\n";
  if (!s.constraint.empty()) out += "#SBATCH --constraint=" + s.constraint + "\n";
  if (!s.mem.empty()) out += "#SBATCH --mem=" + s.mem + "\n";
  if (s.signal_s > 0) {
    // srun: the signal goes to the job steps, i.e. to every training process. mpirun runs inside the batch
    // step, so there the batch shell gets it (B:) and passes it on to mpirun, which forwards SIGUSR1.
    out += msg("#SBATCH --signal=", s.launcher == "mpirun" ? "B:" : "", "USR1@", s.signal_s, "\n");
  }
  out += "#SBATCH --requeue\n";
  out += "#SBATCH --open-mode=append\n";
  out += "#SBATCH --chdir=" + options.workdir + "\n";
  for (const auto& extra : s.extra_sbatch) out += "#SBATCH " + extra + "\n";
  return out;
}

// Modules, threads, the spec's environment.
std::string environment(const SlurmSpec& s) {
  std::string out;
  for (const auto& module : s.modules) out += "module load " + module + "\n";
  if (!s.modules.empty()) out += "\n";
  bool omp_set = false;
  for (const auto& [name, value] : s.env) omp_set = omp_set || name == "OMP_NUM_THREADS";
  if (!omp_set) out += "export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}\n";
  for (const auto& [name, value] : s.env) out += "export " + name + "=" + double_quoted(value, true) + "\n";
  return out;
}

// The launch and the exit-code handling; `run` is the shell word for the run's name.
std::string launch(const SlurmSpec& s, const std::string& run) {
  std::string out;
  const std::string train = "\"$T5SCALE_BIN/t5scale-train\" --config \"$RUN_CONFIG\"";
  if (s.launcher == "mpirun") {
    out += "# One rank per task of the allocation (mpirun reads it from Slurm), consecutive ranks on a node.\n";
    out += "# SIGUSR1 (--signal=B:...) and SIGTERM reach this shell, which passes them to mpirun; mpirun forwards\n";
    out += "# them to the ranks, which checkpoint and exit 75.\n";
    out += "trap 'kill -USR1 \"$launcher\" 2>/dev/null' USR1\n";
    out += "trap 'kill -TERM \"$launcher\" 2>/dev/null' TERM\n";
    out += "mpirun -np \"$SLURM_NTASKS\" --bind-to none " + train + " &\n";
    out += "launcher=$!\n";
  } else {
    out += std::string("# One task per ") + (s.cpu_only() ? "rank" : "GPU") +
           ". --signal's SIGUSR1 and Slurm's SIGTERM reach every task, which\n";
    out += "# checkpoints and exits 75; this shell stays to requeue the job.\n";
    out += "trap 'echo \"[t5scale] SIGTERM: waiting for the tasks to checkpoint\"' TERM\n";
    out += "srun --mpi=" + s.mpi + " --kill-on-bad-exit=1 " + train + " &\n";
    out += "launcher=$!\n";
  }
  out += "wait \"$launcher\"\n";
  out += "while kill -0 \"$launcher\" 2>/dev/null; do  # wait returned for a trapped signal\n";
  out += "  wait \"$launcher\"\n";
  out += "done\n";
  out += "wait \"$launcher\"  # the launcher's exit status (bash keeps it)\n";
  out += "rc=$?\n";
  out += "if [ \"$rc\" -eq 75 ]; then\n";
  out += "  echo \"[t5scale] run " + run + ": preempted, checkpoint written; requeueing job $SLURM_JOB_ID\"\n";
  out += "  scontrol requeue \"$SLURM_JOB_ID\"\n";
  out += "  exit 0\n";
  out += "fi\n";
  out += "echo \"[t5scale] run " + run + ": t5scale-train exited with $rc\"\n";
  out += "exit \"$rc\"\n";
  return out;
}

std::string shape_sbatch(int64_t nodes, int64_t gpus_per_node, const SlurmSpec& s) {
  std::string out = msg("#SBATCH --nodes=", nodes, "\n#SBATCH --ntasks-per-node=", gpus_per_node, "\n");
  if (!s.cpu_only()) out += msg("#SBATCH --gpus-per-node=", gpus_per_node, "\n");
  return out;
}

void write_file(const fs::path& path, const std::string& text, bool executable = false) {
  const fs::path temporary = path.string() + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    T5S_CHECK(out.good(), "cannot write ", temporary.string());
    out << text;
    out.close();
    T5S_CHECK(out.good(), "cannot write ", temporary.string());
  }
  if (executable) ::chmod(temporary.c_str(), 0755);
  fs::rename(temporary, path);
}

std::string results_path(const RunPlan& p, const std::string& file) {
  return (fs::path(p.run.config.run.output_dir) / file).string();
}

}  // namespace

std::string render_run_sbatch(const StudyPlan& plan, const RunPlan& p, const std::string& config_path,
                              const RenderOptions& options) {
  const SlurmSpec& s = plan.spec.slurm;
  const std::string& run = p.run.name;
  const std::string log = results_path(p, run + ".%j.log");
  std::string out = "#!/bin/bash\n";
  out += msg("# t5scale study ", plan.spec.name, ", run ", run, " (t5scale-study render ", options.spec_path,
             "; edit freely)\n");
  out += summary_comment(plan, p);
  out += "#SBATCH --job-name=" + plan.spec.name + "." + run + "\n";
  out += shape_sbatch(p.run.nodes, p.run.gpus_per_node, s);
  out += common_sbatch(s, options);
  out += "#SBATCH --output=" + log + "\n";
  out += "#SBATCH --error=" + log + "\n";
  out += "\n";
  out += "T5SCALE_BIN=" + quoted_path(options.bin_dir) + "\n";
  out += "RUN_CONFIG=" + quoted_path(config_path) + "  # run file: " + results_path(p, run + ".h5") + "\n";
  out += "\n";
  out += environment(s);
  out += "\n";
  out += "echo \"[t5scale] run " + run +
         ": job $SLURM_JOB_ID, restart ${SLURM_RESTART_COUNT:-0}, nodes $SLURM_JOB_NODELIST, $(date -u "
         "+%Y-%m-%dT%H:%M:%SZ)\"\n";
  out += launch(s, run);
  return out;
}

std::vector<ArrayGroup> array_groups(const StudyPlan& plan) {
  std::vector<ArrayGroup> groups;
  std::map<std::pair<int64_t, int64_t>, size_t> index;
  for (const auto& p : plan.runs) {
    const auto shape = std::make_pair(p.run.nodes, p.run.gpus_per_node);
    auto it = index.find(shape);
    if (it == index.end()) {
      it = index.emplace(shape, groups.size()).first;
      groups.push_back({msg("array-n", p.run.nodes, "x", p.run.gpus_per_node), {}});
    }
    groups[it->second].runs.push_back(&p);
  }
  return groups;
}

std::string render_array_sbatch(const StudyPlan& plan, const ArrayGroup& group, const std::string& runs_file,
                                const std::string& config_dir, const RenderOptions& options) {
  T5S_CHECK(!group.runs.empty(), "an array group without runs");
  const SlurmSpec& s = plan.spec.slurm;
  const RunPlan& first = *group.runs.front();
  const std::string log = results_path(first, group.name + ".%A_%a.log");
  std::string out = "#!/bin/bash\n";
  out += msg("# t5scale study ", plan.spec.name, ": job array over the ", group.runs.size(), " run(s) of ",
             first.run.nodes, " node(s) x ", first.run.gpus_per_node, " task(s) listed in ", runs_file,
             " (t5scale-study render --array ", options.spec_path, "; edit freely)\n");
  for (size_t i = 0; i < group.runs.size(); ++i) {
    out += msg("#   task ", i, ": ", group.runs[i]->run.name, "\n");
  }
  out += "#SBATCH --job-name=" + plan.spec.name + "." + group.name + "\n";
  out += msg("#SBATCH --array=0-", group.runs.size() - 1, "\n");
  out += shape_sbatch(first.run.nodes, first.run.gpus_per_node, s);
  out += common_sbatch(s, options);
  out += "#SBATCH --output=" + log + "\n";
  out += "#SBATCH --error=" + log + "\n";
  out += "\n";
  out += "T5SCALE_BIN=" + quoted_path(options.bin_dir) + "\n";
  out += "RUNS_FILE=" + quoted_path(runs_file) + "\n";
  out += "run=$(sed -n \"$((SLURM_ARRAY_TASK_ID + 1))p\" \"$RUNS_FILE\")\n";
  out += "if [ -z \"$run\" ]; then echo \"[t5scale] no run for array task $SLURM_ARRAY_TASK_ID in $RUNS_FILE\"; "
         "exit 2; fi\n";
  out += "RUN_CONFIG=" + quoted_path(config_dir) + "/\"$run.yaml\"\n";
  out += "\n";
  out += environment(s);
  out += "\n";
  out += "echo \"[t5scale] run $run: array task $SLURM_ARRAY_TASK_ID, job $SLURM_JOB_ID, restart "
         "${SLURM_RESTART_COUNT:-0}, nodes $SLURM_JOB_NODELIST, $(date -u +%Y-%m-%dT%H:%M:%SZ)\"\n";
  out += launch(s, "$run");
  return out;
}

RenderedStudy write_rendered_study(const StudyPlan& plan, const RenderOptions& options, bool array) {
  std::vector<std::string> invalid;
  for (const auto& p : plan.runs) {
    if (!p.valid()) invalid.push_back(p.run.name);
  }
  if (!invalid.empty()) {
    std::string names;
    for (const auto& n : invalid) names += (names.empty() ? "" : ", ") + n;
    throw Error(msg(plan.spec.source, ": ", invalid.size(), " invalid run(s), nothing rendered: ", names,
                    " (see t5scale-study plan)"));
  }
  const fs::path out_dir(options.out_dir);
  fs::create_directories(out_dir);
  RenderedStudy rendered;
  for (const auto& p : plan.runs) {
    const fs::path config = out_dir / (p.run.name + ".yaml");
    write_file(config, msg("# t5scale study ", plan.spec.name, ", run ", p.run.name,
                           ": the resolved run config (t5scale-study render ", options.spec_path, ")\n",
                           to_yaml(p.run.config)));
    const fs::path script = out_dir / (p.run.name + ".sbatch");
    write_file(script, render_run_sbatch(plan, p, config.string(), options), true);
    rendered.run_scripts.emplace_back(p.run.name, script.string());
  }
  if (array) {
    for (const auto& group : array_groups(plan)) {
      const fs::path runs_file = out_dir / (group.name + ".runs");
      std::string names;
      for (const RunPlan* p : group.runs) names += p->run.name + "\n";
      write_file(runs_file, names);
      const fs::path script = out_dir / (group.name + ".sbatch");
      write_file(script, render_array_sbatch(plan, group, runs_file.string(), out_dir.string(), options), true);
      rendered.array_scripts.emplace_back(script.string(), group);
    }
  }
  rendered.runs_csv = (out_dir / "runs.csv").string();
  write_file(rendered.runs_csv, plan_csv(plan));
  return rendered;
}

}  // namespace t5scale
