// Batched decode (m = 1..16 rows of x; cpu::gemm sends m = kI4AmxMinM..16) of kI4 weights on
// AMX-INT8 tiles (contract and bound: gemm_quant.h). The weights are the A operand, 16 rows per
// tile, in their own row-major order: per k-step of kk = min(group, 64) elements a row's kk / 2
// packed bytes become one tile row, 16 * u of the low nibbles (the even elements) then 16 * u
// of the high ones (the odd elements), u = q + 8 in 0..15 (a shift, a vpternlog and a store per
// row-step). x is the B operand: rounded per (row of x, group) to x16 = 256 h + l exactly as the
// other kI4 decode kernels do (h and l signed bytes), its h and l bytes laid out in the same
// even-then-odd order, so tdpbusd (unsigned A, signed B) sums 16 u h and 16 u l over the step
// exactly in int32. Per group:
//   T = 256 C_h + C_l - 128 S = 16 sum q x16          (S = sum of the group's x16)
// exact in int32, then in f32 minus 16 z S for zero points, times s_w s_x / 16, added to f32
// sums. Bounds: |16 u h| <= 240 * 128 per product, at most 128 products per group: |C_h|, |C_l|
// < 2^22, |256 C_h + C_l| < 2^30, |128 S| < 2^29.
//
// Why tiles: a tdpbusd costs ~16 cycles whatever the tile's shape (measured on a Sapphire Rapids
// class VM; one accumulation chain runs as fast as four), so 16 rows x 64 weights x 2 byte planes
// of x take ~32 cycles for every m up to 16, and the vector ports only pack. The integer-dot
// kernels spend their arithmetic per row of x. Measured costs of this kernel (m = 1, 2048 x 2048,
// weights from L3, 1 thread): packing ~80 us, tile products ~30 us, the per-group epilogue and
// unit set-up ~40 us, which barely overlap; so at m = 1..3 the dot kernels stream faster.
//
// GCC 12 reports its own intrinsics' _mm512_undefined_* pass-through operands as
// maybe-uninitialized (fixed in GCC 13); silenced before the header is read.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/gemm_quant.h"

