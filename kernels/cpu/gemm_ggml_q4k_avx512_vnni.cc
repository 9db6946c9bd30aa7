// Decode (m < kGgmlPrefillMinM) of GGUF Q4_K and Q5_K on AVX512-VNNI, four weight rows in step:
// x rounded to 16 bits per 256 elements at the default precision (GgmlKernels::dot_vnni; for m >=
// 2 rows of x dot_vnni_batch, the wide kernel below) or to int8 with GemmPrecision::kBf16
// (GgmlKernels::dot_x8), multiplied with the codes as bytes.
//
// Why: the kernels these replace (gemm_ggml_avx512.cc's x16 kernel, which stays for AVX-512
// without VNNI, and an x8 kernel that took one row at a time) unpacked each block's twelve bytes
// of 6-bit scales and mins with scalar shifts and moved them to vectors one row at a time, and
// the x16 one widened every code to int16 and broadcast its scales from general registers. On
// Zen 5 that per-block work was half their time and Q4_K_M decode ran at 0.86x llama.cpp's.
// Here:
//  - One 128-bit lane per row carries the first 16 bytes of the four rows' blocks (f16 d, f16
//    dmin, the 12 scale bytes); seven vector operations unpack all four rows' 8 scales and 8
//    mins into bytes (unpack_scales), one vcvtph2ps each gives d and dmin for the four rows, and
//    the next block's are unpacked while this one multiplies (the loop was latency-bound).
//  - The codes stay bytes. A 64-byte load of a block's nibbles holds elements 128 c + (0..31,
//    64..95) in its low nibbles and 128 c + (32..63, 96..127) in its high ones (c = 0, 1; Q4_K's
//    32 bytes of chunk j hold elements 64 j + l low and 64 j + 32 + l high), so x is prepared in
//    that order (prep): per 128 elements the runs [0, 32), [64, 96), [32, 64), [96, 128).
//    vpmaddubsw multiplies 64 unsigned codes with 64 signed bytes of x into 32 int16 pair sums
//    and vpdpwssd multiplies those by the sub-block scales (int16 in both halves of each dword,
//    dwords 0..7 one sub-block, 8..15 the other: one vpshufb from the row's lane) into int32
//    lanes for the whole block.
//  - x8 (one plane): x8 = round(x / s), s = absmax / 127: 2 multiplying instructions per 64
//    weights and row of x.
//  - x16 (two planes): x16 = round(x / s), s = absmax / 32639 (= 127 * 257), written as
//    x16 = 256 xh + xl with xh = (x16 + 128) >> 8 in [-127, 127] and xl in [-128, 127]; the xh
//    products are summed apart and shifted left by 8 (kSplit, MB <= 2) or meet the scales times
//    256 (sc << 8 <= 16128, still int16; fewer registers for MB >= 3): 4 multiplying
//    instructions per 64 weights, against the widening kernel's 2 vpmovzxbw + 2 vpmullw + 2
//    vpdpwssd and 8 scale broadcasts per block.
//    Lane bounds per block: a lane takes 8 pair sums of each plane, |pair| <= 2 * 31 * 128 (Q5_K
//    codes <= 31), so |lane| <= 8 * 7936 * 16128 + 8 * 7936 * 63 < 2^30.
//  - The min term sum_j dmin mn_j (s sum x)_j in integers: the block's sums of x8 (or of xh and
//    xl) over each 32-element sub-block are int16 in the prepared x, and one vpmaddwd with the
//    four rows' mins (lane r: row r) gives, per row, 4 dwords that sum to sum_j mn_j S_j (x16:
//    (mn . Sh) << 8 plus mn . Sl, each dword at most 2 * 63 * (4064 * 256 + 4096) < 2^28), then
//    one FMA with dmin s into a per-row-of-x accumulator whose lane r is subtracted from row r's
//    output.
//  - Wide (ggml_q4k_wide_dot_avx512_vnni, m >= 2 rows of x at the default precision): the
//    same sum regrouped as sum (sc q) x16. Per 64 code bytes two vpmaddubsw of the codes with
//    the sub-block scale in the even (or odd) bytes and zero in the others (kPatEven / kPatOdd)
//    give sc q of the even (odd) bytes as 32 int16, once per block and row of W; each row of x
//    then needs two vpdpwssd against x16 as int16 (prep<2, true> lays the even and odd bytes'
//    elements apart), against four multiplying instructions on the two planes. Lanes: 16
//    products per block of |sc q| <= 31 * 63 and |x16| <= 32639, < 2^30. Measured on Emerald
//    Rapids without AMX, 1 thread, an in-process interleaved A/B against the two-plane kernel
//    (TinyLlama's 2048 x 2048 and 2048 x 5632 Q4_K, median of 60 calls each): m = 1 0.89-0.97x
//    (the same multiplying work, plus a second scale shuffle per 64 codes), so m = 1 keeps the
//    two planes; m = 2 1.02-1.06x, m = 4 / 8 / 16 1.12-1.27x with the weights in cache and
//    1.08-1.14x streaming them from DRAM (four runs); Q5_K in cache 0.98 / 1.12 / 1.16 / 1.12x at
//    m = 2 / 4 / 8 / 16. Not the 1.6x that counting multiplying instructions predicts: the rows
//    of x (512 bytes per block and row, loaded again for each row of W) and the shuffles bound
//    it too. Taking all four rows of W per load of x instead (int32 sums for 4 x m pairs)
//    spilled registers and measured 0.87-1.1x; two rows of W per load 0.87-1.09x.
// Measured (Zen 5, 1 thread, bench_gemm_ggml --cached --threads 1 --m 1,2,4, three alternating
// rounds against the kernels replaced, TinyLlama shapes), GB/s: Q4_K x16 m = 1 / 2 / 4
// 21.9-24.9 / 19.6-20.7 / 11.9-12.7 -> 40.5-44.7 / 24.9-27.1 / 12.7-14.0, x8 30.9-33.4 /
// 25.2-27.1 / 16.7-17.5 -> 52.1-58.1 / 36.7-42.0 / 19.8-23.3; Q5_K x16 m = 1 24.6-25.7 ->
// 39.0-42.5, x8 31.5-34.6 -> 48.4-53.6. End to end (sampan bench, Q4_K_M, 1 thread) decode
// 1.25x llama.cpp's, from 0.86x.
//
// Prepared x, per 256-element block (64-byte aligned), kPlanes = 1 (x8) or 2 (x16; the wide
// kernel's layout is at prep): bytes
// [0, 256) x8 or xh and, with two planes, [256, 512) xl, in the order above; int16 at floats
// [64 kPlanes, 64 kPlanes + 4 kPlanes) the sums per 32-element sub-block j in element order (of
// x8, or of xh then of xl); float 64 kPlanes + 8 s; zero to 64 kPlanes + 16. A block holding an
// inf or NaN has zero codes and s = NaN (its outputs come out NaN); one with absmax below 2^-100
// counts as zero.
//
// Error: gemm_ggml.h's x16 bound (kGgmlDecodeXError: x off by s / 2 = absmax_b / 65278 plus f32
// roundings) or x8 bound (kX8Error); the integer sums are exact, then one conversion to f32 and
// one FMA with d s per block and row (and the min term's conversion and FMA with dmin s), within
// the bound's f32 summation term.
#include <immintrin.h>

