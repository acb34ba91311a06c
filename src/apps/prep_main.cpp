// t5scale-prep: JSONL/CSV datasets to tokenized HDF5 datasets (src/data_prep/prep_pipeline.h), and the built-in
// synthetic task as such a dataset. Exit status: 0 done, 2 bad input or usage (the message names the file, line or
// key), 1 anything else.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "config/hf_model_folder.h"
#include "core/check.h"
#include "core/command_line.h"
#include "data/synthetic_examples.h"
#include "data/tokenized_dataset.h"
#include "data/tokenizer.h"
#include "data_prep/prep_pipeline.h"
#include "data_prep/prep_report.h"
#include "data_prep/tokenizer_training.h"

#ifndef T5SCALE_VERSION
#define T5SCALE_VERSION "unknown"
#endif

namespace {

constexpr const char* kUsage = R"(usage:
  t5scale-prep --recipe R.yaml --input F [--input F ...] --out D.h5 TOKENIZER [options]
  t5scale-prep --recipe R.yaml --input-split NAME=F [--input-split NAME=F ...] --out D.h5 TOKENIZER [options]
  t5scale-prep --recipe R.yaml [--data-dir DIR] --out D.h5 TOKENIZER [options]
               (inputs: the recipe's split_files, paths inside its folder, read from DIR or that folder)
  t5scale-prep synthetic --out D.h5 [--examples 4096] [--validation-examples N/8] [--vocab-size 64]
               [--min-length 3] [--max-length 8] [--seed 1234]
  t5scale-prep check D.h5 [--tokenizer M.model]
               validates a dataset: format, offsets, every token id, and (with --tokenizer) that it was made
               with that tokenizer

TOKENIZER:
  --tokenizer M.model|MODEL        a SentencePiece model with T5's ids (a T5 spiece.model; or the spiece.model of
                                   a model folder or a model in the Hugging Face cache: --tokenizer t5-small), or
  --train-tokenizer --tokenizer-out X.model [--vocab-size 32000] [--character-coverage 0.9995]
                                   [--tokenizer-sample-mb 512]
                                   a unigram model trained on the train split (sentinels come on top of
                                   --vocab-size pieces, as in T5)
options:
  --max-source-length N, --max-target-length N   tokens with eos, 0 = no limit (default: the recipe's)
  --split-ratio NAME=F ...         hash split ratios for --input (default: the recipe's, else
                                   train=0.9 validation=0.05 test=0.05)
  --split-seed S                   seed of the hash split (default: the recipe's split_seed)
  --on-malformed fail|skip         malformed records, missing fields, empty targets, bad UTF-8, unknown labels:
                                   stop with an error or skip and count (default: the recipe's on_malformed)
  --threads T                      tokenization threads (default 1); the output is the same for any T
  --log-every-s S                  a progress line every S seconds when stderr is not a terminal (default 10)
  --progress auto|bar|lines|none   (default auto: a bar on a terminal)
  --report-json F                  also write the final report as JSON
  --help                           this text (anywhere on the line)
)";

using t5scale::CommandLine;
using t5scale::UsageError;

const std::string kCreatedBy = std::string("t5scale-prep ") + T5SCALE_VERSION;

int run_synthetic(CommandLine& args) {
  t5scale::SyntheticDatasetOptions options;
  std::string out;
  bool validation_given = false;
  while (args.next()) {
    const std::string key = args.word();
    if (!args.is_flag()) throw UsageError(t5scale::msg("unexpected argument '", key, "'"));
    if (key == "--out")
      out = args.value();
    else if (key == "--examples")
      options.train_examples = args.integer();
    else if (key == "--validation-examples")
      options.validation_examples = args.integer(), validation_given = true;
    else if (key == "--vocab-size")
      options.task.vocab_size = args.integer();
    else if (key == "--min-length")
      options.task.min_length = args.integer();
    else if (key == "--max-length")
      options.task.max_length = args.integer();
    else if (key == "--seed")
      options.task.seed = static_cast<uint64_t>(args.integer());
    else
      throw UsageError(t5scale::msg("unknown option '", key, "' for t5scale-prep synthetic"));
  }
  if (out.empty()) throw UsageError("t5scale-prep synthetic: --out is required");
  if (!validation_given) options.validation_examples = std::max<int64_t>(1, options.train_examples / 8);
  t5scale::write_synthetic_dataset(out, options, kCreatedBy);
  std::cout << "t5scale-prep: wrote " << out << " (synthetic task, vocab_size " << options.task.vocab_size << ", "
            << options.train_examples << " train and " << options.validation_examples << " validation examples)\n";
  return 0;
}

// --tokenizer's file: a SentencePiece .model as given, or the spiece.model of a model folder or of a model in the
// Hugging Face cache (the lookup of model.init_from: `--tokenizer t5-small`).
std::string tokenizer_file(const std::string& given) {
  namespace fs = std::filesystem;
  if (fs::is_regular_file(given)) return given;
  T5S_CHECK(fs::path(given).extension() != ".model", "--tokenizer: no file '", given, "'");
  const t5scale::HfModelLookup lookup = t5scale::find_hf_model_folder(given);
  if (lookup.folder.empty()) throw t5scale::Error("--tokenizer: " + t5scale::hf_model_not_found(given, lookup));
  const fs::path spiece = fs::path(lookup.folder) / "spiece.model";
  T5S_CHECK(fs::is_regular_file(spiece), "--tokenizer: the model folder ", lookup.folder,
            " has no spiece.model (t5scale reads SentencePiece tokenizers: give the .model file)");
  return spiece.string();
}

int run_check(int argc, char** argv) {
  if (argc < 3) throw UsageError("t5scale-prep check: give the dataset file");
  const std::string path = argv[2];
  CommandLine args(argc, argv, 3);
  std::string tokenizer_path;
  while (args.next()) {
    const std::string key = args.word();
    if (!args.is_flag()) throw UsageError(t5scale::msg("unexpected argument '", key, "'"));
    if (key == "--tokenizer")
      tokenizer_path = tokenizer_file(args.value());
    else
      throw UsageError(t5scale::msg("unknown option '", key, "' for t5scale-prep check"));
  }
  const auto dataset = t5scale::TokenizedDataset::open(path);
  const t5scale::TokenizedDatasetInfo& info = dataset->info();
  if (!tokenizer_path.empty()) {
    const auto tokenizer = t5scale::Tokenizer::load(tokenizer_path, info.added_tokens);
    dataset->check_tokenizer(tokenizer.sha256(), tokenizer.vocab_size());
  }
  std::cout << path << ": " << info.created_by << ", recipe " << info.recipe_name << ", tokenizer "
            << info.tokenizer_file << " (sha256 " << info.tokenizer_sha256 << "), vocab_size " << info.vocab_size
            << (tokenizer_path.empty() ? "" : " (matches " + tokenizer_path + ")") << "\n";
  for (const std::string& name : dataset->split_names()) {
    const t5scale::TokenizedSplit& split = dataset->split(name);
    split.check_token_ids();
    const t5scale::SplitStatistics& s = split.statistics();
    std::cout << "  " << name << ": " << s.num_examples << " examples, " << s.num_source_tokens << " source and "
              << s.num_target_tokens << " target tokens, every id in [0, " << info.vocab_size << ")\n";
  }
  return 0;
}

int run_prep(CommandLine& args) {
  t5scale::PrepOptions options;
  options.created_by = kCreatedBy;
  std::string report_json;
  while (args.next()) {
    const std::string key = args.word();
    if (!args.is_flag()) throw UsageError(t5scale::msg("unexpected argument '", key, "'"));
    if (key == "--recipe")
      options.recipe_path = args.value();
    else if (key == "--input")
      options.inputs.push_back(args.value());
    else if (key == "--input-split")
      options.input_splits.push_back(args.name_value());
    else if (key == "--out")
      options.out_path = args.value();
    else if (key == "--data-dir")
      options.data_dir = args.value();
    else if (key == "--tokenizer")
      options.tokenizer_path = tokenizer_file(args.value());
    else if (key == "--train-tokenizer")
      options.train_tokenizer = true;
    else if (key == "--tokenizer-out")
      options.tokenizer_out = args.value();
    else if (key == "--vocab-size")
      options.tokenizer_training.vocab_size = args.integer();
    else if (key == "--character-coverage")
      options.tokenizer_training.character_coverage = args.number();
    else if (key == "--tokenizer-sample-mb")
      options.tokenizer_text_max_bytes = args.integer() << 20;
    else if (key == "--max-source-length")
      options.max_source_length = args.integer();
    else if (key == "--max-target-length")
      options.max_target_length = args.integer();
    else if (key == "--split-seed")
      options.split_seed = args.integer();
    else if (key == "--split-ratio") {
      const auto [name, ratio] = args.name_value();
      options.split_ratios[name] = args.number_in(ratio);
    } else if (key == "--threads")
      options.threads = static_cast<int>(args.integer());
    else if (key == "--on-malformed")
      options.on_malformed = t5scale::malformed_policy_from_name(args.value());
    else if (key == "--log-every-s")
      options.log_every_s = args.number();
    else if (key == "--progress") {
      const std::string style = args.value();
      if (style == "auto")
        options.progress = t5scale::ProgressStyle::kAuto;
      else if (style == "bar")
        options.progress = t5scale::ProgressStyle::kBar;
      else if (style == "lines")
        options.progress = t5scale::ProgressStyle::kLines;
      else if (style == "none")
        options.progress = t5scale::ProgressStyle::kNone;
      else
        throw UsageError(t5scale::msg("--progress: '", style, "' is not auto, bar, lines or none"));
    } else if (key == "--report-json")
      report_json = args.value();
    else
      throw UsageError(t5scale::msg("unknown option '", key, "'"));
  }
  if (options.recipe_path.empty()) throw UsageError("--recipe is required");
  if (!options.train_tokenizer && !options.tokenizer_out.empty()) {
    throw UsageError("--tokenizer-out is for --train-tokenizer");
  }
  const t5scale::PrepResult result = t5scale::run_prep(options, std::cerr);
  std::cout << t5scale::format_prep_report(result) << std::flush;
  if (!report_json.empty()) {
    std::ofstream out(report_json);
    out << t5scale::prep_report_json(result) << "\n";
    T5S_CHECK(out.good(), "cannot write the report to '", report_json, "'");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    for (int i = 1; i < argc; ++i) {
      if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
        std::cout << kUsage;
        return 0;
      }
    }
    if (argc >= 2 && std::string(argv[1]) == "synthetic") {
      CommandLine args(argc, argv, 2);
      return run_synthetic(args);
    }
    if (argc >= 2 && std::string(argv[1]) == "check") return run_check(argc, argv);
    CommandLine args(argc, argv, 1);
    return run_prep(args);
  } catch (const UsageError& e) {
    std::cerr << "t5scale-prep: error: " << e.what() << "\n\n" << kUsage;
    return 2;
  } catch (const t5scale::Error& e) {
    std::cerr << "t5scale-prep: error: " << t5scale::user_message(e) << "\n";
    t5scale::print_debug_text("t5scale-prep", e);  // with T5SCALE_DEBUG: the failed check behind the message
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "t5scale-prep: internal error: " << t5scale::user_message(e) << "\n";
    t5scale::print_debug_text("t5scale-prep", e);
    return 1;
  }
}
