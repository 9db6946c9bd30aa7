#include "kernels/cpu/linear_grad_cpu.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "kernels/cpu/conv_cpu.h"
#include "kernels/cpu/convert_cpu.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/cpu/gemm_internal.h"
#include "kernels/cpu/gemm_quant.h"
#include "kernels/cpu/ggml_dequant.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/round_bf16_cpu.h"
#include "kernels/cpu/sgemm_packed_cpu.h"
#include "kernels/cpu/skinny_gemm_cpu.h"
#include "kernels/cpu/transpose_f32_avx2.h"
#include "kernels/cpu/vec_util.h"

namespace sampan::cpu {
namespace {

// Output rows of W per panel: the transposed panel [k, kPanelRows] stays a few hundred KB for
// hidden sizes up to 8k while each GEMM still reduces over 256.
constexpr int64_t kPanelRows = 256;

// Row r of block `b` of w as f32, exactly as the forward GEMM reads it. out: [w.k].
void dequant_row(const GemmWeights& w, int b, int64_t r, float* out) {
  const int64_t k = w.k;
  const auto* base = static_cast<const uint8_t*>(w.data[b]);
  switch (w.dtype) {
    case DType::kF32:
      std::memcpy(out, base + r * k * 4, static_cast<size_t>(k) * 4);
      return;
    case DType::kF16:
    case DType::kBF16:
      convert_to_f32(w.dtype, base + r * k * 2, out, k);
      return;
    case DType::kU8:
      dequantize_ggml_row(w.ggml_type, base + r * ggml_row_bytes(w.ggml_type, k), out, k);
      return;
    case DType::kF8E4M3: {
      gemm_detail::QuantRow row;
      row.data = base + r * k;
      row.scales = static_cast<const float*>(w.scales[b]) + r;
      gemm_detail::QuantFormat f;
      f.dtype = DType::kF8E4M3;
      f.k = k;
      gemm_detail::quant_kernels_avx2().dequant_f32(row, f, out);
      return;
    }
    case DType::kI4: {
      const int64_t groups = k / w.group_size;
      gemm_detail::QuantRow row;
      row.data = base + r * (k / 2);
      row.scales = static_cast<const uint16_t*>(w.scales[b]) + r * groups;
      row.zeros = w.zeros[b] ? w.zeros[b] + r * groups : nullptr;
      gemm_detail::QuantFormat f;
      f.dtype = DType::kI4;
      f.k = k;
      f.group = w.group_size;
      f.bf16_scales = w.scale_dtype == DType::kBF16;
      f.asymmetric = w.zeros[b] != nullptr;
      gemm_detail::quant_kernels_avx2().dequant_f32(row, f, out);
      return;
    }
    default:
      // The op checked the format; an unknown one leaves NaN so a bug cannot pass silently.
      std::fill(out, out + k, std::numeric_limits<float>::quiet_NaN());
      return;
  }
}

// dst[c, r] = src[r, c] for src [rows, cols] (row stride lds), dst [cols, rows] (row stride ldd).
void transpose(int64_t rows, int64_t cols, const float* src, int64_t lds, float* dst, int64_t ldd,
               TaskRunner& runner) {
  constexpr int64_t kTile = 32;
  const int64_t col_tiles = (cols + kTile - 1) / kTile;
  util::parallel_for(runner, col_tiles, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t ct = t0; ct < t1; ++ct) {
      const int64_t c0 = ct * kTile, c1 = std::min(cols, c0 + kTile);
      for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
        const int64_t r1 = std::min(rows, r0 + kTile);
        transpose_f32(r1 - r0, c1 - c0, src + r0 * lds + c0, lds, dst + c0 * ldd + r0, ldd);
      }
    }
  });
}

// y[rows, cols] += t[rows, cols] (contiguous t).
void add_into(int64_t rows, int64_t cols, const float* t, float* y, int64_t ldy,
              TaskRunner& runner) {
  util::parallel_for(runner, rows, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* s = t + r * cols;
      float* d = y + r * ldy;
      for (int64_t c = 0; c < cols; ++c) d[c] += s[c];
    }
  });
}

