#include "plan/step_time_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/check.h"

namespace t5scale {

namespace {

// An encoder block has two sublayers (attention, feed-forward), a decoder block three (with cross-attention); each
// begins with its norm.
int64_t sublayer_count(const ModelConfig& c) { return 2 * c.num_layers + 3 * c.num_decoder_layers; }

// Device seconds, bytes and operators of one part of a micro-batch's step on one rank.
struct Work {
  double matmul_s = 0.0;
  double bytes = 0.0;  // elementwise: read + written
  double operators = 0.0;
  double tp_s = 0.0;   // TP collectives
  double attention_s = 0.0;  // the attention cores' own kernels: fused ones, or the explicit path's head copies
  Work& operator+=(const Work& o) {
    matmul_s += o.matmul_s, bytes += o.bytes, operators += o.operators, tp_s += o.tp_s, attention_s += o.attention_s;
    return *this;
  }
  Work operator-(const Work& o) const {
    return Work{matmul_s - o.matmul_s, bytes - o.bytes, operators - o.operators, tp_s - o.tp_s,
                attention_s - o.attention_s};
  }
  Work times(double k) const { return Work{matmul_s * k, bytes * k, operators * k, tp_s * k, attention_s * k}; }
};

class StepWork {
 public:
  StepWork(const ModelConfig& c, const StepTimeInputs& in, const MachineRates& rates)
      : c_(c),
        rates_(rates),
        tp_(in.memory.tp),
        e_(static_cast<double>(in.memory.compute_bytes_per_element)),
        rows_(static_cast<double>(in.memory.micro_batch.rows)),
        s_(static_cast<double>(in.memory.micro_batch.source_length)),
        t_(static_cast<double>(in.memory.micro_batch.target_length)),
        d_(static_cast<double>(c.d_model)),
        inner_(static_cast<double>(c.inner_dim() / tp_)),
        heads_(static_cast<double>(c.num_heads / tp_)),
        d_kv_(static_cast<double>(c.d_kv)),
        ff_(static_cast<double>(c.d_ff / tp_)),
        vocab_(static_cast<double>(c.vocab_size / tp_)),
        split_(in.memory.sequence_parallel && tp_ > 1 ? static_cast<double>(tp_) : 1.0),
        dropout_(c.dropout_rate > 0.0),
        on_gpu_(in.memory.on_gpu),
        fused_attention_(in.memory.on_gpu && in.memory.fused_attention),
        padded_(in.memory.padded) {
    if (tp_ > 1) tp_link_ = &rates.link("intra_node", in.ranks_per_node, tp_);
  }

  // One encoder block's forward over s tokens per row; one decoder block's over t target and s source tokens.
  Work encoder_forward() const {
    Work w = sublayer_common(s_).times(2.0);
    w += self_attention(s_);
    w += feed_forward(s_);
    return w;
  }
  Work decoder_forward() const {
    Work w = sublayer_common(t_).times(3.0);
    w += self_attention(t_);
    w += cross_attention();
    w += feed_forward(t_);
    return w;
  }
  // Backward: twice the forward's products and 1.5 times its bytes outside the attention cores, the cores' own
  // backward, its operators at the backward's count, its collectives again (the entries' input gradients; the
  // cross-attention's keys and values add one over the source).
  Work encoder_backward() const { return backward_of(encoder_forward(), encoder_core(), encoder_core_backward(), 2); }
  Work decoder_backward() const {
    Work w = backward_of(decoder_forward(), decoder_cores(), decoder_cores_backward(), 3);
    w.tp_s += tp_collective(rows_ * s_ * d_ * e_);  // the cross-attention keys' and values' input, over the source
    return w;
  }
  // The self-attentions carry the position bias; the cross-attention a mask only where rows are padded.
  Work encoder_core() const { return core(s_, s_, true); }
  Work decoder_cores() const {
    Work w = core(t_, t_, true);
    w += core(t_, s_, padded_);
    return w;
  }
  Work encoder_core_backward() const { return core_backward(s_, s_, true); }
  Work decoder_cores_backward() const {
    Work w = core_backward(t_, t_, true);
    w += core_backward(t_, s_, padded_);
    return w;
  }

