// AVX2 decode kernels for GGUF weights against x rounded to 16 bits (the x16 kernels of
// gemm_ggml.h; error bound there): Q4_0, Q8_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, Q3_K, Q4_K,
// Q5_K and Q6_K (Q2_K's is gemm_ggml_x8_avx2.cc's kernel on two byte planes of x16). Q4_1, Q5_0,
// Q5_1 and IQ4_NL share the Q4_0 / Q8_0 kernel (a block type's codes as 16 int16; Q4_1 / Q5_1
// add m times the prepared 32-element sum of x), IQ4_XS has its own (IQ4_NL's codes with
// per-sub-block scales), Q3_K shares Q6_K's. Measured against
// the f32 decoders they replace (Zen 3 VM, 1 thread, bench_gemm_ggml --m 1, 2048 x 2048 from
// DRAM, new / old library the same minutes, GB/s): Q4_1 11.4 / 4.8, Q5_0 9.6 / 4.5, Q5_1 8.4 /
// 4.9, IQ4_NL 9.1 / 4.3, IQ4_XS 7.7 / 3.5, Q3_K 6.3 / 2.9, Q2_K 5.2 / 2.8; in `sampan bench`
// (TinyLlama shape, llama.cpp's mixed recipes, 1 thread) decode Q4_1 7.3 -> 16.5 tok/s, IQ4_NL
// 7.4 -> 15.0. The f32 decoders (gemm_ggml_avx2.cc) spend about twice the vector operations per
// weight byte (a widening to int32, a convert and a multiply per 8 weights, then an FMA per 8
// weights and row of x), and a Zen 3 core retires about 3 vector operations per cycle here, so
// that count sets the speed.
// Here the codes are widened to int16 once, shared by the rows of x, and vpmaddwd multiplies 16
// of them with x16 and sums them in pairs into exact int32 lanes, converted to f32 once per
// block (Q4_0, Q8_0) or half block (Q6_K).
// Measured (Zen 3 VM, AVX2, 1 thread, bench_gemm_ggml --cached --cpu-time --isa avx2, TinyLlama
// shapes, medians of 8 alternating runs, GB/s new / f32 decoder): m = 1: Q8_0 19.0-20.6 / 8.0-8.5
// (2.3-2.5x), Q4_0 9.7-11.1 / 4.1-4.2 (2.4-2.6x), Q6_K 11.3-12.2 / 4.3-4.6 (2.4-2.6x); m = 2:
// 2.1-2.3x for each.
// At the avx2_vnni level (AVX-VNNI: Alder Lake, Sierra Forest) VEX vpdpwssd replaces a vpmaddwd
// and its vpaddd (madd_add; the same int32 lanes). Measured on Emerald Rapids at
// SAMPAN_CPU_ISA=avx2_vnni (1 thread, --cached --cpu-time, old and new alternating x3), GB/s:
// Q4_K m = 1 / 2 / 4: 11.8-12.2 / 8.7-8.9 / 5.3-5.5 -> 12.5-13.0 / 9.6-10.1 / 5.7-6.3; Q6_K
// 12.9-13.2 / 9.1-9.3 / 5.3-5.7 -> 13.3-13.9 / 10.5-10.8 / 6.4-7.0; `sampan bench` Q4_K_M decode
// 1 thread 17.0-17.1 -> 17.6 tok/s, 2 threads 32.1-33.1 -> 33.8-34.2.
// Codes made as bytes (X16Order::kLane8: Q5_1, IQ4_NL, IQ4_XS): the 32 codes of a block in one
// vector by 256-bit ops (a broadcast load, one vpsrlvd for the high nibbles, one vpshufb for the
// IQ4 table or a byte test of qh), widened by two unpacks, x16 prepared in the unpacks' order:
// against 128-bit lookups and vpmovsxbw (IQ4) or compares per int16 lane (Q5_1), and with Q4_1
// / Q5_1's d and m converted by one vcvtph2ps (lanes d, m, d, m, ..) instead of a scalar path
// for m (Zen 3 VM, 1 thread, bench_gemm_ggml --cached --m 1, 5632 x 2048, old / new library
// alternating x3, GB/s): IQ4_NL 8.3-9.0 -> 9.8-10.3, IQ4_XS 6.5-7.9 -> 8.9-9.4, Q5_1 7.7-8.1
// -> 9.8-10.1, Q4_1 11.1-11.6 -> 12.5-12.7; `sampan bench` decode 1 thread (two rounds, tok/s):
// IQ4_NL 14.0-14.9 -> 16.4-16.6, IQ4_XS 14.1-14.2 -> 16.0-16.3, Q5_1 10.6 -> 13.0, Q4_1 16.8
// -> 18.4-18.5. Q5_0 keeps its int16 codes (byte codes minus 16 as int16: 0.97x); its kernel
// compiles to the instructions it had (a version whose d was assigned in a branch, with qh read
// inside fifth_bits_clear, compiled to more register moves and decoded 0.96x).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/gemm_ggml_avx2.h"
#include "kernels/cpu/ggml_chunk_avx2.h"
#include "kernels/cpu/isa.h"

