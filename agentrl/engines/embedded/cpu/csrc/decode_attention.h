// agentrl's bf16 decode attention over the slot KV cache (decode_attention.cpp), for the other kernels here.
#pragma once

#include <ATen/ATen.h>

#include <optional>

namespace agentrl {

// each of q's rows [R, heads, dim] over its lengths[r] tokens ending at column write_col of one layer's
// keys/values [rows_cap, kv_heads, cols_cap, dim]; new_keys/new_values [R, kv_heads, dim] are stored there first
at::Tensor decode_attention(
    const at::Tensor& q, at::Tensor& keys, at::Tensor& values, const at::Tensor& lengths, int64_t write_col,
    double scale, const std::optional<at::Tensor>& new_keys, const std::optional<at::Tensor>& new_values);

}  // namespace agentrl