// dx[m, nc] (row stride lddx) = (first) or += the product that `product(out, ldo)` writes: the
// first straight into dx, later ones into `partial` ([m, nc]) and then added.
template <class Product>
void store_or_add(bool first, int64_t m, int64_t nc, float* dx, int64_t lddx,
                  std::vector<float>& partial, TaskRunner& runner, Product product) {
  if (first) {
    product(dx, lddx);
    return;
  }
  partial.resize(static_cast<size_t>(m * nc));
  product(partial.data(), nc);
  add_into(m, nc, partial.data(), dx, lddx, runner);
}

GemmWeights f32_weights(const float* data, int64_t rows, int64_t k) {
  GemmWeights g;
  g.dtype = DType::kF32;
  g.k = k;
  g.n_blocks = 1;
  g.data[0] = data;
  g.rows[0] = rows;
  return g;
}

// Float weights (f32/f16/bf16): columns [c0, c0 + nc) of block b's rows as a panel [nc, n]
// (panel[j, o] = W[o, c0 + j]), read straight from W in tiles of 16 rows.
constexpr int64_t kPanelCols = 256;
void float_column_panel(const GemmWeights& w, int b, int64_t c0, int64_t nc, float* panel,
                        TaskRunner& runner) {
  constexpr int64_t kTile = 16;
  const int64_t n = w.rows[b], k = w.k;
  const auto* base = static_cast<const uint8_t*>(w.data[b]);
  const int64_t esz = w.dtype == DType::kF32 ? 4 : 2;
  util::parallel_for(runner, (n + kTile - 1) / kTile, 1, [&](int64_t t0, int64_t t1) {
    float tmp[kTile * kPanelCols];
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t o0 = t * kTile, o1 = std::min(n, o0 + kTile);
      for (int64_t o = o0; o < o1; ++o) {
        const uint8_t* src = base + (o * k + c0) * esz;
        float* dst = tmp + (o - o0) * nc;
        if (w.dtype == DType::kF32) {
          std::memcpy(dst, src, static_cast<size_t>(nc) * 4);
        } else {
          convert_to_f32(w.dtype, src, dst, nc);
        }
      }
      for (int64_t j = 0; j < nc; ++j) {
        for (int64_t o = o0; o < o1; ++o) panel[j * n + o] = tmp[(o - o0) * nc + j];
      }
    }
  });
}

// bf16 weights: the same panel kept in bf16 (a transpose, no conversion), for a GEMM with bf16
// weights: half the panel's bytes, and on AMX CPUs the tiles (at the caller's GEMM precision;
// under GemmPrecision::kF32 the FMA panels convert it exactly, as for the f32 panel).
void bf16_column_panel(const GemmWeights& w, int b, int64_t c0, int64_t nc, uint16_t* panel,
                       TaskRunner& runner) {
  constexpr int64_t kTile = 16;
  const int64_t n = w.rows[b], k = w.k;
  const auto* base = static_cast<const uint16_t*>(w.data[b]);
  util::parallel_for(runner, (n + kTile - 1) / kTile, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t o0 = t * kTile, o1 = std::min(n, o0 + kTile);
      for (int64_t j = 0; j < nc; ++j) {
        for (int64_t o = o0; o < o1; ++o) panel[j * n + o] = base[o * k + c0 + j];
      }
    }
  });
}

// Whether every dy[i, 0:n] (rows lddy apart) is exactly a bf16 number (its low 16 bits zero),
// and, with a16 given, those bf16 numbers into a16 [m, n] (dense; contents unspecified when not
// exact): one pass that both checks and converts, where a check pass, a copy of strided rows and
// matmul_bf16's own conversion read dy three times (~2.5 % of a bf16 LoRA training step on the
// 1.1B shape).
bool to_bf16_if_exact(int64_t m, int64_t n, const float* dy, int64_t lddy, uint16_t* a16,
                      TaskRunner& runner) {
  std::atomic<bool> exact{true};
  util::parallel_for(runner, m, 8, [&](int64_t i0, int64_t i1) {
    uint32_t low = 0;
    for (int64_t i = i0; i < i1 && low == 0; ++i) {
      const float* r = dy + i * lddy;
      uint16_t* d = a16 ? a16 + i * n : nullptr;
      // Either loop vectorizes: no branch inside.
      if (d) {
        for (int64_t j = 0; j < n; ++j) {
          uint32_t b;
          std::memcpy(&b, r + j, sizeof(b));
          low |= b & 0xffffu;
          d[j] = static_cast<uint16_t>(b >> 16);
        }
      } else {
        for (int64_t j = 0; j < n; ++j) {
          uint32_t b;
          std::memcpy(&b, r + j, sizeof(b));
          low |= b & 0xffffu;
        }
      }
    }
    if (low != 0) exact.store(false, std::memory_order_relaxed);
  });
  return exact.load();
}

