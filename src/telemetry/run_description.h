// What the caller tells the run file about a run: its root attributes (the run file adds format, schema_version,
// start_time_utc, status, attempt, resumed_from_step, error and error_step itself), declared once, here. The
// struct, the attributes written, their kinds in the generated schema, and the order in which they are written all
// follow from T5SCALE_RUN_DESCRIPTION_FIELDS, so a caller cannot leave one out, add one, or give the wrong kind.
//
// Each line: FIELD(name, C++ type)  /* what it holds */ — int64_t -> int64, double -> float64, std::string ->
// a fixed-length UTF-8 HDF5 string.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/hdf5_attributes.h"

namespace t5scale {

#define T5SCALE_RUN_DESCRIPTION_FIELDS(FIELD)                                                                   \
  FIELD(run_id, std::string)                                                                                  \
  FIELD(study, std::string)                                                                                   \
  FIELD(git_revision, std::string)                                                                            \
  FIELD(slurm_job_id, std::string)         /* "" outside Slurm */                                             \
  FIELD(slurm_array_task_id, std::string)  /* "" outside a job array */                                       \
  FIELD(hosts, std::string)                /* comma-separated, one per rank */                                \
  FIELD(nodes, int64_t)                                                                                       \
  FIELD(gpus_per_node, int64_t)                                                                               \
  FIELD(world_size, int64_t)                                                                                  \
  FIELD(tp, int64_t)                                                                                          \
  FIELD(dp, int64_t)                                                                                          \
  FIELD(model_name, std::string)                                                                              \
  FIELD(parameter_count, int64_t)                                                                             \
  FIELD(global_batch, int64_t)                                                                                \
  FIELD(micro_batch, int64_t)                                                                                 \
  FIELD(grad_accumulation, int64_t)                                                                           \
  FIELD(base_lr, double)                                                                                      \
  FIELD(effective_lr, double)                                                                                 \
  FIELD(lr_scaling_rule, std::string)                                                                         \
  FIELD(reference_global_batch, int64_t)                                                                      \
  FIELD(warmup_steps, int64_t)                                                                                \
  FIELD(max_steps, int64_t)                                                                                   \
  FIELD(steps_per_epoch, int64_t)                                                                             \
  FIELD(epochs, double)                    /* max_steps / steps_per_epoch: fractional */                      \
  FIELD(precision, std::string)                                                                               \
  FIELD(optimizer, std::string)                                                                               \
  FIELD(device_names, std::string)         /* comma-separated, one per rank */                                \
  FIELD(driver_version, std::string)                                                                          \
  FIELD(cuda_version, std::string)                                                                            \
  FIELD(nccl_version, std::string)                                                                            \
  FIELD(torch_version, std::string)                                                                           \
  FIELD(peak_flops_per_device, double)                                                                        \
  FIELD(price_per_node_hour_usd, double)   /* 0 = not set */                                                  \
  FIELD(price_per_gpu_hour_usd, double)    /* 0 = not set; not with price_per_node_hour_usd */                \
  FIELD(node_share_fraction, double)       /* of each node the job holds, charged at price_per_node_hour_usd: \
                                              GPUs (CPUs) held / the node's; NaN unknown */                   \
  FIELD(node_share_basis, std::string)     /* "1 of 4 GPUs (held: SLURM_GPUS_ON_NODE; ...)", or why unknown */ \
  FIELD(allocated_gpus_per_node, int64_t)  /* GPUs the job holds per node, charged at price_per_gpu_hour_usd; \
                                              0 on a CPU job */                                               \
  FIELD(carbon_intensity_g_per_kwh, double)                                                                   \
  FIELD(pue, double)                                                                                          \
  FIELD(predicted_memory_bytes_per_device, int64_t)                                                           \
  FIELD(predicted_host_memory_bytes_per_rank, int64_t) /* parallel.offload_optimizer's state on a GPU's host; \
                                                          0: none (the peak resident set: host_memory_bytes) */ \
  FIELD(predicted_flops_per_step, double)                                                                     \
  FIELD(predicted_step_time_s, double)     /* the step-time model's median step; NaN: no rates */             \
  FIELD(checkpoint_every_blocks, int64_t)  /* activation checkpointing as run: 0 none, k every k-th block */ \
  FIELD(recomputation, std::string)        /* as run, in words: "none", "selective (attention cores)", ... */ \
  FIELD(attention_kernels, std::string)    /* "explicit", or each call site's SDPA kernel */                  \
  FIELD(energy_source_gpu, std::string)    /* nvml_energy_counter, nvml_power_integrated or none */           \
  FIELD(energy_source_cpu, std::string)    /* rapl or none */                                                 \
  FIELD(config_yaml, std::string)                                                                             \
  FIELD(config_changes, std::string)       /* on resume, "step N: key: before -> after", one a line */

struct RunDescription {
#define T5SCALE_DECLARE_DESCRIPTION_FIELD(name, type) type name{};
  T5SCALE_RUN_DESCRIPTION_FIELDS(T5SCALE_DECLARE_DESCRIPTION_FIELD)
#undef T5SCALE_DECLARE_DESCRIPTION_FIELD
  // A caller that does not say what share of its nodes it holds is not charged a made-up one: its cost is unknown.
  RunDescription() { node_share_fraction = std::numeric_limits<double>::quiet_NaN(); }
};

// The description as root attributes, in the order above.
inline std::vector<std::pair<std::string, Hdf5Value>> description_attributes(const RunDescription& d) {
  return {
#define T5SCALE_DESCRIPTION_ATTRIBUTE(name, type) {#name, Hdf5Value(d.name)},
      T5SCALE_RUN_DESCRIPTION_FIELDS(T5SCALE_DESCRIPTION_ATTRIBUTE)
#undef T5SCALE_DESCRIPTION_ATTRIBUTE
  };
}

}  // namespace t5scale
