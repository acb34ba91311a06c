// The T5 encoder-decoder, tensor-parallel over a TP group; with a one-rank group it is the single-GPU T5.
// Parameter names (ours; io/hf_names maps them to Hugging Face's):
//   shared.weight                                   (V / tp, C)      vocab-parallel, also the tied LM head
//   lm_head.weight                                  (V / tp, C)      v1.1 only (untied)
//   {encoder,decoder}.relative_attention_bias.weight (buckets, H / tp)
//   {encoder,decoder}.blocks.{i}.self_attn.{q,k,v}.weight  (H / tp * D, C)
//   {encoder,decoder}.blocks.{i}.self_attn.o.weight        (C, H / tp * D)
//   decoder.blocks.{i}.cross_attn.{q,k,v,o}.weight         as self_attn
//   {encoder,decoder}.blocks.{i}.ff.{wi | wi_0, wi_1}.weight (d_ff / tp, C);  ff.wo.weight (C, d_ff / tp)
//   {encoder,decoder}.blocks.{i}.{self_attn,cross_attn,ff}_norm.weight, {encoder,decoder}.final_norm.weight  (C)
#pragma once

#include <torch/torch.h>

#include "config/model_config.h"
#include "dist/communicator.h"
#include "model/parallel_layers.h"
#include "model/parallel_rng.h"
#include "model/seq2seq_batch.h"
#include "model/t5_layers.h"

namespace t5scale {

class T5StackImpl : public torch::nn::Module {
 public:
  T5StackImpl(const ModelConfig& config, bool is_decoder, CommunicatorPtr tp, std::shared_ptr<ParallelRng> rng,
              torch::TensorOptions param_options);
  // embeddings (B, T, C); self_mask additive, broadcastable to (B, 1, T, T); for the decoder also the encoder
  // output (B, S, C), already in the TP region (copy_to_tensor_parallel_region, or whole through
  // gather_from_sequence_parallel_region), and its additive mask (B, 1, 1, S). Returns the final-normed hidden
  // states (B, T, C). With layout kSplit the embeddings and the result are this rank's (B, T / tp, C).
  torch::Tensor forward(const torch::Tensor& embeddings, const torch::Tensor& self_mask,
                        const torch::Tensor& encoder_output = {}, const torch::Tensor& cross_mask = {},
                        SequenceLayout layout = SequenceLayout::kReplicated);

  bool is_decoder;
  double dropout_rate;
  int64_t checkpoint_every = 0;  // activation checkpointing: 0 none, 1 every block, k every k-th block
  CommunicatorPtr tp;
  std::shared_ptr<ParallelRng> rng;
  RelativePositionBias relative_attention_bias{nullptr};  // used by every block, held once per stack
  torch::nn::ModuleList blocks;
  RMSNorm final_norm{nullptr};
};
TORCH_MODULE(T5Stack);

class T5ModelImpl : public torch::nn::Module {
 public:
  // tp: the tensor-parallel group; param_options: dtype and device of the parameters (kMeta counts shapes only);
  // rng: the dropout streams (default: seed 0 for this TP rank on the parameters' device).
  T5ModelImpl(const ModelConfig& config, CommunicatorPtr tp, torch::TensorOptions param_options = torch::kFloat32,
              std::shared_ptr<ParallelRng> rng = nullptr);

  // Activation checkpointing in both stacks: 0 none, 1 every block, k every k-th block.
  void set_activation_checkpointing(int64_t every_k_blocks);
  // Selective recomputation in every attention layer: its core's activations are made again in backward
  // (T5AttentionImpl::recompute_core). An alternative to checkpointing blocks, whose recomputation includes it.
  void set_selective_recomputation(bool on);
  // Sequence parallelism in forward() (training and the evaluation loss; generation keeps the whole sequence): the
  // residual stream of both stacks split over the TP group (SequenceLayout). Source and target lengths must then be
  // divisible by tp. No effect with a one-rank TP group.
  void set_sequence_parallel(bool on) { sequence_parallel_ = on; }
  bool sequence_parallel() const { return sequence_parallel_; }
  // The attention kernel of every attention layer (default: default_attention_kernel of the parameters' device).
  void set_attention_kernel(AttentionKernel kernel);
  // What the attention layers run, as attention_kernels_description() words it (for the log and the run file).
  std::string attention_kernels();