namespace sampan::cpu::gemm_detail {
namespace {

constexpr int kRowsPerUnit = 16;  // weight rows per A tile
// Tiles: C (h, l) of even groups 0, 1 and odd groups 2, 3 (a group's sums are read while the
// next group's products run), A (weights) 4 and 5 alternating by step, B (x: h, l) 6, 7 (the
// tile intrinsics take literal numbers).
constexpr int kTileA = 4, kTileBh = 6, kTileBl = 7;

// Software prefetch this many bytes ahead in the packer's stream.
constexpr int64_t kPrefetchAhead = 1024;

struct Plan {
  int64_t m = 0, k = 0, group = 0;
  int64_t kk = 0;       // elements per tile step: min(group, 64)
  int64_t steps = 0;    // k / kk
  int64_t ng = 0;       // groups per row: k / group
  int64_t step_per_group = 0;
  bool asym = false, bf16_scales = false;
  // Prepared x (calling thread), read by every task.
  const int32_t* bx = nullptr;  // [steps][2 (h, l)][kk / 4][m] dwords of 4 signed bytes
  const int32_t* s128 = nullptr;  // [ng][16]: 128 * S per row of x (0 from m on)
  const float* s16 = nullptr;     // [ng][16]: 16 * S as f32 (zero points)
  const float* cx = nullptr;      // [ng][16]: s_x / 16 (0 from m on)
};

void configure(const Plan& p) {
  amx::TileConfig cfg{};
  cfg.palette_id = 1;
  const auto bm = static_cast<uint16_t>(4 * p.m);
  for (int t = 0; t < 4; ++t) {
    cfg.rows[t] = kRowsPerUnit;
    cfg.colsb[t] = bm;
  }
  for (int t = kTileA; t < kTileA + 2; ++t) {
    cfg.rows[t] = kRowsPerUnit;
    cfg.colsb[t] = static_cast<uint16_t>(p.kk);
  }
  for (int t = kTileBh; t <= kTileBl; ++t) {
    cfg.rows[t] = static_cast<uint8_t>(p.kk / 4);
    cfg.colsb[t] = bm;
  }
  asm volatile("" : : "r"(&cfg) : "memory");  // see amx::configure_tiles
  _tile_loadconfig(&cfg);
}

// ---- prepared x ----

struct PrepScratch {
  AlignedBuffer<int32_t> bx, s128;
  AlignedBuffer<float> s16, cx;
};

PrepScratch& prep_scratch() {
  thread_local PrepScratch s;
  return s;
}

// Element order of a step's tile positions: the even elements of the step, then the odd ones.
// v: the step's x16 as int32 (kk / 16 vectors, element order) -> out: the same in tile order.
inline void even_odd(const __m512i* v, int64_t kk, __m512i* out) {
  const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
  const int64_t nv = kk / 16, half = nv / 2;  // 4 and 2, or 2 and 1
  for (int64_t j = 0; j < half; ++j) {
    out[j] = _mm512_permutex2var_epi32(v[2 * j], ev, v[2 * j + 1]);
    out[half + j] = _mm512_permutex2var_epi32(v[2 * j], od, v[2 * j + 1]);
  }
}

// Rows of x rounded and laid out for the B tiles; per group the sums and scales of the plan.
void prep_x(const float* x, int64_t ldx, Plan& p) {
  PrepScratch& s = prep_scratch();
  const int64_t m = p.m, kk = p.kk;
  s.bx.reserve(p.steps * 2 * (kk / 4) * m);
  s.s128.reserve(p.ng * 16);
  s.s16.reserve(p.ng * 16);
  s.cx.reserve(p.ng * 16);
  std::memset(s.s128.data(), 0, p.ng * 16 * sizeof(int32_t));
  std::memset(s.s16.data(), 0, p.ng * 16 * sizeof(float));
  std::memset(s.cx.data(), 0, p.ng * 16 * sizeof(float));
  const __m512i rows_idx = _mm512_mullo_epi32(
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
      _mm512_set1_epi32(static_cast<int>(m)));
  const __mmask16 row_mask = kk == 64 ? __mmask16(0xffff) : __mmask16(0x00ff);
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * ldx;
    for (int64_t g = 0; g < p.ng; ++g) {
      float sx, inv;
      i4_x_group_scale(xi, g * p.group, p.group, &sx, &inv);
      s.cx.data()[g * 16 + i] = sx / 16;
      __m512i sum = _mm512_setzero_si512();
      for (int64_t st = g * p.step_per_group; st < (g + 1) * p.step_per_group; ++st) {
        __m512i v[4], t[4];
        for (int64_t j = 0; j < kk / 16; ++j) {
          const __m512 f =
              _mm512_mul_ps(_mm512_loadu_ps(xi + st * kk + 16 * j), _mm512_set1_ps(inv));
          v[j] = _mm512_cvt_roundps_epi32(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
          sum = _mm512_add_epi32(sum, v[j]);
        }
        even_odd(v, kk, t);
        __m128i hb[4], lb[4];
        for (int64_t j = 0; j < kk / 16; ++j) {
          // h = floor((x16 + 128) / 256), l = x16 - 256 h: both in [-127, 127] for |x16| <= 32639.
          const __m512i h = _mm512_srai_epi32(_mm512_add_epi32(t[j], _mm512_set1_epi32(128)), 8);
          const __m512i l = _mm512_sub_epi32(t[j], _mm512_slli_epi32(h, 8));
          hb[j] = _mm512_cvtepi32_epi8(h);
          lb[j] = _mm512_cvtepi32_epi8(l);
        }
        __m512i hv = _mm512_castsi128_si512(hb[0]), lv = _mm512_castsi128_si512(lb[0]);
        hv = _mm512_inserti32x4(hv, hb[1], 1);
        lv = _mm512_inserti32x4(lv, lb[1], 1);
        if (kk == 64) {
          hv = _mm512_inserti32x4(_mm512_inserti32x4(hv, hb[2], 2), hb[3], 3);
          lv = _mm512_inserti32x4(_mm512_inserti32x4(lv, lb[2], 2), lb[3], 3);
        }
        // Dword r of a part (tile positions 4r..4r+3) goes to row r, column i of the B tile.
        int32_t* dst = s.bx.data() + st * 2 * (kk / 4) * m + i;
        _mm512_mask_i32scatter_epi32(dst, row_mask, rows_idx, hv, 4);
        _mm512_mask_i32scatter_epi32(dst + (kk / 4) * m, row_mask, rows_idx, lv, 4);
      }
      const int32_t total = _mm512_reduce_add_epi32(sum);  // |S| <= 128 * 32639
      s.s128.data()[g * 16 + i] = 128 * total;
      s.s16.data()[g * 16 + i] = 16.0f * static_cast<float>(total);
    }
  }
  p.bx = s.bx.data();
  p.s128 = s.s128.data();
  p.s16 = s.s16.data();
  p.cx = s.cx.data();
}

// ---- units: 16 weight rows against all m rows of x ----

// Rows [row0, row0 + rows) of block b (rows <= 16); their packed bytes are contiguous.
struct Unit {
  int b = 0;
  int64_t row0 = 0, rows = 0;
};

struct TaskScratch {
  AlignedBuffer<uint8_t> panel;  // [2][UnitPacker]: the unit multiplied, the unit packed
  AlignedBuffer<int32_t> c;      // [2 (group parity)][2 (h, l)][16][16]: stored C tiles
  AlignedBuffer<float> sw, zw;   // [ng rounded up to 16][16]: s_w and z per (group, row)
};

TaskScratch& task_scratch(const Plan& p) {
  thread_local TaskScratch s;
  thread_local bool zeroed = false;
  s.panel.reserve(2 * 16 * (p.steps * p.kk + 64));
  s.c.reserve(2 * 2 * 16 * 16);
  s.sw.reserve((p.ng + 15) / 16 * 16 * 16);
  s.zw.reserve((p.ng + 15) / 16 * 16 * 16);
  if (!zeroed) {  // columns of the C stores from m on are read (and multiplied by 0)
    std::memset(s.c.data(), 0, 2 * 2 * 16 * 16 * sizeof(int32_t));
    zeroed = true;
  }
  return s;
}

// Packs a unit into its panel ([16][pstride]: row r's steps one after another) one row-step
// (kk / 2 bytes) at a time in address order, so that both the weights and the panel are read
// and written as sequential streams; run a slice at a time between the tile products of the
// unit before it. The panel's row stride is padded by a line so that the 16 rows of a tile load
// do not fall into two L1 sets.
template <int KK>
class UnitPacker {
 public:
  static int64_t row_stride(int64_t steps) { return steps * KK + 64; }

