// Decode attention over the embedded engine's slot KV cache: bf16, AVX-512 with BF16 dot products.
//
// Why not SGLang's decode_attention_cpu: at head_dim 64 it reduces every (head, token) dot product across a vector
// on its own, which, not memory, set its pace on a 2-core AVX512-BF16 EPYC (24 rows x 96 tokens: 68-97 us a layer,
// 0.29-0.31 of the machine's read bandwidth). Here sixteen tokens' dot products are reduced together (sum_each16),
// a work item is one row's query heads on one KV head (each value row read once for the group), and the cache rows
// are requested ahead of use: 33-41 us on the same calls (bench/bench_native_kernels.py).
//
// Cache layout (the engine's SlotKVCache): keys/values [rows_cap, kv_heads, cols_cap, head_dim]; row r's tokens are
// its columns write_col + 1 - lengths[r] .. write_col, the last one the token decoded now.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <torch/library.h>

#include "decode_attention.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

using bf16 = at::BFloat16;

// how far ahead of the token being read its cache lines are requested (a prefetch past the buffer does not fault)
constexpr int64_t PREFETCH_TOKENS = 32;

// the first PREFETCH_TOKENS rows of a stream of token rows
template <_mm_hint HINT>
inline void prefetch_tokens(const bf16* first, int64_t token_stride, int64_t dim) {
  for (int64_t t = 0; t < PREFETCH_TOKENS; ++t)
    for (int64_t e = 0; e < dim; e += 32) _mm_prefetch(reinterpret_cast<const char*>(first + t * token_stride + e), HINT);
}

// lane i of the result is the sum of the 16 lanes of v[i]
inline __m512 sum_each16(const __m512* v) {
  __m512 w[8], u[4], s[2];
  for (int i = 0; i < 8; ++i) {  // 512 -> 256 bits: v[i] in the low half, v[i + 8] in the high half
    __m512 lo = _mm512_shuffle_f32x4(v[i], v[i + 8], 0x44);
    __m512 hi = _mm512_shuffle_f32x4(v[i], v[i + 8], 0xEE);
    w[i] = _mm512_add_ps(lo, hi);
  }
  for (int i = 0; i < 4; ++i) {  // 256 -> 128: 128-bit lanes hold v[i], v[i + 8], v[i + 4], v[i + 12]
    __m512 lo = _mm512_shuffle_f32x4(w[i], w[i + 4], 0x88);
    __m512 hi = _mm512_shuffle_f32x4(w[i], w[i + 4], 0xDD);
    u[i] = _mm512_add_ps(lo, hi);
  }
  for (int i = 0; i < 2; ++i) {  // 128 -> 64 bits within each lane
    __m512 lo = _mm512_shuffle_ps(u[i], u[i + 2], 0x44);
    __m512 hi = _mm512_shuffle_ps(u[i], u[i + 2], 0xEE);
    s[i] = _mm512_add_ps(lo, hi);
  }
  __m512 lo = _mm512_shuffle_ps(s[0], s[1], 0x88);
  __m512 hi = _mm512_shuffle_ps(s[0], s[1], 0xDD);
  // lane order after the tree: 0 2 1 3 | 8 10 9 11 | 4 6 5 7 | 12 14 13 15
  const __m512i order = _mm512_set_epi32(15, 13, 14, 12, 7, 5, 6, 4, 11, 9, 10, 8, 3, 1, 2, 0);
  return _mm512_permutexvar_ps(order, _mm512_add_ps(lo, hi));
}

// e^x for x <= 0 (scores less their maximum): 2^n * e^r with |r| <= ln2 / 2, e^r by its degree-6 Taylor polynomial
// (relative error about 1e-7)
inline __m512 exp_nonpositive(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145752f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860677e-6f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

inline __m512 bf16_to_float(__m256i x) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(x), 16));
}

