// AVX2 micro-kernels for the FMA GEMM path (see gemm_internal.h). Dot kernels (decode): R = 4
// weight rows by MB <= 2 rows of x, or R = 2 by MB = 3..6 (more rows of x: groups of 3..6,
// FmaKernels::group_on_wide); 16 ymm registers hold at most 12 accumulators, the converted
// weight vectors and one x vector. Panel kernels (prefill): a 6 x 16 register tile against a
// k-major f32 panel packed with 8x8 transposes.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/gemm_internal.h"
#include "kernels/cpu/vec_avx2.h"

namespace sampan::cpu::gemm_detail {
namespace {

constexpr int kPrefetchBytes = 1024;  // per weight row, as in the AVX-512 kernels

inline __m256 bf16x8_to_f32(__m128i h) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

template <int DT>
inline __m256 load_w(const void* p, int64_t i) {
  if constexpr (DT == kDtF32) {
    return _mm256_loadu_ps(static_cast<const float*>(p) + i);
  } else {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i));
    if constexpr (DT == kDtF16) return _mm256_cvtph_ps(h);
    return bf16x8_to_f32(h);
  }
}

// Mask with the first `left` (< 8) lanes set.
inline __m256i lane_mask(int64_t left) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(left)), idx);
}

// The first `left` (< 8) weights at p; the rest are 0 and never read. AVX2 has no 16-bit masked
// load, so 16-bit rows go through a small zeroed copy.
template <int DT>
inline __m256 load_w_partial(const void* p, int64_t i, int64_t left) {
  if constexpr (DT == kDtF32) {
    return _mm256_maskload_ps(static_cast<const float*>(p) + i, lane_mask(left));
  } else {
    alignas(16) uint16_t tmp[8] = {};
    std::memcpy(tmp, static_cast<const uint16_t*>(p) + i, static_cast<size_t>(left) * 2);
    const __m128i h = _mm_load_si128(reinterpret_cast<const __m128i*>(tmp));
    if constexpr (DT == kDtF16) return _mm256_cvtph_ps(h);
    return bf16x8_to_f32(h);
  }
}

inline float hsum(__m256 v) { return Avx2::reduce_add(v); }

template <int DT>
constexpr int kElemBytes = DT == kDtF32 ? 4 : 2;

// Pins a loaded x vector in a register so GCC does not fold the load into every FMA that uses
// it (one load per weight row instead of one per x vector).
inline __m256 in_register(__m256 v) {
  __asm__("" : "+x"(v));
  return v;
}

template <int DT, int kRows, int MB>
void dot_kernel(const void* const* w, const float* x, int64_t ldx, int64_t k0, int64_t k1,
                float* acc, bool begin, bool end, float* out) {
  const char* wr[kRows];
  for (int r = 0; r < kRows; ++r) wr[r] = static_cast<const char*>(w[r]);
  __m256 a[MB][kRows];
  for (int i = 0; i < MB; ++i) {
    for (int r = 0; r < kRows; ++r) {
      a[i][r] = begin ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + (i * kRows + r) * kMaxLanes);
    }
  }
  int64_t kk = k0;
  for (; kk + 32 <= k1; kk += 32) {
    for (int r = 0; r < kRows; ++r) {
      const char* p = wr[r] + kk * kElemBytes<DT> + kPrefetchBytes;
      _mm_prefetch(p, _MM_HINT_T0);
      if constexpr (kElemBytes<DT> == 4) _mm_prefetch(p + 64, _MM_HINT_T0);
    }
    for (int h = 0; h < 32; h += 8) {
      __m256 wv[kRows];
      for (int r = 0; r < kRows; ++r) wv[r] = load_w<DT>(wr[r], kk + h);
      for (int i = 0; i < MB; ++i) {
        const __m256 xv = in_register(_mm256_loadu_ps(x + i * ldx + kk + h));
        for (int r = 0; r < kRows; ++r) a[i][r] = _mm256_fmadd_ps(xv, wv[r], a[i][r]);
      }
    }
  }
  for (; kk < k1; kk += 8) {
    const int64_t left = k1 - kk;
    __m256 wv[kRows];
    for (int r = 0; r < kRows; ++r) {
      wv[r] = left >= 8 ? load_w<DT>(wr[r], kk) : load_w_partial<DT>(wr[r], kk, left);
    }
    for (int i = 0; i < MB; ++i) {
      const __m256 xv =
          in_register(left >= 8 ? _mm256_loadu_ps(x + i * ldx + kk)
                                : _mm256_maskload_ps(x + i * ldx + kk, lane_mask(left)));
      for (int r = 0; r < kRows; ++r) a[i][r] = _mm256_fmadd_ps(xv, wv[r], a[i][r]);
    }
  }
  for (int i = 0; i < MB; ++i) {
    for (int r = 0; r < kRows; ++r) {
      if (end) {
        out[i * kRows + r] = hsum(a[i][r]);
      } else {
        _mm256_storeu_ps(acc + (i * kRows + r) * kMaxLanes, a[i][r]);
      }
    }
  }
}

