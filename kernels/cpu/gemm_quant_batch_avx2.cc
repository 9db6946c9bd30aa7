// AVX2 kernels for batched decode of quantized weights: kAvx2BatchMinM..kAvx2BatchMaxM rows of
// x (continuous batching), on CPUs whose batched decode would otherwise take the AVX2 dot
// kernels of gemm_quant_avx2.cc (no AVX512-VNNI, no AMX; contract in gemm_quant.h).
//
// Those kernels are built for one row of x, where the weights' memory speed is the limit: they
// decode R = 4 weight rows one after another against at most 4 rows of x, in passes of 2 (int4)
// or with 2 accumulators per row (fp8), and take further rows of x in more passes over whole
// rows. From 3 rows of x on a Zen 3 core they run out of arithmetic instead (measured with the
// weights in L2, thread CPU time: fp8 ~6.5 multiply-adds per cycle at m = 3..16, against the 16
// of two 8-lane FMAs per cycle), for three reasons this file removes:
//  - latency: an FMA takes 4 cycles and two issue per cycle, so 8 independent sums are needed;
//    here each call holds 2 weight rows x up to 6 rows of x = 12 sums in registers;
//  - x re-read from L2: with m rows of x, x is m * k floats (48 KB for 6 rows of k = 2048), so
//    a call over a few weight rows streams all of it from L2 again (measured: 12 cycles per 8
//    weights of 2 rows x 6 rows of x, where the FMAs need 6). Here a call takes kCallRows = 16
//    weight rows and walks k in chunks outermost (f8_chunk, i4_chunk: about 12 KB of prepared
//    x): a chunk of x is loaded once and serves all 16 rows while it sits in L1, next to their
//    16 x m sums (up to 8 KB). Prepared x rows are padded by 64 bytes (rows 2^n floats apart
//    share L1 sets). Each row's next chunk, and from its last chunk on the next call's rows,
//    are prefetched;
//  - decode cost: one weight vector is decoded once for all the rows of x of a group.
//
// kF8E4M3 (exact as the fp8 dot kernels: only f32 summation error, bound in gemm_quant.h): 8
// codes become w * 2^-8 through f16 (fp8x8_to_f32, gemm_quant_avx2_common.h: E4M3 subnormals
// come out normal), multiplied with x as it is, the row scale times 2^8 applied to the finished
// sum. (vpmovsxbd + shift + and, one instruction less per 8 codes, made E4M3 subnormals f32
// denormals, which cost a microcode assist per FMA on Intel cores; here each decoded vector
// serves up to 6 rows of x.) Each (row of x, weight row) is one 8-lane sum over k in order,
// whatever the grouping, so a row's result does not depend on how many rows share the call.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/gemm_quant.h"
#include "kernels/cpu/gemm_quant_avx2_common.h"
#include "kernels/cpu/isa.h"