  void start(const uint8_t* src, int64_t rows, int64_t steps, uint8_t* panel) {
    src_ = src;
    rows_ = rows;
    steps_ = steps;
    panel_ = dst_ = panel;
    r_ = st_ = 0;
    const int64_t ps = row_stride(steps);
    for (int64_t r = rows; r < kRowsPerUnit; ++r) std::memset(panel + r * ps, 0, steps * KK);
  }
  void stop() { rows_ = 0; }
  // Up to n row-steps.
  void pack(int64_t n) {
    for (; n > 0 && r_ < rows_; --n) {
      granule(src_, dst_);
      src_ += KK / 2;
      dst_ += KK;
      if (++st_ == steps_) {
        st_ = 0;
        ++r_;
        dst_ = panel_ + r_ * row_stride(steps_);
      }
    }
  }
  void finish() { pack(INT64_MAX); }

 private:
  // KK / 2 packed bytes -> 16 u of the low nibbles (even elements), then of the high ones.
  static void granule(const uint8_t* q, uint8_t* a) {
    constexpr int kXorAnd = 0x28;  // vpternlog: (a ^ b) & c
    _mm_prefetch(reinterpret_cast<const char*>(q + kPrefetchAhead), _MM_HINT_T0);
    if constexpr (KK == 64) {
      // Words 0..15 shifted by 4 (low nibbles to the high half of each byte), 16..31 as they
      // are; then 16 (n ^ 8) = 16 u: the nibble's sign bit flipped, the low half cleared.
      const __m512i shift = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_setzero_si256(), 1);
      const __m512i b =
          _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)));
      _mm512_store_si512(a, _mm512_ternarylogic_epi32(_mm512_sllv_epi16(b, shift),
                                                      _mm512_set1_epi8(static_cast<char>(0x80)),
                                                      _mm512_set1_epi8(static_cast<char>(0xf0)),
                                                      kXorAnd));
    } else {
      const __m256i shift = _mm256_setr_epi16(4, 4, 4, 4, 4, 4, 4, 4, 0, 0, 0, 0, 0, 0, 0, 0);
      const __m256i b =
          _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
      _mm256_store_si256(reinterpret_cast<__m256i*>(a),
                         _mm256_ternarylogic_epi32(_mm256_sllv_epi16(b, shift),
                                                   _mm256_set1_epi8(static_cast<char>(0x80)),
                                                   _mm256_set1_epi8(static_cast<char>(0xf0)),
                                                   kXorAnd));
    }
  }

  const uint8_t* src_ = nullptr;
  uint8_t* panel_ = nullptr;
  uint8_t* dst_ = nullptr;
  int64_t rows_ = 0, steps_ = 0, r_ = 0, st_ = 0;
};

