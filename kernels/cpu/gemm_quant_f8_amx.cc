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

#include <cassert>
#include <cstring>

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/gemm_quant.h"

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

}  // namespace

void gemm_quant_f8_amx(int64_t m, const float* x, int64_t ldx, const GemmWeights& w,
                       GemmEpilogue ep, float* y, int64_t ldy, TaskRunner& runner) {
  assert(w.dtype == DType::kF8E4M3);
  AmxPanelSource src;
  src.ctx = &w;
  src.pack = pack_f8;
  src.row_bytes = w.k;
  src.step_bytes = 32;
  for (int b = 0; b < w.n_blocks; ++b) src.col_scale[b] = w.scales[b];
  src.col_scale_mul = 256.0f;
  gemm_amx_source(m, x, ldx, w, src, ep, y, ldy, runner);
}

}  // namespace sampan::cpu::gemm_detail
