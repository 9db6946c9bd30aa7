// AVX2 kernels for quantized weights (see gemm_quant.h): the fallback for CPUs without AVX-512
// (or SAMPAN_CPU_ISA=avx2). Decode must stream the weights at memory speed on one core, and a
// Zen 3 core sustains about three vector operations per cycle in these loops, so the dot kernels
// spend as few operations per weight as the precision allows. (The previous f32 kernels, ~12
// operations per 16 int4 weights, streamed 25 % of the read bandwidth for int4, 48 % for fp8.)
//
// kI4 dot kernel: integer arithmetic. prep_i4 rounds x per weight group to x16 = 256 hi + lo
// (hi, lo signed bytes) with an f32 scale per (row of x, group); the kernel reads 32 packed bytes
// (64 weights), turns the nibbles into u = q + 8 (0..15) with one xor, two ands and a shift, and
// vpmaddubsw multiplies them with the hi and the lo bytes of x, summed in int16 over the group.
// Per group: vpmaddwd by 256 and 1 to int32, minus (8 + z) sum(x16) (prepared per lane), so the
// sum is of (q - z) x16, converted to f32 (exact) and multiplied by s_w * s_x. The x rounding is
// the one loss (bound in gemm_quant.h). On AVX-VNNI CPUs (the avx2_vnni level: Alder Lake,
// Sierra Forest) VEX vpdpbusd sums the byte products straight into int32 lanes instead (the same
// integers): measured on Emerald Rapids at SAMPAN_CPU_ISA=avx2_vnni, old and new alternating,
// bench_gemm_quant gemv --cached int4g128 m = 1, one core: 14.7-16.6 -> 16.4-19.0 GB/s;
// `sampan bench --quantization int4` decode, 1 thread 23.3-23.4 -> 23.9-24.0 tok/s, 2 threads
// (memory-bound) 44.5-45.0 -> 45.1-45.5.
//
// kF8E4M3 dot kernel: the f32 is built directly from the byte. vpmaddwd by 2^12 moves a byte
// held in the high half of a 16-bit word to bits 20..27 of a 32-bit lane, sign-extended, and an
// and keeps the sign and the 7 exponent/mantissa bits: the lane is then w * 2^-120 as an f32,
// exactly, E4M3 subnormals as f32 denormals. x is prepared as x * 2^64 (in the order the kernel
// decodes), so the products land at w * x * 2^-56, far from underflow; the row scale times 2^56
// is applied once to the finished sum. The denormal weights need MXCSR.DAZ clear (and FTZ for
// sums below 2^-70), which the kernel ensures for its own duration, and they cost an FMA assist
// each on Intel cores, where blocks holding E4M3 subnormals are multiplied with those codes
// zeroed and their products added apart (f8_take_subnormals; gemm_quant_avx2_common.h). AMD
// cores multiply denormals at full speed, so there (f8_split_subnormals) the test for them, 7 of
// ~36 vector operations per 64 weights at m = 1, is left out. NaN codes (0x7f, 0xff) read as
// +-480 (quantizers never write them).
//
// Both take R = 4 rows per call, one of each of 4 streams (gemm_decode_walk.h). At m = 1 they
// read the 4 rows together, 64 bytes (fp8) or a step (int4) of each in turn, as the 16-bit
// kernels do; more rows of x decode the rows one after another (int4 takes the rows of x two at
// a time). One row at a time, a Zen 3 core streamed weights at ~0.7 of its read bandwidth
// however fast the kernel computed. Measured on a 2-core Zen 3 VM (bench_gemm_quant gemv, m = 1,
// 1 / 2 threads, probe 21.5 / 33 GB/s, three alternating rounds): fp8 streamed 14.4-15.4 /
// 26-29 -> 18.9-20.2 / 34-39 GB/s (from L3: 16 -> 21 / 42; the rows together alone gave 1.07x,
// the subnormal test left out alone nothing: each bound the other), int4 g128 from L3 14.3-15.2
// -> 15.8-16.8 at 1 thread (compute-bound there: the x16 products).
#include <immintrin.h>

#include <bit>
#include <cstring>
#include <limits>

#include "kernels/cpu/gemm_quant.h"
#include "kernels/cpu/gemm_quant_avx2_common.h"
#include "kernels/cpu/isa.h"

