// AVX-512 kernels for quantized weights (see gemm_quant.h).
//
// kI4 dot kernel: per group and row, a 16-entry f32 table maps each nibble straight to its
// dequantized value (q - z) * s (exact in f32); 16 packed bytes widen to 32-bit lanes and two
// vpermps (low nibble, high nibble) give the even- and odd-indexed weights, which meet x prepared
// once per call in the same even/odd order per 32 elements. Weights and x stay exact f32, so the
// only error is f32 accumulation, as on the plain FMA path. (A bf16 variant, nibble -> bf16 and
// vdpbf16ps against x split into hi + lo, measured 1.5x slower at m = 1 and 2.5x at m = 4: the
// split needs two dot products per weight: with vdpbf16ps at the FMA's issue rate (measured on
// Zen 4), no fewer instructions than f32 FMAs.)
//
// kF8E4M3: the byte is sign-extended to 16 bits and shifted so its exponent and mantissa land in
// an f16 (bias 15 instead of 7, so the value is 2^-8 of the true one, subnormals included), then
// vcvtph2ps and f32 FMAs; the per-row scale times 2^8 is applied to the finished dot product. The
// two NaN codes (0x7f, 0xff) read as +-480: quantizers never produce them.
//
// GCC 12 reports its own intrinsics' _mm512_undefined_* pass-through operands as
// maybe-uninitialized; silenced before the header is read (as in gemm_avx512.cc).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <bit>
#include <cstring>

#include "kernels/cpu/gemm_quant.h"

namespace sampan::cpu::gemm_detail {
namespace {

// Ahead of each weight row, as in the plain AVX-512 kernels: covers DRAM latency per core.
constexpr int kPrefetchBytes = 1024;

inline __mmask32 mask32(int64_t n) {
  return n >= 32 ? ~__mmask32(0) : n <= 0 ? __mmask32(0) : __mmask32((1u << n) - 1);
}

inline float scale_at(const void* scales, int64_t g, bool bf16) {
  const uint16_t h = static_cast<const uint16_t*>(scales)[g];
  return bf16 ? std::bit_cast<float>(static_cast<uint32_t>(h) << 16) : _cvtsh_ss(h);
}

// Pins a loaded x vector in a register (see gemm_avx512.cc: otherwise GCC reloads it per row).
inline __m512 in_register(__m512 v) {
  __asm__("" : "+v"(v));
  return v;
}

// ---- kI4 dot kernel: R = 4 rows, MB <= 4 rows of x (R = 2 measured 5-15 % slower) ----
// x comes in the pair layout of the bf16 FMA kernels (per 32 elements: the 16 even-indexed, then
// the 16 odd-indexed, f32), matching the low and high nibbles of 16 packed bytes.
constexpr int kI4Rows = 4;
constexpr int kI4MaxM = 4;

int64_t i4_x_floats(int64_t k, int64_t /*group*/) { return (k + 31) / 32 * 32; }

void prep_i4(const float* x, int64_t k, int64_t /*group*/, float* out) {
  fma_kernels_avx512().bf16_pair_x(x, k, out);
}

inline __m512 nibble_lut() {
  return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1);
}

template <int MB>
void dot_i4_mb(const QuantRow* rows, const QuantFormat& f, const QuantX& x, float* out) {
  constexpr int R = kI4Rows;
  const int64_t k = f.k, g = f.group;
  const __m512 lut_q = nibble_lut();
  __m512 acc[MB][R];
  for (int i = 0; i < MB; ++i)
    for (int r = 0; r < R; ++r) acc[i][r] = _mm512_setzero_ps();
  for (int64_t g0 = 0; g0 < k; g0 += g) {
    const int64_t gi = g0 / g;
    // The group's table: nibble -> (q - z) * s, exact in f32 (9 x 11 significant bits at most).
    __m512 lut[R];
    for (int r = 0; r < R; ++r) {
      const float sc = scale_at(rows[r].scales, gi, f.bf16_scales);
      const float zs = rows[r].zeros ? -static_cast<float>(rows[r].zeros[gi]) * sc : 0.0f;
      lut[r] = _mm512_fmadd_ps(lut_q, _mm512_set1_ps(sc), _mm512_set1_ps(zs));
    }
    for (int64_t kk = g0; kk < g0 + g; kk += 32) {
      __m512 we[R], wo[R];
      for (int r = 0; r < R; ++r) {
        const uint8_t* p = rows[r].data + kk / 2;
        if ((kk & 127) == 0) _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T0);
        // vpermps reads only the low 4 bits of each index: the low nibble needs no mask.
        const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        we[r] = _mm512_permutexvar_ps(v, lut[r]);
        wo[r] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), lut[r]);
      }
      for (int i = 0; i < MB; ++i) {
        const float* xb = x.x + i * x.ldx + kk;
        const __m512 xe = in_register(_mm512_loadu_ps(xb));
        const __m512 xo = in_register(_mm512_loadu_ps(xb + 16));
        for (int r = 0; r < R; ++r) {
          acc[i][r] = _mm512_fmadd_ps(xe, we[r], acc[i][r]);
          acc[i][r] = _mm512_fmadd_ps(xo, wo[r], acc[i][r]);
        }
      }
    }
  }
  for (int i = 0; i < MB; ++i)
    for (int r = 0; r < R; ++r) out[i * R + r] = _mm512_reduce_add_ps(acc[i][r]);
}

