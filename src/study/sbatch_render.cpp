#include "study/sbatch_render.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/check.h"
#include "core/units.h"
#include "core/fnv1a.h"
#include "core/text_file.h"

namespace t5scale {

namespace {

namespace fs = std::filesystem;

// "text" for bash with nothing expanded: for paths from the command line.
std::string quoted_path(const std::string& path) {
  std::string out = "\"";
  for (char c : path) {
    if (c == '"' || c == '\\' || c == '`' || c == '$') out += '\\';
    out += c;
  }
  return out + "\"";
}

// 'text' for bash: nothing in it is special, a ' ends the quote, is written escaped and opens it again.
std::string single_quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// A word as bash reads it: as it is when nothing in it is special to the shell (module names), quoted otherwise.
std::string shell_word(const std::string& text) {
  const bool plain = !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::string("_./:+@%=,-").find(c) != std::string::npos;
  });
  return plain ? text : single_quoted(text);
}

// Whether text[at...] continues a `$` into a variable reference: a name, or {NAME}.
bool starts_variable_reference(const std::string& text, size_t at) {
  if (at >= text.size()) return false;
  const char c = text[at];
  if (c == '_' || std::isalpha(static_cast<unsigned char>(c))) return true;
  if (c != '{') return false;
  const size_t close = text.find('}', at + 1);
  return close != std::string::npos && is_env_name(text.substr(at + 1, close - at - 1));
}

// "text" for bash with its $NAME and ${NAME} references expanded and nothing else: every other $, and every `,
// \ and ", escaped. (env_value_problem refuses command substitutions and ${...} with operators before this.)
std::string expanding_quoted(const std::string& text) {
  std::string out = "\"";
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const bool reference = c == '$' && starts_variable_reference(text, i + 1);
    if (!reference && (c == '$' || c == '`' || c == '\\' || c == '"')) out += '\\';
    out += c;
  }
  return out + "\"";
}

// Text for a `#` comment line of the script: a newline in it would start a line of shell.
std::string comment_text(const std::string& text) {
  std::string out = text;
  for (char& c : out) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return out;
}

// How a person's edits are kept, said once at the top of every script.
const char* const kEditNote =
    "# Edit freely: t5scale-study render and submit keep an edited script as it is (--rerender replaces it).\n";

// One #SBATCH line. `key` says where the value comes from: a value sbatch would not read as written (a newline,
// a `#`, a space in a one-word option) is refused with it rather than rendered.
std::string directive(const std::string& option, const std::string& value, const std::string& key, bool token = true) {
  const std::string problem = sbatch_value_problem(value, token);
  if (!problem.empty()) throw Error(msg(key, ": ", problem));
  return "#SBATCH " + option + "=" + value + "\n";
}

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
  const BatchPlan batch = p.resolved.batch.value_or(BatchPlan{});  // rendered runs are valid: their batch is known
  out += msg("# ", p.run.nodes, " node(s) x ", p.run.gpus_per_node, " task(s) = world ", p.run.world(), ": tp ",
             c.parallel.tp, " x dp ", batch.dp, "; micro batch ", batch.micro_batch, " x accumulation ",
             batch.grad_accumulation, " -> global batch ", batch.global_batch, "\n");
  std::string lr = p.resolved.lr.has_value() ? msg("lr ", number(p.resolved.lr->base_lr)) : "lr ?";
  if (p.resolved.lr.has_value() && p.resolved.lr->rule != LrScalingSettings::Rule::kNone) {
    lr += " -> " + number(p.resolved.lr->effective_lr);
  }
  lr += " (lr_scaling " + enum_name(c.lr_scaling.rule) + ")";
  const std::string steps = p.resolved.steps_known ? msg(p.resolved.total_steps, " steps") : "steps ?";
  const std::string epochs = std::isfinite(p.resolved.epochs) ? msg(" (", number(p.resolved.epochs), " epochs)") : "";
  out += msg("# ", lr, ", ", steps, epochs, "; ", comment_text(c.model.name), ", ", enum_name(c.precision), "\n");
  if (p.resolved.memory_inputs.has_value()) {
    out += msg("# predicted memory per ", plan.spec.slurm.cpu_only() ? "rank " : "GPU ",
               memory_text(p.resolved.checkpointing.memory.total_bytes()),
               plan.device_memory_gib > 0 ? msg(" of ", plan.device_memory_gib, " GiB (fits: ", p.fits, ")") : "",
               "; ", format_flops(p.resolved.flops_per_step), " per step\n");
  }
  if (p.over_memory_allowed) {
    out += "# RENDERED WITH --allow-over-memory: the plan predicts this run does not fit its GPU's memory (it may fail "
           "at its first step)\n";
  }
  return out;
}