namespace sampan::cpu::gemm_detail {
namespace {

using avx2q::group_scale;
using avx2q::hsum;
using avx2q::i4_step;
using avx2q::load32;
using avx2q::quantize8;
using avx2q::step_lanes;
using avx2q::XScale;
using avx2q::fp8x8_to_f32;

// Rows per call, one of each of 4 streams (gemm_decode_walk.h); each is decoded whole before the
// next. (When the 4 rows were consecutive rows of W, interleaving them measured 10.4 GB/s against
// 13.3 one after another, int4 m = 1 streaming on a loaded machine, medians of 5: adjacent rows
// share pages; far-apart ones interleaved stream faster, as gemm_decode_walk.h measured.)
constexpr int kRows = 4;
constexpr int kMaxM = 4;
// Software prefetch this far ahead in the stream, one per 64-byte line (T0; T1 and NTA measured
// the same). Measured, 2048 x 2048 m = 1 streaming, 1 thread, medians of 5 (GB/s), quiet machine:
// int4 768: 11.6, 1024: 13.2, 1536: 13.7, 2048: 13.3, 3072: 12.3; fp8 768: 14.2, 1024: 15.0,
// 1536: 14.6, 2048: 15.2, 3072: 13.8. One call (4 rows) ahead instead: int4 11.1 (loaded).
constexpr int64_t kPrefetchBytes = avx2q::kI4PrefetchBytes;

inline float scale_at(const void* scales, int64_t g, bool bf16) {
  const uint16_t h = static_cast<const uint16_t*>(scales)[g];
  return bf16 ? std::bit_cast<float>(static_cast<uint32_t>(h) << 16) : _cvtsh_ss(h);
}

inline __m128i load8(const uint8_t* p) {
  int64_t v;
  std::memcpy(&v, p, 8);
  return _mm_cvtsi64_si128(v);
}


inline void prefetch(const uint8_t* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
}

// ---- kI4: prepared x ----
//
// x16 = 256 hi + lo with hi and lo in [-128, 127] reaches 256 * 127 + 127 = 32639 (not 32767):
// x is scaled per group so that its absmax maps to 32639.

// The prepared row is a sequence of steps of S = max(group, 64) weights (for group 32 the last
// step of a k that is not a multiple of 64 holds one group, the rest zero), then the f32 scales
// s_x of the groups (padded with zeros to a multiple of 8). A step is S / 64 chunks of 128 bytes
// and 64 bytes:
//   chunk:  [0, 32) hi of x[2b], [32, 64) hi of x[2b+1], [64, 96) lo of x[2b], [96, 128) lo of
//           x[2b+1], for the 32 bytes b of the weights (byte b: weights 2b, low nibble, and 2b+1)
//   +0:  8 int32 lanes j: 8 sum(x16) over the weights 8j..8j+7 of every chunk of the step (what
//        the kernel's int32 lane j sums over), to turn its sum of u x16 into one of q x16
//   +32: the same lanes as int16 pairs (sum of hi, sum of lo), for zero points
constexpr int64_t i4_step_bytes(int64_t step) { return 2 * step + 64; }
constexpr int64_t i4_steps(int64_t k, int64_t group) {
  return (k + i4_step(group) - 1) / i4_step(group);
}
constexpr int64_t i4_scale_floats(int64_t k, int64_t group) { return (k / group + 7) / 8 * 8; }

int64_t i4_x_floats(int64_t k, int64_t group) {
  return i4_steps(k, group) * i4_step_bytes(i4_step(group)) / 4 + i4_scale_floats(k, group);
}

// One chunk: x[c, c + 64) -> dst [128 bytes], x16 scaled by inv_a for [c, c + 32) and inv_b for
// the rest; adds the chunk's per-lane sums of hi and of lo (int16 pairs per int32 lane) to sh, sl.
void prep_i4_chunk(const float* x, int64_t c, int64_t k, __m256 inv_a, __m256 inv_b, uint8_t* dst,
                   __m256i& sh, __m256i& sl) {
  // Per 128-bit lane (4 element pairs, bytes [lo, hi] per element): the lo bytes of the even
  // elements, hi of even, lo of odd, hi of odd, as four dwords.
  const __m256i by_field = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,
                                            0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  __m256i p[4];
  for (int t = 0; t < 4; ++t) {
    const __m256 inv = t < 2 ? inv_a : inv_b;
    const __m256i v0 = quantize8(x, c + 16 * t, k, inv), v1 = quantize8(x, c + 16 * t + 8, k, inv);
    // |x16| <= 32639: the int16 packing is exact. Element order is restored by the permute.
    __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(v0, v1), 0xd8);
    // lo = x16 mod 256 as a signed byte, hi = (x16 - lo) / 256 = high byte of x16 + 128; the low
    // byte of x16 + 128 is lo ^ 0x80, so one add and one xor give the bytes [lo, hi].
    w = _mm256_xor_si256(_mm256_add_epi16(w, _mm256_set1_epi16(128)), _mm256_set1_epi16(0x0080));
    p[t] = _mm256_shuffle_epi8(w, by_field);
  }
  // Lanes of p[0..3] are element pairs 4L..4L+3 for L = 0..7 (p[t] holds L = 2t, 2t + 1);
  // gather each field's dwords in L order.
  const __m256i a = _mm256_unpacklo_epi32(p[0], p[1]), b = _mm256_unpacklo_epi32(p[2], p[3]);
  const __m256i c2 = _mm256_unpackhi_epi32(p[0], p[1]), d = _mm256_unpackhi_epi32(p[2], p[3]);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m256i el = _mm256_permutevar8x32_epi32(_mm256_unpacklo_epi64(a, b), order);
  const __m256i eh = _mm256_permutevar8x32_epi32(_mm256_unpackhi_epi64(a, b), order);
  const __m256i ol = _mm256_permutevar8x32_epi32(_mm256_unpacklo_epi64(c2, d), order);
  const __m256i oh = _mm256_permutevar8x32_epi32(_mm256_unpackhi_epi64(c2, d), order);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), eh);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32), oh);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 64), el);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 96), ol);
  const __m256i ones = _mm256_set1_epi8(1);
  sh = _mm256_add_epi16(sh, _mm256_add_epi16(_mm256_maddubs_epi16(ones, eh),
                                             _mm256_maddubs_epi16(ones, oh)));
  sl = _mm256_add_epi16(sl, _mm256_add_epi16(_mm256_maddubs_epi16(ones, el),
                                             _mm256_maddubs_epi16(ones, ol)));
}

