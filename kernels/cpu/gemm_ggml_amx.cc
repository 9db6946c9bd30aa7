// Prefill of GGUF block-type weights (dtype kU8) on AMX-BF16 tiles: gemm_amx's tile loop with a
// panel packer that dequantizes 16 weight rows at a time straight into the tile-ordered panel,
// as the FP8 weights' packer does (gemm_quant_f8_amx.cc). Each row's blocks covering the
// panel's k-steps are dequantized to f32 in L1 (the type's dequant kernel, bit-identical to
// dequantize_ggml_row) and rounded to bf16 (nearest even) into the panel. The former route
// dequantized chunks of up to 16 MB of rows to f32, rounded them into a bf16 copy in memory and
// had gemm_amx copy that into its panels: two extra passes over the weights, one through memory.
// Same weight bits either way (the same dequantization, the same rounding); x is rounded to bf16
// (the caller's kBf16), so a product changes only by f32 summation order.
//
// GCC 12 reports its own intrinsics' _mm512_undefined_* pass-through operands as
// maybe-uninitialized (fixed in GCC 13); silenced before the header is read.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cassert>

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/gemm_ggml.h"
#include "kernels/cpu/gemm_quant.h"  // mask16

namespace sampan::cpu::gemm_detail {
namespace {

constexpr int64_t kTileElems = 512;  // bf16 elements in one 16x32 tile

struct GgmlSource {
  const GemmWeights* w;
  GgmlDequantFn dequant;
  int64_t row_bytes;    // bytes of one row of w.k elements
  int64_t block;        // elements per block (32 or 256)
  int64_t block_bytes;  // bytes per block
};

// One row's dequantized blocks, per thread (at most a row: 22 KB at k = 5632).
AlignedBuffer<float>& row_piece() {
  thread_local AlignedBuffer<float> s;
  return s;
}

// AmxPanelSource::pack: rows [row0, row0 + rows) of block b, k-steps [kb0, kb1), into
// out: [kb1 - kb0, 16, 32] bf16. A step range that starts or ends inside a 256-element block
// dequantizes the whole block (gemm_amx's k-chunks and decode slices need not be block-aligned).
void pack_ggml(const void* ctx, int b, int64_t row0, int64_t rows, int64_t kb0, int64_t kb1,
               uint16_t* out) {
  const GgmlSource& g = *static_cast<const GgmlSource*>(ctx);
  const int64_t k = g.w->k;
  const int64_t c0 = kb0 * 32, c1 = std::min(k, kb1 * 32);
  const int64_t a0 = c0 / g.block * g.block;
  const int64_t a1 = std::min(k, (c1 + g.block - 1) / g.block * g.block);
  AlignedBuffer<float>& piece = row_piece();
  piece.reserve(a1 - a0);
  const uint8_t* base = static_cast<const uint8_t*>(g.w->data[b]) + row0 * g.row_bytes +
                        a0 / g.block * g.block_bytes;
  for (int64_t r = 0; r < rows; ++r) {
    g.dequant(base + r * g.row_bytes, a1 - a0, piece.data());
    const float* f = piece.data();  // f[c - a0] = w[row0 + r][c] for c in [a0, a1)
    for (int64_t kb = kb0; kb < kb1; ++kb) {
      const int64_t col = kb * 32;
      const __m512 v0 = _mm512_maskz_loadu_ps(mask16(k - col), f + (col - a0));
      const __m512 v1 = _mm512_maskz_loadu_ps(mask16(k - col - 16), f + (col - a0 + 16));
      const __m512bh h = _mm512_cvtne2ps_pbh(v1, v0);
      _mm512_store_si512(out + (kb - kb0) * kTileElems + r * 32,
                         reinterpret_cast<const __m512i&>(h));
    }
  }
  amx::zero_panel_rows(rows, kb1 - kb0, out);
}

}  // namespace

void gemm_ggml_amx(int64_t m, const float* x, int64_t ldx, const GemmWeights& w,
                   GgmlDequantFn dequant, GemmEpilogue ep, float* y, int64_t ldy,
                   TaskRunner& runner) {
  assert(w.dtype == DType::kU8 && dequant != nullptr);
  GgmlSource g;
  g.w = &w;
  g.dequant = dequant;
  g.row_bytes = ggml_row_bytes(w.ggml_type, w.k);
  g.block = ggml_block_size(w.ggml_type);
  g.block_bytes = ggml_type_size(w.ggml_type);
  AmxPanelSource src;
  src.ctx = &g;
  src.pack = pack_ggml;
  src.row_bytes = g.row_bytes;
  // For the prefetch of the next unit's rows only: rounded down, so it never runs past a row.
  src.step_bytes = g.block_bytes * 32 / g.block;
  gemm_amx_source(m, x, ldx, w, src, ep, y, ldy, runner);
}

}  // namespace sampan::cpu::gemm_detail