namespace sampan::cpu::gemm_detail {
namespace {

// Rows of x per call of every kernel here (with several rows of x they take the R weight rows
// one after another, so a row's accumulators are few).
constexpr int kMaxM = 4;
static_assert(kMaxM <= kGgmlMaxM);

// kVnni (the avx2_vnni level, or has_vex_vnni()): the kernels' vpmaddwd + vpaddd pairs become
// one VEX vpdpwssd (madd_add, vec_avx2.h); the same int32 lanes (no kernel here lets a lane
// overflow), so outputs do not depend on the level.

// ---- Prepared x (every x16 kernel here) ----
//
// Per group of 256 elements (a last group of k % 256 elements takes its own absmax; the K types
// have none): x16 = round(x / s), s = absmax / 32767, as 256 int16 (zero past the group's end),
// then the f32 sums s * sum x16 of its eight 32-element sub-blocks (Q4_K and Q5_K subtract their
// mins with them), then s. The int16 are in element order (Q4_0, Q8_0), or for the K types
// (kEvenOdd) each 32 elements as their even ones, then their odd ones, each 16 in the order
// [0, 2, .., 14 | 16, .., 30] (+1 for the odd): the 16-bit lanes of 32 code bytes split by
// shifts.
constexpr int64_t kX16GroupFloats = 144;  // 128 (256 int16) + 8 sums + s + 7 zero
constexpr int kX16Sums = 128, kX16Scale = 136;

int64_t x16_floats(int64_t k) {
  return (k + 255) / 256 * kX16GroupFloats;
}

// 16 int16 of x16 from two vectors of 8 int32 (|x16| <= 32767: the saturating pack is exact) in
// the order of a and b, or of the even (kOdd false) or odd int16 of a and then b.
inline __m256i pack16(__m256i a, __m256i b) {
  return _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xd8);
}
template <bool kOdd>
inline __m256i pack_alternate(__m256i a, __m256i b) {
  auto pick = [](__m256i v) {
    return kOdd ? _mm256_srai_epi32(v, 16) : _mm256_srai_epi32(_mm256_slli_epi32(v, 16), 16);
  };
  return pack16(pick(a), pick(b));
}

// The order of each 32 elements' x16 (the kernels' code vectors): element order, kEvenOdd (the
// K types), or kLane8: 0..7, 16..23, 8..15, 24..31 (Q5_1, IQ4_NL, IQ4_XS, whose codes are
// made as 32 bytes in element order and widened by vpunpck{l,h}bw, which take 8 bytes from each
// 128-bit lane).
enum class X16Order { kElement, kEvenOdd, kLane8 };

template <X16Order kOrder>
void prep_x16(const float* x, int64_t k, float* out) {
  for (int64_t g = 0; g < (k + 255) / 256; ++g) {
    const float* xg = x + 256 * g;
    const int n = static_cast<int>(std::min<int64_t>(256, k - 256 * g));  // a multiple of 32
    float* o = out + g * kX16GroupFloats;
    const AbsMax a = absmax_avx2(xg, n);
    float sx = 0.0f, inv = 0.0f;
    if (!a.finite) {
      sx = __builtin_nanf("");          // s = NaN: the group's outputs come out NaN
    } else if (a.value >= 0x1p-100f) {  // smaller groups are taken as zero (gemm_ggml.h)
      sx = a.value / 32767.0f;
      inv = 32767.0f / a.value;
    }
    int16_t* q = reinterpret_cast<int16_t*>(o);
    for (int j = 0; j < 8; ++j) {
      if (32 * j >= n) {
        std::memset(q + 32 * j, 0, 32 * sizeof(int16_t));
        o[kX16Sums + j] = 0.0f;
        continue;
      }
      __m256i v[4], sum = _mm256_setzero_si256();
      for (int e = 0; e < 4; ++e) {
        const __m256 t = _mm256_mul_ps(_mm256_loadu_ps(xg + 32 * j + 8 * e), _mm256_set1_ps(inv));
        v[e] =
            _mm256_cvtps_epi32(_mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        sum = _mm256_add_epi32(sum, v[e]);
      }
      __m256i lo = pack16(v[0], v[1]), hi = pack16(v[2], v[3]);  // elements 0..15, 16..31
      if (kOrder == X16Order::kEvenOdd) {
        const __m256i even = pack_alternate<false>(lo, hi);
        hi = pack_alternate<true>(lo, hi);
        lo = even;
      } else if (kOrder == X16Order::kLane8) {
        const __m256i a = _mm256_permute2x128_si256(lo, hi, 0x20);  // 0..7, 16..23
        hi = _mm256_permute2x128_si256(lo, hi, 0x31);               // 8..15, 24..31
        lo = a;
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * j), lo);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * j + 16), hi);
      __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
      o[kX16Sums + j] = sx * static_cast<float>(_mm_cvtsi128_si32(s4));  // |sum| < 2^24
    }
    o[kX16Scale] = sx;
    for (int j = kX16Scale + 1; j < kX16GroupFloats; ++j) o[j] = 0.0f;
  }
}

// Row i's prepared group g, as int16.
inline const int16_t* x16_group(const float* x, int64_t ldx, int i, int64_t g) {
  return reinterpret_cast<const int16_t*>(x + i * ldx + g * kX16GroupFloats);
}