void prep_i4(const float* x, int64_t k, int64_t group, float* out) {
  const int64_t s = i4_step(group), chunks = s / 64, step_bytes = i4_step_bytes(s);
  uint8_t* dst = reinterpret_cast<uint8_t*>(out);
  float* sx = out + i4_steps(k, group) * step_bytes / 4;
  for (int64_t gi = k / group; gi < i4_scale_floats(k, group); ++gi) sx[gi] = 0.0f;
  for (int64_t s0 = 0; s0 < k; s0 += s, dst += step_bytes) {
    const XScale a = group_scale(x, s0, group);
    const XScale b = group != 32 ? a : s0 + 32 < k ? group_scale(x, s0 + 32, 32) : XScale{};
    sx[s0 / group] = a.sx;
    if (group == 32 && s0 + 32 < k) sx[s0 / group + 1] = b.sx;
    __m256i sh = _mm256_setzero_si256(), sl = sh;
    for (int64_t c = 0; c < chunks; ++c) {
      prep_i4_chunk(x, s0 + 64 * c, k, _mm256_set1_ps(a.inv), _mm256_set1_ps(b.inv), dst + 128 * c,
                    sh, sl);
    }
    // Per int32 lane (16 weights at most): |sum of hi| <= 16 * 128, an int16; |8 sum x16| < 2^23.
    uint8_t* tail = dst + 128 * chunks;
    const __m256i ones16 = _mm256_set1_epi16(1);
    const __m256i h32 = _mm256_madd_epi16(sh, ones16), l32 = _mm256_madd_epi16(sl, ones16);
    const __m256i sum = _mm256_add_epi32(_mm256_slli_epi32(h32, 8), l32);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(tail), _mm256_slli_epi32(sum, 3));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(tail + 32),
                        _mm256_blend_epi16(h32, _mm256_slli_epi32(l32, 16), 0xaa));
  }
}

