#include "job/training_job.h"

#include "job/training_job_internal.h"

namespace t5scale {

namespace training_job_internal {

namespace {

// Whether a run evaluates at all: during training, at its end, or alone.
bool evaluates_at_all(const EvalSettings& eval) {
  return eval.every_steps > 0 || eval.every_epochs > 0.0 || eval.at_end || eval.only;
}

// Whether step `step` is one of the evaluations during training (every `every_steps`; 0 = none).
bool evaluation_step(int64_t step, int64_t every_steps) { return every_steps > 0 && step % every_steps == 0; }

}  // namespace

int TrainingJob::run() {
  int world_size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  world_size_ = world_size;
  refuse_what_cannot_work(world_size);
  set_up_grid();
  take_run_lock();
  set_up_data();
  resolve();
  set_up_sampler();
  phase_ = "building the model and the optimizer";
  log(msg("[t5scale] building the model and the optimizer",
          config_.model.init_from.empty() ? std::string() : msg(", the weights from ", init_from_folder(config_))));
  set_up_model_and_trainer();
  set_up_records();
  install_preemption_handlers();
  phase_ = "resuming";
  if (!resume_or_start()) {  // complete already: the ending the sbatch script reads is the finished run's own
    record_exit_code(0);
    return 0;
  }
  // A collective that times out ends the job from inside the communicator (abort_job), without unwinding.
  set_failure_recorder([this](const std::string& error) { record_failure(error); });

  if (config_.eval.only) {
    evaluate_now(/*final_evaluation=*/true);
    return finish("completed");
  }

  log(msg("[t5scale] training: ", lr_plan_.describe(), "; ", total_steps_ - step_, " steps to go"));
  first_step_ = step_;
  last_step_line_ = Clock::now();
  while (step_ < total_steps_) {
    // All ranks agree, once per step, on a signal and on a checkpoint that is due by the clock. The flags as they
    // stand before the step are reduced beside it and read after it, when the step's own read-back has waited for
    // the device anyway: the agreement adds no host wait, and a signal is acted on at the end of the first step that
    // starts after it came (and of that step's evaluation).
    const bool checkpoint_due_by_time =
        config_.checkpoint.every_minutes > 0 && seconds_since(last_checkpoint_) >= config_.checkpoint.every_minutes * 60;
    // A step line due by the clock: rank 0's clock, since the line gathers every rank's telemetry. The first step's
    // line is always due: with slow steps it is the first sign that training runs, with the time left.
    const bool step_line_due_by_time =
        step_ == first_step_ ||
        (config_.train.log_every_s > 0 && seconds_since(last_step_line_) >= config_.train.log_every_s);
    torch::Tensor flags = torch::tensor({static_cast<int64_t>(preemption_signal() != 0),
                                         static_cast<int64_t>(rank0() && checkpoint_due_by_time),
                                         static_cast<int64_t>(rank0() && step_line_due_by_time)},
                                        torch::kInt64)
                              .to(device_);  // NCCL carries device tensors only
    grid_.world->all_reduce_max(flags);

    phase_ = msg("in training step ", step_ + 1);
    if (!train_step(flags)) {
      log(msg("[t5scale] the loss is not finite at step ", step_ + 1, ": stopping (diverged); the last good "
              "checkpoint is kept"));
      return finish("diverged");
    }
    const bool evaluation_due = evaluation_step(step_, resolved_.eval_every_steps);
    bool stop_early = false;
    if (evaluation_due) {
      evaluate_now(false);
      stop_early = early_stopping_ && early_stopping_->evaluations_without_improvement >= early_stopping_->patience;
    }
    if (config_.checkpoint.every_steps > 0 && step_ % config_.checkpoint.every_steps == 0) save_checkpoint();
    flags = flags.cpu();
    if (flags[0].item<int64_t>() != 0) {
      log(msg("[t5scale] preemption signal: checkpoint at step ", step_, ", then exit ", kRequeueExitCode,
              " for the requeue"));
      if (last_checkpoint_step_ != step_) save_checkpoint();
      return finish("preempted");
    }
    if (flags[1].item<int64_t>() != 0 && last_checkpoint_step_ != step_) save_checkpoint();
    if (stop_early) {
      log(msg("[t5scale] early stopping at step ", step_, ": ", early_stopping_->metric, " has not improved by more than ",
              early_stopping_->min_delta, " for ", early_stopping_->patience, " evaluations (best ",
              early_stopping_->best, " at step ", early_stopping_->best_step, ")"));
      break;
    }
  }
  if (config_.eval.at_end && !evaluation_step(step_, resolved_.eval_every_steps)) evaluate_now(true);
  if (config_.checkpoint.at_end && last_checkpoint_step_ != step_) save_checkpoint();
  if (!config_.export_.hf_dir.empty()) export_model();
  return finish("completed");
}

// The TP ranks of replica 0 gather the shards; the other replicas hold the same weights. The tokenizer files go
// beside them, so that transformers loads the folder whole.
void TrainingJob::export_model() {
  std::string tokenizer_note;
  if (grid_.dp_rank == 0) export_hf_checkpoint(*trainer_->model(), config_.export_.hf_dir);
  if (rank0()) {
    // The trained model is written: a tokenizer that cannot be found is said, and does not fail the run.
    try {
      const RunTokenizer tokenizer = find_run_tokenizer(config_);
      if (!tokenizer.model_path.empty()) {
        write_hf_tokenizer_files(tokenizer, model_config_.vocab_size, config_.export_.hf_dir);
      }
      tokenizer_note = tokenizer.model_path.empty() ? "; no tokenizer written: " + tokenizer.description
                                                    : "; tokenizer " + tokenizer.description;
    } catch (const Error& e) {
      tokenizer_note = std::string("; no tokenizer written: ") + e.what();
    }
  }
  log(msg("[t5scale] exported the model to ", config_.export_.hf_dir, " (Hugging Face layout", tokenizer_note, ")"));
}

void TrainingJob::refuse_what_cannot_work(int world_size) {
  throw_if_errors(problems_before_start(config_, world_size), source_);
}

void TrainingJob::set_up_grid() {
  GridOptions options;
  options.tp = static_cast<int>(config_.parallel.tp);
  options.collective_timeout_s = config_.parallel.collective_timeout_s;
  std::string cuda_unusable_reason;
  const bool cuda = cuda_usable(&cuda_unusable_reason);
  options.backend = resolve_backend(config_.parallel.backend, cuda, cuda ? "" : gpu_node_evidence(),
                                    cuda_unusable_reason);
  grid_ = ProcessGrid::create(options);  // NCCL: this rank's GPU is chosen and made current here, before any tensor
  device_ = grid_.device();              // the model, the batches and the job's own collectives live there
  torch::manual_seed(static_cast<uint64_t>(config_.run.seed));  // the replicated dropout stream: alike everywhere
  if (config_.precision == Precision::kAuto) {
    // From here on the config holds what was chosen: the model, the run file and the checkpoints record it.
    std::string why;
    config_.precision = resolve_precision(config_.precision, device_.is_cuda(), cuda_device_has_bf16(device_), &why);
    log("[t5scale] precision auto: " + why);
  }
}

// Rank 0 takes <output_dir>/<run>.lock before anything of the run is read or written: a second job with the same
// run name and output folder ends here, its error naming the owner (rank 0's error ends the whole job).
void TrainingJob::take_run_lock() {
  if (!rank0()) return;
  const fs::path folder = config_.run.output_dir.empty() ? fs::path(".") : fs::path(config_.run.output_dir);
  std::error_code error;
  fs::create_directories(folder, error);
  T5S_CHECK(!error, "run.output_dir: cannot create '", folder.string(), "': ", error.message());
  lock_ = std::make_unique<RunLock>((folder / (config_.run.name + ".lock")).string(), config_.run.name);
  if (!lock_->takeover_note().empty()) log("[t5scale] " + lock_->takeover_note());
  // An earlier attempt's ending is replaced by "started": every rank is past MPI_Init by now (the grid's
  // communicators are made), so a launcher wrapper that finds no file after its ranks died knows they never all
  // started, and may launch them again (the rendered sbatch scripts do; src/study/sbatch_render.cpp).
  try {
    write_text_file_atomically(exit_code_path(), "started\n");
  } catch (const Error&) {
    fs::remove(exit_code_path(), error);  // at least not an earlier attempt's ending; the run's own writes will say
  }
  // Failure-note space reserved by an earlier attempt's ranks that were killed before they could give it back.
  ReservedFailureNote::give_back_every_ranks_space((folder / (config_.run.name + ".failed.json")).string());
}

void TrainingJob::set_up_data() {
  const auto& d = config_.data;
  if (d.dataset == "synthetic") {
    // The same examples as `t5scale-prep synthetic` writes to a file for this seed and vocabulary.
    SyntheticDatasetOptions options;
    options.task.vocab_size = d.synthetic_vocab_size;
    options.task.seed = static_cast<uint64_t>(config_.run.seed);
    options.train_examples = d.synthetic_examples;
    options.validation_examples = std::max<int64_t>(d.synthetic_examples / 8, 64);
    train_examples_ = std::make_unique<InMemoryExamples>("synthetic:train", synthetic_split(options, "train"));
    eval_examples_ = std::make_unique<InMemoryExamples>("synthetic:validation", synthetic_split(options, "validation"));
    vocab_size_ = d.synthetic_vocab_size;
  } else {
    dataset_ = std::shared_ptr<TokenizedDataset>(TokenizedDataset::open(d.dataset).release());
    vocab_size_ = dataset_->info().vocab_size;
    set_up_tokenizer();
    const auto& split = dataset_->split(d.train_split);
    // A bad id stops the job here, not hours into training. One rank reads the split: an error on it ends the
    // whole job, and the others need not read the same file world-size times over.
    if (grid_.world_rank() == 0) split.check_token_ids();
    auto split_examples = [&](const std::string& split) {
      return std::make_unique<TruncatedExamples>(std::make_unique<TokenizedSplitExamples>(dataset_, split),
                                                 d.max_source_length, d.max_target_length);
    };
    train_examples_ = split_examples(d.train_split);
    if (dataset_->has_split(d.eval_split)) eval_examples_ = split_examples(d.eval_split);
    // The evaluation split too: a bad id in it would otherwise stop the job at its first evaluation, hours in.
    if (grid_.world_rank() == 0 && evaluates_at_all(config_.eval) && eval_examples_) {
      dataset_->split(d.eval_split).check_token_ids();
    }
  }
  T5S_CHECK(train_examples_->size() > 0, train_examples_->name(), " has no examples");
  T5S_CHECK(!evaluates_at_all(config_.eval) || eval_examples_, "eval: the dataset ", d.dataset, " has no split '",
            d.eval_split, "' (data.eval_split); set eval.every_steps: 0, eval.every_epochs: 0 and eval.at_end: "
            "false to train without evaluation");

  collate_options_.pad_to_multiple_of = padded_length_multiple(config_);
}

// The run's one tokenizer, the one that made the dataset (by hash): data.tokenizer, else the file the dataset names,
// else model.init_from's spiece.model (find_run_tokenizer). A model whose own tokenizer did not make the dataset is
// refused: its ids would mean other words to it. Text metrics (ROUGE, SQuAD, classification F1) score decoded text,
// so a run that asks for them without a tokenizer is refused here, before anything is computed; a dataset of
// synthetic ids (t5scale-prep synthetic) has no text beyond its ids, and scores those.
void TrainingJob::set_up_tokenizer() {
  const auto& d = config_.data;
  const TokenizedDatasetInfo& info = dataset_->info();
  namespace fs = std::filesystem;
  if (!config_.model.init_from.empty() && !info.made_without_tokenizer()) {
    const fs::path model_tokenizer = fs::path(init_from_folder(config_)) / "spiece.model";
    std::error_code ec;
    if (fs::is_regular_file(model_tokenizer, ec)) {
      const std::string sha256 = sha256_file_hex(model_tokenizer.string());
      T5S_CHECK(sha256 == info.tokenizer_sha256, "model.init_from ", config_.model.init_from, " has its own tokenizer ",
                model_tokenizer.string(), " (sha256 ", sha256, "), but data.dataset ", d.dataset,
                " was made with another one, ", info.tokenizer_file, " (sha256 ", info.tokenizer_sha256,
                "): the dataset's token ids would mean other words to the model. Prepare the data with the model's "
                "tokenizer (t5scale-prep --tokenizer ", config_.model.init_from, "), or train without model.init_from");
    }
  }
  if (!d.tokenizer.empty()) {
    tokenizer_ = Tokenizer::load(d.tokenizer, info.added_tokens);
    dataset_->check_tokenizer(tokenizer_->sha256(), tokenizer_->vocab_size());
    return;
  }
  if (info.made_without_tokenizer()) return;
  std::string missing;
  try {
    const RunTokenizer found = find_run_tokenizer(config_);
    if (!found.model_path.empty()) {
      tokenizer_ = Tokenizer::load(found.model_path, found.added_tokens);
      dataset_->check_tokenizer(tokenizer_->sha256(), tokenizer_->vocab_size());
      if (rank0()) log(msg("[t5scale] tokenizer ", found.description));
      return;
    }
    missing = found.description;
  } catch (const Error& e) {
    missing = e.what();
  }
  EvaluationOptions asked;
  set_metrics_from_list(asked, config_.eval.metrics);
  std::vector<std::string> text_metrics;
  if (asked.rouge) text_metrics.push_back("rouge");
  if (asked.squad) text_metrics.push_back("squad");
  if (asked.classification) text_metrics.push_back("classification");
  T5S_CHECK(!evaluates_at_all(config_.eval) || text_metrics.empty(), "eval.metrics: ", join(text_metrics, ", "),
            " score(s) text, and this run has no tokenizer to decode its generations with (", missing,
            "). Set data.tokenizer to the SentencePiece model that made ", d.dataset, " (sha256 ",
            info.tokenizer_sha256, "), or score the loss alone (eval.metrics: loss)");
}

// The run resolved from the config, the grid and the data, as t5scale-study plans it (resolve_run): every problem
// it finds stops the job here, before the model is built.
void TrainingJob::resolve() {
  RunWorld world;
  world.world_size = world_size_;
  world.on_gpu = device_.is_cuda();
  world.device_share_bytes = device_share_bytes();
  const NodeGroup node;
  world.ranks_per_node = node.local_size();
  world.nodes = std::max<int64_t>(1, world_size_ / world.ranks_per_node);
  // A rates file that cannot be read stops the job here, naming the file and the key.
  world.rates = machine_rates_for(config_.telemetry.machine_rates, device_.is_cuda(), cuda_device_name(device_));
  RunData data;
  data.vocab_size = vocab_size_;
  data.train_examples = train_examples_->size();
  data.source_lengths = train_examples_->source_lengths();
  data.target_lengths = train_examples_->target_lengths();
  resolved_ = resolve_run(config_, world, data);
  if (!resolved_.errors.empty()) {
    throw Error(msg(source_, ": this run cannot start:\n  ", join(resolved_.errors, "\n  ")));
  }
  T5S_CHECK(resolved_.batch && resolved_.model && resolved_.memory_inputs && (resolved_.lr || config_.eval.only),
            "the run resolved without ", !resolved_.batch ? "a batch split" : !resolved_.model ? "a model shape"
                                         : !resolved_.memory_inputs ? "a memory model" : "an LR plan");
  const std::string rows_note = unused_embedding_rows_note(config_, *resolved_.model, vocab_size_);
  if (!rows_note.empty()) log("[t5scale] note: " + rows_note);
  if (!resolved_.checkpointing.fits) {
    throw Error(msg(source_, ": this run cannot start:\n  ",
                    memory_refusal(world.device_share_bytes, NodeGroup().local_size())));
  }
  std::string against_device;  // " of 23.54 GiB (0.4%; fits: the limit is 95%)"
  if (world.device_share_bytes > 0) {
    const double share = static_cast<double>(world.device_share_bytes);
    char text[96];
    std::snprintf(text, sizeof(text), " of %s (%.1f%%; fits: the limit is %.0f%%)", gib_text(share).c_str(),
                  100.0 * static_cast<double>(resolved_.checkpointing.memory.total_bytes()) / share,
                  100.0 * kUsableMemoryFraction);
    against_device = text;
  }
  log(msg("[t5scale] memory per rank, predicted: ", resolved_.checkpointing.memory.describe(), against_device));
  // The offloaded optimizer's host memory, all of the node's ranks together, against what the node has now (on the
  // CPU the host is the device, checked above: host_bytes is 0 there).
  const int64_t host_bytes = resolved_.checkpointing.memory.host_bytes;
  if (host_bytes > 0) {
    const NodeMemory node_memory = read_node_memory();
    const std::string refusal =
        host_memory_refusal(host_bytes, world.ranks_per_node, node_memory.total_bytes, node_memory.available_bytes);
    if (!refusal.empty()) throw Error(msg(source_, ": this run cannot start:\n  ", refusal));
    log(msg("[t5scale] host memory per node, predicted: ",
            gib_text(static_cast<double>(host_bytes * world.ranks_per_node)), " of ",
            gib_text(static_cast<double>(node_memory.available_bytes)), " available"));
  }
  if (resolved_.step_time) {
    log(msg("[t5scale] step time, predicted (", world.rates->name, "): ", resolved_.step_time->describe()));
  }
  batch_ = *resolved_.batch;
  model_config_ = *resolved_.model;
  checkpoint_every_blocks_ = resolved_.checkpointing.checkpoint_every_blocks;
  if (requested_checkpoint_every_blocks(config_.parallel) == kChooseCheckpointing) {
    log("[t5scale] activation checkpointing (auto): " +
        resolved_.checkpointing.describe_against(world.device_share_bytes));
  } else if (requested_selective_recomputation(config_.parallel)) {
    log("[t5scale] activation checkpointing: " + resolved_.checkpointing.describe());
  }
  if (!config_.eval.only) {  // evaluation alone takes no optimizer step
    lr_plan_ = *resolved_.lr;
    total_steps_ = lr_plan_.total_steps;
  }
}

void TrainingJob::set_up_sampler() {
  BatchSamplerOptions options = resolved_.sampler;
  options.dp_rank = grid_.dp_rank;
  sampler_ = std::make_unique<DistributedBatchSampler>(train_examples_->source_lengths(),
                                                       train_examples_->target_lengths(), options);
  prefetcher_ = std::make_unique<StepDataPrefetcher>(*sampler_, *train_examples_, collate_options_,
                                                     /*pin_memory=*/device_.is_cuda(), model_config_);
}

void TrainingJob::set_up_model_and_trainer() {
  const Precision precision = config_.precision;
  rng_ = std::make_shared<ParallelRng>(static_cast<uint64_t>(config_.run.seed), grid_.tp_rank, device_);
  T5Model model(model_config_, grid_.tp, torch::TensorOptions().dtype(compute_dtype(precision)).device(device_), rng_);
  if (!config_.model.init_from.empty()) {
    load_hf_checkpoint(*model, config_.model.init_from);
  } else {
    model->initialize_weights(static_cast<uint64_t>(config_.run.seed));
  }
  if (checkpoint_every_blocks_ > 0) model->set_activation_checkpointing(checkpoint_every_blocks_);
  model->set_selective_recomputation(resolved_.checkpointing.selective_recomputation);
  model->set_sequence_parallel(config_.parallel.sequence_parallel);
  switch (config_.model.attention) {
    case ModelSettings::Attention::kAuto: break;
    case ModelSettings::Attention::kSdpa: model->set_attention_kernel(AttentionKernel::kSdpa); break;
    case ModelSettings::Attention::kExplicit: model->set_attention_kernel(AttentionKernel::kExplicit); break;
    case ModelSettings::Attention::kCudnn: model->set_attention_kernel(AttentionKernel::kCudnn); break;
  }
  if (config_.parallel.sequence_parallel) {
    log(grid_.tp_size > 1 ? msg("[t5scale] sequence parallelism: each TP rank holds 1/", grid_.tp_size,
                                " of the tokens between the tensor-parallel regions; lengths padded to multiples of ",
                                padded_length_multiple(config_))
                          : std::string("[t5scale] sequence parallelism: no effect at tp 1"));
  }
  attention_kernels_ = model->attention_kernels();
  log("[t5scale] attention: " + attention_kernels_);

  trainer_ = std::make_unique<ParallelTrainer>(model, grid_, training_options_for(config_));

  if (!config_.early_stopping.metric.empty()) {
    EarlyStopping e;
    e.metric = config_.early_stopping.metric;
    e.higher_better = config_.early_stopping.mode == EarlyStoppingSettings::Mode::kAuto
                          ? higher_is_better(e.metric)
                          : config_.early_stopping.mode == EarlyStoppingSettings::Mode::kMax;
    e.min_delta = config_.early_stopping.min_delta;
    e.patience = config_.early_stopping.patience;
    early_stopping_ = e;
  }
}

void TrainingJob::set_up_records() {
  const std::string checkpoint_dir = !config_.checkpoint.dir.empty()
                                         ? config_.checkpoint.dir
                                         : (fs::path(config_.run.output_dir) / (config_.run.name + ".ckpt")).string();
  checkpoints_ = std::make_unique<ShardedCheckpointStore>(checkpoint_dir, static_cast<int>(config_.checkpoint.keep_last),
                                                          grid_.world, grid_.tp_rank, grid_.dp_rank, device_);

  RunRecordInputs in;
  in.config = &config_;
  in.model = model_config_;
  in.world_size = world_size_;
  in.batch = batch_;
  in.lr_plan = lr_plan_;
  in.steps_per_epoch = sampler_->steps_per_epoch();
  in.device = device_;
  in.checkpoint_every_blocks = checkpoint_every_blocks_;
  in.recomputation = resolved_.checkpointing.describe();
  in.attention_kernels = attention_kernels_;
  in.predicted_memory_bytes = resolved_.checkpointing.memory.total_bytes();
  in.predicted_host_memory_bytes = resolved_.checkpointing.memory.host_bytes;
  in.predicted_flops_per_step = resolved_.flops_per_step;
  in.predicted_step_time_s =
      resolved_.step_time ? resolved_.step_time->total_s : std::numeric_limits<double>::quiet_NaN();
  record_ = std::make_unique<RunRecord>(in, grid_);
}

// Why the run is refused when the memory model's prediction for a rank does not fit its share of the device: the
// prediction by what holds it, the share, and each setting that would lower the prediction, with its figure.
std::string TrainingJob::memory_refusal(int64_t share_bytes, int64_t ranks_per_node) const {
  const MemoryPrediction& predicted = resolved_.checkpointing.memory;
  RemedyLimits limits;
  limits.world_size = world_size_;
  limits.ranks_per_node = ranks_per_node;
  limits.device_memory_bytes = share_bytes;
  std::vector<std::string> remedies;
  bool one_fits = false;
  for (const MemoryRemedy& r : memory_remedies(*resolved_.model, *resolved_.memory_inputs, limits)) {
    remedies.push_back(r.describe());
    one_fits = one_fits || r.fits;
  }
  const std::string beyond = "more processes (a larger parallel.tp over more GPUs) or a device with more memory";
  const std::string share_of = config_.parallel.device_memory_gib > 0 ? std::string("parallel.device_memory_gib")
                               : device_.is_cuda()                    ? device_.str()
                                                                      : device_.str() + " memory over this node's ranks";
  return msg("parallel: predicted memory per rank ", predicted.describe(), " does not fit the ",
             gib_text(static_cast<double>(share_bytes)), " of ", share_of, " with 5% to spare; nothing was allocated. ",
             remedies.empty() ? "No setting of this run's world lowers it: " + beyond + "."
                              : "Predicted per rank with each change: " + join(remedies, "; ") + "." +
                                    (one_fits ? std::string() : " None of them fits: " + beyond + "."),
             " (If the device has more memory than this, say so with parallel.device_memory_gib.)");
}

// The memory this rank may use: parallel.device_memory_gib when given, else its GPU, or on the CPU the host's memory
// over the node's ranks (collective: the node's ranks are counted). Activation checkpointing auto chooses by it, and
// a run whose predicted memory does not fit it is refused before any tensor is allocated.
int64_t TrainingJob::device_share_bytes() const {
  int64_t share_bytes = 0;
  if (config_.parallel.device_memory_gib > 0) {
    share_bytes = gib_to_bytes(config_.parallel.device_memory_gib);
  } else {
    share_bytes = device_memory_bytes(device_);
    if (!device_.is_cuda()) share_bytes /= NodeGroup().local_size();
  }
  T5S_CHECK(share_bytes > 0 || requested_checkpoint_every_blocks(config_.parallel) != kChooseCheckpointing,
            "parallel.activation_checkpointing: auto needs the memory of ", device_.str(),
            ", which this build cannot read; set true or false, or state it with parallel.device_memory_gib");
  return std::max<int64_t>(share_bytes, 0);
}

bool TrainingJob::train_step(torch::Tensor& flags) {
  const auto step_start = Clock::now();
  // Data: this replica's micro-batches on the host, collated while the previous step ran (identical on the TP
  // ranks of the replica); the trainer copies them to the device. The data time is the wait for them.
  double data_time_s = 0.0;
  const StepData data = prefetcher_->next(&data_time_s);
  const std::vector<Seq2SeqBatch>& micro_batches = data.micro_batches;

  const double lr = lr_plan_.lr_at(step_);
  const StepResult result = trainer_->step(micro_batches, lr);
  step_ += 1;
  const double step_time_s = seconds_since(step_start);
  if (!result.skipped && !std::isfinite(result.loss)) return false;

  // The trainer filled its fields (loss, lr, phase times, ...); the job adds what it alone knows.
  StepRecord observation = result;
  observation.step = step_;
  observation.epoch = data.epoch_after;
  observation.samples = data.samples;              // this replica's; the record sums over replicas
  observation.source_tokens = data.source_tokens;  // likewise
  observation.step_time_s = step_time_s;
  observation.data_time_s = data_time_s;
  observation.model_flops = data.model_flops;      // likewise, on the examples' own lengths
  // The buffered telemetry is gathered for a log line and at each run-file flush. The flags were reduced beside the
  // step: reading them now waits for nothing the step had not waited for.
  flags = flags.cpu();
  const bool log_now = step_ % config_.train.log_every == 0 || step_ == total_steps_ || flags[2].item<int64_t>() != 0;
  const bool gather_now = log_now || step_ % config_.telemetry.flush_every_steps == 0;
  const auto telemetry_start = Clock::now();
  const StepSummary summary = record_->observe_step(observation, gather_now);
  telemetry_time_s_ += seconds_since(telemetry_start);

  if (log_now) {
    const double remaining_s = summary.mean_step_time_s * static_cast<double>(total_steps_ - step_);
    char line[512];
    std::snprintf(line, sizeof(line),
                  "step %lld/%lld | epoch %.2f | loss %.4f | lr %.3e | grad %.3f | %.0f tok/s | %.0f samples/s | "
                  "MFU %s | mem %s | ETA %s%s",
                  static_cast<long long>(step_), static_cast<long long>(total_steps_), observation.epoch, result.loss,
                  result.lr, result.grad_norm, summary.tokens_per_s, summary.samples_per_s,
                  summary.mfu_text.c_str(), summary.memory_text.c_str(), format_duration(remaining_s).c_str(),
                  result.skipped ? " | skipped (fp16 overflow)" : "");
    log(line);
    last_step_line_ = Clock::now();
  }
  return true;
}

void TrainingJob::evaluate_now(bool final_evaluation) {
  phase_ = msg("in the evaluation after step ", step_);
  EvaluationOptions options;
  set_metrics_from_list(options, config_.eval.metrics);
  options.max_examples = config_.eval.max_examples;
  options.batch_size = config_.eval.batch_size;
  options.generate = config_.eval.generate;
  options.max_new_tokens = config_.eval.max_new_tokens;
  options.pad_to_multiple_of = padded_length_multiple(config_);
  options.data_vocab_size = vocab_size_;
  auto& model = *trainer_->model();
  // Said as it starts: an evaluation that generates may take minutes, with nothing else printed meanwhile.
  const int64_t examples = options.max_examples > 0 ? std::min(options.max_examples, eval_examples_->size())
                                                    : eval_examples_->size();
  log(msg("[t5scale] evaluating at step ", step_, ": ", examples, " examples (", config_.eval.metrics,
          options.generate ? msg("; greedy generations of up to ", options.max_new_tokens, " tokens") : std::string(),
          ")"));
  const EvaluationResult result =
      evaluate(model, grid_, *eval_examples_, options, [this](const std::vector<int32_t>& ids) { return decode(ids); },
               device_);
  model.train();
  record_->observe_evaluation(step_, prefetcher_->epoch_fraction(), result);

  std::string line = msg("eval step ", step_, " | ", result.num_examples, " examples");
  for (const auto& [name, value] : result.metrics) {
    char text[64];
    std::snprintf(text, sizeof(text), " | %s %.4f", name.c_str(), value);
    line += text;
  }
  if (result.generated_ids_beyond_vocab > 0) {
    line += msg(" | ", result.generated_ids_beyond_vocab, " generated ids beyond the data's ", vocab_size_,
                " (shown as <id_N>)");
  }
  log(line + msg(" | ", format_duration(result.eval_time_s)));

  // Writing the generations is rank 0's own work after every collective of the evaluation: a failure there is not
  // the model's, and the steps trained since the last checkpoint are kept before the job ends.
  std::string problem;
  if (rank0() && config_.eval.write_generations && !result.generations.empty()) {
    try {
      write_generations(result);
    } catch (const std::exception& e) {
      problem = user_message(e);
    }
  }
  checkpoint_then_fail_if_any_rank(problem);
  if (early_stopping_ && !final_evaluation) {
    const auto found = result.metrics.find(early_stopping_->metric);
    T5S_CHECK(found != result.metrics.end(), "early_stopping.metric: '", early_stopping_->metric,
              "' was not computed (eval.metrics is '", config_.eval.metrics, "')");
    early_stopping_->observe(found->second, step_);
  }
}

void TrainingJob::write_generations(const EvaluationResult& result) {
  if (!generations_) {
    const fs::path path = fs::path(config_.run.output_dir) / (config_.run.name + ".eval.jsonl");
    generations_ = std::make_unique<std::ofstream>(path, std::ios::app);
    T5S_CHECK(generations_->good(), "cannot write the generations to ", path.string());
  }
  for (const auto& g : result.generations) {
    *generations_ << nlohmann::json({{"step", step_}, {"index", g.index}, {"source", g.source},
                                     {"prediction", g.prediction}, {"reference", g.reference}})
                         .dump()
                  << "\n";
  }
  generations_->flush();
  T5S_CHECK(generations_->good(), "writing the generations of step ", step_, " failed (disk full?)");
}

// The exit code the job ends with, in <output_dir>/<run>.exit_code (rank 0): mpirun answers a SIGTERM sent to it
// with exit code 1 whatever its ranks did, so a wrapper (the rendered sbatch scripts) reads the job's own code
// there: 75 after a preemption checkpoint, 3 diverged, 2 failed, 0 completed; "started" while the job runs (or
// after it died without ending, e.g. by SIGKILL).
std::string TrainingJob::exit_code_path() const {
  return (fs::path(config_.run.output_dir.empty() ? "." : config_.run.output_dir) / (config_.run.name + ".exit_code"))
      .string();
}

void TrainingJob::record_exit_code(int code) const {
  if (!rank0() || !lock_) return;  // only the job that owns the run's place writes there
  try {
    write_text_file_atomically(exit_code_path(), msg(code, "\n"));
  } catch (const Error&) {
    // Best effort: the launcher's own exit code stands.
  }
}

int TrainingJob::finish(const std::string& status) {
  const int exit_code = status == "preempted" ? kRequeueExitCode : status == "diverged" ? kDivergedExitCode : 0;
  record_exit_code(exit_code);
  if (trainer_) {
    // The calls cuDNN's attention did not take show only once they ran: named here if there were any.
    const std::string attention = trainer_->model()->attention_kernels();
    if (attention != attention_kernels_) log("[t5scale] attention, as it ran: " + attention);
  }
  RunOutcome outcome;
  outcome.status = status;
  outcome.telemetry_time_s = telemetry_time_s_;
  const std::string card = record_->finish(outcome);
  if (rank0()) std::cout << card << std::flush;
  return exit_code;
}

std::string TrainingJob::decode(const std::vector<int32_t>& ids) const {
  if (tokenizer_) return tokenizer_->decode(ids);
  return join(ids, " ");
}

}  // namespace training_job_internal

using training_job_internal::TrainingJob;

std::vector<ConfigError> problems_before_start(const RunConfig& config, int64_t world_size) {
  std::vector<ConfigError> errors = validate_for_world(config, world_size);
  const int64_t planned = config.run.planned_world_size;
  if (planned > 0 && planned != world_size) {
    // A study's config carries its grid: on another world its batch split (fixed_micro), LR and cost would not be
    // the ones planned, and the study's status would still call the run its own.
    errors.push_back({"run.planned_world_size",
                      msg("this config was planned (t5scale-study) for ", planned, " processes and was started with ",
                          world_size, "; start it as planned (its sbatch script), or set run.planned_world_size=0 "
                          "to run it on this world, whose batch split, LR and cost then differ from the plan")});
  }
  for (auto& e : check_files(config)) errors.push_back(e);
  return errors;
}

int run_training_job(const RunConfig& config, const std::string& config_source) {
  TrainingJob job(config, config_source);
  try {
    try {
      return job.run();
    } catch (const c10::Error& e) {
      if (!is_out_of_memory(e)) throw;
      // An allocation the memory model did not foresee: reported as ours, with where it happened and the figures.
      throw Error(job.out_of_memory_report(e.what_without_backtrace()));
    } catch (const OutOfMemoryError& e) {
      throw Error(job.out_of_memory_report(e.what()));
    }
  } catch (const std::exception& e) {
    job.record_failure(e.what());  // before the job, and the run file with it, is destroyed
    throw;
  }
}

}  // namespace t5scale