void dot_i4(const QuantRow* rows, const QuantFormat& f, const QuantX& x, float* out) {
  switch (x.mb) {
    case 1: return dot_i4_mb<1>(rows, f, x, out);
    case 2: return dot_i4_mb<2>(rows, f, x, out);
    case 3: return dot_i4_mb<3>(rows, f, x, out);
    default: return dot_i4_mb<4>(rows, f, x, out);
  }
}

// ---- kF8E4M3 dot kernel: R = 4 rows, MB <= 4 ----
constexpr int kF8Rows = 4;
constexpr int kF8MaxM = 4;

template <int MB>
void dot_f8_mb(const QuantRow* rows, const QuantFormat& f, const QuantX& x, float* out) {
  constexpr int R = kF8Rows;
  const int64_t k = f.k;
  __m512 acc[MB][R];
  for (int i = 0; i < MB; ++i)
    for (int r = 0; r < R; ++r) acc[i][r] = _mm512_setzero_ps();
  for (int64_t kk = 0; kk < k; kk += 32) {
    const bool full = k - kk >= 32;
    __m512 w[2][R];
    for (int r = 0; r < R; ++r) {
      const uint8_t* p = rows[r].data + kk;
      _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T0);
      const __m256i b = full ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))
                             : _mm256_maskz_loadu_epi8(mask32(k - kk), p);
      fp8x32_to_f32(b, w[0][r], w[1][r]);
    }
    for (int h = 0; h < 2; ++h) {
      const __mmask16 m = full ? __mmask16(0xffff) : mask16(k - kk - 16 * h);
      for (int i = 0; i < MB; ++i) {
        const __m512 xv = in_register(_mm512_maskz_loadu_ps(m, x.x + i * x.ldx + kk + 16 * h));
        for (int r = 0; r < R; ++r) acc[i][r] = _mm512_fmadd_ps(xv, w[h][r], acc[i][r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    const float s = row_scale(rows[r].scales) * 256.0f;
    for (int i = 0; i < MB; ++i) out[i * R + r] = _mm512_reduce_add_ps(acc[i][r]) * s;
  }
}

void dot_f8(const QuantRow* rows, const QuantFormat& f, const QuantX& x, float* out) {
  switch (x.mb) {
    case 1: return dot_f8_mb<1>(rows, f, x, out);
    case 2: return dot_f8_mb<2>(rows, f, x, out);
    case 3: return dot_f8_mb<3>(rows, f, x, out);
    default: return dot_f8_mb<4>(rows, f, x, out);
  }
}

// ---- Dequantization of whole rows (prefill) ----

// Calls emit(c, v0, v1) with the dequantized elements [c, c + 32) as two f32 vectors; for fp8
// the last call may cover fewer (the rest 0).
// Always inlined so that a caller compiled for more than this file's flags (dequant_bf16)
// can pass a lambda that uses its extra instructions.
template <class Emit>
[[gnu::always_inline]] inline void dequant_row_each(const QuantRow& row, const QuantFormat& f,
                                                    Emit emit) {
  const int64_t k = f.k;
  if (f.dtype == DType::kF8E4M3) {
    const __m512 s = _mm512_set1_ps(row_scale(row.scales) * 256.0f);
    for (int64_t c = 0; c < k; c += 32) {
      __m512 lo, hi;
      fp8x32_to_f32(_mm256_maskz_loadu_epi8(mask32(k - c), row.data + c), lo, hi);
      emit(c, _mm512_mul_ps(lo, s), _mm512_mul_ps(hi, s));
    }
    return;
  }
  // Element 2j is the low nibble of byte j: interleave the low- and high-nibble vectors.
  const __m512i first = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i second = _mm512_add_epi32(first, _mm512_set1_epi32(8));
  const __m512i low4 = _mm512_set1_epi32(0x0f), eight = _mm512_set1_epi32(8);
  for (int64_t c = 0; c < k; c += 32) {  // k is a multiple of the group, itself of 32
    const int64_t gi = c / f.group;
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row.data + c / 2)));
    const __m512i z = _mm512_set1_epi32(row.zeros ? row.zeros[gi] : 0);
    // Two's complement nibble n -> q = (n ^ 8) - 8; then q - z, exact in int32 and in f32.
    const __m512i lo = _mm512_sub_epi32(
        _mm512_sub_epi32(_mm512_xor_si512(_mm512_and_si512(v, low4), eight), eight), z);
    const __m512i hi = _mm512_sub_epi32(
        _mm512_sub_epi32(_mm512_xor_si512(_mm512_srli_epi32(v, 4), eight), eight), z);
    const __m512 s = _mm512_set1_ps(scale_at(row.scales, gi, f.bf16_scales));
    const __m512 lof = _mm512_cvtepi32_ps(lo), hif = _mm512_cvtepi32_ps(hi);
    emit(c, _mm512_mul_ps(_mm512_permutex2var_ps(lof, first, hif), s),
         _mm512_mul_ps(_mm512_permutex2var_ps(lof, second, hif), s));
  }
}