// ---- Q8_0 and Q4_0 (32-element blocks) ----
//
// At m = 1 the kernels read their R rows together, a 256-element group of each in turn (the
// streams of gemm_decode_walk.h interleaved): one row after another, a Zen 3 core streamed at
// ~0.7 of its read bandwidth (bench_gemm_ggml --types Q8_0 --m 1, 1 thread, three alternating
// rounds: 16.8-18.7 -> 21.1-21.8 GB/s; from L3 the same ~25, so not compute-bound). With more
// rows of x they take the rows one after another, so a pass holds only 2 accumulators per row
// of x and takes up to 4 rows of x. Per block: the 32 codes as two vectors of 16 int16
// in element order (Q4_0: n - 8, exact), per row of x two vpmaddwd with x16 (int32 lanes of four
// products each: at most 4 * 128 * 32767 < 2^24, exact in f32 too), converted and accumulated
// times d (vpbroadcastw + vcvtph2ps from the block) with one FMA; per 256-element group of x the
// sum is multiplied by its s.
// Measured against alternatives (Zen 3, 1 thread, k = 2048, weights in L2, thread CPU time,
// alternating): the 8 scales of a group gathered by scalar loads and converted at once: 0.85x
// (Q8_0) and 0.91x (Q4_0); Q4_0 codes left as n with 8 d sum(x16) subtracted per group: 1.00-1.02x
// (not kept: the f32 sums would then carry (n + 8) |d|, not |w|); two accumulator chains per row:
// no faster; Q4_0 by vpmaddubsw of the nibbles (two blocks per vector) with x16 split into a
// signed high and low byte (s = absmax / 32639, per-lane offset sums prepared with x): 1.03-1.12x
// at m = 1 but 0.91-0.97x at m = 2 and 3.
// kMinAt: the byte offset of the block's f16 min m (w = d q + m; Q4_1, Q5_1), or -1.
struct BlockQ8_0 {
  static constexpr int kBytes = 34, kMinAt = -1;
  static constexpr X16Order kOrder = X16Order::kElement;
  static void codes(const uint8_t* b, __m256i* w) {
    w[0] = _mm256_cvtepi8_epi16(load16(b + 2));
    w[1] = _mm256_cvtepi8_epi16(load16(b + 18));
  }
};

// Byte l holds element l in its low nibble and l + 16 in its high one; w = (n - 8) d.
struct BlockQ4_0 {
  static constexpr int kBytes = 18, kMinAt = -1;
  static constexpr X16Order kOrder = X16Order::kElement;
  static void codes(const uint8_t* b, __m256i* w) {
    const __m256i v = _mm256_cvtepu8_epi16(load16(b + 2)), eight = _mm256_set1_epi16(8);
    w[0] = _mm256_sub_epi16(_mm256_and_si256(v, _mm256_set1_epi16(15)), eight);
    w[1] = _mm256_sub_epi16(_mm256_srli_epi16(v, 4), eight);
  }
};

// The 16 nibbles n of elements l (low nibble of byte l) and l + 16 (high nibble) as int16.
inline void nibbles16(const uint8_t* qs, __m256i* w) {
  const __m256i v = _mm256_cvtepu8_epi16(load16(qs));
  w[0] = _mm256_and_si256(v, _mm256_set1_epi16(15));
  w[1] = _mm256_srli_epi16(v, 4);
}

// ---- Codes made as bytes (X16Order::kLane8; ggml_chunk_avx2.h) ----
//
// 32 code bytes in element order as two vectors of 16 int16 in kLane8 order: zero-extended
// (kSigned false) or sign-extended.
template <bool kSigned>
inline void widen_lane8(__m256i u, __m256i* w) {
  const __m256i hi = kSigned ? _mm256_cmpgt_epi8(_mm256_setzero_si256(), u)
                             : _mm256_setzero_si256();
  w[0] = _mm256_unpacklo_epi8(u, hi);
  w[1] = _mm256_unpackhi_epi8(u, hi);
}

// w = d n + m (the nibbles as Q4_0's, without the offset; m at byte 2).
struct BlockQ4_1 {
  static constexpr int kBytes = 20, kMinAt = 2;
  static constexpr X16Order kOrder = X16Order::kElement;
  static void codes(const uint8_t* b, __m256i* w) { nibbles16(b + 4, w); }
};

// The fifth bits h of Q5_0 (bit e of the 32-bit qh belongs to element e), as c = 16 - 16 h per
// 16-bit lane l of c[0] (element l) and of c[1] (element l + 16): an and, a compare and an
// andnot per 16 elements.
inline void fifth_bits_clear(uint32_t qh, __m256i* c) {
  const __m256i bits = _mm256_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048,
                                         4096, 8192, 16384, static_cast<int16_t>(0x8000));
  const __m256i q = _mm256_set1_epi32(static_cast<int>(qh));
  const __m256i lo = _mm256_shuffle_epi8(q, _mm256_set1_epi16(0x0100));  // qh & 0xffff
  const __m256i hi = _mm256_shuffle_epi8(q, _mm256_set1_epi16(0x0302));  // qh >> 16
  const __m256i sixteen = _mm256_set1_epi16(16);
  c[0] = _mm256_andnot_si256(_mm256_cmpeq_epi16(_mm256_and_si256(lo, bits), bits), sixteen);
  c[1] = _mm256_andnot_si256(_mm256_cmpeq_epi16(_mm256_and_si256(hi, bits), bits), sixteen);
}

// w = d (n + 16 h - 16) = d (n - c), qh at byte 2, the nibbles after it; codes as int16 in
// element order.
struct BlockQ5_0 {
  static constexpr int kBytes = 22, kMinAt = -1;
  static constexpr X16Order kOrder = X16Order::kElement;
  static void codes(const uint8_t* b, __m256i* w) {
    uint32_t qh;
    std::memcpy(&qh, b + 2, 4);
    __m256i c[2];
    nibbles16(b + 6, w);
    fifth_bits_clear(qh, c);
    for (int e = 0; e < 2; ++e) w[e] = _mm256_sub_epi16(w[e], c[e]);
  }
};

// w = d (n + 16 h) + m, m at byte 2, qh at byte 4, the nibbles after it; the codes n + 16 h as
// bytes in element order, widened in kLane8 order (Q5_0's int16 codes, n + 16 - c here, measured
// 0.87x; these codes for Q5_0, minus 16 as int16, 0.97x its int16 codes).
struct BlockQ5_1 {
  static constexpr int kBytes = 24, kMinAt = 2;
  static constexpr X16Order kOrder = X16Order::kLane8;
  static void codes(const uint8_t* b, __m256i* w) {
    widen_lane8<false>(ggml_chunk_u8<GgmlKind::kQ5_1>(b, 0), w);
  }
};