// the scaled scores of `heads` query heads (one KV head's group) over `width` tokens, into scores[h * stride + t];
// the token loop is outermost so that a block's keys stay in L1 across the heads
template <int CHUNKS>  // head_dim / 32
void group_scores(
    const bf16* q, int64_t q_stride, int heads, const bf16* keys, const bf16* values, int64_t token_stride, int64_t width, float scale,
    float* scores, int64_t stride) {
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int64_t t0 = 0; t0 < width; t0 += 16) {
    const int n = static_cast<int>(std::min<int64_t>(16, width - t0));
    const __mmask16 valid = static_cast<__mmask16>((1u << n) - 1);
    for (int j = 0; j < 16; ++j) {  // the keys a few blocks on, and this block's values (read after the scores)
      const char* k = reinterpret_cast<const char*>(keys + (t0 + PREFETCH_TOKENS + j) * token_stride);
      const char* v = reinterpret_cast<const char*>(values + (t0 + j) * token_stride);
      for (int64_t line = 0; line < 64 * CHUNKS; line += 64) {
        _mm_prefetch(k + line, _MM_HINT_T0);
        _mm_prefetch(v + line, _MM_HINT_T1);
      }
    }
    for (int h = 0; h < heads; ++h) {
      __m512bh qv[CHUNKS];
      for (int c = 0; c < CHUNKS; ++c) qv[c] = (__m512bh)_mm512_loadu_si512(q + h * q_stride + 32 * c);
      __m512 acc[16];
      for (int j = 0; j < 16; ++j) {
        acc[j] = _mm512_setzero_ps();
        if (j < n) {
          const bf16* k = keys + (t0 + j) * token_stride;
          for (int c = 0; c < CHUNKS; ++c)
            acc[j] = _mm512_dpbf16_ps(acc[j], qv[c], (__m512bh)_mm512_loadu_si512(k + 32 * c));
        }
      }
      _mm512_mask_storeu_ps(scores + h * stride + t0, valid, _mm512_mul_ps(sum_each16(acc), vscale));
    }
  }
}

// one head's scores -> its softmax weights in place; returns 1 / their sum
inline float softmax_in_place(float* scores, int64_t width) {
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  for (int64_t t0 = 0; t0 < width; t0 += 16) {
    const __mmask16 valid = static_cast<__mmask16>((1u << std::min<int64_t>(16, width - t0)) - 1);
    vmax = _mm512_mask_max_ps(vmax, valid, vmax, _mm512_maskz_loadu_ps(valid, scores + t0));
  }
  const __m512 vm = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
  __m512 vsum = _mm512_setzero_ps();
  for (int64_t t0 = 0; t0 < width; t0 += 16) {
    const __mmask16 valid = static_cast<__mmask16>((1u << std::min<int64_t>(16, width - t0)) - 1);
    const __m512 p = _mm512_maskz_mov_ps(valid, exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(scores + t0), vm)));
    _mm512_mask_storeu_ps(scores + t0, valid, p);
    vsum = _mm512_add_ps(vsum, p);
  }
  return 1.0f / _mm512_reduce_add_ps(vsum);
}

// out[h] = inv_sum[h] * sum_t weights[h][t] * values[t] for HEADS query heads, in float32. A value row's 32-element
// chunk is read as its even elements (shifted up) and its odd ones (masked): no conversion shuffles; the two are
// interleaved again when rounded to bf16 at the end
template <int CHUNKS, int HEADS>
void weighted_values(
    const float* weights, int64_t stride, const float* inv_sum, const bf16* values, int64_t token_stride,
    int64_t width, bf16* out, int64_t out_stride) {
  __m512 even[HEADS][CHUNKS], odd[HEADS][CHUNKS];
  for (int h = 0; h < HEADS; ++h)
    for (int c = 0; c < CHUNKS; ++c) even[h][c] = odd[h][c] = _mm512_setzero_ps();
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (int64_t t = 0; t < width; ++t) {
    const bf16* v = values + t * token_stride;
    _mm_prefetch(reinterpret_cast<const char*>(v + PREFETCH_TOKENS * token_stride), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(v + PREFETCH_TOKENS * token_stride + 32 * CHUNKS - 1), _MM_HINT_T0);
    __m512 ve[CHUNKS], vo[CHUNKS];
    for (int c = 0; c < CHUNKS; ++c) {
      const __m512i x = _mm512_loadu_si512(v + 32 * c);
      ve[c] = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
      vo[c] = _mm512_castsi512_ps(_mm512_and_si512(x, high));
    }
    for (int h = 0; h < HEADS; ++h) {
      const __m512 p = _mm512_set1_ps(weights[h * stride + t]);
      for (int c = 0; c < CHUNKS; ++c) {
        even[h][c] = _mm512_fmadd_ps(p, ve[c], even[h][c]);
        odd[h][c] = _mm512_fmadd_ps(p, vo[c], odd[h][c]);
      }
    }
  }
  for (int h = 0; h < HEADS; ++h) {
    const __m512 inv = _mm512_set1_ps(inv_sum[h]);
    for (int c = 0; c < CHUNKS; ++c) {
      const __m256i e = (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(even[h][c], inv));
      const __m256i o = (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(odd[h][c], inv));
      const __m512i both = _mm512_or_si512(_mm512_cvtepu16_epi32(e), _mm512_slli_epi32(_mm512_cvtepu16_epi32(o), 16));
      _mm512_storeu_si512(out + h * out_stride + 32 * c, both);
    }
  }
}