// The unit's scales and zero points as f32, transposed to [group][row] (rows >= u.rows: 0).
void unit_scales(const GemmWeights& w, const Plan& p, const Unit& u, TaskScratch& s) {
  const uint16_t* sc = static_cast<const uint16_t*>(w.scales[u.b]) + u.row0 * p.ng;
  const int8_t* zs = w.zeros[u.b] ? w.zeros[u.b] + u.row0 * p.ng : nullptr;
  for (int64_t g0 = 0; g0 < p.ng; g0 += 16) {
    const __mmask16 mk = p.ng - g0 >= 16 ? __mmask16(0xffff) : __mmask16((1u << (p.ng - g0)) - 1);
    __m512i v[16], z[16];
    for (int64_t r = 0; r < 16; ++r) {
      v[r] = z[r] = _mm512_setzero_si512();
      if (r >= u.rows) continue;
      const __m256i h = _mm256_maskz_loadu_epi16(mk, sc + r * p.ng + g0);
      v[r] = p.bf16_scales ? _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)
                           : _mm512_castps_si512(_mm512_cvtph_ps(h));
      if (zs) {
        z[r] = _mm512_castps_si512(_mm512_cvtepi32_ps(
            _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mk, zs + r * p.ng + g0))));
      }
    }
    transpose16(v);
    for (int j = 0; j < 16; ++j) _mm512_store_si512(s.sw.data() + (g0 + j) * 16, v[j]);
    if (p.asym) {
      transpose16(z);
      for (int j = 0; j < 16; ++j) _mm512_store_si512(s.zw.data() + (g0 + j) * 16, z[j]);
    }
  }
}

// Adds group g's stored sums (c: [2][16][16], h then l; row r = weight row, column i = row of
// x) to the accumulators: acc[r] over the rows of x.
inline void add_group(const Plan& p, TaskScratch& s, int64_t g, const int32_t* c, __m512* acc) {
  const float* sw = s.sw.data() + g * 16;
  const float* zw = s.zw.data() + g * 16;
  const __m512i s128 = _mm512_load_si512(p.s128 + g * 16);
  const __m512 cx = _mm512_load_ps(p.cx + g * 16);
  const __m512 s16 = _mm512_load_ps(p.s16 + g * 16);
#pragma GCC unroll 16
  for (int r = 0; r < 16; ++r) {
    const __m512i t = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(c + r * 16), 8),
                                       _mm512_load_si512(c + 256 + r * 16));
    __m512 f = _mm512_cvtepi32_ps(_mm512_sub_epi32(t, s128));
    if (p.asym) f = _mm512_fnmadd_ps(_mm512_set1_ps(zw[r]), s16, f);
    acc[r] = _mm512_fmadd_ps(f, _mm512_mul_ps(_mm512_set1_ps(sw[r]), cx), acc[r]);
  }
}