// kIq4Values[n] of the 32 nibbles at qs in kLane8 order: the int8 table looked up by vpshufb
// in both lanes (IQ4_NL, IQ4_XS).
inline void iq4_codes(const uint8_t* qs, __m256i* w) { widen_lane8<true>(iq4_values_i8(qs), w); }

// w = d kIq4Values[n].
struct BlockIQ4_NL {
  static constexpr int kBytes = 18, kMinAt = -1;
  static constexpr X16Order kOrder = X16Order::kLane8;
  static void codes(const uint8_t* b, __m256i* w) { iq4_codes(b + 2, w); }
};

// Block j of a group (p: its bytes) times MB rows of x (xg: the rows' prepared groups) into
// ag (times the group's s later); with a min (B::kMinAt), m times the block's prepared sum
// s sum x16 into the odd lanes of am (the even ones take d times it; only lane 1 is kept).
template <class B, int MB, bool kVnni>
inline void b32_step(const uint8_t* p, const int16_t* const* xg, int j, __m256* ag, __m256* am) {
  static_assert(B::kMinAt < 0 || B::kMinAt == 2);
  __m256i w[2];
  B::codes(p, w);
  __m256 d = _mm256_setzero_ps(), m0 = _mm256_setzero_ps();
  if constexpr (B::kMinAt >= 0) {  // d and m converted together: lanes (d, m, d, m, ..)
    float dm;
    std::memcpy(&dm, p, 4);
    m0 = _mm256_cvtph_ps(_mm_castps_si128(_mm_set1_ps(dm)));
    d = _mm256_moveldup_ps(m0);
  } else {
    d = f16_broadcast(p);
  }
  for (int i = 0; i < MB; ++i) {
    const int16_t* xb = xg[i] + 32 * j;
    const __m256i t = madd_add<kVnni>(_mm256_madd_epi16(w[0], load32(xb)), w[1], load32(xb + 16));
    ag[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), d, ag[i]);
    if constexpr (B::kMinAt >= 0) {
      const float* sums = reinterpret_cast<const float*>(xg[i]) + kX16Sums;
      am[i] = _mm256_fmadd_ps(m0, _mm256_broadcast_ss(sums + j), am[i]);
    }
  }
}

// NR weight rows times MB rows of x; out[i * kRows + r]. The rows are read together, a
// 256-element group of each in turn (NR = kRows at m = 1: the streams of gemm_decode_walk.h
// interleaved; NR = 1 decodes a row whole).
template <class B, int MB, int NR, bool kVnni>
void dot_b32_x16_rows(const uint8_t* const* rows, int64_t k, const float* x, int64_t ldx,
                      float* out) {
  const int64_t nb = k / 32;
  const int64_t ahead = prefetch_ahead(nb * B::kBytes);
  __m256 acc[NR][MB];
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r) {
    for (int i = 0; i < MB; ++i) acc[r][i] = _mm256_setzero_ps();
  }
  for (int64_t b0 = 0; b0 < nb; b0 += 8) {
    const int64_t g = b0 / 8;
    const int16_t* xg[MB];
    for (int i = 0; i < MB; ++i) xg[i] = x16_group(x, ldx, i, g);
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      const uint8_t* p = rows[r] + b0 * B::kBytes;
      for (int off = 0; off < 8 * B::kBytes; off += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(p) + ahead + off, _MM_HINT_T0);
      }
      __m256 ag[MB], am[MB];
      for (int i = 0; i < MB; ++i) ag[i] = am[i] = _mm256_setzero_ps();
      if (b0 + 8 <= nb) {
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) b32_step<B, MB, kVnni>(p + j * B::kBytes, xg, j, ag, am);
      } else {  // the last group of k % 256 elements
        for (int j = 0; j < nb - b0; ++j) {
          b32_step<B, MB, kVnni>(p + j * B::kBytes, xg, j, ag, am);
        }
      }
      for (int i = 0; i < MB; ++i) {
        const float sx = x[i * ldx + g * kX16GroupFloats + kX16Scale];
        acc[r][i] = _mm256_fmadd_ps(ag[i], _mm256_set1_ps(sx), acc[r][i]);
        if constexpr (B::kMinAt >= 0) {  // lane 1 of am: m times the sums
          const __m256 lane1 = _mm256_castsi256_ps(_mm256_setr_epi32(0, -1, 0, 0, 0, 0, 0, 0));
          acc[r][i] = _mm256_add_ps(acc[r][i], _mm256_and_ps(am[i], lane1));
        }
      }
    }
  }
  for (int r = 0; r < NR; ++r) {
    for (int i = 0; i < MB; ++i) out[i * kRows + r] = hsum(acc[r][i]);
  }
}

// ---- IQ4_XS ----
//
// A block of 256 (one group of x): f16 d, the 6-bit sub-block scales ls_j (low 4 bits in
// nibble j of bytes 4..7, high 2 in bits 2j of the u16 at byte 2), then 8 sub-blocks of IQ4_NL
// nibbles. Per sub-block the 32 codes as IQ4_NL's, two vpmaddwd with x16 (an int32 lane: 4
// products of at most 127 * 32767, exact in f32), converted and accumulated times
// dl_j = d (ls_j - 32) (exact in f32, as the reference forms it), the 8 dl formed at once per
// block; per block the sum times s. The rows as dot_b32_x16_rows reads them.
inline __m256 iq4_xs_scales(const uint8_t* p) {
  uint32_t lo;
  uint16_t hi;
  std::memcpy(&lo, p + 4, 4);
  std::memcpy(&hi, p + 2, 2);
  const __m256i l = _mm256_and_si256(
      _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(lo)),
                        _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
      _mm256_set1_epi32(15));
  const __m256i h = _mm256_and_si256(
      _mm256_srlv_epi32(_mm256_set1_epi32(hi), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
      _mm256_set1_epi32(3));
  const __m256i ls = _mm256_sub_epi32(_mm256_or_si256(l, _mm256_slli_epi32(h, 4)),
                                      _mm256_set1_epi32(32));
  return _mm256_mul_ps(f16_broadcast(p), _mm256_cvtepi32_ps(ls));
}

