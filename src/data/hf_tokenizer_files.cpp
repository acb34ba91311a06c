#include "data/hf_tokenizer_files.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "data/tokenized_dataset.h"
#include "data/tokenizer.h"

namespace t5scale {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

namespace {

// One entry of added_tokens_decoder as T5Tokenizer writes it: sentinels strip the spaces around them, the other
// special tokens do not.
ordered_json added_token(const std::string& content, bool strip_around) {
  return ordered_json{{"content", content}, {"lstrip", strip_around}, {"normalized", false},
                      {"rstrip", strip_around}, {"single_word", false}, {"special", true}};
}

// special_tokens_map.json's form of pad, eos and unk.
ordered_json special_token(const std::string& content) {
  return ordered_json{{"content", content}, {"lstrip", false}, {"normalized", false}, {"rstrip", false},
                      {"single_word", false}};
}

void write_json(const ordered_json& j, const fs::path& path) {
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  T5S_CHECK(out.good(), path.string(), ": cannot be written");
}

}  // namespace

RunTokenizer find_run_tokenizer(const RunConfig& run, const std::string& given) {
  RunTokenizer result;
  std::unique_ptr<TokenizedDataset> dataset;
  std::string unchecked = msg("the dataset ", run.data.dataset, " is not here");  // why no dataset checks the file
  std::error_code ec;
  if (run.data.dataset == "synthetic") {
    if (given.empty()) {
      result.description = "the run trained on synthetic data (data.dataset: synthetic), which no SentencePiece "
                           "model made";
      return result;
    }
  } else if (fs::is_regular_file(run.data.dataset, ec)) {
    dataset = TokenizedDataset::open(run.data.dataset);
    if (dataset->info().made_without_tokenizer()) {
      if (given.empty() && run.data.tokenizer.empty()) {
        result.description = msg("the run's dataset ", run.data.dataset, " holds synthetic ids (t5scale-prep "
                                 "synthetic), which no SentencePiece model made");
        return result;
      }
      // The job checks data.tokenizer against the dataset: this file is no longer the one the run trained on.
      unchecked = msg("the dataset ", run.data.dataset, " now holds synthetic ids, not the run's data");
      dataset.reset();
    }
  }

  std::vector<std::pair<std::string, std::string>> candidates;  // (path, where it comes from)
  if (!given.empty()) {
    candidates.emplace_back(given, "as given");
  } else {
    if (!run.data.tokenizer.empty()) candidates.emplace_back(run.data.tokenizer, "data.tokenizer");
    if (dataset && !dataset->info().tokenizer_file.empty()) {
      const fs::path named = dataset->info().tokenizer_file;
      candidates.emplace_back(named.string(), "the dataset's tokenizer_file");
      const fs::path beside = fs::path(run.data.dataset).parent_path() / named.filename();
      if (beside != named) candidates.emplace_back(beside.string(), "the dataset's tokenizer_file, beside the dataset");
    }
    // The model's own: a Hugging Face folder keeps its spiece.model beside the weights. Taken only where the dataset
    // is readable and was made with it (the hash check below), so it never stands for a tokenizer it is not.
    if (dataset && !run.model.init_from.empty()) {
      const fs::path spiece = fs::path(init_from_folder(run)) / "spiece.model";
      if (fs::is_regular_file(spiece, ec)) candidates.emplace_back(spiece.string(), "model.init_from's spiece.model");
    }
  }
  if (candidates.empty()) {
    const std::string why =
        dataset ? msg("the dataset ", run.data.dataset, " names no tokenizer file") : unchecked + " to name it";
    throw Error(msg("the run's SentencePiece tokenizer is not known: data.tokenizer is not set, and ", why));
  }
  std::vector<std::string> tried;
  for (const auto& [path, origin] : candidates) {
    if (!fs::is_regular_file(path, ec)) {
      tried.push_back(msg(path, " (", origin, "): no such file"));
      continue;
    }
    if (dataset) {
      const std::string sha256 = sha256_file_hex(path);
      if (sha256 != dataset->info().tokenizer_sha256) {
        tried.push_back(msg(path, " (", origin, "): sha256 ", sha256, ", but ", run.data.dataset,
                            " was made with sha256 ", dataset->info().tokenizer_sha256));
        continue;
      }
      result.added_tokens = dataset->info().added_tokens;
      result.description = msg(path, " (", origin, "; the tokenizer that made ", run.data.dataset, ")");
    } else if (run.data.dataset == "synthetic") {
      result.description = msg(path, " (", origin, ")");
    } else {
      result.description = msg(path, " (", origin, "; ", unchecked, ": not checked against it, and its added "
                               "tokens, if any, are not written)");
    }
    result.model_path = path;
    return result;
  }
  throw Error(msg("the run's SentencePiece tokenizer is not found; tried: ", join(tried, "; ")));
}

std::vector<std::string> write_hf_tokenizer_files(const RunTokenizer& run_tokenizer, int64_t model_vocab_size,
                                                  const std::string& folder) {
  T5S_CHECK(!run_tokenizer.model_path.empty(), "no tokenizer to write (", run_tokenizer.description, ")");
  const Tokenizer tokenizer = Tokenizer::load(run_tokenizer.model_path, run_tokenizer.added_tokens);
  T5S_CHECK(tokenizer.vocab_size() <= model_vocab_size, run_tokenizer.model_path, ": the tokenizer has ",
            tokenizer.vocab_size(), " ids (", tokenizer.piece_count(), " pieces, ", Tokenizer::kNumSentinels,
            " sentinels, ", tokenizer.added_tokens().size(), " added tokens), more than the model's ",
            model_vocab_size, " embedding rows");
  const fs::path dir(folder);
  fs::copy_file(run_tokenizer.model_path, dir / "spiece.model", fs::copy_options::overwrite_existing);

  // added_tokens_decoder in id order: pad, eos, unk, the sentinels (<extra_id_99> has the lowest id), the added
  // tokens.
  ordered_json decoder = ordered_json::object();
  decoder[std::to_string(Tokenizer::kPadId)] = added_token("<pad>", false);
  decoder[std::to_string(Tokenizer::kEosId)] = added_token("</s>", false);
  decoder[std::to_string(Tokenizer::kUnkId)] = added_token("<unk>", false);
  for (int k = Tokenizer::kNumSentinels - 1; k >= 0; --k) {
    decoder[std::to_string(tokenizer.sentinel_id(k))] = added_token(msg("<extra_id_", k, ">"), true);
  }
  // additional_special_tokens: the sentinels, then the added tokens (in special_tokens_map.json in their long form).
  ordered_json additional = ordered_json::array(), additional_in_map = ordered_json::array();
  for (int k = 0; k < Tokenizer::kNumSentinels; ++k) {
    additional.push_back(msg("<extra_id_", k, ">"));
    additional_in_map.push_back(msg("<extra_id_", k, ">"));
  }
  int64_t id = tokenizer.piece_count() + Tokenizer::kNumSentinels;
  for (const std::string& token : tokenizer.added_tokens()) {
    decoder[std::to_string(id++)] = added_token(token, false);
    additional.push_back(token);
    additional_in_map.push_back(special_token(token));
  }

  // The keys T5Tokenizer.save_pretrained writes, less model_max_length (its default is the same unbounded
  // length) and extra_special_tokens (empty, and a key that older transformers do not know).
  ordered_json config = ordered_json::object();
  config["add_prefix_space"] = true;
  config["added_tokens_decoder"] = decoder;
  config["additional_special_tokens"] = additional;
  config["clean_up_tokenization_spaces"] = false;  // as t5scale decodes (data/tokenizer.h)
  config["eos_token"] = "</s>";
  config["extra_ids"] = Tokenizer::kNumSentinels;
  config["legacy"] = true;  // the encoding data/tokenizer.h reproduces
  config["pad_token"] = "<pad>";
  config["sp_model_kwargs"] = ordered_json::object();
  config["tokenizer_class"] = "T5Tokenizer";
  config["unk_token"] = "<unk>";
  write_json(config, dir / "tokenizer_config.json");

  ordered_json special = ordered_json::object();
  special["additional_special_tokens"] = additional_in_map;
  special["eos_token"] = special_token("</s>");
  special["pad_token"] = special_token("<pad>");
  special["unk_token"] = special_token("<unk>");
  write_json(special, dir / "special_tokens_map.json");
  return {"spiece.model", "tokenizer_config.json", "special_tokens_map.json"};
}

}  // namespace t5scale