// The #SBATCH lines every script of the study shares, after the job name and shape.
std::string common_sbatch(const SlurmSpec& s, const RenderOptions& options) {
  std::string out;
  if (s.cpus_per_task > 0) out += msg("#SBATCH --cpus-per-task=", s.cpus_per_task, "\n");
  if (!s.time_limit.empty()) out += directive("--time", s.time_limit, "slurm.time_limit");
  if (!s.partition.empty()) out += directive("--partition", s.partition, "slurm.partition");
  if (!s.account.empty()) out += directive("--account", s.account, "slurm.account");
  if (!s.qos.empty()) out += directive("--qos", s.qos, "slurm.qos");
  if (!s.constraint.empty()) out += directive("--constraint", s.constraint, "slurm.constraint");
  if (!s.mem.empty()) out += directive("--mem", s.mem, "slurm.mem");
  if (s.signal_s > 0) {
    // srun: the signal goes to the job steps, i.e. to every training process. mpirun runs inside the batch
    // step, so there the batch shell gets it (B:) and passes it on to mpirun, which forwards SIGUSR1.
    out += msg("#SBATCH --signal=", s.launcher == "mpirun" ? "B:" : "", "USR1@", s.signal_s, "\n");
  }
  out += "#SBATCH --requeue\n";
  out += "#SBATCH --open-mode=append\n";
  if (!options.workdir.empty()) {
    out += directive("--chdir", options.workdir, "the jobs' working directory (--workdir, or the current folder)");
  }
  for (const auto& extra : s.extra_sbatch) {
    const std::string problem = sbatch_value_problem(extra, false);
    if (!problem.empty()) throw Error(msg("slurm.extra_sbatch: ", problem));
    out += "#SBATCH " + extra + "\n";
  }
  return out;
}

// The logs of a job: one file for stdout and stderr, in the run's output folder.
std::string log_sbatch(const std::string& log) {
  const std::string key = "results_dir (or --results-dir): the jobs' log path";
  return directive("--output", log, key) + directive("--error", log, key);
}

// Modules, the spec's setup lines, threads, the spec's environment. Only setup is shell; the rest is quoted.
std::string environment(const SlurmSpec& s) {
  std::string out;
  for (const auto& module : s.modules) out += "module load " + shell_word(module) + "\n";
  if (!s.modules.empty()) out += "\n";
  if (!s.setup.empty()) {
    out += "# slurm.setup: the spec's shell lines, as written\n";
    for (const auto& line : s.setup) out += line + "\n";
    out += "\n";
  }
  bool omp_set = false;
  for (const auto& var : s.env) omp_set = omp_set || var.name == "OMP_NUM_THREADS";
  if (!omp_set) out += "export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}\n";
  for (const auto& var : s.env) {
    const std::string key = "slurm.env." + var.name;
    T5S_CHECK(is_env_name(var.name), "slurm.env: '", var.name, "' is not an environment variable name");
    const std::string problem = env_value_problem(var.value, var.expand);
    if (!problem.empty()) throw Error(msg(key, ": ", problem));
    out += "export " + var.name + "=" + (var.expand ? expanding_quoted(var.value) : single_quoted(var.value)) + "\n";
  }
  return out;
}

// How many times a launch whose ranks died by a signal before they had all started is made, in all.
constexpr int kStartAttempts = 3;
// The highest signal number on Linux (SIGRTMAX): exit codes above 128 + this are not deaths by a signal.
constexpr int kLastSignal = 64;