// one row's query heads that share a KV head: scores, softmax, values (at most 4 heads' accumulators at a time)
template <int CHUNKS>
void attend_group(
    const bf16* q, int64_t q_stride, int heads, const bf16* keys, const bf16* values, int64_t token_stride,
    int64_t width, float scale, float* scores, int64_t stride, bf16* out) {
  constexpr int AT_ONCE = CHUNKS <= 2 ? 4 : 2;  // 2 * CHUNKS accumulators a head, in 16 of the 32 registers
  group_scores<CHUNKS>(q, q_stride, heads, keys, values, token_stride, width, scale, scores, stride);
  float inv_sum[64];
  for (int h = 0; h < heads; ++h) inv_sum[h] = softmax_in_place(scores + h * stride, width);
  for (int h = 0; h < heads;) {
    const int n = std::min(AT_ONCE, heads - h);
    const float* w = scores + h * stride;
    bf16* o = out + h * q_stride;
    if (n == 4) weighted_values<CHUNKS, 4>(w, stride, inv_sum + h, values, token_stride, width, o, q_stride);
    else if (n == 3) weighted_values<CHUNKS, 3>(w, stride, inv_sum + h, values, token_stride, width, o, q_stride);
    else if (n == 2) weighted_values<CHUNKS, 2>(w, stride, inv_sum + h, values, token_stride, width, o, q_stride);
    else weighted_values<CHUNKS, 1>(w, stride, inv_sum + h, values, token_stride, width, o, q_stride);
    h += n;
  }
}

using AttendFn = void (*)(
    const bf16*, int64_t, int, const bf16*, const bf16*, int64_t, int64_t, float, float*, int64_t, bf16*);

AttendFn attend_for(int64_t head_dim) {
  switch (head_dim) {
    case 64: return &attend_group<2>;
    case 128: return &attend_group<4>;
    default: return nullptr;
  }
}

void check_inputs(
    const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values, const at::Tensor& lengths,
    int64_t write_col) {
  TORCH_CHECK(q.dim() == 3 && keys.dim() == 4 && values.dim() == 4, "q [R, heads, dim], keys/values 4-d");
  TORCH_CHECK(q.scalar_type() == at::kBFloat16 && keys.scalar_type() == at::kBFloat16 &&
                  values.scalar_type() == at::kBFloat16, "decode attention takes bf16 tensors");
  TORCH_CHECK(keys.sizes() == values.sizes() && keys.strides() == values.strides(), "keys and values differ in shape");
  TORCH_CHECK(q.stride(2) == 1 && keys.stride(3) == 1, "the head dim must be contiguous");
  TORCH_CHECK(attend_for(q.size(2)) != nullptr, "head_dim ", q.size(2), " is not 64 or 128");
  TORCH_CHECK(keys.size(3) == q.size(2) && q.size(1) % keys.size(1) == 0, "q's heads do not group over kv heads");
  TORCH_CHECK(q.size(0) <= keys.size(0), "more query rows than cache rows");
  TORCH_CHECK(q.size(1) / keys.size(1) <= 64, "more than 64 query heads share a KV head");
  TORCH_CHECK(q.stride(1) == q.size(2), "q's heads must be packed (stride(1) == head_dim)");
  TORCH_CHECK(lengths.scalar_type() == at::kLong && lengths.dim() == 1 && lengths.size(0) == q.size(0),
              "lengths: int64 [R]");
  TORCH_CHECK(0 <= write_col && write_col < keys.size(2), "write_col outside the cache");
  auto lens = lengths.accessor<int64_t, 1>();
  for (int64_t r = 0; r < lengths.size(0); ++r)
    TORCH_CHECK(0 < lens[r] && lens[r] <= write_col + 1, "row ", r, " holds ", lens[r], " tokens ending at column ",
                write_col);
}

