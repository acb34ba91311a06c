// The T5 tokenizer: a SentencePiece model plus T5's sentinels, encoding exactly as Hugging Face's
// T5Tokenizer(vocab_file, extra_ids=100) does (its default, "legacy" behaviour), and the training of a unigram
// model with T5's special ids. Also the SHA-256 that names a tokenizer file in the datasets made with it.
//
// Id layout for a model of N pieces (a T5 spiece.model has N = 32000):
//   0 pad, 1 eos, 2 unk, 3 .. N-1 the model's pieces (user-defined symbols among them),
//   N .. N+99 the sentinels, <extra_id_0> = N+99 down to <extra_id_99> = N (extra_id_0 is the LAST id),
//   N+100 .. the added tokens (special tokens that the model does not hold as one piece), in the order given,
//   as T5Tokenizer.add_tokens(tokens, special_tokens=True) numbers them.
// vocab_size() = N + 100 + number of added tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace t5scale {

// Lower-case hex SHA-256 (FIPS 180-4) of bytes / of a file's bytes.
std::string sha256_hex(std::string_view bytes);
std::string sha256_file_hex(const std::string& path);

class Tokenizer {
 public:
  static constexpr int32_t kPadId = 0;
  static constexpr int32_t kEosId = 1;
  static constexpr int32_t kUnkId = 2;
  static constexpr int32_t kNumSentinels = 100;

  // Loads a SentencePiece .model. The model must have T5's ids (pad 0, eos 1, unk 2). `added_tokens` are
  // special tokens (a recipe's, e.g. "<question>"): those the model holds as a single piece (a user-defined
  // symbol) keep that piece's id, the others become added tokens after the sentinels.
  static Tokenizer load(const std::string& model_path, const std::vector<std::string>& added_tokens = {});

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  const std::string& model_path() const { return model_path_; }
  const std::string& sha256() const { return sha256_; }  // of the .model file's bytes
  int64_t piece_count() const { return piece_count_; }   // N
  int64_t vocab_size() const { return piece_count_ + kNumSentinels + static_cast<int64_t>(added_.size()); }
  int32_t sentinel_id(int k) const;  // <extra_id_k>
  // The special tokens that are not pieces of the model, in id order (ids N+100, N+101, ...).
  const std::vector<std::string>& added_tokens() const { return added_; }

  // Appends the ids of `text` and eos to `ids`. Sentinels, added tokens and "</s>", "<unk>", "<pad>" written in
  // the text become their ids, as in T5Tokenizer (whitespace around a sentinel is dropped). Thread-safe.
  void encode(std::string_view text, std::vector<int32_t>* ids) const;
  std::vector<int32_t> encode(std::string_view text) const;
  // encode() cut to `max_length` ids (0 = no limit) keeping the eos: max_length - 1 ids, then eos, as
  // T5Tokenizer(truncation=True, max_length=...) does. Returns whether it cut. Replaces `ids`. For a long text
  // only a prefix is encoded: the pieces of a whitespace-separated word do not depend on the words after it when
  // no piece of the model holds "▁" (SentencePiece's space) past its first character, which load() checks.
  bool encode_truncated(std::string_view text, int64_t max_length, std::vector<int32_t>* ids) const;

  // Text of ids, skipping pad and eos: runs of pieces decoded by SentencePiece, sentinels and added tokens as
  // their strings, the parts joined by one space (T5Tokenizer.decode with skip_special_tokens=False, less the
  // pad and eos strings). An id at or above vocab_size() becomes beyond_vocabulary_placeholder(id): a model's
  // embedding often has more rows than the tokenizer has ids (T5: 32,128 rows, 32,100 ids), and a weak model
  // generates them. Throws on a negative id.
  std::string decode(const std::vector<int32_t>& ids) const;
  // "<id_613>": the text of an id the tokenizer does not have.
  static std::string beyond_vocabulary_placeholder(int32_t id);

 private:
  Tokenizer();
  void encode_piece_text(std::string_view text, std::vector<int32_t>* ids) const;

  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
  std::string model_path_;
  std::string sha256_;
  int64_t piece_count_ = 0;
  std::vector<std::string> added_;
  bool words_are_independent_ = false;  // see encode_truncated()
};

}  // namespace t5scale
