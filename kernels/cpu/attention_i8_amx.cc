// Attention over an int8 KV cache (KvDtype::kI8) on AMX-INT8 tiles: the range contract of
// attention_impl.h, for head_dim a multiple of 64 (up to 256) and at most 8 query heads per KV
// head; attention_cpu.cc sends such ranges here on AMX CPUs unless GemmPrecision::kF32.
//
// The FMA path (kv_quant_impl.h) converts every int8 K and V element to f32 and spends two FMAs
// per element per query head of the group: ~65 cycles per key and KV head on a Sapphire Rapids
// class core (TinyLlama shape, group 8, head_dim 64), 5 GB/s of cache bytes. Here both products
// are integer tile products:
//  - scores: C[p * 8 + g][key] = sum_d Q_p[g][d] K[key][d] (tdpbssd), with q of each query head
//    (times the softmax scale) held as two int8 planes, q = s_q (hi + lo / 256), s_q =
//    absmax / 127 per head: 16 bits of q. K is the B operand, so each 16-key tile of K rows
//    is transposed to the VNNI layout (a 16 x 16 dword transpose in registers); scores come out
//    one row per head, as the online softmax (attention_impl.h) wants them.
//  - values: C[p * 8 + g][d] = sum_j W_p[g][j] V[j][d], the softmax weights times the V row
//    scales, w = p_j s_v(j), held as two int8 planes the same way (s_w = max_j w / 127 per head
//    and key block), and V rows interleaved four keys at a time into the VNNI layout.
// Both sums are exact in int32 (|C| <= 2 * 64 * 127 * 127 * 4 < 2^23 for head_dim 256, 32 keys).
//
// Error, against the same attention in exact arithmetic over the dequantized cache (what
// test_kv_quant.cc checks, kAmxI8Tol there): q is off by at most s_q / 512 (1/65024 of its
// absmax; 1/32512 where the low plane saturates at 127), so each score by at most
// absmax(q) / 32512 * sum_d |k_d|; each weight by at most 1/32512 of the block's largest,
// which moves an output (a convex combination of the V rows) by at most kKeyBlock / 32512 of
// max |v| per block, relative to that block's share of the softmax sum. That is far below the
// int8 format's own rounding (1/254 of each row's absmax).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/gemm_internal.h"
#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/vec_avx512.h"

namespace sampan::cpu::detail {
namespace {

using S = Avx512;
constexpr int64_t kB = kKeyBlock;  // 32 keys: two 16-key score tiles, one weight tile
static_assert(kB == 32, "the weight tile holds 32 keys");

// Tiles (the intrinsics paste their number into the instruction, so these are macros). Two of
// each product's accumulators and operands, so that one tile's product runs while the other's
// result is stored: a tile product's result is only readable ~its latency later.
#define SAMPAN_TILE_C0 0  // int32 results: scores (16 head planes x 16 keys), then values
#define SAMPAN_TILE_C1 1  //   (16 head planes x 16 dims)
#define SAMPAN_TILE_Q 2   // q planes, 16 x 64 bytes of one 64-wide slice of head_dim
#define SAMPAN_TILE_K0 3  // K^T of keys 0..15 / 16..31 of the block, 16 dword rows x 16 keys
#define SAMPAN_TILE_K1 4
#define SAMPAN_TILE_W 5   // weight planes, 16 x 32 keys (bytes)
#define SAMPAN_TILE_V0 6  // V, 8 rows of 4 interleaved keys x 16 dims (even / odd slices of 16)
#define SAMPAN_TILE_V1 7

void configure() {
  amx::TileConfig cfg{};
  cfg.palette_id = 1;
  const int rows[8] = {16, 16, 16, 16, 16, 16, 8, 8};
  const int colsb[8] = {64, 64, 64, 64, 64, 32, 64, 64};
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = static_cast<uint8_t>(rows[t]);
    cfg.colsb[t] = static_cast<uint16_t>(colsb[t]);
  }
  asm volatile("" : : "r"(&cfg) : "memory");  // see amx_tiles.h: keep every store
  _tile_loadconfig(&cfg);
}

// v: [16] f32 in [-127.5, 127.5] -> hi = round(v), lo = round((v - hi) 256) saturated to int8,
// 16 bytes each.
inline void split_planes(__m512 v, int8_t* hi, int8_t* lo) {
  const __m512i h = _mm512_cvtps_epi32(v);
  const __m512 rest =
      _mm512_mul_ps(_mm512_sub_ps(v, _mm512_cvtepi32_ps(h)), _mm512_set1_ps(256.0f));
  const __m512i l = _mm512_cvtps_epi32(rest);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(hi), _mm512_cvtsepi32_epi8(h));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(lo), _mm512_cvtsepi32_epi8(l));
}