// stores the rows' new keys/values [R, kv_heads, dim] at column write_col (a plain copy per row and head: ATen's
// narrow/select/copy_ cost more than the copy at decode sizes)
void store_new(at::Tensor& cache, const at::Tensor& fresh, int64_t write_col) {
  TORCH_CHECK(fresh.dim() == 3 && fresh.size(0) <= cache.size(0) && fresh.size(1) == cache.size(1) &&
                  fresh.size(2) == cache.size(3) && fresh.scalar_type() == at::kBFloat16 && fresh.stride(2) == 1,
              "new keys/values: bf16 [R, kv_heads, dim] with a contiguous head dim");
  bf16* dst = cache.data_ptr<bf16>() + write_col * cache.stride(2);
  const bf16* src = fresh.data_ptr<bf16>();
  const size_t bytes = static_cast<size_t>(fresh.size(2)) * sizeof(bf16);
  for (int64_t r = 0; r < fresh.size(0); ++r)
    for (int64_t h = 0; h < fresh.size(1); ++h)
      std::memcpy(dst + r * cache.stride(0) + h * cache.stride(1), src + r * fresh.stride(0) + h * fresh.stride(1),
                  bytes);
}

}  // namespace

namespace agentrl {

at::Tensor decode_attention(
    const at::Tensor& q, at::Tensor& keys, at::Tensor& values, const at::Tensor& lengths, int64_t write_col,
    double scale, const std::optional<at::Tensor>& new_keys, const std::optional<at::Tensor>& new_values) {
  check_inputs(q, keys, values, lengths, write_col);
  if (new_keys.has_value()) store_new(keys, *new_keys, write_col);
  if (new_values.has_value()) store_new(values, *new_values, write_col);
  const int64_t rows = q.size(0), heads = q.size(1), dim = q.size(2), group = heads / keys.size(1);
  auto out = at::empty({rows, heads, dim}, q.options());
  const AttendFn attend = attend_for(dim);
  const int64_t* lens = lengths.data_ptr<int64_t>();
  const int64_t longest = *std::max_element(lens, lens + rows);
  const bf16* qp = q.data_ptr<bf16>();
  const bf16* kp = keys.data_ptr<bf16>();
  const bf16* vp = values.data_ptr<bf16>();
  bf16* op = out.data_ptr<bf16>();
  const int64_t ks0 = keys.stride(0), ks1 = keys.stride(1), ks2 = keys.stride(2);
  const int64_t qs0 = q.stride(0), qs1 = q.stride(1);
  // a work item is one row's group of query heads on one KV head; items under ~16k multiply-adds are not worth a
  // second thread
  const int64_t kv_heads = keys.size(1), stride = (longest + 15) / 16 * 16;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, longest * dim * group));
  at::parallel_for(0, rows * kv_heads, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(static_cast<size_t>(stride * group));
    for (int64_t item = begin; item < end; ++item) {
      const int64_t r = item / kv_heads, kv = item % kv_heads, h = kv * group;
      const int64_t base = r * ks0 + kv * ks1 + (write_col + 1 - lens[r]) * ks2;
      if (item + 1 < end) {  // the next item's first keys and values, which the streams below do not request
        const int64_t r1 = (item + 1) / kv_heads, kv1 = (item + 1) % kv_heads;
        prefetch_tokens<_MM_HINT_T0>(kp + r1 * ks0 + kv1 * ks1 + (write_col + 1 - lens[r1]) * ks2, ks2, dim);
        prefetch_tokens<_MM_HINT_T1>(vp + r1 * ks0 + kv1 * ks1 + (write_col + 1 - lens[r1]) * ks2, ks2, dim);
      }
      attend(qp + r * qs0 + h * qs1, qs1, static_cast<int>(group), kp + base, vp + base, ks2, lens[r],
             static_cast<float>(scale), scores.data(), stride, op + (r * heads + h) * dim);
    }
  });
  return out;
}

}  // namespace agentrl

TORCH_LIBRARY_FRAGMENT(agentrl, m) {
  m.def(
      "decode_attention(Tensor q, Tensor(a!) keys, Tensor(b!) values, Tensor lengths, int write_col, float scale, "
      "Tensor? new_keys=None, Tensor? new_values=None) -> Tensor");
  m.impl("decode_attention", c10::DispatchKey::CPU, &agentrl::decode_attention);
}