// ---- kI4 dot kernel ----
//
// Exactness, per step and int32 lane j (the 8 C weights 8j..8j+7 of the step's C = S / 64 chunks,
// C <= 2), with u = q + 8 in [0, 15] and |hi|, |lo| <= 128:
//  - vpmaddubsw: a pair u h + u' h' is at most 2 * 15 * 128 = 3840 < 2^15: no saturation;
//  - the int16 sums add 2 C pairs: at most 4 * 3840 = 15360 < 2^15;
//  - vpmaddwd by 256 and 1, added: the lane's sum of u x16, at most 16 * 15 * 32639 in size;
//    minus the prepared 8 sum(x16), or with zero points minus (8 + z) sum(x16) (vpmaddwd of the
//    prepared pairs by (256 (8 + z), 8 + z)): t = sum (q - z) x16. |q - z| <= 15, so
//    |t| <= 16 * 15 * 32639 = 7833360 < 2^24: exact in int32 and after vcvtdq2ps.
// The f32 part: per lane, t * fl(s_w s_x) accumulated with one FMA per step, then 8 lanes
// summed: two roundings per term plus k / S + 3 additions, well inside 1e-5 relative.
//
// Cost per 128 weights and row of x: 8 vpmaddubsw, 6 int16 adds, 8 nibble ops (shared by the
// rows of x), 2 vpmaddwd, 2 int32 adds, convert, FMA: ~28 vector operations. Measured (1 thread,
// k = 2048, g = 128, m = 1, weights in L1, best of 8 runs): 11.9 weights per cycle at 3.2 GHz,
// ~19 GB/s of int4 (11.5 with the int16 sums started from a prepared -8 sum(x16) instead); the
// loop runs at ~3 vector operations per cycle. Through cpu::gemm from L2/L3: 15.6-17.7 GB/s.
//
// Scales are prepared per block of 8 groups: s_w of the row (one vcvtph2ps) times s_x of each
// row of x, and the zero-point pairs, into small arrays the steps broadcast from. Measured no
// faster than a scalar conversion per step at g = 128 (13.2 GB/s both, loaded machine); kept
// because it gives g = 32 (two groups per step) the same broadcast path.

template <int MT>
struct I4Block {
  alignas(32) float sws[MT][8];  // s_w * s_x per group of the block
  alignas(32) int32_t zp[8];     // int16 pair (256 (8 + z), 8 + z) per group of the block
};

// Fills blk for groups [g0, g0 + 8) of the row's ng groups (those past it read as scale 0).
template <int MT, bool kAsym>
inline void i4_block_scales(const QuantRow& row, bool bf16, int64_t ng, const float* const* sx,
                            int64_t g0, I4Block<MT>& blk) {
  const __m256 sw = avx2q::i4_scales8(row, bf16, ng, g0);
  for (int i = 0; i < MT; ++i) {
    _mm256_store_ps(blk.sws[i], _mm256_mul_ps(sw, _mm256_loadu_ps(sx[i] + g0)));
  }
  if (kAsym) {
    const __m256i c = avx2q::i4_offsets8(row, ng, g0);
    // int16 pair (256 c, c), c = 8 + z in [0, 15].
    _mm256_store_si256(reinterpret_cast<__m256i*>(blk.zp),
                       _mm256_blend_epi16(_mm256_slli_epi32(c, 8), _mm256_slli_epi32(c, 16), 0xaa));
  }
}

// Accumulates one step (S weights; w: the row's bytes of the step; step j of its block) times
// MT rows of x into acc[0..MT). kVnni (AVX-VNNI CPUs): the byte products go straight into int32
// lanes by vpdpbusd instead of vpmaddubsw into int16 pairs, added, then widened by vpmaddwd. The
// int16 lanes never saturate (4 products of at most 15 * 128 per chunk, C <= 2 chunks: 15360),
// so both forms give the same int32 lanes, and the same outputs bit for bit (the batched kernels'
// promise that a row's result does not depend on the batch holds at either level).
template <int G, int MT, bool kHalf, bool kAsym, bool kVnni>
inline void i4_step_acc(const uint8_t* w, const uint8_t* xs, int64_t ldx_bytes,
                        const I4Block<MT>& blk, int j, __m256* acc) {
  constexpr int64_t S = G < 64 ? 64 : G;
  constexpr int C = static_cast<int>(S / 64);
  __m256i ah[MT], al[MT];
#pragma GCC unroll 2
  for (int c = 0; c < C; ++c) {
    // A half step's upper lanes are 0 (u = 0 there, and x is 0 there too).
    __m256i lo, hi;
    avx2q::i4_unsigned_nibbles<kHalf>(w + 32 * c, lo, hi);
#pragma GCC unroll 4
    for (int i = 0; i < MT; ++i) {
      const uint8_t* xi = xs + i * ldx_bytes + 128 * c;
      if constexpr (kVnni) {  // int32 lanes: hi sums in ah, lo sums in al
        if (c == 0) ah[i] = al[i] = _mm256_setzero_si256();
        dpbusd_vex(ah[i], lo, load32(xi));
        dpbusd_vex(ah[i], hi, load32(xi + 32));
        dpbusd_vex(al[i], lo, load32(xi + 64));
        dpbusd_vex(al[i], hi, load32(xi + 96));
      } else {  // int16 pair sums
        const __m256i h = _mm256_add_epi16(_mm256_maddubs_epi16(lo, load32(xi)),
                                           _mm256_maddubs_epi16(hi, load32(xi + 32)));
        const __m256i l = _mm256_add_epi16(_mm256_maddubs_epi16(lo, load32(xi + 64)),
                                           _mm256_maddubs_epi16(hi, load32(xi + 96)));
        ah[i] = c == 0 ? h : _mm256_add_epi16(ah[i], h);
        al[i] = c == 0 ? l : _mm256_add_epi16(al[i], l);
      }
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MT; ++i) {
    const uint8_t* xe = xs + i * ldx_bytes + 128 * C;
    __m256i t = kVnni ? _mm256_add_epi32(_mm256_slli_epi32(ah[i], 8), al[i])
                      : _mm256_add_epi32(_mm256_madd_epi16(ah[i], _mm256_set1_epi16(256)),
                                         _mm256_madd_epi16(al[i], _mm256_set1_epi16(1)));
    t = _mm256_sub_epi32(t, kAsym ? _mm256_madd_epi16(load32(xe + 32), step_lanes<G>(blk.zp, j))
                                  : load32(xe));
    acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), step_lanes<G>(blk.sws[i], j), acc[i]);
  }
}

