// kF8E4M3 decode on vdpbf16ps (AVX512-BF16 CPUs that issue it at the FMA rate: AMD Zen 4 / 5;
// f8_decode_on_dpbf16 in gemm_quant.h says when it runs). Contract and accuracy: gemm_quant.h.
//
// Why: the AVX512-VNNI fp8 kernel turns each E4M3 byte into an f32 with vpmaddwd + and and then
// multiplies it with one FMA: 8 multiply-pipe operations per 64 weights and row of x (on Zen 5
// vpmaddwd, FMA, vpdpwssd and vdpbf16ps all share the two multiply pipes). An E4M3 byte is a
// bf16 by shifts alone: in a 16-bit word holding the byte in its high half, an arithmetic shift
// right by 4 leaves the sign at bit 15 (and its copies at 14..12, which the and drops) and
// eeee mmm at bits 10..4, i.e. a bf16 of exponent field eeee and mantissa mmm0000, the weight
// times 2^-120 (E4M3 bias 7 against bf16's 127). So 64 weights become two vectors of 32 bf16 in
// 5 logic operations (odd bytes: srai + and; even bytes: slli 8 first), and vdpbf16ps multiplies
// each against x in bf16: 2 instructions per 64 weights and row of x with GemmPrecision::kBf16
// (x rounded to bf16), 4 with the default (x = hi + lo, hi = bf16(x), lo = bf16(x - hi)); half
// the multiply-pipe work of the VNNI kernel at m = 1, and the decode is shared by the rows of x.
//
// Scaling: x is prepared times 2^64 (vdpbf16ps flushes denormal inputs and outputs, and the
// weights are at most 2^-111 here), the row scale times 2^56 multiplies the finished sum, so
// products stay normal f32 for |x| in [2^-60, 2^64) as in the VNNI kernel. E4M3 subnormals
// (exponent 0, mantissa m != 0, m * 2^-9) would be bf16 denormals, which vdpbf16ps reads as 0:
// each 64 bytes is tested for exponent-0 codes (one vptestnmb; zero codes pass it too and are
// then tested again), and the rare subnormal lanes are multiplied apart as bf16 m * 2^-65 (times
// 2^64, normal) into their own sums, scaled by 2^-64 at the end.
//
// Prepared x, per 64 elements: four vectors of 32 bf16 (x times 2^64): the odd elements' hi,
// their lo, the even elements' hi, their lo (kBf16: the two hi only), so that bf16 pair L of a
// vector meets the weights of bytes 4L + 1, 4L + 3 (odd) or 4L, 4L + 2 (even).
//
// Measured, one Zen 5 core (about 4.1 GHz), k = 2048, 64 rows in L2, the kernel alone, cycles
// per 64 weights, VNNI kernel -> this one with hi + lo (with bf16 x): m = 1 8.5-10.8 -> 3.9
// (3.5), m = 2 11.2 -> 5.9 (4.3), m = 4 19.5 -> 10.1 (6.2), m = 8 47.9 -> 28.3 (13.8); the VNNI
// kernel's decoded vectors are spilled around its subnormal branch on this compiler. fp8 decode
// end to end (TinyLlama shape, 1 thread, alternating runs): 24.2-25.0 -> 30.3-30.7 tok/s.
//
// GCC 12 reports its own intrinsics' _mm512_undefined_* pass-through operands as
// maybe-uninitialized; silenced before the header is read (as in gemm_avx512.cc).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/gemm_quant.h"

