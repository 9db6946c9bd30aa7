// AVX2 decode kernels for the GGUF K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) and IQ4_XS against x
// rounded to int8 per 256 elements: GgmlKernels::dot_x8 of the AVX2 table, taken with
// GemmPrecision::kBf16 (vnni_x8, gemm_quant.h) at levels without AVX-512, bound kX8Error
// (llama.cpp's Q8_K activations for these types). The default precision keeps the x16 kernels
// (gemm_ggml_x16_avx2.cc), except Q2_K's, which is the same kernel here on x16 as two byte planes
// (ggml_x16_planes_dot_avx2: bound kGgmlDecodeXError, gemm_ggml.h).
//
// Why: the x16 kernels multiply with vpmaddwd, 16 products per instruction, and widen every
// code to int16 first. Here the codes stay bytes (ggml_chunk_u8: 32 unsigned codes per chunk)
// and vpmaddubsw multiplies 32 of them with 32 bytes of x8 into 16 int16 pair sums, which one
// vpmaddwd with the chunk's integer sub-block scales (lanes 0..7 the scale of its first 16
// elements, 8..15 of the next 16) turns into int32 lanes for the whole block: per 32 weights
// and row of x, 2 multiplying instructions and an add, the codes' unpacking shared by the rows
// of x. The offsets (Q6_K's 32, Q3_K's 4) and mins (Q2_K, Q4_K, Q5_K) act per 16 elements on the
// prepared sums of x8: one vpmaddwd per block and row of x each. One conversion and FMA with d s
// (and dmin s) per block and row.
//
// Lane bounds: a pair sum is at most 2 * 63 * 127 = 16002 (Q6_K's codes; vpmaddubsw does not
// saturate), times |sc| <= 128, two per lane and 8 chunks: |lane| < 2^26; the offset term 2 *
// 128 * 2032 * 32 < 2^24. IQ4_XS: signed codebook values (signed_pairs), |ls - 32| <= 32.
// Measured (Zen 3 VM, 1 thread, bench_gemm_ggml --cached --m 1, against the x16 kernels, GB/s):
// Q4_K 14.0-15.3 -> 18.1-20.1, Q5_K 13.5-14.7 -> 15.8-17.2, Q6_K 13.7-14.7 -> 19.7-21.1, Q3_K
// 6.3-6.6 -> 8.9-9.5, Q2_K 5.2-5.5 -> 11.5-12.9, IQ4_XS 8.0 -> 10.1; IQ4_XS 10.0-10.1 ->
// 11.3-11.9 since nibbles_u8 (ggml_chunk_avx2.h) reads its 16 bytes by a broadcast load and
// shifts the upper lane by one vpsrlvd (it took a 128-bit load, two ands, a shift and a lane
// insert). Where the CPU has AVX-VNNI (kVnni) each vpmaddwd + vpaddd is one VEX vpdpwssd:
// Emerald Rapids, 1 thread, --cached, 8 alternating rounds, paired medians against the plain
// form (a noisy host: every round's ratio at 0.6-2.2): Q2_K x16 planes m = 1..3 1.19-1.38x, x8
// Q2_K 1.01-1.20x, Q3_K 1.08-1.29x, IQ4_XS 1.07-1.18x.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "kernels/cpu/gemm_ggml_avx2.h"
#include "kernels/cpu/ggml_chunk_avx2.h"

