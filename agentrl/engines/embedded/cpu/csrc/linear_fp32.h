// agentrl's float32 matmul for few rows (linear_fp32.cpp), for the portable decode loop.
#pragma once

#include <ATen/ATen.h>

#include <optional>

namespace agentrl {

// residual + x @ weight.T + bias over the stored weight [N, K]; each output summed in one fixed order (batch invariant)
at::Tensor linear_fp32(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                       const std::optional<at::Tensor>& residual);

}  // namespace agentrl