// The launch and the exit-code handling; `run` is the shell word for the run's name.
std::string launch(const SlurmSpec& s, const std::string& run) {
  std::string out;
  const std::string train = "\"$T5SCALE_BIN/t5scale-train\" --config \"$RUN_CONFIG\"";
  // The start-up crash the loop below launches again after is slurm/README.md's (Open MPI 4.1's TCP BTL handles a
  // peer's first message before its own receive callbacks are set). A launch that had started, that refused its
  // config (exit 2), or that the traps saw signalled (SIGTERM, SIGUSR1) is not repeated.
  out += "signalled=0\n";
  if (s.launcher == "mpirun") {
    out += "# One rank per task of the allocation (mpirun reads it from Slurm), consecutive ranks on a node.\n";
    out += "# SIGUSR1 (--signal=B:...) and SIGTERM reach this shell, which passes SIGUSR1 to mpirun; mpirun forwards\n";
    out += "# it to the ranks, which checkpoint and exit 75 (mpirun does not forward SIGTERM: it ends the job).\n";
    out += "trap 'signalled=1; kill -USR1 \"$launcher\" 2>/dev/null' USR1\n";
    out += "trap 'signalled=1; kill -USR1 \"$launcher\" 2>/dev/null' TERM\n";
  } else {
    out += std::string("# One task per ") + (s.cpu_only() ? "rank" : "GPU") +
           ". --signal's SIGUSR1 and Slurm's SIGTERM reach every task, which\n";
    out += "# checkpoints and exits 75; this shell stays to requeue the job.\n";
    out += "trap 'signalled=1; echo \"[t5scale] SIGTERM: waiting for the tasks to checkpoint\"' TERM\n";
    out += "trap 'signalled=1' USR1\n";
  }
  out += "# A launch whose ranks died by a signal before they had all started is made again, " +
         std::to_string(kStartAttempts) + " launches in all: rank 0\n";
  out += "# writes \"started\" to $EXIT_CODE_FILE once every rank is past MPI_Init, and Open MPI 4.1 can crash a rank\n";
  out += "# inside MPI_Init under srun --mpi=pmix. Nothing of the run is read or written before that.\n";
  out += "attempt=1\n";
  out += "while :; do\n";
  out += "  rm -f \"$EXIT_CODE_FILE\"\n";
  if (s.launcher == "mpirun") {
    out += "  mpirun -np \"$SLURM_NTASKS\" --bind-to none " + train + " &\n";
  } else {
    // Since Slurm 22.05 srun no longer takes --cpus-per-task from the allocation: each task would get one core,
    // with OMP_NUM_THREADS threads on it. The option on the srun line (rather than SRUN_CPUS_PER_TASK, which
    // only 22.05 and later read) works with every Slurm and shows in the script; the variable follows an edited
    // #SBATCH --cpus-per-task.
    std::string cpus;
    if (s.cpus_per_task > 0) {
      out += "  # srun does not inherit --cpus-per-task from sbatch (Slurm 22.05 and later): it is passed on.\n";
      cpus = "--cpus-per-task=\"$SLURM_CPUS_PER_TASK\" ";
    }
    out += "  srun --mpi=" + shell_word(s.mpi) + " --kill-on-bad-exit=1 " + cpus + train + " &\n";
  }
  out += "  launcher=$!\n";
  out += "  wait \"$launcher\"\n";
  out += "  while kill -0 \"$launcher\" 2>/dev/null; do  # wait returned for a trapped signal\n";
  out += "    wait \"$launcher\"\n";
  out += "  done\n";
  out += "  wait \"$launcher\"  # the launcher's exit status (bash keeps it)\n";
  out += "  rc=$?\n";
  // A death by signal N exits 128 + N, N at most 64 (SIGRTMAX); srun exits 255 when it could not launch the
  // tasks at all (a node's slurmd refused the step), which no second launch mends.
  out += msg("  if [ \"$rc\" -gt 128 ] && [ \"$rc\" -le ", 128 + kLastSignal,
             " ] && [ ! -e \"$EXIT_CODE_FILE\" ] && [ \"$signalled\" -eq 0 ] && [ \"$attempt\" -lt ", kStartAttempts,
             " ]; then\n");
  out += "    attempt=$((attempt + 1))\n";
  out += "    echo \"[t5scale] run " + run +
         ": the launch ended with $rc (signal $((rc - 128))) before its ranks had all started; "
         "launching again (attempt $attempt of " + std::to_string(kStartAttempts) + ")\"\n";
  out += "    continue\n";
  out += "  fi\n";
  out += "  break\n";
  out += "done\n";
  out += "# mpirun exits 1 when it was sent SIGTERM itself, whatever its ranks did: the job's own exit code is in\n";
  out += "# $EXIT_CODE_FILE (written by rank 0 as the job ends: 75 after a preemption checkpoint).\n";
  out += "if [ \"$rc\" -ne 0 ] && [ -f \"$EXIT_CODE_FILE\" ] && [ \"$(cat \"$EXIT_CODE_FILE\")\" = 75 ]; then "
         "rc=75; fi\n";
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
  if (s.cpu_only()) return out;
  // [type:]count, the same in both forms of the request.
  const std::string gpus = (s.gres_type.empty() ? "" : s.gres_type + ":") + std::to_string(gpus_per_node);
  if (s.gpu_request == SlurmSpec::GpuRequest::kGres) return out + directive("--gres", "gpu:" + gpus, "slurm.gres_type");
  return out + directive("--gpus-per-node", gpus, "slurm.gres_type");
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

// A file of the study's folder as render makes it.
struct RenderedFile {
  std::string name;  // in the output folder
  std::string text;
  bool executable = false;
};

// FNV-1a 64 of a file's bytes, in hex: enough to tell whether a file is still what render wrote.
std::string checksum(const std::string& text) {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(fnv1a_64(text)));
  return hex;
}