  // Around the blocks: the embeddings (vocab-parallel: an all-reduce, or a reduce-scatter, per stack), the final
  // norms, the LM head and the loss (three small all-reduces over the vocabulary shards).
  Work outside_forward() const {
    Work w;
    w.matmul_s = rates_.matmul_seconds(rows_ * t_, vocab_, d_);
    w.bytes = rows_ * t_ * vocab_ * (e_ + 8.0) + 2.0 * e_ * d_ * rows_ * (s_ + t_) / split_;
    w.operators = kOperatorsPerMicroBatchOutside / 3.0;
    w.tp_s = tp_collective(rows_ * s_ * d_ * e_) + tp_collective(rows_ * t_ * d_ * e_) +
             (split_ > 1 ? all_gather(rows_ * t_ * d_ * e_) : 0.0) + 3.0 * all_reduce(rows_ * t_ * 4.0);
    return w;
  }
  Work outside_backward() const {
    Work w = outside_forward().times(2.0);
    w.operators = kOperatorsPerMicroBatchOutside * 2.0 / 3.0;
    w.tp_s = tp_collective(rows_ * t_ * d_ * e_);  // the LM head's input gradient
    return w;
  }

  // Under sequence parallelism the norms' gradient parts summed over TP once per step, after the DP reduction: one
  // all-reduce of their fp32 gradients (under ZeRO, of this rank's DP share of them).
  double norm_gradient_sum_s(double share) const {
    if (split_ <= 1.0) return 0.0;
    const double norms = static_cast<double>(sublayer_count(c_) + 2);  // and the encoder's and decoder's final norms
    return all_reduce(4.0 * norms * d_ * share);
  }

  double all_reduce(double bytes) const { return tp_link_ ? collective_seconds(*tp_link_, "all_reduce", bytes, tp_) : 0.0; }
  double all_gather(double bytes) const { return tp_link_ ? collective_seconds(*tp_link_, "all_gather", bytes, tp_) : 0.0; }
  // A row-parallel exit (or a column-parallel entry's gradient): an all-reduce, or under sequence parallelism a
  // reduce-scatter there and an all-gather at the next entry (the same bytes, twice the latency).
  double tp_collective(double bytes) const {
    if (!tp_link_) return 0.0;
    if (split_ > 1) {
      return collective_seconds(*tp_link_, "reduce_scatter", bytes, tp_) +
             collective_seconds(*tp_link_, "all_gather", bytes, tp_);
    }
    return collective_seconds(*tp_link_, "all_reduce", bytes, tp_);
  }

 private:
  // Norm, dropout and residual add of one sub-layer over the (sequence-split) residual stream.
  Work sublayer_common(double tokens) const {
    Work w;
    const double elements = rows_ * tokens * d_ / split_;
    w.bytes = elements * (2.0 * e_ + 3.0 * e_ + (dropout_ ? 2.0 * e_ + 1.0 : 0.0));
    w.operators = kOperatorsPerSublayerForward;
    w.tp_s = tp_collective(rows_ * tokens * d_ * e_);  // the sub-layer's exit (its entry's gather under SP)
    return w;
  }
  // q, k, v, o over the same tokens, the core, the heads moved to rows and back.
  Work self_attention(double tokens) const {
    Work w;
    const double m = rows_ * tokens;
    w.matmul_s = 4.0 * rates_.matmul_seconds(m, inner_, d_);
    w.bytes = 2.0 * e_ * m * inner_;
    w += core(tokens, tokens, true);
    return w;
  }
  // q and o over the target, k and v over the source.
  Work cross_attention() const {
    Work w;
    w.matmul_s = 2.0 * rates_.matmul_seconds(rows_ * t_, inner_, d_) + 2.0 * rates_.matmul_seconds(rows_ * s_, inner_, d_);
    w.bytes = 2.0 * e_ * rows_ * t_ * inner_;
    w += core(t_, s_, padded_);
    return w;
  }

