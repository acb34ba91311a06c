#include "dist/fused_attention.h"

#include <cstring>
#include <sstream>

#include "core/fnv1a.h"

namespace t5scale {

AttentionDtype attention_dtype(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kHalf: return AttentionDtype::kFp16;
    case torch::kBFloat16: return AttentionDtype::kBf16;
    case torch::kFloat32: return AttentionDtype::kFp32;
    default: return AttentionDtype::kOther;
  }
}

const char* attention_dtype_name(AttentionDtype dtype) {
  switch (dtype) {
    case AttentionDtype::kFp16: return "fp16";
    case AttentionDtype::kBf16: return "bf16";
    case AttentionDtype::kFp32: return "fp32";
    case AttentionDtype::kOther: break;
  }
  return "other";
}

std::string fused_attention_refusal(const FusedAttentionShape& s) {
  if (s.compute_capability_major > 0 && s.compute_capability_major < 8) {
    return "sm" + std::to_string(s.compute_capability_major) + "x (cuDNN's fused attention needs sm80 or newer)";
  }
  if (s.dtype != AttentionDtype::kFp16 && s.dtype != AttentionDtype::kBf16) {
    return std::string(attention_dtype_name(s.dtype)) + " (cuDNN's fused attention takes fp16 and bf16)";
  }
  if (s.head_dim % 8 != 0 || s.head_dim > 128 || s.head_dim <= 0) {
    return "head dim " + std::to_string(s.head_dim) + " (cuDNN's fused attention is used for multiples of 8 up to 128)";
  }
  if (s.batch <= 0 || s.heads <= 0 || s.query_length <= 0 || s.key_length <= 0) {
    return "an empty batch";
  }
  if (s.bias_per_row) {
    return "a bias that is not (1, H, Sq, Skv) (an additive mask per row: cuDNN takes padding as key lengths)";
  }
  if (!(s.dropout >= 0.0 && s.dropout < 1.0)) {
    std::ostringstream text;
    text << "dropout " << s.dropout << " (cuDNN's fused attention takes 0 <= p < 1)";
    return text.str();
  }
  return "";
}

bool FusedAttentionGraphKey::operator==(const FusedAttentionGraphKey& o) const {
  const FusedAttentionShape &a = shape, &b = o.shape;
  return backward == o.backward && bias_gradient == o.bias_gradient && device == o.device && a.batch == b.batch &&
         a.heads == b.heads && a.query_length == b.query_length && a.key_length == b.key_length && a.head_dim == b.head_dim &&
         a.dtype == b.dtype && a.bias == b.bias && a.bias_per_row == b.bias_per_row && a.causal == b.causal &&
         a.padded == b.padded && a.dropout == b.dropout && a.compute_capability_major == b.compute_capability_major &&
         std::memcmp(q_strides, o.q_strides, sizeof(q_strides)) == 0 &&
         std::memcmp(k_strides, o.k_strides, sizeof(k_strides)) == 0 &&
         std::memcmp(v_strides, o.v_strides, sizeof(v_strides)) == 0 &&
         std::memcmp(o_strides, o.o_strides, sizeof(o_strides)) == 0;
}

std::string FusedAttentionGraphKey::text() const {
  std::ostringstream t;
  const auto strides = [&](const char* name, const int64_t* s) {
    t << " " << name << "(" << s[0] << "," << s[1] << "," << s[2] << "," << s[3] << ")";
  };
  t << (backward ? "backward " : "forward ") << attention_dtype_name(shape.dtype) << " B=" << shape.batch
    << " H=" << shape.heads << " Sq=" << shape.query_length << " Skv=" << shape.key_length << " D=" << shape.head_dim;
  if (shape.bias) t << (bias_gradient ? " bias+dbias" : " bias");
  if (shape.causal) t << " causal";
  if (shape.padded) t << " padded";
  if (shape.bias_per_row) t << " bias-per-row";
  t << " p=" << shape.dropout << " sm" << shape.compute_capability_major << "x device=" << device;
  strides("q", q_strides);
  strides("k", k_strides);
  strides("v", v_strides);
  strides("o", o_strides);
  return t.str();
}

size_t FusedAttentionGraphKeyHash::operator()(const FusedAttentionGraphKey& key) const {
  // The text names every field that operator== compares.
  return static_cast<size_t>(fnv1a_64(key.text()));
}

}  // namespace t5scale
