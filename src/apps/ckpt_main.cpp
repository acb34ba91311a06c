// t5scale-ckpt: a training checkpoint described, written again for another grid, or exported, without a job (one
// process, no MPI). See train/checkpoint_tools.h.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/command_line.h"
#include "core/end_process.h"
#include "train/checkpoint_tools.h"

namespace {

using namespace t5scale;

const char* kUsage = R"(usage: t5scale-ckpt inspect CKPT
       t5scale-ckpt reshard CKPT --tp N --dp M [--zero1 true|false] --out DIR
       t5scale-ckpt export CKPT --hf DIR [--tokenizer FILE|none]

CKPT is a checkpoint step folder (RUN.ckpt/step_00000100) or a checkpoint folder (RUN.ckpt: its newest complete
step). Every file is checked against the manifest (size and checksum) first.

  inspect   the model, the grid, the step, the optimizer state and every file with its checksum
  reshard   the same training state for a tp N x dp M job (ZeRO-1 as given, else as the checkpoint), written to
            DIR/step_<same step>, which a job with checkpoint.dir: DIR resumes from; each target rank is built in
            turn in this process: its peak memory is about one rank's weights and optimizer state plus one full
            parameter's (printed at the end). A job also resumes on another grid directly: this writes the files
            that grid would have written, to copy or archive.
  export    the model as a Hugging Face folder (config.json + model.safetensors, fp32) with the run's SentencePiece
            tokenizer beside it (spiece.model, tokenizer_config.json, special_tokens_map.json), loadable whole by
            transformers' AutoTokenizer and AutoModelForSeq2SeqLM; holds the whole model in memory. The tokenizer
            is the run's data.tokenizer, else the file its dataset names (either checked against the dataset's
            SHA-256); --tokenizer FILE gives another, --tokenizer none leaves it out. A run on synthetic data has
            no tokenizer: the model is exported alone, and the output says so
  --help    this text
)";

struct Arguments {
  std::string command, checkpoint, out, hf, tokenizer;
  int tp = 0, dp = 0, zero1 = -1;
};

Arguments parse(int argc, char** argv) {
  Arguments a;
  std::vector<std::string> positional;
  CommandLine line(argc, argv);
  while (line.next()) {
    const std::string& flag = line.word();
    if (flag == "--help" || flag == "-h") {
      a.command = "help";
      return a;
    } else if (flag == "--tp") {
      a.tp = line.positive_int();
    } else if (flag == "--dp") {
      a.dp = line.positive_int();
    } else if (flag == "--zero1") {
      const std::string v = line.value();
      T5S_CHECK(v == "true" || v == "false", "--zero1: '", v, "' is neither true nor false");
      a.zero1 = v == "true" ? 1 : 0;
    } else if (flag == "--out") {
      a.out = line.value();
    } else if (flag == "--hf") {
      a.hf = line.value();
    } else if (flag == "--tokenizer") {
      a.tokenizer = line.value();
    } else if (flag.rfind("--", 0) == 0) {
      throw Error(msg("unknown option ", flag, " (--help lists them)"));
    } else {
      positional.push_back(flag);
    }
  }
  T5S_CHECK(positional.size() == 2, "expected a command and a checkpoint (--help shows how), got ",
            positional.size(), " word(s)");
  a.command = positional[0];
  a.checkpoint = positional[1];
  const bool reshard = a.command == "reshard", export_hf = a.command == "export";
  T5S_CHECK(a.command == "inspect" || reshard || export_hf, "unknown command '", a.command,
            "' (inspect, reshard or export)");
  T5S_CHECK(!reshard || (a.tp > 0 && a.dp > 0 && !a.out.empty()), "reshard needs --tp, --dp and --out");
  T5S_CHECK(reshard || (a.tp == 0 && a.dp == 0 && a.zero1 < 0 && a.out.empty()),
            "--tp, --dp, --zero1 and --out belong to reshard");
  T5S_CHECK(!export_hf || !a.hf.empty(), "export needs --hf DIR");
  T5S_CHECK(export_hf || (a.hf.empty() && a.tokenizer.empty()), "--hf and --tokenizer belong to export");
  return a;
}

int run(int argc, char** argv) {
  const Arguments a = parse(argc, argv);
  if (a.command == "help") {
    std::cout << kUsage;
    return 0;
  }
  const OpenedCheckpoint checkpoint = open_checkpoint(a.checkpoint);
  if (a.command == "inspect") {
    std::cout << describe_checkpoint(checkpoint);
  } else if (a.command == "reshard") {
    const ReshardResult result = reshard_checkpoint(checkpoint, {a.tp, a.dp, a.zero1, a.out});
    std::printf("wrote %s: tp %d x dp %d, %lld bytes; peak resident memory of this process %.1f MiB\n",
                result.folder.c_str(), a.tp, a.dp, static_cast<long long>(result.bytes),
                static_cast<double>(result.peak_resident_bytes) / (1024.0 * 1024.0));
  } else {
    const ExportResult result = export_checkpoint_hf(checkpoint, a.hf, a.tokenizer);
    std::printf("wrote %s: %s (step %lld of %s)\ntokenizer: %s\n", a.hf.c_str(), join(result.files, ", ").c_str(),
                static_cast<long long>(checkpoint.loaded.step), checkpoint.loaded.folder.c_str(),
                result.tokenizer.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { t5scale::end_process(t5scale::guarded_main("t5scale-ckpt", argc, argv, run)); }
