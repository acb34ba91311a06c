// t5scale-ckpt: a training checkpoint described, written again for another grid, exported, or run on new inputs,
// without a job (one process, no MPI). See job/checkpoint_tools.h and job/checkpoint_prediction.h.
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/command_line.h"
#include "core/end_process.h"
#include "job/checkpoint_prediction.h"
#include "job/checkpoint_tools.h"

namespace {

using namespace t5scale;

const char* kUsage = R"(usage: t5scale-ckpt inspect CKPT
       t5scale-ckpt reshard CKPT --tp N --dp M [--zero1 true|false] --out DIR
       t5scale-ckpt export CKPT --hf DIR [--tokenizer FILE|none]
       t5scale-ckpt predict CKPT --input FILE --out FILE [--beams N] [--length-penalty X] [--max-new-tokens N]
                    [--batch N] [--tokenizer FILE]

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
  predict   the model run on new inputs: FILE (--input) holds one input per line, the whole source text as the
            run's recipe rendered it (a prefix such as "summarize: " included: none is added, and the output notes
            input lines that lack the recipe's); --out FILE gets exactly one line per input line, in order, the
            generation decoded with the run's tokenizer (found as export finds it; --tokenizer FILE gives another),
            newlines in it replaced by spaces. An empty or blank input line gives an empty output line. Inputs are
            cut to the run's data.max_source_length. Greedy decoding, or with --beams N beam search as
            transformers' generate(num_beams=N, do_sample=False, early_stopping=False) does it, each finished
            hypothesis scored by its summed log-probabilities / length ** X (--length-penalty, default 1.0);
            --max-new-tokens N (default: the run's eval.max_new_tokens) bounds each generation, eos included;
            --batch N inputs per batch (default 16; the outputs do not depend on it). Holds the whole model in
            memory and runs on the CPU (its threads: OMP_NUM_THREADS), fp32
  --help    this text
)";

struct Arguments {
  std::string command, checkpoint, out, hf, tokenizer, input;
  int tp = 0, dp = 0, zero1 = -1;
  int beams = 0, max_new_tokens = 0, batch = 0;  // 0: not given
  double length_penalty = 1.0;
  bool length_penalty_given = false;
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
    } else if (flag == "--input") {
      a.input = line.value();
    } else if (flag == "--beams") {
      a.beams = line.positive_int();
    } else if (flag == "--max-new-tokens") {
      a.max_new_tokens = line.positive_int();
    } else if (flag == "--batch") {
      a.batch = line.positive_int();
    } else if (flag == "--length-penalty") {
      a.length_penalty = line.number();
      a.length_penalty_given = true;
    } else if (flag.rfind("--", 0) == 0) {
      throw Error(msg("unknown option '", flag, "' (see --help)"));
    } else {
      positional.push_back(flag);
    }
  }
  T5S_CHECK(positional.size() == 2, "expected a command and a checkpoint (--help shows how), got ",
            positional.size(), " word(s)");
  a.command = positional[0];
  a.checkpoint = positional[1];
  const bool reshard = a.command == "reshard", export_hf = a.command == "export", predict = a.command == "predict";
  T5S_CHECK(a.command == "inspect" || reshard || export_hf || predict, "unknown command '", a.command,
            "' (inspect, reshard, export or predict)");
  T5S_CHECK(!reshard || (a.tp > 0 && a.dp > 0 && !a.out.empty()), "reshard needs --tp, --dp and --out");
  T5S_CHECK(reshard || (a.tp == 0 && a.dp == 0 && a.zero1 < 0), "--tp, --dp and --zero1 belong to reshard");
  T5S_CHECK(!export_hf || !a.hf.empty(), "export needs --hf DIR");
  T5S_CHECK(export_hf || a.hf.empty(), "--hf belongs to export");
  T5S_CHECK(!predict || (!a.input.empty() && !a.out.empty()), "predict needs --input FILE and --out FILE");
  T5S_CHECK(predict || (a.input.empty() && a.beams == 0 && a.max_new_tokens == 0 && a.batch == 0 &&
                        !a.length_penalty_given),
            "--input, --beams, --length-penalty, --max-new-tokens and --batch belong to predict");
  T5S_CHECK(reshard || predict || a.out.empty(), "--out belongs to reshard and predict");
  T5S_CHECK(export_hf || predict || a.tokenizer.empty(), "--tokenizer belongs to export and predict");
  T5S_CHECK(!predict || a.tokenizer != "none", "predict needs a tokenizer: --tokenizer none is for export");
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
  } else if (a.command == "predict") {
    PredictOptions options;
    options.input = a.input;
    options.out = a.out;
    options.tokenizer = a.tokenizer;
    options.num_beams = a.beams > 0 ? a.beams : 1;
    options.length_penalty = a.length_penalty;
    options.max_new_tokens = a.max_new_tokens;
    options.batch_size = a.batch > 0 ? a.batch : 16;
    options.progress = [](const std::string& line) { std::cerr << line << std::endl; };
    const PredictResult result = predict_checkpoint(checkpoint, options);
    const std::string decoding =
        options.num_beams == 1 ? std::string("greedy")
                               : msg("beam search, ", options.num_beams, " beams, length penalty ", a.length_penalty);
    const std::string cut = result.max_source_length > 0
                                ? msg(result.cut, " input(s) cut to data.max_source_length ", result.max_source_length,
                                      " tokens")
                                : std::string("inputs not cut (data.max_source_length 0)");
    std::cout << "wrote " << a.out << ": " << result.lines << " lines for the " << result.lines << " lines of "
              << a.input << " (" << result.generated << " generated, " << result.lines - result.generated
              << " without text, left empty); step " << checkpoint.loaded.step << " of " << checkpoint.loaded.folder
              << "\ndecoding: " << decoding << ", at most " << result.max_new_tokens << " new tokens; " << cut
              << "; " << std::fixed << std::setprecision(1) << result.seconds << " s\ntokenizer: "
              << result.tokenizer << "\n";
    if (!result.prefix_note.empty()) std::cout << "note: " << result.prefix_note << "\n";
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