// The tile products of one packed unit (panel: UnitPacker's layout), packing `next` a slice per
// step. out: [m][16] f32, the unit's 16 columns for each row of x.
template <int KK>
void multiply_unit(const Plan& p, const uint8_t* panel, TaskScratch& s, UnitPacker<KK>& next,
                   float* out) {
  constexpr int64_t cstride = 64;  // bytes between stored C rows
  const int64_t bpart = (KK / 4) * p.m;       // dwords per B part
  const int64_t bstride = 4 * p.m;
  const int64_t pstride = UnitPacker<KK>::row_stride(p.steps);
  __m512 acc[16];
  for (auto& v : acc) v = _mm512_setzero_ps();
  int32_t* cbuf = s.c.data();
  int64_t pending = -1;  // a group whose sums are stored but not yet added
  for (int64_t g = 0; g < p.ng; ++g) {
    const int par = static_cast<int>(g & 1);
    if (par == 0) {
      _tile_zero(0);
      _tile_zero(1);
    } else {
      _tile_zero(2);
      _tile_zero(3);
    }
    for (int64_t st = g * p.step_per_group; st < (g + 1) * p.step_per_group; ++st) {
      next.pack(kRowsPerUnit);
      const uint8_t* a = panel + st * KK;
      const int32_t* bx = p.bx + st * 2 * bpart;
      // Tile numbers must be literals: one branch per (A tile, group parity).
#define SAMPAN_I4_STEP(TA, CH, CL) \
  _tile_loadd(TA, a, pstride);     \
  _tile_loadd(6, bx, bstride);     \
  _tile_dpbusd(CH, TA, 6);         \
  _tile_loadd(7, bx + bpart, bstride); \
  _tile_dpbusd(CL, TA, 7);
      if (st & 1) {
        if (par) { SAMPAN_I4_STEP(5, 2, 3) } else { SAMPAN_I4_STEP(5, 0, 1) }
      } else {
        if (par) { SAMPAN_I4_STEP(4, 2, 3) } else { SAMPAN_I4_STEP(4, 0, 1) }
      }
#undef SAMPAN_I4_STEP
    }
    // The previous group's sums were stored while this group's products were queued.
    if (pending >= 0) add_group(p, s, pending, cbuf + (pending & 1) * 512, acc);
    int32_t* c = cbuf + par * 512;
    if (par == 0) {
      _tile_stored(0, c, cstride);
      _tile_stored(1, c + 256, cstride);
    } else {
      _tile_stored(2, c, cstride);
      _tile_stored(3, c + 256, cstride);
    }
    pending = g;
  }
  add_group(p, s, pending, cbuf + (pending & 1) * 512, acc);
  __m512i t[16];
  for (int r = 0; r < 16; ++r) t[r] = _mm512_castps_si512(acc[r]);
  transpose16(t);
  for (int64_t i = 0; i < p.m; ++i) _mm512_storeu_ps(out + i * 16, _mm512_castsi512_ps(t[i]));
}