namespace sampan::cpu::gemm_detail {
namespace {

constexpr int kRows = 2;        // weight rows per register pass
constexpr int kCallRows = 16;   // weight rows per call (kRows at a time over each chunk)
static_assert(kCallRows <= kMaxQuantRows && kCallRows % kRows == 0);
static_assert(kAvx2BatchMaxM <= 16, "the chunks of x are sized for 16 rows");
// k per chunk: about kChunkXBytes of x, so that x, the call's sums (16 x m x 32 bytes) and the
// weights' stretch (16 x chunk bytes) share L1; longer chunks for fewer rows of x spread each
// pass's fixed cost (loading and storing its sums, converting scales) over more products.
constexpr int64_t kChunkXBytes = 12 << 10;

using avx2q::hsum;
using avx2q::step_lanes;

// Near-equal groups of at most max_m rows of x for the register passes: 16 -> 6, 5, 5 (fp8).
struct Groups {
  int n, base, big;
  int start(int g) const { return g * base + std::min(g, big); }
  int size(int g) const { return base + (g < big ? 1 : 0); }
};

Groups groups_of(int mb, int max_m) {
  const int n = (mb + max_m - 1) / max_m;
  return {n, mb / n, mb % n};
}

// ---- kF8E4M3 ----

constexpr int kF8MaxGroupM = 6;  // rows of x per register pass: 2 x 6 sums + 2 weights + x

inline int64_t f8_chunk(int mb) {
  return std::clamp<int64_t>(kChunkXBytes / (4 * mb) / 64 * 64, 128, 1024);
}

// Prepared row: x as it is, zero from k on, k rounded up to 8 plus 16 floats (the padding keeps
// rows 2^n floats apart off the same L1 sets).
int64_t f8_x_floats(int64_t k) { return (k + 7) / 8 * 8 + 16; }

void prep_f8(const float* x, int64_t k, float* out) {
  std::memcpy(out, x, static_cast<size_t>(k) * 4);
  for (int64_t c = k; c < f8_x_floats(k); ++c) out[c] = 0.0f;
}

// 8 E4M3 codes -> 8 f32 lanes holding w * 2^-8 (see the file comment).
inline __m256 f8x8(const uint8_t* p) {
  int64_t b;
  std::memcpy(&b, p, 8);
  return avx2q::fp8x8_to_f32(_mm_cvtsi64_si128(b));
}

// acc[i][r] (8 lanes at acc + (i * kRows + r) * 8) += x_i[0, n) . w_r[0, n) for MB rows of x,
// n a multiple of 8. Written with one array per weight row and unrolled loops so that GCC keeps
// the 12 sums in registers.
template <int MB, bool kPrefetch>
void f8_pass(const uint8_t* w0, const uint8_t* w1, int64_t n, const float* x, int64_t ldx,
             float* acc, int64_t ahead) {
  __m256 a0[MB], a1[MB];
  const float* xr[MB];
#pragma GCC unroll 6
  for (int i = 0; i < MB; ++i) {
    xr[i] = x + i * ldx;
    a0[i] = _mm256_load_ps(acc + (i * kRows) * 8);
    a1[i] = _mm256_load_ps(acc + (i * kRows + 1) * 8);
  }
#pragma GCC unroll 2
  for (int64_t c = 0; c < n; c += 8) {
    if (kPrefetch && (c & 63) == 0) {  // `ahead` bytes on in each row, once per line
      _mm_prefetch(reinterpret_cast<const char*>(w0 + c + ahead), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(w1 + c + ahead), _MM_HINT_T0);
    }
    const __m256 v0 = f8x8(w0 + c), v1 = f8x8(w1 + c);
#pragma GCC unroll 6
    for (int i = 0; i < MB; ++i) {
      const __m256 xv = _mm256_loadu_ps(xr[i] + c);
      a0[i] = _mm256_fmadd_ps(xv, v0, a0[i]);
      a1[i] = _mm256_fmadd_ps(xv, v1, a1[i]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < MB; ++i) {
    _mm256_store_ps(acc + (i * kRows) * 8, a0[i]);
    _mm256_store_ps(acc + (i * kRows + 1) * 8, a1[i]);
  }
}

using F8PassFn = void (*)(const uint8_t*, const uint8_t*, int64_t, const float*, int64_t, float*,
                          int64_t);

template <bool kPrefetch>
constexpr F8PassFn kF8Pass[kF8MaxGroupM + 1] = {
    nullptr,
    f8_pass<1, kPrefetch>,
    f8_pass<2, kPrefetch>,
    f8_pass<3, kPrefetch>,
    f8_pass<4, kPrefetch>,
    f8_pass<5, kPrefetch>,
    f8_pass<6, kPrefetch>};

// Sums of one call with mb rows of x: [kCallRows / kRows][mb][kRows][8 lanes].
constexpr int64_t kSumFloats = int64_t{kCallRows} * kAvx2BatchMaxM * 8;
inline float* pair_sums(float* acc, int pair, int mb) { return acc + pair * mb * kRows * 8; }

void dot_f8(const QuantRow* rows, const QuantFormat& f, const QuantX& x, float* out) {
  DenormalsKept keep;
  const int64_t k = f.k;
  const Groups g = groups_of(x.mb, kF8MaxGroupM);
  alignas(32) float acc[kSumFloats];
  std::memset(acc, 0, sizeof(float) * static_cast<size_t>(kCallRows * x.mb * 8));
  const int64_t full = k / 8 * 8, chunk = f8_chunk(x.mb);
  // The sums of row pair p for rows i0.. of x start at pair_sums(acc, p, x.mb) + i0 * kRows * 8.
  // ahead: the prefetch distance of the first group's pass (0: none).
  auto run = [&](const uint8_t* w0, const uint8_t* w1, int64_t n, int64_t c, int p,
                 int64_t ahead) {
    for (int j = 0; j < g.n; ++j) {
      const int i0 = g.start(j), size = g.size(j);
      // Indexed before the choice: GCC 12 at -O1 -fsanitize=undefined compiled
      // (cond ? table_a : table_b)[i] here into a null-`this` report (CI's Sanitize build).
      const F8PassFn pass = ahead != 0 && j == 0 ? kF8Pass<true>[size] : kF8Pass<false>[size];
      pass(w0, w1, n, x.x + i0 * x.ldx + c, x.ldx, pair_sums(acc, p, x.mb) + i0 * kRows * 8,
           ahead);
    }
  };
  for (int64_t c0 = 0; c0 < full; c0 += chunk) {
    const int64_t n = std::min(chunk, full - c0);
    // The next chunk of the row, or from the last chunk on the first chunk of the next row of
    // its stream (the next call's, gemm_decode_walk.h; any other address is only a wasted
    // prefetch).
    const int64_t ahead = c0 + chunk < full ? n : k - c0;
    for (int p = 0; p < kCallRows / kRows; ++p) {
      run(rows[2 * p].data + c0, rows[2 * p + 1].data + c0, n, c0, p, ahead);
    }
  }
  if (full < k) {  // the last k % 8 codes, without reading past the rows (x is zero there)
    for (int p = 0; p < kCallRows / kRows; ++p) {
      alignas(8) uint8_t t0[8] = {}, t1[8] = {};
      std::memcpy(t0, rows[2 * p].data + full, static_cast<size_t>(k - full));
      std::memcpy(t1, rows[2 * p + 1].data + full, static_cast<size_t>(k - full));
      run(t0, t1, 8, full, p, 0);
    }
  }
  for (int p = 0; p < kCallRows / kRows; ++p) {
    for (int r = 0; r < kRows; ++r) {
      float s;
      std::memcpy(&s, rows[2 * p + r].scales, 4);
      s *= 256.0f;  // the weights decoded to w * 2^-8
      const float* a = pair_sums(acc, p, x.mb);
      for (int i = 0; i < x.mb; ++i) {
        out[i * kCallRows + 2 * p + r] = hsum(_mm256_load_ps(a + (i * kRows + r) * 8)) * s;
      }
    }
  }
}

// ---- kI4 ----
//
// The one-row kernel multiplies u = q + 8 bytes with x16 split into hi and lo bytes (vpmaddubsw:
// two products per weight and row of x, sums in int16, widened per group). Here the packed
// nibbles are widened once per weight row to int16 q (three shifts left and four arithmetic
// shifts right per 64 weights, no offset) and vpmaddwd'ed with x16 as int16: one product per
// weight and row of x, straight into int32; zero points are subtracted from the widened q.
// Word L of a 32-byte load holds weights 4L..4L+3 in its four nibbles, so P_p (nibble p of every
// word) holds weight 4L + p in word L, and prepared x holds x16 of element 4L + p in word L of
// its vector p: int32 lane j of the sum then covers weights 8j..8j+7 of each 64-weight chunk,
// the same lanes as the one-row kernel's. Both form the same x16 (avx2q::group_scale,
// quantize8), the same exact integer sum of (q - z) x16 per lane and group, and the same f32 steps
// (acc = fma(float(t), s_w * s_x, acc) per group, then avx2q::hsum), so a row of x gives bit for
// bit the result it gets alone. Bounds as in gemm_quant.h: |t| < 16 * 15 * 32639 < 2^24.

// Prepared row: steps of S = i4_step(group) weights; a step is S / 64 chunks of four vectors of
// 16 int16 (128 bytes: vector p, word L = x16 of the chunk's element 4L + p), then 8 floats s_x
// for its int32 lanes (group 32: lanes 0..3 the step's first group, 4..7 its second, 0 past k).
constexpr int64_t i4_step_bytes(int64_t step) { return 2 * step + 32; }

int64_t i4_x_floats(int64_t k, int64_t group) {
  const int64_t step = avx2q::i4_step(group);
  return (k + step - 1) / step * i4_step_bytes(step) / 4 + 16;  // + 64 bytes: see the file comment
}

// x16 of x[c, c + 64) (group scales inv_a for [c, c + 32), inv_b for the rest) -> dst, 128 bytes.
void prep_i4_chunk(const float* x, int64_t c, int64_t k, __m256 inv_a, __m256 inv_b,
                   uint8_t* dst) {
  __m256i v[8];  // v[t]: elements 8t..8t+7 as int32 (lanes 0..3: word L = 2t, 4..7: L = 2t + 1)
  for (int t = 0; t < 8; ++t) v[t] = avx2q::quantize8(x, c + 8 * t, k, t < 4 ? inv_a : inv_b);
  // A 4 x 4 transpose of 32-bit lanes within each 128-bit half of v[4h .. 4h + 3] gives, for
  // each p, the words L = 8h + 0, 2, 4, 6 (low half) and 8h + 1, 3, 5, 7 (high half).
  __m256i tp[2][4];
  for (int h = 0; h < 2; ++h) {
    const __m256i a = _mm256_unpacklo_epi32(v[4 * h], v[4 * h + 1]);
    const __m256i b = _mm256_unpackhi_epi32(v[4 * h], v[4 * h + 1]);
    const __m256i c2 = _mm256_unpacklo_epi32(v[4 * h + 2], v[4 * h + 3]);
    const __m256i d = _mm256_unpackhi_epi32(v[4 * h + 2], v[4 * h + 3]);
    tp[h][0] = _mm256_unpacklo_epi64(a, c2);
    tp[h][1] = _mm256_unpackhi_epi64(a, c2);
    tp[h][2] = _mm256_unpacklo_epi64(b, d);
    tp[h][3] = _mm256_unpackhi_epi64(b, d);
  }
  for (int p = 0; p < 4; ++p) {
    // |x16| <= 32639: the saturating pack is exact. Per half: even L (low), odd L (high);
    // interleaving the halves' words puts L in order.
    const __m256i r = _mm256_packs_epi32(tp[0][p], tp[1][p]);
    const __m256i sw = _mm256_permute2x128_si256(r, r, 0x01);
    const __m256i lo = _mm256_unpacklo_epi16(r, sw), hi = _mm256_unpackhi_epi16(r, sw);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32 * p),
                        _mm256_permute2x128_si256(lo, hi, 0x20));
  }
}

void prep_i4(const float* x, int64_t k, int64_t group, float* out) {
  const int64_t step = avx2q::i4_step(group), bytes = i4_step_bytes(step);
  uint8_t* dst = reinterpret_cast<uint8_t*>(out);
  for (int64_t s0 = 0; s0 < k; s0 += step, dst += bytes) {
    const avx2q::XScale a = avx2q::group_scale(x, s0, group);
    const avx2q::XScale b = group != 32     ? a
                            : s0 + 32 < k ? avx2q::group_scale(x, s0 + 32, 32)
                                          : avx2q::XScale{};
    for (int64_t c = 0; c < step / 64; ++c) {
      prep_i4_chunk(x, s0 + 64 * c, k, _mm256_set1_ps(a.inv), _mm256_set1_ps(b.inv),
                    dst + 128 * c);
    }
    float* sx = reinterpret_cast<float*>(dst + 2 * step);
    for (int l = 0; l < 8; ++l) sx[l] = l < 4 ? a.sx : b.sx;
  }
  for (int i = 0; i < 16; ++i) out[i4_x_floats(k, group) - 16 + i] = 0.0f;
}

constexpr int kI4MaxChunkGroups = 64;

// Scales (f32) and zero points (int16) of a weight row's groups [g0, g0 + n), 0 past them.
struct I4ChunkScales {
  alignas(32) float sw[kI4MaxChunkGroups + 8];
  alignas(32) int16_t z[kI4MaxChunkGroups + 8];
};

void chunk_scales(const QuantRow& row, const QuantFormat& f, int64_t g0, int n,
                  I4ChunkScales& cs) {
  const uint16_t* src = static_cast<const uint16_t*>(row.scales) + g0;
  for (int g = 0; g < n; g += 8) {
    alignas(16) uint16_t h[8] = {};
    std::memcpy(h, src + g, static_cast<size_t>(std::min(8, n - g)) * 2);
    const __m128i hv = _mm_load_si128(reinterpret_cast<const __m128i*>(h));
    // As the one-row kernel converts them (exact either way).
    _mm256_store_ps(cs.sw + g, f.bf16_scales ? _mm256_castsi256_ps(_mm256_slli_epi32(
                                                   _mm256_cvtepu16_epi32(hv), 16))
                                             : _mm256_cvtph_ps(hv));
  }
  cs.sw[n] = 0.0f;  // the second group of a last half step (group 32)
  if (row.zeros != nullptr) {
    for (int g = 0; g < n; ++g) cs.z[g] = row.zeros[g0 + g];
    cs.z[n] = 0;
  } else if (f.asymmetric) {
    std::memset(cs.z, 0, sizeof(int16_t) * static_cast<size_t>(n + 1));
  }
}

template <int G>
inline __m256i step_zeros(const int16_t* z, int j) {
  if (G == 32) return _mm256_setr_m128i(_mm_set1_epi16(z[2 * j]), _mm_set1_epi16(z[2 * j + 1]));
  return _mm256_set1_epi16(z[j]);
}

// a += the pairwise int16 products of q and x: on AVX-VNNI one VEX vpdpwssd (kVnni;
// dpwssd_vex, vec_avx2.h), else vpmaddwd and vpaddd (kept from being hoisted). The same int32
// sums either way (no lane can overflow: see above), so the batched results stay bit for bit
// the one-row kernel's.
template <bool kVnni>
inline void madd_acc(__m256i& a, __m256i q, __m256i x) {
  if constexpr (kVnni) {
    dpwssd_vex(a, q, x);
  } else {
    a = _mm256_add_epi32(a, _mm256_madd_epi16(q, x));
    __asm__("" : "+x"(a));
  }
}

// acc[i] (8 lanes at acc + i * 8) += the steps [0, n_steps) of one weight row (w: its bytes of
// the chunk) times MB rows of prepared x (x: the chunk's first step of row 0, rows ldx bytes
// apart). kHalf: the last step holds one group of 32 (its second half is zero). cs: the chunk's
// scales. Sums of a step stay in registers; acc lives in memory (the call's sums for 16 rows).
template <int G, int MB, bool kAsym, bool kVnni>
void i4_pass(const uint8_t* w, int n_steps, bool half, const I4ChunkScales& cs, const uint8_t* x,
             int64_t ldx, float* acc, const uint8_t* prefetch) {
  constexpr int64_t S = G < 64 ? 64 : G;
  constexpr int C = static_cast<int>(S / 64);
  constexpr int64_t kStepBytes = i4_step_bytes(S);
  for (int st = 0; st < n_steps; ++st) {
    const bool hs = half && st == n_steps - 1;
    if (prefetch != nullptr) {
      _mm_prefetch(reinterpret_cast<const char*>(prefetch + st * S / 2), _MM_HINT_T0);
    }
    __m256i t[MB];
    __m256i zv = _mm256_setzero_si256();
    if (kAsym) zv = step_zeros<G>(cs.z, st);
#pragma GCC unroll 2
    for (int c = 0; c < C; ++c) {
      const uint8_t* wp = w + st * S / 2 + 32 * c;
      const __m256i b =
          hs ? _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wp)))
             : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp));
      __m256i q[4] = {_mm256_srai_epi16(_mm256_slli_epi16(b, 12), 12),
                      _mm256_srai_epi16(_mm256_slli_epi16(b, 8), 12),
                      _mm256_srai_epi16(_mm256_slli_epi16(b, 4), 12), _mm256_srai_epi16(b, 12)};
      if (kAsym) {
        for (int p = 0; p < 4; ++p) q[p] = _mm256_sub_epi16(q[p], zv);
      }
      // Each product goes into its row's sum at once, the sum pinned in a register: left to
      // itself GCC issued all 4 x MB products first and spilled them (measured 1.4x slower).