namespace sampan::cpu::gemm_detail {
namespace {

// Rows per call and rows of x per pass, as the VNNI table (gemm_decode_walk.h streams).
constexpr int kRows = 4;
constexpr int kMaxM = 8;
constexpr int64_t kStep = 64;             // weights per step
constexpr int64_t kPrefetchBytes = 3072;  // 1536: 0.98x, 6144: 0.93x (Zen 5, end to end)

// Where the rows of x fit in L1 beside the streamed weights (kL1X bytes), two weight rows share
// each load of x, all rows of x in one pass; else all 4 rows of a call share each load, for up
// to 4 rows of x per pass over them (16 accumulators, 8 decoded weight vectors; x read from L2
// once per pass instead of once per two weight rows). Measured (see dot_rows).
constexpr int64_t kL1X = 32 << 10;
// Prepared x vectors (32 bf16) per step: odd and even elements, hi and lo (kLo) or hi alone.
template <bool kLo>
constexpr int kXv = kLo ? 4 : 2;

// ---- prepared x ----

template <bool kLo>
int64_t x_floats(int64_t k) {
  return (k + kStep - 1) / kStep * (16 * kXv<kLo>);
}

// Word j of the result: bf16 element 2j + odd of the 64 in a (words 0..31) : b (32..63).
inline __m512i pick(__m512i a, __m512i b, int odd) {
  alignas(64) static constexpr uint16_t kEven[32] = {
      0,  2,  4,  6,  8,  10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30,
      32, 34, 36, 38, 40, 42, 44, 46, 48, 50, 52, 54, 56, 58, 60, 62};
  const __m512i idx = _mm512_add_epi16(_mm512_load_si512(kEven), _mm512_set1_epi16(odd));
  return _mm512_permutex2var_epi16(a, idx, b);
}

template <bool kLo>
void prep(const float* x, int64_t k, float* out) {
  const __m512 s = _mm512_set1_ps(0x1p64f);
  auto* dst = reinterpret_cast<__m512i*>(out);
  for (int64_t c = 0; c < k; c += kStep) {
    __m512 v[4];
    for (int q = 0; q < 4; ++q) {
      v[q] = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask16(k - c - 16 * q), x + c + 16 * q), s);
    }
    // hi: elements 0..31, 32..63 in order; lo = bf16(x - hi).
    __m512bh h[2], l[2];
    for (int t = 0; t < 2; ++t) {
      h[t] = _mm512_cvtne2ps_pbh(v[2 * t + 1], v[2 * t]);
      if (kLo) {
        const __m512i hw = reinterpret_cast<__m512i&>(h[t]);
        const __m512 h0 = _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm512_castsi512_si256(hw)), 16));
        const __m512 h1 = _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(hw, 1)), 16));
        l[t] = _mm512_cvtne2ps_pbh(_mm512_sub_ps(v[2 * t + 1], h1), _mm512_sub_ps(v[2 * t], h0));
      }
    }
    const __m512i h0 = reinterpret_cast<__m512i&>(h[0]), h1 = reinterpret_cast<__m512i&>(h[1]);
    for (int odd = 1; odd >= 0; --odd) {
      _mm512_storeu_si512(dst++, pick(h0, h1, odd));
      if (kLo) {
        _mm512_storeu_si512(dst++, pick(reinterpret_cast<__m512i&>(l[0]),
                                        reinterpret_cast<__m512i&>(l[1]), odd));
      }
    }
  }
}

// ---- dot kernel ----

// 64 E4M3 bytes -> bf16 weights times 2^-120: w[0] the odd bytes (word j: byte 2j + 1), w[1]
// the even ones (byte 2j).
inline void decode(__m512i b, __m512i* w) {
  const __m512i keep = _mm512_set1_epi16(static_cast<int16_t>(0x87f0));
  w[0] = _mm512_and_si512(_mm512_srai_epi16(b, 4), keep);
  w[1] = _mm512_and_si512(_mm512_srai_epi16(_mm512_slli_epi16(b, 8), 4), keep);
}

// The subnormal lanes of w: bf16 words with exponent 0 and a mantissa.
inline __mmask32 subnormal_lanes(__m512i w) {
  const __mmask32 exp0 = _mm512_testn_epi16_mask(w, _mm512_set1_epi16(0x7f80));
  return _mm512_mask_test_epi16_mask(exp0, w, _mm512_set1_epi16(0x0070));
}

// Those lanes (sign s, m = bits 6..4) as bf16 (-1)^s m * 2^-65, 0 elsewhere: the weight
// m * 2^-9 times 2^-120 times 2^64.
__attribute__((noinline)) __m512i subnormal_values(__m512i w, __mmask32 lanes) {
  // bf16 of m * 2^-65 for m = 0..7, repeated for the 32 words vpermw indexes.
  alignas(64) static constexpr uint16_t kTable[32] = {
      0x0000, 0x1f00, 0x1f80, 0x1fc0, 0x2000, 0x2020, 0x2040, 0x2060,
      0x0000, 0x1f00, 0x1f80, 0x1fc0, 0x2000, 0x2020, 0x2040, 0x2060,
      0x0000, 0x1f00, 0x1f80, 0x1fc0, 0x2000, 0x2020, 0x2040, 0x2060,
      0x0000, 0x1f00, 0x1f80, 0x1fc0, 0x2000, 0x2020, 0x2040, 0x2060};
  const __m512i m = _mm512_and_si512(_mm512_srli_epi16(w, 4), _mm512_set1_epi16(7));
  const __m512i v = _mm512_permutexvar_epi16(m, _mm512_load_si512(kTable));
  const __m512i sign = _mm512_and_si512(w, _mm512_set1_epi16(static_cast<int16_t>(0x8000)));
  return _mm512_maskz_mov_epi16(lanes, _mm512_or_si512(v, sign));
}

