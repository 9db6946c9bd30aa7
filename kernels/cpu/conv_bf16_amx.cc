// The bf16 tile of the conv GEMM path (conv_cpu.h, conv_detail::Bf16Kernels) on AMX: 32 output
// channels x 32 pixels as 2 x 2 tiles of 16 x 16 f32 (tmm0-3), A (bf16 weight rows, or a's rows
// for matmul_bf16) in tmm4-5, B in tmm6-7 read in place from the vdpbf16ps packers' panel
// ([ceil(kc / 2)][32][2] bf16, conv_bf16_avx512.cc), which is already the pair layout that
// tdpbf16ps wants: a B tile is 16 pair rows of 16 pixels, 128 bytes apart. One k step of 32 is
// four tdpbf16ps, each the work of 512 vdpbf16ps lanes x 16.
//
// Same inputs and rounding as the vdpbf16ps tile (every product of two bf16 numbers is exact in
// f32; sums in f32), so the same error bound (conv_cpu.h); tdpbf16ps flushes denormal inputs and
// outputs to zero, as vdpbf16ps does.
//
// Edges. A tile load reads 16 rows x 64 bytes: rows past m (the last output-channel block) and
// columns past kc (the last k step) are not the caller's to read, so those steps go through a
// zero-padded copy on the stack; B's last pair rows likewise (past ceil(kc / 2) the panel holds
// the next panel or nothing). Full steps load straight from the caller's memory.
//
// Tile state: the driver calls begin() once per task (ldtilecfg, same palette as gemm_amx.cc)
// and end() after it (tilerelease), so the tiles are configured once per task, not per call.
// GCC 12's _mm512_undefined_ps (inside max/min) trips -Wmaybe-uninitialized (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/conv_cpu.h"
#include "kernels/cpu/conv_epilogue_avx512.h"

namespace sampan::cpu::conv_detail {
namespace {

constexpr int kMr = 32;
constexpr int kNr = 32;      // the vdpbf16ps packers' panel width
constexpr int64_t kStep = 32;  // k per tdpbf16ps (16 pairs)

void begin_tiles() { amx::configure_tiles(); }

void end_tiles() { _tile_release(); }

// Where A's rows [r0, r0 + 16) at k offset k0 are loaded from (a tile load names its register
// in the instruction, so the caller loads): straight from memory when all 16 rows and 32
// columns are there, else a zero-padded copy in pad. Returns the row stride in bytes.
inline int64_t a_source(const uint16_t* a, int64_t lda, int m, int r0, int64_t k0, int64_t kc,
                        uint16_t* pad, const uint16_t** src) {
  if (r0 + 16 <= m && k0 + kStep <= kc) {
    *src = a + r0 * lda + k0;
    return lda * 2;
  }
  std::memset(pad, 0, 16 * kStep * sizeof(uint16_t));
  const int rows = std::min(16, m - r0);
  const size_t bytes = static_cast<size_t>(std::min(kStep, kc - k0)) * sizeof(uint16_t);
  for (int r = 0; r < rows; ++r) std::memcpy(pad + r * kStep, a + (r0 + r) * lda + k0, bytes);
  *src = pad;
  return kStep * 2;
}

// m rows of C[m, 32] (+)= A[m, kc] · B[kc, 32] for m <= 32, then the epilogue row by row.
void tile_amx(int m, int64_t kc, const uint16_t* a, int64_t lda, const uint16_t* bp, float* c,
              int64_t ldc, bool accumulate, bool last, const float* bias, const float* res,
              const ConvEpilogue* ep) {
  alignas(64) uint16_t pad_a[16 * kStep];
  alignas(64) uint16_t pad_b[16 * 2 * kNr];
  alignas(64) float out[kMr * kNr];
  const bool two = m > 16;
  _tile_zero(0);
  _tile_zero(1);
  if (two) {
    _tile_zero(2);
    _tile_zero(3);
  }
  const int64_t pair_rows = (kc + 1) / 2;
  for (int64_t k0 = 0; k0 < kc; k0 += kStep) {
    const uint16_t* b = bp + k0 * kNr;  // pair row k0 / 2, 2 * kNr bf16 per pair row
    if (k0 + kStep > kc) {
      // The last, partial step: its pair rows, then zeros (a zero B row times whatever A holds
      // there is zero, and A's padding is zero too).
      std::memset(pad_b, 0, sizeof(pad_b));
      std::memcpy(pad_b, b, static_cast<size_t>(pair_rows - k0 / 2) * 2 * kNr * sizeof(uint16_t));
      b = pad_b;
    }
    const uint16_t* src;
    int64_t stride = a_source(a, lda, m, 0, k0, kc, pad_a, &src);
    _tile_loadd(4, src, stride);
    _tile_loadd(6, b, 2 * kNr * 2);
    _tile_loadd(7, b + 2 * 16, 2 * kNr * 2);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    if (two) {
      stride = a_source(a, lda, m, 16, k0, kc, pad_a, &src);
      _tile_loadd(5, src, stride);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, out, kNr * 4);
  _tile_stored(1, out + 16, kNr * 4);
  if (two) {
    _tile_stored(2, out + 16 * kNr, kNr * 4);
    _tile_stored(3, out + 16 * kNr + 16, kNr * 4);
  }
  for (int i = 0; i < m; ++i) {
    store_row_avx512(c + i * ldc, _mm512_load_ps(out + i * kNr),
                     _mm512_load_ps(out + i * kNr + 16), accumulate, last,
                     bias ? bias + i : nullptr, res ? res + i * ldc : nullptr, *ep);
  }
}

}  // namespace

Bf16Kernels bf16_kernels_amx() {
  Bf16Kernels k = bf16_kernels_avx512();  // the same packers: their panel is the tiles' B layout
  k.mr = kMr;
  k.fn = tile_amx;
  k.begin = begin_tiles;
  k.end = end_tiles;
  return k;
}

}  // namespace sampan::cpu::conv_detail
