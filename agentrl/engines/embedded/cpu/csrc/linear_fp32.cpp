// A float32 matmul for decode's few rows on AVX2/FMA, over the stored weight [N, K] (no packed copy).
//
// Why not torch's (MKL/oneDNN) sgemm: at 1-24 rows a projection is a weight stream, and a BLAS built for large
// products packs and blocks for reuse that is not there; its rate also depends on whose CPU it runs on. Here each
// output is a dot product of a weight row with an x row, 8 lanes at a time: a tile of COLS weight rows by ROWS x rows
// keeps COLS x ROWS sums in registers, reading each weight vector once per tile and each x vector once per COLS
// columns; a thread walks its own run of weight rows front to back and, from 3 rows on, requests the next tile's
// weight lines while it multiplies the current one, spread over all of the tile's row groups (requested in the first
// group only, the weight stream idled during the others: 1.2-1.35x slower at 8-64 rows on SmolLM2's projections).
//
// Every output's sum is taken in the same order (8 lane sums over k, then the lanes, then the tail, then bias and
// residual), whatever the batch size, the row's place in it or the thread count: a row's result does not depend on
// what else is in the step (batch invariance), and the Python and C++ loops that both call it agree bit for bit.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "linear_fp32.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace {

constexpr int COLS = 3;  // weight rows per tile: 3 x 4 sums + 3 weight vectors + 1 x vector = 16 AVX2 registers
constexpr int ROWS = 4;
constexpr int64_t PREFETCH_FROM_ROWS = 3;

#if defined(__AVX2__) && defined(__FMA__)
using Vec = __m256;
inline Vec vzero() { return _mm256_setzero_ps(); }
inline Vec vload(const float* p) { return _mm256_loadu_ps(p); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline float vsum(Vec v) {  // ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)), the same order everywhere
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
#else  // scalar stand-in with the same lane structure, so other CPUs compute the same sums in the same order
struct Vec {
  float v[8];
};
inline Vec vzero() { return Vec{}; }
inline Vec vload(const float* p) {
  Vec r;
  for (int i = 0; i < 8; ++i) r.v[i] = p[i];
  return r;
}
inline Vec vfma(Vec a, Vec b, Vec c) {
  for (int i = 0; i < 8; ++i) c.v[i] = std::fma(a.v[i], b.v[i], c.v[i]);
  return c;
}
inline float vsum(Vec v) {
  const float s0 = v.v[0] + v.v[4], s1 = v.v[1] + v.v[5], s2 = v.v[2] + v.v[6], s3 = v.v[3] + v.v[7];
  return (s0 + s2) + (s1 + s3);
}
#endif
constexpr int LANES = 8;  // floats a Vec holds, in both forms

// out[m][c] = x[m] . w[c] (+ bias[c]) (+ residual[m][c]) for C weight rows and R x rows
// `next`: the next tile's first weight row, whose lines are requested during this pass (or nullptr)
template <int C, int R>
inline void tile(const float* x, int64_t ldx, const float* w, int64_t k, const float* bias, const float* residual,
                 int64_t ldr, float* out, int64_t ldo, const float* next = nullptr, int64_t ahead_lo = 0,
                 int64_t ahead_hi = 0) {
  Vec acc[C][R];
  for (int c = 0; c < C; ++c)
    for (int r = 0; r < R; ++r) acc[c][r] = vzero();
  const int64_t body = k - k % LANES;
  // this pass requests next's lines [ahead_lo, ahead_hi) of each of its C rows, spread over the pass
  const int64_t span = ahead_hi - ahead_lo, lines = span / 16;
  const int64_t every = (next != nullptr && lines > 0) ? std::max<int64_t>(1, body / LANES / lines) : 0;
  int64_t line = 0;
  for (int64_t i = 0, chunk = 0; i < body; i += LANES, ++chunk) {
    if (every != 0 && chunk % every == 0 && line < lines) {
      for (int c = 0; c < C; ++c) __builtin_prefetch(next + c * k + ahead_lo + 16 * line, 0, 3);
      ++line;
    }
    Vec wv[C];
    for (int c = 0; c < C; ++c) wv[c] = vload(w + c * k + i);
    for (int r = 0; r < R; ++r) {
      const Vec xv = vload(x + r * ldx + i);
      for (int c = 0; c < C; ++c) acc[c][r] = vfma(wv[c], xv, acc[c][r]);
    }
  }
  for (int c = 0; c < C; ++c) {
    for (int r = 0; r < R; ++r) {
      float s = vsum(acc[c][r]);
      for (int64_t i = body; i < k; ++i) s = std::fma(w[c * k + i], x[r * ldx + i], s);
      if (bias != nullptr) s += bias[c];
      if (residual != nullptr) s += residual[r * ldr + c];
      out[r * ldo + c] = s;
    }
  }
}

// tile<C, ROWS> over all rows, the last few rows with a smaller R
template <int C>
void column_tile(const float* x, int64_t ldx, int64_t m, const float* w, int64_t k, const float* bias,
                 const float* residual, int64_t ldr, float* out, int64_t ldo, const float* next) {
  if constexpr (C > COLS) {  // only for m <= 2 (the caller's choice): all rows in one tile
    if (m == 2) return tile<C, 2>(x, ldx, w, k, bias, residual, ldr, out, ldo);
    return tile<C, 1>(x, ldx, w, k, bias, residual, ldr, out, ldo);
  } else {
    int64_t r = 0;
    const int64_t groups = m / ROWS;
    for (int64_t g = 0; g < groups; ++g, r += ROWS) {  // each group requests its share of the next tile's lines
      tile<C, ROWS>(x + r * ldx, ldx, w, k, bias, residual ? residual + r * ldr : nullptr, ldr, out + r * ldo, ldo,
                    next, g * k / groups, (g + 1) * k / groups);
    }
    const float* xr = x + r * ldx;
    const float* rr = residual ? residual + r * ldr : nullptr;
    float* orow = out + r * ldo;
    switch (m - r) {
      case 3: tile<C, 3>(xr, ldx, w, k, bias, rr, ldr, orow, ldo); break;
      case 2: tile<C, 2>(xr, ldx, w, k, bias, rr, ldr, orow, ldo); break;
      case 1: tile<C, 1>(xr, ldx, w, k, bias, rr, ldr, orow, ldo); break;
      default: break;
    }
  }
}

// every output column from first to last, C columns a tile (single columns at the end), one thread's run each
template <int C>
void all_columns(const float* x, int64_t ldx, int64_t m, const float* w, int64_t n, int64_t k, const float* bias,
                 const float* residual, int64_t ldr, float* out) {
  const int64_t tiles = (n + C - 1) / C;
  at::parallel_for(0, tiles, 8, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t c0 = t * C, cols = std::min<int64_t>(C, n - c0);
      const float* b = bias ? bias + c0 : nullptr;
      const float* r = residual ? residual + c0 : nullptr;
      if (cols == C) {
        const float* ahead = (m >= PREFETCH_FROM_ROWS && t + 1 < end) ? w + (c0 + C) * k : nullptr;
        column_tile<C>(x, ldx, m, w + c0 * k, k, b, r, ldr, out + c0, n, ahead);
      } else {
        for (int64_t c = 0; c < cols; ++c)
          column_tile<1>(x, ldx, m, w + (c0 + c) * k, k, b ? b + c : nullptr, r ? r + c : nullptr, ldr, out + c0 + c, n,
                         nullptr);
      }
    }
  });
}

}  // namespace