using Checksums = std::map<std::string, std::string>;  // file name -> checksum

// rendered.sums: "<checksum>  <file name>" per line, as sha256sum writes them; none yet: empty.
Checksums read_checksums(const fs::path& path) {
  Checksums sums;
  std::error_code ec;
  if (!fs::exists(path, ec)) return sums;
  std::istringstream lines(read_text_file(path.string(), "the record of rendered files"));
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t gap = line.find("  ");
    if (gap != std::string::npos) sums[line.substr(gap + 2)] = line.substr(0, gap);
  }
  return sums;
}

void write_checksums(const fs::path& path, const Checksums& sums) {
  std::string text =
      "# What t5scale-study render last wrote here (FNV-1a 64 of each file): a file that no longer matches was "
      "edited,\n# and render and submit keep it as it is unless --rerender.\n";
  for (const auto& [name, sum] : sums) text += sum + "  " + name + "\n";
  write_file(path, text);
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
  out += msg("# t5scale study ", plan.spec.name, ", run ", run, " (t5scale-study render ",
             comment_text(options.spec_path), ")\n");
  out += kEditNote;
  out += summary_comment(plan, p);
  out += directive("--job-name", plan.spec.name + "." + run, "study (and the run's name)");
  out += shape_sbatch(p.run.nodes, p.run.gpus_per_node, s);
  out += common_sbatch(s, options);
  out += log_sbatch(log);
  out += "\n";
  out += "T5SCALE_BIN=" + quoted_path(options.bin_dir) + "\n";
  out += "RUN_CONFIG=" + quoted_path(config_path) + "  # run file: " + comment_text(results_path(p, run + ".h5")) +
         "\n";
  out += "EXIT_CODE_FILE=" + quoted_path(results_path(p, run + ".exit_code")) + "\n";
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
             first.run.nodes, " node(s) x ", first.run.gpus_per_node, " task(s) listed in ", comment_text(runs_file),
             " (t5scale-study render --array ", comment_text(options.spec_path), ")\n");
  out += kEditNote;
  for (size_t i = 0; i < group.runs.size(); ++i) {
    out += msg("#   task ", i, ": ", group.runs[i]->run.name,
               group.runs[i]->over_memory_allowed ? " (RENDERED WITH --allow-over-memory: predicted not to fit its "
                                                    "GPU's memory)"
                                                  : "",
               "\n");
  }
  out += directive("--job-name", plan.spec.name + "." + group.name, "study");
  out += msg("#SBATCH --array=0-", group.runs.size() - 1, "\n");
  out += shape_sbatch(first.run.nodes, first.run.gpus_per_node, s);
  out += common_sbatch(s, options);
  out += log_sbatch(log);
  out += "\n";
  out += "T5SCALE_BIN=" + quoted_path(options.bin_dir) + "\n";
  out += "RUNS_FILE=" + quoted_path(runs_file) + "\n";
  out += "run=$(sed -n \"$((SLURM_ARRAY_TASK_ID + 1))p\" \"$RUNS_FILE\")\n";
  out += "if [ -z \"$run\" ]; then echo \"[t5scale] no run for array task $SLURM_ARRAY_TASK_ID in $RUNS_FILE\"; "
         "exit 2; fi\n";
  out += "RUN_CONFIG=" + quoted_path(config_dir) + "/\"$run.yaml\"\n";
  out += "EXIT_CODE_FILE=" + quoted_path(first.run.config.run.output_dir) + "/\"$run.exit_code\"\n";
  out += "\n";
  out += environment(s);
  out += "\n";
  out += "echo \"[t5scale] run $run: array task $SLURM_ARRAY_TASK_ID, job $SLURM_JOB_ID, restart "
         "${SLURM_RESTART_COUNT:-0}, nodes $SLURM_JOB_NODELIST, $(date -u +%Y-%m-%dT%H:%M:%SZ)\"\n";
  out += launch(s, "$run");
  return out;
}