#pragma GCC unroll 8
      for (int i = 0; i < MB; ++i) {
        const __m256i* xv =
            reinterpret_cast<const __m256i*>(x + i * ldx + st * kStepBytes + 128 * c);
        __m256i a = c > 0 ? t[i] : _mm256_setzero_si256();
        for (int p = 0; p < 4; ++p) madd_acc<kVnni>(a, q[p], _mm256_loadu_si256(xv + p));
        t[i] = a;
      }
    }
    const __m256 sw = step_lanes<G>(cs.sw, st);
#pragma GCC unroll 8
    for (int i = 0; i < MB; ++i) {
      const float* sx = reinterpret_cast<const float*>(x + i * ldx + st * kStepBytes + 2 * S);
      const __m256 sws = _mm256_mul_ps(sw, _mm256_loadu_ps(sx));
      _mm256_store_ps(acc + i * 8, _mm256_fmadd_ps(_mm256_cvtepi32_ps(t[i]), sws,
                                                   _mm256_load_ps(acc + i * 8)));
    }
  }
}

// The x8 form (GemmPrecision::kBf16: vnni_x8; prepared x and bounds in gemm_quant_i4x8_avx2.cc
// and gemm_quant_avx2_common.h): x rounded to int8 per group, so the bytes u = q + 8 (a xor,
// two ands and a shift per 64 weights, shared by the rows of x) multiply x8 directly, one
// vpmaddubsw per 32 weights and row of x into int16 pair sums, widened per step; the same t
// and f32 steps as the one-row x8 kernel, bit for bit.
template <int G, int MB, bool kAsym, bool kVnni>
void i4x8_pass(const uint8_t* w, int n_steps, bool half, const I4ChunkScales& cs,
               const uint8_t* x, int64_t ldx, float* acc, const uint8_t* prefetch) {
  constexpr int64_t S = avx2q::i4_step(G);
  constexpr int C = static_cast<int>(S / 64);
  constexpr int64_t kStepBytes = avx2q::i4x8_step_bytes(S);
  for (int st = 0; st < n_steps; ++st) {
    const bool hs = half && st == n_steps - 1;
    if (prefetch != nullptr) {
      _mm_prefetch(reinterpret_cast<const char*>(prefetch + st * S / 2), _MM_HINT_T0);
    }
    __m256i t[MB];
#pragma GCC unroll 2
    for (int c = 0; c < C; ++c) {
      const uint8_t* wp = w + st * S / 2 + 32 * c;
      __m256i lo, hi;
      if (hs) {
        avx2q::i4_unsigned_nibbles<true>(wp, lo, hi);
      } else {
        avx2q::i4_unsigned_nibbles<false>(wp, lo, hi);
      }
#pragma GCC unroll 8
      for (int i = 0; i < MB; ++i) {
        const __m256i* xv =
            reinterpret_cast<const __m256i*>(x + i * ldx + st * kStepBytes + 64 * c);
        if constexpr (kVnni) {
          if (c == 0) t[i] = _mm256_setzero_si256();
          dpbusd_vex(t[i], lo, _mm256_loadu_si256(xv));
          dpbusd_vex(t[i], hi, _mm256_loadu_si256(xv + 1));
        } else {
          const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_loadu_si256(xv)),
                                             _mm256_maddubs_epi16(hi, _mm256_loadu_si256(xv + 1)));
          t[i] = c == 0 ? p : _mm256_add_epi16(t[i], p);
        }
      }
    }
    __m256i zc = _mm256_setzero_si256();  // 8 + z in both int16 halves of each lane
    if (kAsym) zc = _mm256_add_epi16(step_zeros<G>(cs.z, st), _mm256_set1_epi16(8));
    const __m256 sw = step_lanes<G>(cs.sw, st);