// e^v, as exp512 in gemm_internal.h but building 2^n in the exponent bits: the clamp to
// [-87.3, 88.3] keeps n in [-126, 127] so 2^n is a normal float. e^-87.3 instead of a smaller
// value changes silu(v) for v < -87 by less than 1e-36 in absolute terms.
inline __m256 exp256(__m256 v) {
  v = _mm256_max_ps(_mm256_set1_ps(-87.3f), _mm256_min_ps(_mm256_set1_ps(88.3f), v));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(v, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), v);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

void epilogue(GemmEpilogue ep, const float* g, const float* bg, const float* u, const float* bu,
              float* y, int64_t n) {
  for (int64_t j = 0; j < n; j += 8) {
    const int64_t left = n - j;
    const __m256i mask = left >= 8 ? _mm256_set1_epi32(-1) : lane_mask(left);
    __m256 v = _mm256_maskload_ps(g + j, mask);
    if (bg) v = _mm256_add_ps(v, _mm256_maskload_ps(bg + j, mask));
    if (ep == GemmEpilogue::kSiluMul) {
      __m256 up = _mm256_maskload_ps(u + j, mask);
      if (bu) up = _mm256_add_ps(up, _mm256_maskload_ps(bu + j, mask));
      const __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), v));
      v = _mm256_mul_ps(_mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), up);
    }
    Avx2::store_n(y + j, v, static_cast<int>(std::min<int64_t>(left, 8)));
  }
}

void to_f32(int dt, const void* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = dt == kDtF32   ? load_w<kDtF32>(src, i)
               : dt == kDtF16 ? load_w<kDtF16>(src, i)
                              : load_w<kDtBF16>(src, i);
    _mm256_storeu_ps(dst + i, v);
  }
  if (i < n) {
    const int64_t left = n - i;
    __m256 v = dt == kDtF32   ? load_w_partial<kDtF32>(src, i, left)
               : dt == kDtF16 ? load_w_partial<kDtF16>(src, i, left)
                              : load_w_partial<kDtBF16>(src, i, left);
    _mm256_maskstore_ps(dst + i, lane_mask(left), v);
  }
}

// ---- Panel (outer-product) kernels: MR = 6 rows of x by NR = 16 columns (2 vectors). ----
constexpr int kPanelMr = 6;
constexpr int kPanelNr = 16;

// In-register transpose of an 8x8 f32 matrix.
inline void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h) {  // rows 4h..4h+3
    u[4 * h + 0] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
    u[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xee);
    u[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
    u[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xee);
  }
  // u[4h + c], 128-bit lane l, holds column 4l + c of rows 4h..4h+3.
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
    r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
  }
}

