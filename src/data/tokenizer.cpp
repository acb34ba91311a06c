#include "data/tokenizer.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "core/check.h"

namespace t5scale {

// ---- SHA-256 (FIPS 180-4) ----

namespace {

constexpr std::array<uint32_t, 64> kSha256RoundConstants = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

class Sha256 {
 public:
  void update(const unsigned char* data, size_t size) {
    total_bytes_ += size;
    while (size > 0) {
      const size_t take = std::min(size, block_.size() - block_used_);
      std::memcpy(block_.data() + block_used_, data, take);
      block_used_ += take;
      data += take;
      size -= take;
      if (block_used_ == block_.size()) {
        compress(block_.data());
        block_used_ = 0;
      }
    }
  }

  std::string hex_digest() {
    const uint64_t total_bits = total_bytes_ * 8;
    const unsigned char one_bit = 0x80;
    update(&one_bit, 1);
    const unsigned char zero = 0;
    while (block_used_ != 56) update(&zero, 1);
    unsigned char length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(total_bits >> (56 - 8 * i));
    update(length, 8);
    static const char* kHex = "0123456789abcdef";
    std::string out;
    for (uint32_t word : state_) {
      for (int shift = 28; shift >= 0; shift -= 4) out += kHex[(word >> shift) & 0xf];
    }
    return out;
  }

 private:
  static uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