void dequant_f32(const QuantRow& row, const QuantFormat& f, float* out) {
  dequant_row_each(row, f, [&](int64_t c, __m512 v0, __m512 v1) {
    _mm512_mask_storeu_ps(out + c, mask16(f.k - c), v0);
    _mm512_mask_storeu_ps(out + c + 16, mask16(f.k - c - 16), v1);
  });
}

// The one function here that needs AVX512-BF16 (vcvtne2ps2bf16): the file is compiled for
// AVX-512 F/BW/VL/DQ only, so nothing else can pick up an instruction a kAvx512 CPU lacks. Only
// the AMX prefill calls it (gemm_quant_cpu.cc), and the kAmx level includes AVX512-BF16. A
// pragma rather than an attribute, so that the lambda's body gets the target too.
#pragma GCC push_options
#pragma GCC target("avx512bf16")
void dequant_bf16(const QuantRow& row, const QuantFormat& f, uint16_t* out) {
  dequant_row_each(row, f, [&](int64_t c, __m512 v0, __m512 v1) {
    const __m512bh h = _mm512_cvtne2ps_pbh(v1, v0);
    _mm512_mask_storeu_epi16(out + c, mask32(f.k - c), reinterpret_cast<const __m512i&>(h));
  });
}
#pragma GCC pop_options

QuantKernels make_table() {
  QuantKernels t;
  t.i4 = {kI4Rows, kI4MaxM, dot_i4};
  t.f8 = {kF8Rows, kF8MaxM, dot_f8};
  t.i4_x_floats = i4_x_floats;
  t.prep_i4 = prep_i4;
  t.dequant_f32 = dequant_f32;
  t.dequant_bf16 = dequant_bf16;
  t.epilogue = fma_kernels_avx512().epilogue;
  return t;
}

}  // namespace

const QuantKernels& quant_kernels_avx512() {
  static const QuantKernels table = make_table();
  return table;
}

}  // namespace sampan::cpu::gemm_detail
