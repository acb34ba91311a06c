// cuDNN's fused flash attention through its graph API (the header-only cuDNN frontend), forward and backward, for T5:
// unscaled scores, a (1, H, Sq, Skv) bias and its gradient, the causal mask, padding by key lengths, dropout from a
// Philox seed and offset. Graphs are built once per key (dist/fused_attention.h) and kept for the process.
#include "dist/cudnn_attention.h"

#include "core/check.h"

#ifdef T5SCALE_CUDNN_ATTENTION_BUILT

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cudnn/Handle.h>
#include <c10/cuda/CUDAGuard.h>
#include <dlfcn.h>

#include <cudnn_frontend.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <unordered_map>

// The frontend calls cuDNN through this handle (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING): the cuDNN LibTorch loaded.
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}

namespace t5scale {

namespace {

namespace fe = cudnn_frontend;

// The graphs' tensor ids.
enum Uid : int64_t {
  kQ = 1, kK, kV, kO, kStats, kBias, kSeqQ, kSeqKv, kSeed, kOffset, kDO, kDQ, kDK, kDV, kDBias
};

// cuDNN as LibTorch loaded it (libtorch_cuda needs libcudnn.so.9): found by its name among the loaded libraries.
const std::string& cudnn_load_error() {
  static const std::string error = [] {
    void* handle = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_NOLOAD);
    if (handle == nullptr) handle = dlopen("libcudnn.so.9", RTLD_NOW);
    if (handle == nullptr) return msg("cuDNN (libcudnn.so.9) does not load: ", dlerror());
    cudnn_frontend::cudnn_dlhandle = handle;
    const auto version = static_cast<int64_t>(fe::detail::get_backend_version());
    if (version < 90500) return msg("cuDNN ", version, " is older than 9.5 (dbias with padding)");
    return std::string();
  }();
  return error;
}

void check(fe::error_t status, const char* what, const FusedAttentionGraphKey& key) {
  T5S_CHECK(status.is_good(), "cuDNN's fused attention: ", what, " failed for ", key.text(), ": ",
            status.get_message());
}

fe::DataType_t data_type(AttentionDtype dtype) {
  return dtype == AttentionDtype::kBf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF;
}

// A tensor of t's shape (B, H, L, D) laid out as (B, L, H, D): what the projections write and read.
torch::Tensor bshd_like(const torch::Tensor& t) {
  return torch::empty({t.size(0), t.size(2), t.size(1), t.size(3)}, t.options()).transpose(1, 2);
}
std::vector<int64_t> bshd_strides(const torch::Tensor& t) {
  return {t.size(2) * t.size(1) * t.size(3), t.size(3), t.size(1) * t.size(3), 1};
}

std::vector<int64_t> dims(const torch::Tensor& t) { return t.sizes().vec(); }
std::vector<int64_t> strides(const torch::Tensor& t) { return t.strides().vec(); }

FusedAttentionShape shape_of(const FusedAttentionInputs& in) {
  FusedAttentionShape s;
  s.batch = in.query.size(0);
  s.heads = in.query.size(1);
  s.query_length = in.query.size(2);
  s.key_length = in.key.size(2);
  s.head_dim = in.query.size(3);
  s.dtype = attention_dtype(in.query.scalar_type());
  s.bias = in.bias.defined();
  s.causal = in.causal;
  s.padded = in.key_lengths.defined();
  s.dropout = in.dropout;
  s.compute_capability_major = at::cuda::getCurrentDeviceProperties()->major;
  return s;
}

void check_inputs(const FusedAttentionInputs& in, const FusedAttentionShape& s) {
  const std::string refusal = fused_attention_refusal(s);
  T5S_CHECK(refusal.empty(), "cuDNN's fused attention does not take this call: ", refusal);
  T5S_CHECK(in.key.sizes() == in.value.sizes() && in.key.size(0) == s.batch && in.key.size(1) == s.heads &&
                in.key.size(3) == s.head_dim,
            "cuDNN's fused attention: q ", in.query.sizes(), ", k ", in.key.sizes(), ", v ", in.value.sizes());
  for (const torch::Tensor* t : {&in.query, &in.key, &in.value}) {
    T5S_CHECK(t->is_cuda() && t->stride(3) == 1 && t->scalar_type() == in.query.scalar_type(),
              "cuDNN's fused attention: q, k and v must be CUDA tensors of one dtype with a dense last dimension");
  }
  if (in.bias.defined()) {
    T5S_CHECK(in.bias.dim() == 4 && in.bias.size(0) == 1 && in.bias.size(1) == s.heads &&
                  in.bias.size(2) == s.query_length && in.bias.size(3) == s.key_length && in.bias.is_contiguous() &&
                  in.bias.scalar_type() == in.query.scalar_type(),
              "cuDNN's fused attention: the bias must be a contiguous (1, ", s.heads, ", ", s.query_length, ", ",
              s.key_length, ") tensor of q's dtype; it is ", in.bias.sizes(), " ", in.bias.scalar_type());
  }
  if (in.key_lengths.defined()) {
    T5S_CHECK(in.key_lengths.dim() == 1 && in.key_lengths.size(0) == s.batch &&
                  in.key_lengths.scalar_type() == torch::kInt32 && in.key_lengths.is_cuda(),
              "cuDNN's fused attention: key lengths must be a (", s.batch, ") int32 CUDA tensor");
  }
}

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& g, const char* name, Uid uid,
                                                    std::vector<int64_t> d, std::vector<int64_t> st) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(d).set_stride(st));
}

