// vdpbf16ps panel kernels for prefill with GemmPrecision::kBf16 on CPUs with AVX512-BF16 but no
// AMX (Zen 4, Cooper Lake); the panel layouts are in gemm_internal.h, the driver in gemm_cpu.cc.
//
// vdpbf16ps multiplies the two bf16 of each 32-bit lane of two vectors and adds both products to
// an f32 lane: 32 multiply-adds per instruction where an f32 FMA does 16, at the same issue rate
// on Zen 4 (measured: one zmm vdpbf16ps or vfmadd231ps per cycle, and this kernel at ~1.9x the
// f32 panels' GFLOP/s). So the weights are packed as pairs of adjacent k, [kc/2][NR][2] bf16,
// and each pair of x, rounded to bf16 once per call, is broadcast against them. (kSplitBf16's
// hi + lo x would take two vdpbf16ps per pair, no more multiply-adds per cycle than the exact f32
// panels: see prefill_panel_kernels.)
// Accuracy: x and f16/f32 weights rounded to bf16 (nearest even, <= 2^-8 relative); the
// products of two bf16 are exact in f32 and vdpbf16ps rounds each addition to f32 (nearest
// even), one accumulator per output as on AMX. It treats denormal inputs (|v| < 2^-126) as
// zero, which moves a product by less than 2^-126 times the other factor.
//
// GCC 12 reports its own intrinsics' _mm512_undefined_* pass-through operands as
// (maybe-)uninitialized (fixed in GCC 13); the warning points into the header, so it is silenced
// before the header is read.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <utility>

#include "kernels/cpu/gemm_internal.h"

namespace sampan::cpu::gemm_detail {
namespace {

// MR rows of x by NR columns: MR * NR/16 accumulators + NR/16 panel vectors + 2 broadcasts.
constexpr int kMr = 6;
constexpr int kNr = 64;
constexpr int kNq = kNr / 16;  // vectors per panel row
// k per panel chunk: the panel is kKc * kNr * 2 bytes = 32 KiB, the size of Zen 4's L1D.
constexpr int64_t kKc = 256;

inline __mmask16 mask16(int64_t n) {
  return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

inline __mmask32 mask32(int64_t n) {
  return n >= 32 ? ~__mmask32(0) : n <= 0 ? __mmask32(0) : __mmask32((1u << n) - 1);
}

inline __m512i as_si512(__m512bh v) { return (__m512i)v; }

// x: [k] -> out: [round_up(k, 32) / 2] pairs (bf16(x[2p]), bf16(x[2p + 1])), zero past k.
void prep_x_bf16(const float* x, int64_t k, float* out) {
  for (int64_t c = 0; c < k; c += 32) {
    const __m512 v0 = _mm512_maskz_loadu_ps(mask16(k - c), x + c);
    const __m512 v1 = _mm512_maskz_loadu_ps(mask16(k - c - 16), x + c + 16);
    _mm512_storeu_si512(out + c / 2, as_si512(_mm512_cvtne2ps_pbh(v1, v0)));
  }
}

// Elements [k0, k0 + n) of a weight row (n <= 32) as 32 bf16, zero past n; reads nothing past n.
template <int DT>
inline __m512i load_bf16x32(const void* row, int64_t k0, int64_t n) {
  if constexpr (DT == kDtBF16) {
    return _mm512_maskz_loadu_epi16(mask32(n), static_cast<const uint16_t*>(row) + k0);
  } else if constexpr (DT == kDtF16) {
    const uint16_t* p = static_cast<const uint16_t*>(row) + k0;
    const __m512 lo = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask16(n), p));
    const __m512 hi = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask16(n - 16), p + 16));
    return as_si512(_mm512_cvtne2ps_pbh(hi, lo));
  } else {
    const float* p = static_cast<const float*>(row) + k0;
    const __m512 lo = _mm512_maskz_loadu_ps(mask16(n), p);
    const __m512 hi = _mm512_maskz_loadu_ps(mask16(n - 16), p + 16);
    return as_si512(_mm512_cvtne2ps_pbh(hi, lo));
  }
}