// The x16 steps for avx2q::i4_rows_loop; x: MT rows of prepared x, ldx_bytes apart.
template <int G, int MT, int NR, bool kAsym, bool kVnni>
struct I4Rows {
  using Block = I4Block<MT>;
  bool bf16;
  int64_t ng;
  int64_t ldx_bytes;
  const float* sx[MT];  // s_x of each row of x, after its steps

  void scales(const QuantRow& row, int64_t g0, Block& blk) const {
    i4_block_scales<MT, kAsym>(row, bf16, ng, sx, g0, blk);
  }
  template <bool kHalf>
  void step(const uint8_t* w, const uint8_t* xs, const Block& blk, int j, __m256* acc) const {
    i4_step_acc<G, MT, kHalf, kAsym, kVnni>(w, xs, ldx_bytes, blk, j, acc);
  }

  static void run(const QuantRow* rows, const QuantFormat& f, const uint8_t* x, int64_t ldx_bytes,
                  float* out, int ldo) {
    constexpr int64_t kStepBytes = i4_step_bytes(i4_step(G));
    I4Rows kern{f.bf16_scales, f.k / G, ldx_bytes, {}};
    for (int i = 0; i < MT; ++i) {
      kern.sx[i] =
          reinterpret_cast<const float*>(x + i * ldx_bytes + i4_steps(f.k, G) * kStepBytes);
    }
    avx2q::i4_rows_loop<G, MT, NR, kStepBytes>(kern, rows, f.k, x, out, ldo);
  }
};

// ---- kF8E4M3: prepared x ----

// x is prepared as x * 2^kF8XExp; the kernel's weights are w * 2^-120.
constexpr int kF8XExp = 64;

int64_t f8_x_floats(int64_t k) { return (k + 31) / 32 * 32; }