std::shared_ptr<fe::graph::Tensor_attributes> lengths(fe::graph::Graph& g, const char* name, Uid uid, int64_t b) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({b, 1, 1, 1})
                      .set_stride({1, 1, 1, 1}).set_data_type(fe::DataType_t::INT32));
}

std::shared_ptr<fe::graph::Tensor_attributes> scalar(fe::graph::Graph& g, const char* name, Uid uid) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({1, 1, 1, 1})
                      .set_stride({1, 1, 1, 1}).set_data_type(fe::DataType_t::INT64));
}

// The causal mask, the padding (each row's query and key lengths) and dropout (a seed and an offset), forward's and
// backward's alike.
template <class Attributes>
void add_masks_and_dropout(fe::graph::Graph& g, const FusedAttentionShape& s, Attributes& options) {
  if (s.causal) options.set_causal_mask(true);
  if (s.padded) {
    options.set_padding_mask(true)
        .set_seq_len_q(lengths(g, "SeqQ", kSeqQ, s.batch))
        .set_seq_len_kv(lengths(g, "SeqKv", kSeqKv, s.batch));
  }
  if (s.dropout > 0.0) {
    options.set_dropout(static_cast<float>(s.dropout), scalar(g, "Seed", kSeed), scalar(g, "Offset", kOffset));
  }
}

std::shared_ptr<fe::graph::Graph> new_graph(AttentionDtype dtype) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(data_type(dtype))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

void finish(fe::graph::Graph& g, const FusedAttentionGraphKey& key) {
  cudnnHandle_t handle = at::native::getCudnnHandle();
  check(g.validate(), "validate", key);
  check(g.build_operation_graph(handle), "build_operation_graph", key);
  check(g.create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans", key);
  check(g.check_support(handle), "check_support", key);
  check(g.build_plans(handle), "build_plans", key);
}

std::shared_ptr<fe::graph::Graph> build_forward(const FusedAttentionGraphKey& key, const FusedAttentionInputs& in,
                                                const torch::Tensor& output) {
  const FusedAttentionShape& s = key.shape;
  auto g = new_graph(s.dtype);
  auto q = input(*g, "Q", kQ, dims(in.query), strides(in.query));
  auto k = input(*g, "K", kK, dims(in.key), strides(in.key));
  auto v = input(*g, "V", kV, dims(in.value), strides(in.value));
  auto options = fe::graph::SDPA_attributes().set_name("t5_attention").set_generate_stats(true).set_attn_scale(1.0f);
  if (s.bias) options.set_bias(input(*g, "Bias", kBias, dims(in.bias), strides(in.bias)));
  add_masks_and_dropout(*g, s, options);
  auto [o, stats] = g->sdpa(q, k, v, options);
  o->set_output(true).set_uid(kO).set_dim(dims(output)).set_stride(strides(output));
  stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT);
  finish(*g, key);
  return g;
}

// The backward of a forward on `in`: O and dO laid out as the forward's output (B, Sq, H, D), the gradients of q, k
// and v as bshd_like() makes them, Stats contiguous.
std::shared_ptr<fe::graph::Graph> build_backward(const FusedAttentionGraphKey& key, const FusedAttentionInputs& in) {
  const FusedAttentionShape& s = key.shape;
  auto g = new_graph(s.dtype);
  auto q = input(*g, "Q", kQ, dims(in.query), strides(in.query));
  auto k = input(*g, "K", kK, dims(in.key), strides(in.key));
  auto v = input(*g, "V", kV, dims(in.value), strides(in.value));
  auto o = input(*g, "O", kO, dims(in.query), bshd_strides(in.query));
  auto d_o = input(*g, "dO", kDO, dims(in.query), bshd_strides(in.query));
  auto stats = g->tensor(fe::graph::Tensor_attributes().set_name("Stats").set_uid(kStats)
                             .set_dim({s.batch, s.heads, s.query_length, 1})
                             .set_stride({s.heads * s.query_length, s.query_length, 1, 1})
                             .set_data_type(fe::DataType_t::FLOAT));
  auto options = fe::graph::SDPA_backward_attributes().set_name("t5_attention_backward").set_attn_scale(1.0f);
  if (s.bias) {
    options.set_bias(input(*g, "Bias", kBias, dims(in.bias), strides(in.bias)));
    if (key.bias_gradient) {
      options.set_dbias(g->tensor(fe::graph::Tensor_attributes().set_name("dBias").set_uid(kDBias)
                                      .set_dim(dims(in.bias)).set_stride(strides(in.bias))));
    }
  }
  add_masks_and_dropout(*g, s, options);
  auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, d_o, stats, options);
  dq->set_output(true).set_uid(kDQ).set_dim(dims(in.query)).set_stride(bshd_strides(in.query));
  dk->set_output(true).set_uid(kDK).set_dim(dims(in.key)).set_stride(bshd_strides(in.key));
  dv->set_output(true).set_uid(kDV).set_dim(dims(in.value)).set_stride(bshd_strides(in.value));
  finish(*g, key);
  return g;
}

