// The parts of the integer prefill kernels (gemm_prefill_int_avx512_vnni.cc on AVX512-VNNI,
// gemm_prefill_int_avx2.cc below AVX-512) that do not depend on the vector width: the plan of
// a call, the scales of the weight formats, their 32-element chunks as unsigned bytes, and the
// driver (x prepared per row, then units of K::kCols output columns packed into a panel and
// swept by tiles of K::kMr rows of x). What each kernel file provides is named at prefill_int.
//
// Everything here has internal linkage (an unnamed namespace): each kernel file compiles its own
// copy with its own ISA flags, so an AVX-512 copy can never serve the AVX2 file. Include only
// from those two files (both compiled with AVX2 at least).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/gemm_ggml.h"
#include "kernels/cpu/gemm_quant.h"
#include "kernels/cpu/ggml_chunk_avx2.h"
#include "kernels/cpu/ggml_dequant.h"

namespace sampan::cpu::gemm_detail {
namespace {

constexpr int kMaxIntCols = 32;  // the widest unit (AVX-512: two vectors of 16 lanes)
// Tasks per worker that the driver cuts a call's units into (fewer where there are fewer units),
// handed out dynamically: one contiguous share per worker left the whole call waiting on the
// slower core whenever the shared machine slowed one of them. Measured (Emerald Rapids VM
// without AMX, 2 threads, int4 g128, m = 512, TinyLlama shapes, calls alternating in one
// process, median time ratio of 20-40 pairs per shape): 8 tasks per worker against one, three
// runs, 0.89-1.00x (q/o 0.89, 0.92, 1.00; down 0.95, 0.95, 1.00; gate+up 0.95-1.00; k/v
// 0.96-0.99), never above 1.004; 4 and 16 per worker alike (0.90-1.00x). Single pairs ranged
// 0.7-1.3 (the machine's noise).
constexpr int64_t kIntTasksPerThread = 8;
constexpr int kMaxIntMr = 6;     // the most rows of x per tile

struct Plan {
  int64_t m = 0, k = 0, group = 0, ng = 0;
  int64_t ldq = 0;  // dwords per prepared row of x: k / 2 (x16), k / 4 rounded up to 16 (x8)
  bool bf16_scales = false;   // kI4 only
  bool x8 = false;            // x rounded to int8, the panel of u8 quads (vpdpbusd)
  float xmax = kI4XMax;       // x16 (x8) range
  int32_t off = 0;            // x8: the weight is u - off (u the panel's unsigned byte)
  int32_t umax = 255;         // x8: the largest u the panel's format holds
  bool mins = false;          // w = s_w q - mn (Q4_K, Q5_K; x8 kI4 with zero points, mn =
                              // s_w z): the group sums of x are needed
  const int32_t* xq = nullptr;  // [m][ldq]: x16 pairs (x8 quads)
  const float* sx = nullptr;    // [m][ng]: s_x (0 for a group taken as zero, NaN for inf / NaN)
  const float* xs = nullptr;    // [m][ng]: s_x * sum of the group's x16 (x8) (mins only)
  const int32_t* xo = nullptr;  // [m][ng]: x8: -off * sum of the group's x8
};

struct Scratch {
  AlignedBuffer<int32_t> panel;  // [2 (gate, up)][k / 2][kCols] (x8: [k / 4, rounded up to
                                 // 16][kCols] used)
  AlignedBuffer<float> sw;       // [2][2][ng][kCols]: s_w, then mn (mins only); 0 past the
                                 // unit's columns
  AlignedBuffer<int32_t> zz;     // [ng][kCols]: 8 + z (kI4 x16)
  alignas(64) float c[2][kMaxIntMr * kMaxIntCols];  // a tile's results (gate, up)
};

Scratch& task_scratch(const Plan& p, int cols) {
  thread_local Scratch s;
  s.panel.reserve(2 * p.k / 2 * cols);
  s.sw.reserve(4 * p.ng * cols);
  s.zz.reserve(p.ng * cols);
  return s;
}

// Columns [row0, row0 + cols) of weight block b into panel [k / 2][kCols] (x8: [k / 4][kCols],
// padded to 16 quads for GGUF) and its scales into sw [ng][kCols] (formats with mins: their mins
// into sw + ng kCols, [ng][kCols]); columns from cols on get zero weights, scales and mins.
using IntPackFn = void (*)(const GemmWeights& w, const Plan& p, int b, int64_t row0, int cols,
                           Scratch& s, int32_t* panel, float* sw);

// kI4's scales of columns [row0, row0 + cols) of block b into sw [ng][kCols], 8 + z into s.zz
// (x16) and, where p.mins (x8 with zero points), s_w z into sw + ng kCols; 0 past cols.
template <int kCols>
void i4_scales(const GemmWeights& w, const Plan& p, int b, int64_t row0, int cols, Scratch& s,
               float* sw) {
  const auto* scales = static_cast<const uint16_t*>(w.scales[b]) + row0 * p.ng;
  const int8_t* zeros = w.zeros[b] ? w.zeros[b] + row0 * p.ng : nullptr;
  for (int c = 0; c < kCols; ++c) {
    for (int64_t g = 0; g < p.ng; ++g) {
      float v = 0.0f;
      int32_t z = 0;
      if (c < cols) {
        const uint16_t h = scales[c * p.ng + g];
        v = p.bf16_scales ? std::bit_cast<float>(static_cast<uint32_t>(h) << 16) : _cvtsh_ss(h);
        z = zeros ? zeros[c * p.ng + g] : 0;
      }
      sw[g * kCols + c] = v;
      if (p.x8) {
        if (p.mins) sw[(p.ng + g) * kCols + c] = v * static_cast<float>(z);  // exact: 8 + 8 bits
      } else {
        s.zz.data()[g * kCols + c] = 8 + z;
      }
    }
  }
}

inline float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// The scales (and the mins of kMins kinds) of columns [row0, row0 + cols) of block b into sw
// [ng][kCols] (mins: sw + ng kCols); 0 past cols.
template <GgmlKind kKind, int kCols>
void ggml_scales(const GemmWeights& w, const Plan& p, int b, int64_t row0, int cols, float* sw) {
  using L = GgmlLayout<kKind>;
  const int64_t rb = p.k / L::kBlock * L::kBytes;  // bytes per weight row
  const int64_t per_block = L::kBlock / p.group;   // groups per block
  const auto* data = static_cast<const uint8_t*>(w.data[b]) + row0 * rb;
  float* mins = sw + p.ng * kCols;
  for (int64_t g = 0; g < p.ng; ++g) {
    for (int c = 0; c < kCols; ++c) {
      float v = 0.0f, mn = 0.0f;
      if (c < cols) {
        const uint8_t* blk = data + c * rb + g / per_block * L::kBytes;
        const int j = static_cast<int>(g % per_block);
        if constexpr (L::kQ4K) {
          int sc, mi;
          k_scale_min(blk + 4, j, &sc, &mi);
          v = f16_at(blk) * static_cast<float>(sc);
          mn = f16_at(blk + 2) * static_cast<float>(mi);
        } else if constexpr (L::kQ6K) {
          v = f16_at(blk + 208) * static_cast<float>(static_cast<int8_t>(blk[192 + j]));
        } else if constexpr (L::kQ2K) {
          v = f16_at(blk + 80) * static_cast<float>(blk[j] & 15);
          mn = f16_at(blk + 82) * static_cast<float>(blk[j] >> 4);
        } else if constexpr (L::kQ3K) {
          v = f16_at(blk + 108) * static_cast<float>(q3_k_scale(blk + 96, j));
        } else if constexpr (L::kIq4Xs) {
          v = f16_at(blk) * static_cast<float>(iq4_xs_scale(blk, j));
        } else {
          v = f16_at(blk);
          if constexpr (L::kQ4_1 || L::kQ5_1) mn = -f16_at(blk + 2);
        }
      }
      sw[g * kCols + c] = v;
      if constexpr (L::kMins) mins[g * kCols + c] = mn;
    }
  }
}

// The x8 form of a plan: x rounded to int8 per group, quads of x8 per dword.
void set_x8(Plan& p, int32_t off, int32_t umax) {
  p.x8 = true;
  p.xmax = kX8Max;
  p.off = off;
  p.umax = umax;
  p.ldq = (p.k / 4 + 15) / 16 * 16;  // the AVX-512 pack_ggml_x8 transposes 16 quads at a time
}

// Rows i0 .. i0 + mr (mr <= 6) of x against a panel (c: [mr][kCols]) through K's tile<MR, kX8>.
template <class K>
void tile_rows(const Plan& p, int mr, const int32_t* panel, const float* sw, int64_t i0,
               float* c) {
  auto rows = [&]<bool kX8>() {
    const int32_t* xq = p.xq + i0 * p.ldq;
    const float* sx = p.sx + i0 * p.ng;
    const float* xs = p.mins ? p.xs + i0 * p.ng : nullptr;
    const int32_t* xo = kX8 ? p.xo + i0 * p.ng : nullptr;
    switch (mr) {
      case 6: return K::template tile<6, kX8>(p, panel, sw, xq, sx, xs, xo, c);
      case 5: return K::template tile<5, kX8>(p, panel, sw, xq, sx, xs, xo, c);
      case 4: return K::template tile<4, kX8>(p, panel, sw, xq, sx, xs, xo, c);
      case 3: return K::template tile<3, kX8>(p, panel, sw, xq, sx, xs, xo, c);
      case 2: return K::template tile<2, kX8>(p, panel, sw, xq, sx, xs, xo, c);
      default: return K::template tile<1, kX8>(p, panel, sw, xq, sx, xs, xo, c);
    }
  };
  if (p.x8) {
    rows.template operator()<true>();
  } else {
    rows.template operator()<false>();
  }
}

// The driver. K provides kCols and kMr (<= kMaxIntCols, kMaxIntMr), prep_row(x, p, xq, sx, xs,
// xo) (one row of x: its groups' s_x, x16 or x8, and the sums xs / xo), tile<MR, kX8>(p, panel,
// sw, xq, sx, xs, xo, c) (MR rows of x from xq / sx / xs / xo against a panel: c [MR][kCols])
// and epilogue() (the FMA table's bias / SiLU-mul epilogue of the same ISA).
struct PrepScratch {
  AlignedBuffer<int32_t> xq, xo;
  AlignedBuffer<float> sx, xs;
};

PrepScratch& prep_scratch() {
  thread_local PrepScratch s;
  return s;
}

template <class K>
void prefill_int(Plan& p, IntPackFn pack, const float* x, int64_t ldx, const GemmWeights& w,
                 GemmEpilogue ep, float* y, int64_t ldy, TaskRunner& runner) {
  constexpr int kCols = K::kCols, kMr = K::kMr;
  const int64_t m = p.m;
  PrepScratch& ps = prep_scratch();
  ps.xq.reserve(m * p.ldq);
  ps.sx.reserve(m * p.ng);
  ps.xs.reserve(m * p.ng);
  ps.xo.reserve(m * p.ng);
  p.xq = ps.xq.data();
  p.sx = ps.sx.data();
  p.xs = ps.xs.data();
  p.xo = ps.xo.data();
  const int64_t threads = std::max(1, runner.concurrency());
  {
    const int64_t n_tasks = std::min(threads, m);
    auto prep = [&](int64_t t) {
      for (int64_t i = m * t / n_tasks; i < m * (t + 1) / n_tasks; ++i) {
        K::prep_row(x + i * ldx, p, ps.xq.data() + i * p.ldq, ps.sx.data() + i * p.ng,
                 ps.xs.data() + i * p.ng, ps.xo.data() + i * p.ng);
      }
    };
    if (n_tasks == 1) {
      prep(0);
    } else {
      runner.run(n_tasks, prep);
    }
  }

  const bool silu = ep == GemmEpilogue::kSiluMul;
  // Units of kCols columns per block (kSiluMul: of the gate block, with the same up columns).
  int64_t first_unit[kMaxGemmBlocks + 1] = {};
  int64_t col0[kMaxGemmBlocks + 1] = {};
  const int n_segments = silu ? 1 : w.n_blocks;
  for (int b = 0; b < n_segments; ++b) {
    first_unit[b + 1] = first_unit[b] + (w.rows[b] + kCols - 1) / kCols;
    col0[b + 1] = col0[b] + w.rows[b];
  }
  const int64_t units = first_unit[n_segments];
  const EpilogueFn epilogue = K::epilogue();
  const int64_t n_tasks = std::min(threads * kIntTasksPerThread, units);
  auto task = [&](int64_t t) {
    Scratch& s = task_scratch(p, kCols);
    int32_t* panels[2] = {s.panel.data(), s.panel.data() + p.k / 2 * kCols};
    float* sws[2] = {s.sw.data(), s.sw.data() + 2 * p.ng * kCols};
    int b = 0;
    for (int64_t u = units * t / n_tasks; u < units * (t + 1) / n_tasks; ++u) {
      while (u >= first_unit[b + 1]) ++b;
      const int64_t row0 = (u - first_unit[b]) * kCols;
      const int cols = static_cast<int>(std::min<int64_t>(kCols, w.rows[b] - row0));
      const int n_src = silu ? 2 : 1;
      for (int j = 0; j < n_src; ++j) {
        pack(w, p, silu ? j : b, row0, cols, s, panels[j], sws[j]);
      }
      for (int64_t i0 = 0; i0 < m; i0 += kMr) {
        const int mr = static_cast<int>(std::min<int64_t>(kMr, m - i0));
        for (int j = 0; j < n_src; ++j) tile_rows<K>(p, mr, panels[j], sws[j], i0, s.c[j]);
        for (int i = 0; i < mr; ++i) {
          float* yi = y + (i0 + i) * ldy;
          if (silu) {
            epilogue(ep, s.c[0] + i * kCols, w.bias[0] ? w.bias[0] + row0 : nullptr,
                     s.c[1] + i * kCols, w.bias[1] ? w.bias[1] + row0 : nullptr, yi + row0, cols);
          } else {
            epilogue(ep, s.c[0] + i * kCols, w.bias[b] ? w.bias[b] + row0 : nullptr, nullptr,
                     nullptr, yi + col0[b] + row0, cols);
          }
        }
      }
    }
  };
  if (n_tasks == 1) {
    task(0);
  } else {
    runner.run(n_tasks, task);
  }
}


// The entry points' plans. K also provides i4_pack(x8) and ggml_pack<kKind>(x8), its packers of
// kI4 and of the GGUF kinds for x16 (false) and x8 (true).
template <class K>
void i4_prefill(int64_t m, const float* x, int64_t ldx, const GemmWeights& w, GemmEpilogue ep,
                float* y, int64_t ldy, TaskRunner& runner) {
  assert(w.dtype == DType::kI4 && m >= 1);
  Plan p;
  p.m = m;
  p.k = w.k;
  p.group = w.group_size;
  p.ng = p.k / p.group;
  p.ldq = p.k / 2;
  p.bf16_scales = w.scale_dtype == DType::kBF16;
  const bool x8 = vnni_x8();
  if (x8) {
    set_x8(p, 8, 15);  // u = q + 8
    for (int b = 0; b < w.n_blocks; ++b) p.mins = p.mins || w.zeros[b] != nullptr;
  }
  prefill_int<K>(p, K::i4_pack(x8), x, ldx, w, ep, y, ldy, runner);
}

template <class K>
void ggml_prefill(int64_t m, const float* x, int64_t ldx, const GemmWeights& w, GemmEpilogue ep,
                  float* y, int64_t ldy, TaskRunner& runner) {
  const GgmlType t = w.ggml_type;
  assert(w.dtype == DType::kU8 && m >= 1 && w.k % ggml_block_size(t) == 0 &&
         ggml_i16_prefill_type(t));
  Plan p;
  p.m = m;
  p.k = w.k;
  p.ldq = p.k / 2;
  p.xmax = 32767.0f;
  const bool x8 = ggml_prefill_x8(t);
  IntPackFn pack = nullptr;
  int32_t off = 0, umax = 255;
  auto pick = [&]<GgmlKind kKind>() {
    using L = GgmlLayout<kKind>;
    pack = K::template ggml_pack<kKind>(x8);
    off = L::kOff;
    umax = L::kMaxU;
    p.group = L::kGroup;
    p.mins = L::kMins;
  };
  switch (t) {
    case GgmlType::kQ8_0: pick.template operator()<GgmlKind::kQ8_0>(); break;
    case GgmlType::kQ4_K: pick.template operator()<GgmlKind::kQ4_K>(); break;
    case GgmlType::kQ5_K: pick.template operator()<GgmlKind::kQ5_K>(); break;
    case GgmlType::kQ6_K: pick.template operator()<GgmlKind::kQ6_K>(); break;
    case GgmlType::kQ4_1: pick.template operator()<GgmlKind::kQ4_1>(); break;
    case GgmlType::kQ5_0: pick.template operator()<GgmlKind::kQ5_0>(); break;
    case GgmlType::kQ5_1: pick.template operator()<GgmlKind::kQ5_1>(); break;
    case GgmlType::kIQ4_NL: pick.template operator()<GgmlKind::kIQ4_NL>(); break;
    case GgmlType::kIQ4_XS: pick.template operator()<GgmlKind::kIQ4_XS>(); break;
    case GgmlType::kQ2_K: pick.template operator()<GgmlKind::kQ2_K>(); break;
    case GgmlType::kQ3_K: pick.template operator()<GgmlKind::kQ3_K>(); break;
    default: pick.template operator()<GgmlKind::kQ4_0>(); break;
  }
  p.ng = p.k / p.group;
  if (x8) set_x8(p, off, umax);
  prefill_int<K>(p, pack, x, ldx, w, ep, y, ldy, runner);
}

}  // namespace
}  // namespace sampan::cpu::gemm_detail