template <int MB, int NR, bool kVnni>
void dot_iq4_xs_x16_rows(const uint8_t* const* rows, int64_t k, const float* x, int64_t ldx,
                         float* out) {
  constexpr int kBytes = 136;
  const int64_t nb = k / 256;
  const int64_t ahead = prefetch_ahead(nb * kBytes);
  __m256 acc[NR][MB];
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r) {
    for (int i = 0; i < MB; ++i) acc[r][i] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const int16_t* xg[MB];
    for (int i = 0; i < MB; ++i) xg[i] = x16_group(x, ldx, i, b);
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      const uint8_t* p = rows[r] + b * kBytes;
      for (int off = 0; off < kBytes; off += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(p) + ahead + off, _MM_HINT_T0);
      }
      const __m256 dl = iq4_xs_scales(p);
      __m256 ag[MB];
      for (int i = 0; i < MB; ++i) ag[i] = _mm256_setzero_ps();
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        __m256i w[2];
        iq4_codes(p + 8 + 16 * j, w);
        const __m256 dj = _mm256_permutevar8x32_ps(dl, _mm256_set1_epi32(j));
        for (int i = 0; i < MB; ++i) {
          const int16_t* xb = xg[i] + 32 * j;
          const __m256i t =
              madd_add<kVnni>(_mm256_madd_epi16(w[0], load32(xb)), w[1], load32(xb + 16));
          ag[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), dj, ag[i]);
        }
      }
      for (int i = 0; i < MB; ++i) {
        const float sx = x[i * ldx + b * kX16GroupFloats + kX16Scale];
        acc[r][i] = _mm256_fmadd_ps(ag[i], _mm256_set1_ps(sx), acc[r][i]);
      }
    }
  }
  for (int r = 0; r < NR; ++r) {
    for (int i = 0; i < MB; ++i) out[i * kRows + r] = hsum(acc[r][i]);
  }
}

template <int MB, bool kVnni>
void dot_iq4_xs_x16_mb(const uint8_t* const* rows, int64_t k, const float* x, int64_t ldx,
                       float* out) {
  if (MB == 1) return dot_iq4_xs_x16_rows<MB, kRows, kVnni>(rows, k, x, ldx, out);
  for (int r = 0; r < kRows; ++r) dot_iq4_xs_x16_rows<MB, 1, kVnni>(rows + r, k, x, ldx, out + r);
}

template <class B, int MB, bool kVnni>
void dot_b32_x16_mb(const uint8_t* const* rows, int64_t k, const float* x, int64_t ldx,
                    float* out) {
  if (MB == 1) return dot_b32_x16_rows<B, MB, kRows, kVnni>(rows, k, x, ldx, out);
  for (int r = 0; r < kRows; ++r) dot_b32_x16_rows<B, MB, 1, kVnni>(rows + r, k, x, ldx, out + r);
}

// ---- Q6_K ----
//
// Per 32 weights the codes are assembled in bytes minus 32 (q6_codes: elements 32 c.. of the
// block, sub-block 2 c in the low 128-bit lane, 2 c + 1 in the high one), split into the even
// and the odd bytes of each 16-bit lane, sign-extended by shifts (no widening shuffle; x is
// prepared in the same even / odd order), multiplied by their sub-block's int8 scale (vpmullw:
// |(q - 32) sc| <= 32 * 128 = 4096; one scale vector serves both, lane 0 holding sc_2c and lane 1
// sc_2c+1) and vpmaddwd'ed with x16. An int32 lane sums 16 such products per half block (128
// weights), at most 16 * 4096 * 32767 < 2^31, so each half is converted to f32 on its own; per
// block one FMA with d s. Measured (Zen 3, 1 thread, weights in L2, thread CPU time) 1.27x the
// speed of the widening by vpmovsxbw at m = 1 (1.11x at m = 2).
//
// Q3_K runs the same kernel (its sub-blocks are the same 16 elements, and 32 c + l the same
// elements of the 2-bit planes): codes q = ql - 4 + 4 h in [-4, 3] (the 2-bit ql and the hmask
// bit h, as DecQ3_K in gemm_ggml_avx2.cc), the 16 6-bit scales minus 32; |q sc| <= 128, an int32
// lane then sums at most 32 * 128 * 32767 per block.
struct Q6KCodes {
  static constexpr int kBytes = 210, kDAt = 208;
  static __m256i codes(const uint8_t* p, int c) { return q6_codes(p, c); }
  static __m128i scales(const uint8_t* p) { return load16(p + 192); }
};

struct Q3KCodes {
  static constexpr int kBytes = 110, kDAt = 108;
  static __m256i codes(const uint8_t* p, int c) {
    const int a = c / 4, s = c % 4;
    const __m256i ql = _mm256_and_si256(
        _mm256_srl_epi16(load32(p + 32 + 32 * a), _mm_cvtsi32_si128(2 * s)), _mm256_set1_epi8(3));
    const __m256i h =
        _mm256_and_si256(_mm256_srl_epi16(load32(p), _mm_cvtsi32_si128(c)), _mm256_set1_epi8(1));
    return _mm256_add_epi8(_mm256_sub_epi8(ql, _mm256_set1_epi8(4)), _mm256_slli_epi16(h, 2));
  }
  static __m128i scales(const uint8_t* p) { return q3_k_scales(p); }
};