FusedAttentionGraphKey graph_key(const FusedAttentionInputs& in, const FusedAttentionShape& s, bool backward,
                                 bool bias_gradient) {
  FusedAttentionGraphKey key;
  key.backward = backward;
  key.bias_gradient = bias_gradient;
  key.device = in.query.get_device();
  key.shape = s;
  for (int i = 0; i < 4; ++i) {
    key.q_strides[i] = in.query.stride(i);
    key.k_strides[i] = in.key.stride(i);
    key.v_strides[i] = in.value.stride(i);
    key.o_strides[i] = bshd_strides(in.query)[i];  // the output's layout (and dO's), always (B, Sq, H, D)
  }
  return key;
}

// The graphs built so far, for the process (a graph holds its execution plan; building one takes a fraction of a
// second, running it microseconds of host time). The trainer's lengths are multiples of data.pad_to_multiple_of, so
// a run builds a few graphs per call site.
class GraphCache {
 public:
  template <class Build>
  std::shared_ptr<fe::graph::Graph> get(const FusedAttentionGraphKey& key, Build build) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = graphs_.find(key);
    if (found != graphs_.end()) return found->second;
    auto graph = build();
    graphs_.emplace(key, graph);
    return graph;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<FusedAttentionGraphKey, std::shared_ptr<fe::graph::Graph>, FusedAttentionGraphKeyHash> graphs_;
};

GraphCache& graph_cache() {
  static GraphCache cache;
  return cache;
}

void run(const fe::graph::Graph& g, std::unordered_map<int64_t, void*>& pointers, const FusedAttentionGraphKey& key,
         const torch::Tensor& like) {
  int64_t workspace_bytes = 0;
  check(g.get_workspace_size(workspace_bytes), "get_workspace_size", key);
  const torch::Tensor workspace =
      torch::empty({std::max<int64_t>(workspace_bytes, 1)}, like.options().dtype(torch::kUInt8));
  cudnnHandle_t handle = at::native::getCudnnHandle();
  const cudnnStatus_t stream_set = fe::detail::set_stream(handle, at::cuda::getCurrentCUDAStream().stream());
  T5S_CHECK(stream_set == CUDNN_STATUS_SUCCESS, "cuDNN's fused attention: cudnnSetStream failed (status ",
            static_cast<int>(stream_set), ") for ", key.text());
  check(g.execute(handle, pointers, workspace.data_ptr()), "execute", key);
}

struct CommonTensors {
  torch::Tensor query_lengths, seed_offset;  // kept alive until the graph has been queued
};

void add_common(std::unordered_map<int64_t, void*>& p, const FusedAttentionInputs& in, const FusedAttentionShape& s,
                int64_t seed, int64_t offset, CommonTensors& keep) {
  p[kQ] = in.query.data_ptr();
  p[kK] = in.key.data_ptr();
  p[kV] = in.value.data_ptr();
  if (s.bias) p[kBias] = in.bias.data_ptr();
  if (s.padded) {
    keep.query_lengths = torch::full({s.batch}, s.query_length, in.key_lengths.options());
    p[kSeqQ] = keep.query_lengths.data_ptr();
    p[kSeqKv] = in.key_lengths.data_ptr();
  }
  if (s.dropout > 0.0) {
    keep.seed_offset = torch::tensor({seed, offset}, torch::kInt64).to(in.query.device());
    p[kSeed] = keep.seed_offset.data_ptr();
    p[kOffset] = static_cast<int64_t*>(keep.seed_offset.data_ptr()) + 1;
  }
}

}  // namespace

std::string cudnn_attention_unavailable() { return cudnn_load_error(); }

