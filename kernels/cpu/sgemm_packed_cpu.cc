// The packed-B f32 GEMM driver (sgemm_packed_cpu.h) over the FMA panel kernels of
// gemm_avx512.cc / gemm_avx2.cc (gemm_internal.h).
//
// Blocking. A task is (a chunk of up to kRowChunk rows of a, one strip of NR columns). Within
// it, per k-chunk, the [kc, NR] panel (32 KiB) stays in L1 while every MR-row tile of the chunk
// runs over it; the chunk's rows of a ([kRowChunk, kc],
// read in place with broadcasts) stay in L2. Partial sums live in y (or, for the last, partial
// strip, in a per-thread [rows, NR] scratch) between k-chunks; after the last one the tile gets
// its epilogue while still in L1.
#include "kernels/cpu/sgemm_packed_cpu.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/gemm_internal.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/vec_util.h"

namespace sampan::cpu {
namespace {

using gemm_detail::PanelKernels;
using util::ceil_div;

// Rows of a per task: a multiple of both kernels' MR (6), small enough that [rows, kc] of a
// stays in L2 (240 x 512 floats: 480 KiB at width 16) and that batch-1 BERT (128 rows) makes
// one task per strip. The k-chunk holds the panel at 32 KiB (kc 512 at width 16, 128 at 64).
// Measured on Zen 3 (AVX2, 1 thread, BERT-base shapes m = 128 and 1024): kc 512 ran 72-89
// GFLOP/s against 57-72 at the panel tables' kc of 256; row chunks of 144-288 within noise.
constexpr int64_t kRowChunk = 240;
constexpr int64_t kPanelBytes = 32 * 1024;

const PanelKernels& panel_kernels_for(int nr) {
  if (nr == 64 && has_avx512()) return gemm_detail::fma_kernels_avx512().panel;
  return gemm_detail::fma_kernels_avx2().panel;
}

struct Scratch {
  std::vector<float> panel;  // a regrouped panel when the packed width is not the kernel's
  std::vector<float> c;      // the partial strip's sums [rows, NR]
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// dst [kc, knr] = columns [c0, c0 + knr) of rows [k0, k0 + kc) of a B packed at width nr
// (zeros past column n).
void regroup_panel(const float* packed, int64_t k, int64_t n, int nr, int64_t k0, int64_t kc,
                   int64_t c0, int knr, float* dst) {
  for (int64_t kk = 0; kk < kc; ++kk) {
    float* d = dst + kk * knr;
    for (int j = 0; j < knr; ++j) {
      const int64_t col = c0 + j;
      d[j] = col < n ? packed[((col / nr) * k + k0 + kk) * nr + col % nr] : 0.0f;
    }
  }
}

}  // namespace

int sgemm_packed_nr() { return has_avx512() ? 64 : 16; }

int64_t sgemm_packed_size(int64_t k, int64_t n, int nr) { return ceil_div(n, nr) * k * nr; }

void sgemm_pack_b(const float* b, int64_t k, int64_t n, int64_t ldb, bool trans, int nr,
                  float* packed, TaskRunner& runner) {
  const int64_t strips = ceil_div(n, nr);
  util::parallel_for(runner, strips, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      const int64_t c0 = s * nr;
      const int64_t nc = std::min<int64_t>(nr, n - c0);
      float* dst = packed + s * k * nr;
      for (int64_t kk = 0; kk < k; ++kk) {
        float* d = dst + kk * nr;
        if (trans) {
          for (int64_t j = 0; j < nc; ++j) d[j] = b[(c0 + j) * ldb + kk];
        } else {
          std::memcpy(d, b + kk * ldb + c0, static_cast<size_t>(nc) * sizeof(float));
        }
        std::fill(d + nc, d + nr, 0.0f);
      }
    }
  });
}

void sgemm_packed(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                  const float* packed, int nr, float alpha, const float* bias, Activation act,
                  float* y, int64_t ldy, TaskRunner& runner) {
  if (m <= 0 || n <= 0 || k <= 0) return;
  const PanelKernels& pk = panel_kernels_for(nr);
  const int knr = pk.nr;  // the kernel's panel width: nr itself unless regrouped
  const bool regroup = knr != nr;
  const int64_t strips = ceil_div(n, knr);
  const int64_t kcx = kPanelBytes / (knr * static_cast<int64_t>(sizeof(float)));
  const int64_t chunks = ceil_div(m, kRowChunk);
  const bool epilogue = alpha != 1.0f || bias != nullptr || act != Activation::kNone;
  runner.run(chunks * strips, [&](int64_t task) {
    const int64_t s = task % strips;
    const int64_t i0 = (task / strips) * kRowChunk;
    const int64_t i1 = std::min(m, i0 + kRowChunk);
    const int64_t c0 = s * knr;
    const int64_t nc = std::min<int64_t>(knr, n - c0);
    Scratch& sc = scratch();
    // Full strips accumulate in y itself; the partial last strip in scratch (the kernel always
    // writes knr columns).
    float* c = y + i0 * ldy + c0;
    int64_t ldc = ldy;
    if (nc < knr) {
      sc.c.resize(static_cast<size_t>((i1 - i0) * knr));
      c = sc.c.data();
      ldc = knr;
    }
    SerialRunner serial;
    for (int64_t k0 = 0; k0 < k; k0 += kcx) {
      const int64_t kc = std::min<int64_t>(kcx, k - k0);
      const float* panel = packed + (s * k + k0) * nr;
      if (regroup) {
        sc.panel.resize(static_cast<size_t>(kc * knr));
        regroup_panel(packed, k, n, nr, k0, kc, c0, knr, sc.panel.data());
        panel = sc.panel.data();
      }
      const bool last = k0 + kc >= k;
      for (int64_t i = i0; i < i1; i += pk.mr) {
        const int64_t mr = std::min<int64_t>(pk.mr, i1 - i);
        float* ct = c + (i - i0) * ldc;
        pk.kernel(a + i * lda + k0, lda, mr, panel, kc, ct, ldc, k0 > 0);
        if (last && epilogue) {
          bias_activation(mr, nc, ct, ldc, alpha, bias ? bias + c0 : nullptr, act, serial);
        }
      }
    }
    if (nc < knr) {
      for (int64_t i = i0; i < i1; ++i) {
        std::memcpy(y + i * ldy + c0, c + (i - i0) * ldc, static_cast<size_t>(nc) * sizeof(float));
      }
    }
  });
}

}  // namespace sampan::cpu