#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/cpu/gemm_ggml.h"
#include "kernels/cpu/gemm_ggml_avx512.h"
#include "kernels/cpu/vec_avx512.h"

namespace sampan::cpu::gemm_detail {
namespace {

constexpr int kRows = 4;  // R: rows of W per call (one 128-bit lane each)
constexpr int kMaxM = 4;  // rows of x per pass
static_assert(kRows <= kGgmlMaxRows && kMaxM <= kGgmlMaxM);

template <int kPlanes>
struct XLayout {
  static constexpr int64_t kSumsAt = 64 * kPlanes;  // int16 [kPlanes][8]: sums per sub-block
  static constexpr int64_t kScaleAt = kSumsAt + 8;  // float: s
  static constexpr int64_t kBlockFloats = kSumsAt + 16;
  static constexpr float kXMax = kPlanes == 1 ? 127.0f : 32639.0f;
};

template <int kPlanes>
int64_t x_floats(int64_t k) {
  return k / 256 * XLayout<kPlanes>::kBlockFloats;
}

// Position of element t (< 128) of a 128-element run in the prepared order.
constexpr int permuted(int t) { return t < 32 ? t : t < 64 ? t + 32 : t < 96 ? t - 32 : t; }

// The wide layout (prep<2, true>; dot_mb with kWide): per 256-element
// block 256 int16 x16 = round(x / s) (s = absmax / 32639, the two-plane kernel's x16 = 256 xh +
// xl), grouped as the kernel meets the codes: for each 64-byte load c (0, 1) and nibble n (0:
// low, 1: high), whose 64 code bytes p hold elements e(p) = 128 c + 32 n + 64 (p / 32) + p % 32,
// 32 int16 of the even bytes' elements x16[e(2 i)], then 32 of the odd bytes' x16[e(2 i + 1)].
// Then the int16 sums of xh and of xl per sub-block and s, at the two-plane offsets.
// kWide writes it instead of the two planes.
template <int kPlanes, bool kWide = false>
void prep(const float* x, int64_t k, float* out) {
  static_assert(!kWide || kPlanes == 2);
  using L = XLayout<kPlanes>;
  // A chunk's 16 int16 as its 8 even elements, then its 8 odd ones (the wide layout's slots).
  alignas(32) static constexpr int16_t kEvenOdd[16] = {0, 2, 4, 6, 8, 10, 12, 14,
                                                       1, 3, 5, 7, 9, 11, 13, 15};
  for (int64_t b = 0; b < k / 256; ++b) {
    const float* xb = x + 256 * b;
    float* o = out + b * L::kBlockFloats;
    float sx, inv;
    const bool nonfinite = block_x_scale(xb, 256, L::kXMax, &sx, &inv);
    auto* q = reinterpret_cast<int8_t*>(o);
    auto* sums = reinterpret_cast<int16_t*>(o + L::kSumsAt);  // [kPlanes][8]
    const __m512 vinv = _mm512_set1_ps(inv);
    const __m512i xmax = _mm512_set1_epi32(static_cast<int>(L::kXMax));
    for (int j = 0; j < 8 * kPlanes; ++j) sums[j] = 0;
    for (int g = 0; g < 16; ++g) {
      // A non-finite block keeps its codes 0 (inf * 0 would convert to INT_MIN).
      __m512i v = nonfinite ? _mm512_setzero_si512()
                            : _mm512_cvt_roundps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + 16 * g), vinv),
                                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      v = _mm512_max_epi32(_mm512_min_epi32(v, xmax), _mm512_sub_epi32(_mm512_setzero_si512(), xmax));
      const int at = 128 * (g / 8) + permuted(16 * (g % 8));
      if constexpr (kPlanes == 1) {
        sums[g / 2] = static_cast<int16_t>(sums[g / 2] + _mm512_reduce_add_epi32(v));  // <= 4064
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q + at), _mm512_cvtepi32_epi8(v));
      } else {
        const __m512i h = _mm512_srai_epi32(_mm512_add_epi32(v, _mm512_set1_epi32(128)), 8);
        const __m512i l = _mm512_sub_epi32(v, _mm512_slli_epi32(h, 8));
        sums[g / 2] = static_cast<int16_t>(sums[g / 2] + _mm512_reduce_add_epi32(h));
        sums[8 + g / 2] = static_cast<int16_t>(sums[8 + g / 2] + _mm512_reduce_add_epi32(l));
        if constexpr (kWide) {
          // Elements 128 c + t .. + 15 (t = 16 (g % 8)) lie in group 2 c + n (n = t / 32 % 2),
          // run t / 64 (A or B) at offset t % 32: even slots 16 run + (t % 32) / 2 onwards.
          const int t = 16 * (g % 8), grp = 2 * (g / 8) + t / 32 % 2;
          auto* q16 = reinterpret_cast<int16_t*>(o) + 64 * grp + 16 * (t / 64) + t % 32 / 2;
          const __m256i w = _mm256_permutexvar_epi16(
              _mm256_load_si256(reinterpret_cast<const __m256i*>(kEvenOdd)), _mm512_cvtepi32_epi16(v));
          _mm_storeu_si128(reinterpret_cast<__m128i*>(q16), _mm256_castsi256_si128(w));
          _mm_storeu_si128(reinterpret_cast<__m128i*>(q16 + 32), _mm256_extracti128_si256(w, 1));
        } else {
          _mm_storeu_si128(reinterpret_cast<__m128i*>(q + at), _mm512_cvtepi32_epi8(h));
          _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 256 + at), _mm512_cvtepi32_epi8(l));
        }
      }
    }
    o[L::kScaleAt] = sx;
    for (int64_t j = L::kScaleAt + 1; j < L::kBlockFloats; ++j) o[j] = 0.0f;
  }
}