namespace sampan::cpu::gemm_detail {
namespace {

constexpr int kMaxM = 4;  // rows of x per call
static_assert(kMaxM <= kGgmlMaxM && kMaxM == kIntDotMaxM);

// ---- Prepared x ----
//
// Per group of 256 elements (64-byte aligned; a last group of k % 256 elements takes its own
// absmax, zero past its end), P planes of signed bytes in element order: P = 1, x8 = round(x /
// s), s = absmax / 127; P = 2 (the x16 kernels below), x16 = round(x / s), s = absmax / 32639 =
// 127 * 257, as 256 xh + xl with xh = (x16 + 128) >> 8 in [-127, 127] and xl in [-128, 127]
// (gemm_ggml_q4k_avx512_vnni.cc's split). Bytes [0, 256 P) the planes (xh first); then per
// plane the 16 int16 sums of its bytes over each 16 elements; float 72 P s; zero to the end
// (80 P floats). A group holding an inf or NaN has zero planes and s = NaN (its outputs come out
// NaN); one with absmax below 2^-100 counts as zero (as the x16 kernels, gemm_ggml.h).
template <int P>
struct XLayout {
  static constexpr int64_t kGroupFloats = 80 * P;
  static constexpr int kSumBytes = 256 * P;  // the first plane's sums (the second's 32 on)
  static constexpr int kScale = 72 * P;      // float index of s
  static constexpr float kMax = P == 1 ? 127.0f : 32639.0f;
};

template <int P>
int64_t x_floats(int64_t k) {
  return (k + 255) / 256 * XLayout<P>::kGroupFloats;
}

// 32 int32 in [-128, 127] (4 vectors, element order) as bytes at q, and their two 16-element
// sums.
inline void store_bytes(const __m256i (&v)[4], int8_t* q, int16_t* sums) {
  // The saturating packs are exact; they interleave 4-dword runs, which the permutation puts
  // back in element order.
  const __m256i b =
      _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
  _mm256_store_si256(reinterpret_cast<__m256i*>(q),
                     _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  sums[0] = static_cast<int16_t>(hsum_epi32(_mm256_add_epi32(v[0], v[1])));
  sums[1] = static_cast<int16_t>(hsum_epi32(_mm256_add_epi32(v[2], v[3])));
}

template <int P>
void prep_x(const float* x, int64_t k, float* out) {
  using XL = XLayout<P>;
  for (int64_t g = 0; g < (k + 255) / 256; ++g) {
    const float* xg = x + 256 * g;
    const int n = static_cast<int>(std::min<int64_t>(256, k - 256 * g));  // a multiple of 32
    float* o = out + g * XL::kGroupFloats;
    auto* q = reinterpret_cast<int8_t*>(o);
    auto* sums = reinterpret_cast<int16_t*>(q + XL::kSumBytes);
    const AbsMax a = absmax_avx2(xg, n);
    float sx = 0.0f, inv = 0.0f;
    if (!a.finite) {
      sx = __builtin_nanf("");
    } else if (a.value >= 0x1p-100f) {
      sx = a.value / XL::kMax;
      inv = XL::kMax / a.value;
    }
    const __m256 vinv = _mm256_set1_ps(inv);
    for (int c = 0; c < 8; ++c) {  // 32 elements per step
      if (32 * c >= n) {
        for (int t = 0; t < P; ++t) {
          std::memset(q + 256 * t + 32 * c, 0, 32);
          sums[16 * t + 2 * c] = sums[16 * t + 2 * c + 1] = 0;
        }
        continue;
      }
      __m256i v[4];
      for (int e = 0; e < 4; ++e) v[e] = round_scaled_epi32(xg + 32 * c + 8 * e, vinv);
      if constexpr (P == 1) {
        store_bytes(v, q + 32 * c, sums + 2 * c);
      } else {
        __m256i h[4], l[4];
        for (int e = 0; e < 4; ++e) {
          h[e] = _mm256_srai_epi32(_mm256_add_epi32(v[e], _mm256_set1_epi32(128)), 8);
          l[e] = _mm256_sub_epi32(v[e], _mm256_slli_epi32(h[e], 8));
        }
        store_bytes(h, q + 32 * c, sums + 2 * c);
        store_bytes(l, q + 256 + 32 * c, sums + 16 + 2 * c);
      }
    }
    o[XL::kScale] = sx;
    for (int j = XL::kScale + 1; j < XL::kGroupFloats; ++j) o[j] = 0.0f;
  }
}

// ---- Signed codes ----

// The pair sums w0 x0 + w1 x1 of the signed bytes w and x as int16, from aw = |w|: vpmaddubsw
// takes |w| as unsigned (|-128| = 128 stays right there) and x with the sign of w (|x| <= 127,
// so negating never overflows); pairs at most 2 * 128 * 127 = 32512, no saturation.
inline __m256i signed_pairs(__m256i aw, __m256i w, __m256i x) {
  return _mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, w));
}

// ---- The K-quant blocks' scales ----
//
// Per 256-element block: the integer scale of each 16 elements as 16 bytes (signed where kSigned),
// the mins likewise (kMins), and the f16 d and dmin.
template <GgmlKind kKind>
struct KScales {
  using L = GgmlLayout<kKind>;
  static constexpr bool kSigned = L::kQ6K || L::kQ3K || L::kIq4Xs;
  static constexpr bool kMins = L::kMins;
  // IQ4_XS's codes are the codebook's signed values (iq4_values_i8), not unsigned bytes.
  static constexpr bool kSignedCodes = L::kIq4Xs;
  static constexpr int kOff = kSignedCodes ? 0 : L::kOff;  // Q6_K 32, Q3_K 4, else 0
  static constexpr int kD = L::kQ6K ? 208 : L::kQ3K ? 108 : L::kQ2K ? 80 : 0;  // f16 d
  static constexpr int kDmin = L::kQ2K ? 82 : 2;                                // f16 dmin
  // sc (and mn) per 16 elements.
  static void get(const uint8_t* p, __m128i* sc, __m128i* mn) {
    if constexpr (L::kQ4K) {  // 8 sub-blocks of 32: each byte twice
      uint64_t s8, m8;
      k_scales_min8(p + 4, &s8, &m8);
      const __m128i s = _mm_cvtsi64_si128(static_cast<int64_t>(s8));
      const __m128i m = _mm_cvtsi64_si128(static_cast<int64_t>(m8));
      *sc = _mm_unpacklo_epi8(s, s);
      *mn = _mm_unpacklo_epi8(m, m);
    } else if constexpr (L::kQ2K) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
      *sc = _mm_and_si128(v, _mm_set1_epi8(0x0f));
      *mn = _mm_and_si128(_mm_srli_epi16(v, 4), _mm_set1_epi8(0x0f));
    } else if constexpr (L::kQ3K) {
      *sc = q3_k_scales(p);
    } else if constexpr (L::kIq4Xs) {  // ls_j - 32 per 32 elements: each byte twice
      // ls_j = nibble j of scales_l | 2-bit field j of scales_h << 4, spread to byte j by
      // shifts and masks (a byte store per j, then a vector load, stalled on store forwarding:
      // slower than the x16 kernel).
      uint16_t sh;
      uint32_t sl;
      std::memcpy(&sh, p + 2, 2);
      std::memcpy(&sl, p + 4, 4);
      uint64_t h = sh;
      h = (h | h << 24) & 0x000000ff000000ffull;
      h = (h | h << 12) & 0x000f000f000f000full;
      h = (h | h << 6) & 0x0303030303030303ull;
      uint64_t l = sl;
      l = (l | l << 16) & 0x0000ffff0000ffffull;
      l = (l | l << 8) & 0x00ff00ff00ff00ffull;
      l = (l & 0x000f000f000f000full) | (l & 0x00f000f000f000f0ull) << 4;
      const __m128i ls = _mm_sub_epi8(_mm_cvtsi64_si128(static_cast<int64_t>(l | h << 4)),
                                      _mm_set1_epi8(32));
      *sc = _mm_unpacklo_epi8(ls, ls);
    } else {
      *sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192));
    }
  }
};