namespace agentrl {

// residual + x @ weight.T + bias: x [M, K] and residual [M, N] with contiguous rows, weight [N, K] contiguous,
// bias [N]; float32 [M, N]
at::Tensor linear_fp32(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                       const std::optional<at::Tensor>& residual) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.stride(1) == 1,
              "linear_fp32 takes float32 x [M, K] with contiguous rows");
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == at::kFloat && weight.is_contiguous() &&
                  weight.size(1) == x.size(1),
              "linear_fp32 takes a contiguous float32 weight [N, K] with x's ", x.size(1), " inner elements");
  const int64_t m = x.size(0), n = weight.size(0), k = weight.size(1);
  TORCH_CHECK(!bias.has_value() || (bias->scalar_type() == at::kFloat && bias->numel() == n && bias->is_contiguous()),
              "bias: contiguous float32 [N]");
  TORCH_CHECK(!residual.has_value() || (residual->scalar_type() == at::kFloat && residual->dim() == 2 &&
                                        residual->size(0) == m && residual->size(1) == n && residual->stride(1) == 1),
              "residual: float32 [M, N] with contiguous rows");
  at::Tensor out = at::empty({m, n}, x.options());
  if (m == 0 || n == 0) return out;
  const float* xp = x.data_ptr<float>();
  const float* wp = weight.data_ptr<float>();
  const float* bp = bias.has_value() ? bias->data_ptr<float>() : nullptr;
  const float* rp = residual.has_value() ? residual->data_ptr<float>() : nullptr;
  const int64_t ldx = x.stride(0), ldr = residual.has_value() ? residual->stride(0) : 0;
  float* op = out.data_ptr<float>();
  // a few rows read each weight vector from memory operands: more columns at once keep more loads in flight
  if (m == 1) all_columns<8>(xp, ldx, m, wp, n, k, bp, rp, ldr, op);
  else if (m == 2) all_columns<5>(xp, ldx, m, wp, n, k, bp, rp, ldr, op);
  else all_columns<COLS>(xp, ldx, m, wp, n, k, bp, rp, ldr, op);
  return out;
}

}  // namespace agentrl

TORCH_LIBRARY_FRAGMENT(agentrl, m) {
  m.def("linear_fp32(Tensor x, Tensor weight, Tensor? bias=None, Tensor? residual=None) -> Tensor");
  m.impl("linear_fp32", c10::DispatchKey::CPU, &agentrl::linear_fp32);
}