// Byte tables, one 128-bit lane each (repeated in the four lanes where the table is 16 bytes).
alignas(64) constexpr int8_t kSel1[16] = {4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15};
alignas(64) constexpr int8_t kSel2[16] = {-1, -1, -1, -1, 4, 5, 6, 7, -1, -1, -1, -1, 8, 9, 10, 11};
alignas(64) constexpr int8_t kLowBits[16] = {63, 63, 63, 63, 15, 15, 15, 15,
                                             63, 63, 63, 63, 15, 15, 15, 15};
alignas(64) constexpr int8_t kSelD[16] = {2, 3, 2, 3, 2, 3, 2, 3, 0, 1, 0, 1, 0, 1, 0, 1};
// Bytes 8..15 (the mins) as int16.
alignas(64) constexpr int8_t kSelMin[16] = {8, -1, 9, -1, 10, -1, 11, -1, 12, -1, 13, -1, 14, -1, 15, -1};

inline __m512i lanes4(const int8_t* t16) {
  return _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(t16)));
}

// The scale operand for 64 codes whose pair sums are sub-blocks a (dwords 0..7) and b (8..15),
// from a row's unpacked lane (bytes 0..7 its scales): int16 sc in both halves of each dword.
struct ScaleSel {
  alignas(64) int8_t idx[64];
  constexpr ScaleSel(int a, int b) : idx{} {
    for (int i = 0; i < 64; ++i) idx[i] = i % 2 == 1 ? -1 : static_cast<int8_t>(i < 32 ? a : b);
  }
};
// c = 0, 1: low nibbles (sub-blocks 4c, 4c + 2), then high nibbles (4c + 1, 4c + 3).
constexpr ScaleSel kScaleSel[4] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}};