// Per 32 elements, in the order the kernel decodes the weights: 4j, 4j + 2, 4j + 1, 4j + 3 for
// j = 0..7; zeros from k on.
void prep_f8(const float* x, int64_t k, float* out) {
  DenormalsKept keep;  // a denormal x times 2^64 is a normal f32
  const __m256 s = _mm256_set1_ps(0x1p64f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  alignas(32) float tmp[32];
  for (int64_t c = 0; c < k; c += 32, out += 32) {
    const float* src = x + c;
    if (c + 32 > k) {
      std::memset(tmp, 0, sizeof(tmp));
      std::memcpy(tmp, x + c, static_cast<size_t>(k - c) * 4);
      src = tmp;
    }
    // Each 128-bit lane of a..d is one group of 4 elements, j = 0..7 in order (a: 0, 1; b: 2, 3;
    // ...): a 4 x 4 transpose per lane gives element p of groups (0, 2, 4, 6 | 1, 3, 5, 7).
    const __m256 a = _mm256_loadu_ps(src), b = _mm256_loadu_ps(src + 8);
    const __m256 cc = _mm256_loadu_ps(src + 16), d = _mm256_loadu_ps(src + 24);
    const __m256 t0 = _mm256_unpacklo_ps(a, b), t1 = _mm256_unpackhi_ps(a, b);
    const __m256 t2 = _mm256_unpacklo_ps(cc, d), t3 = _mm256_unpackhi_ps(cc, d);
    const __m256 p[4] = {_mm256_shuffle_ps(t0, t2, 0x44), _mm256_shuffle_ps(t0, t2, 0xee),
                         _mm256_shuffle_ps(t1, t3, 0x44), _mm256_shuffle_ps(t1, t3, 0xee)};
    static constexpr int kField[4] = {0, 2, 1, 3};  // the kernel's order: 4j, 4j+2, 4j+1, 4j+3
    for (int v = 0; v < 4; ++v) {
      const __m256 in_order = _mm256_permutevar8x32_ps(p[kField[v]], order);
      _mm256_storeu_ps(out + 8 * v, _mm256_mul_ps(in_order, s));
    }
  }
}

// ---- kF8E4M3 dot kernel ----
//
// Cost per 32 weights and row of x: 2 shifts, 3 vpmaddwd and 4 ands (shared by the rows of x),
// 4 FMAs. Measured (1 thread, k = 2048, m = 1, weights in L1, with 4 vpmaddwd and one shift):
// 7.0 weights per cycle at 3.2 GHz (22 GB/s); in a loop of 4 rows, 8.0 against 4.0 for the f16
// route (widen, shift, and, vcvtph2ps: at most one vcvtph2ps per cycle) and 5.6 for vpmovsxbd +
// shift + and. Through cpu::gemm from L2/L3: 18.2-19.5 GB/s.

// 32 E4M3 bytes times MT rows of prepared x (x_i: [32] floats at xs + i * ldx) into acc: NA
// accumulators per row of x (acc[i * NA + a]), so that the four FMAs per row of x do not form
// one dependency chain (4 cycles each; measured at m = 1, 4 rows: 7.1 weights per cycle with 2
// accumulators per row, 4.8 with 1).
template <int MT, int NA>
inline void f8_block(__m256i b, const float* xs, int64_t ldx, __m256* acc) {
  const __m256i even = _mm256_set1_epi32(1 << 12), odd = _mm256_set1_epi32(1 << 28);
  const __m256i keep = _mm256_set1_epi32(static_cast<int>(0x87f00000u));  // sign, bits 26..20
  // As 16-bit words, b holds bytes 2j (low) and 2j + 1 (high); vpmaddwd by 2^12 of the low or
  // the high word of each dword puts that word's high byte, sign-extended, at bits 20..27 (its
  // low byte lands below bit 20 and is masked off). Shifting the words left by 8 first brings
  // the even bytes up. Per dword j: bytes 4j, 4j + 2 from b << 8, 4j + 1, 4j + 3 from b. The
  // dword's top byte (4j + 3) is there after an arithmetic shift right by 4 alone (the same bits
  // 20..31): on Zen 3 vpmaddwd shares its pipes with the FMAs, and trading one of the 4 for a
  // shift measured 1.2x in L1 (4 rows at m = 1, 19-21 -> 22-24 GB/s; two trades: 1.1x); through
  // cpu::gemm with the weights in L2/L3 (bench_gemm_quant gemv --cached, medians of 15-25 runs,
  // old and new library alternating) 1.06x at m = 1 and 1.13x at m = 4, streamed at m = 1 1.03x.
  const __m256i b8 = _mm256_slli_epi16(b, 8);
  const __m256i words[4] = {_mm256_madd_epi16(b8, even), _mm256_madd_epi16(b8, odd),
                            _mm256_madd_epi16(b, even), _mm256_srai_epi32(b, 4)};
#pragma GCC unroll 4
  for (int v = 0; v < 4; ++v) {
    const __m256 w = _mm256_castsi256_ps(_mm256_and_si256(words[v], keep));
#pragma GCC unroll 4
    for (int i = 0; i < MT; ++i) {
      __m256& a = acc[i * NA + v % NA];
      a = _mm256_fmadd_ps(w, _mm256_loadu_ps(xs + i * ldx + 8 * v), a);
    }
  }
}

// Position in prepared x (prep_f8) of element e of a 32-element block: 8 v + e / 4, v the
// vector that holds field e % 4 (the order 0, 2, 1, 3 is its own inverse).
inline int f8_x_pos(int e) {
  static constexpr int kV[4] = {0, 2, 1, 3};
  return 8 * kV[e % 4] + e / 4;
}

// b (32 codes) with its subnormal codes zeroed; their products with the MT rows of x (xs: the
// block's prepared x, ldx apart, x * 2^64) added to slow[i] (double, units of w * x * 2^64).
template <int MT>
__attribute__((noinline)) __m256i f8_take_subnormals(__m256i b, const float* xs, int64_t ldx,
                                                     double* slow, bool& found) {
  uint32_t sub = avx2q::f8_subnormal_mask(b);
  if (sub == 0) return b;
  found = true;
  alignas(32) uint8_t codes[32];
  _mm256_store_si256(reinterpret_cast<__m256i*>(codes), b);
  for (uint32_t m = sub; m != 0; m &= m - 1) {
    const int e = std::countr_zero(m);
    const double w = avx2q::f8_subnormal_value(codes[e]);
    for (int i = 0; i < MT; ++i) slow[i] += w * xs[i * ldx + f8_x_pos(e)];
    codes[e] = 0;
  }
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(codes));
}

