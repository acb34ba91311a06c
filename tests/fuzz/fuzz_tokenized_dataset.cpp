// libFuzzer harness of the tokenized dataset reader: any bytes as a dataset file. A bad file may give a
// t5scale::Error; nothing else may be thrown, and a file that opens must keep the reader's promises: offsets from 0
// to the token count, lengths that match them, examples of those lengths ending with eos, ids inside the vocabulary,
// and no HDF5 object left open once the reader is gone.
// The seeds (corpus/fuzz_tokenized_dataset/) are small files written by t5scale-prep.
// fuzz-sources: src/data/tokenized_dataset.cpp src/core/hdf5_check.cpp src/core/hdf5_attributes.cpp
// fuzz-libs: -L/usr/lib/x86_64-linux-gnu/hdf5/serial -lhdf5
#include <hdf5.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "core/check.h"
#include "data/tokenized_dataset.h"
#include "fuzz_assert.h"


namespace {

// The reader opens files by name: each input is written to one file of this process.
const std::string& scratch_path() {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir != nullptr ? dir : "/tmp") + "/t5scale-fuzz-dataset-" + std::to_string(getpid()) + ".h5";
  }();
  return path;
}

void check_split(const t5scale::TokenizedDataset& dataset, const t5scale::TokenizedSplit& split) {
  const int64_t n = split.size();
  T5S_FUZZ_ASSERT(n >= 0);
  T5S_FUZZ_ASSERT(static_cast<int64_t>(split.source_offsets().size()) == n + 1);
  T5S_FUZZ_ASSERT(static_cast<int64_t>(split.target_offsets().size()) == n + 1);
  T5S_FUZZ_ASSERT(split.source_offsets().front() == 0 && split.target_offsets().front() == 0);
  T5S_FUZZ_ASSERT(split.source_offsets().back() == split.statistics().num_source_tokens);
  T5S_FUZZ_ASSERT(split.statistics().num_examples == n);
  if (n == 0) return;
  // A few examples, one by one and as a batch (with a repeat): each either reads to its length or is refused.
  const std::vector<int64_t> picks = {0, n / 2, n - 1, 0};
  for (const int64_t i : picks) {
    try {
      const t5scale::TokenSequences e = split.example(i);
      T5S_FUZZ_ASSERT(static_cast<int64_t>(e.source.size()) == split.source_length(i));
      T5S_FUZZ_ASSERT(static_cast<int64_t>(e.target.size()) == split.target_length(i));
      T5S_FUZZ_ASSERT(!e.source.empty() && e.source.back() == dataset.info().eos_id);
      for (const int32_t id : e.source) T5S_FUZZ_ASSERT(id >= 0 && id < dataset.info().vocab_size);
      for (const int32_t id : e.target) T5S_FUZZ_ASSERT(id >= 0 && id < dataset.info().vocab_size);
    } catch (const t5scale::Error&) {
    }
  }
  try {
    const auto batch = split.examples(picks);
    T5S_FUZZ_ASSERT(batch.size() == picks.size());
    T5S_FUZZ_ASSERT(batch.front().source == batch.back().source);
  } catch (const t5scale::Error&) {
  }
  try {
    split.check_token_ids();
  } catch (const t5scale::Error&) {
  }
}

}  // namespace

// HDF5 1.10.8 leaks a few bytes of a decoded header message when it refuses a damaged object header (its
// H5O_protect error path, reached from H5Aexists and H5Oopen): the library's, once per bad file. Without this
// suppression LeakSanitizer would stop every run at the first damaged header; leaks of t5scale's own code are
// still reported (their stacks do not end in libhdf5).
extern "C" const char* __lsan_default_suppressions() { return "leak:libhdf5_serial.so\nleak:libhdf5.so\n"; }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  {
    std::ofstream out(scratch_path(), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    const auto dataset = t5scale::TokenizedDataset::open(scratch_path());
    for (const std::string& name : dataset->split_names()) check_split(*dataset, dataset->split(name));
    try {
      dataset->check_tokenizer("not-the-hash", dataset->info().vocab_size);
      T5S_FUZZ_ASSERT(dataset->info().tokenizer_sha256 == "not-the-hash");
    } catch (const t5scale::Error&) {
    }
    try {
      dataset->split("no-such-split/");
      T5S_FUZZ_ASSERT(false);
    } catch (const t5scale::Error&) {
    }
  } catch (const t5scale::Error&) {
  }
  // The reader is gone: every file, dataset and dataspace it opened is closed, whatever the input was.
  T5S_FUZZ_ASSERT(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL) == 0);
  std::remove(scratch_path().c_str());
  return 0;
}