template <class K, int MB, bool kVnni>
void dot_k16_x16_mb(const uint8_t* const* rows, int64_t k, const float* x, int64_t ldx,
                    float* out) {
  constexpr int kBytes = K::kBytes;
  const int64_t nb = k / 256;
  const int64_t ahead = prefetch_ahead(nb * kBytes);
  // Scale bytes 0, 2, .., 14 then 1, 3, .., 15: widened, int16 c of lane 0 is sc_2c, of lane 1
  // sc_2c+1.
  const __m128i by_parity = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  for (int r = 0; r < kRows; ++r) {
    __m256 acc[MB];
    for (int i = 0; i < MB; ++i) acc[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* p = rows[r] + b * kBytes;
      for (int off = 0; off < kBytes; off += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(p) + ahead + off, _MM_HINT_T0);
      }
      const __m256i sc = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(K::scales(p), by_parity));
      const int16_t* xg[MB];
      for (int i = 0; i < MB; ++i) xg[i] = x16_group(x, ldx, i, b);
      // Half a of the block (elements 128 a..) into exact int32 lanes, converted.
      auto half = [&](int a, __m256* f) {
        __m256i ai[MB];
        for (int i = 0; i < MB; ++i) ai[i] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int c = 4 * a; c < 4 * a + 4; ++c) {
          const __m256i q = K::codes(p, c);
          const __m256i pick = _mm256_set1_epi16(static_cast<int16_t>(0x0101 * 2 * c + 0x100));
          const __m256i sv = _mm256_shuffle_epi8(sc, pick);
          const __m256i even =
              _mm256_mullo_epi16(_mm256_srai_epi16(_mm256_slli_epi16(q, 8), 8), sv);
          const __m256i odd = _mm256_mullo_epi16(_mm256_srai_epi16(q, 8), sv);
          for (int i = 0; i < MB; ++i) {
            const int16_t* xb = xg[i] + 32 * c;
            const __m256i xe = load32(xb), xo = load32(xb + 16);
            ai[i] = _mm256_add_epi32(ai[i],
                                     madd_add<kVnni>(_mm256_madd_epi16(even, xe), odd, xo));
          }
        }
        for (int i = 0; i < MB; ++i) f[i] = _mm256_cvtepi32_ps(ai[i]);
      };
      __m256 f[MB], f1[MB];
      half(0, f);
      half(1, f1);
      for (int i = 0; i < MB; ++i) f[i] = _mm256_add_ps(f[i], f1[i]);
      const float d = f16_at(p + K::kDAt);
      for (int i = 0; i < MB; ++i) {
        const float sx = x[i * ldx + b * kX16GroupFloats + kX16Scale];
        acc[i] = _mm256_fmadd_ps(f[i], _mm256_set1_ps(d * sx), acc[i]);
      }
    }
    for (int i = 0; i < MB; ++i) out[i * kRows + r] = hsum(acc[i]);
  }
}