// The 16 bytes as int16.
template <bool kSigned>
inline __m256i widen16(__m128i v) {
  return kSigned ? _mm256_cvtepi8_epi16(v) : _mm256_cvtepu8_epi16(v);
}

// For chunk c (elements 32 c .. 32 c + 31): int16 lanes 0..7 scale 2 c, lanes 8..15 scale 2 c + 1,
// from the 16 scale bytes in both 128-bit lanes (sc2).
template <bool kSigned, int c>
inline __m256i chunk_scales(__m256i sc2) {
  constexpr char a = 2 * c, b = 2 * c + 1, z = static_cast<char>(0x80);
  if constexpr (kSigned) {  // the byte to the high half, then an arithmetic shift
    const __m256i idx = _mm256_setr_epi8(z, a, z, a, z, a, z, a, z, a, z, a, z, a, z, a, z, b, z,
                                         b, z, b, z, b, z, b, z, b, z, b, z, b);
    return _mm256_srai_epi16(_mm256_shuffle_epi8(sc2, idx), 8);
  } else {
    const __m256i idx = _mm256_setr_epi8(a, z, a, z, a, z, a, z, a, z, a, z, a, z, a, z, b, z, b,
                                         z, b, z, b, z, b, z, b, z, b, z, b, z);
    return _mm256_shuffle_epi8(sc2, idx);
  }
}