// One row's 32-weight blocks at kk (b1: the next block when `two`) times MT rows of x into acc;
// with kSplit (f8_split_subnormals) blocks holding E4M3 subnormals go through f8_take_subnormals
// (gemm_quant_avx2_common.h says why), their products into slow.
template <int MT, int NA, bool kSplit>
__attribute__((always_inline)) inline void f8_blocks(__m256i b0, __m256i b1, const float* x,
                                                     int64_t ldx, int64_t kk, bool two,
                                                     __m256* acc, double* slow, bool& any) {
  if (kSplit && __builtin_expect(avx2q::f8_maybe_subnormal(b0, b1), 0)) {
    b0 = f8_take_subnormals<MT>(b0, x + kk, ldx, slow, any);
    if (two) b1 = f8_take_subnormals<MT>(b1, x + kk + 32, ldx, slow, any);
  }
  f8_block<MT, NA>(b0, x + kk, ldx, acc);
  if (two) f8_block<MT, NA>(b1, x + kk + 32, ldx, acc);
}

// NR rows times MT rows of x; out[i * ldo + r]. The rows are read together, 64 bytes of each in
// turn (NR = 4 at m = 1: the 4 streams of gemm_decode_walk.h interleaved, as the 16-bit
// kernels read them; NR = 1 decodes a row whole).
template <int MT, int NA, int NR, bool kSplit>
void f8_rows(const QuantRow* rows, int64_t k, const float* x, int64_t ldx, float* out, int ldo) {
  __m256 acc[NR][MT * NA];
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r) {
#pragma GCC unroll 8
    for (int a = 0; a < MT * NA; ++a) acc[r][a] = _mm256_setzero_ps();
  }
  double slow[NR][MT] = {};
  bool any_subnormal[NR] = {};
  const __m256i normal = _mm256_set1_epi8(0x08);  // a normal code: stands in for a missing block
  int64_t kk = 0;
  for (; kk + 64 <= k; kk += 64) {  // one prefetch per 64-byte line
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      const uint8_t* p = rows[r].data;
      prefetch(p + kk + kPrefetchBytes);
      f8_blocks<MT, NA, kSplit>(load32(p + kk), load32(p + kk + 32), x, ldx, kk, true, acc[r],
                                slow[r], any_subnormal[r]);
    }
  }
  for (int r = 0; r < NR; ++r) {
    const uint8_t* p = rows[r].data;
    int64_t kt = kk;
    if (kt + 32 <= k) {
      f8_blocks<MT, NA, kSplit>(load32(p + kt), normal, x, ldx, kt, false, acc[r], slow[r],
                                any_subnormal[r]);
      kt += 32;
    }
    if (kt < k) {  // the last k % 32 bytes, without reading past the row (x is zero-padded)
      alignas(32) uint8_t tail[32] = {};
      std::memcpy(tail, p + kt, static_cast<size_t>(k - kt));
      const __m256i b = _mm256_load_si256(reinterpret_cast<const __m256i*>(tail));
      f8_blocks<MT, NA, kSplit>(b, normal, x, ldx, kt, false, acc[r], slow[r], any_subnormal[r]);
    }
    const float s = row_scale(rows[r].scales) * 0x1p56f;  // 2^(120 - kF8XExp)
    for (int i = 0; i < MT; ++i) {
      __m256 a = acc[r][i * NA];
      for (int j = 1; j < NA; ++j) a = _mm256_add_ps(a, acc[r][i * NA + j]);
      if (any_subnormal[r]) {  // slow is in units of w x 2^64, the sums of w x 2^-56
        out[i * ldo + r] = static_cast<float>((hsum(a) + slow[r][i] * 0x1p-120) * s);
      } else {
        out[i * ldo + r] = hsum(a) * s;
      }
    }
  }
}

