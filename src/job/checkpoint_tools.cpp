#include "job/checkpoint_tools.h"

#include <filesystem>
#include <iomanip>
#include <set>
#include <sstream>

#include "config/hf_config.h"
#include "core/check.h"
#include "data/hf_tokenizer_files.h"
#include "dist/local_shard_communicator.h"
#include "io/hf_checkpoint.h"
#include "telemetry/probes.h"
#include "train/optimizer_resharding.h"
#include "train/parallel_trainer.h"

namespace t5scale {
namespace fs = std::filesystem;

namespace {

const nlohmann::json& layout_of(const OpenedCheckpoint& checkpoint) {
  T5S_CHECK(!checkpoint.loaded.optimizer_layout.is_null(), checkpoint.loaded.folder,
            " was written in checkpoint format 1, without the optimizer layout this needs");
  return checkpoint.loaded.optimizer_layout;
}

std::string mib(int64_t bytes) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(2) << static_cast<double>(bytes) / (1024.0 * 1024.0) << " MiB";
  return out.str();
}

}  // namespace

ModelConfig checkpoint_model_config(const OpenedCheckpoint& checkpoint) {
  const CheckpointIdentity& identity = checkpoint.loaded.saved;
  return hf_config_from_json(identity.model_config, checkpoint.loaded.folder + "/manifest.json", identity.model_name);
}

RunConfig checkpoint_run_config(const OpenedCheckpoint& checkpoint) {
  const nlohmann::json& state = checkpoint.loaded.state;
  T5S_CHECK(state.contains("config_yaml"), checkpoint.loaded.folder, "/manifest.json has no run_state.config_yaml");
  return parse_run_config(state.at("config_yaml").get<std::string>(), checkpoint.loaded.folder + "/manifest.json");
}

T5Model checkpoint_model(const OpenedCheckpoint& checkpoint) {
  const RunConfig run = checkpoint_run_config(checkpoint);
  const SavedOptimizerState saved(checkpoint.loaded.folder, layout_of(checkpoint));
  const ModelConfig model_config = checkpoint_model_config(checkpoint);
  const ProcessGrid solo = ProcessGrid::solo();
  T5Model model(model_config, solo.tp, torch::kFloat32);
  auto params = model->named_parameters();
  if (saved.parameters().size() < params.size()) {
    // Frozen parameters never changed: they are what the run started from.
    if (run.model.init_from.empty()) {
      model->initialize_weights(static_cast<uint64_t>(run.run.seed));
    } else {
      load_hf_checkpoint(*model, run.model.init_from);
    }
  }
  torch::NoGradGuard no_grad;
  for (const ParameterLayout& layout : saved.parameters()) {
    T5S_CHECK(params.contains(layout.name), checkpoint.loaded.folder, " holds state for '", layout.name,
              "', which model '", model_config.name, "' does not have");
    params[layout.name].copy_(saved.full_bucket_state("master", layout.name));
  }
  return model;
}

std::string describe_checkpoint(const OpenedCheckpoint& checkpoint) {
  const LoadedCheckpoint& loaded = checkpoint.loaded;
  const nlohmann::json& manifest = checkpoint.manifest;
  const ModelConfig model = checkpoint_model_config(checkpoint);
  std::ostringstream out;
  out << "checkpoint  " << loaded.folder << " (format " << manifest.at("format_version").get<int>() << ", written "
      << manifest.value("created_utc", "?") << ")\n";
  out << "model       " << loaded.saved.model_name << ": " << loaded.saved.parameter_count << " parameters; d_model "
      << model.d_model << ", d_ff " << model.d_ff << ", " << model.num_layers << "+" << model.num_decoder_layers
      << " layers, " << model.num_heads << " heads, vocabulary " << model.vocab_size << "\n";
  out << "step        " << loaded.step;
  if (loaded.state.contains("sampler")) {
    out << "; sampler at epoch " << loaded.state["sampler"].value("epoch", -1) << ", step "
        << loaded.state["sampler"].value("step_in_epoch", -1) << " of it";
  }
  if (loaded.state.contains("loss_scale")) out << "; loss scale " << loaded.state["loss_scale"].get<double>();
  out << "\n";
  out << "grid        tp " << loaded.saved.tp << " x dp " << loaded.saved.dp;
  const nlohmann::json& layout = loaded.optimizer_layout;
  if (!layout.is_null()) {
    out << (layout.at("zero1").get<bool>() ? ", ZeRO-1" : ", no ZeRO") << "; optimizer "
        << layout.at("optimizer").get<std::string>() << "\n";
    // The state kinds, from the names in TP rank 0 / DP rank 0's file.
    const SafetensorsFile first =
        SafetensorsFile::open((fs::path(loaded.folder) / checkpoint_shard_name(0, 0)).string());
    std::set<std::string> kinds;
    for (const std::string& name : first.names()) {
      if (name.rfind("optimizer.", 0) == 0) kinds.insert(parse_state_name(name.substr(10)).kind);
    }
    out << "state       " << layout.at("parameters").size() << " trained parameters in "
        << layout.at("bucket_elements").size() << " buckets; " << join(kinds, ", ") << "\n";
  } else {
    out << "\nstate       (format 1: no optimizer layout; resumes on its own grid only)\n";
  }
  int64_t total = 0;
  std::ostringstream files;
  for (const auto& [name, entry] : manifest.at("files").items()) {
    total += entry.at("bytes").get<int64_t>();
    files << "  " << std::left << std::setw(28) << name << std::right << std::setw(14) << entry.at("bytes").get<int64_t>()
          << " B  checksum " << entry.at("checksum").get<std::string>() << "\n";
  }
  out << "files       " << manifest.at("files").size() << " files, " << mib(total)
      << "; every size and checksum verified\n"
      << files.str();
  return out.str();
}