// Whether gemm_amx_wt takes these weights: bf16 on an AMX CPU outside kF32, and its k-steps of
// 32 rows of W do not straddle two blocks.
bool amx_wt_applies(const GemmWeights& w) {
  if (w.dtype != DType::kBF16 || gemm_precision() == GemmPrecision::kF32 || !has_amx()) {
    return false;
  }
  for (int b = 0; b + 1 < w.n_blocks; ++b) {
    if (w.rows[b] % 32 != 0) return false;
  }
  return true;
}

// bf16 weights: dx = dy · W with W read as it lies, where the GEMM below needs Wᵀ (a transposed
// panel of every weight, every step). Returns false (nothing written) where it does not apply.
//  - AMX (amx_wt_applies): gemm_amx_wt's tiles, W the B operand (gemm_wt_amx.cc). A dy that is
//    exactly bf16 (training at bf16 precision rounds it), or round_dy, runs at kBf16: one tile
//    product per weight tile, the packing rounding dy as round_bf16 would; any other dy at the
//    caller's precision (hi + lo bf16 by default), as the panel path's GEMM would.
//  - Otherwise, for a dy that is exactly bf16, on AVX512-BF16 CPUs where the vdpbf16ps tile
//    beats the f32 panels (bf16_panels_preferred) or AMX ones whose blocks gemm_amx_wt does not
//    take: the conv GEMM's matmul_bf16, which interleaves W's row pairs into its panels.
// With dy exact the products are the exact ones of the other paths (f32 sums in another order).
bool grad_input_bf16_rows(int64_t m, const float* dy, int64_t lddy, const GemmWeights& w,
                          float* dx, int64_t lddx, TaskRunner& runner, bool round_dy,
                          bool round_dx) {
  const int64_t k = w.k;
  if (w.dtype != DType::kBF16 || gemm_precision() == GemmPrecision::kF32) return false;
  if (amx_wt_applies(w)) {
    const bool exact = round_dy || to_bf16_if_exact(m, w.n(), dy, lddy, nullptr, runner);
    ScopedGemmPrecision precision(exact ? GemmPrecision::kBf16 : gemm_precision());
    gemm_detail::gemm_amx_wt(m, dy, lddy, w, dx, lddx, runner, round_dx);
    return true;
  }
  // matmul_bf16 writes dense rows: a strided dx takes the panel path.
  if (lddx != k || !conv_bf16_native() || (!has_amx() && !bf16_panels_preferred())) {
    return false;
  }
  const int64_t n_all = w.n();
  thread_local std::vector<uint16_t> a16;
  a16.resize(static_cast<size_t>(m * n_all));
  if (!to_bf16_if_exact(m, n_all, dy, lddy, a16.data(), runner)) return false;
  std::vector<float> partial;
  int64_t col0 = 0;
  for (int b = 0; b < w.n_blocks; ++b) {
    const int64_t n = w.rows[b];
    const auto* wb = static_cast<const uint16_t*>(w.data[b]);
    const uint16_t* ab = a16.data() + col0;
    store_or_add(b == 0, m, k, dx, lddx, partial, runner, [&](float* out, int64_t) {
      matmul_bf16_a16(m, n, k, ab, n_all, wb, out, runner);
    });
    col0 += n;
  }
  return true;
}

// dst[0, nr) = src[0, n) as f32 (f32, f16 or bf16 elements), zeros past n. Inline (AVX2 + F16C,
// this file's level): a strip piece is 16..64 elements, too short for a converter call each.
inline void widen_piece(DType dt, const uint8_t* src, int64_t n, int64_t nr, float* dst) {
  int64_t i = 0;
  if (dt == DType::kF32) {
    for (; i + 8 <= n; i += 8) {
      _mm256_storeu_ps(dst + i, _mm256_loadu_ps(reinterpret_cast<const float*>(src) + i));
    }
  } else if (dt == DType::kBF16) {
    for (; i + 8 <= n; i += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
      _mm256_storeu_ps(dst + i,
                       _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
    }
  } else {
    for (; i + 8 <= n; i += 8) {
      _mm256_storeu_ps(
          dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i))));
    }
  }
  if (i < n) convert_to_f32(dt, src + i * (dt == DType::kF32 ? 4 : 2), dst + i, n - i);
  for (int64_t j = n; j < nr; ++j) dst[j] = 0.0f;
}