#pragma GCC unroll 8
    for (int i = 0; i < MB; ++i) {
      const uint8_t* xe = x + i * ldx + st * kStepBytes + 64 * C;
      const __m256i* xt = reinterpret_cast<const __m256i*>(xe);
      __m256i v = kVnni ? t[i] : _mm256_madd_epi16(t[i], _mm256_set1_epi16(1));
      v = kAsym ? _mm256_sub_epi32(v, _mm256_madd_epi16(_mm256_loadu_si256(xt + 1), zc))
                : _mm256_add_epi32(v, _mm256_loadu_si256(xt));
      const __m256 sws =
          _mm256_mul_ps(sw, _mm256_loadu_ps(reinterpret_cast<const float*>(xe + 64)));
      _mm256_store_ps(acc + i * 8, _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), sws,
                                                   _mm256_load_ps(acc + i * 8)));
    }
  }
}

constexpr int kI4MaxGroupM = 8;  // 4 widened weight vectors + 8 int32 sums + zeros + temporaries

// Weights per chunk: about kChunkXBytes of prepared x (2.25 bytes per weight and row of x),
// a multiple of 256 (so of every step), at most kI4MaxChunkGroups groups of 32.
inline int64_t i4_chunk(int mb) {
  return std::clamp<int64_t>(kChunkXBytes * 4 / (9 * mb) / 256 * 256, 256, 32 * kI4MaxChunkGroups);
}