  void compress(const unsigned char* block) {
    uint32_t w[64];
    for (int i = 0; i < 16; ++i) {
      w[i] = (uint32_t(block[4 * i]) << 24) | (uint32_t(block[4 * i + 1]) << 16) | (uint32_t(block[4 * i + 2]) << 8) |
             uint32_t(block[4 * i + 3]);
    }
    for (int i = 16; i < 64; ++i) {
      const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
    uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
    for (int i = 0; i < 64; ++i) {
      const uint32_t s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
      const uint32_t choose = (e & f) ^ (~e & g);
      const uint32_t t1 = h + s1 + choose + kSha256RoundConstants[i] + w[i];
      const uint32_t s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
      const uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
      const uint32_t t2 = s0 + majority;
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    state_[0] += a;
    state_[1] += b;
    state_[2] += c;
    state_[3] += d;
    state_[4] += e;
    state_[5] += f;
    state_[6] += g;
    state_[7] += h;
  }

  std::array<uint32_t, 8> state_ = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::array<unsigned char, 64> block_{};
  size_t block_used_ = 0;
  uint64_t total_bytes_ = 0;
};

}  // namespace

std::string sha256_hex(std::string_view bytes) {
  Sha256 hash;
  hash.update(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  return hash.hex_digest();
}

std::string sha256_file_hex(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  T5S_CHECK(in.good(), "cannot open '", path, "' to hash it");
  Sha256 hash;
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    hash.update(reinterpret_cast<const unsigned char*>(buffer.data()), static_cast<size_t>(in.gcount()));
  }
  T5S_CHECK(in.eof(), "error while reading '", path, "' to hash it");
  return hash.hex_digest();
}

// ---- Tokenizer ----

namespace {

// Python's str.isspace() for one code point: T5Tokenizer strips this whitespace around a sentinel.
bool is_python_whitespace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

// Length in bytes of the whitespace code point starting at text[i], or 0. Invalid UTF-8 is not whitespace.
size_t whitespace_at(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) return is_python_whitespace(b0) ? 1 : 0;
  size_t length = (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xe ? 3 : 0;  // whitespace lies below U+10000
  if (length == 0 || i + length > text.size()) return 0;
  uint32_t c = b0 & (length == 2 ? 0x1f : 0x0f);
  for (size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
    c = (c << 6) | (byte(i + k) & 0x3f);
  }
  return is_python_whitespace(c) ? length : 0;
}

// Start of the last UTF-8 code point ending at `end` (exclusive).
size_t previous_code_point(std::string_view text, size_t end) {
  size_t i = end - 1;
  while (i > 0 && end - i < 4 && (static_cast<unsigned char>(text[i]) & 0xc0) == 0x80) --i;
  return i;
}

std::string_view strip_right(std::string_view text) {
  while (!text.empty()) {
    const size_t start = previous_code_point(text, text.size());
    if (whitespace_at(text, start) != text.size() - start) break;
    text.remove_suffix(text.size() - start);
  }
  return text;
}

std::string_view strip_left(std::string_view text) {
  while (!text.empty()) {
    const size_t length = whitespace_at(text, 0);
    if (length == 0) break;
    text.remove_prefix(length);
  }
  return text;
}

// A special string found in the text: where, how long, its id, and whether whitespace around it is dropped.
struct SpecialMatch {
  size_t position = std::string_view::npos;
  size_t length = 0;
  int32_t id = 0;
  bool strip = false;
};

void check_status(const sentencepiece::util::Status& status, const std::string& what) {
  T5S_CHECK(status.ok(), what, ": ", status.ToString());
}

}  // namespace

Tokenizer::Tokenizer() : processor_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::string& model_path, const std::vector<std::string>& added_tokens) {
  Tokenizer tokenizer;
  tokenizer.model_path_ = model_path;
  std::ifstream in(model_path, std::ios::binary);
  T5S_CHECK(in.good(), "tokenizer '", model_path, "': cannot open the file");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  check_status(tokenizer.processor_->LoadFromSerializedProto(bytes),
               msg("tokenizer '", model_path, "': not a SentencePiece model"));
  tokenizer.sha256_ = sha256_hex(bytes);
  auto& sp = *tokenizer.processor_;
  tokenizer.piece_count_ = sp.GetPieceSize();
  T5S_CHECK(sp.pad_id() == kPadId && sp.eos_id() == kEosId && sp.unk_id() == kUnkId, "tokenizer '", model_path,
            "': T5 needs pad=0 eos=1 unk=2, the model has pad=", sp.pad_id(), " eos=", sp.eos_id(),
            " unk=", sp.unk_id(), " (train with --pad_id=0 --eos_id=1 --unk_id=2 --bos_id=-1)");
  // Prefix encoding (encode_truncated) is exact when no piece spans a word boundary: "▁" only at a piece's start.
  tokenizer.words_are_independent_ = true;
  const std::string space = "\xe2\x96\x81";  // U+2581, SentencePiece's whitespace mark
  for (int id = 0; id < sp.GetPieceSize(); ++id) {
    const std::string& piece = sp.IdToPiece(id);
    if (piece.find(space, 1) != std::string::npos && !sp.IsControl(id)) tokenizer.words_are_independent_ = false;
  }
  for (const std::string& token : added_tokens) {
    T5S_CHECK(!token.empty(), "tokenizer '", model_path, "': an added special token is empty");
    const bool is_piece = sp.PieceToId(token) != kUnkId || token == sp.IdToPiece(kUnkId);
    const bool is_sentinel = token.rfind("<extra_id_", 0) == 0;
    const bool seen = std::find(tokenizer.added_.begin(), tokenizer.added_.end(), token) != tokenizer.added_.end();
    if (!is_piece && !is_sentinel && !seen && token != "</s>" && token != "<pad>") tokenizer.added_.push_back(token);
  }
  return tokenizer;
}

int32_t Tokenizer::sentinel_id(int k) const {
  T5S_CHECK(k >= 0 && k < kNumSentinels, "sentinel <extra_id_", k, "> does not exist (0..", kNumSentinels - 1, ")");
  return static_cast<int32_t>(piece_count_ + kNumSentinels - 1 - k);
}

void Tokenizer::encode_piece_text(std::string_view text, std::vector<int32_t>* ids) const {
  if (text.empty()) return;
  std::vector<int> piece_ids;
  check_status(processor_->Encode(text, &piece_ids), "tokenizer '" + model_path_ + "': encode failed");
  ids->insert(ids->end(), piece_ids.begin(), piece_ids.end());
}

void Tokenizer::encode(std::string_view text, std::vector<int32_t>* ids) const {
  // T5Tokenizer first cuts the text at its added tokens (a trie over the raw text, earliest match first; none of
  // these strings is a prefix of another), then lets SentencePiece encode each piece of text in between.
  // The sentinels carry lstrip/rstrip: whitespace on both sides goes with them.
  size_t start = 0;         // start of the text not yet encoded
  bool strip_next = false;  // the last special string was a sentinel: drop whitespace after it
  size_t search = 0;
  while (true) {
    SpecialMatch match;
    for (size_t at = text.find('<', search); at != std::string_view::npos; at = text.find('<', at + 1)) {
      const std::string_view rest = text.substr(at);
      if (rest.rfind("<extra_id_", 0) == 0) {
        size_t digits = 0;
        while (10 + digits < rest.size() && digits < 3 && std::isdigit(static_cast<unsigned char>(rest[10 + digits]))) {
          ++digits;
        }
        if (digits > 0 && 10 + digits < rest.size() && rest[10 + digits] == '>' && (digits == 1 || rest[10] != '0')) {
          const int k = std::stoi(std::string(rest.substr(10, digits)));
          if (k < kNumSentinels) {
            match = {at, 11 + digits, sentinel_id(k), true};
            break;
          }
        }
      }
      if (rest.rfind("</s>", 0) == 0) {
        match = {at, 4, kEosId, false};
        break;
      }
      if (rest.rfind("<unk>", 0) == 0) {
        match = {at, 5, kUnkId, false};
        break;
      }
      if (rest.rfind("<pad>", 0) == 0) {
        match = {at, 5, kPadId, false};
        break;
      }
      bool found = false;
      for (size_t j = 0; j < added_.size(); ++j) {
        if (rest.rfind(added_[j], 0) == 0) {
          match = {at, added_[j].size(), static_cast<int32_t>(piece_count_ + kNumSentinels + j), false};
          found = true;
          break;
        }
      }
      if (found) break;
    }
    const size_t end = match.position == std::string_view::npos ? text.size() : match.position;
    std::string_view piece_text = text.substr(start, end - start);
    if (strip_next) piece_text = strip_left(piece_text);
    if (match.strip) piece_text = strip_right(piece_text);
    encode_piece_text(piece_text, ids);
    if (match.position == std::string_view::npos) break;
    ids->push_back(match.id);
    strip_next = match.strip;
    start = search = match.position + match.length;
  }
  ids->push_back(kEosId);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  encode(text, &ids);
  return ids;
}

bool Tokenizer::encode_truncated(std::string_view text, int64_t max_length, std::vector<int32_t>* ids) const {
  ids->clear();
  // Bytes of text per id are 3-5 in English; 6 per id makes one prefix enough almost always.
  constexpr int64_t kPrefixBytesPerId = 6;
  bool whole_text =
      max_length <= 0 || !words_are_independent_ || static_cast<int64_t>(text.size()) <= max_length * kPrefixBytesPerId;
  for (const std::string& token : added_) {
    if (token.find_first_of(" \t\n\r\f\v") != std::string::npos) whole_text = true;  // a cut could split it
  }
  for (int64_t prefix_bytes = max_length * kPrefixBytesPerId; !whole_text; prefix_bytes *= 2) {
    // Cut at an ASCII whitespace (whole words before it, so their pieces are final), never inside a character.
    size_t cut = static_cast<size_t>(prefix_bytes);
    while (cut < text.size() && text[cut] != ' ' && text[cut] != '\n' && text[cut] != '\t' && text[cut] != '\r') {
      ++cut;
    }
    if (cut >= text.size()) break;
    encode(text.substr(0, cut), ids);
    if (static_cast<int64_t>(ids->size()) - 1 >= max_length) {  // enough pieces (eos not counted): a cut for sure
      ids->resize(static_cast<size_t>(max_length - 1));
      ids->push_back(kEosId);
      return true;
    }
    ids->clear();
  }
  encode(text, ids);
  if (max_length <= 0 || static_cast<int64_t>(ids->size()) <= max_length) return false;
  ids->resize(static_cast<size_t>(max_length - 1));
  ids->push_back(kEosId);
  return true;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::vector<std::string> parts;
  std::vector<int> run;
  const auto flush = [&] {
    if (run.empty()) return;
    std::string text;
    check_status(processor_->Decode(run, &text), "tokenizer '" + model_path_ + "': decode failed");
    run.clear();
    const std::string_view stripped = strip_left(strip_right(text));
    if (!stripped.empty()) parts.emplace_back(stripped);
  };
  for (const int32_t id : ids) {
    T5S_CHECK(id >= 0, "tokenizer '", model_path_, "': cannot decode id ", id, ", ids are not negative");
    if (id == kPadId || id == kEosId) continue;
    if (id < piece_count_) {
      run.push_back(id);
      continue;
    }
    flush();
    if (id >= vocab_size()) {
      parts.push_back(beyond_vocabulary_placeholder(id));
    } else if (id < piece_count_ + kNumSentinels) {
      parts.push_back("<extra_id_" + std::to_string(piece_count_ + kNumSentinels - 1 - id) + ">");
    } else {
      parts.push_back(added_[static_cast<size_t>(id - piece_count_ - kNumSentinels)]);
    }
  }
  flush();
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += ' ';
    out += parts[i];
  }
  return out;
}

std::string Tokenizer::beyond_vocabulary_placeholder(int32_t id) { return "<id_" + std::to_string(id) + ">"; }

}  // namespace t5scale