// The wide kernel's scale operands for vpmaddubsw: sub-block a's (bytes 0..31) or b's (32..63)
// scale in the even (kOdd false) or odd bytes, zero in the others, so that the int16 lane i of
// vpmaddubsw(codes, pattern) is sc times the code of byte 2 i (or 2 i + 1).
struct ScalePattern {
  alignas(64) int8_t idx[64];
  constexpr ScalePattern(int a, int b, bool odd) : idx{} {
    for (int i = 0; i < 64; ++i) idx[i] = i % 2 == (odd ? 1 : 0) ? static_cast<int8_t>(i < 32 ? a : b) : -1;
  }
};
constexpr ScalePattern kPatEven[4] = {{0, 2, false}, {1, 3, false}, {4, 6, false}, {5, 7, false}};
constexpr ScalePattern kPatOdd[4] = {{0, 2, true}, {1, 3, true}, {4, 6, true}, {5, 7, true}};

// Q5_K: the qh bit of each half of a 64-byte load's low (2c) or high (2c + 1) nibbles.
struct QhBits {
  alignas(64) uint8_t v[64];
  constexpr QhBits(int a, int b) : v{} {
    for (int i = 0; i < 64; ++i) v[i] = static_cast<uint8_t>(1u << (i < 32 ? a : b));
  }
};
constexpr QhBits kQhBits[4] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}};

// The first 16 bytes of four blocks (lane r: row r's f16 d, f16 dmin, 12 bytes of packed 6-bit
// scales q[0..11]) -> lane r bytes 0..7 its scales sc_0..7, bytes 8..15 its mins mn_0..7.
// get_scale_min_k4: j < 4: sc_j = q[j] & 63, mn_j = q[j + 4] & 63; j >= 4: sc_j = (q[j + 4] &
// 15) | (q[j - 4] >> 6) << 4, mn_j = (q[j + 4] >> 4) | (q[j] >> 6) << 4.
inline __m512i unpack_scales(__m512i h) {
  const __m512i p1 = _mm512_shuffle_epi8(h, lanes4(kSel1));
  const __m512i p2 = _mm512_shuffle_epi8(h, lanes4(kSel2));
  // Bytes 12..15 of each lane (mn_4..7) take q[j + 4] >> 4.
  const __m512i t = _mm512_mask_blend_epi8(0xf000f000f000f000ull, p1, _mm512_srli_epi16(p1, 4));
  // (t & low bits) | ((p2 >> 6) << 4): the 16-bit shift by 2 brings bits 6..7 of each byte to
  // bits 4..5 (the bits below come from the byte itself, above them from its neighbour).
  return _mm512_ternarylogic_epi32(_mm512_and_si512(t, lanes4(kLowBits)), _mm512_srli_epi16(p2, 2),
                                   _mm512_set1_epi8(0x30), 0xf8);
}

