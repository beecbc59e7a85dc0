// A float32 decode step's layers and head in one call, for any CPU torch runs on (the portable path).
//
// The lean forward's reference loop (lean_forward.py, LeanForward.step, torch ops) makes these calls, in this order on
// the same tensors, so the logits are the Python loop's, bit for bit: only the Python between the ~20 calls a layer
// is gone. No intrinsics here: the arithmetic is torch's own kernels (MKL/oneDNN matmuls, SDPA), which pick their
// instruction set at run time; this file is compiled per instruction-set family (AVX2/FMA on x86-64, NEON on aarch64)
// and cached under a name that includes those flags (build.py). Decode-only steps; the caller checks that. The
// step's matmul form (the Python loop's LeanForward.matmul_form) picks torch's product or agentrl's float32 one
// (linear_fp32.cpp).

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <torch/library.h>

#include <optional>
#include <vector>

#include "linear_fp32.h"

namespace {

// how a step's projections multiply (lean_forward.py, MatmulForm)
enum class Form : int64_t { Linear = 0, WeightLeft = 1, Agentrl = 2 };

// residual + x @ weight.T + bias over token rows [t, in] (lean_forward.py, project_rows); WeightLeft computes it as
// weight @ x.T, a single row sent as two identical columns; Agentrl through linear_fp32
at::Tensor project_rows(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                        const std::optional<at::Tensor>& residual, Form form) {
  if (form == Form::Agentrl) {  // called directly, not through the dispatcher: named for the profiler here
    RECORD_FUNCTION("agentrl::linear_fp32", std::vector<c10::IValue>());
    return agentrl::linear_fp32(x, weight, bias, residual);
  }
  if (form == Form::Linear) {
    if (!residual.has_value()) return at::linear(x, weight, bias);
    if (!bias.has_value()) return at::addmm(*residual, x, weight.t());
    return *residual + at::linear(x, weight, bias);
  }
  const int64_t rows = x.size(0);
  at::Tensor xs = x;
  std::optional<at::Tensor> res = residual;
  if (rows == 1) {
    xs = at::cat({x, x});
    if (res.has_value()) res = at::cat({*res, *res});
  }
  at::Tensor out_ot;
  if (res.has_value()) {
    out_ot = at::addmm(res->t(), weight, xs.t());
    if (bias.has_value()) out_ot += bias->unsqueeze(1);
  } else if (bias.has_value()) {
    out_ot = at::addmm(bias->unsqueeze(1), weight, xs.t());
  } else {
    out_ot = at::mm(weight, xs.t());
  }
  return out_ot.narrow(1, 0, rows).t().contiguous();
}

at::Tensor rms_norm(const at::Tensor& x, const std::optional<at::Tensor>& weight, double eps) {
  return at::rms_norm(x, {x.size(-1)}, weight, eps);
}

struct Shape {
  int64_t heads, kv_heads, dim;
};

// the step's attention for one layer: store the rows' keys/values at write_col, attend each row's window
// (SlotKVCache.write_step, then LeanForward._attention's decode branch)
at::Tensor attend(const at::Tensor& qk_thd, const at::Tensor& v_thd, at::Tensor keys, at::Tensor values,
                  int64_t write_col, int64_t lo, const std::optional<at::Tensor>& mask, double scale, Shape s) {
  const int64_t r = qk_thd.size(0);
  keys.narrow(0, 0, r).select(2, write_col).copy_(qk_thd.narrow(1, s.heads, s.kv_heads));
  values.narrow(0, 0, r).select(2, write_col).copy_(v_thd);
  const at::Tensor k = keys.narrow(0, 0, r).narrow(2, lo, write_col + 1 - lo);
  const at::Tensor v = values.narrow(0, 0, r).narrow(2, lo, write_col + 1 - lo);
  const at::Tensor q = qk_thd.narrow(1, 0, s.heads).reshape({r, s.kv_heads, s.heads / s.kv_heads, s.dim});
  return at::scaled_dot_product_attention(q, k, v, mask, 0.0, false, scale).view({r, s.heads * s.dim});
}

void check(const at::Tensor& x_td, const at::Tensor& positions, size_t layers,
           std::initializer_list<size_t> per_layer) {
  TORCH_CHECK(x_td.dim() == 2 && x_td.scalar_type() == at::kFloat, "x: float32 [t, hidden]");
  TORCH_CHECK(positions.dim() == 1 && positions.size(0) == x_td.size(0), "one position per row");
  for (size_t n : per_layer)
    TORCH_CHECK(n == layers, "every per-layer list needs ", layers, " entries, one has ", n);
}

// x_td: the step's embedded tokens [t, hidden]; returns the logits [t, vocab]
at::Tensor portable_decode_layers(
    const at::Tensor& x_in, const at::Tensor& positions, const at::Tensor& rope_cos, const at::Tensor& rope_sin,
    int64_t write_col, int64_t lo, const std::optional<at::Tensor>& mask, double scale, int64_t heads,
    int64_t kv_heads, int64_t form_code, at::TensorList in_norms, at::ArrayRef<double> in_eps,
    at::TensorList post_norms, at::ArrayRef<double> post_eps, at::TensorList qkv,
    const c10::List<std::optional<at::Tensor>>& qkv_bias, at::TensorList o,
    const c10::List<std::optional<at::Tensor>>& o_bias, at::TensorList gate_up,
    const c10::List<std::optional<at::Tensor>>& gate_up_bias, at::TensorList down,
    const c10::List<std::optional<at::Tensor>>& down_bias, at::TensorList q_norms, at::TensorList k_norms,
    at::ArrayRef<double> qk_eps,
    at::TensorList keys, at::TensorList values, const at::Tensor& final_norm, double final_eps,
    const at::Tensor& head, const std::optional<at::Tensor>& head_bias) {
  const size_t layers = qkv.size();
  check(x_in, positions, layers, {in_norms.size(), in_eps.size(), post_norms.size(), post_eps.size(),
                                  qkv_bias.size(), o.size(), o_bias.size(), gate_up.size(), gate_up_bias.size(),
                                  down.size(), down_bias.size(), keys.size(), values.size()});
  TORCH_CHECK(q_norms.size() == k_norms.size() && q_norms.size() == qk_eps.size() &&
                  (q_norms.empty() || q_norms.size() == layers),
              "q_norms, k_norms and qk_eps: one per layer, or none");
  const int64_t t = x_in.size(0), dim = keys[0].size(3);
  const Shape s{heads, kv_heads, dim};
  TORCH_CHECK(form_code >= 0 && form_code <= 2, "form: 0 (linear), 1 (weight left) or 2 (agentrl), got ", form_code);
  const Form form = static_cast<Form>(form_code);
  const at::Tensor cos = rope_cos.index_select(0, positions).view({t, 1, dim});
  const at::Tensor sin = rope_sin.index_select(0, positions).view({t, 1, dim});
  at::Tensor x = x_in;
  for (size_t i = 0; i < layers; ++i) {
    at::Tensor h = rms_norm(x, in_norms[i], in_eps[i]);
    const at::Tensor qkv_thd = project_rows(h, qkv[i], qkv_bias.get(i), std::nullopt, form)
                                   .view({t, heads + 2 * kv_heads, dim});
    at::Tensor qk = qkv_thd.narrow(1, 0, heads + kv_heads);
    if (!q_norms.empty()) {  // LayerWeights.norm_qk_heads: each head normed, q's and k's weights per head (read now:
      // an in-place update of the parameters between steps must count)
      const at::Tensor weight_hd = at::cat({q_norms[i].expand({heads, dim}), k_norms[i].expand({kv_heads, dim})});
      qk = rms_norm(qk, std::nullopt, qk_eps[i]) * weight_hd;
    }
    qk = at::addcmul(qk * cos, qk.roll({dim / 2}, {-1}), sin);
    const at::Tensor out = attend(qk, qkv_thd.narrow(1, heads + kv_heads, kv_heads), keys[i], values[i], write_col,
                                  lo, mask, scale, s);
    x = project_rows(out, o[i], o_bias.get(i), x, form);
    h = rms_norm(x, post_norms[i], post_eps[i]);
    const auto gate_and_up = project_rows(h, gate_up[i], gate_up_bias.get(i), std::nullopt, form).chunk(2, -1);
    x = project_rows(at::silu(gate_and_up[0]) * gate_and_up[1], down[i], down_bias.get(i), x, form);
  }
  return project_rows(rms_norm(x, final_norm, final_eps), head, head_bias, std::nullopt, form);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(agentrl, m) {
  m.def(
      "portable_decode_layers(Tensor x, Tensor positions, Tensor rope_cos, Tensor rope_sin, int write_col, int lo, "
      "Tensor? mask, float scale, int heads, int kv_heads, int form, Tensor[] in_norms, float[] in_eps, "
      "Tensor[] post_norms, float[] post_eps, Tensor[] qkv, Tensor?[] qkv_bias, Tensor[] o, Tensor?[] o_bias, "
      "Tensor[] gate_up, Tensor?[] gate_up_bias, Tensor[] down, Tensor?[] down_bias, Tensor[] q_norms, "
      "Tensor[] k_norms, float[] qk_eps, Tensor(a!)[] keys, Tensor(b!)[] values, Tensor final_norm, float final_eps, Tensor head, "
      "Tensor? head_bias) -> Tensor");
  m.impl("portable_decode_layers", c10::DispatchKey::CPU, &portable_decode_layers);
}