template <bool kSplit>
void dot_f8_s(const QuantRow* rows, const QuantFormat& f, const QuantX& x, float* out) {
  if (x.mb == 1) return f8_rows<1, 2, kRows, kSplit>(rows, f.k, x.x, x.ldx, out, kRows);
  for (int r = 0; r < kRows; ++r) {
    switch (x.mb) {
      case 2: f8_rows<2, 2, 1, kSplit>(rows + r, f.k, x.x, x.ldx, out + r, kRows); break;
      case 3: f8_rows<3, 2, 1, kSplit>(rows + r, f.k, x.x, x.ldx, out + r, kRows); break;
      default: f8_rows<4, 2, 1, kSplit>(rows + r, f.k, x.x, x.ldx, out + r, kRows); break;
    }
  }
}

void dot_f8(const QuantRow* rows, const QuantFormat& f, const QuantX& x, float* out) {
  static_assert(kF8XExp == 64);
  DenormalsKept keep;
  if (f8_split_subnormals()) return dot_f8_s<true>(rows, f, x, out);
  dot_f8_s<false>(rows, f, x, out);
}

// ---- Dequantization of whole rows (prefill) ----

// 16 weights (8 bytes) of a kI4 row as q: the even-indexed ones in `e`, the odd-indexed in `o`.
inline void nibbles16(const uint8_t* p, __m256i& e, __m256i& o) {
  const __m256i v = _mm256_cvtepu8_epi32(load8(p));
  e = _mm256_srai_epi32(_mm256_slli_epi32(v, 28), 28);
  o = _mm256_srai_epi32(_mm256_slli_epi32(v, 24), 28);
}

// The first n (< 8) bytes at p, the rest 0, without reading past p + n.
inline __m128i load_partial(const uint8_t* p, int64_t n) {
  uint8_t tmp[8] = {};
  std::memcpy(tmp, p, static_cast<size_t>(n));
  return load8(tmp);
}

void dequant_f32(const QuantRow& row, const QuantFormat& f, float* out) {
  const int64_t k = f.k;
  if (f.dtype == DType::kF8E4M3) {
    const __m256 s = _mm256_set1_ps(row_scale(row.scales) * 256.0f);
    int64_t c = 0;
    for (; c + 8 <= k; c += 8) {
      _mm256_storeu_ps(out + c, _mm256_mul_ps(fp8x8_to_f32(load8(row.data + c)), s));
    }
    if (c < k) {
      alignas(32) float tmp[8];
      _mm256_store_ps(tmp, _mm256_mul_ps(fp8x8_to_f32(load_partial(row.data + c, k - c)), s));
      std::memcpy(out + c, tmp, static_cast<size_t>(k - c) * 4);
    }
    return;
  }
  for (int64_t c = 0; c < k; c += 16) {  // k is a multiple of the group, itself of 32
    const int64_t gi = c / f.group;
    const __m256 s = _mm256_set1_ps(scale_at(row.scales, gi, f.bf16_scales));
    const __m256i z = _mm256_set1_epi32(row.zeros ? row.zeros[gi] : 0);
    __m256i e, o;
    nibbles16(row.data + c / 2, e, o);
    const __m256 ef = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(e, z)), s);
    const __m256 of = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(o, z)), s);
    // Interleave: unpack works per 128-bit lane, then put the lanes in order.
    const __m256 a = _mm256_unpacklo_ps(ef, of), b = _mm256_unpackhi_ps(ef, of);
    _mm256_storeu_ps(out + c, _mm256_permute2f128_ps(a, b, 0x20));
    _mm256_storeu_ps(out + c + 8, _mm256_permute2f128_ps(a, b, 0x31));
  }
}

QuantKernels make_table() {
  QuantKernels t;
  using Dot = avx2q::I4Dot<I4Rows, kRows>;
  t.i4 = {kRows, kMaxM, Dot::dot, Dot::resolve};
  t.f8 = {kRows, kMaxM, dot_f8};
  t.i4_x_floats = i4_x_floats;
  t.prep_i4 = prep_i4;
  t.f8_x_floats = f8_x_floats;
  t.prep_f8 = prep_f8;
  t.dequant_f32 = dequant_f32;
  t.dequant_bf16 = nullptr;
  t.epilogue = fma_kernels_avx2().epilogue;
  return t;
}

}  // namespace

const QuantKernels& quant_kernels_avx2() {
  static const QuantKernels table = make_table();
  return table;
}

}  // namespace sampan::cpu::gemm_detail