inline __m512 dp(__m512 acc, __m512i w, __m512i x) {
  return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh&>(w), reinterpret_cast<__m512bh&>(x));
}

// RT rows times MT rows of prepared x (ldx floats apart): out[i * kRows + r]. NA accumulators
// per (row, row of x): vdpbf16ps has a latency of 6 cycles at 2 per cycle on Zen 5, so about 12
// independent sums keep both pipes busy.
template <bool kLo, int RT, int MT, int NA>
void rows_kernel(const QuantRow* rows, int64_t k, const float* x, int64_t ldx, float* out) {
  constexpr int kXv = gemm_detail::kXv<kLo>;
  __m512 acc[MT][RT][NA];
#pragma GCC unroll 8
  for (int i = 0; i < MT; ++i)
#pragma GCC unroll 4
    for (int r = 0; r < RT; ++r)
#pragma GCC unroll 4
      for (int a = 0; a < NA; ++a) acc[i][r][a] = _mm512_setzero_ps();
  bool any_subnormal = false;
  __m512 slow[MT][RT];  // the subnormal lanes' products, times 2^64
  const __m512i exp_bits = _mm512_set1_epi8(0x78);
  const __m512i* xs = reinterpret_cast<const __m512i*>(x);
  const int64_t xstride = ldx / 16;  // vectors
  for (int64_t kk = 0, s = 0; kk < k; kk += kStep, ++s) {
    __m512i w[RT][2];
    __mmask64 exp0 = 0;
#pragma GCC unroll 4
    for (int r = 0; r < RT; ++r) {
      const uint8_t* p = rows[r].data + kk;
      _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchBytes), _MM_HINT_T0);
      const __m512i b = kk + kStep <= k ? _mm512_loadu_si512(p)
                                        : _mm512_maskz_loadu_epi8(mask64(k - kk), p);
      decode(b, w[r]);
      exp0 |= _mm512_testn_epi8_mask(b, exp_bits);
    }
    if (__builtin_expect(exp0 != 0, 0)) {
      // Exponent-0 codes: zeros (exact as they are) or subnormals (multiplied apart here).
      for (int r = 0; r < RT; ++r) {
        for (int h = 0; h < 2; ++h) {
          const __mmask32 lanes = subnormal_lanes(w[r][h]);
          if (lanes == 0) continue;
          const __m512i ws = subnormal_values(w[r][h], lanes);
          // Out of the main sums whether or not vdpbf16ps reads denormals as 0.
          w[r][h] = _mm512_maskz_mov_epi16(static_cast<__mmask32>(~lanes), w[r][h]);
          if (!any_subnormal) {
            any_subnormal = true;
            for (int i = 0; i < MT; ++i)
              for (int q = 0; q < RT; ++q) slow[i][q] = _mm512_setzero_ps();
          }
          for (int i = 0; i < MT; ++i) {
            const __m512i* xi = xs + i * xstride + s * kXv + h * (kXv / 2);
            slow[i][r] = dp(slow[i][r], ws, _mm512_loadu_si512(xi));
            if (kLo) slow[i][r] = dp(slow[i][r], ws, _mm512_loadu_si512(xi + 1));
          }
        }
      }
    }
    // x vector v of every row of x before v + 1: consecutive vdpbf16ps go to MT * RT different
    // sums (a sum's next product waits for its last, 6 cycles).