// Block b of weight row p (bytes of its first block) against MB rows of x (P planes) into acc.
// Two planes: the xh products in ai, the xl ones in al, joined as (ai << 8) + al once per
// block (exact in int32 for codes up to 31 and scales up to 63: 32 * 31 * 63 * (127 * 256 +
// 128) < 2.05e9; so not Q6_K).
// kVnni: each vpmaddwd + vpaddd into a lane sum is one VEX vpdpwssd (madd_add); two sums per
// plane (even and odd chunks) halve the chain of dependent vpdpwssd. Same int32 lanes either
// way.
template <GgmlKind kKind, int MB, int P, bool kVnni>
inline void kq_x8_block(const uint8_t* row, int64_t b, int64_t ahead, const float* x, int64_t ldx,
                        __m256 (&acc)[MB]) {
  using L = GgmlLayout<kKind>;
  using S = KScales<kKind>;
  const uint8_t* p = row + b * L::kBytes;
  for (int off = 0; off < L::kBytes; off += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(p) + ahead + off, _MM_HINT_T0);
  }
  __m128i sc, mn = _mm_setzero_si128();
  S::get(p, &sc, &mn);
  const __m256i sc2 = _mm256_set_m128i(sc, sc);
  using XL = XLayout<P>;
  static_assert(P == 1 || (!S::kSignedCodes && GgmlLayout<kKind>::kMaxU <= 31));
  const int8_t* xg[MB];
  __m256i ai[MB], al[MB], ai2[MB][2], al2[MB][2];
  for (int i = 0; i < MB; ++i) {
    xg[i] = reinterpret_cast<const int8_t*>(x + i * ldx + b * XL::kGroupFloats);
    ai2[i][0] = ai2[i][1] = al2[i][0] = al2[i][1] = _mm256_setzero_si256();
  }
  auto chunk = [&]<int c>() {
    const __m256i s = chunk_scales<S::kSigned, c>(sc2);
    if constexpr (S::kSignedCodes) {
      const __m256i w = iq4_values_i8(p + 8 + 16 * c);
      const __m256i aw = _mm256_abs_epi8(w);
      for (int i = 0; i < MB; ++i) {
        const __m256i pairs = signed_pairs(aw, w, load32(xg[i] + 32 * c));
        ai2[i][c & 1] = madd_add<kVnni>(ai2[i][c & 1], pairs, s);
      }
    } else {
      const __m256i u = ggml_chunk_u8<kKind>(p, c);
      for (int i = 0; i < MB; ++i) {
        const __m256i pairs = _mm256_maddubs_epi16(u, load32(xg[i] + 32 * c));
        ai2[i][c & 1] = madd_add<kVnni>(ai2[i][c & 1], pairs, s);
        if constexpr (P == 2) {
          const __m256i lo = _mm256_maddubs_epi16(u, load32(xg[i] + 256 + 32 * c));
          al2[i][c & 1] = madd_add<kVnni>(al2[i][c & 1], lo, s);
        }
      }
    }
  };
  [&]<int... c>(std::integer_sequence<int, c...>) {
    (chunk.template operator()<c>(), ...);
  }(std::make_integer_sequence<int, 8>{});
  for (int i = 0; i < MB; ++i) {
    ai[i] = _mm256_add_epi32(ai2[i][0], ai2[i][1]);
    al[i] = _mm256_add_epi32(al2[i][0], al2[i][1]);
  }
  const __m256 d = f16_broadcast(p + S::kD);
  const __m256i sc16 = widen16<S::kSigned>(sc);
  const __m256i mn16 = widen16<false>(mn);
  for (int i = 0; i < MB; ++i) {
    const __m256i xs = load32(xg[i] + XL::kSumBytes);  // the 16 sums of x8 (of xh)
    // sc . sums and mn . sums (two planes: of xh, times 256, plus of xl).
    auto dot16 = [&](__m256i v) {
      __m256i t = _mm256_madd_epi16(v, xs);
      if constexpr (P == 2) {
        t = _mm256_add_epi32(_mm256_slli_epi32(t, 8),
                             _mm256_madd_epi16(v, load32(xg[i] + XL::kSumBytes + 32)));
      }
      return t;
    };
    if constexpr (P == 2) ai[i] = _mm256_add_epi32(_mm256_slli_epi32(ai[i], 8), al[i]);
    if constexpr (S::kOff != 0) {  // w = d sc (u - off): minus off sc . sums
      static_assert(S::kOff == 32 || S::kOff == 4);
      ai[i] = _mm256_sub_epi32(ai[i], _mm256_slli_epi32(dot16(sc16), S::kOff == 32 ? 5 : 2));
    }
    const __m256 s = _mm256_broadcast_ss(reinterpret_cast<const float*>(xg[i]) + XL::kScale);
    acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ai[i]), _mm256_mul_ps(d, s), acc[i]);
    if constexpr (S::kMins) {  // minus dmin s (mn . sums)
      const __m256 dm = _mm256_mul_ps(f16_broadcast(p + S::kDmin), s);
      acc[i] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(dot16(mn16)), dm, acc[i]);
    }
  }
}