// Whether the transposed-panel GEMM below would multiply these weights on the f32 FMA panels:
// f32 weights always; 16-bit ones unless cpu::gemm multiplies them in bf16 (AMX tiles or the
// vdpbf16ps panels).
bool on_f32_panels(const GemmWeights& w) {
  return w.dtype == DType::kF32 || !gemm_detail::prefill_in_bf16();
}

// dx = dy · W on the f32 FMA panels with W read as it lies. The panels want B as rows of NR
// columns, one per step of the reduction (sgemm_packed_cpu.h); for dx the reduction runs over
// W's output rows and B is W itself, so a chunk of W's columns becomes its panel by copying (and
// widening) each output row's piece, every block's rows one after another (dy holds the blocks'
// columns in the same order), and one sgemm_packed per chunk writes its columns of dx. The
// transposed-panel path below instead transposed every weight into a column panel and the GEMM
// packed it again, every step: with 2 threads on the AVX-512 (no AMX) level, the transpose alone
// was 9 % of a LoRA step's samples. Same products and one FMA chain per output in W's row order,
// as that GEMM.
void grad_input_rows_f32(int64_t m, const float* dy, int64_t lddy, const GemmWeights& w,
                         float* dx, int64_t lddx, TaskRunner& runner) {
  const int64_t k = w.k, n_all = w.n();
  // One strip of nr columns per task: its panel (n_all x nr f32, 0.5-3 MB at TinyLlama's sizes)
  // is multiplied while still in L2. Four strips per panel read dy a quarter as often but
  // measured slower (dx at 1.19-1.24x the forward's time against 1.07-1.10x).
  const int64_t nr = sgemm_packed_nr();
  const int64_t esz = w.dtype == DType::kF32 ? 4 : 2;
  util::parallel_for(runner, util::ceil_div(k, nr), 1, [&](int64_t t0, int64_t t1) {
    thread_local std::vector<float> panel;  // [n_all, nr]
    panel.resize(static_cast<size_t>(n_all * nr));
    SerialRunner serial;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t c0 = t * nr, nc = std::min(nr, k - c0);
      int64_t o = 0;
      for (int b = 0; b < w.n_blocks; ++b) {
        const auto* base = static_cast<const uint8_t*>(w.data[b]);
        for (int64_t r = 0; r < w.rows[b]; ++r, ++o) {
          // The pieces lie a row (4-11 KB) apart, a stride the hardware prefetchers did not
          // follow: building the panel was 25 % of this op's samples (perf, bf16 W 5632 x 2048,
          // m = 256, Zen 3). Prefetched 16 rows ahead: the op 1.07-1.16x (8 rows: 1.0-1.1x,
          // 32 and 64 no better), `finetune --profile` on the 1.1B shape 11.4-11.8 -> 10.2-10.4 s
          // per 3 steps. (Panels of 4 strips, touching each row a quarter as often, measured
          // 0.85-0.95x: the panel no longer stays in L2 for the GEMM, with either loop order.)
          if (r + 16 < w.rows[b]) {
            _mm_prefetch(reinterpret_cast<const char*>(base + ((r + 16) * k + c0) * esz),
                         _MM_HINT_T0);
          }
          widen_piece(w.dtype, base + (r * k + c0) * esz, nc, nr, panel.data() + o * nr);
        }
      }
      sgemm_packed(m, nc, n_all, dy, lddy, panel.data(), static_cast<int>(nr), 1.0f, nullptr,
                   Activation::kNone, dx + c0, lddx, serial);
    }
  });
}

}  // namespace

