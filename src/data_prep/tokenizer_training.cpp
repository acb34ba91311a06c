#include "data_prep/tokenizer_training.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <fstream>
#include <sstream>
#include <unordered_map>

#include "core/check.h"
#include "data/tokenizer.h"

namespace t5scale {

namespace {

// The training text, one sentence a line, handed to SentencePiece: trained from an iterator, the model records
// no input file name (a temporary one would make every trained model's bytes differ).
class TextFileSentences final : public sentencepiece::SentenceIterator {
 public:
  explicit TextFileSentences(const std::string& path) : path_(path), in_(path, std::ios::binary) {
    T5S_CHECK(in_.good(), "cannot open the tokenizer's training text '", path, "'");
    Next();
  }
  bool done() const override { return done_; }
  void Next() override { done_ = !std::getline(in_, line_); }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override {
    if (in_.bad()) return sentencepiece::util::Status(sentencepiece::util::StatusCode::kDataLoss, "cannot read " + path_);
    return sentencepiece::util::Status();
  }

 private:
  std::string path_;
  std::ifstream in_;
  std::string line_;
  bool done_ = false;
};

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  T5S_CHECK(out.good(), "cannot write '", path, "'");
}

}  // namespace

void train_tokenizer(const std::string& text_path, const std::string& model_path,
                     const TokenizerTrainOptions& options) {
  const std::string suffix = ".model";
  T5S_CHECK(model_path.size() > suffix.size() &&
                model_path.compare(model_path.size() - suffix.size(), suffix.size(), suffix) == 0,
            "tokenizer output '", model_path, "' must end in .model");
  T5S_CHECK(options.vocab_size > 3, "tokenizer vocab_size must be > 3 (pad, eos, unk and pieces), got ",
            options.vocab_size);
  T5S_CHECK(options.character_coverage > 0 && options.character_coverage <= 1,
            "tokenizer character_coverage must be in (0, 1], got ", options.character_coverage);
  std::string symbols;
  for (const std::string& symbol : options.user_symbols) {
    T5S_CHECK(!symbol.empty() && symbol.find(',') == std::string::npos, "tokenizer user symbol '", symbol,
              "' must be non-empty and free of commas");
    if (!symbols.empty()) symbols += ',';
    symbols += symbol;
  }
  // Every setting here is recorded in the model: none may depend on the machine, the process or the paths.
  const std::unordered_map<std::string, std::string> arguments = {
      {"model_type", "unigram"},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"character_coverage", msg(options.character_coverage)},
      {"pad_id", "0"},
      {"eos_id", "1"},
      {"unk_id", "2"},
      {"bos_id", "-1"},
      {"user_defined_symbols", symbols},
      {"input_sentence_size", std::to_string(options.input_sentence_size)},
      {"shuffle_input_sentence", "true"},
      {"max_sentence_length", std::to_string(options.max_sentence_length_bytes)},
      {"num_threads", std::to_string(kTokenizerTrainingThreads)},
      {"minloglevel", "2"},
  };
  sentencepiece::SetRandomGeneratorSeed(options.seed);
  TextFileSentences sentences(text_path);
  std::string model;
  const auto status = sentencepiece::SentencePieceTrainer::Train(arguments, &sentences, &model);
  if (!status.ok() && status.ToString().find("Vocabulary size too high") != std::string::npos) {
    // A small corpus holds fewer pieces than T5's 32000: say which setting to lower, beside SentencePiece's bound.
    throw Error(msg("training the tokenizer on '", text_path, "': vocab_size ", options.vocab_size,
                    " is more than this text holds pieces for (SentencePiece: ", status.ToString(),
                    "); give a smaller one (t5scale-prep --vocab-size N, with N at most the value SentencePiece names)"));
  }
  T5S_CHECK(status.ok(), "training the tokenizer on '", text_path, "' failed: ", status.ToString());
  write_file(model_path, model);
  // <prefix>.vocab, as SentencePiece writes it beside a model: a piece and its score a line, for people to read.
  sentencepiece::SentencePieceProcessor processor;
  const auto loaded = processor.LoadFromSerializedProto(model);
  T5S_CHECK(loaded.ok(), "the trained tokenizer: ", loaded.ToString());
  std::ostringstream vocab;
  for (int id = 0; id < processor.GetPieceSize(); ++id) {
    vocab << processor.IdToPiece(id) << "\t" << processor.GetScore(id) << "\n";
  }
  write_file(model_path.substr(0, model_path.size() - suffix.size()) + ".vocab", vocab.str());
}

}  // namespace t5scale