// ---- Q4_K and Q5_K ----
//
// The R rows one after another, as for Q6_K (each row one stream, few accumulators), up to 4
// rows of x per pass, x in the even / odd order. Per 64 weights (sub-blocks j = 2 c2 and j + 1)
// one 32-byte load of nibbles: as 16-bit lanes, bits 0-3 hold sub-block j's even elements, 8-11
// its odd ones, 4-7 and 12-15 those of j + 1, so three shifts and three masks widen all 64
// (Q5_K: the fifth bits, bit j of qh byte l, moved next to the nibbles by 16-bit shifts of the
// 32 qh bytes). The 6-bit scale sc_j is applied in one of two exact ways:
//  - one row of x: to the int32 sums, vpmulld per sub-block and 64 weights (a lane then holds 4
//    products of at most 31 * 32767, times sc <= 63);
//  - 2..4 rows: to the codes, vpmullw per 16 (shared by the rows; sc q <= 63 * 31).
// Either way an int32 lane sums 32 products of at most 63 * 31 * 32767 per block (2.05e9 <
// 2^31), one accumulator per row of x, converted and scaled by d s once per block; the mins are
// subtracted per block with the prepared sub-block sums (dmin mn s sum x16).
// Measured (Zen 3 VM, 1 thread, bench_gemm_ggml --cached --cpu-time --isa avx2 --reps 200,
// TinyLlama shapes, medians of 5 alternating runs, against the previous x16 kernel that took 2
// rows of x with the weight rows interleaved per block): Q4_K 1.12-1.34x at m = 1 (12-14 GB/s),
// 1.14-1.27x at m = 2, 1.19-1.46x at m = 4; Q5_K 1.41-1.78x, 1.40-1.66x, 1.62-1.98x. The
// row-sequential structure gained most (GCC compiled the interleaved one with spills of the
// vpmaddwd results and a scalar shift, move and broadcast per sub-block scale).
// The vpmulld form at m = 1 measured 1.04-1.08x the vpmullw one; at m >= 2 it does the same
// number of multiplies and more adds. Widening and scaling at once by vpmaddubsw of the nibble
// bytes with (sc, 0) and (0, sc) byte pairs (fewer shifts, more multiplies and masks):
// 0.82-1.0x at m = 2 and 4.
template <bool kQ5, int MB, bool kVnni>
void dot_k_x16_mb(const uint8_t* const* rows, int64_t k, const float* x, int64_t ldx, float* out) {
  constexpr int kBytes = kQ5 ? 176 : 144, kQs = kQ5 ? 48 : 16;
  constexpr bool kScaleSums = MB == 1;
  const int64_t nb = k / 256;
  const int64_t ahead = prefetch_ahead(nb * kBytes);
  const __m256i low4 = _mm256_set1_epi16(0x000f);
  for (int r = 0; r < kRows; ++r) {
    __m256 acc[MB];
    for (int i = 0; i < MB; ++i) acc[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* p = rows[r] + b * kBytes;
      for (int off = 0; off < kBytes; off += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(p) + ahead + off, _MM_HINT_T0);
      }
      uint64_t sc8, mn8;
      k_scales_min8(p + 4, &sc8, &mn8);
      // The 8 scale bytes in every 64-bit lane: a byte shuffle with index (j, 0x80) per 16-bit
      // lane (j, 0x80, 0x80, 0x80 per 32-bit lane) broadcasts sc_j as int16 (int32).
      const __m256i scb = _mm256_set1_epi64x(static_cast<int64_t>(sc8));
      const int16_t* xg[MB];
      __m256i ai[MB];
      for (int i = 0; i < MB; ++i) {
        xg[i] = x16_group(x, ldx, i, b);
        ai[i] = _mm256_setzero_si256();
      }
      const __m256i qh = kQ5 ? load32(p + 16) : _mm256_setzero_si256();
#pragma GCC unroll 4
      for (int c2 = 0; c2 < 4; ++c2) {
        const int j = 2 * c2;
        const __m256i v = load32(p + kQs + 32 * c2);
        __m256i w[4];  // sub-block j even, odd elements, then j + 1's
        if constexpr (kQ5) {
          // The fifth bits of sub-blocks j and j + 1 to bits 4 and 12, above their nibbles.
          const __m256i h0 = _mm256_and_si256(
              j <= 4 ? _mm256_slli_epi16(qh, 4 - j) : _mm256_srli_epi16(qh, j - 4),
              _mm256_set1_epi16(0x1010));
          const __m256i h1 = _mm256_and_si256(
              j + 1 <= 4 ? _mm256_slli_epi16(qh, 3 - j) : _mm256_srli_epi16(qh, j - 3),
              _mm256_set1_epi16(0x1010));
          const __m256i nib = _mm256_set1_epi16(0x0f0f), byte = _mm256_set1_epi16(0x00ff);
          const __m256i lo = _mm256_or_si256(_mm256_and_si256(v, nib), h0);
          const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), nib), h1);
          w[0] = _mm256_and_si256(lo, byte);
          w[1] = _mm256_srli_epi16(lo, 8);
          w[2] = _mm256_and_si256(hi, byte);
          w[3] = _mm256_srli_epi16(hi, 8);
        } else {
          w[0] = _mm256_and_si256(v, low4);
          w[1] = _mm256_and_si256(_mm256_srli_epi16(v, 8), low4);
          w[2] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
          w[3] = _mm256_srli_epi16(v, 12);
        }
        if constexpr (!kScaleSums) {
          const __m256i s0 = _mm256_shuffle_epi8(scb, _mm256_set1_epi16(0x8000 | j));
          const __m256i s1 = _mm256_shuffle_epi8(scb, _mm256_set1_epi16(0x8000 | (j + 1)));
          w[0] = _mm256_mullo_epi16(w[0], s0);
          w[1] = _mm256_mullo_epi16(w[1], s0);
          w[2] = _mm256_mullo_epi16(w[2], s1);
          w[3] = _mm256_mullo_epi16(w[3], s1);
        }
        for (int i = 0; i < MB; ++i) {
          const int16_t* xb = xg[i] + 64 * c2;
          if constexpr (kScaleSums) {
            __m256i t0 =
                madd_add<kVnni>(_mm256_madd_epi16(w[0], load32(xb)), w[1], load32(xb + 16));
            __m256i t1 =
                madd_add<kVnni>(_mm256_madd_epi16(w[2], load32(xb + 32)), w[3], load32(xb + 48));
            const int32_t i0 = static_cast<int32_t>(0x80808000u | j);
            t0 = _mm256_mullo_epi32(t0, _mm256_shuffle_epi8(scb, _mm256_set1_epi32(i0)));
            t1 = _mm256_mullo_epi32(t1, _mm256_shuffle_epi8(scb, _mm256_set1_epi32(i0 + 1)));
            ai[i] = _mm256_add_epi32(ai[i], _mm256_add_epi32(t0, t1));
          } else {  // the codes carry their scales: two short chains, then one add into the sum
            // (a chain of four vpdpwssd into ai measured 0.90-0.98x at m = 2: their latency)
            const __m256i t0 =
                madd_add<kVnni>(_mm256_madd_epi16(w[0], load32(xb)), w[1], load32(xb + 16));
            const __m256i t1 =
                madd_add<kVnni>(_mm256_madd_epi16(w[2], load32(xb + 32)), w[3], load32(xb + 48));
            ai[i] = _mm256_add_epi32(ai[i], _mm256_add_epi32(t0, t1));
          }
          // Keeps GCC from hoisting every vpmaddwd of the block ahead of the adds (it then
          // spilled most of them): the sum is complete, in a register, after each 64 weights.
          __asm__("" : "+x"(ai[i]));
        }
      }
      const __m256 d = f16_broadcast(p);
      const __m256 ml = _mm256_mul_ps(
          f16_broadcast(p + 2),
          _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(mn8)))));
      for (int i = 0; i < MB; ++i) {
        const float* xb = x + i * ldx + b * kX16GroupFloats;
        const __m256 ds = _mm256_mul_ps(d, _mm256_broadcast_ss(xb + kX16Scale));
        acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ai[i]), ds, acc[i]);
        acc[i] = _mm256_fnmadd_ps(ml, _mm256_loadu_ps(xb + kX16Sums), acc[i]);
      }
    }
    for (int i = 0; i < MB; ++i) out[i * kRows + r] = hsum(acc[i]);
  }
}