  // The fused kernel SDPA runs for an attention with a bias or mask (the memory-efficient one, the only one that
  // takes a bias needing its gradient) or without (flash, where the rates have it); nullptr: the rates time no fused
  // kernels (a CPU's, or a rates file without them), and the core is timed as its two products.
  const FusedAttentionRate* fused_kernel(bool biased) const {
    if (!fused_attention_) return nullptr;
    const int64_t head_dim = c_.d_kv;
    if (!biased) {
      if (const FusedAttentionRate* flash = rates_.fused_attention_rate("flash", head_dim)) return flash;
    }
    return rates_.fused_attention_rate("memory_efficient", head_dim);
  }
  // A product over `keys` in one of its leading dimensions: cuBLAS's unaligned kernels when that is not a multiple
  // of 8 elements (147 keys: a third of the aligned rate, t5-3b-147-26-explicit.log).
  double aligned_share(double keys) const {
    return std::fmod(keys, 8.0) == 0.0 ? 1.0 : rates_.unaligned_matmul_efficiency;
  }
  // Scores and weighted values of `queries` against `keys` per row and head, forward. Fused: the kernel's padded
  // tiles at its measured rate, and the bias it reads. Explicit: the two batched products, the scores written with
  // the bias, the softmax and the dropout over them, and the heads' copies.
  Work core(double queries, double keys, bool biased) const {
    Work w;
    const double batched = rows_ * heads_;
    if (const FusedAttentionRate* kernel = fused_kernel(biased)) {
      w.attention_s = kernel->forward_seconds(batched, queries, keys, d_kv_);
      if (biased) w.bytes = e_ * batched * queries * keys;
      return w;
    }
    w.matmul_s = batched * (rates_.matmul_seconds(queries, keys, d_kv_) + rates_.matmul_seconds(queries, d_kv_, keys)) /
                 aligned_share(keys);
    if (!fused_attention_) {
      w.bytes = batched * queries * keys * explicit_bytes_per_score(false);
      // On a GPU the heads' transposed views of q, k and v made contiguous for the products, read and written.
      if (on_gpu_) w.attention_s = 2.0 * e_ * rows_ * inner_ * (queries + 2.0 * keys) / rates_.strided_copy_bandwidth();
    }
    return w;
  }
  // Its backward. Fused: the kernel's backward tiles; it reads the bias and writes the bias's gradient, which the
  // stack sums in fp32 over its blocks. Explicit: twice the products (four of them), 1.5 times the bytes and twice
  // the copies. A fused kernel the rates do not time: its products made again, 2.5 times the forward's.
  Work core_backward(double queries, double keys, bool biased) const {
    Work w;
    const double batched = rows_ * heads_;
    if (const FusedAttentionRate* kernel = fused_kernel(biased)) {
      w.attention_s = kernel->backward_seconds(batched, queries, keys, d_kv_);
      if (biased) w.bytes = (2.0 * e_ + e_ + 8.0) * batched * queries * keys;
      return w;
    }
    const Work forward = core(queries, keys, biased);
    w.matmul_s = (fused_attention_ ? 2.5 : 2.0) * forward.matmul_s;
    w.bytes = fused_attention_ ? 0.0 : batched * queries * keys * explicit_bytes_per_score(true);
    w.attention_s = 2.0 * forward.attention_s;
    return w;
  }
  // The explicit path's bytes per score, read and written. On a GPU the kernels as the profile lists them: the
  // bias added (3e), the cast to fp32 and back (e + 4, 4 + e), the softmax (8) and the dropout (2e + 1); backward
  // the same in reverse with the softmax's gradient reading two (12) and the bias's gradient summed (e + 4). On a CPU
  // (fp32, no casts) as its calibration measured them: 5e forward and dropout, 1.5 times that backward.
  double explicit_bytes_per_score(bool backward) const {
    const double dropout = dropout_ ? 2.0 * e_ + 1.0 : 0.0;
    if (!on_gpu_) return (backward ? 1.5 : 1.0) * (5.0 * e_ + dropout);
    const double casts = e_ == 4.0 ? 0.0 : 2.0 * (e_ + 4.0);
    return backward ? (e_ + 4.0) + casts + 12.0 + dropout : 3.0 * e_ + casts + 8.0 + dropout;
  }
  Work feed_forward(double tokens) const {
    Work w;
    const double m = rows_ * tokens;
    const bool gated = c_.feed_forward == FeedForwardKind::kGatedGelu;
    w.matmul_s = (gated ? 3.0 : 2.0) * rates_.matmul_seconds(m, ff_, d_);
    w.bytes = m * ff_ * (gated ? 6.0 : 2.0) * e_;
    // On a GPU the dropout between the two projections is a kernel of its own (the CPU's measured rates hold it).
    if (on_gpu_ && dropout_) w.bytes += m * ff_ * (2.0 * e_ + 1.0);
    return w;
  }
  Work backward_of(const Work& forward, const Work& cores, const Work& cores_backward, int sublayers) const {
    const Work outside_cores = forward - cores;
    Work w;
    w.matmul_s = 2.0 * outside_cores.matmul_s + cores_backward.matmul_s;
    w.bytes = 1.5 * outside_cores.bytes + cores_backward.bytes;
    w.attention_s = cores_backward.attention_s;
    w.operators = static_cast<double>(kOperatorsPerSublayerBackward * sublayers);
    w.tp_s = forward.tp_s;
    return w;
  }

