// Batched decode of quantized weights (kI4, kF8E4M3) on AMX-BF16 tiles: gemm_amx's tile loop
// with a panel packer that dequantizes 16 weight rows at a time straight into the tile-ordered
// panel (L1), so the weights stream from memory once per call for all m <= 16 rows of x and
// nothing is dequantized to memory. Contract and accuracy: gemm_quant.h.
//
// kI4: the tiles hold q - z, exact in bf16 (at most 8 significant bits), looked up 32 nibbles at
// a time with vpermw from a 16-entry bf16 table (per row and group only for asymmetric
// weights). Each weight group's products accumulate in C tiles of their own and are added to
// f32 sums times the group's row scales (AmxPanelSource::group_steps, gemm_amx.cc), so the
// weights stay exact. (A first version rounded (q - z) * s to bf16 hi + lo parts and multiplied
// three tile products per step: same speed, measured, and less exact.)
// kF8E4M3: the E4M3 value times 2^-8 is exact in f16 (gemm_quant_avx512.cc) and so in bf16 (4
// significant bits, exponent in range): the weight tiles are exact, and the row scale (times
// 2^8) multiplies the finished column in the epilogue.
// With both, the only rounding is x's: hi + lo bf16 parts (2^-16), or bf16 with kBf16.
//
// GCC 12 reports its own intrinsics' _mm512_undefined_* pass-through operands as
// maybe-uninitialized (fixed in GCC 13); silenced before the header is read.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <bit>
#include <cstring>

#include "kernels/cpu/gemm_quant.h"

namespace sampan::cpu::gemm_detail {
namespace {

constexpr int64_t kTileElems = 512;  // bf16 elements in one 16x32 tile

struct QuantSourceCtx {
  const GemmWeights* w;
  QuantFormat f;
};

inline float scale_at(const void* scales, int64_t g, bool bf16) {
  const uint16_t h = static_cast<const uint16_t*>(scales)[g];
  return bf16 ? std::bit_cast<float>(static_cast<uint32_t>(h) << 16) : _cvtsh_ss(h);
}

inline __mmask32 mask32(int64_t n) {
  return n >= 32 ? ~__mmask32(0) : n <= 0 ? __mmask32(0) : __mmask32((1u << n) - 1);
}

// Rows [rows, 16) of every step: zero (a short last group of a block).
void zero_rows(int64_t rows, int64_t steps, uint16_t* out) {
  for (int64_t s = 0; s < steps; ++s) {
    for (int64_t r = rows; r < 16; ++r) {
      _mm512_store_si512(out + s * kTileElems + r * 32, _mm512_setzero_si512());
    }
  }
}

// (q - z) as bf16, exact (|q - z| <= 135 needs 8 bits): the scale is applied per group to the
// f32 sums (AmxPanelSource::group_scale).
void pack_i4(const void* ctx, int b, int64_t row0, int64_t rows, int64_t kb0, int64_t kb1,
             uint16_t* hi) {
  const QuantSourceCtx& c = *static_cast<const QuantSourceCtx*>(ctx);
  const QuantFormat& f = c.f;
  const int64_t groups_per_row = f.k / f.group, steps_per_group = f.group / 32;
  const uint8_t* data = static_cast<const uint8_t*>(c.w->data[b]) + row0 * (f.k / 2);
  const int8_t* zeros = c.w->zeros[b] ? c.w->zeros[b] + row0 * groups_per_row : nullptr;
  const __m512 lut_q = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1);
  const __m256bh q16 = _mm512_cvtneps_pbh(lut_q);
  const __m512i lut_sym = _mm512_castsi256_si512(reinterpret_cast<const __m256i&>(q16));
  const __m512i nibbles = _mm512_set1_epi32(0x000f000f);
  // Group outer, row inner: the 16 rows are read as 16 streams a group at a time (more DRAM
  // requests in flight than one row after another).
  for (int64_t kb = kb0; kb < kb1;) {
    const int64_t gi = kb / steps_per_group;
    const int64_t kend = std::min(kb1, (gi + 1) * steps_per_group);
    for (int64_t r = 0; r < rows; ++r) {
      __m512i lut = lut_sym;
      if (zeros) {
        const float z = static_cast<float>(zeros[r * groups_per_row + gi]);
        const __m256bh v = _mm512_cvtneps_pbh(_mm512_sub_ps(lut_q, _mm512_set1_ps(z)));
        lut = _mm512_castsi256_si512(reinterpret_cast<const __m256i&>(v));
      }
      const uint8_t* p = data + r * (f.k / 2);
      for (int64_t s0 = kb; s0 < kend; ++s0) {
        // Byte j holds elements 2j (low nibble) and 2j + 1: as a 32-bit lane, word 0 gets the
        // low nibble and word 1 the high one, so the words are the elements in order.
        const __m512i d = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + s0 * 16)));
        const __m512i idx = _mm512_ternarylogic_epi32(_mm512_slli_epi32(d, 12), d, nibbles, 0xa8);
        _mm512_store_si512(hi + (s0 - kb0) * kTileElems + r * 32, _mm512_permutexvar_epi16(idx, lut));
      }
    }
    kb = kend;
  }
  zero_rows(rows, kb1 - kb0, hi);
}