// Units [u0, u1) of the call; with kSiluMul unit 2j is gate rows [16 j, 16 j + 16) (block 0)
// and unit 2j + 1 the same up rows (block 1).
template <int KK>
void run_units(const GemmWeights& w, const Plan& p, GemmEpilogue ep, const int64_t* first_unit,
               int64_t u0, int64_t u1, float* y, int64_t ldy) {
  const bool silu = ep == GemmEpilogue::kSiluMul;
  auto unit_at = [&](int64_t u) {
    Unit un;
    if (silu) {
      un.b = static_cast<int>(u & 1);
      un.row0 = u / 2 * kRowsPerUnit;
    } else {
      while (u >= first_unit[un.b + 1]) ++un.b;
      un.row0 = (u - first_unit[un.b]) * kRowsPerUnit;
    }
    un.rows = std::min<int64_t>(kRowsPerUnit, w.rows[un.b] - un.row0);
    return un;
  };
  auto src_of = [&](const Unit& un) {
    return static_cast<const uint8_t*>(w.data[un.b]) + un.row0 * (p.k / 2);
  };
  TaskScratch& s = task_scratch(p);
  const int64_t panel_bytes = kRowsPerUnit * UnitPacker<KK>::row_stride(p.steps);
  const QuantKernels& kt = quant_kernels_avx512();
  int64_t col0[kMaxGemmBlocks + 1] = {};
  for (int b = 0; b < w.n_blocks; ++b) col0[b + 1] = col0[b] + w.rows[b];
  alignas(64) float gate[16 * 16], res[16 * 16];
  UnitPacker<KK> packer;
  Unit cur = unit_at(u0);
  packer.start(src_of(cur), cur.rows, p.steps, s.panel.data());
  packer.finish();
  for (int64_t u = u0; u < u1; ++u) {
    Unit nxt;
    if (u + 1 < u1) {
      nxt = unit_at(u + 1);
      uint8_t* panel = s.panel.data() + ((u + 1 - u0) & 1) * panel_bytes;
      packer.start(src_of(nxt), nxt.rows, p.steps, panel);
    } else {
      packer.stop();
    }
    unit_scales(w, p, cur, s);
    float* out = silu && (u & 1) == 0 ? gate : res;
    multiply_unit<KK>(p, s.panel.data() + ((u - u0) & 1) * panel_bytes, s, packer, out);
    packer.finish();
    for (int64_t i = 0; i < p.m; ++i) {
      if (!silu) {
        kt.epilogue(ep, res + i * 16, w.bias[cur.b] ? w.bias[cur.b] + cur.row0 : nullptr, nullptr,
                    nullptr, y + i * ldy + col0[cur.b] + cur.row0, cur.rows);
      } else if (u & 1) {
        kt.epilogue(ep, gate + i * 16, w.bias[0] ? w.bias[0] + cur.row0 : nullptr, res + i * 16,
                    w.bias[1] ? w.bias[1] + cur.row0 : nullptr, y + i * ldy + cur.row0, cur.rows);
      }
    }
    cur = nxt;
  }
}

}  // namespace

void gemm_quant_i4_amx(int64_t m, const float* x, int64_t ldx, const GemmWeights& w,
                       GemmEpilogue ep, float* y, int64_t ldy, TaskRunner& runner) {
  assert(w.dtype == DType::kI4 && m >= 1 && m <= 16);
  Plan p;
  p.m = m;
  p.k = w.k;
  p.group = w.group_size;
  p.kk = std::min<int64_t>(p.group, 64);
  p.steps = p.k / p.kk;
  p.ng = p.k / p.group;
  p.step_per_group = p.group / p.kk;
  p.bf16_scales = w.scale_dtype == DType::kBF16;
  for (int b = 0; b < w.n_blocks; ++b) p.asym |= w.zeros[b] != nullptr;
  prep_x(x, ldx, p);

  const bool silu = ep == GemmEpilogue::kSiluMul;
  // Units of 16 rows per block; with kSiluMul gate and up units alternate (run_units), and a
  // task takes whole pairs.
  int64_t first_unit[kMaxGemmBlocks + 1] = {};
  for (int b = 0; b < w.n_blocks; ++b) {
    first_unit[b + 1] = first_unit[b] + (w.rows[b] + kRowsPerUnit - 1) / kRowsPerUnit;
  }
  const int64_t per = silu ? 2 : 1;
  const int64_t units = silu ? first_unit[1] : first_unit[w.n_blocks];
  const int64_t n_tasks = std::min<int64_t>(std::max(1, runner.concurrency()), units);
  auto task = [&](int64_t t) {
    const int64_t u0 = units * t / n_tasks * per, u1 = units * (t + 1) / n_tasks * per;
    if (u0 == u1) return;
    configure(p);
    if (p.kk == 64) {
      run_units<64>(w, p, ep, first_unit, u0, u1, y, ldy);
    } else {
      run_units<32>(w, p, ep, first_unit, u0, u1, y, ldy);
    }
    _tile_release();
  };
  if (n_tasks == 1) {
    task(0);
  } else {
    runner.run(n_tasks, task);
  }
}

}  // namespace sampan::cpu::gemm_detail