using I4PassFn = void (*)(const uint8_t*, int, bool, const I4ChunkScales&, const uint8_t*,
                          int64_t, float*, const uint8_t*);

// kX8: the x8 passes.
template <int G, int MB, bool kAsym, bool kVnni, bool kX8>
constexpr I4PassFn kI4PassFn = kX8 ? i4x8_pass<G, MB, kAsym, kVnni> : i4_pass<G, MB, kAsym, kVnni>;

template <int G, bool kAsym, bool kVnni, bool kX8>
constexpr I4PassFn kI4Pass[kI4MaxGroupM + 1] = {
    nullptr,
    kI4PassFn<G, 1, kAsym, kVnni, kX8>,
    kI4PassFn<G, 2, kAsym, kVnni, kX8>,
    kI4PassFn<G, 3, kAsym, kVnni, kX8>,
    kI4PassFn<G, 4, kAsym, kVnni, kX8>,
    kI4PassFn<G, 5, kAsym, kVnni, kX8>,
    kI4PassFn<G, 6, kAsym, kVnni, kX8>,
    kI4PassFn<G, 7, kAsym, kVnni, kX8>,
    kI4PassFn<G, 8, kAsym, kVnni, kX8>};

// kX8: x rounded to int8 (the x8 passes and their prepared x), else x16.
template <int G, bool kAsym, bool kX8>
void dot_i4_g(const QuantRow* rows, const QuantFormat& f, const QuantX& x, float* out) {
  constexpr int64_t S = G < 64 ? 64 : G;
  constexpr int64_t kStepBytes = kX8 ? avx2q::i4x8_step_bytes(S) : i4_step_bytes(S);
  const int64_t k = f.k, ldx = x.ldx * 4;
  const int mb = x.mb;
  const Groups g = groups_of(mb, kI4MaxGroupM);
  alignas(32) float acc[kSumFloats];
  std::memset(acc, 0, sizeof(float) * static_cast<size_t>(kCallRows * mb * 8));
  const uint8_t* xb = reinterpret_cast<const uint8_t*>(x.x);
  I4ChunkScales cs;
  const int64_t chunk = i4_chunk(mb);
  const I4PassFn* pass =
      has_vex_vnni() ? kI4Pass<G, kAsym, true, kX8> : kI4Pass<G, kAsym, false, kX8>;
  for (int64_t c0 = 0; c0 < k; c0 += chunk) {
    const int64_t n = std::min(chunk, k - c0);
    const int n_steps = static_cast<int>((n + S - 1) / S);
    const bool half = G == 32 && n % 64 != 0;
    const uint8_t* xc = xb + c0 / S * kStepBytes;
    for (int r = 0; r < kCallRows; ++r) {
      chunk_scales(rows[r], f, c0 / G, static_cast<int>(n / G), cs);
      const uint8_t* w = rows[r].data + c0 / 2;
      // The next chunk of the row, or from the last chunk on the first chunk of the next row of
      // its stream (the next call's row r, gemm_decode_walk.h; any other address is only a
      // wasted prefetch).
      const uint8_t* ahead = c0 + chunk < k ? w + chunk / 2 : w + (k - c0) / 2;
      for (int j = 0; j < g.n; ++j) {
        const int i0 = g.start(j);
        pass[g.size(j)](w, n_steps, half, cs, xc + i0 * ldx, ldx, acc + (r * mb + i0) * 8,
                        j == 0 ? ahead : nullptr);
      }
    }
  }
  for (int r = 0; r < kCallRows; ++r) {
    for (int i = 0; i < mb; ++i) {
      out[i * kCallRows + r] = hsum(_mm256_load_ps(acc + (r * mb + i) * 8));
    }
  }
}