#pragma GCC unroll 4
    for (int v = 0; v < kXv; ++v) {
      const int h = v / (kXv / 2);  // odd bytes' x first, then the even ones'
#pragma GCC unroll 8
      for (int i = 0; i < MT; ++i) {
        const __m512i xv = _mm512_loadu_si512(xs + i * xstride + s * kXv + v);
#pragma GCC unroll 4
        for (int r = 0; r < RT; ++r) acc[i][r][v % NA] = dp(acc[i][r][v % NA], w[r][h], xv);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < RT; ++r) {
    const float sc = row_scale(rows[r].scales) * 0x1p56f;  // 2^(120 - 64)
#pragma GCC unroll 8
    for (int i = 0; i < MT; ++i) {
      __m512 a = acc[i][r][0];
#pragma GCC unroll 4
      for (int j = 1; j < NA; ++j) a = _mm512_add_ps(a, acc[i][r][j]);
      float sum = _mm512_reduce_add_ps(a);
      if (any_subnormal) {  // in double: 2^-64 times a small sum may be an f32 denormal
        const double apart = _mm512_reduce_add_ps(slow[i][r]);
        sum = static_cast<float>(sum + apart * 0x1p-64);
      }
      out[i * kRows + r] = sum * sc;
    }
  }
}

template <bool kLo, int RT, int MT>
void dot_pass(const QuantRow* rows, const QuantFormat& f, const float* x, int64_t ldx, float* out) {
  constexpr int NA = std::clamp(16 / (MT * RT), 1, kXv<kLo>);  // 10 to 16 sums
  for (int r = 0; r < kRows; r += RT) rows_kernel<kLo, RT, MT, NA>(rows + r, f.k, x, ldx, out + r);
}

// One Zen 5 core, kernel from cache (bench_gemm_quant --cached), GB/s of fp8 weights, one pass
// with two weight rows per load of x -> the choice here: hi + lo x, k = 5632: m = 2 / 4 / 8
// 28 / 17 / 9.2 -> 39 / 24 / 12.5; k = 2048, m = 8 (x 64 KiB) 9.5 -> 11.8; bf16 x, k = 5632:
// m = 4 / 8 26.5 / 16 -> 37.8 / 19.5. Where x fits (bf16 x, k = 2048, m = 4 / 8: 16 / 32 KiB),
// passes of 4 ran 6-10 % slower than one pass.
template <bool kLo, int MT>
void dot_rows(const QuantRow* rows, const QuantFormat& f, const QuantX& x, float* out) {
  if (MT == 1 || MT * f.k * (kLo ? 4 : 2) <= kL1X) {
    dot_pass<kLo, MT == 1 ? kRows : 2, MT>(rows, f, x.x, x.ldx, out);
  } else if constexpr (MT <= 4) {
    dot_pass<kLo, kRows, MT>(rows, f, x.x, x.ldx, out);
  } else {  // the second pass finds the 4 weight rows in L1
    constexpr int kFirst = (MT + 1) / 2;
    dot_pass<kLo, kRows, kFirst>(rows, f, x.x, x.ldx, out);
    dot_pass<kLo, kRows, MT - kFirst>(rows, f, x.x + kFirst * x.ldx, x.ldx, out + kFirst * kRows);
  }
}

template <bool kLo>
void dot(const QuantRow* rows, const QuantFormat& f, const QuantX& x, float* out) {
  switch (x.mb) {
    case 1: return dot_rows<kLo, 1>(rows, f, x, out);
    case 2: return dot_rows<kLo, 2>(rows, f, x, out);
    case 3: return dot_rows<kLo, 3>(rows, f, x, out);
    case 4: return dot_rows<kLo, 4>(rows, f, x, out);
    case 5: return dot_rows<kLo, 5>(rows, f, x, out);
    case 6: return dot_rows<kLo, 6>(rows, f, x, out);
    case 7: return dot_rows<kLo, 7>(rows, f, x, out);
    default: return dot_rows<kLo, 8>(rows, f, x, out);
  }
}

template <bool kLo>
QuantKernels make_table() {
  QuantKernels t = quant_kernels_avx512_vnni();  // kI4, prefill and the epilogue
  t.f8 = {kRows, kMaxM, dot<kLo>};
  t.f8_x_floats = x_floats<kLo>;
  t.prep_f8 = prep<kLo>;
  return t;
}

}  // namespace

const QuantKernels& quant_kernels_f8_dpbf16(bool split_x) {
  static const QuantKernels split = make_table<true>();
  static const QuantKernels hi_only = make_table<false>();
  return split_x ? split : hi_only;
}

}  // namespace sampan::cpu::gemm_detail