namespace {

void throw_if_invalid(const StudyPlan& plan) {
  std::vector<std::string> invalid;
  for (const auto& p : plan.runs) {
    if (!p.valid()) invalid.push_back(p.run.name);
  }
  if (!invalid.empty()) {
    throw Error(msg(plan.spec.source, ": ", invalid.size(), " invalid run(s), nothing rendered: ", join(invalid, ", "),
                    " (see t5scale-study plan)"));
  }
}

// The texts of every config, script and runs list; the scripts' paths go into `rendered`.
std::vector<RenderedFile> render_files(const StudyPlan& plan, const RenderOptions& options, bool array,
                                       RenderedStudy& rendered) {
  const fs::path out_dir(options.out_dir);
  std::vector<RenderedFile> files;
  for (const auto& p : plan.runs) {
    const fs::path config = out_dir / (p.run.name + ".yaml");
    files.push_back({config.filename().string(),
                     msg("# t5scale study ", plan.spec.name, ", run ", p.run.name,
                         ": the resolved run config (t5scale-study render ", comment_text(options.spec_path), ")\n",
                         to_yaml(p.run.config)),
                     false});
    const fs::path script = out_dir / (p.run.name + ".sbatch");
    files.push_back({script.filename().string(), render_run_sbatch(plan, p, config.string(), options), true});
    rendered.run_scripts.emplace_back(p.run.name, script.string());
  }
  if (!array) return files;
  for (const auto& group : array_groups(plan)) {
    const fs::path runs_file = out_dir / (group.name + ".runs");
    std::string names;
    for (const RunPlan* p : group.runs) names += p->run.name + "\n";
    files.push_back({runs_file.filename().string(), names, false});
    const fs::path script = out_dir / (group.name + ".sbatch");
    files.push_back({script.filename().string(),
                     render_array_sbatch(plan, group, runs_file.string(), out_dir.string(), options), true});
    rendered.array_scripts.emplace_back(script.string(), group);
  }
  return files;
}

// The runs' output folders as the jobs see them (relative ones start at the working directory), each once.
std::vector<std::string> log_folders(const StudyPlan& plan, const RenderOptions& options) {
  std::vector<std::string> folders;
  for (const auto& p : plan.runs) {
    const fs::path dir = fs::path(options.workdir) / p.run.config.run.output_dir;  // an absolute one stays as it is
    const std::string text = dir.lexically_normal().string();
    if (std::find(folders.begin(), folders.end(), text) == folders.end()) folders.push_back(text);
  }
  return folders;
}

// Which of `files` to write: the missing ones, and those that differ from their rendering and were not edited
// since render wrote them (or were, with policy.replace_edited). Records in `rendered` what it keeps and replaces,
// and in `sums` the checksums to keep for next time.
std::vector<const RenderedFile*> files_to_write(const std::vector<RenderedFile>& files, const fs::path& out_dir,
                                                const WritePolicy& policy, RenderedStudy& rendered, Checksums& sums) {
  const Checksums written_before = read_checksums(out_dir / kRenderedChecksumsFile);
  std::vector<const RenderedFile*> to_write;
  for (const auto& file : files) {
    const fs::path path = out_dir / file.name;
    const std::string now = checksum(file.text);
    std::error_code ec;
    if (!fs::exists(path, ec)) {
      rendered.missing.push_back(path.string());
      to_write.push_back(&file);
      sums[file.name] = now;
      continue;
    }
    const std::string there = checksum(read_text_file(path.string(), "the rendered file"));
    const auto before = written_before.find(file.name);
    // Without a record of what render wrote, a file that differs may hold edits: it is kept.
    const bool edited = there != now && (before == written_before.end() || before->second != there);
    if (edited && !policy.replace_edited) {
      rendered.edited_kept.push_back(path.string());
      if (before != written_before.end()) sums[file.name] = before->second;  // still edited next time
      continue;
    }
    if (edited) rendered.edited_replaced.push_back(path.string());
    if (there != now) to_write.push_back(&file);
    sums[file.name] = now;
  }
  return to_write;
}

}  // namespace

RenderedStudy write_rendered_study(const StudyPlan& plan, const RenderOptions& options, bool array,
                                   const WritePolicy& policy) {
  throw_if_invalid(plan);
  // Every text first: a value that cannot be rendered stops render before it writes anything.
  RenderedStudy rendered;
  const std::vector<RenderedFile> files = render_files(plan, options, array, rendered);
  const fs::path out_dir(options.out_dir);
  rendered.runs_csv = (out_dir / "runs.csv").string();
  rendered.log_dirs = log_folders(plan, options);
  Checksums sums;
  const std::vector<const RenderedFile*> to_write = files_to_write(files, out_dir, policy, rendered, sums);
  if (policy.dry_run) return rendered;

  fs::create_directories(out_dir);
  for (const RenderedFile* file : to_write) write_file(out_dir / file->name, file->text, file->executable);
  write_file(rendered.runs_csv, plan_csv(plan));
  write_checksums(out_dir / kRenderedChecksumsFile, sums);
  for (const auto& dir : rendered.log_dirs) fs::create_directories(dir);
  return rendered;
}

}  // namespace t5scale