// kWide: the wide kernel (see the top; x laid out by prep<2, true>).
template <bool kQ5, int kPlanes, int MB, bool kWide>
void dot_mb(const uint8_t* const* rows, int64_t k, const float* x, int64_t ldx, float* out) {
  static_assert(!kWide || kPlanes == 2);
  using L = XLayout<kPlanes>;
  constexpr int kBytes = kQ5 ? 176 : 144, kQs = kQ5 ? 48 : 16;
  constexpr bool kSplit = kPlanes == 2 && MB <= 2 && !kWide;
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const int64_t ahead = prefetch_ahead(k / 256 * kBytes);
  __m512 acc[kRows][MB], amin[MB];
  for (int i = 0; i < MB; ++i) {
    amin[i] = _mm512_setzero_ps();
    for (int r = 0; r < kRows; ++r) acc[r][i] = _mm512_setzero_ps();
  }
  const int64_t nb = k / 256;
  auto header = [&](int64_t b) {
    const uint8_t* p0 = rows[0] + b * kBytes;
    const uint8_t* p1 = rows[1] + b * kBytes;
    const uint8_t* p2 = rows[2] + b * kBytes;
    const uint8_t* p3 = rows[3] + b * kBytes;
    return _mm512_inserti32x4(
        _mm512_inserti32x4(_mm512_inserti32x4(_mm512_castsi128_si512(load16(p0)), load16(p1), 1),
                           load16(p2), 2),
        load16(p3), 3);
  };
  // Software-pipelined: block b + 1's scales are unpacked while block b multiplies.
  __m512i h_next = header(0), sc_next = unpack_scales(h_next);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p[kRows];
    for (int r = 0; r < kRows; ++r) {
      p[r] = rows[r] + b * kBytes;
      for (int off = 0; off < kBytes; off += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(p[r]) + ahead + off, _MM_HINT_T0);
      }
    }
    const __m512i h = h_next, sc = sc_next;
    if (b + 1 < nb) {
      h_next = header(b + 1);
      sc_next = unpack_scales(h_next);
    }
    // Lane r of dm: dmin_r (4 floats); of dv: d_r.
    const __m512i dh = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7),
                                                _mm512_shuffle_epi8(h, lanes4(kSelD)));
    const __m512 dm = _mm512_cvtph_ps(_mm512_castsi512_si256(dh));
    const __m512 dv = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(dh, 1));
    const __m512i m16 = _mm512_shuffle_epi8(sc, lanes4(kSelMin));  // lane r: mn_0..7 of row r
    __m512 ds[MB];  // lane r: d_r s_i
    for (int i = 0; i < MB; ++i) {
      const float* xb = x + i * ldx + b * L::kBlockFloats;
      const __m512 si = _mm512_set1_ps(xb[L::kScaleAt]);
      ds[i] = _mm512_mul_ps(dv, si);
      // Lane r: mn_2j S_2j + mn_2j+1 S_2j+1 (S the sums of x8, or 256 xh + xl) for row r.
      const auto* sums = reinterpret_cast<const __m128i*>(xb + L::kSumsAt);
      __m512i t = _mm512_madd_epi16(m16, _mm512_broadcast_i32x4(_mm_load_si128(sums)));
      if constexpr (kPlanes == 2) {
        t = _mm512_dpwssd_epi32(_mm512_slli_epi32(t, 8), m16,
                                _mm512_broadcast_i32x4(_mm_load_si128(sums + 1)));
      }
      amin[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(dm, si), amin[i]);
    }
    auto row = [&](auto rc) {
      constexpr int r = decltype(rc)::value;
      const __m512i sr = _mm512_shuffle_i32x4(sc, sc, 0x55 * r);
      __m512i qh2 = _mm512_setzero_si512();
      if constexpr (kQ5) qh2 = _mm512_broadcast_i64x4(load32(p[r] + 16));
      // ah: x8 or xh products (kWide: all), al: xl products (two planes; with kSplit, else into
      // ah with the scales times 256 for xh: fewer registers at larger MB, one more shift per 64
      // codes).
      __m512i ah[MB], al[MB];
      for (int i = 0; i < MB; ++i) ah[i] = al[i] = _mm512_setzero_si512();
      for (int c = 0; c < 2; ++c) {
        const __m512i v = _mm512_loadu_si512(p[r] + kQs + 64 * c);
        __m512i q[2] = {_mm512_and_si512(v, low4), _mm512_and_si512(_mm512_srli_epi16(v, 4), low4)};
        for (int n = 0; n < 2; ++n) {
          if constexpr (kQ5) {
            const __m512i bits = _mm512_load_si512(kQhBits[2 * c + n].v);
            q[n] = _mm512_mask_add_epi8(q[n], _mm512_test_epi8_mask(qh2, bits), q[n],
                                        _mm512_set1_epi8(16));
          }
          const int g = 2 * c + n;
          if constexpr (kWide) {
            // sc q as int16 (<= 31 * 63), even and odd bytes apart, once for every row of x.
            const __m512i we =
                _mm512_maddubs_epi16(q[n], _mm512_shuffle_epi8(sr, _mm512_load_si512(kPatEven[g].idx)));
            const __m512i wo =
                _mm512_maddubs_epi16(q[n], _mm512_shuffle_epi8(sr, _mm512_load_si512(kPatOdd[g].idx)));
            for (int i = 0; i < MB; ++i) {
              const auto* xq =
                  reinterpret_cast<const int16_t*>(x + i * ldx + b * L::kBlockFloats) + 64 * g;
              ah[i] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(ah[i], we, _mm512_load_si512(xq)), wo,
                                          _mm512_load_si512(xq + 32));
            }
          } else {
            const __m512i s = _mm512_shuffle_epi8(sr, _mm512_load_si512(kScaleSel[g].idx));
            const __m512i s_h = kPlanes == 2 && !kSplit ? _mm512_slli_epi16(s, 8) : s;
            for (int i = 0; i < MB; ++i) {
              const auto* xq = reinterpret_cast<const int8_t*>(x + i * ldx + b * L::kBlockFloats) +
                               128 * c + 64 * n;
              ah[i] = _mm512_dpwssd_epi32(ah[i], _mm512_maddubs_epi16(q[n], _mm512_load_si512(xq)), s_h);
              if constexpr (kPlanes == 2) {
                __m512i& a = kSplit ? al[i] : ah[i];
                a = _mm512_dpwssd_epi32(a, _mm512_maddubs_epi16(q[n], _mm512_load_si512(xq + 256)), s);
              }
            }
          }
        }
      }
      for (int i = 0; i < MB; ++i) {
        // Two planes: 256 ah + al, |lane| <= 2^30 (the bound above).
        const __m512i ai = kSplit ? _mm512_add_epi32(al[i], _mm512_slli_epi32(ah[i], 8)) : ah[i];
        acc[r][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ai), _mm512_shuffle_f32x4(ds[i], ds[i], 0x55 * r),
                                    acc[r][i]);
      }
    };
    row(std::integral_constant<int, 0>{});
    row(std::integral_constant<int, 1>{});
    row(std::integral_constant<int, 2>{});
    row(std::integral_constant<int, 3>{});
  }
  for (int i = 0; i < MB; ++i) {
    alignas(64) float mins[16];
    _mm512_store_ps(mins, amin[i]);
    for (int r = 0; r < kRows; ++r) {
      out[i * kRows + r] = _mm512_reduce_add_ps(acc[r][i]) -
                           ((mins[4 * r] + mins[4 * r + 1]) + (mins[4 * r + 2] + mins[4 * r + 3]));
    }
  }
}

