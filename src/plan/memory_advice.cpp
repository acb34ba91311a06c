#include "plan/memory_advice.h"

#include <algorithm>

#include "config/run_config.h"
#include "core/check.h"
#include "core/units.h"

namespace t5scale {
namespace {

// The largest divisor of n below it (1 for a prime).
int64_t largest_proper_divisor(int64_t n) {
  for (int64_t d = n / 2; d > 1; --d) {
    if (n % d == 0) return d;
  }
  return 1;
}

}  // namespace

std::string MemoryRemedy::describe() const {
  return msg(setting, ": ", gib_text(static_cast<double>(memory.total_bytes())),
             memory.host_bytes > 0 ? msg(" (host ", gib_text(static_cast<double>(memory.host_bytes)), ")") : "",
             fits ? ", fits" : ", does not fit");
}

std::vector<MemoryRemedy> memory_remedies(const ModelConfig& model, const MemoryInputs& now, const RemedyLimits& limits) {
  const int64_t now_bytes = predict_memory(model, now).total_bytes();
  std::vector<MemoryRemedy> remedies;
  auto offer = [&](const std::string& setting, const MemoryInputs& tried) {
    MemoryRemedy remedy{setting, predict_memory(model, tried), false};
    if (remedy.memory.total_bytes() >= now_bytes) return;  // changes nothing worth saying
    remedy.fits = fits_device_memory(remedy.memory.total_bytes(), limits.device_memory_bytes);
    remedies.push_back(remedy);
  };

  if (now.checkpoint_every_blocks != 1) {
    MemoryInputs tried = now;
    tried.checkpoint_every_blocks = 1;
    if (limits.device_memory_bytes > 0) {
      const CheckpointingChoice least = choose_activation_checkpointing(model, now, limits.device_memory_bytes);
      if (least.fits) tried.checkpoint_every_blocks = least.checkpoint_every_blocks;
    }
    offer(msg("parallel.activation_checkpointing=true with parallel.checkpoint_every_blocks=",
              tried.checkpoint_every_blocks),
          tried);
  }
  if (now.tp > 1 && !now.sequence_parallel) {
    MemoryInputs tried = now;
    tried.sequence_parallel = true;
    offer("parallel.sequence_parallel=true", tried);
  }
  if (now.dp > 1 && !now.zero1 && !now.adafactor) {
    MemoryInputs tried = now;
    tried.zero1 = true;
    offer("parallel.zero1=true", tried);
  } else if (now.dp > 1 && now.zero1 && !now.zero2) {
    MemoryInputs tried = now;
    tried.zero2 = true;
    offer("parallel.zero2=true", tried);
  }
  const int64_t wider_tp = 2 * static_cast<int64_t>(now.tp);
  if (wider_tp <= limits.ranks_per_node && limits.world_size % wider_tp == 0 && now.dp % 2 == 0 &&
      check_tp_divides(model, wider_tp).empty()) {
    MemoryInputs tried = now;
    tried.tp = static_cast<int>(wider_tp);
    tried.dp = now.dp / 2;
    tried.micro_batch.rows = 2 * now.micro_batch.rows;  // the same global batch over half the replicas
    offer(msg("parallel.tp=", wider_tp, " (dp ", now.dp, " -> ", tried.dp, ", micro-batch ", now.micro_batch.rows,
              " -> ", tried.micro_batch.rows, ")"),
          tried);
  }
  if (now.micro_batch.rows > 1) {
    MemoryInputs tried = now;
    tried.micro_batch.rows = largest_proper_divisor(now.micro_batch.rows);
    offer(msg("train.grad_accumulation x", now.micro_batch.rows / tried.micro_batch.rows, " (micro-batch ",
              now.micro_batch.rows, " -> ", tried.micro_batch.rows, ", the same global batch)"),
          tried);
  }
  const bool one_fits = std::any_of(remedies.begin(), remedies.end(), [](const MemoryRemedy& r) { return r.fits; });
  if (!one_fits && remedies.size() > 1) {
    // None fits alone: the changes offered, all together (the least checkpointing that then fits, else every block).
    MemoryInputs together = now;
    std::vector<std::string> settings;
    for (const MemoryRemedy& r : remedies) {
      if (r.setting.rfind("parallel.zero", 0) == 0) {
        together.zero1 = true;
        together.zero2 = now.zero1;
        settings.push_back(r.setting);
      } else if (r.setting.rfind("parallel.tp=", 0) == 0) {
        together.tp = static_cast<int>(wider_tp);
        together.dp = now.dp / 2;
        together.micro_batch.rows = 2 * now.micro_batch.rows;
        settings.push_back(msg("parallel.tp=", wider_tp));
      } else if (r.setting == "parallel.sequence_parallel=true") {
        together.sequence_parallel = true;
        settings.push_back(r.setting);
      }
    }
    if (now.micro_batch.rows > 1 || together.micro_batch.rows > 1) {
      const int64_t before = together.micro_batch.rows;
      together.micro_batch.rows = largest_proper_divisor(before);
      settings.push_back(msg("train.grad_accumulation x", before / together.micro_batch.rows, " (micro-batch ",
                             before, " -> ", together.micro_batch.rows, ")"));
    }
    if (now.checkpoint_every_blocks != 1) {
      int64_t k = 1;
      if (limits.device_memory_bytes > 0) {
        const CheckpointingChoice least = choose_activation_checkpointing(model, together, limits.device_memory_bytes);
        if (least.fits) k = least.checkpoint_every_blocks;
      }
      together.checkpoint_every_blocks = k;
      if (k > 0) settings.push_back(msg("parallel.activation_checkpointing=true, checkpoint_every_blocks=", k));
    }
    offer("all together: " + join(settings, ", "), together);
  }
  const bool any_fits = std::any_of(remedies.begin(), remedies.end(), [](const MemoryRemedy& r) { return r.fits; });
  if (!any_fits && now.on_gpu && !now.offload_optimizer) {
    // Nothing else fits, alone or together: the optimizer's state to the host (ZeRO-Offload), with every block
    // recomputed where it does not fit without. Its host memory is in the prediction's host_bytes.
    MemoryInputs tried = now;
    tried.offload_optimizer = true;
    std::string setting = "parallel.offload_optimizer=true";
    if (!fits_device_memory(predict_memory(model, tried).total_bytes(), limits.device_memory_bytes) &&
        now.checkpoint_every_blocks != 1) {
      tried.checkpoint_every_blocks = 1;
      tried.selective_recomputation = false;
      setting += " with parallel.activation_checkpointing=true, parallel.checkpoint_every_blocks=1";
    }
    offer(setting, tried);
  }
  return remedies;
}

std::string host_memory_refusal(int64_t host_bytes_per_rank, int64_t ranks_per_node, int64_t node_total_bytes,
                                int64_t node_available_bytes) {
  T5S_CHECK(host_bytes_per_rank >= 0 && ranks_per_node >= 1, "host memory check: ", host_bytes_per_rank,
            " bytes per rank over ", ranks_per_node, " rank(s) per node");
  if (host_bytes_per_rank == 0) return "";
  const int64_t node_bytes = host_bytes_per_rank * ranks_per_node;
  if (fits_device_memory(node_bytes, node_available_bytes)) return "";
  return msg("parallel.offload_optimizer: predicted host memory ", gib_text(static_cast<double>(host_bytes_per_rank)),
             " per rank x ", ranks_per_node, " rank(s) on this node = ", gib_text(static_cast<double>(node_bytes)),
             " does not fit the node's ", gib_text(static_cast<double>(node_available_bytes)), " available (MemAvailable; "
             "MemTotal ", gib_text(static_cast<double>(node_total_bytes)), ") with 5% to spare; nothing was allocated. "
             "parallel.zero1 (the state sharded over DP) or fewer ranks per node lower it; or keep the state on "
             "the device (parallel.offload_optimizer=false)");
}

}  // namespace t5scale