template <bool kAsym, bool kX8>
void dot_i4_z(const QuantRow* rows, const QuantFormat& f, const QuantX& x, float* out) {
  switch (f.group) {
    case 32: return dot_i4_g<32, kAsym, kX8>(rows, f, x, out);
    case 64: return dot_i4_g<64, kAsym, kX8>(rows, f, x, out);
    default: return dot_i4_g<128, kAsym, kX8>(rows, f, x, out);
  }
}

// QuantFormat::asymmetric: some rows may have zero points (the others read as z = 0).
template <bool kX8>
void dot_i4(const QuantRow* rows, const QuantFormat& f, const QuantX& x, float* out) {
  if (f.asymmetric) return dot_i4_z<true, kX8>(rows, f, x, out);
  return dot_i4_z<false, kX8>(rows, f, x, out);
}

QuantKernels make_table(bool x8) {
  QuantKernels t = quant_kernels_avx2();
  t.i4 = {kCallRows, kAvx2BatchMaxM, x8 ? dot_i4<true> : dot_i4<false>};
  t.i4_x_floats = x8 ? avx2q::i4x8_x_floats : i4_x_floats;
  t.prep_i4 = x8 ? avx2q::prep_i4_x8 : prep_i4;
  t.f8 = {kCallRows, kAvx2BatchMaxM, dot_f8};
  t.f8_x_floats = f8_x_floats;
  t.prep_f8 = prep_f8;
  return t;
}

}  // namespace

const QuantKernels& quant_kernels_avx2_batch() {
  static const QuantKernels table = make_table(false);
  return table;
}

const QuantKernels& quant_kernels_avx2_batch_x8() {
  static const QuantKernels table = make_table(true);
  return table;
}

}  // namespace sampan::cpu::gemm_detail
