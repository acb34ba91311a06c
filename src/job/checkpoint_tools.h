// What t5scale-ckpt does with a training checkpoint, in one process and without a job: describe it, write it again
// for another grid, export its model as a Hugging Face folder. Each works from the checkpoint alone (the manifest
// holds the model, the grid, the optimizer layout and the run's resolved config).
#pragma once

#include <string>
#include <vector>

#include "config/run_config.h"
#include "io/sharded_checkpoint.h"
#include "model/t5_model.h"

namespace t5scale {

// The model's shape, as the manifest records it.
ModelConfig checkpoint_model_config(const OpenedCheckpoint& checkpoint);

// The run's config as resolved when the checkpoint was written (the manifest's run_state.config_yaml).
RunConfig checkpoint_run_config(const OpenedCheckpoint& checkpoint);

// The checkpoint's model whole, in fp32 on the CPU, in training mode as any new module: the trained parameters from
// the fp32 master weights, frozen ones (which the optimizer does not hold) initialised as the run initialised them.
// Refuses a format 1 checkpoint (no optimizer layout) and state for a parameter the model does not have.
T5Model checkpoint_model(const OpenedCheckpoint& checkpoint);

// Model, grid, step, optimizer state, sizes and every file's checksum (open_checkpoint() verified them), as text.
std::string describe_checkpoint(const OpenedCheckpoint& checkpoint);

struct ReshardOptions {
  int tp = 1;
  int dp = 1;
  int zero1 = -1;   // 1 on, 0 off, -1: as the checkpoint
  std::string out;  // a checkpoint folder; the new step folder is made inside it
};

struct ReshardResult {
  std::string folder;             // the new step folder
  int64_t bytes = 0;              // its files together
  int64_t peak_resident_bytes = 0;  // this process's high-water mark
};

// The checkpoint written again for tp x dp (ZeRO-1 as asked), as that grid's job would have written it: each
// target rank's model shard and optimizer are built in turn in this process (one rank's weights, buckets and
// optimizer state at a time, plus one full parameter's state while it is cut), filled from the checkpoint and
// written. Refuses, before allocating a tensor, a grid the model cannot take (naming why), a folder that already
// holds that step, and a format 1 checkpoint.
ReshardResult reshard_checkpoint(const OpenedCheckpoint& checkpoint, const ReshardOptions& options);

struct ExportResult {
  std::vector<std::string> files;  // the files written into the folder
  std::string tokenizer;           // where the tokenizer came from, or why none was written
};

// The model as a Hugging Face folder (config.json + model.safetensors, fp32): the trained parameters from the fp32
// master weights, frozen ones (which the optimizer does not hold) initialised as the run initialised them; beside
// them the run's SentencePiece tokenizer as transformers' T5Tokenizer files (data/hf_tokenizer_files.h), so that
// AutoTokenizer and AutoModelForSeq2SeqLM load the folder whole. `tokenizer`: "" = the run's (find_run_tokenizer),
// a .model file instead, or "none". A run without a tokenizer (synthetic data) exports the model alone and says
// so in the result. Holds the whole model in memory. Refuses, before writing anything, a folder that exists and is
// not empty and a run whose tokenizer is not found.
ExportResult export_checkpoint_hf(const OpenedCheckpoint& checkpoint, const std::string& folder,
                                  const std::string& tokenizer = "");

}  // namespace t5scale