void linear_grad_input(int64_t m, const float* dy, int64_t lddy, const GemmWeights& w, float* dx,
                       int64_t lddx, TaskRunner& runner, bool round_dy, bool round_dx) {
  const int64_t k = w.k;
  if (m <= 0 || k <= 0) return;
  if (round_dx && !amx_wt_applies(w)) {  // only gemm_amx_wt rounds as it stores
    linear_grad_input(m, dy, lddy, w, dx, lddx, runner, round_dy, false);
    round_bf16(m, k, dx, lddx, dx, lddx, runner);
    return;
  }
  const bool float_w = w.dtype == DType::kF32 || w.dtype == DType::kF16 || w.dtype == DType::kBF16;
  std::unique_ptr<float[]> rounded;  // uninitialized: round_bf16 writes every element
  if (round_dy && !amx_wt_applies(w)) {  // every other path takes dy as given: round a copy
    const int64_t n = w.n();
    rounded = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(m * n));
    round_bf16(m, n, dy, lddy, rounded.get(), n, runner);
    dy = rounded.get();
    lddy = n;
    round_dy = false;
  }
  if (grad_input_bf16_rows(m, dy, lddy, w, dx, lddx, runner, round_dy, round_dx)) return;
  if (w.dtype == DType::kF32 && k <= kSkinnyMax) {
    // A few columns (LoRA's B [out, r]): dx[:, j] = dy · W[:, j] as r dot products per row of
    // dy against Wᵀ (r rows, small), instead of r-wide column panels.
    const int64_t n_all = w.n();
    std::vector<float> wt(static_cast<size_t>(k * n_all));
    int64_t o0 = 0;
    for (int b = 0; b < w.n_blocks; ++b) {
      transpose_f32(w.rows[b], k, static_cast<const float*>(w.data[b]), k, wt.data() + o0, n_all);
      o0 += w.rows[b];
    }
    skinny_n_gemm(m, k, n_all, dy, lddy, wt.data(), n_all, nullptr, dx, lddx, runner);
    return;
  }
  if (float_w && on_f32_panels(w)) {
    grad_input_rows_f32(m, dy, lddy, w, dx, lddx, runner);
    return;
  }
  if (float_w) {
    // dx[:, c0 : c0 + nc] = dy · W[:, c0 : c0 + nc]: one GEMM per column panel that reduces over
    // every output row and writes its columns of dx directly, where the row-panel path below
    // reduces over 256 rows at a time and adds partial sums. Measured on the TinyLlama shape
    // (bf16, 256 tokens, 2 threads, `finetune --profile`, a loaded machine): this op went from
    // 1.47x to 1.33x the time of the forward `linear` nodes of the same run. Fused blocks
    // (Q/K/V, gate/up) run block by block, each later block's product added into dx: on AMX
    // with bf16 weights they took 2.6x the forward's time through the f32 row panels.
    const bool bf16 = w.dtype == DType::kBF16;
    int64_t max_rows = 0;
    for (int b = 0; b < w.n_blocks; ++b) max_rows = std::max(max_rows, w.rows[b]);
    std::vector<uint16_t> panel16(bf16 ? static_cast<size_t>(kPanelCols * max_rows) : 0);
    std::vector<float> panel32(bf16 ? 0 : static_cast<size_t>(kPanelCols * max_rows));
    std::vector<float> partial;
    int64_t col0 = 0;  // column of dy where block b starts
    for (int b = 0; b < w.n_blocks; ++b) {
      const int64_t n = w.rows[b];
      for (int64_t c0 = 0; c0 < k; c0 += kPanelCols) {
        const int64_t nc = std::min(kPanelCols, k - c0);
        GemmWeights pw;
        if (bf16) {
          bf16_column_panel(w, b, c0, nc, panel16.data(), runner);
          pw = f32_weights(nullptr, nc, n);
          pw.dtype = DType::kBF16;
          pw.data[0] = panel16.data();
        } else {
          float_column_panel(w, b, c0, nc, panel32.data(), runner);
          pw = f32_weights(panel32.data(), nc, n);
        }
        store_or_add(b == 0, m, nc, dx + c0, lddx, partial, runner, [&](float* out, int64_t ldo) {
          gemm(m, dy + col0, lddy, pw, GemmEpilogue::kStore, out, ldo, runner);
        });
      }
      col0 += n;
    }
    return;
  }
  // Quantized weights (a row dequantizes as a whole): panels of kPanelRows
  // output rows, dequantized, transposed, their products summed into dx.
  std::vector<float> rows(static_cast<size_t>(kPanelRows * k));
  std::vector<float> panel(static_cast<size_t>(kPanelRows * k));
  std::vector<float> partial;
  bool first = true;
  int64_t col0 = 0;  // column of dy where block b starts
  for (int b = 0; b < w.n_blocks; ++b) {
    for (int64_t r0 = 0; r0 < w.rows[b]; r0 += kPanelRows) {
      const int64_t nb = std::min(kPanelRows, w.rows[b] - r0);
      util::parallel_for(runner, nb, 4, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) dequant_row(w, b, r0 + i, rows.data() + i * k);
      });
      transpose(nb, k, rows.data(), k, panel.data(), nb, runner);
      // dx (+)= dy[:, col0 + r0 : + nb] · W[r0 : r0 + nb, :], as a GEMM against the panel Wᵀ.
      const GemmWeights pw = f32_weights(panel.data(), k, nb);
      store_or_add(first, m, k, dx, lddx, partial, runner, [&](float* out, int64_t ldo) {
        gemm(m, dy + col0 + r0, lddy, pw, GemmEpilogue::kStore, out, ldo, runner);
      });
      first = false;
    }
    col0 += w.rows[b];
  }
}