template <bool kQ5, int kPlanes, bool kWide>
void dot(const uint8_t* const* rows, int64_t k, const float* x, int64_t ldx, int mb, float* out) {
  static_assert(kMaxM == 4);
  switch (mb) {
    case 1: return dot_mb<kQ5, kPlanes, 1, kWide>(rows, k, x, ldx, out);
    case 2: return dot_mb<kQ5, kPlanes, 2, kWide>(rows, k, x, ldx, out);
    case 3: return dot_mb<kQ5, kPlanes, 3, kWide>(rows, k, x, ldx, out);
    default: return dot_mb<kQ5, kPlanes, 4, kWide>(rows, k, x, ldx, out);
  }
}

template <bool kQ5, int kPlanes, bool kWide = false>
GgmlDotTable table() {
  return {kRows, kMaxM, dot<kQ5, kPlanes, kWide>, true, x_floats<kPlanes>,
          prep<kPlanes, kWide>, kPlanes == 1};
}

}  // namespace

GgmlDotTable ggml_q4k_dot_avx512_vnni(GgmlType type, bool x8) {
  if (type == GgmlType::kQ4_K) return x8 ? table<false, 1>() : table<false, 2>();
  if (type == GgmlType::kQ5_K) return x8 ? table<true, 1>() : table<true, 2>();
  return {};
}

GgmlDotTable ggml_q4k_wide_dot_avx512_vnni(GgmlType type) {
  if (type == GgmlType::kQ4_K) return table<false, 2, true>();
  if (type == GgmlType::kQ5_K) return table<true, 2, true>();
  return {};
}

}  // namespace sampan::cpu::gemm_detail