// The f32 scales of rows [row0, row0 + rows) for group `group`. out: [rows].
void i4_group_scale(const void* ctx, int b, int64_t row0, int64_t rows, int64_t group,
                    float* out) {
  const QuantSourceCtx& c = *static_cast<const QuantSourceCtx*>(ctx);
  const int64_t groups_per_row = c.f.k / c.f.group;
  const uint16_t* scales = static_cast<const uint16_t*>(c.w->scales[b]) + row0 * groups_per_row;
  for (int64_t r = 0; r < rows; ++r) {
    out[r] = scale_at(scales + r * groups_per_row, group, c.f.bf16_scales);
  }
}

void pack_f8(const void* ctx, int b, int64_t row0, int64_t rows, int64_t kb0, int64_t kb1,
             uint16_t* hi) {
  const QuantSourceCtx& c = *static_cast<const QuantSourceCtx*>(ctx);
  const int64_t k = c.f.k;
  const uint8_t* data = static_cast<const uint8_t*>(c.w->data[b]) + row0 * k;
  for (int64_t kb = kb0; kb < kb1; ++kb) {
    const int64_t col = kb * 32;
    const __mmask32 mask = mask32(k - col);
    for (int64_t r = 0; r < rows; ++r) {
      // 2^-8 times the E4M3 values in f32, then bf16: both exact.
      __m512 v0, v1;
      fp8x32_to_f32(_mm256_maskz_loadu_epi8(mask, data + r * k + col), v0, v1);
      const __m512bh h = _mm512_cvtne2ps_pbh(v1, v0);
      _mm512_store_si512(hi + (kb - kb0) * kTileElems + r * 32, reinterpret_cast<const __m512i&>(h));
    }
  }
  zero_rows(rows, kb1 - kb0, hi);
}

}  // namespace

void gemm_quant_amx(int64_t m, const float* x, int64_t ldx, const GemmWeights& w,
                    GemmEpilogue ep, float* y, int64_t ldy, TaskRunner& runner) {
  QuantSourceCtx ctx{&w, {}};
  QuantFormat& f = ctx.f;
  f.dtype = w.dtype;
  f.k = w.k;
  AmxPanelSource src;
  src.ctx = &ctx;
  if (w.dtype == DType::kI4) {
    f.group = w.group_size;
    f.bf16_scales = w.scale_dtype == DType::kBF16;
    src.pack = pack_i4;
    src.group_steps = w.group_size / 32;
    src.group_scale = i4_group_scale;
    src.row_bytes = w.k / 2;
    src.step_bytes = 16;
    for (int b = 0; b < w.n_blocks; ++b) {
      src.side[0][b] = w.scales[b];
      src.side[1][b] = w.zeros[b];
    }
    src.side_row_bytes[0] = w.k / w.group_size * 2;
    src.side_row_bytes[1] = w.k / w.group_size;
  } else {
    src.pack = pack_f8;
    src.row_bytes = w.k;
    src.step_bytes = 32;
    for (int b = 0; b < w.n_blocks; ++b) src.col_scale[b] = w.scales[b];
    src.col_scale_mul = 256.0f;
  }
  gemm_amx_source(m, x, ldx, w, src, ep, y, ldy, runner);
}

}  // namespace sampan::cpu::gemm_detail