template <int DT>
void pack_panel_dt(const void* const* rows, int64_t k0, int64_t kc, float* panel) {
  for (int g = 0; g < kPanelNr / 8; ++g) {
    for (int64_t kk = 0; kk < kc; kk += 8) {
      const int64_t n = std::min<int64_t>(8, kc - kk);
      __m256 t[8];
      for (int j = 0; j < 8; ++j) {
        const void* row = rows[g * 8 + j];
        t[j] = !row     ? _mm256_setzero_ps()
               : n == 8 ? load_w<DT>(row, k0 + kk)
                        : load_w_partial<DT>(row, k0 + kk, n);
      }
      transpose8(t);  // t[q] = element kk + q of the 8 rows
      for (int q = 0; q < n; ++q) _mm256_storeu_ps(panel + (kk + q) * kPanelNr + g * 8, t[q]);
    }
  }
}

void pack_panel(int dt, const void* const* rows, int64_t k0, int64_t kc, float* panel) {
  if (dt == kDtF32) pack_panel_dt<kDtF32>(rows, k0, kc, panel);
  if (dt == kDtF16) pack_panel_dt<kDtF16>(rows, k0, kc, panel);
  if (dt == kDtBF16) pack_panel_dt<kDtBF16>(rows, k0, kc, panel);
}

// 12 accumulators + 2 panel vectors + 1 broadcast x = 15 of the 16 registers. Written with one
// array per accumulator column, hoisted row pointers and explicit unrolling: as a 2-D array
// with a conditional start GCC 12 kept every accumulator on the stack, storing it after each
// FMA, which ran this tile at under half of the conv tile's (same shape) speed on Zen 3. The
// FMA order is the same either way, so results are bit for bit the same.
template <int MB>
void panel_tile(const float* x, int64_t ldx, const float* panel, int64_t kc, float* c, int64_t ldc,
                bool accumulate) {
  __m256 acc0[MB], acc1[MB];
  const float* xr[MB];
#pragma GCC unroll 6
  for (int i = 0; i < MB; ++i) {
    xr[i] = x + i * ldx;
    acc0[i] = accumulate ? _mm256_loadu_ps(c + i * ldc) : _mm256_setzero_ps();
    acc1[i] = accumulate ? _mm256_loadu_ps(c + i * ldc + 8) : _mm256_setzero_ps();
  }
#pragma GCC unroll 2
  for (int64_t kk = 0; kk < kc; ++kk) {
    const __m256 b0 = _mm256_loadu_ps(panel + kk * kPanelNr);
    const __m256 b1 = _mm256_loadu_ps(panel + kk * kPanelNr + 8);
#pragma GCC unroll 6
    for (int i = 0; i < MB; ++i) {
      const __m256 a = _mm256_broadcast_ss(xr[i] + kk);
      acc0[i] = _mm256_fmadd_ps(a, b0, acc0[i]);
      acc1[i] = _mm256_fmadd_ps(a, b1, acc1[i]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < MB; ++i) {
    _mm256_storeu_ps(c + i * ldc, acc0[i]);
    _mm256_storeu_ps(c + i * ldc + 8, acc1[i]);
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
  t.wide.dot[DT][3] = dot_kernel<DT, 2, 3>;
  t.wide.dot[DT][4] = dot_kernel<DT, 2, 4>;
  t.wide.dot[DT][5] = dot_kernel<DT, 2, 5>;
  t.wide.dot[DT][6] = dot_kernel<DT, 2, 6>;
}

FmaKernels make_table() {
  FmaKernels t;
  t.narrow = {4, 1, 2, {}};
  t.wide = {2, 3, 6, {}};
  t.group_on_wide = true;
  t.panel = {kPanelMr, kPanelNr, 256, pack_panel, panel_kernel};  // 16 KiB panel: L1
  fill_dtype<kDtF32>(t);
  fill_dtype<kDtF16>(t);
  fill_dtype<kDtBF16>(t);
  t.epilogue = epilogue;
  t.to_f32 = to_f32;
  return t;
}

}  // namespace

const FmaKernels& fma_kernels_avx2() {
  static const FmaKernels table = make_table();
  return table;
}

}  // namespace sampan::cpu::gemm_detail
