// AVX-512 micro-kernels for the FMA GEMM path (see gemm_internal.h). Dot kernels (decode):
// R = 4 weight rows by MB <= 4 rows of x, or R = 2 by MB <= 8; at most 16 accumulators of 16
// lanes, weights converted to f32 in registers. Panel kernels (prefill): a 6 x 64 register tile
// against a k-major f32 panel packed with 16x16 transposes.
//
// GCC 12 reports its own intrinsics' _mm512_undefined_* pass-through operands as
// maybe-uninitialized (fixed in GCC 13); the warning points into the header, so it is silenced
// before the header is read.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/gemm_internal.h"

namespace sampan::cpu::gemm_detail {
namespace {

// Software prefetch distance along each weight row. Four rows stream at once per thread; about
// 1 KiB ahead per row covers DRAM latency at the single-core bandwidth of a server part.
constexpr int kPrefetchBytes = 1024;

// 16 weights starting at p, as f32.
template <int DT>
inline __m512 load_w(const void* p, int64_t i) {
  if constexpr (DT == kDtF32) {
    return _mm512_loadu_ps(static_cast<const float*>(p) + i);
  } else if constexpr (DT == kDtF16) {
    return _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(p) + i)));
  } else {
    const __m256i h =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(p) + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// Lanes outside `mask` read nothing (no fault past the end of a row) and come back as 0.
template <int DT>
inline __m512 load_w_masked(const void* p, int64_t i, __mmask16 mask) {
  if constexpr (DT == kDtF32) {
    return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(p) + i);
  } else if constexpr (DT == kDtF16) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(p) + i));
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(p) + i);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

template <int DT>
constexpr int kElemBytes = DT == kDtF32 ? 4 : 2;

// 32 weights starting at element i, as two vectors of f32. For f32/f16: elements [i, i+16) and
// [i+16, i+32). For bf16 in pair layout (see FmaKernels::bf16_pair_x): the even-indexed and the
// odd-indexed elements, straight from the two halves of each 32-bit pair.
template <int DT>
inline void load_w32(const void* p, int64_t i, __m512& lo, __m512& hi) {
  if constexpr (DT == kDtBF16) {
    const __m512i v = _mm512_loadu_si512(static_cast<const uint16_t*>(p) + i);
    lo = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    hi = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(int(0xffff0000u))));
  } else {
    lo = load_w<DT>(p, i);
    hi = load_w<DT>(p, i + 16);
  }
}

// x: [k] -> out: [round_up(k, 32)] in pair layout.
void bf16_pair_x(const float* x, int64_t k, float* out) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (int64_t i = 0; i < k; i += 32) {
    const int64_t n = k - i;
    const __mmask16 lo = n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1);
    const __mmask16 hi = n >= 32   ? __mmask16(0xffff)
                         : n <= 16 ? 0
                                   : __mmask16((1u << (n - 16)) - 1);
    const __m512 a = _mm512_maskz_loadu_ps(lo, x + i), b = _mm512_maskz_loadu_ps(hi, x + i + 16);
    _mm512_storeu_ps(out + i, _mm512_permutex2var_ps(a, even, b));
    _mm512_storeu_ps(out + i + 16, _mm512_permutex2var_ps(a, odd, b));
  }
}

// Pins a loaded x vector in a register. Left alone, GCC folds the load into every FMA that uses
// it, loading the same x vector once per weight row: with x in L2 (decode batches, long k) that
// doubled the load traffic and halved the kernel's speed.
inline __m512 in_register(__m512 v) {
  __asm__("" : "+v"(v));
  return v;
}

