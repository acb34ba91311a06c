// t5scale-train: the training job. One process per rank (mpirun / srun). The run is described by a YAML config
// and --set overrides; with no config, the default run: a tiny T5 learns the built-in synthetic task for
// kStepsWithoutConfig steps (every key has a default but the run's length, which a config must give).
#include <iostream>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "core/check.h"
#include "core/command_line.h"
#include "core/end_process.h"
#include "dist/mpi_runtime.h"
#include "job/training_job.h"

namespace {

using namespace t5scale;

// The length of the default run (no --config, and neither train.max_steps nor train.epochs set): the one thing
// without a default, which a config must choose. kUsage and README.md say 200.
constexpr int64_t kStepsWithoutConfig = 200;

const char* kUsage = R"(usage: [mpirun -np N | srun] t5scale-train [--config FILE] [--set KEY=VALUE ...]

Trains (or, with eval.only, evaluates) a T5 model over N = tp x dp ranks, as the config describes. Every key
has a default but the run's length (train.max_steps or train.epochs), which a config gives. With no config, the
default run: a tiny T5 learns the built-in synthetic task for 200 steps (unless --set gives a length) and writes
results/run.h5. Keys and their meaning: jobs/CONFIG_REFERENCE.md, or --config-reference.

  --config FILE        the run config (YAML)
  --set KEY=VALUE      override one key, e.g. --set train.max_steps=100 --set parallel.tp=2 (repeatable)
  --print-config       print the resolved config as YAML and exit
  --config-reference   print the reference of every key (Markdown) and exit
  --help               this text

Exit codes: 0 completed (or stopped early), 2 refused (bad config, data or checkpoint), 3 diverged,
75 preempted (a checkpoint was written; the sbatch scripts requeue the job).
)";

struct Arguments {
  std::string config_path;
  std::vector<std::string> overrides;
  bool print_config = false;
};

Arguments parse(int argc, char** argv) {
  Arguments a;
  CommandLine line(argc, argv, kUsage);
  while (line.next()) {
    const std::string& flag = line.word();
    if (flag == "--config-reference") {
      std::cout << config_reference_markdown();
      std::exit(0);
    } else if (flag == "--config") {
      a.config_path = line.value();
    } else if (flag == "--set") {
      a.overrides.push_back(line.value());
    } else if (flag == "--print-config") {
      a.print_config = true;
    } else {
      throw Error(msg("unknown option '", flag, "' (see --help)"));
    }
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  end_process(run_mpi_program(argc, argv, "t5scale-train", [](int argc_, char** argv_) {
    const Arguments args = parse(argc_, argv_);
    auto complete = [&](RunConfig& c) {
      if (args.config_path.empty() && c.train.max_steps == 0 && c.train.epochs == 0.0 && !c.eval.only) {
        c.train.max_steps = kStepsWithoutConfig;
      }
    };
    // Every problem the config, this world and the files show, in one list before the resolved config is printed
    // (the job refuses on the same list: --print-config prints without it).
    auto before_start = [](const RunConfig& c) { return problems_before_start(c, size_of(MPI_COMM_WORLD)); };
    const RunConfig config = args.print_config ? load_run_config(args.config_path, args.overrides, complete)
                                               : load_run_config(args.config_path, args.overrides, complete,
                                                                 before_start);
    const std::string source = args.config_path.empty() ? "the default config" : args.config_path;
    if (world_rank() == 0) {
      if (args.print_config) {
        std::cout << to_yaml(config);
      } else {
        std::cout << "# t5scale-train: resolved config (" << source << ", " << args.overrides.size()
                  << " override(s))\n"
                  << to_yaml(config) << std::flush;
      }
    }
    if (args.print_config) return 0;
    return run_training_job(config, source);
  }));
}