void linear_grad_weight(int64_t m, int64_t n, int64_t k, const float* dy, int64_t lddy,
                        const float* x, int64_t ldx, float* dw, bool accumulate,
                        TaskRunner& runner) {
  if (n <= 0 || k <= 0) return;
  if (m <= 0) {
    if (!accumulate) std::fill(dw, dw + n * k, 0.0f);
    return;
  }
  if (n <= kSkinnyMax) {  // LoRA's dA [r, in]: summed outer products, no transposes
    skinny_outer_sum(m, n, k, dy, lddy, x, ldx, dw, k, accumulate, runner);
    return;
  }
  if (k <= kSkinnyMax) {  // LoRA's dB [out, r]: t = dBᵀ [r, out] the same way, then transposed
    std::vector<float> t(static_cast<size_t>(k * n));
    skinny_outer_sum(m, k, n, x, ldx, dy, lddy, t.data(), n, false, runner);
    for (int64_t o = 0; o < n; ++o) {
      for (int64_t j = 0; j < k; ++j) {
        dw[o * k + j] = accumulate ? dw[o * k + j] + t[j * n + o] : t[j * n + o];
      }
    }
    return;
  }
  std::vector<float> dyt(static_cast<size_t>(n * m)), xt(static_cast<size_t>(k * m));
  transpose(m, n, dy, lddy, dyt.data(), m, runner);
  transpose(m, k, x, ldx, xt.data(), m, runner);
  // dw[n, k] = dyᵀ[n, m] · (xᵀ[k, m])ᵀ: the GEMM reduces over m with xᵀ as its weights.
  const GemmWeights xw = f32_weights(xt.data(), k, m);
  if (!accumulate) {
    gemm(n, dyt.data(), m, xw, GemmEpilogue::kStore, dw, k, runner);
    return;
  }
  std::vector<float> t(static_cast<size_t>(n * k));
  gemm(n, dyt.data(), m, xw, GemmEpilogue::kStore, t.data(), k, runner);
  add_into(n, k, t.data(), dw, k, runner);
}

template <class T>
void linear_grad_input_ref(int64_t m, int64_t n, int64_t k, const T* dy, const T* w, T* dx) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t c = 0; c < k; ++c) {
      T s = 0;
      for (int64_t o = 0; o < n; ++o) s += dy[i * n + o] * w[o * k + c];
      dx[i * k + c] = s;
    }
  }
}

template <class T>
void linear_grad_weight_ref(int64_t m, int64_t n, int64_t k, const T* dy, const T* x, T* dw) {
  for (int64_t o = 0; o < n; ++o) {
    for (int64_t c = 0; c < k; ++c) {
      T s = 0;
      for (int64_t i = 0; i < m; ++i) s += dy[i * n + o] * x[i * k + c];
      dw[o * k + c] = s;
    }
  }
}

template <class T>
void linear_forward_ref(int64_t m, int64_t n, int64_t k, const T* x, const T* w, T* y) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t o = 0; o < n; ++o) {
      T s = 0;
      for (int64_t c = 0; c < k; ++c) s += x[i * k + c] * w[o * k + c];
      y[i * n + o] = s;
    }
  }
}

#define SAMPAN_INSTANTIATE(T)                                                                 \
  template void linear_grad_input_ref<T>(int64_t, int64_t, int64_t, const T*, const T*, T*);  \
  template void linear_grad_weight_ref<T>(int64_t, int64_t, int64_t, const T*, const T*, T*); \
  template void linear_forward_ref<T>(int64_t, int64_t, int64_t, const T*, const T*, T*);
SAMPAN_INSTANTIATE(float)
SAMPAN_INSTANTIATE(double)
#undef SAMPAN_INSTANTIATE

}  // namespace sampan::cpu