// panel: [ceil(kc/2), kNr, 2] bf16. Each 16 rows x 16 pairs block is one 32-bit 16x16 transpose.
template <int DT>
void pack_pairs_dt(const void* const* rows, int64_t k0, int64_t kc, uint16_t* panel) {
  for (int g = 0; g < kNq; ++g) {
    for (int64_t kk = 0; kk < kc; kk += 32) {
      const int64_t n = std::min<int64_t>(32, kc - kk);
      __m512i t[16];
      for (int j = 0; j < 16; ++j) {
        const void* row = rows[g * 16 + j];
        t[j] = row ? load_bf16x32<DT>(row, k0 + kk, n) : _mm512_setzero_si512();
      }
      transpose16(t);  // t[q] = pair kk/2 + q of the 16 rows
      for (int64_t q = 0; q < (n + 1) / 2; ++q) {
        _mm512_storeu_si512(panel + ((kk / 2 + q) * kNr + g * 16) * 2, t[q]);
      }
    }
  }
}

void pack_pairs(int dt, const void* const* rows, int64_t k0, int64_t kc, float* panel) {
  uint16_t* p = reinterpret_cast<uint16_t*>(panel);
  if (dt == kDtF32) pack_pairs_dt<kDtF32>(rows, k0, kc, p);
  if (dt == kDtF16) pack_pairs_dt<kDtF16>(rows, k0, kc, p);
  if (dt == kDtBF16) pack_pairs_dt<kDtBF16>(rows, k0, kc, p);
}

// x: [mr, ldx] bf16 pairs. A pair is broadcast as a float so that the compiler reads it with one
// vbroadcastss (bit-exact: no arithmetic touches it).
template <int MB>
void pair_tile(const float* x, int64_t ldx, const float* panel, int64_t kc, float* c, int64_t ldc,
               bool accumulate) {
  const uint16_t* pp = reinterpret_cast<const uint16_t*>(panel);
  __m512 acc[MB][kNq];
  for (int i = 0; i < MB; ++i) {
    for (int q = 0; q < kNq; ++q) {
      acc[i][q] = accumulate ? _mm512_loadu_ps(c + i * ldc + 16 * q) : _mm512_setzero_ps();
    }
  }
  const int64_t pairs = (kc + 1) / 2;
  for (int64_t p = 0; p < pairs; ++p) {
    __m512bh b[kNq];
    for (int q = 0; q < kNq; ++q) {
      b[q] = (__m512bh)_mm512_loadu_si512(pp + p * 2 * kNr + 32 * q);
    }
    for (int i = 0; i < MB; ++i) {
      const __m512bh xv = (__m512bh)_mm512_castps_si512(_mm512_set1_ps(x[i * ldx + p]));
      for (int q = 0; q < kNq; ++q) acc[i][q] = _mm512_dpbf16_ps(acc[i][q], xv, b[q]);
    }
  }
  for (int i = 0; i < MB; ++i) {
    for (int q = 0; q < kNq; ++q) _mm512_storeu_ps(c + i * ldc + 16 * q, acc[i][q]);
  }
}

template <int... MB>
void pair_kernel_of(std::integer_sequence<int, MB...>, const float* x, int64_t ldx, int64_t mr,
                    const float* panel, int64_t kc, float* c, int64_t ldc, bool accumulate) {
  using Tile = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, bool);
  static constexpr Tile kTiles[] = {pair_tile<MB + 1>...};
  kTiles[std::min<int64_t>(mr, kMr) - 1](x, ldx, panel, kc, c, ldc, accumulate);
}

void pair_kernel(const float* x, int64_t ldx, int64_t mr, const float* panel, int64_t kc, float* c,
                 int64_t ldc, bool accumulate) {
  pair_kernel_of(std::make_integer_sequence<int, kMr>(), x, ldx, mr, panel, kc, c, ldc,
                 accumulate);
}

}  // namespace

const PanelKernels& bf16_panel_kernels() {
  static_assert(kKc % 2 == 0 && kNr <= kMaxPanelNr && kNr % 16 == 0);
  // The panel holds kKc * kNr bf16: half the floats the driver reserves.
  static const PanelKernels table{kMr, kNr, kKc, pack_pairs, pair_kernel, prep_x_bf16, 1};
  return table;
}

}  // namespace sampan::cpu::gemm_detail