  // attention_mask (B, S): 1 for a token, 0 for padding; an undefined tensor when nothing is padded, so that the
  // encoder's position bias stays (1, H, S, S), broadcast over the rows, and cross-attention has no mask at all.
  // (B, S, C); with layout kSplit this rank's (B, S / tp, C).
  torch::Tensor encode(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                       SequenceLayout layout = SequenceLayout::kReplicated);
  // This rank's slice of the logits, (B, T, V / tp), for vocabulary ids [vocab_start(), vocab_start() + V / tp);
  // encoder_output as encode() gave it with the same layout.
  torch::Tensor decode(const torch::Tensor& decoder_input_ids, const torch::Tensor& encoder_output,
                       const torch::Tensor& attention_mask, SequenceLayout layout = SequenceLayout::kReplicated);
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                        const torch::Tensor& decoder_input_ids);
  // Mean token cross-entropy over labels != -100 (decoder inputs are the labels shifted right).
  torch::Tensor loss(const Seq2SeqBatch& batch);
  // Per-token loss of local logits (B, T, V / tp) against labels, zero where ignored.
  torch::Tensor token_losses(const torch::Tensor& local_logits, const torch::Tensor& labels);

  // decoder_start_token_id, then labels[:, :-1], with -100 replaced by pad_token_id.
  torch::Tensor shift_right(const torch::Tensor& labels) const;

  // Greedy decoding with a key/value cache. Returns (B, 1 + n) starting with decoder_start_token_id; a row that
  // has produced eos is continued with pad; stops after max_new_tokens or when every row has finished.
  torch::Tensor generate_greedy(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                int64_t max_new_tokens);
  // Beam search with a key/value cache, as transformers' generate(num_beams=N, do_sample=False, length_penalty=L,
  // early_stopping=False) does it for T5: each row keeps N running hypotheses scored by the sum of their tokens'
  // log-probabilities; at each step the 2N best continuations over every beam and token are taken, those of the
  // best N that end in eos (or reach max_new_tokens) become finished hypotheses scored by sum / length ** L (length:
  // generated tokens, eos included), and the N best others run on. A row stops taking hypotheses once it holds N
  // finished ones and its best running score divided by the current length ** L is no better than its worst
  // finished score; generation stops when every row has stopped or at max_new_tokens. Returns (B, 1 + n) as
  // generate_greedy does: the decoder start token, each row's best finished hypothesis, pad after its eos; n is the
  // longest of them. num_beams 1 is greedy decoding. Under TP the beams' bookkeeping is the same on every rank: it
  // works on candidates gathered from the vocabulary slices (vocab_parallel_topk).
  torch::Tensor generate_beam(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                              int64_t max_new_tokens, int64_t num_beams, double length_penalty = 1.0);

  // Every parameter's full name, full shape and split dimension.
  std::vector<ParameterLayout> parameter_layouts();
  // Seeded initialisation as Hugging Face's T5 does it (normal, std per Mesh TensorFlow). Each full tensor is
  // drawn from its own generator (seed and name) and then sliced, so every TP size gives the same model.
  void initialize_weights(uint64_t seed);

  int64_t vocab_start() const { return shared->vocab_start(); }
  const ModelConfig& config() const { return config_; }
  Communicator& tp() { return *tp_; }

  VocabParallelEmbedding shared{nullptr};
  T5Stack encoder{nullptr}, decoder{nullptr};
  ColumnParallelLinear lm_head{nullptr};  // untied models only: (V / tp, C)

 private:
  // (B, T, V / tp) from the decoder's final hidden states, whole or (layout kSplit) this rank's split.
  torch::Tensor lm_logits(const torch::Tensor& decoder_hidden, SequenceLayout layout = SequenceLayout::kReplicated);
  // Generation: each decoder block's cache with the cross-attention keys and values of encoder_output (B, S, C),
  // every row repeated `copies` times (the beams of a row, next to each other).
  std::vector<DecoderLayerCache> generation_caches(const torch::Tensor& encoder_output, int64_t copies);
  // One generation step: the decoder on the last tokens (N, 1) at position `step`, extending the caches; returns
  // this rank's slice of the next-token logits, (N, V / tp) in fp32. cross_mask: additive, (N, 1, 1, S) or undefined.
  torch::Tensor decode_step(const torch::Tensor& last_tokens, int64_t step, std::vector<DecoderLayerCache>& caches,
                            const torch::Tensor& cross_mask);
  // The layout forward() runs: kSplit with sequence parallelism on and more than one TP rank.
  SequenceLayout training_layout() const;

  ModelConfig config_;
  bool sequence_parallel_ = false;
  CommunicatorPtr tp_;
  std::shared_ptr<ParallelRng> rng_;
};
TORCH_MODULE(T5Model);

// Additive attention masks in the compute dtype: 0 where attended, the dtype's lowest value where not; the padding
// mask of an undefined attention_mask (nothing padded) is undefined.
torch::Tensor padding_additive_mask(const torch::Tensor& attention_mask, torch::ScalarType dtype);  // (B, 1, 1, S)
torch::Tensor causal_additive_mask(int64_t length, torch::ScalarType dtype, torch::Device device);   // (1, 1, T, T)

}  // namespace t5scale