template <int DT, int kRows, int MB>
void dot_kernel(const void* const* w, const float* x, int64_t ldx, int64_t k0, int64_t k1,
                float* acc, bool begin, bool end, float* out) {
  const char* wr[kRows];
  for (int r = 0; r < kRows; ++r) wr[r] = static_cast<const char*>(w[r]);
  __m512 a[MB][kRows];
  for (int i = 0; i < MB; ++i) {
    for (int r = 0; r < kRows; ++r) {
      a[i][r] = begin ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + (i * kRows + r) * 16);
    }
  }
  int64_t kk = k0;
  for (; kk + 32 <= k1; kk += 32) {
    // One prefetch per 64-byte line of each row.
    for (int r = 0; r < kRows; ++r) {
      const char* p = wr[r] + kk * kElemBytes<DT> + kPrefetchBytes;
      _mm_prefetch(p, _MM_HINT_T0);
      if constexpr (kElemBytes<DT> == 4) _mm_prefetch(p + 64, _MM_HINT_T0);
    }
    __m512 w2[2][kRows];  // elements [kk, kk+16) and [kk+16, kk+32) (pair layout: even, odd)
    for (int r = 0; r < kRows; ++r) load_w32<DT>(wr[r], kk, w2[0][r], w2[1][r]);
    for (int h = 0; h < 2; ++h) {
      for (int i = 0; i < MB; ++i) {
        const __m512 xv = in_register(_mm512_loadu_ps(x + i * ldx + kk + 16 * h));
        for (int r = 0; r < kRows; ++r) a[i][r] = _mm512_fmadd_ps(xv, w2[h][r], a[i][r]);
      }
    }
  }
  if constexpr (DT == kDtBF16) {  // x in pair layout: one last, masked block of 32
    if (kk < k1) {
      const __mmask32 mask = k1 - kk >= 32 ? ~__mmask32(0) : __mmask32((1u << (k1 - kk)) - 1);
      __m512 w2[2][kRows];
      for (int r = 0; r < kRows; ++r) {
        const __m512i v =
            _mm512_maskz_loadu_epi16(mask, reinterpret_cast<const uint16_t*>(wr[r]) + kk);
        w2[0][r] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
        w2[1][r] = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(int(0xffff0000u))));
      }
      for (int h = 0; h < 2; ++h) {
        for (int i = 0; i < MB; ++i) {
          const __m512 xv = in_register(_mm512_loadu_ps(x + i * ldx + kk + 16 * h));
          for (int r = 0; r < kRows; ++r) a[i][r] = _mm512_fmadd_ps(xv, w2[h][r], a[i][r]);
        }
      }
      kk = k1;
    }
  }
  for (; kk < k1; kk += 16) {
    const int64_t left = k1 - kk;
    const __mmask16 mask = left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
    __m512 wv[kRows];
    for (int r = 0; r < kRows; ++r) wv[r] = load_w_masked<DT>(wr[r], kk, mask);
    for (int i = 0; i < MB; ++i) {
      const __m512 xv = in_register(_mm512_maskz_loadu_ps(mask, x + i * ldx + kk));
      for (int r = 0; r < kRows; ++r) a[i][r] = _mm512_fmadd_ps(xv, wv[r], a[i][r]);
    }
  }
  for (int i = 0; i < MB; ++i) {
    for (int r = 0; r < kRows; ++r) {
      if (end) {
        out[i * kRows + r] = _mm512_reduce_add_ps(a[i][r]);
      } else {
        _mm512_storeu_ps(acc + (i * kRows + r) * 16, a[i][r]);
      }
    }
  }
}

void epilogue(GemmEpilogue ep, const float* g, const float* bg, const float* u, const float* bu,
              float* y, int64_t n) {
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 mask = n - j >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - j)) - 1);
    __m512 v = _mm512_maskz_loadu_ps(mask, g + j);
    if (bg) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, bg + j));
    if (ep == GemmEpilogue::kSiluMul) {
      __m512 up = _mm512_maskz_loadu_ps(mask, u + j);
      if (bu) up = _mm512_add_ps(up, _mm512_maskz_loadu_ps(mask, bu + j));
      v = _mm512_mul_ps(silu512(v), up);
    }
    _mm512_mask_storeu_ps(y + j, mask, v);
  }
}

void to_f32(int dt, const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
    __m512 v;
    if (dt == kDtF32) {
      v = load_w_masked<kDtF32>(src, i, mask);
    } else if (dt == kDtF16) {
      v = load_w_masked<kDtF16>(src, i, mask);
    } else {
      v = load_w_masked<kDtBF16>(src, i, mask);
    }
    _mm512_mask_storeu_ps(dst + i, mask, v);
  }
}

// ---- Panel (outer-product) kernels: MR = 6 rows of x by NR = 64 columns (4 vectors). ----
constexpr int kPanelMr = 6;
constexpr int kPanelNr = 64;

template <int DT>
void pack_panel_dt(const void* const* rows, int64_t k0, int64_t kc, float* panel) {
  for (int g = 0; g < kPanelNr / 16; ++g) {
    for (int64_t kk = 0; kk < kc; kk += 16) {
      const int64_t n = std::min<int64_t>(16, kc - kk);
      const __mmask16 mask = n == 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1);
      __m512i t[16];
      for (int j = 0; j < 16; ++j) {
        const void* row = rows[g * 16 + j];
        t[j] = row ? _mm512_castps_si512(load_w_masked<DT>(row, k0 + kk, mask))
                   : _mm512_setzero_si512();
      }
      transpose16(t);  // t[q] = element kk + q of the 16 rows
      for (int q = 0; q < n; ++q) {
        _mm512_storeu_si512(panel + (kk + q) * kPanelNr + g * 16, t[q]);
      }
    }
  }
}