  const ModelConfig& c_;
  const MachineRates& rates_;
  const int tp_;
  const double e_, rows_, s_, t_, d_, inner_, heads_, d_kv_, ff_, vocab_, split_;
  const bool dropout_, on_gpu_, fused_attention_, padded_;
  const LinkRates* tp_link_ = nullptr;
};

// Blocks of a stack of `depth` that full recomputation re-runs: 0, k, 2k, ...
int64_t recomputed_blocks(int64_t depth, int64_t every) {
  if (every <= 0 || depth <= 0) return 0;
  return (depth + every - 1) / every;
}

// Bytes per parameter the optimizer step reads and writes: the fp32 gradient (norm, then update), master weights and
// moments (AdamW two, Adafactor's factored ones negligible but its update's temporaries), and in bf16 the copy back
// into the compute weights.
// One core's own streaming rate (its outstanding cache-line misses bound it: about 10 GB/s on the server cores of
// the DGX hosts' generations), which bounds an update given few cores per rank below the memory's share.
constexpr double kHostCoreStreamBytesPerS = 10e9;

double optimizer_bytes_per_parameter(const MemoryInputs& m) {
  const double base = m.adafactor ? 24.0 : 32.0;
  return base + (m.compute_bytes_per_element == 2 ? 14.0 : 0.0);
}

}  // namespace

int64_t operators_per_step(const ModelConfig& model, const MemoryInputs& inputs, int64_t grad_accumulation) {
  const int64_t sublayers = sublayer_count(model);
  int64_t recomputed = 0;
  if (inputs.checkpoint_every_blocks > 0) {
    recomputed = 2 * recomputed_blocks(model.num_layers, inputs.checkpoint_every_blocks) +
                 3 * recomputed_blocks(model.num_decoder_layers, inputs.checkpoint_every_blocks);
  }
  const int64_t per_micro_batch = sublayers * (kOperatorsPerSublayerForward + kOperatorsPerSublayerBackward) +
                                  recomputed * kOperatorsPerSublayerForward + kOperatorsPerMicroBatchOutside;
  return per_micro_batch * grad_accumulation + kOperatorsPerStepOptimizer;
}

StepTimePrediction predict_step_time(const ModelConfig& c, const StepTimeInputs& in, const MachineRates& rates) {
  const MemoryInputs& m = in.memory;
  T5S_CHECK(in.grad_accumulation >= 1 && in.nodes >= 1 && in.ranks_per_node >= 1, "predict_step_time: accumulation ",
            in.grad_accumulation, ", nodes ", in.nodes, ", ranks per node ", in.ranks_per_node);
  const StepWork work(c, in, rates);

  // One micro-batch: the blocks, the recomputed blocks or attention cores, and what is around them.
  const double encoders = static_cast<double>(c.num_layers), decoders = static_cast<double>(c.num_decoder_layers);
  Work forward = work.encoder_forward().times(encoders);
  forward += work.decoder_forward().times(decoders);
  forward += work.outside_forward();
  Work backward = work.encoder_backward().times(encoders);
  backward += work.decoder_backward().times(decoders);
  backward += work.outside_backward();
  Work recompute;
  if (m.checkpoint_every_blocks > 0) {
    recompute = work.encoder_forward().times(static_cast<double>(recomputed_blocks(c.num_layers, m.checkpoint_every_blocks)));
    recompute += work.decoder_forward().times(static_cast<double>(recomputed_blocks(c.num_decoder_layers, m.checkpoint_every_blocks)));
  } else if (m.selective_recomputation) {
    recompute = work.encoder_core().times(encoders);
    recompute += work.decoder_cores().times(decoders);
  }

  // Device time and host time of a phase; a GPU overlaps them, a CPU adds them and shares its cores.
  StepTimePrediction p;
  p.compute_share_factor = 1.0;
  if (!rates.asynchronous_device && rates.cores_per_node > 0) {
    const int64_t nodes_sharing = std::min(in.nodes, rates.nodes_per_host);  // a local cluster's nodes share a host
    const int64_t ranks_per_host = in.ranks_per_node * nodes_sharing;
    p.compute_share_factor = rates.ranks_per_core(ranks_per_host) * rates.busy_host_slowdown(ranks_per_host);
  }
  auto phase_seconds = [&](const Work& w) {
    const double device =
        (w.matmul_s + w.bytes / rates.memory_bandwidth_bytes_per_s + w.attention_s) / rates.compute_efficiency +
        w.operators * rates.device_idle_per_operator_s;
    const double host = w.operators * rates.op_latency_s;
    const double busy = rates.asynchronous_device ? std::max(device, host) : (device + host) * p.compute_share_factor;
    return busy + w.tp_s;
  };
  const double accumulation = static_cast<double>(in.grad_accumulation);
  Work backward_all = backward;
  backward_all += recompute;
  p.forward_s = accumulation * phase_seconds(forward);
  p.backward_s = accumulation * phase_seconds(backward_all);
  p.matmul_s = accumulation * (forward.matmul_s + backward_all.matmul_s) / rates.compute_efficiency;
  p.attention_s = accumulation * (forward.attention_s + backward_all.attention_s) / rates.compute_efficiency;
  p.elementwise_s =
      accumulation * (forward.bytes + backward_all.bytes) / rates.memory_bandwidth_bytes_per_s / rates.compute_efficiency;
  p.recompute_s =
      accumulation * (recompute.matmul_s + recompute.bytes / rates.memory_bandwidth_bytes_per_s + recompute.attention_s) /
      rates.compute_efficiency;
  p.tp_collectives_s = accumulation * (forward.tp_s + backward_all.tp_s);
  p.operators = operators_per_step(c, m, in.grad_accumulation);
  p.host_s = static_cast<double>(p.operators) * rates.op_latency_s;

  // The DP reduction of the fp32 gradient buckets: an all-reduce, or under ZeRO a reduce-scatter and then the
  // updated weights' all-gather. A group across nodes runs on the network, whose NICs the node's ranks share.
  const double trainable = static_cast<double>(parameters_per_rank(c, m.tp) - m.frozen_parameters_per_rank);
  if (m.dp > 1) {
    const int64_t ranks_in_group_per_node = std::max<int64_t>(1, in.ranks_per_node / m.tp);
    const bool across_nodes = in.nodes > 1 && m.dp > ranks_in_group_per_node;
    LinkRates link = rates.link(across_nodes ? "inter_node" : "intra_node", in.ranks_per_node, m.dp);
    if (link.shared_by_node) link.bandwidth_bytes_per_s /= static_cast<double>(in.ranks_per_node);
    const double gradient_bytes = 4.0 * trainable;
    double reduce_s = 0.0, gather_s = 0.0;
    if (m.zero1) {
      reduce_s = collective_seconds(link, "reduce_scatter", gradient_bytes, m.dp);
      gather_s = collective_seconds(link, "all_gather", static_cast<double>(m.compute_bytes_per_element) * trainable, m.dp);
    } else {
      reduce_s = collective_seconds(link, "all_reduce", gradient_bytes, m.dp);
    }
    p.dp_collectives_s = reduce_s + gather_s;
    if (rates.asynchronous_device) {
      // Buckets are reduced as backward fills them: what outlasts the last micro-batch's backward, and at least the
      // last bucket's reduction, is exposed.
      const double last_bucket_share = std::min(1.0, static_cast<double>(m.bucket_bytes) / std::max(gradient_bytes, 1.0));
      const double last_backward_s = p.backward_s / accumulation;
      p.comm_exposed_s = std::max(reduce_s - last_backward_s, reduce_s * last_bucket_share) + gather_s;
    } else {
      p.comm_exposed_s = p.dp_collectives_s;
    }
  }

  const double norm_sum_s = work.norm_gradient_sum_s(m.zero1 ? 1.0 / static_cast<double>(m.dp) : 1.0);
  p.tp_collectives_s += norm_sum_s;
  p.comm_exposed_s += norm_sum_s;

  // The optimizer over this rank's parameters (ZeRO-1: its 1 / dp of them).
  const double owned = m.zero1 ? trainable / static_cast<double>(m.dp) : trainable;
  // One fused pass over the parameters' streams: at the copy bandwidth as measured, not a step kernel's efficiency.
  const double optimizer_device = owned * optimizer_bytes_per_parameter(m) / rates.optimizer_bandwidth();
  const double optimizer_host = kOperatorsPerStepOptimizer * rates.op_latency_s;
  p.optimizer_s = rates.asynchronous_device ? std::max(optimizer_device, optimizer_host)
                                            : (optimizer_device + optimizer_host) * p.compute_share_factor;
  if (m.offload_optimizer && rates.asynchronous_device) {
    // Host-resident state: the device computes the norm only (a read of the owned gradients); the gradients go to
    // the host, the update runs there (its passes and the gradients' host copy), the new weights come back.
    T5S_CHECK(rates.host_memory_bandwidth_bytes_per_s > 0 && rates.host_link_bytes_per_s > 0,
              "parallel.offload_optimizer: the machine rates (", rates.name, ") give no host memory bandwidth or host "
              "link (host_memory_bandwidth_bytes_per_s, host_link_bytes_per_s) to time the update on the host");
    // Each bucket's owned fp32 gradient is copied to the host as soon as it is reduced, on a stream of its own over
    // the host link (apart from the links the reduction uses), while the last micro-batch's backward goes on: what
    // outlasts that backward, and at least the last bucket's copy, stays exposed. The new weights' copy back, in
    // the parameters' dtype, follows the update.
    const double e = static_cast<double>(m.compute_bytes_per_element);
    const double to_host_s = owned * 4.0 / rates.host_link_bytes_per_s;
    const double last_bucket_share =
        std::min(1.0, static_cast<double>(m.bucket_bytes) / std::max(4.0 * trainable, 1.0));
    const double last_backward_s = p.backward_s / accumulation;
    p.offload_copies_s =
        std::max(to_host_s - last_backward_s, to_host_s * last_bucket_share) + owned * e / rates.host_link_bytes_per_s;
    double host_bandwidth = rates.host_memory_bandwidth_bytes_per_s / static_cast<double>(in.ranks_per_node);
    if (rates.host_cores_per_node > 0) {
      const double cores = static_cast<double>(rates.host_cores_per_node) / static_cast<double>(in.ranks_per_node);
      host_bandwidth = std::min(host_bandwidth, cores * kHostCoreStreamBytesPerS);
    }
    p.host_update_s = owned * (optimizer_bytes_per_parameter(m) + 4.0) / host_bandwidth;
    const double norm_s = owned * 4.0 / rates.optimizer_bandwidth();
    p.optimizer_s = std::max(norm_s, optimizer_host) + p.offload_copies_s + p.host_update_s;
  } else if (m.offload_optimizer) {
    // On the CPU the host is the device: the gradients' copy (read and write) and the weights' write-back added.
    p.host_update_s = owned * 12.0 / rates.optimizer_bandwidth() * p.compute_share_factor;
    p.optimizer_s += p.host_update_s;
  }

  p.total_s = p.forward_s + p.backward_s + p.comm_exposed_s + p.optimizer_s;
  return p;
}

StepTimePrediction predict_step_time(const ModelConfig& c, const StepTimeInputs& in, const MachineRates& rates,
                                     const std::vector<BatchShape>& micro_batches) {
  T5S_CHECK(!micro_batches.empty(), "predict_step_time: no micro-batches");
  StepTimePrediction sum;
  for (size_t i = 0; i < micro_batches.size(); ++i) {
    StepTimeInputs one = in;
    one.memory.micro_batch = micro_batches[i];
    one.grad_accumulation = 1;
    const StepTimePrediction p = predict_step_time(c, one, rates);
    sum.forward_s += p.forward_s;
    sum.backward_s += p.backward_s;
    sum.matmul_s += p.matmul_s;
    sum.elementwise_s += p.elementwise_s;
    sum.attention_s += p.attention_s;
    sum.recompute_s += p.recompute_s;
    sum.tp_collectives_s += p.tp_collectives_s;
    sum.compute_share_factor = p.compute_share_factor;
    if (i + 1 == micro_batches.size()) {  // the reduction and the update, once
      sum.comm_exposed_s = p.comm_exposed_s;
      sum.offload_copies_s = p.offload_copies_s;
      sum.host_update_s = p.host_update_s;
      sum.dp_collectives_s = p.dp_collectives_s;
      sum.optimizer_s = p.optimizer_s;
    }
  }
  sum.operators = operators_per_step(c, in.memory, static_cast<int64_t>(micro_batches.size()));
  sum.host_s = static_cast<double>(sum.operators) * rates.op_latency_s;
  sum.total_s = sum.forward_s + sum.backward_s + sum.comm_exposed_s + sum.optimizer_s;
  return sum;
}

std::string StepTimePrediction::describe() const {
  auto s = [](double seconds) {
    char text[32];
    if (seconds < 1.0) {
      std::snprintf(text, sizeof(text), "%.3g ms", seconds * 1e3);
    } else {
      std::snprintf(text, sizeof(text), "%.3g s", seconds);
    }
    return std::string(text);
  };
  return "forward " + s(forward_s) + " + backward " + s(backward_s) + " + DP exposed " + s(comm_exposed_s) +
         " + optimizer " + s(optimizer_s) +
         (host_update_s > 0 ? " (host update " + s(host_update_s) + ", copies " + s(offload_copies_s) + ")" : "") +
         " = " + s(total_s);
}

}  // namespace t5scale
