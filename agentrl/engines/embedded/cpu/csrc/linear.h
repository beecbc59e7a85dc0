// agentrl's bf16 matmul over a packed weight (linear.cpp), for the other kernels here.
#pragma once

#include <ATen/ATen.h>

#include <optional>

namespace agentrl {

// weight [N, K] bf16 (N a multiple of 32, K even) in the layout `linear` reads
at::Tensor pack_weight(const at::Tensor& weight);

// x [M, K] bf16 @ weight.T + bias (float32 [N]) as bf16 [M, N], over pack_weight's copy
at::Tensor linear(const at::Tensor& x, const at::Tensor& packed, const std::optional<at::Tensor>& bias);

}  // namespace agentrl
