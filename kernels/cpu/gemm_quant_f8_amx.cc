// Batched decode and prefill of kF8E4M3 weights on AMX-BF16 tiles: gemm_amx's tile loop with
// a panel packer that dequantizes 16 weight rows at a time straight into the tile-ordered panel
// (L1), so the weights stream from memory once per call and nothing is dequantized to memory.
// Contract and accuracy: gemm_quant.h. The E4M3 value times 2^-8 is exact in f16
// (gemm_quant_avx512.cc) and so in bf16 (4 significant bits, exponent in range): the weight
// tiles are exact, and the row scale (times 2^8) multiplies the finished column in the epilogue.
// The only rounding is x's: hi + lo bf16 parts (2^-16), or bf16 with kBf16. (kI4 runs on the
// AMX-INT8 tiles instead: gemm_quant_i4_amx.cc.)
//
// GCC 12 reports its own intrinsics' _mm512_undefined_* pass-through operands as
// maybe-uninitialized (fixed in GCC 13); silenced before the header is read.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cassert>
#include <cstring>

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/gemm_quant.h"
#include "kernels/cpu/isa.h"

namespace sampan::cpu::gemm_detail {
namespace {

constexpr int64_t kTileElems = 512;  // bf16 elements in one 16x32 tile

inline __mmask32 mask32(int64_t n) {
  return n >= 32 ? ~__mmask32(0) : n <= 0 ? __mmask32(0) : __mmask32((1u << n) - 1);
}

void pack_f8(const void* ctx, int b, int64_t row0, int64_t rows, int64_t kb0, int64_t kb1,
             uint16_t* hi) {
  const GemmWeights& w = *static_cast<const GemmWeights*>(ctx);
  const int64_t k = w.k;
  const uint8_t* data = static_cast<const uint8_t*>(w.data[b]) + row0 * k;
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
  amx::zero_panel_rows(rows, kb1 - kb0, hi);
}

// The same panel by byte table lookups (AVX512-VBMI), 64 codes at a time: vpermi2b maps a code's
// 7-bit magnitude to the low and the high byte of its bf16 (the same 2^-8 times the E4M3 value,
// so the same bits as pack_f8), the sign bit is copied into the high byte, and vpunpck[lh]bw
// joins the bytes into words. A vpermb first orders the codes so that the two word vectors come
// out as elements 0..31 and 32..63. 5 shuffles per 64 codes against 8 for the f16 route
// (sign extension, lane extraction and vcvtph2ps twice per 32 codes, then the bf16 pack), which
// bound the batched decode on the tiles; gemm_quant.h (kF8AmxMinM) has the figures.
struct F8Tables {
  __m512i order, lo0, lo1, hi0, hi1;
};

const F8Tables& f8_tables() {
  static const F8Tables t = [] {
    alignas(64) uint8_t order[64], lo[128], hi[128];
    // Byte 16 l + 8 e + j of the ordered codes is element 32 e + 8 l + j: vpunpcklbw takes bytes
    // 0..7 of each 128-bit lane (elements 0..31 in order), vpunpckhbw bytes 8..15 (32..63).
    for (int p = 0; p < 64; ++p) {
      order[p] = static_cast<uint8_t>(32 * ((p % 16) / 8) + 8 * (p / 16) + p % 8);
    }
    for (int m = 0; m < 128; ++m) {
      // As fp8x32_to_f32: the magnitude's bits as an f16's exponent and mantissa fields give
      // 2^-8 times its E4M3 value, exact in bf16.
      const float f = _cvtsh_ss(static_cast<unsigned short>(m << 7));
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      lo[m] = static_cast<uint8_t>((bits >> 16) & 0xff);
      hi[m] = static_cast<uint8_t>(bits >> 24);
    }
    F8Tables r;
    std::memcpy(&r.order, order, 64);
    std::memcpy(&r.lo0, lo, 64);
    std::memcpy(&r.lo1, lo + 64, 64);
    std::memcpy(&r.hi0, hi, 64);
    std::memcpy(&r.hi1, hi + 64, 64);
    return r;
  }();
  return t;
}

__attribute__((target("avx512vbmi"))) void pack_f8_vbmi(const void* ctx, int b, int64_t row0,
                                                         int64_t rows, int64_t kb0, int64_t kb1,
                                                         uint16_t* hi) {
  const GemmWeights& w = *static_cast<const GemmWeights*>(ctx);
  const int64_t k = w.k;
  const uint8_t* data = static_cast<const uint8_t*>(w.data[b]) + row0 * k;
  const F8Tables& t = f8_tables();
  const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t kb = kb0; kb < kb1; kb += 2) {
    const int64_t col = kb * 32;
    const bool pair = kb + 1 < kb1;
    const int64_t n = std::min<int64_t>(pair ? 64 : 32, k - col);
    const __mmask64 mask = n >= 64 ? ~__mmask64(0) : (__mmask64(1) << n) - 1;
    uint16_t* p0 = hi + (kb - kb0) * kTileElems;
    for (int64_t r = 0; r < rows; ++r) {
      const __m512i c =
          _mm512_permutexvar_epi8(t.order, _mm512_maskz_loadu_epi8(mask, data + r * k + col));
      const __m512i l = _mm512_permutex2var_epi8(t.lo0, c, t.lo1);
      const __m512i h = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(t.hi0, c, t.hi1), c,
                                                  sign, 0xf8);  // h | (c & 0x80)
      _mm512_store_si512(p0 + r * 32, _mm512_unpacklo_epi8(l, h));
      if (pair) _mm512_store_si512(p0 + kTileElems + r * 32, _mm512_unpackhi_epi8(l, h));
    }
  }
  amx::zero_panel_rows(rows, kb1 - kb0, hi);
}

}  // namespace

void gemm_quant_f8_amx(int64_t m, const float* x, int64_t ldx, const GemmWeights& w,
                       GemmEpilogue ep, float* y, int64_t ldy, TaskRunner& runner) {
  assert(w.dtype == DType::kF8E4M3);
  AmxPanelSource src;
  src.ctx = &w;
  src.pack = cpu_features().avx512_vbmi ? pack_f8_vbmi : pack_f8;
  src.row_bytes = w.k;
  src.step_bytes = 32;
  for (int b = 0; b < w.n_blocks; ++b) src.col_scale[b] = w.scales[b];
  src.col_scale_mul = 256.0f;
  gemm_amx_source(m, x, ldx, w, src, ep, y, ldy, runner);
}

}  // namespace sampan::cpu::gemm_detail