// One row of x: the R rows read together, block b of each in turn (the streams of
// gemm_decode_walk.h interleaved, as the x16 Q4_0 / Q8_0 kernels read them: one row after
// another a Zen 3 core streams at ~0.7 of its read bandwidth). More rows of x: the R rows one
// after another, up to 4 rows of x per pass.
template <GgmlKind kKind, int MB, int P, bool kVnni>
void dot_kq_x8_mb(const uint8_t* const* rows, int64_t k, const float* x, int64_t ldx,
                  float* out) {
  const int64_t nb = k / 256;
  const int64_t ahead = prefetch_ahead(nb * GgmlLayout<kKind>::kBytes);
  if constexpr (MB == 1) {
    __m256 acc[kRows][1];
    for (int r = 0; r < kRows; ++r) acc[r][0] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      for (int r = 0; r < kRows; ++r) {
        kq_x8_block<kKind, 1, P, kVnni>(rows[r], b, ahead, x, ldx, acc[r]);
      }
    }
    for (int r = 0; r < kRows; ++r) out[r] = hsum(acc[r][0]);
  } else {
    for (int r = 0; r < kRows; ++r) {
      __m256 acc[MB];
      for (int i = 0; i < MB; ++i) acc[i] = _mm256_setzero_ps();
      for (int64_t b = 0; b < nb; ++b) {
        kq_x8_block<kKind, MB, P, kVnni>(rows[r], b, ahead, x, ldx, acc);
      }
      for (int i = 0; i < MB; ++i) out[i * kRows + r] = hsum(acc[i]);
    }
  }
}

template <GgmlKind kKind, int P, bool V>
constexpr IntDotFns kPlanesFns = {dot_kq_x8_mb<kKind, 1, P, V>, dot_kq_x8_mb<kKind, 2, P, V>,
                                  dot_kq_x8_mb<kKind, 3, P, V>, dot_kq_x8_mb<kKind, 4, P, V>};

template <GgmlKind kKind, int P>
GgmlDotTable planes_table() {
  using L = ByLevel<kPlanesFns<kKind, P, false>, kPlanesFns<kKind, P, true>>;
  GgmlDotTable t{kRows, kMaxM, L::dot, true, x_floats<P>, prep_x<P>, P == 1};
  t.resolve = L::resolve;
  return t;
}

}  // namespace

void set_x8_kernels_avx2(GgmlKernels& t) {
  auto set = [&]<GgmlKind kKind>(GgmlType type) {
    t.dot_x8[static_cast<int>(type)] = planes_table<kKind, 1>();
  };
  set.template operator()<GgmlKind::kQ2_K>(GgmlType::kQ2_K);
  set.template operator()<GgmlKind::kQ3_K>(GgmlType::kQ3_K);
  set.template operator()<GgmlKind::kQ4_K>(GgmlType::kQ4_K);
  set.template operator()<GgmlKind::kQ5_K>(GgmlType::kQ5_K);
  set.template operator()<GgmlKind::kQ6_K>(GgmlType::kQ6_K);
  set.template operator()<GgmlKind::kIQ4_XS>(GgmlType::kIQ4_XS);
}

GgmlDotTable ggml_x16_planes_dot_avx2(GgmlType type) {
  // Measured against the x16 kernels (Zen 3, 1 thread, bench_gemm_ggml --m 1..4, alternating):
  // Q2_K 1.1-1.5x (m = 1), 1.2-1.55x (m = 2..4); Q3_K 1.0-1.12x at m = 1 but 0.88-0.97x at m = 3
  // and 4, Q4_K 0.67-0.9x, Q5_K 0.72-0.93x (their x16 kernels need fewer operations than two
  // byte planes: no min part per element), so only Q2_K takes it.
  if (type != GgmlType::kQ2_K) return GgmlDotTable{};
  return planes_table<GgmlKind::kQ2_K, 2>();
}

}  // namespace sampan::cpu::gemm_detail