FusedAttentionForwardResult cudnn_attention_forward(const FusedAttentionInputs& in, at::Generator generator,
                                                    bool with_backward, bool bias_gradient) {
  const std::string unavailable = cudnn_load_error();
  T5S_CHECK(unavailable.empty(), "cuDNN's fused attention: ", unavailable);
  const c10::cuda::CUDAGuard guard(in.query.device());
  const FusedAttentionShape s = shape_of(in);
  check_inputs(in, s);

  FusedAttentionForwardResult result;
  // (B, Sq, H, D) in memory, seen as (B, H, Sq, D): the layout the output projection reads.
  result.output = torch::empty({s.batch, s.query_length, s.heads, s.head_dim}, in.query.options());
  result.stats = torch::empty({s.batch, s.heads, s.query_length, 1}, in.query.options().dtype(torch::kFloat32));
  const FusedAttentionGraphKey key = graph_key(in, s, /*backward=*/false, false);
  auto graph = graph_cache().get(key, [&] { return build_forward(key, in, result.output.transpose(1, 2)); });
  if (with_backward) {
    // Built now, so that a graph cuDNN refuses is refused before anything ran, and the caller can run another kernel.
    const FusedAttentionGraphKey backward_key = graph_key(in, s, /*backward=*/true, s.bias && bias_gradient);
    graph_cache().get(backward_key, [&] { return build_backward(backward_key, in); });
  }

  if (s.dropout > 0.0) {
    // After the graphs are built (a refused graph draws nothing). As PyTorch's fused kernels take theirs: the generator advanced past every element this call can draw.
    auto* cuda_generator = at::check_generator<at::CUDAGeneratorImpl>(generator);
    std::lock_guard<std::mutex> lock(cuda_generator->mutex_);
    const at::PhiloxCudaState philox =
        cuda_generator->philox_cuda_state(static_cast<uint64_t>(s.batch * s.heads * s.query_length * s.key_length));
    T5S_CHECK(!philox.captured_, "cuDNN's fused attention: dropout under CUDA graph capture is not supported");
    result.seed = static_cast<int64_t>(philox.seed_.val);
    result.offset = static_cast<int64_t>(philox.offset_.val);
  }

  std::unordered_map<int64_t, void*> pointers;
  CommonTensors keep;
  add_common(pointers, in, s, result.seed, result.offset, keep);
  pointers[kO] = result.output.data_ptr();
  pointers[kStats] = result.stats.data_ptr();
  run(*graph, pointers, key, in.query);
  return result;
}

FusedAttentionGradients cudnn_attention_backward(const FusedAttentionInputs& in, const FusedAttentionForwardResult& fwd,
                                                 const torch::Tensor& grad_output, bool bias_gradient) {
  const c10::cuda::CUDAGuard guard(in.query.device());
  const FusedAttentionShape s = shape_of(in);
  check_inputs(in, s);
  // dO in the output's layout, so that one graph serves every call of a shape.
  T5S_CHECK(grad_output.sizes() == fwd.output.sizes(), "cuDNN's fused attention: the output's gradient is ",
            grad_output.sizes(), ", the output ", fwd.output.sizes());
  const torch::Tensor d_o = grad_output.contiguous();
  FusedAttentionGradients grads;
  grads.query = bshd_like(in.query);
  grads.key = bshd_like(in.key);
  grads.value = bshd_like(in.value);
  const bool with_dbias = s.bias && bias_gradient;
  if (with_dbias) grads.bias = torch::empty_like(in.bias);

  const FusedAttentionGraphKey key = graph_key(in, s, /*backward=*/true, with_dbias);
  auto graph = graph_cache().get(key, [&] { return build_backward(key, in); });

  std::unordered_map<int64_t, void*> pointers;
  CommonTensors keep;
  add_common(pointers, in, s, fwd.seed, fwd.offset, keep);
  pointers[kO] = fwd.output.data_ptr();
  pointers[kStats] = fwd.stats.data_ptr();
  pointers[kDO] = d_o.data_ptr();
  pointers[kDQ] = grads.query.data_ptr();
  pointers[kDK] = grads.key.data_ptr();
  pointers[kDV] = grads.value.data_ptr();
  if (with_dbias) pointers[kDBias] = grads.bias.data_ptr();
  run(*graph, pointers, key, in.query);
  return grads;
}

}  // namespace t5scale

#else  // built without cuDNN's frontend

namespace t5scale {

std::string cudnn_attention_unavailable() {
  return "this build has no cuDNN frontend (scripts/setup.sh installs it; configure again)";
}

FusedAttentionForwardResult cudnn_attention_forward(const FusedAttentionInputs&, at::Generator, bool, bool) {
  throw Error("cuDNN's fused attention: " + cudnn_attention_unavailable());
}

FusedAttentionGradients cudnn_attention_backward(const FusedAttentionInputs&, const FusedAttentionForwardResult&,
                                                 const torch::Tensor&, bool) {
  throw Error("cuDNN's fused attention: " + cudnn_attention_unavailable());
}

}  // namespace t5scale

#endif