void pack_panel(int dt, const void* const* rows, int64_t k0, int64_t kc, float* panel) {
  if (dt == kDtF32) pack_panel_dt<kDtF32>(rows, k0, kc, panel);
  if (dt == kDtF16) pack_panel_dt<kDtF16>(rows, k0, kc, panel);
  if (dt == kDtBF16) pack_panel_dt<kDtBF16>(rows, k0, kc, panel);
}

// 24 accumulators + 4 panel vectors + 1 broadcast x = 29 of the 32 registers.
template <int MB>
void panel_tile(const float* x, int64_t ldx, const float* panel, int64_t kc, float* c, int64_t ldc,
                bool accumulate) {
  __m512 acc[MB][4];
  for (int i = 0; i < MB; ++i) {
    for (int q = 0; q < 4; ++q) {
      acc[i][q] = accumulate ? _mm512_loadu_ps(c + i * ldc + 16 * q) : _mm512_setzero_ps();
    }
  }
  for (int64_t kk = 0; kk < kc; ++kk) {
    const float* p = panel + kk * kPanelNr;
    const __m512 b0 = _mm512_loadu_ps(p), b1 = _mm512_loadu_ps(p + 16);
    const __m512 b2 = _mm512_loadu_ps(p + 32), b3 = _mm512_loadu_ps(p + 48);
    for (int i = 0; i < MB; ++i) {
      const __m512 a = _mm512_set1_ps(x[i * ldx + kk]);
      acc[i][0] = _mm512_fmadd_ps(a, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(a, b1, acc[i][1]);
      acc[i][2] = _mm512_fmadd_ps(a, b2, acc[i][2]);
      acc[i][3] = _mm512_fmadd_ps(a, b3, acc[i][3]);
    }
  }
  for (int i = 0; i < MB; ++i) {
    for (int q = 0; q < 4; ++q) _mm512_storeu_ps(c + i * ldc + 16 * q, acc[i][q]);
  }
}

void panel_kernel(const float* x, int64_t ldx, int64_t mr, const float* panel, int64_t kc, float* c,
                  int64_t ldc, bool accumulate) {
  switch (mr) {
    case 1: return panel_tile<1>(x, ldx, panel, kc, c, ldc, accumulate);
    case 2: return panel_tile<2>(x, ldx, panel, kc, c, ldc, accumulate);
    case 3: return panel_tile<3>(x, ldx, panel, kc, c, ldc, accumulate);
    case 4: return panel_tile<4>(x, ldx, panel, kc, c, ldc, accumulate);
    case 5: return panel_tile<5>(x, ldx, panel, kc, c, ldc, accumulate);
    default: return panel_tile<6>(x, ldx, panel, kc, c, ldc, accumulate);
  }
}

template <int DT>
void fill_dtype(FmaKernels& t) {
  t.narrow.dot[DT][1] = dot_kernel<DT, 4, 1>;
  t.narrow.dot[DT][2] = dot_kernel<DT, 4, 2>;
  t.narrow.dot[DT][3] = dot_kernel<DT, 4, 3>;
  t.narrow.dot[DT][4] = dot_kernel<DT, 4, 4>;
  t.wide.dot[DT][5] = dot_kernel<DT, 2, 5>;
  t.wide.dot[DT][6] = dot_kernel<DT, 2, 6>;
  t.wide.dot[DT][7] = dot_kernel<DT, 2, 7>;
  t.wide.dot[DT][8] = dot_kernel<DT, 2, 8>;
}

FmaKernels make_table() {
  FmaKernels t;
  t.narrow = {4, 1, 4, {}};
  t.wide = {2, 5, 8, {}};
  t.panel = {kPanelMr, kPanelNr, 128, pack_panel, panel_kernel};  // 32 KiB panel: L1
  t.panel_min_m_16bit = kAvx512PanelMinM16;
  t.bf16_pair_x = bf16_pair_x;
  fill_dtype<kDtF32>(t);
  fill_dtype<kDtF16>(t);
  fill_dtype<kDtBF16>(t);
  t.epilogue = epilogue;
  t.to_f32 = to_f32;
  return t;
}

}  // namespace

const FmaKernels& fma_kernels_avx512() {
  static const FmaKernels table = make_table();
  return table;
}

}  // namespace sampan::cpu::gemm_detail