struct alignas(64) Scratch {
  int8_t kt[2][4][16 * 64];  // K^T tiles: [16-key half][slice]
  int32_t c[2][16 * 16];     // stored int32 tiles
  int8_t w[16 * 32];        // weight planes
  int8_t v[16][8 * 64];     // V tiles, one per 16 dims (head_dim <= 256)
  float sc[8 * kB];         // scores, then weights, of one KV head: [group, kB]
  float ks[kB], vs[kB];     // row scales of the block's K and V records
};

}  // namespace

bool attention_i8_amx_supported(int64_t group, int64_t head_dim) {
  return group >= 1 && group <= 8 && head_dim % 64 == 0 && head_dim <= 256;
}

void attention_range_i8_amx(const AttentionRange& a) {
  const int64_t hd = a.head_dim, group = a.group, n_kv = a.n_kv, heads = n_kv * group;
  const int64_t slices = hd / 64;
  const int64_t head_bytes = kv_head_bytes(KvDtype::kI8, hd);
  thread_local Scratch sc_tl;
  thread_local gemm_detail::AlignedBuffer<int8_t> qbuf;
  Scratch& s = sc_tl;
  // q planes: [n_kv][slices][16 rows][64 bytes], row p * 8 + g (zero rows for g >= group).
  qbuf.reserve(n_kv * slices * 1024);
  int8_t* qa = qbuf.data();
  float* sq = a.scratch;          // [n_kv, group] s_q
  float* mx = sq + heads;         // [n_kv, group] running maxima
  float* sum = mx + heads;        // [n_kv, group] running sums
  std::memset(qa, 0, static_cast<size_t>(n_kv * slices * 1024));
  for (int64_t hg = 0; hg < heads; ++hg) {
    const float* q = a.q + hg * hd;
    __m512 amax = _mm512_setzero_ps();
    for (int64_t d = 0; d < hd; d += 16) {
      amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_mul_ps(_mm512_loadu_ps(q + d),
                                                              _mm512_set1_ps(a.scale))));
    }
    const float m = _mm512_reduce_max_ps(amax);
    sq[hg] = m / 127.0f;
    const float inv = m > 0.0f ? 127.0f / m : 0.0f;
    const int64_t h = hg / group, g = hg % group;
    for (int64_t d = 0; d < hd; d += 16) {
      const __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(q + d), _mm512_set1_ps(a.scale)),
                                     _mm512_set1_ps(inv));
      int8_t* tile = qa + (h * slices + d / 64) * 1024;
      split_planes(v, tile + g * 64 + d % 64, tile + (8 + g) * 64 + d % 64);
    }
    mx[hg] = -INFINITY;
    sum[hg] = 0.0f;
  }
  for (int64_t i = 0; i < heads * hd; ++i) a.out[i] = 0.0f;
  configure();
  const uint8_t* kb[kB];
  const uint8_t* vb[kB];
  for (int64_t j0 = a.first; j0 <= a.last; j0 += kB) {
    const int64_t nb = a.last - j0 + 1 < kB ? a.last - j0 + 1 : kB;
    key_block_rows(a, j0, nb, kb, vb);
    // The next block's rows, asked for before this block is computed.
    if (j0 + kB <= a.last) prefetch_key_block(a, head_bytes * n_kv, j0 + kB);
    for (int64_t h = 0; h < n_kv; ++h) {
      const int64_t off = h * head_bytes;
      float* acc = a.out + h * group * hd;  // [group, hd]
      for (int64_t i = 0; i < kB; ++i) {
        s.ks[i] = i < nb ? kv_load_f32(kb[i] + off + hd) : 0.0f;
        s.vs[i] = i < nb ? kv_load_f32(vb[i] + off + hd) : 0.0f;
      }
      // Scores: K^T tiles of both 16-key halves, then their products, then the stores.
      const int halves = nb > 16 ? 2 : 1;
      for (int hf = 0; hf < halves; ++hf) {
        const int64_t k0 = 16 * hf, nk = nb - k0 < 16 ? nb - k0 : 16;
        for (int64_t sl = 0; sl < slices; ++sl) {
          __m512i r[16];
          for (int64_t i = 0; i < 16; ++i) {
            r[i] = i < nk ? _mm512_loadu_si512(kb[k0 + i] + off + sl * 64) : _mm512_setzero_si512();
          }
          gemm_detail::transpose16(r);  // r[c] lane i = key i's dword c
          for (int i = 0; i < 16; ++i) _mm512_store_si512(s.kt[hf][sl] + i * 64, r[i]);
        }
      }
      _tile_zero(SAMPAN_TILE_C0);
      _tile_zero(SAMPAN_TILE_C1);
      for (int64_t sl = 0; sl < slices; ++sl) {
        _tile_loadd(SAMPAN_TILE_Q, qa + (h * slices + sl) * 1024, 64);
        _tile_loadd(SAMPAN_TILE_K0, s.kt[0][sl], 64);
        _tile_dpbssd(SAMPAN_TILE_C0, SAMPAN_TILE_Q, SAMPAN_TILE_K0);
        if (halves == 2) {
          _tile_loadd(SAMPAN_TILE_K1, s.kt[1][sl], 64);
          _tile_dpbssd(SAMPAN_TILE_C1, SAMPAN_TILE_Q, SAMPAN_TILE_K1);
        }
      }
      _tile_stored(SAMPAN_TILE_C0, s.c[0], 64);
      if (halves == 2) _tile_stored(SAMPAN_TILE_C1, s.c[1], 64);
      for (int hf = 0; hf < halves; ++hf) {
        const int64_t k0 = 16 * hf, nk = nb - k0 < 16 ? nb - k0 : 16;
        const __m512 ksv = _mm512_loadu_ps(s.ks + k0);
        for (int64_t g = 0; g < group; ++g) {
          const __m512 hi = _mm512_cvtepi32_ps(_mm512_load_si512(s.c[hf] + g * 16));
          const __m512 lo = _mm512_cvtepi32_ps(_mm512_load_si512(s.c[hf] + (8 + g) * 16));
          const __m512 t = _mm512_fmadd_ps(lo, _mm512_set1_ps(1.0f / 256.0f), hi);
          const __m512 score =
              _mm512_mul_ps(_mm512_mul_ps(t, _mm512_set1_ps(sq[h * group + g])), ksv);
          _mm512_mask_storeu_ps(s.sc + g * kB + k0, static_cast<__mmask16>((1u << nk) - 1u),
                                score);
        }
      }
      softmax_block<S>(s.sc, group, nb, hd, mx + h * group, sum + h * group, acc);
      // Weight planes: w = p s_v, s_w = max w / 127 per head.
      float sw[8];
      std::memset(s.w, 0, sizeof(s.w));
      for (int64_t g = 0; g < group; ++g) {
        __m512 w[2];
        for (int u = 0; u < 2; ++u) {
          const int64_t n = nb - 16 * u;
          const __mmask16 mk =
              n >= 16 ? 0xffff : n > 0 ? static_cast<__mmask16>((1u << n) - 1u) : 0;
          w[u] = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, s.sc + g * kB + 16 * u),
                               _mm512_loadu_ps(s.vs + 16 * u));
        }
        const float m = _mm512_reduce_max_ps(_mm512_max_ps(w[0], w[1]));
        sw[g] = m / 127.0f;
        if (!(m > 0.0f)) {
          sw[g] = 0.0f;
          continue;
        }
        const __m512 inv = _mm512_set1_ps(127.0f / m);
        for (int u = 0; u < 2; ++u) {
          split_planes(_mm512_mul_ps(w[u], inv), s.w + g * 32 + 16 * u,
                       s.w + (8 + g) * 32 + 16 * u);
        }
      }
      // V tiles: row r of the tile for dims 16 t .. 16 t + 15 holds, per dim, keys 4 r .. 4 r + 3.
      for (int64_t sl = 0; sl < slices; ++sl) {
        for (int64_t r = 0; r < 8; ++r) {
          __m512i row[4];
          for (int e = 0; e < 4; ++e) {
            const int64_t i = 4 * r + e;
            row[e] = i < nb ? _mm512_loadu_si512(vb[i] + off + sl * 64) : _mm512_setzero_si512();
          }
          const __m512i t0 = _mm512_unpacklo_epi8(row[0], row[1]);
          const __m512i t1 = _mm512_unpackhi_epi8(row[0], row[1]);
          const __m512i t2 = _mm512_unpacklo_epi8(row[2], row[3]);
          const __m512i t3 = _mm512_unpackhi_epi8(row[2], row[3]);
          // u_k, 128-bit block b: dims 16 b + 4 k .. + 3, four keys each.
          const __m512i u0 = _mm512_unpacklo_epi16(t0, t2);
          const __m512i u1 = _mm512_unpackhi_epi16(t0, t2);
          const __m512i u2 = _mm512_unpacklo_epi16(t1, t3);
          const __m512i u3 = _mm512_unpackhi_epi16(t1, t3);
          const __m512i x0 = _mm512_shuffle_i32x4(u0, u1, 0x44);
          const __m512i x1 = _mm512_shuffle_i32x4(u2, u3, 0x44);
          const __m512i x2 = _mm512_shuffle_i32x4(u0, u1, 0xee);
          const __m512i x3 = _mm512_shuffle_i32x4(u2, u3, 0xee);
          _mm512_store_si512(s.v[4 * sl + 0] + r * 64, _mm512_shuffle_i32x4(x0, x1, 0x88));
          _mm512_store_si512(s.v[4 * sl + 1] + r * 64, _mm512_shuffle_i32x4(x0, x1, 0xdd));
          _mm512_store_si512(s.v[4 * sl + 2] + r * 64, _mm512_shuffle_i32x4(x2, x3, 0x88));
          _mm512_store_si512(s.v[4 * sl + 3] + r * 64, _mm512_shuffle_i32x4(x2, x3, 0xdd));
        }
      }
      _tile_loadd(SAMPAN_TILE_W, s.w, 32);
      // Slices of 16 dims alternate between two V and two result tiles: slice t's product runs
      // while slice t - 1's result is stored and added.
      auto add_slice = [&](int64_t t, const int32_t* c) {
        for (int64_t g = 0; g < group; ++g) {
          if (sw[g] == 0.0f) continue;
          const __m512 hi = _mm512_cvtepi32_ps(_mm512_load_si512(c + g * 16));
          const __m512 lo = _mm512_cvtepi32_ps(_mm512_load_si512(c + (8 + g) * 16));
          const __m512 t2 = _mm512_fmadd_ps(lo, _mm512_set1_ps(1.0f / 256.0f), hi);
          float* o = acc + g * hd + 16 * t;
          _mm512_storeu_ps(o, _mm512_fmadd_ps(t2, _mm512_set1_ps(sw[g]), _mm512_loadu_ps(o)));
        }
      };
      const int64_t n_slices = hd / 16;  // even: head_dim is a multiple of 64
      for (int64_t t = 0; t < n_slices; t += 2) {
        _tile_zero(SAMPAN_TILE_C0);
        _tile_loadd(SAMPAN_TILE_V0, s.v[t], 64);
        _tile_dpbssd(SAMPAN_TILE_C0, SAMPAN_TILE_W, SAMPAN_TILE_V0);
        if (t > 0) {
          _tile_stored(SAMPAN_TILE_C1, s.c[1], 64);
          add_slice(t - 1, s.c[1]);
        }
        _tile_zero(SAMPAN_TILE_C1);
        _tile_loadd(SAMPAN_TILE_V1, s.v[t + 1], 64);
        _tile_dpbssd(SAMPAN_TILE_C1, SAMPAN_TILE_W, SAMPAN_TILE_V1);
        _tile_stored(SAMPAN_TILE_C0, s.c[0], 64);
        add_slice(t, s.c[0]);
      }
      _tile_stored(SAMPAN_TILE_C1, s.c[1], 64);
      add_slice(n_slices - 1, s.c[1]);
    }
  }
  _tile_release();
  finish_range<S>(a, mx, sum);
}

}  // namespace sampan::cpu::detail
