// A decode step's layers and head on agentrl's matmul and decode attention and SGLang's other CPU kernels, in one call.
//
// The lean forward's Python loop makes the same calls (lean_forward.py, _kernel_layers): at batch 1 on a 2-core
// AVX512-BF16 EPYC, Python between its ~360 calls took about a tenth of a step. Here the loop runs in C++ and calls
// each kernel through the dispatcher, in the same order on the same tensors, so the logits are the Python loop's,
// bit for bit, per-head q/k norms (Qwen3) included. Decode-only steps; the caller checks that.

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <optional>
#include <vector>

#include "decode_attention.h"
#include "linear.h"

namespace {

// SGLang's ops, found once (their library is loaded before the first step) and called boxed: their registered C++
// signatures vary between releases (const or not), their schemas do not
struct SglangOps {
  c10::OperatorHandle rms_norm, add_rms_norm, silu_and_mul, rotary;

  static const SglangOps& get() {
    static const SglangOps ops = [] {
      auto& d = c10::Dispatcher::singleton();
      return SglangOps{
          d.findSchemaOrThrow("sgl_kernel::rmsnorm_cpu", ""),
          d.findSchemaOrThrow("sgl_kernel::fused_add_rmsnorm_cpu", ""),
          d.findSchemaOrThrow("sgl_kernel::silu_and_mul_cpu", ""),
          d.findSchemaOrThrow("sgl_kernel::rotary_embedding_cpu", ""),
      };
    }();
    return ops;
  }
};

// calls `op` on `args`; returns what it left on the stack
std::vector<c10::IValue> call(const c10::OperatorHandle& op, std::vector<c10::IValue> args) {
  op.callBoxed(&args);
  return args;
}

at::Tensor packed_linear(const at::Tensor& x, const at::Tensor& packed, const std::optional<at::Tensor>& bias) {
  return agentrl::linear(x, packed, bias);
}

// SGLang's matmul adds a float32 bias; a bf16 one is converted per call, as the Python loop does (an in-place update
// of the parameter stays live)
std::optional<at::Tensor> float_bias(const std::optional<at::Tensor>& bias) {
  if (!bias.has_value()) return std::nullopt;
  return bias->to(at::kFloat);
}

// HF's RMSNorm in half precision, as the Python loop computes it (hf_rms_norm): normalise in float32, then scale
at::Tensor hf_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::Tensor h = x.to(at::kFloat);
  return weight * (h * at::rsqrt(h.pow(2).mean(-1, true) + eps)).to(x.scalar_type());
}

// x_td: the step's embedded tokens [t, hidden], the residual stream (updated in place); returns the logits [t, vocab]
at::Tensor decode_layers(
    at::Tensor x_td, const at::Tensor& positions, const at::Tensor& lengths, int64_t write_col, double scale,
    const at::Tensor& cos_sin, int64_t heads, int64_t kv_heads, double eps, at::TensorList in_norms,
    at::TensorList post_norms, at::TensorList qkv, const c10::List<std::optional<at::Tensor>>& qkv_bias,
    at::TensorList o, const c10::List<std::optional<at::Tensor>>& o_bias, at::TensorList gate_up,
    const c10::List<std::optional<at::Tensor>>& gate_up_bias, at::TensorList down,
    const c10::List<std::optional<at::Tensor>>& down_bias, at::TensorList q_norms, at::TensorList k_norms,
    double qk_eps, at::TensorList keys, at::TensorList values,
    const at::Tensor& final_norm, const at::Tensor& head, const std::optional<at::Tensor>& head_bias) {
  const int64_t layers = static_cast<int64_t>(qkv.size());
  for (auto n : {in_norms.size(), post_norms.size(), qkv_bias.size(), o.size(), o_bias.size(), gate_up.size(),
                 gate_up_bias.size(), down.size(), down_bias.size(), keys.size(), values.size()})
    TORCH_CHECK(static_cast<int64_t>(n) == layers, "every per-layer list needs ", layers, " entries, one has ", n);
  TORCH_CHECK(q_norms.size() == k_norms.size() && (q_norms.empty() || static_cast<int64_t>(q_norms.size()) == layers),
              "q_norms and k_norms: one per layer, or none");
  TORCH_CHECK(x_td.dim() == 2 && positions.size(0) == x_td.size(0), "x [t, hidden] with one position per row");
  const auto& ops = SglangOps::get();
  const int64_t t = x_td.size(0), dim = keys[0].size(3);
  at::Tensor h_td = call(ops.rms_norm, {x_td, in_norms[0], eps})[0].toTensor();
  for (int64_t i = 0; i < layers; ++i) {
    const at::Tensor qkv_thd = packed_linear(h_td, qkv[i], float_bias(qkv_bias.get(i))).view({t, heads + 2 * kv_heads, dim});
    at::Tensor qk_thd = qkv_thd.narrow(1, 0, heads + kv_heads);
    if (!q_norms.empty()) {  // Qwen3: each head normed, q's and k's with their own weights (LayerWeights.norm_qk_heads)
      qk_thd = at::cat({hf_rms_norm(qk_thd.narrow(1, 0, heads), q_norms[i], qk_eps),
                        hf_rms_norm(qk_thd.narrow(1, heads, kv_heads), k_norms[i], qk_eps)}, 1);
    }
    const auto rotated = call(
        ops.rotary, {positions, qk_thd.narrow(1, 0, heads), qk_thd.narrow(1, heads, kv_heads), dim, cos_sin, true});
    at::Tensor layer_keys = keys[i], layer_values = values[i];
    const at::Tensor out_thd = agentrl::decode_attention(
        rotated[0].toTensor(), layer_keys, layer_values, lengths, write_col, scale, rotated[1].toTensor(),
        qkv_thd.narrow(1, heads + kv_heads, kv_heads));
    h_td = packed_linear(out_thd.view({t, heads * dim}), o[i], float_bias(o_bias.get(i)));
    call(ops.add_rms_norm, {h_td, x_td, post_norms[i], eps});
    const at::Tensor gate_up_td = packed_linear(h_td, gate_up[i], float_bias(gate_up_bias.get(i)));
    h_td = packed_linear(call(ops.silu_and_mul, {gate_up_td})[0].toTensor(), down[i], float_bias(down_bias.get(i)));
    call(ops.add_rms_norm, {h_td, x_td, i + 1 < layers ? in_norms[i + 1] : final_norm, eps});
  }
  return packed_linear(h_td, head, float_bias(head_bias));
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(agentrl, m) {
  m.def(
      "decode_layers(Tensor(a!) x, Tensor positions, Tensor lengths, int write_col, float scale, Tensor cos_sin, "
      "int heads, int kv_heads, float eps, Tensor[] in_norms, Tensor[] post_norms, Tensor[] qkv, Tensor?[] qkv_bias, "
      "Tensor[] o, Tensor?[] o_bias, Tensor[] gate_up, Tensor?[] gate_up_bias, Tensor[] down, Tensor?[] down_bias, "
      "Tensor[] q_norms, Tensor[] k_norms, float qk_eps, Tensor(b!)[] keys, Tensor(c!)[] values, Tensor final_norm, Tensor head, Tensor? head_bias) -> Tensor");
  m.impl("decode_layers", c10::DispatchKey::CPU, &decode_layers);
}