ReshardResult reshard_checkpoint(const OpenedCheckpoint& checkpoint, const ReshardOptions& options) {
  const LoadedCheckpoint& loaded = checkpoint.loaded;
  const nlohmann::json& saved_layout = layout_of(checkpoint);
  const ModelConfig model_config = checkpoint_model_config(checkpoint);
  T5S_CHECK(options.tp >= 1 && options.dp >= 1, "--tp and --dp must be at least 1, got ", options.tp, " and ",
            options.dp);
  const auto problems = ProcessGrid::validate(options.tp * options.dp, options.tp, model_config);
  if (!problems.empty()) {
    std::string message = msg("--tp ", options.tp, ": model '", loaded.saved.model_name, "' cannot be split so:");
    for (const auto& problem : problems) message += "\n  " + problem;
    throw Error(message);
  }
  RunConfig run = checkpoint_run_config(checkpoint);
  run.parallel.tp = options.tp;
  run.parallel.zero1 = options.zero1 < 0 ? saved_layout.at("zero1").get<bool>() : options.zero1 == 1;
  run.parallel.zero2 = false;  // ZeRO-2 checkpoints are ZeRO-1's: the same owned ranges of the optimizer state
  const ParallelTrainingOptions training = training_options_for(run);
  T5S_CHECK(!(run.parallel.zero1 && training.optimizer == OptimizerKind::kAdafactor),
            "--zero1 true: the checkpoint's optimizer is adafactor, which has no ZeRO-1");
  const SavedOptimizerState saved(loaded.folder, saved_layout);
  CheckpointFolderWriter writer(options.out, loaded.step);

  // Each target rank in turn, as its job would build it: the model shard over a stand-in TP group at its rank, the
  // buckets and optimizer over a stand-in DP group at its rank. Without ZeRO-1, DP ranks other than 0 write only
  // their dropout streams, and need no optimizer.
  nlohmann::json target_layout;
  const auto dtype = compute_dtype(training.precision);
  for (int t = 0; t < options.tp; ++t) {
    for (int d = 0; d < options.dp; ++d) {
      ProcessGrid grid;
      grid.tp_size = options.tp;
      grid.dp_size = options.dp;
      grid.tp_rank = t;
      grid.dp_rank = d;
      grid.tp = std::make_shared<LocalShardCommunicator>(options.tp, "tp", t);
      grid.dp = std::make_shared<LocalShardCommunicator>(options.dp, "dp", d);
      grid.world = std::make_shared<LocalShardCommunicator>(options.tp * options.dp, "world", grid.world_rank());
      auto rng = std::make_shared<ParallelRng>(static_cast<uint64_t>(run.run.seed), t);
      NamedTensors tensors;
      if (run.parallel.zero1 || d == 0) {
        T5Model model(model_config, grid.tp, torch::TensorOptions().dtype(dtype), rng);
        ParallelTrainer trainer(model, grid, training);
        load_resharded_state(saved, trainer.optimizer());
        tensors = optimizer_checkpoint_tensors(trainer.optimizer());
        if (target_layout.is_null()) target_layout = optimizer_layout(trainer.optimizer());
      }
      const ParallelRng::State streams = resumed_rng_state(loaded, t, options.tp, d, rng->get_state());
      tensors.emplace_back("rng.default", streams.default_generator);
      tensors.emplace_back("rng.tensor_parallel", streams.tensor_parallel);
      writer.write_shard(t, d, tensors);
    }
  }
  CheckpointIdentity identity = loaded.saved;
  identity.tp = options.tp;
  identity.dp = options.dp;
  ReshardResult result;
  result.folder = writer.finish(identity, loaded.state, target_layout);
  for (const auto& entry : fs::directory_iterator(result.folder)) {
    if (entry.is_regular_file()) result.bytes += static_cast<int64_t>(entry.file_size());
  }
  result.peak_resident_bytes = peak_resident_set_bytes();
  return result;
}

ExportResult export_checkpoint_hf(const OpenedCheckpoint& checkpoint, const std::string& folder,
                                  const std::string& tokenizer) {
  std::error_code error;
  T5S_CHECK(!fs::exists(folder) || fs::is_empty(folder, error), folder,
            " exists and is not empty; it is left as it is (choose another folder)");
  const RunConfig run = checkpoint_run_config(checkpoint);
  RunTokenizer run_tokenizer;
  if (tokenizer == "none") {
    run_tokenizer.description = "--tokenizer none";
  } else {
    try {
      run_tokenizer = find_run_tokenizer(run, tokenizer);
    } catch (const Error& e) {
      throw Error(msg(e.what(), ". Give the SentencePiece model with --tokenizer FILE, or export the model alone with "
                                "--tokenizer none"));
    }
  }
  // Built before the folder is made: a checkpoint whose model cannot be built leaves nothing behind.
  T5Model model = checkpoint_model(checkpoint);
  const ModelConfig& model_config = model->config();
  ExportResult result;
  fs::create_directories(folder);
  if (!run_tokenizer.model_path.empty()) {
    // First: a tokenizer with more ids than the model has rows is refused before the model is written.
    result.files = write_hf_tokenizer_files(run_tokenizer, model_config.vocab_size, folder);
    result.tokenizer = run_tokenizer.description;
  } else {
    result.tokenizer = "no tokenizer written: " + run_tokenizer.description;
  }
  export_hf_checkpoint(*model, folder);
  result.files.insert(result.files.begin(), {"config.json", "model.safetensors"});
  return result;
}

}  // namespace t5scale
