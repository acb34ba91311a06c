// The training job's checkpoints: what identifies them, saving one, resuming from one (RNG streams, sampler, loss
// scale, progress) and which config changes a resume accepts.
#include "job/training_job_internal.h"

#include "telemetry/run_file_state.h"

namespace t5scale::training_job_internal {

// What a checkpoint must match to be resumed by this job: the grid and the model.
CheckpointIdentity TrainingJob::checkpoint_identity() const {
  CheckpointIdentity identity;
  identity.tp = grid_.tp_size;
  identity.dp = grid_.dp_size;
  identity.model_name = model_config_.name;
  identity.parameter_count = parameter_count(model_config_);
  identity.model_config = hf_config_json(model_config_);
  return identity;
}

// The dropout streams as resumed_rng_state() chooses them (on another grid: see there).
void TrainingJob::restore_rng(const LoadedCheckpoint& loaded) {
  rng_->set_state(resumed_rng_state(loaded, grid_.tp_rank, grid_.tp_size, grid_.dp_rank, rng_->get_state()));
  if (loaded.saved.tp != grid_.tp_size) {
    log(msg("[t5scale] tp changed from ", loaded.saved.tp, " to ", grid_.tp_size,
            ": the tensor-parallel dropout streams start afresh from run.seed"));
  }
}

bool TrainingJob::resume_or_start() {
  const CheckpointIdentity identity = checkpoint_identity();
  const auto start = Clock::now();
  std::optional<LoadedCheckpoint> loaded;
  if (config_.checkpoint.resume == CheckpointSettings::Resume::kAuto) {
    std::vector<std::string> skipped;
    loaded = checkpoints_->load_latest(identity, &skipped);
    if (!loaded && !skipped.empty()) {
      // Checkpoints were found and none can be used: starting from step 0 would silently throw the run away.
      throw Error(msg("checkpoint.resume: auto found ", skipped.size(), " checkpoint(s) in ", checkpoints_->dir(),
                      " and can use none:\n  ", join(skipped, "\n  "),
                      "\nNothing was changed. To start this run over, set checkpoint.resume=never (the old run file "
                      "and checkpoint folder are then kept aside, renamed *.previous.<time>), or repair or remove "
                      "the damaged checkpoints."));
    }
    for (const auto& note : skipped) log("[t5scale] " + note);
  }
  if (!loaded) {
    // From step 0 where an earlier run left checkpoints or a run file (checkpoint.resume: never, or a run killed
    // before its first checkpoint): they are kept beside, renamed *.previous.<time>, never overwritten.
    const std::string kept = checkpoints_->keep_earlier_checkpoints_aside();
    if (!kept.empty()) log("[t5scale] starting afresh: the earlier checkpoints are kept as " + kept);
    record_->start(/*resumed_from_step=*/-1);
    log(msg("[t5scale] run file ", record_->path(), "; checkpoints in ", checkpoints_->dir()));
    return true;
  }
  accept_config_changes(*loaded);
  const size_t changes_now = config_changes_.size() -
                             loaded->state.value("config_changes", std::vector<std::string>{}).size();
  // A finished run started again with nothing changed: there is nothing to do, and its record stays as it is (a
  // resume would append an attempt that trains no step). A changed key (more steps, another evaluation) continues it.
  if (!config_.eval.only && loaded->step >= total_steps_ && changes_now == 0) {
    const std::string status = rank0() ? closed_run_file_status(record_->path()) : "";
    if (lowest_rank_text(*grid_.world, device_, status) == "completed") {
      log(msg("[t5scale] run ", config_.run.name, " is complete: ", record_->path(), " says completed, and its last "
              "checkpoint (", loaded->folder, ") is at step ", loaded->step, " of ", total_steps_, ". Nothing was "
              "done and nothing was changed. For a new run with this config, give it a name of its own (run.name=",
              config_.run.name, "-2), or start this one over (checkpoint.resume=never: the old run file and "
              "checkpoints are kept aside, renamed *.previous.<time>); to train it further, raise train.max_steps "
              "or train.epochs."));
      return false;
    }
  }
  // Optimizer state (fp32 master weights and moments: the parameters are written back from them), RNG streams,
  // the sampler's position and the loss scale: exactly the state the uninterrupted run had after this step. On
  // another grid the optimizer state is cut again; the sampler's position and the global batches do not depend on
  // the grid.
  const std::string how = load_optimizer_state(*loaded, trainer_->optimizer());
  restore_rng(*loaded);
  log(msg("[t5scale] ", how, "; checkpoint verified and read in ", seconds_text(seconds_since(start))));
  const nlohmann::json& s = loaded->state;
  prefetcher_->restore(s.at("sampler").get<SamplerPosition>());
  trainer_->set_loss_scale_state(s.at("loss_scale").get<double>(), s.at("steps_since_overflow").get<int64_t>());
  step_ = loaded->step;
  telemetry_time_s_ = s.value("telemetry_time_s", 0.0);  // the card counts every attempt's steps
  if (early_stopping_ && s.contains("early_stopping")) early_stopping_->from_json(s.at("early_stopping"));
  last_checkpoint_step_ = step_;
  record_->start(/*resumed_from_step=*/step_, config_changes_);
  log(msg("[t5scale] resumed from ", loaded->folder, " at step ", step_, " (epoch ",
          prefetcher_->position().epoch, ", step ", prefetcher_->position().step_in_epoch, " of it)"));
  return true;
}

// The config this job resumes with against the checkpoint's: a change to what the data order or the record means
// is refused unless checkpoint.allow_config_change; every change is logged and recorded (the run file's
// config_changes, carried from checkpoint to checkpoint) with the step from which it holds.
void TrainingJob::accept_config_changes(const LoadedCheckpoint& loaded) {
  const nlohmann::json& state = loaded.state;
  if (state.contains("config_changes")) config_changes_ = state.at("config_changes").get<std::vector<std::string>>();
  if (!state.contains("config_yaml")) return;  // written before configs were kept: nothing to compare
  const RunConfig saved =
      parse_run_config(state.at("config_yaml").get<std::string>(), loaded.folder + "/manifest.json");
  std::vector<std::string> refused;
  // The global batch as each grid resolves it: the data order follows it, whatever the split over the grid.
  const int64_t saved_global_batch = resolve_batch(saved, int64_t{loaded.saved.tp} * loaded.saved.dp).global_batch;
  if (saved_global_batch != batch_.global_batch) {
    const std::string change = msg("the global batch (resolved): ", saved_global_batch, " -> ", batch_.global_batch);
    if (config_.checkpoint.allow_config_change) {
      config_changes_.push_back(msg("step ", loaded.step, ": ", change));
      log("[t5scale] config changed on resume: step " + std::to_string(loaded.step) + ": " + change);
    } else {
      refused.push_back(msg("the global batch: ", saved_global_batch, " in the checkpoint (tp ", loaded.saved.tp,
                            " x dp ", loaded.saved.dp, "), ", batch_.global_batch, " on this grid"));
    }
  }
  for (const ConfigChange& change : config_changes(saved, config_)) {
    const std::string line = msg("step ", loaded.step, ": ", change.key, ": ", change.before, " -> ", change.after);
    if (change.needs_permission && !config_.checkpoint.allow_config_change) {
      refused.push_back(msg(change.key, ": ", change.before, " in the checkpoint, ", change.after, " now"));
    } else {
      config_changes_.push_back(line);
      log("[t5scale] config changed on resume: " + line);
    }
  }
  if (!refused.empty()) {
    // A changed config on an existing run name is most often a new run meant: that choice first.
    throw Error(msg("cannot resume from ", loaded.folder, " with this config: it differs from the checkpoint's in ",
                    refused.size(), " key(s) that change the data order or what the run's record means:\n  ",
                    join(refused, "\n  "), "\nNothing was changed. For a new run with this config, give it a name "
                    "of its own (run.name=", config_.run.name, "-2), or start this run over (checkpoint.resume=never: "
                    "the old run file and checkpoints are kept aside, renamed *.previous.<time>). To continue this "
                    "run instead, resume with the checkpoint's values, or set checkpoint.allow_config_change=true to "
                    "continue with the new ones (each change is recorded in the run file, with the step it took "
                    "effect)."));
  }
}

// Collective, at a point every rank reaches: when a rank met an error outside the model (`mine`, "" when none),
// every rank writes the checkpoint of this step (unless there is one), then ends with that rank's error.
void TrainingJob::checkpoint_then_fail_if_any_rank(const std::string& mine) {
  const std::string problem = lowest_rank_text(*grid_.world, device_, mine);
  if (problem.empty()) return;
  if (!config_.eval.only && last_checkpoint_step_ != step_) {
    log(msg("[t5scale] error outside the model at step ", step_, ": writing a checkpoint before the job ends"));
    save_checkpoint();
  }
  // Every rank knows the error: rank 0 records it in the run file, the others leave no note of their own.
  if (!rank0()) record_->leave_failure_to_rank0();
  throw Error(problem);
}

NamedTensors TrainingJob::checkpoint_tensors() {
  // Every rank writes its RNG streams; the optimizer state once per TP rank without ZeRO-1.
  NamedTensors tensors = optimizer_checkpoint_tensors(trainer_->optimizer());
  const ParallelRng::State rng = rng_->get_state();
  tensors.emplace_back("rng.default", rng.default_generator);
  tensors.emplace_back("rng.tensor_parallel", rng.tensor_parallel);
  return tensors;
}

nlohmann::json TrainingJob::run_state() const {
  nlohmann::json state = {{"sampler", prefetcher_->position()},
                          {"loss_scale", trainer_->loss_scale()},
                          {"steps_since_overflow", trainer_->steps_since_overflow()},
                          {"telemetry_time_s", telemetry_time_s_},
                          {"config_yaml", to_yaml(config_)},
                          {"config_changes", config_changes_}};
  if (early_stopping_) state["early_stopping"] = early_stopping_->to_json();
  return state;
}

void TrainingJob::save_checkpoint() {
  phase_ = msg("writing the checkpoint of step ", step_);
  const auto start = Clock::now();
  const CheckpointIdentity identity = checkpoint_identity();
  record_->flush();  // every step up to the checkpoint is on disk before it
  const std::string folder = checkpoints_->save(step_, checkpoint_tensors(), identity, run_state(),
                                                optimizer_layout(trainer_->optimizer()));
  last_checkpoint_ = Clock::now();
  last_checkpoint_step_ = step_;
  log(msg("[t5scale] checkpoint ", folder, " written in ", seconds_text(seconds_since(start))));
}

}  // namespace t5scale::training_job_internal