// ---- Dispatch ----

static_assert(kMaxM == kIntDotMaxM);
template <bool V>
constexpr IntDotFns kQ8_0Fns = {dot_b32_x16_mb<BlockQ8_0, 1, V>, dot_b32_x16_mb<BlockQ8_0, 2, V>,
                                dot_b32_x16_mb<BlockQ8_0, 3, V>, dot_b32_x16_mb<BlockQ8_0, 4, V>};
template <bool V>
constexpr IntDotFns kQ4_0Fns = {dot_b32_x16_mb<BlockQ4_0, 1, V>, dot_b32_x16_mb<BlockQ4_0, 2, V>,
                                dot_b32_x16_mb<BlockQ4_0, 3, V>, dot_b32_x16_mb<BlockQ4_0, 4, V>};
template <class B, bool V>
constexpr IntDotFns kB32Fns = {dot_b32_x16_mb<B, 1, V>, dot_b32_x16_mb<B, 2, V>,
                               dot_b32_x16_mb<B, 3, V>, dot_b32_x16_mb<B, 4, V>};
template <bool V>
constexpr IntDotFns kIQ4_XSFns = {dot_iq4_xs_x16_mb<1, V>, dot_iq4_xs_x16_mb<2, V>,
                                  dot_iq4_xs_x16_mb<3, V>, dot_iq4_xs_x16_mb<4, V>};
template <class K, bool V>
constexpr IntDotFns kK16Fns = {dot_k16_x16_mb<K, 1, V>, dot_k16_x16_mb<K, 2, V>,
                               dot_k16_x16_mb<K, 3, V>, dot_k16_x16_mb<K, 4, V>};
template <bool V>
constexpr const IntDotFns& kQ6_KFns = kK16Fns<Q6KCodes, V>;
template <bool V>
constexpr const IntDotFns& kQ3_KFns = kK16Fns<Q3KCodes, V>;
template <bool V>
constexpr IntDotFns kQ4_KFns = {dot_k_x16_mb<false, 1, V>, dot_k_x16_mb<false, 2, V>,
                                dot_k_x16_mb<false, 3, V>, dot_k_x16_mb<false, 4, V>};
template <bool V>
constexpr IntDotFns kQ5_KFns = {dot_k_x16_mb<true, 1, V>, dot_k_x16_mb<true, 2, V>,
                                dot_k_x16_mb<true, 3, V>, dot_k_x16_mb<true, 4, V>};

}  // namespace

GgmlDotTable ggml_x16_dot_avx2(GgmlType type) {
  auto entry = []<class L>(L, X16Order order) {
    GgmlDotTable t{kRows, kMaxM, L::dot, true, x16_floats,
                   order == X16Order::kEvenOdd ? prep_x16<X16Order::kEvenOdd>
                   : order == X16Order::kLane8 ? prep_x16<X16Order::kLane8>
                                               : prep_x16<X16Order::kElement>};
    t.resolve = L::resolve;
    return t;
  };
  auto b32 = [&]<class B>(B) {
    return entry(ByLevel<kB32Fns<B, false>, kB32Fns<B, true>>{}, B::kOrder);
  };
  constexpr X16Order kElement = X16Order::kElement, kEvenOdd = X16Order::kEvenOdd,
                     kLane8 = X16Order::kLane8;
  switch (type) {
    case GgmlType::kQ8_0: return entry(ByLevel<kQ8_0Fns<false>, kQ8_0Fns<true>>{}, kElement);
    case GgmlType::kQ4_0: return entry(ByLevel<kQ4_0Fns<false>, kQ4_0Fns<true>>{}, kElement);
    case GgmlType::kQ6_K: return entry(ByLevel<kQ6_KFns<false>, kQ6_KFns<true>>{}, kEvenOdd);
    case GgmlType::kQ4_K: return entry(ByLevel<kQ4_KFns<false>, kQ4_KFns<true>>{}, kEvenOdd);
    case GgmlType::kQ5_K: return entry(ByLevel<kQ5_KFns<false>, kQ5_KFns<true>>{}, kEvenOdd);
    case GgmlType::kQ4_1: return b32(BlockQ4_1{});
    case GgmlType::kQ5_0: return b32(BlockQ5_0{});
    case GgmlType::kQ5_1: return b32(BlockQ5_1{});
    case GgmlType::kIQ4_NL: return b32(BlockIQ4_NL{});
    case GgmlType::kQ3_K: return entry(ByLevel<kQ3_KFns<false>, kQ3_KFns<true>>{}, kEvenOdd);
    // Two byte planes of x16 (gemm_ggml_x8_avx2.cc): 1.2-1.5x the K16 kernel, whose min part
    // took two more vpmaddwd per 32 weights and row of x.
    case GgmlType::kQ2_K: return ggml_x16_planes_dot_avx2(type);
    case GgmlType::kIQ4_XS: return entry(ByLevel<kIQ4_XSFns<false>, kIQ4_XSFns<true>>{}, kLane8);
    default: return GgmlDotTable{};
  }
}

void set_x16_kernels_avx2(GgmlKernels& t) {
  for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ6_K, GgmlType::kQ4_K,
                        GgmlType::kQ5_K, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                        GgmlType::kIQ4_NL, GgmlType::kIQ4_XS, GgmlType::kQ3_K,
                        GgmlType::kQ2_K}) {
    t.dot[static_cast<int>(type)] = ggml_x16_dot_avx2(type);
  }
}

}  // namespace sampan::cpu::gemm_detail
